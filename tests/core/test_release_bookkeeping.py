"""The release's bookkeeping behind switches: each switch's released setting reproduces the released code.

The expected values come from reading the released ExGRPO code (ElliottYan/LUFFY, folder ExGRPO/):
- stale bucket: `collect_experience_entries` skips groups with k outside (lbound, rbound] *before* the bucket
  update, so a stored question that later scores 0/K keeps its old bucket; the collate function counts every
  question of the pool towards n_exp;
- epoch pruning: the fit loop re-filters the data at each epoch only `if len(dataset) > batch + 20`, the size
  before filtering;
- n_exp: `int(batch * ratio)`;
- the loss: `ratio = exp(log_prob - old_log_prob)` with no clamp.
`ReleasedBookkeeping` restates those rules in a few lines as an oracle for random runs.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.experience import ExperienceManager, Trajectory
from exgrpo.core.loss import exgrpo_policy_loss
from exgrpo.core.loss_inputs import LossInputs
from exgrpo.core.sampler import n_replay

K = 8
RELEASED = {"keep_stale_bucket": True, "retire_data_guard": "before", "n_exp_rounding": "int"}
_ids = itertools.count(1)


def cfg(**overrides) -> ExGRPOConfig:
    return ExGRPOConfig.from_dict({"delayed_start": False, **overrides})


def group(mgr: ExperienceManager, qid: str, k: int, step: int, *, replayed: bool = False) -> None:
    n = K - 1 if replayed else K
    fresh_k = k - 1 if replayed else k
    trajs = [Trajectory(np.array([next(_ids), 1, 2]), np.full(3, -0.5, np.float32), step) for _ in range(n)]
    rewards = [1.0] * fresh_k + [0.0] * (n - fresh_k)
    mgr.record_group(
        qid, np.array(([1.0] if replayed else []) + rewards), trajs, replayed=replayed, step=step
    )


# ------------------------------------------------------------------------------------------ hand-made cases
@pytest.mark.parametrize("keep_stale, buckets, plan", [(True, {3: ["q"]}, ["q"]), (False, {}, [])])
def test_a_stored_question_scoring_zero_keeps_its_bucket_only_as_released(keep_stale, buckets, plan):
    mgr = ExperienceManager(cfg(keep_stale_bucket=keep_stale), seed=0)
    group(mgr, "q", 3, 1)
    mgr.end_step(1, 0.5)
    group(mgr, "q", 0, 2)  # 0/8: the release skips the bucket update
    m = mgr.end_step(2, 0.5)
    assert mgr.latest_key("q") == 0 and mgr.buffer.count("q") == 3  # stored either way
    assert mgr.buckets() == buckets and mgr.plan_replay(16) == plan
    assert m["exp/eligible_questions"] == len(plan) and m["exp/buffer_bucket_3"] == len(plan)
    # scoring 3 again: back in bucket 3 in both; as released it never moved, so it keeps its place
    group(mgr, "p", 3, 3)
    group(mgr, "q", 3, 3)
    mgr.end_step(3, 0.5)
    assert mgr.buckets() == {3: ["q", "p"] if keep_stale else ["p", "q"]}
    # solving it retires it from the buffer and the buckets in both
    group(mgr, "q", 8, 4)
    mgr.end_step(4, 0.5)
    assert mgr.buckets() == {3: ["p"]} and "q" not in mgr.buffer


def _ten_stored_then_six_at_zero(mgr: ExperienceManager) -> ExperienceManager:
    """Step 1 stores q0..q9 (2/8 each); in step 2, q0..q5 score 0/8."""
    for i in range(10):
        group(mgr, f"q{i}", 2, 1)
    mgr.end_step(1, 0.5)
    for i in range(6):
        group(mgr, f"q{i}", 0, 2)
    mgr.end_step(2, 0.5)
    return mgr


def test_stale_questions_count_towards_n_exp():
    mgr = _ten_stored_then_six_at_zero(ExperienceManager(cfg(keep_stale_bucket=True), seed=0))
    assert len(mgr.plan_replay(16)) == 8  # min(10 pooled, ⌊0.5·16⌋)
    default = _ten_stored_then_six_at_zero(ExperienceManager(cfg(), seed=0))
    assert sorted(default.plan_replay(16)) == ["q6", "q7", "q8", "q9"]  # only the 4 with an eligible latest k


@pytest.mark.parametrize("guard, kept", [("before", 10), ("after", 200)])
def test_epoch_pruning_guard_200_questions_190_retired_b16(guard, kept):
    mgr = ExperienceManager(cfg(retire_data_guard=guard), seed=0)
    data = [f"d{i}" for i in range(200)]
    for q in data[:190]:
        group(mgr, q, 8, 1)
    mgr.end_step(1, 0.9)
    pruned = mgr.prune_training_data(data, 16)
    assert len(pruned) == kept and (guard == "after" or pruned == data[190:])
    # 46 questions (> 16 + 20) of which 10 unretired: the release prunes to 10, the project keeps 46
    assert len(mgr.prune_training_data(data[154:], 16)) == (10 if guard == "before" else 46)
    assert (
        mgr.prune_training_data(data[164:], 16) == data[164:]
    )  # 36 is not more than 16 + 20: neither prunes


@pytest.mark.parametrize(
    "rho, b, floor_value, int_value",
    [(0.58, 50, 29, 28), (0.29, 100, 29, 28), (0.5, 128, 64, 64), (0.25, 128, 32, 32)],
)
def test_n_exp_int_cast_as_released(rho, b, floor_value, int_value):
    assert n_replay(rho, b, 10_000, rounding="floor") == floor_value
    assert n_replay(rho, b, 10_000, rounding="int") == int_value
    for rounding, expected in (("floor", floor_value), ("int", int_value)):
        mgr = ExperienceManager(cfg(rho=rho, n_exp_rounding=rounding), seed=0)
        for i in range(100):
            group(mgr, f"q{i}", 4, 1)
        mgr.end_step(1, 0.5)
        assert len(mgr.plan_replay(b)) == min(100, expected)


def test_n_exp_roundings_against_exact_arithmetic_on_a_grid():
    differ = []
    for b in range(1, 513, 7):
        for i in range(1000):
            rho = i / 1000
            exact = math.floor(Fraction(i, 1000) * b)  # the paper's ⌊ρB⌋ of the decimal ρ
            assert n_replay(rho, b, 10**6, rounding="floor") == exact
            released = int(b * rho)  # the release's expression, evaluated in floats
            assert n_replay(rho, b, 10**6, rounding="int") == released
            differ += [(b, rho, released - exact)] if released != exact else []
    assert (50, 0.58, -1) in differ and {d for _, _, d in differ} == {-1}  # float error only ever loses one


def test_bad_rounding_is_refused():
    with pytest.raises(ValueError, match="n_exp_rounding"):
        cfg(n_exp_rounding="round")
    with pytest.raises(ValueError, match="rounding"):
        n_replay(0.5, 8, 8, rounding="round")


# ------------------------------------------------------------------------------------------ the clamp
def _one_token(log_ratio: float, clamp: float, *, replay: bool):
    x = torch.tensor([[0.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-log_ratio]], dtype=torch.float64)
    c = ExGRPOConfig(entropy_coef=0.0, log_ratio_clamp=clamp).validate()
    inputs = LossInputs(
        logp=x,
        old_logp=old,
        advantages=torch.tensor([0.5], dtype=torch.float64),
        response_mask=torch.ones(1, 1, dtype=torch.bool),
        is_replay=torch.tensor([replay]),
        behaviour_logp=old if replay else None,
    )
    loss, _ = exgrpo_policy_loss(inputs, cfg=c, replay_active=True, norm_const=1)
    loss.backward()
    return loss.item(), x.grad.item()


def test_log_ratio_25_unclamped_as_released_and_clamped_by_default():
    # released (mix_core_alg): on-policy tokens unclipped after the switch, −A·e^r, gradient −A·e^r
    assert _one_token(25.0, 0.0, replay=False) == pytest.approx((-0.5 * math.exp(25), -0.5 * math.exp(25)))
    loss, grad = _one_token(25.0, 20.0, replay=False)
    assert loss == pytest.approx(-0.5 * math.exp(20)) and grad == 0.0
    # replayed tokens: −A·w/(w+β), gradient −A·wβ/(w+β)² at w = e^25 (released p_div_p_0.1, no clamp)
    w = math.exp(25)
    assert _one_token(25.0, 0.0, replay=True) == pytest.approx(
        (-0.5 * w / (w + 0.1), -0.5 * w * 0.1 / (w + 0.1) ** 2)
    )
    assert _one_token(25.0, 20.0, replay=True)[1] == 0.0
    # inside ±20 the switch changes nothing
    assert _one_token(3.0, 0.0, replay=False) == _one_token(3.0, 20.0, replay=False)


def test_unclamped_padding_cannot_make_nan():
    logp = torch.tensor([[-1.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -200.0]])  # the padding slot's log-ratio 200 would overflow exp in float32
    mask = torch.tensor([[True, False]])
    c = ExGRPOConfig(entropy_coef=0.0, log_ratio_clamp=0.0, kl_coef=0.1).validate()
    inputs = LossInputs(
        logp=logp,
        old_logp=old,
        advantages=torch.tensor([1.0]),
        response_mask=mask,
        is_replay=torch.tensor([False]),
        ref_logp=old,
    )
    loss, _ = exgrpo_policy_loss(inputs, cfg=c, replay_active=True, norm_const=1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0.0
    r = 0.2  # the valid token: −A·e^r plus 0.1 · KL k3 at ref − logp = −0.2
    assert loss.item() == pytest.approx(-math.exp(r) + 0.1 * (math.exp(-r) + r - 1), rel=1e-6)


def test_clamp_must_be_non_negative():
    with pytest.raises(ValueError, match="log_ratio_clamp"):
        cfg(log_ratio_clamp=-1.0)


# ------------------------------------------------------------------------------------------ oracle runs
class ReleasedBookkeeping:
    """The release's pool, buckets, skip set and data pruning, restated (see the module docstring)."""

    def __init__(self, rho: float, lbound: int = 0, rbound: int = K - 1):
        self.rho, self.lbound, self.rbound = rho, lbound, rbound
        self.pool: dict[str, list[tuple[int, ...]]] = {}
        self.bucket: dict[int, list[str]] = {}
        self.uid_to_bucket: dict[str, int] = {}
        self.skip: set[str] = set()

    def n_exp(self, batch: int) -> int:
        valid = [q for q in self.pool if q not in self.skip and self.pool[q]]
        return min(len(valid), int(batch * self.rho))

    def buckets(self) -> dict[int, list[str]]:
        return {k: v for k, v in sorted(self.bucket.items()) if v}

    def step(self, groups: list[tuple[str, list[float], list[tuple[int, ...]]]]) -> None:
        """groups: (qid, the K rewards as trained, the K responses as token tuples); replay is always active."""
        for qid, rewards, _ in groups:
            if all(r == 1.0 for r in rewards):
                self.skip.add(qid)
        for qid, rewards, responses in groups:
            k = int(sum(rewards))
            if k == K or k > self.rbound or k <= self.lbound:
                continue  # before the bucket update: the bucket stays as it was
            old = self.uid_to_bucket.get(qid)
            if old is not None and old != k and qid in self.bucket[old]:
                self.bucket[old].remove(qid)
            if qid not in self.bucket.setdefault(k, []):
                self.bucket[k].append(qid)
            self.uid_to_bucket[qid] = k
            for r, resp in zip(rewards, responses):
                if r == 1.0 and resp not in self.pool.setdefault(qid, []):
                    self.pool[qid].append(resp)
        for qid in [q for q in self.pool if q in self.skip]:
            del self.pool[qid]
            old = self.uid_to_bucket.pop(qid, None)
            if old is not None and qid in self.bucket[old]:
                self.bucket[old].remove(qid)

    def prune(self, current: list[str], all_data: list[str], batch: int) -> list[str]:
        return [q for q in all_data if q not in self.skip] if len(current) > batch + 20 else current


