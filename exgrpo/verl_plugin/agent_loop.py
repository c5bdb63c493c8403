"""The agent loop of experiential prompts: session K-1 returns the stored trajectory (paper Eq. 4's o*).

verl.md §11 route A1. An experiential prompt row carries the chosen trajectory (`exgrpo_replay_ids`,
`exgrpo_replay_logp`, written by `batch.prompt_rows`) and `agent_name = exgrpo_replay`. For sessions
0..K-2 this loop is verl's `SingleTurnAgentLoop` unchanged (fresh rollouts). For session K-1 it runs the
same single-turn code against a stand-in server that returns the stored token ids and behaviour log-probs
instead of generating, so prompt tokenisation, truncation and output schema are exactly those of a fresh
row. All K sessions share the prompt's uid, hence one GRPO group (1 replayed + K-1 fresh).

Why not route A2 (the driver writing the replayed row into the TransferQueue itself): the driver would have
to re-create the agent loop's chat-template tokenisation, position ids, tags and reward fields, and race the
replay buffer's completion check; here verl's own code produces all of them.

Departure, stated up front: the replayed row's reward is set to 1.0 without re-grading (stored trajectories
are correct by construction), as `CPUTrainer._assemble` does and as released.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.workers.rollout.replica import TokenOutput

from exgrpo.verl_plugin.batch import REPLAY_AGENT, REPLAY_IDS, REPLAY_LOGP, replay_session


class StoredTrajectoryServer:
    """Stands in for the rollout server for one call: returns a stored response instead of sampling."""

    def __init__(self, token_ids: list[int], log_probs: list[float], weights_version: int):
        self.token_ids, self.log_probs, self.weights_version = token_ids, log_probs, weights_version

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        # min/max_global_steps feed verl's staleness metrics; the sync trainer never evicts on them.
        version = self.weights_version
        return TokenOutput(token_ids=list(self.token_ids), log_probs=list(self.log_probs), stop_reason="completed",
                           extra_fields={"global_steps": version, "min_global_steps": version,
                                         "max_global_steps": version})


@register(REPLAY_AGENT)
class ReplayAgentLoop(SingleTurnAgentLoop):
    """SingleTurnAgentLoop whose last session replays the row's stored trajectory."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        ids = list(kwargs.get(REPLAY_IDS) or [])
        session = kwargs.get("session_id")
        if not ids or session != replay_session(int(self.rollout_config.n)):
            return await super().run(sampling_params, **kwargs)
        logp = [float(x) for x in kwargs.get(REPLAY_LOGP) or []]
        if len(logp) != len(ids):
            raise ValueError(f"replay row: {len(ids)} stored tokens but {len(logp)} log-probs")
        if len(ids) > self.response_length:
            raise ValueError(f"stored trajectory has {len(ids)} tokens > rollout.response_length "
                             f"{self.response_length}: it would be truncated")
        version = int(kwargs.get("global_steps", 1)) - 1  # the sync trainer generates step s with weights s-1
        live_server, self.server_manager = self.server_manager, StoredTrajectoryServer(ids, logp, version)
        try:
            output = await super().run(sampling_params, **kwargs)
        finally:
            self.server_manager = live_server
        output.reward_score = 1.0
        output.extra_fields["exgrpo_replayed"] = True
        return output


__all__ = ["ReplayAgentLoop", "StoredTrajectoryServer"]
