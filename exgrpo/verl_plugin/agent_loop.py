"""The agent loop of experiential prompts: session K-1 returns the stored trajectory (paper Eq. 4's o*).

An experiential prompt row has `agent_name = exgrpo_replay`; the driver put its chosen trajectory into the
TransferQueue partition `exgrpo_replay` under the prompt's uid (`batch.replay_payload`). For sessions
0..K-2 this loop is verl's `SingleTurnAgentLoop` unchanged (fresh rollouts). For session K-1 it fetches
the stored token ids and behaviour log-probs and runs the same single-turn code against a stand-in server
that returns them instead of generating, so prompt tokenisation, truncation and output schema are exactly
those of a fresh row. All K sessions share the prompt's uid, hence one GRPO group (1 replayed + K-1 fresh).

Why the trajectory is not a prompt column: verl copies every prompt column into each of the K trajectories
of the group (`AgentLoopWorkerTQ._agent_loop_postprocess`), into every reward request, and workers fetch
all fields of a trajectory on every forward; fetched by the replayed session only, it travels once.

Why not have the driver write the replayed row into the TransferQueue itself: it would have to re-create
the agent loop's chat-template tokenisation, position ids, tags and reward fields, and race the replay
buffer's completion check; here verl's own code produces all of them.

The loop is registered with verl's `@register` when the plug-in is imported (VERL_USE_EXTERNAL_MODULES,
set for every Ray worker by the plug-in's config), so no config file path has to exist on compute nodes.

Failed sessions are reported (`ReportingAgentLoop`, the base of both loops; fresh prompts use it as
`exgrpo_fresh`, verl's single-turn loop otherwise unchanged): a session that raises puts its error into the
TransferQueue partition `exgrpo_errors` before verl sees the exception, so the driver's failure budget
(failures.py) can name the engine's last error. The drills' fault injection (EXGRPO_VERL_FAIL_SESSIONS) raises
there, in place of the engine.

Departure, stated up front: under the binary grader the replayed row's reward is set to 1.0 without
re-grading (stored trajectories are correct by construction), as the CPU trainer does and as released. Under a
served reward model (`reward_kind: reward_model`) a stored trajectory was above its group's mean, not 1, so the
row is left unscored and verl's reward loop scores it as any other, as the CPU trainer re-scores its
continuous reward.
"""

from __future__ import annotations

from typing import Any

import transfer_queue as tq
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.workers.rollout.replica import TokenOutput

from exgrpo.core import step as core_step
from exgrpo.verl_plugin import batch as vb
from exgrpo.verl_plugin.failures import ERROR_PARTITION, FAIL_ENV, injected_failure
from exgrpo.verl_plugin.reward_serving import config_value

MAX_ERROR_CHARS = 600


class StoredTrajectoryServer:
    """Stands in for the rollout server for one call: returns a stored response instead of sampling."""

    def __init__(self, token_ids: list[int], log_probs: list[float], weights_version: int):
        self.token_ids, self.log_probs, self.weights_version = token_ids, log_probs, weights_version

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        # min/max_global_steps feed verl's staleness metrics; the sync trainer never evicts on them.
        version = self.weights_version
        return TokenOutput(
            token_ids=list(self.token_ids),
            log_probs=list(self.log_probs),
            stop_reason="completed",
            extra_fields={"global_steps": version, "min_global_steps": version, "max_global_steps": version},
        )


async def stored_trajectory(uid: str) -> tuple[list[int], list[float]]:
    """The chosen trajectory of experiential prompt `uid`, from the `exgrpo_replay` TransferQueue partition."""
    data = await tq.async_kv_batch_get(
        keys=[uid], partition_id=vb.REPLAY_PARTITION, select_fields=[vb.REPLAY_IDS, vb.REPLAY_LOGP]
    )
    ids = [int(x) for x in data[vb.REPLAY_IDS][0].tolist()]
    logp = [float(x) for x in data[vb.REPLAY_LOGP][0].tolist()]
    if not ids or len(logp) != len(ids):
        raise ValueError(f"replay prompt {uid}: {len(ids)} stored tokens but {len(logp)} log-probs")
    return ids, logp


@register(vb.FRESH_AGENT)
class ReportingAgentLoop(SingleTurnAgentLoop):
    """verl's SingleTurnAgentLoop that reports a failed session's error to the driver (module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        try:
            if injected_failure(str(kwargs.get("uid")), int(kwargs.get("session_id", 0))):
                raise RuntimeError(f"injected rollout failure ({FAIL_ENV})")
            return await self._run_session(sampling_params, **kwargs)
        except Exception as err:
            key = f"{kwargs.get('uid')}_{kwargs.get('session_id')}"
            text = f"{type(err).__name__}: {err}"[:MAX_ERROR_CHARS]
            await tq.async_kv_put(
                key=key,
                partition_id=ERROR_PARTITION,
                tag={"error": text, "step": int(kwargs.get("global_steps", 0))},
            )
            raise

    async def _run_session(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        return await super().run(sampling_params, **kwargs)


@register(vb.REPLAY_AGENT)
class ReplayAgentLoop(ReportingAgentLoop):
    """The reporting single-turn loop whose last session replays the prompt's stored trajectory."""

    server_manager: Any  # verl's attribute; declared since mypy reads verl as untyped (pyproject.toml)

    async def _run_session(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        if kwargs.get("session_id") != core_step.replayed_session(int(self.rollout_config.n)):
            return await super()._run_session(sampling_params, **kwargs)
        ids, logp = await stored_trajectory(str(kwargs["uid"]))
        if len(ids) > self.response_length:
            raise ValueError(
                f"stored trajectory has {len(ids)} tokens > rollout.response_length "
                f"{self.response_length}: it would be truncated"
            )
        version = int(kwargs.get("global_steps", 1)) - 1  # the sync trainer generates step s with weights s-1
        # verl declares server_manager an LLMServerClient; the session calls only its `generate`, which the
        # stand-in provides (duck-typed)
        live_server = self.server_manager
        self.server_manager = StoredTrajectoryServer(ids, logp, version)  # type: ignore[assignment]
        try:
            output = await super()._run_session(sampling_params, **kwargs)
        finally:
            self.server_manager = live_server
        if not config_value(self.config, "reward.reward_model.enable"):
            output.reward_score = 1.0  # verl's reward loop skips a row that already has a score
        output.extra_fields["exgrpo_replayed"] = True
        return output


__all__ = [
    "MAX_ERROR_CHARS",
    "ReplayAgentLoop",
    "ReportingAgentLoop",
    "StoredTrajectoryServer",
    "stored_trajectory",
]
