"""Experience buffer storage: content, dedup, cap, memory layout, compaction and plain-format round trips."""

from __future__ import annotations

import numpy as np
import pytest

from exgrpo.core.buffer import ExperienceBuffer, Trajectory, load_arrays, save_arrays


def make_traj(rng: np.random.Generator, n: int | None = None, step: int = 1, entropy: float = float("nan")):
    n = int(rng.integers(1, 40)) if n is None else n
    return Trajectory(rng.integers(0, 50_000, n), -rng.random(n).astype(np.float32) * 5, step, entropy)


def test_add_and_get_round_trip_values_and_dtypes():
    rng = np.random.default_rng(0)
    buf = ExperienceBuffer(chunk_tokens=16)
    t1, t2 = make_traj(rng, 10, step=3, entropy=0.1 + 1e-12), make_traj(rng, 12, step=4)
    assert buf.add("q1", t1) and buf.add("q1", t2)
    got = buf.get("q1")
    assert got == [t1, t2]  # oldest first; NaN entropy compares equal to NaN
    assert got[0].token_ids.dtype == np.int32 and got[0].logprobs.dtype == np.float32
    assert got[0].step == 3 and got[0].entropy == 0.1 + 1e-12  # exact, not float32-rounded
    with pytest.raises(ValueError, match="read-only"):
        got[0].token_ids[0] = 1
    assert buf.num_trajectories == 2 and buf.num_tokens == 22 and len(buf) == 1 and "q1" in buf
    with pytest.raises(KeyError, match="q2"):
        buf.get("q2")


def test_identical_token_ids_are_stored_once_per_question():
    rng = np.random.default_rng(1)
    buf = ExperienceBuffer()
    t = make_traj(rng, 8)
    same_tokens = Trajectory(t.token_ids.copy(), t.logprobs - 1.0, step=9)
    assert buf.add("q", t)
    assert not buf.add("q", same_tokens)
    assert buf.add("other", same_tokens)  # dedup is per question
    longer = Trajectory(np.concatenate([t.token_ids, [1]]), np.zeros(9, np.float32), 1)
    assert buf.add("q", longer)
    assert buf.count("q") == 2 and buf.get("q")[0] == t


def test_cap_drops_the_oldest():
    rng = np.random.default_rng(2)
    buf = ExperienceBuffer(max_per_question=2)
    ts = [make_traj(rng, 5, step=s) for s in range(4)]
    for t in ts:
        buf.add("q", t)
    assert buf.get("q") == ts[2:]
    assert buf.num_trajectories == 2 and buf.num_tokens == 10


def test_remove_and_insertion_order():
    rng = np.random.default_rng(3)
    buf = ExperienceBuffer()
    for q in ("a", "b", "c"):
        buf.add(q, make_traj(rng))
    assert buf.remove("a") == 1 and buf.remove("zzz") == 0
    buf.add("a", make_traj(rng))
    assert buf.qids() == ["b", "c", "a"]  # re-added questions go to the end, like the released dict


@pytest.mark.parametrize(
    ("traj", "match"),
    [
        (Trajectory(np.zeros(0, np.int64), np.zeros(0, np.float32), 1), "non-empty"),
        (Trajectory(np.zeros((2, 2), np.int64), np.zeros((2, 2), np.float32), 1), "1-D"),
        (Trajectory(np.zeros(3, np.float32), np.zeros(3, np.float32), 1), "integers"),
        (Trajectory(np.array([1, -2, 3]), np.zeros(3, np.float32), 1), r"\[0, 2\^31\)"),
        (Trajectory(np.array([1, 2**31]), np.zeros(2, np.float32), 1), r"\[0, 2\^31\)"),
        (Trajectory(np.array([1, 2, 3]), np.zeros(2, np.float32), 1), "shape"),
        (Trajectory(np.array([1, 2]), np.array([0.0, np.nan]), 1), "finite"),
    ],
)
def test_bad_trajectories_are_rejected_with_the_question_named(traj, match):
    buf = ExperienceBuffer()
    with pytest.raises(ValueError, match=match) as err:
        buf.add("q7", traj)
    assert "q7" in str(err.value)
    assert buf.num_trajectories == 0