def _run(overrides: dict, seed: int, steps: int = 30, batch: int = 24):
    """Drive the manager and the oracle with the same random groups; yield both views each step."""
    rng = np.random.default_rng(seed)
    mgr = ExperienceManager(cfg(rho=0.58, **overrides), seed=seed)
    oracle = ReleasedBookkeeping(rho=0.58)
    all_data = [f"q{i}" for i in range(60)]
    data_mgr, data_oracle = list(all_data), list(all_data)
    for step in range(1, steps + 1):
        plan = mgr.plan_replay(batch)
        yield len(plan), oracle.n_exp(batch), mgr.buckets(), oracle.buckets(), data_mgr, data_oracle
        assert set(plan) <= set(oracle.pool)
        groups = []
        fresh = [q for q in rng.permutation(data_mgr).tolist() if q not in plan][: batch - len(plan)]
        for qid in plan + fresh:
            replayed = qid in plan
            p = rng.choice([0.0, 0.15, 0.5, 0.85, 1.0])  # many 0/8 and 8/8 groups
            rewards = (rng.random(K) < p).astype(float).tolist()
            responses = [(int(rng.integers(0, 6)), int(rng.integers(0, 6))) for _ in range(K)]
            if replayed:
                rewards[0], responses[0] = 1.0, oracle.pool[qid][0]
            fresh_trajs = [
                Trajectory(np.array(r), np.zeros(2, np.float32), step) for r in responses[int(replayed) :]
            ]
            mgr.record_group(qid, np.array(rewards), fresh_trajs, replayed=replayed, step=step)
            groups.append((qid, rewards, responses))
        mgr.end_step(step, 0.5)
        oracle.step(groups)
        if step % 5 == 0:  # an epoch boundary
            data_mgr = mgr.prune_training_data(data_mgr, 16)
            data_oracle = oracle.prune(data_oracle, all_data, 16)


