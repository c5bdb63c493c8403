"""The replay agent loop on verl's real classes: session K-1 returns the stored trajectory, the others generate;
its reward is preset only under the binary grader."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import exgrpo.verl_plugin.agent_loop as agent_loop_mod  # noqa: E402
from exgrpo.core import step as core_step  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from exgrpo.verl_plugin.agent_loop import ReplayAgentLoop  # noqa: E402
from tests.verl_plugin.batch_items import dataset_item, trajectory  # noqa: E402
from tests.verl_plugin.conftest import CHAT_WORDS, word_tokenizer  # noqa: E402

WORDS = [*CHAT_WORDS, "1+1", "?", "2", "a", "b", "c"]


class _Server:
    """A rollout server that 'samples' a fixed response and counts its calls."""

    def __init__(self):
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls += 1
        return TokenOutput(
            token_ids=[11, 12, 1],
            log_probs=[-0.1, -0.2, -0.3],
            extra_fields={"global_steps": 4, "min_global_steps": 4, "max_global_steps": 4},
        )


class _ReplayTQ:
    """The TransferQueue read the agent loop does, over entries put by `replay_payload`; counts the reads."""

    def __init__(self, keys, fields):
        self.rows = dict(zip(keys, fields))
        self.reads = []

    async def async_kv_batch_get(self, keys, partition_id, select_fields=None):
        assert partition_id == vb.REPLAY_PARTITION
        self.reads.extend(keys)
        return tu.list_of_dict_to_tensordict([{f: self.rows[k][f] for f in select_fields} for k in keys])


@pytest.mark.parametrize("served_reward_model", [False, True])
def test_replay_agent_loop_returns_the_stored_trajectory_for_the_last_session_only(
    monkeypatch, served_reward_model
):
    k = 4
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 32, "response_length": 8, "n": k}},
            "data": {},
            "reward": {"reward_model": {"enable": served_reward_model}},
        }
    )
    server = _Server()
    row = vb.prompt_rows([], [dataset_item("q7")])[0]
    fake = _ReplayTQ(*vb.replay_payload([row["uid"]], [trajectory([13, 14, 1], [-1.0, -2.0, -0.5])]))
    monkeypatch.setattr(agent_loop_mod, "tq", fake)
    row = {key: val for key, val in row.items() if key not in ("dummy_tensor", vb.AGENT_NAME)}

    async def run_all():
        outs = []
        for session in range(k):
            loop = ReplayAgentLoop(
                trainer_config=DictConfigWrap(cfg),
                server_manager=server,
                tokenizer=word_tokenizer(WORDS),
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(cfg.data),
                hf_model_type=None,
            )
            outs.append(await loop.run({"temperature": 1.0}, session_id=session, global_steps=5, **row))
        return outs

    outs = asyncio.run(run_all())
    assert server.calls == k - 1  # the replayed session never reaches the server
    assert fake.reads == [row["uid"]]  # the stored trajectory is read once, by the replayed session
    fresh, replay = outs[0], outs[core_step.replayed_session(k)]
    assert fresh.response_ids == [11, 12, 1] and fresh.reward_score is None
    assert replay.response_ids == [13, 14, 1] and replay.response_mask == [1, 1, 1]
    np.testing.assert_allclose(replay.response_logprobs, [-1.0, -2.0, -0.5])
    assert replay.extra_fields["exgrpo_replayed"] is True
    assert replay.prompt_ids == fresh.prompt_ids  # same tokenisation path as a fresh rollout
    assert replay.extra_fields["min_global_steps"] == 4  # step 5 is generated with weights of step 4
    d = replay.as_dict()  # what the TransferQueue receives
    if served_reward_model:  # left to verl's reward loop, which scores rows without a score
        assert replay.reward_score is None and "rm_scores" not in d
    else:  # binary: correct by construction, 1.0 on the last response token (released)
        assert replay.reward_score == 1.0 and d["rm_scores"].tolist() == [0.0, 0.0, 1.0]
    assert torch.allclose(d["rollout_log_probs"], torch.tensor([-1.0, -2.0, -0.5]))
