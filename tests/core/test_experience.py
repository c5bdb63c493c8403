"""ExperienceManager: eligibility, retirement, delayed start, k bookkeeping, review, pruning, save/load."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.experience import ARRAYS_FILE, STATE_FILE, ExperienceManager, Trajectory

K = 8
_ids = itertools.count(1)


def cfg(**overrides) -> ExGRPOConfig:
    return ExGRPOConfig.from_dict({"delayed_start": False, **overrides})


def trajs(n: int, step: int = 1) -> list[Trajectory]:
    """n distinct trajectories (unique token ids)."""
    out = []
    for _ in range(n):
        i = next(_ids)
        out.append(Trajectory(np.array([i, i + 1, i % 7], np.int64), np.full(3, -0.5, np.float32), step))
    return out


def rewards(k: int, n: int = K) -> np.ndarray:
    return np.array([1.0] * k + [0.0] * (n - k))


def record(
    mgr: ExperienceManager, qid: str, k: int, step: int, *, replayed: bool = False
) -> list[Trajectory]:
    """Record an on-policy group with k correct of K (or a replayed group: replayed + K-1 fresh, k counts it)."""
    if replayed:
        fresh = rewards(k - 1, K - 1)
        t = trajs(K - 1, step)
        mgr.record_group(qid, np.concatenate([[1.0], fresh]), t, replayed=True, step=step)
    else:
        t = trajs(K, step)
        mgr.record_group(qid, rewards(k), t, replayed=False, step=step)
    return t


def test_eligibility_retirement_and_what_is_stored():
    mgr = ExperienceManager(cfg(), seed=0)
    t3 = record(mgr, "mid", 3, 1)
    record(mgr, "solved", 8, 1)
    record(mgr, "wrong", 0, 1)
    m = mgr.end_step(1, 0.4)
    assert mgr.candidates("mid") == t3[:3]  # only the correct ones
    assert "solved" not in mgr.buffer and "wrong" not in mgr.buffer
    assert mgr.retired == ["solved"]  # all-wrong is never retired
    assert mgr.buckets() == {3: ["mid"]}
    assert m["exp/buffer_bucket_3"] == 1 and m["exp/retired"] == 1 and m["exp/stored"] == 3
    assert [k for k in m if k.startswith("exp/buffer_bucket_")] == [
        f"exp/buffer_bucket_{k}" for k in range(1, 8)
    ]


def test_custom_bounds():
    mgr = ExperienceManager(cfg(buffer_lbound=2, buffer_rbound=5), seed=0)
    for q, k in (("k2", 2), ("k3", 3), ("k5", 5), ("k6", 6)):
        record(mgr, q, k, 1)
    mgr.end_step(1, 0.5)
    assert sorted(mgr.buffer.qids()) == ["k3", "k5"]


def test_latest_k_rebuckets_and_ineligible_questions_keep_trajectories():
    mgr = ExperienceManager(cfg(), seed=0)
    stored = record(mgr, "q", 3, 1)[:3]
    mgr.end_step(1, 0.5)
    record(mgr, "q", 0, 2)  # now all wrong: stays stored, not replayable
    mgr.end_step(2, 0.5)
    assert mgr.buckets() == {} and mgr.candidates("q") == stored and mgr.plan_replay(128) == []
    record(mgr, "q", 5, 3)
    m = mgr.end_step(3, 0.5)
    assert mgr.buckets() == {5: ["q"]} and mgr.buffer.count("q") == 8 and m["exp/eligible_questions"] == 1


def test_duplicates_are_stored_once():
    mgr = ExperienceManager(cfg(), seed=0)
    t = trajs(K)
    mgr.record_group("q", rewards(4), t, replayed=False, step=1)
    mgr.end_step(1, 0.5)
    mgr.record_group("q", rewards(4), t, replayed=False, step=2)
    m = mgr.end_step(2, 0.5)
    assert mgr.buffer.count("q") == 4 and m["exp/duplicates"] == 4 and m["exp/stored"] == 0


def test_per_question_cap_from_config():
    mgr = ExperienceManager(cfg(max_traj_per_question=2), seed=0)
    t = record(mgr, "q", 5, 1)
    mgr.end_step(1, 0.5)
    assert mgr.candidates("q") == t[3:5]


def test_retire_from_buffer_switch():
    for retire_from_buffer, expect_kept in ((True, False), (False, True)):
        mgr = ExperienceManager(cfg(retire_from_buffer=retire_from_buffer), seed=0)
        record(mgr, "q", 4, 1)
        mgr.end_step(1, 0.5)
        record(mgr, "q", 8, 2)
        mgr.end_step(2, 0.5)
        assert ("q" in mgr.buffer) is expect_kept
        assert mgr.retired == ["q"] and mgr.buckets() == {}  # k = 8 > rbound either way
        record(mgr, "q", 4, 3)  # rolled out again before the epoch prune: retirement is permanent
        mgr.end_step(3, 0.5)
        assert ("q" in mgr.buffer) is expect_kept and mgr.retired == ["q"]


@pytest.mark.parametrize(
    ("counts", "fresh_k", "with_replayed_reward", "expected_key"),
    [
        (True, 3, True, 4),
        (True, 3, False, 4),
        (True, 7, True, 8),
        (True, 0, False, 1),
        (False, 3, True, 3),
        (False, 3, False, 3),
        (False, 7, True, 8),
        (False, 4, False, 5),
        (False, 0, True, 0),
    ],
)
def test_replay_counts_in_k(counts, fresh_k, with_replayed_reward, expected_key):
    # released: k counts the replayed success (1 + fresh); otherwise round_half_up(8·fresh/7): 3->3.43->3, 4->4.57->5
    mgr = ExperienceManager(cfg(replay_counts_in_k=counts), seed=0)
    fresh = rewards(fresh_k, K - 1)
    r = np.concatenate([[1.0], fresh]) if with_replayed_reward else fresh
    mgr.record_group("q", r, trajs(K - 1), replayed=True, step=1)
    mgr.end_step(1, 0.5)
    assert mgr.latest_key("q") == expected_key
    assert (mgr.retired == ["q"]) is (expected_key == K)


def test_delayed_start_is_one_way_and_replay_starts_after_collection():
    mgr = ExperienceManager(cfg(delayed_start=True), seed=0)
    assert not mgr.replay_active and mgr.plan_replay(128) == []
    record(mgr, "early", 4, 1)
    record(mgr, "easy", 8, 1)
    mgr.end_step(1, 0.35)  # not strictly above the threshold
    assert (
        not mgr.replay_active and len(mgr.buffer) == 0 and mgr.retired == ["easy"]
    )  # retirement from step 1
    record(mgr, "before", 4, 2)
    m = mgr.end_step(2, 0.36)
    assert (
        mgr.replay_active
        and mgr.activation_step == 2
        and m["exp/active"] == 1.0
        and m["exp/collecting"] == 0.0
    )
    assert len(mgr.buffer) == 0  # the switch happens after the step: nothing collected in step 2
    assert mgr.plan_replay(128) == []  # step 3: buffer still empty
    record(mgr, "q3", 4, 3)
    mgr.end_step(3, 0.0)  # a low pass rate does not switch back
    assert mgr.replay_active and mgr.plan_replay(128) == ["q3"]  # step 4 replays


def test_collect_before_activation_and_off_switches():
    mgr = ExperienceManager(cfg(delayed_start=True, collect_before_activation=True), seed=0)
    record(mgr, "q", 4, 1)
    mgr.end_step(1, 0.1)
    assert not mgr.replay_active and "q" in mgr.buffer and mgr.plan_replay(128) == []
    on_policy = ExperienceManager(cfg(method="on_policy"), seed=0)
    record(on_policy, "q", 4, 1)
    record(on_policy, "s", 8, 1)
    on_policy.end_step(1, 0.9)
    assert not on_policy.replay_active and on_policy.plan_replay(128) == [] and len(on_policy.buffer) == 0
    assert on_policy.retired == ["s"] and on_policy.prune_training_data(["q", "s"], 0) == ["q", "s"]


def test_plan_replay_size_and_distinctness():
    mgr = ExperienceManager(cfg(), seed=0)
    for i in range(100):
        record(mgr, f"q{i}", 1 + i % 7, 1)
    mgr.end_step(1, 0.5)
    plan = mgr.plan_replay(128)
    assert len(plan) == 64 == len(set(plan)) and set(plan) <= set(mgr.buffer.qids())
    assert len(mgr.plan_replay(20)) == 10
    assert len(mgr.plan_replay(300)) == 100  # min(#eligible, ⌊ρB⌋)


def test_sample_range_halves_follow_insertion_order():
    for rng_name, allowed in (
        ("first_half", {f"q{i}" for i in range(10)}),
        ("last_half", {f"q{i}" for i in range(10, 20)}),
    ):
        mgr = ExperienceManager(cfg(sample_range=rng_name, rho=0.9), seed=1)
        for i in range(20):
            record(mgr, f"q{i}", 4, 1)
        mgr.end_step(1, 0.5)
        plan = mgr.plan_replay(100)
        assert set(plan) == allowed


def test_seeded_plans_are_reproducible():
    def run(seed: int) -> list[list[str]]:
        mgr = ExperienceManager(cfg(), seed=seed)
        for i in range(200):
            record(mgr, f"q{i}", 1 + i % 7, 1)
        mgr.end_step(1, 0.5)
        return [mgr.plan_replay(32) for _ in range(3)]

    assert run(5) == run(5) and run(5) != run(6)


def test_continuous_reward_buckets_by_hand():
    # K=4 stds: A 0, B 0.5, C 0.25, D 0.1, E sqrt(1/8) -> σ̃ = 0, 1, .5, .2, .707 -> keys round(4σ̃) = 0, 4, 2, 1, 3
    mgr = ExperienceManager(cfg(n_rollouts=4, difficulty_signal="reward_std"), seed=0)
    groups = {
        "A": [0.5, 0.5, 0.5, 0.5],
        "B": [0, 1, 0, 1],
        "C": [0, 0.5, 0, 0.5],
        "D": [0.2, 0.4, 0.2, 0.4],
        "E": [0, 0.5, 1, 0.5],
    }
    stored = {}
    for q, r in groups.items():
        t = trajs(4)
        # the strictly above-mean (positive-advantage) responses; E's 0.5s sit at the mean
        stored[q] = [t[2]] if q == "E" else [t[1], t[3]]
        mgr.record_group(q, np.array(r), t, replayed=False, step=1)
    m = mgr.end_step(1, 0.0)
    assert {q: mgr.latest_key(q) for q in groups} == {"A": 0, "B": 4, "C": 2, "D": 1, "E": 3}
    assert mgr.buckets() == {
        1: ["D"],
        2: ["C"],
        3: ["E"],
        4: ["B"],
    }  # key 4 is eligible: no solved end in §5.3
    for q in "BCDE":
        assert mgr.candidates(q) == stored[q]
    assert mgr.retired == [] and m["exp/buffer_bucket_4"] == 1


def test_retired_review_unretires_a_seeded_fraction_every_period():
    def run(seed: int) -> tuple[ExperienceManager, list[float]]:
        mgr = ExperienceManager(cfg(retired_review_fraction=0.1, retired_review_every=25), seed=seed)
        for i in range(30):
            record(mgr, f"s{i}", 8, 1)
        reviewed = [mgr.end_step(1, 0.5)["exp/reviewed"]]
        reviewed += [mgr.end_step(step, 0.5)["exp/reviewed"] for step in range(2, 51)]
        return mgr, reviewed

    mgr, reviewed = run(0)
    back = mgr.drain_reviewed()
    # 10% of 30 = 3 at step 25, then round_half_up(0.1·27) = 3 at step 50; nothing in between
    assert [i + 1 for i, r in enumerate(reviewed) if r] == [25, 50] and len(back) == 6 == len(set(back))
    assert not set(back) & set(mgr.retired) and len(mgr.retired) == 24
    assert mgr.drain_reviewed() == []
    data = [f"s{i}" for i in range(30)] + [f"d{i}" for i in range(200)]
    pruned = mgr.prune_training_data(data, batch_size=128)
    assert set(back) <= set(pruned) and len(pruned) == 206 == len(set(pruned))
    # a caller that pruned before the review and passes its already-pruned list gets them back too
    mgr2, _ = run(0)
    already_pruned = [f"d{i}" for i in range(200)]
    assert mgr2.prune_training_data(already_pruned, 128) == already_pruned + back
    assert mgr2.prune_training_data(already_pruned, 128) == already_pruned  # handed back once
    assert run(0)[0].retired == mgr.retired and run(1)[0].retired != mgr.retired


def test_prune_training_data_guard_and_switch():
    mgr = ExperienceManager(cfg(), seed=0)
    for i in range(10):
        record(mgr, f"r{i}", 8, 1)
    mgr.end_step(1, 0.5)
    data = [f"r{i}" for i in range(10)] + [f"d{i}" for i in range(190)]
    assert mgr.prune_training_data(data, 128) == data[10:]  # 190 > 128 + 20
    small = data[:10] + data[10:148]  # 148 would remain: not more than 148, keep all (released guard)
    assert mgr.prune_training_data(small, 128) == small
    never = ExperienceManager(cfg(retire_from_data="never"), seed=0)
    record(never, "r0", 8, 1)
    never.end_step(1, 0.5)
    assert never.prune_training_data(data, 128) == data


def test_bad_calls_raise_clear_errors():
    mgr = ExperienceManager(cfg(), seed=0)
    with pytest.raises(ValueError, match="length 8"):
        mgr.record_group("q", np.ones(7), trajs(7), replayed=False, step=1)
    with pytest.raises(ValueError, match="0/1 rewards"):
        mgr.record_group("q", np.full(8, 0.5), trajs(8), replayed=False, step=1)
    with pytest.raises(ValueError, match="7 trajectories for 8"):
        mgr.record_group("q", rewards(3), trajs(7), replayed=False, step=1)
    with pytest.raises(ValueError, match="non-empty str"):
        mgr.record_group("", rewards(3), trajs(8), replayed=False, step=1)
    record(mgr, "q", 3, 1)
    with pytest.raises(RuntimeError, match="before end_step"):
        mgr.plan_replay(128)
    with pytest.raises(ValueError, match="different step"):
        mgr.end_step(2, 0.5)
    mgr = ExperienceManager(cfg(), seed=0)
    mgr.end_step(5, 0.5)
    with pytest.raises(ValueError, match="does not follow"):
        mgr.end_step(5, 0.5)
    with pytest.raises(ValueError, match="batch_pass1"):
        mgr.end_step(6, 1.5)


def _drive(mgr: ExperienceManager, rng: np.random.Generator, steps: range) -> list:
    """Random but input-deterministic steps; returns the plans and metrics seen."""
    seen = []
    for step in steps:
        plan = mgr.plan_replay(32)
        for q in plan:
            k = int(rng.integers(1, K + 1))
            record(mgr, q, k, step, replayed=True)
        for _ in range(32 - len(plan)):
            record(mgr, f"q{int(rng.integers(0, 150))}", int(rng.integers(0, K + 1)), step)
        seen.append((plan, mgr.end_step(step, float(rng.random()))))
    return seen


def test_save_load_round_trip_is_exact(tmp_path):
    c = cfg(delayed_start=True, retired_review_fraction=0.2, retired_review_every=3, max_traj_per_question=5)
    mgr = ExperienceManager(c, seed=11, chunk_tokens=64)
    _drive(mgr, np.random.default_rng(0), range(1, 9))
    assert mgr.replay_active and len(mgr.buffer) > 10 and mgr.retired and mgr._reviewed
    mgr.save(tmp_path / "a")
    back = ExperienceManager.load(tmp_path / "a", c)
    back.save(tmp_path / "b")
    sa, sb = (json.loads((tmp_path / d / STATE_FILE).read_text()) for d in "ab")
    sa.pop("save_id"), sb.pop("save_id")
    assert sa == sb  # keys, retired, buckets (order included), switch, RNG state
    from exgrpo.core.buffer import load_arrays

    aa, ab = load_arrays(tmp_path / "a" / ARRAYS_FILE)[0], load_arrays(tmp_path / "b" / ARRAYS_FILE)[0]
    assert aa.keys() == ab.keys() and all(np.array_equal(aa[k], ab[k], equal_nan=True) for k in aa)
    for q in mgr.buffer.qids():
        assert back.candidates(q) == mgr.candidates(q)
    # the resumed run continues exactly like the uninterrupted one
    cont_a = _drive(mgr, np.random.default_rng(1), range(9, 15))
    cont_b = _drive(back, np.random.default_rng(1), range(9, 15))
    assert [p for p, _ in cont_a] == [p for p, _ in cont_b] and any(p for p, _ in cont_a)
    assert json.dumps([m for _, m in cont_a]) == json.dumps([m for _, m in cont_b])


def test_load_rejects_mismatches(tmp_path):
    c = cfg()
    mgr = ExperienceManager(c, seed=0)
    record(mgr, "q", 3, 1)
    mgr.end_step(1, 0.5)
    mgr.save(tmp_path / "a")
    with pytest.raises(ConfigError, match="n_rollouts"):
        ExperienceManager.load(tmp_path / "a", cfg(n_rollouts=4))
    with pytest.raises(FileNotFoundError, match=STATE_FILE):
        ExperienceManager.load(tmp_path / "nowhere", c)
    mgr.save(tmp_path / "b")
    (tmp_path / "a" / STATE_FILE).write_bytes((tmp_path / "b" / STATE_FILE).read_bytes())
    (tmp_path / "b" / ARRAYS_FILE).unlink()
    with pytest.raises(ValueError, match="different saves"):
        ExperienceManager.load(tmp_path / "a", c)
    record(mgr, "q", 3, 2)
    with pytest.raises(RuntimeError, match="before end_step"):
        mgr.save(tmp_path / "c")
