"""IFEval / IFBench verdicts written as an eval file pair, in the math benchmarks' contract (results/README.md).

`write_if_eval` takes the set's rows (hub columns), k responses per row and scores them with the benchmark's
scorer, then writes `<benchmark>.<profile>.samples.parquet` (one record per (prompt, sample), the cache's
fixed columns) and `<benchmark>.<profile>.json` (the aggregate), samples first, aggregate last, as the harness
does. How the contract's columns carry instruction-following verdicts:
- `score`: the Table 2 accuracy's per-sample verdict, prompt-level loose (1.0 when every instruction holds), so
  `metrics.avg_at_k` is prompt-level loose accuracy averaged over samples;
- `extracted`: the sample's four verdicts as JSON (lm-eval's metric names), `label`: the instruction ids as JSON;
- the aggregate's `metrics` also holds all four accuracies, pooled over every (prompt, sample), and
  `headline_metric` names the one `avg_at_k` equals.
`prompt_hash` is the sha256 of the row's prompt text as the hub gives it (before the chat template: the rendered
text depends on the backbone, whose template's sha256 the provenance records). `n_tokens` and `truncated` come
from the generating backend (exgrpo.eval.chat_run: the completion re-tokenised, truncated when it reached the
token budget, as the harness counts them); without counts they are 0 and False.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from exgrpo.eval import cache
from exgrpo.eval.if_scoring import HEADLINE, IFVerdict, aggregate

IFBENCH_SOURCE = "allenai/IFBench@db69a6f05689830b0068b8f1529ebcfd2f3b164c"
"""The vendored checker's source commit (exgrpo/eval/third_party/ifbench/README.md)."""


def _scorer(benchmark: str) -> tuple[Callable[..., IFVerdict], str, str]:
    """(score function, grader name, grader version) of one instruction-following benchmark."""
    if benchmark == "ifeval":
        from exgrpo.eval.ifeval_scorer import score_ifeval

        try:
            lm_eval = version("lm_eval")
        except PackageNotFoundError:
            lm_eval = "unknown"
        return score_ifeval, "lm_eval.ifeval", f"lm-eval {lm_eval}"
    if benchmark == "ifbench":
        from exgrpo.eval.ifbench_scorer import score_ifbench

        return score_ifbench, "ifbench", IFBENCH_SOURCE
    raise ValueError(f"{benchmark!r}: not an instruction-following benchmark (known: ifeval, ifbench)")


def if_records(
    benchmark: str,
    rows: Sequence[Mapping[str, Any]],
    responses: list[list[str]],
    seed: int,
    n_tokens: list[list[int]] | None = None,
    max_new_tokens: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per-sample records (the cache's columns) and the four accuracies over every (prompt, sample);
    `n_tokens` (one count per response) and the budget `max_new_tokens` give `n_tokens` and `truncated`."""
    if len(rows) != len(responses):
        raise ValueError(f"{benchmark}: responses for {len(responses)} rows, the set has {len(rows)}")
    k = {len(r) for r in responses}
    if len(k) != 1 or 0 in k:
        raise ValueError(f"{benchmark}: every row needs the same number (>= 1) of responses, got {sorted(k)}")
    if n_tokens is not None and [len(n) for n in n_tokens] != [len(r) for r in responses]:
        raise ValueError(f"{benchmark}: token counts do not match the responses one to one")
    score, grader, grader_version = _scorer(benchmark)
    records, verdicts = [], []
    for i, (row, samples) in enumerate(zip(rows, responses, strict=True)):
        for j, text in enumerate(samples):
            count = n_tokens[i][j] if n_tokens is not None else 0
            verdict = score(row, text, benchmark)
            verdicts.append(verdict)
            record = verdict.as_record()
            records.append(
                {
                    "problem_id": str(row["key"]),
                    "sample_index": j,
                    "seed": seed,
                    "prompt_hash": hashlib.sha256(str(row["prompt"]).encode()).hexdigest(),
                    "completion": text,
                    "n_tokens": count,
                    "truncated": max_new_tokens is not None and count >= max_new_tokens,
                    "extracted": json.dumps({m: record[m] for m in record if m.endswith("_acc")}),
                    "label": json.dumps(list(verdict.instruction_id_list)),
                    "score": float(record[HEADLINE]),
                    "status": "ok",
                    "grader": grader,
                    "grader_version": grader_version,
                }
            )
    return records, aggregate(verdicts)


def write_if_eval(
    out_dir: str | Path,
    benchmark: str,
    profile: str,
    rows: Sequence[Mapping[str, Any]],
    responses: list[list[str]],
    seed: int = 0,
    meta: Mapping[str, Any] | None = None,
    model: str | Path | None = None,
    n_tokens: list[list[int]] | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """Score and write the pair; returns the aggregate (its `metrics` holds all four accuracies).

    `model`: the evaluated model's folder (or hub id); its weights' digest goes into the samples metadata
    (`weights`) and `provenance.model` (`final_model_sha256`), as the harness records them. `n_tokens`,
    `max_new_tokens`: the generating backend's token counts and budget (`if_records`)."""
    named = cache.model_record(model) if model is not None else None  # a folder without weights fails first
    records, four = if_records(benchmark, rows, responses, seed, n_tokens, max_new_tokens)
    k = len(responses[0])
    full_meta: dict[str, Any] = {
        "benchmark": benchmark,
        "profile": profile,
        "k": k,
        "seed": seed,
        "split": "probe",
        **(meta or {}),
    }
    if named is not None:
        prov = dict(full_meta.get("provenance") or {})
        prov["model"] = {**(prov.get("model") or {}), **named}
        full_meta.update(model=named["path"], weights=named["final_model_sha256"], provenance=prov)
    table = cache.records_table(records)
    cache.write_samples(cache.samples_path(out_dir, benchmark, profile), table, full_meta)
    agg = cache.build_aggregate(table, full_meta, dict(full_meta.get("provenance", {})))
    agg["metrics"] = {**agg["metrics"], **four}
    agg["headline_metric"] = HEADLINE
    cache.write_aggregate(cache.aggregate_path(out_dir, benchmark, profile), agg)
    return agg


__all__ = ["IFBENCH_SOURCE", "if_records", "write_if_eval"]