def test_memory_is_eight_bytes_per_token_and_bounded_after_removals():
    rng = np.random.default_rng(4)
    chunk = 1024
    buf = ExperienceBuffer(chunk_tokens=chunk)
    for i in range(2000):
        buf.add(f"q{i}", make_traj(rng, 32))
    mem = buf.memory()
    assert mem["payload"] == 8 * buf.num_tokens == 8 * 64_000
    # chunk tails waste at most one trajectory each; plus the partly filled tail chunk
    assert mem["reserved"] <= mem["payload"] + 8 * (chunk + 64_000 // chunk * 32)
    for i in range(1900):
        buf.remove(f"q{i}")
    mem = buf.memory()
    assert mem["dead_tokens"] <= max(mem["live_tokens"], chunk)  # compaction ran
    assert mem["reserved"] <= 2 * 8 * (mem["live_tokens"] + chunk) + 8 * chunk


def test_randomised_operations_match_a_reference_model_through_compaction():
    rng = np.random.default_rng(5)
    buf = ExperienceBuffer(max_per_question=3, chunk_tokens=64)
    ref: dict[str, list[Trajectory]] = {}
    early_view = None
    for op in range(3000):
        qid = f"q{int(rng.integers(0, 60))}"
        if rng.random() < 0.25:
            assert buf.remove(qid) == len(ref.pop(qid, []))
            continue
        n = int(rng.integers(1, 100)) if rng.random() < 0.05 else int(rng.integers(1, 20))  # some > chunk
        t = Trajectory(rng.integers(0, 4, n), rng.normal(size=n).astype(np.float32), op)  # many duplicates
        is_new = not any(np.array_equal(t.token_ids, o.token_ids) for o in ref.get(qid, []))
        assert buf.add(qid, t) == is_new
        if is_new:
            ref.setdefault(qid, []).append(t)
            ref[qid] = ref[qid][-3:]
        if early_view is None and op > 100:
            early_q = next(iter(ref))
            early_view, early_copy = buf.get(early_q)[0], ref[early_q][0]
    assert set(buf.qids()) == set(ref)
    for qid, trajs in ref.items():
        assert buf.get(qid) == trajs
    assert buf.num_tokens == sum(t.token_ids.size for v in ref.values() for t in v)
    assert early_view == early_copy  # views stay valid after compactions


def test_arrays_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(6)
    buf = ExperienceBuffer(chunk_tokens=50)
    for i in range(40):
        for _ in range(int(rng.integers(1, 4))):
            buf.add(
                f"q{i % 13}", make_traj(rng, step=i, entropy=float(rng.random()) if i % 2 else float("nan"))
            )
    buf.remove("q3")
    arrays, qids = buf.to_arrays()
    save_arrays(tmp_path / "a.safetensors", arrays, {"k": "v"})
    loaded, meta = load_arrays(tmp_path / "a.safetensors")
    assert meta == {"k": "v"}
    back = ExperienceBuffer.from_arrays(loaded, qids, chunk_tokens=50)
    assert back.qids() == buf.qids()
    for q in qids:
        assert back.get(q) == buf.get(q)
    # the loaded buffer keeps working: dedup against loaded content, new adds, removals
    assert not back.add(qids[0], buf.get(qids[0])[0])
    assert back.add(qids[0], make_traj(rng, 7))
    assert back.remove(qids[1]) == buf.count(qids[1])


def test_empty_buffer_round_trip(tmp_path):
    arrays, qids = ExperienceBuffer().to_arrays()
    save_arrays(tmp_path / "e.safetensors", arrays, {})
    loaded, _ = load_arrays(tmp_path / "e.safetensors")
    back = ExperienceBuffer.from_arrays(loaded, qids)
    assert len(back) == 0 and back.num_tokens == 0


def test_corrupt_or_inconsistent_files_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        load_arrays(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00not a header")
    with pytest.raises(ValueError, match="bad.safetensors"):
        load_arrays(bad)
    buf = ExperienceBuffer()
    buf.add("q", make_traj(np.random.default_rng(0), 5))
    arrays, qids = buf.to_arrays()
    with pytest.raises(ValueError, match="inconsistent"):
        ExperienceBuffer.from_arrays(arrays, qids + ["extra"])
    with pytest.raises(ValueError, match="missing arrays"):
        ExperienceBuffer.from_arrays({"tokens": arrays["tokens"]}, qids)
