"""`grad_scale` on two data-parallel ranks (gloo, spawned processes) x two micro-batches (docs/method.md).

Each rank (a separate Python process; gloo) computes its micro-batches' losses with the plug-in's `micro_batch_loss`, sums their gradients
(gradient accumulation) and all-reduces the mean over ranks, as FSDP does. The reference is one process
computing the core loss of the whole global batch at once (`exgrpo_policy_loss`, one rank). `whole_batch`
must give that gradient; `as_released` half of it (1/dp, the release's scale), so the clip at 1.0 and the
skip bound see a different norm. On one rank the two values agree.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from exgrpo.core.loss import exgrpo_policy_loss
from exgrpo.core.loss_inputs import DataParallel, LossInputs
from exgrpo.core.variants import config_for
from exgrpo.verl_plugin.loss import micro_batch_loss

B, T, NORM = 8, 6, 16
MICRO = (
    (0, 1),
    (2, 3),
)  # per rank: two micro-batches of the rank's rows (uneven on purpose: 1 and 1..3 rows)


def _batch() -> dict[str, torch.Tensor]:
    """A global batch of 8 sequences; logp is a function of the parameters `theta` [B, T]."""
    g = torch.Generator().manual_seed(7)
    lens = torch.tensor([6, 4, 5, 3, 2, 6, 1, 4])
    mask = torch.arange(T)[None, :] < lens[:, None]
    return {
        "theta": torch.randn(B, T, generator=g),
        "mask": mask,
        "old": torch.where(mask, -torch.rand(B, T, generator=g) * 2, 0.0),
        "behav": torch.where(mask, -torch.rand(B, T, generator=g) * 2, 0.0),
        "adv": torch.tensor([1.5, -0.5, 0.75, -1.25, 2.0, -1.0, 0.5, -2.0]),
        "is_replay": torch.tensor([False, True, False, False, True, False, False, False]),
    }


def _logp_entropy(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, T] log-probs in (-inf, 0) and entropies, both differentiable in theta."""
    logp = torch.nn.functional.logsigmoid(theta) * 3
    return logp, torch.sigmoid(theta) * 2


def _cfg(grad_scale: str):
    return config_for("exgrpo", grad_scale=grad_scale, entropy_coef=0.01)


def _reference_grad() -> torch.Tensor:
    """d(core loss of the whole batch)/d theta, one process, one call."""
    d = _batch()
    theta = d["theta"].clone().requires_grad_(True)
    logp, ent = _logp_entropy(theta)
    inputs = LossInputs(
        logp=logp,
        old_logp=d["old"],
        advantages=d["adv"],
        response_mask=d["mask"],
        is_replay=d["is_replay"],
        behaviour_logp=d["behav"],
        token_entropy=ent,
    )
    loss, _ = exgrpo_policy_loss(inputs, cfg=_cfg("whole_batch"), replay_active=True, norm_const=NORM)
    loss.backward()
    return theta.grad


def _rank_grad(rank: int, world: int, grad_scale: str) -> torch.Tensor:
    """This rank's rows, two micro-batches, gradients summed; then the mean over ranks (FSDP's average)."""
    d = _batch()
    rows = torch.arange(B).reshape(world, -1)[rank]
    theta = d["theta"].clone().requires_grad_(True)
    dp = DataParallel(dp_size=world, batch_num_tokens=int(d["mask"].sum()), global_batch_size=B)
    groups = [rows[:1], rows[1:]] if world > 1 else [rows[:3], rows[3:]]
    for idx in groups:
        logp, ent = _logp_entropy(theta[idx])
        inputs = LossInputs(
            logp=logp,
            old_logp=d["old"][idx],
            advantages=d["adv"][idx],
            response_mask=d["mask"][idx],
            is_replay=d["is_replay"][idx],
            behaviour_logp=d["behav"][idx],
            token_entropy=ent,
        )
        loss, _ = micro_batch_loss(inputs, cfg=_cfg(grad_scale), replay_active=True, norm_const=NORM, dp=dp)
        loss.backward()
    grad = theta.grad.clone()
    if world > 1:
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        grad /= world
    return grad


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for grad_scale in ("whole_batch", "as_released"):
            grad = _rank_grad(rank, world, grad_scale)
            if rank == 0:
                torch.save(grad, os.path.join(out_dir, f"{grad_scale}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_grads(tmp_path_factory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("ranks")
    # two processes started fresh (this file as a script: pytest's importlib mode leaves it unimportable by name)
    procs = [
        subprocess.Popen([sys.executable, __file__, str(rank), "2", str(out / "init"), str(out)])
        for rank in range(2)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    return {name: torch.load(out / f"{name}.pt") for name in ("whole_batch", "as_released")}


def test_whole_batch_on_two_ranks_is_the_single_process_gradient(two_rank_grads):
    ref = _reference_grad()
    assert ref.norm() > 0
    torch.testing.assert_close(two_rank_grads["whole_batch"], ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(two_rank_grads["whole_batch"].norm(), ref.norm(), rtol=1e-5, atol=0)


def test_as_released_on_two_ranks_is_half_of_it(two_rank_grads):
    ref = _reference_grad()
    torch.testing.assert_close(two_rank_grads["as_released"], ref / 2, rtol=1e-5, atol=1e-7)
    norm, ref_norm = float(two_rank_grads["as_released"].norm()), float(ref.norm())
    assert norm == pytest.approx(ref_norm / 2, rel=1e-5)
    # so clipping differs: with the bound between the two norms, one is clipped and the other is not
    bound = 0.75 * ref_norm
    clipped = {}
    for name, grad in two_rank_grads.items():
        param = torch.nn.Parameter(torch.zeros_like(grad))
        param.grad = grad.clone()
        torch.nn.utils.clip_grad_norm_([param], bound)
        clipped[name] = param.grad
    assert float(clipped["whole_batch"].norm()) == pytest.approx(bound, rel=1e-5)
    torch.testing.assert_close(clipped["as_released"], two_rank_grads["as_released"])


def test_on_one_rank_the_two_values_agree():
    ref = _reference_grad()
    for grad_scale in ("whole_batch", "as_released"):
        torch.testing.assert_close(_rank_grad(0, 1, grad_scale), ref, rtol=1e-5, atol=1e-7)


def test_grad_scale_is_a_validated_switch():
    from exgrpo.core.config import ConfigError

    with pytest.raises(ConfigError, match="grad_scale"):
        config_for("exgrpo", grad_scale="per_rank")
    assert config_for("exgrpo").grad_scale == "whole_batch"


if __name__ == "__main__":  # one rank of the fixture's two-process run
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