@pytest.mark.parametrize("seed", range(6))
def test_released_switches_reproduce_the_release_on_random_runs(seed):
    seen = 0
    for n_mgr, n_oracle, b_mgr, b_oracle, d_mgr, d_oracle in _run(RELEASED, seed):
        assert (n_mgr, b_mgr, d_mgr) == (n_oracle, b_oracle, d_oracle)
        seen += n_mgr
    assert seen > 0


def test_the_oracle_tells_the_defaults_apart():
    """The project's defaults leave the release on these runs (so the comparison above can fail)."""
    diverged = set()
    for seed in range(6):
        for n_mgr, n_oracle, b_mgr, b_oracle, d_mgr, d_oracle in _run({}, seed):
            if b_mgr != b_oracle or n_mgr != n_oracle:
                diverged.add("buckets")
            if d_mgr != d_oracle:
                diverged.add("pruning")
            if b_mgr != b_oracle or d_mgr != d_oracle:
                break
    assert diverged == {"buckets", "pruning"}


def test_stale_buckets_survive_save_and_load_and_the_switch_must_match(tmp_path):
    from exgrpo.core.config import ConfigError
    from exgrpo.core.experience import STATE_FILE
    from exgrpo.records.io import read_json, write_json

    c = cfg(**RELEASED)
    mgr = ExperienceManager(c, seed=0)
    group(mgr, "q", 3, 1)
    group(mgr, "p", 5, 1)
    mgr.end_step(1, 0.5)
    group(mgr, "q", 0, 2)
    mgr.end_step(2, 0.5)
    mgr.save(tmp_path)
    back = ExperienceManager.load(tmp_path, c)
    assert back.buckets() == mgr.buckets() == {3: ["q"], 5: ["p"]} and back.latest_key("q") == 0
    assert back.plan_replay(16) == mgr.plan_replay(16)
    with pytest.raises(ConfigError, match="keep_stale_bucket"):
        ExperienceManager.load(tmp_path, cfg())
    # a state saved before the switch existed reads as the default, and its stale bucket is then corrupt
    state = read_json(tmp_path / STATE_FILE)
    del state["config"]["keep_stale_bucket"]
    write_json(tmp_path / STATE_FILE, state)
    with pytest.raises(ValueError, match="buckets disagree"):
        ExperienceManager.load(tmp_path, cfg())
