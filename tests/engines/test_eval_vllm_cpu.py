"""`exgrpo eval --backend vllm` on a tiny head-size-32 model: lm-eval's `vllm` backend with the model_args the
paper route builds (`exgrpo.eval.backends.vllm_model_args`, the release's detokenisation settings), changed only
by `VLLM_CPU_ARGS`, writing the results contract with provenance backend `vllm`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.engines.conftest import HAS_VLLM, MODEL, SKIP_REASON, engine_env

pytestmark = [pytest.mark.real_engines, pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)]

LIMIT = 8
SIZES = {"train": 4, "validation": 2, "test": LIMIT, "probe_length": 2}
SIZES.update({name: 4 for name in ("ood_words", "ood_choice4", "ood_choice10")})


def test_exgrpo_eval_on_lm_evals_vllm_backend_writes_the_contract(tmp_path):
    from exgrpo.eval import backends, cache
    from exgrpo.eval.profiles import get_profile
    from exgrpo.testbed.splits import make_splits

    engine_env()
    data = tmp_path / "data"
    data.mkdir()
    splits = make_splits(seed=0, sizes=SIZES)
    for name, rows in splits.items():
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    argv = [sys.executable, "-m", "exgrpo.cli", "eval", "--backend", "vllm", "--model", str(MODEL)]
    argv += ["--benchmarks", "tiny_test", "--profile", "tiny", "--data", str(data), "--out", str(out)]
    argv += ["--seed", "3", "--no-progress", *backends.vllm_cpu_flags()]
    # a process of its own, as the workflow's eval rule runs it (vLLM's engine wants real stdout/stderr)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=os.environ.copy())
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    profile = get_profile("tiny")
    records, meta = cache.read_samples(cache.samples_path(out, "tiny_test", "tiny"))  # schema checked on read
    agg = json.loads(cache.aggregate_path(out, "tiny_test", "tiny").read_text())
    model = agg["provenance"]["model"]
    assert meta["backend"] == "vllm" and model["backend"] == "vllm"
    want = backends.vllm_model_args(
        str(MODEL.resolve()),
        seed=3,
        profile=profile,
        **{k: v for k, v in backends.VLLM_CPU_ARGS.items()},
    )
    assert model["model_args"] == want  # the paper route's args, CPU differences only
    assert (
        model["model_args"]["seed"] == 3
        and model["model_args"]["gpu_memory_utilization"] == backends.VLLM_CPU_ARGS["gpu_memory_utilization"]
    )
    rows = splits["test"]
    assert list(dict.fromkeys(records["problem_id"])) == [r["qid"] for r in rows]
    k = profile.k_for("tiny_test")
    assert records.groupby("problem_id")["sample_index"].apply(list).tolist() == [list(range(k))] * LIMIT
    assert dict(zip(records["problem_id"], records["label"])) == {r["qid"]: r["answer"] for r in rows}
    assert records["n_tokens"].between(1, profile.max_new_tokens).all()
    assert not records["completion"].str.contains("<|end|>", regex=False).any()  # skip_special_tokens
    assert set(records["status"]) <= {"ok", "no_think_close", "no_answer", "parse_error"}
    assert agg["n_problems"] == LIMIT
    print(f"tiny_test avg@{k} on vLLM: {agg['metrics']['avg_at_k']:.3f}; statuses {set(records['status'])}")
