"""The results-contract files of a finished paper-scale run: log.jsonl.gz, run.json and the HF export.

A verl run directory (`exgrpo verl-config --out RUN_DIR`) holds `resolved_config.json` (written by `main.py`),
one metrics file per attempt, `metrics.attempt<SLURM_RESTART_COUNT>.<unix time>.jsonl` (verl's file logger,
one `{"step": N, "data": {metric: value}}` per line, truncated when opened, hence one file per attempt), and
verl's checkpoints under `trainer.default_local_dir` (`global_step_N/actor`, FSDP shards + `huggingface/`;
found and merged by `exgrpo.verl_plugin.actor_export`).
`collect_run` turns that into `results/<source>/train/<backbone>/<variant>/s<seed>/{log.jsonl.gz,run.json}`
(results/README.md) and, on request, merges the final actor checkpoint into an HF folder for evaluation, whose
digest run.json records as `summary.final_model_sha256` (exgrpo.records.fingerprints.weights_digest, as the CPU
trainer's runs: the reproduction report checks each evaluation's weights against it).

Attempts are merged in start order. A later attempt resumed from a checkpoint, so its first training step r
invalidates every earlier row at step >= r (steps past the checkpoint that were lost); for a step logged twice
otherwise (e.g. a validation-only row on resume), the later attempt's values win key by key.

Where the contract keys come from (stated up front): every key is defined once in `exgrpo.records.metrics`, with its
meaning, unit and, where verl computes it under another name, `verl_key`. The plug-in logs the registry's names
live (`exgrpo.records.metrics_verl.live_names`, before verl's trackers), so a current run's metrics files already carry them;
`KEY_MAP` (the same registry map) only reads metrics files written before that. A collected log has the CPU
trainer's names with the CPU trainer's meanings:
- `pass1` (`exgrpo/pass1`), `entropy` (`exgrpo/entropy`) and `response_length` (`exgrpo/response_length`)
  are over freshly generated rollouts only, as the CPU trainer's; `reward/batch_mean` is verl's
  `critic/score/mean`, over every trained row, replayed o* included (the CPU trainer computes the same).
- `update/<k>` are the plug-in loss's `actor/exgrpo/<k>` (verl averages them over micro-batches and ranks);
  verl's own `actor/entropy` aggregates with `loss_agg_mode` and the constant normaliser, so it is not a token
  mean and is kept under its own name.
- `val/<benchmark>` is `val-core/<data_source>/acc/mean@N` (N = the largest logged; both names are the registry's:
  `VAL_BENCHMARK`, `VERL_VAL_CORE_ACC`), named after the benchmark
  whose released data source it is (`aime` -> `aime24`, exgrpo.eval.benchmarks; unknown sources keep their
  name); `val/acc` is their unweighted mean (the paper's benchmark average), on a separate row, same step.
  The plug-in's trainer logs the same two live (`validation_accuracies`); collect makes them again from verl's.
- `wall_time_s` in run.json is the sum of `time/step` over the kept steps: start-up and work lost to failed
  attempts are not counted.
Every other metric is kept under its verl name (`contract_key`); non-numeric values are dropped, non-finite ones
become null.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.records.metrics import (
    VAL_ACC,
    VAL_PREFIX,
    VERL_VALIDATION_NAMESPACES,
    is_validation_key,
    lookup,
    val_benchmark_key,
)
from exgrpo.records.metrics_verl import VERL_VAL_CORE_ACC, is_verl_passthrough, verl_key_map
from exgrpo.verl_plugin.actor_export import (
    EXPORT_MARKER,
    TRACKER_FILE,
    CollectError,
    cached_model_dir,
    export_hf,
    latest_checkpoint,
    merge_argv,
)

METRICS_GLOB = "metrics.attempt*.jsonl"
_METRICS_NAME = re.compile(r"^metrics\.attempt(\d+)\.(\d+)\.jsonl$")
RESOLVED_FILE = "resolved_config.json"

KEY_MAP: dict[str, str] = verl_key_map()
"""verl / plug-in metric -> results-log key (exgrpo.records.metrics). `exp/*` keys already have their names."""


def contract_key(key: str) -> str:
    """The results-log key of a verl / plug-in training metric: renamed by the registry (`KEY_MAP`), kept when
    registered or in one of verl's namespaces, else kept as `verl/<key>` so that every collected key is known to
    `exgrpo.records.metrics` (the loader rejects unknown keys)."""
    key = KEY_MAP.get(key, key)
    return key if lookup(key) is not None or is_verl_passthrough(key) else f"verl/{key}"


# ------------------------------------------------------------------------------------------ metrics files
def metric_files(run_dir: str | Path) -> list[Path]:
    """The run's per-attempt metrics files in start order (unix time, then restart count)."""
    files = []
    for path in Path(run_dir).glob(METRICS_GLOB):
        match = _METRICS_NAME.match(path.name)
        if match is None:
            raise CollectError(f"{path}: unexpected metrics file name (want metrics.attempt<N>.<time>.jsonl)")
        files.append((int(match.group(2)), int(match.group(1)), path))
    if not files:
        raise FileNotFoundError(f"{Path(run_dir) / METRICS_GLOB}: no metrics file (did the run start?)")
    return [path for _, _, path in sorted(files)]


def read_metrics(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(step, metrics) per line of one verl file-logger file. A torn last line (the job was killed while writing)
    is dropped; a corrupt line before it is an error naming the file and line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines):
                break
            raise CollectError(f"{path}:{lineno}: corrupt JSON line ({err})") from None
        step, data = (record.get("step"), record.get("data")) if isinstance(record, dict) else (None, None)
        if not isinstance(step, int) or isinstance(step, bool) or step < 0 or not isinstance(data, dict):
            raise CollectError(f'{path}:{lineno}: expected {{"step": int >= 0, "data": {{...}}}}')
        out.append((step, data))
    return out


def _is_training(metrics: dict[str, Any]) -> bool:
    return any(not key.startswith(VERL_VALIDATION_NAMESPACES) for key in metrics)


def merge_attempts(attempts: Sequence[Sequence[tuple[int, dict[str, Any]]]]) -> dict[int, dict[str, Any]]:
    """Merge per-attempt (step, metrics) lists, oldest attempt first, into step -> metrics (module docstring)."""
    merged: dict[int, dict[str, Any]] = {}
    for records in attempts:
        train_steps = [step for step, metrics in records if _is_training(metrics)]
        if train_steps:
            resumed_at = min(train_steps)
            merged = {s: m for s, m in merged.items() if s < resumed_at}
        for step, metrics in records:
            merged[step] = {**merged.get(step, {}), **metrics}
    return merged


def clean_value(value: Any) -> tuple[bool, Any]:
    """(keep, value) for the contract: numbers and bools kept, non-finite floats -> None, the rest dropped."""
    if value is None or isinstance(value, (bool, int)):
        return True, value
    if isinstance(value, float):
        return True, value if math.isfinite(value) else None
    return False, None


def released_benchmarks() -> dict[str, str]:
    """Data source of the release's evaluation files -> benchmark name (exgrpo.eval.benchmarks)."""
    from exgrpo.eval.benchmarks import BENCHMARKS

    return {
        b.released.data_source: name
        for name, b in BENCHMARKS.items()
        if b.released and b.released.data_source
    }


def validation_accuracies(
    metrics: dict[str, Any], names: dict[str, str] | None = None
) -> dict[str, float | None]:
    """`val/<benchmark>` (verl's `val-core/<source>/acc/mean@N`, the largest N) and `val/acc` (their unweighted
    mean, over the finite ones) of one step's metrics; empty when the step did not validate. `names` maps a data
    source to its benchmark (default: the release's, `released_benchmarks`; unknown sources keep their name)."""
    accs: dict[str, tuple[int, float | None]] = {}
    for key, value in metrics.items():
        match = VERL_VAL_CORE_ACC.match(key)
        if match and int(match["n"]) >= accs.get(match["source"], (-1, None))[0]:
            accs[match["source"]] = (int(match["n"]), value)
    if not accs:  # most steps do not validate: the trainer calls this on every step
        return {}
    names = released_benchmarks() if names is None else names
    out: dict[str, float | None] = {
        val_benchmark_key(names.get(source, source)): acc for source, (_, acc) in sorted(accs.items())
    }
    finite = [acc for _, acc in accs.values() if acc is not None]
    if finite:
        out[VAL_ACC.name] = sum(finite) / len(finite)
    return out


def contract_rows(records: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of log.jsonl.gz: per step a training row (contract keys + verl's other metrics) and, when the step
    validated, a validation row (`val/acc`, `val/<benchmark>` + the raw `val-*` metrics)."""
    names = released_benchmarks()
    rows = []
    for step in sorted(records):
        train: dict[str, Any] = {"step": step}
        val: dict[str, Any] = {"step": step}
        for key, raw in records[step].items():
            keep, value = clean_value(raw)
            if not keep or key == "step":
                continue
            if key.startswith(VERL_VALIDATION_NAMESPACES):
                val[key] = value
            elif not key.startswith(VAL_PREFIX):  # the live `val/...` keys are made again below, from verl's
                train[contract_key(key)] = value
        if len(train) > 1:
            rows.append(train)
        if len(val) > 1:
            val.update(validation_accuracies(val, names))
            rows.append(val)
    return rows


# ------------------------------------------------------------------------------------------ one run
def collect_run(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    export_to: str | Path | None = None,
    run: Callable[..., Any] = subprocess.run,
) -> dict[str, Any]:
    """Write `out_dir/log.jsonl.gz`, export the final actor to `export_to` (optional), then `out_dir/run.json`
    (last: its presence means the run is collected). Refuses a run that has not reached its last step.
    Returns run.json's content."""
    from exgrpo.records.fingerprints import weights_digest
    from exgrpo.records.io import TRAIN_LOG, read_json, write_json, write_jsonl
    from exgrpo.records.provenance import provenance
    from exgrpo.verl_plugin.hydra_config import table4

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    res = _read_resolved(run_dir, out_dir)
    files = metric_files(run_dir)
    rows = contract_rows(merge_attempts([read_metrics(p) for p in files]))
    train_steps = [row["step"] for row in rows if not any(is_validation_key(k) for k in row)]
    last = max(train_steps, default=0)
    if last != res.total:
        raise CollectError(f"{run_dir}: run incomplete, last logged step {last} of {res.total}")
    ckpt_root = Path(res.trainer.get("default_local_dir") or run_dir / "checkpoints")
    ckpt_step, actor = latest_checkpoint(ckpt_root if ckpt_root.is_absolute() else run_dir / ckpt_root)
    if ckpt_step != res.total:
        raise CollectError(f"{ckpt_root}: last checkpoint is step {ckpt_step}, the run has {res.total} steps")

    # Everything checked: export, then the log, then run.json (nothing half-collected looks complete).
    final_model = str(export_hf(actor, export_to, ckpt_step, run=run)) if export_to is not None else None
    write_jsonl(out_dir / TRAIN_LOG, rows)

    val = [row[VAL_ACC.name] for row in rows if row.get(VAL_ACC.name) is not None]
    # `exgrpo verl-config`: what made the run (resolution, data, init, code)
    fp_path = run_dir / "fingerprint.json"
    fingerprint = read_json(fp_path).get("fingerprint") if fp_path.exists() else None
    step_times = [row["time/step"] for row in rows if isinstance(row.get("time/step"), (int, float))]
    content = provenance(
        {"method": res.method, "table4": res.doc.get("table4") or table4(res.resolved)},
        res.seed,
        backbone=res.backbone,
        variant=res.variant,
        steps=last,
        wall_time_s=float(sum(step_times)),
        summary={
            "final_val_acc": val[-1] if val else None,
            "steps": last,
            "final_model": final_model,
            # the digest every evaluation of the export records (exgrpo.eval.cache.model_fingerprint)
            "final_model_sha256": weights_digest(final_model) if final_model is not None else None,
            "final_checkpoint": str(actor),
        },
        attempts=[p.name for p in files],
        departures=list(res.doc.get("departures", [])),
        train_provenance=res.doc.get("provenance"),
        verl_config=res.resolved,
        fingerprint=fingerprint,
        import_torch=True,  # verl trained with torch in this job's launch script: record its numerics
    )
    write_json(out_dir / "run.json", content)
    return content


@dataclass
class _Resolved:
    """What collect reads from a run's resolved_config.json (the document, its `resolved` config)."""

    doc: dict[str, Any]
    resolved: dict[str, Any]
    trainer: dict[str, Any]
    backbone: str
    variant: str
    seed: int
    total: int
    method: dict[str, Any]


def _read_resolved(run_dir: Path, out_dir: Path) -> _Resolved:
    """The run's resolved config; refuses a file that is not one, and an `--out .../<backbone>/<variant>/s<seed>`
    naming another run."""
    from exgrpo.records.io import read_json

    resolved_path = run_dir / RESOLVED_FILE
    doc = read_json(resolved_path)
    try:
        resolved = doc["resolved"]
        meta, trainer = resolved["exgrpo"], resolved["trainer"]
        backbone, variant, seed = str(meta["backbone"]), str(meta["variant"]), int(meta["seed"])
        total = int(trainer["total_training_steps"])
        method = dict(meta["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise CollectError(
            f"{resolved_path}: not a resolved ExGRPO verl config ({err!r} missing or bad)"
        ) from None
    if out_dir.name.startswith("s") and out_dir.name[1:].isdigit():
        want = (out_dir.parent.parent.name, out_dir.parent.name, int(out_dir.name[1:]))
        if want != (backbone, variant, seed):
            raise CollectError(
                f"{resolved_path}: run is {backbone}/{variant}/s{seed}, but --out is {out_dir}"
            )
    return _Resolved(doc, resolved, trainer, backbone, variant, seed, total, method)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m exgrpo.verl_plugin.collect model-dir MANIFEST`: print a cached model's folder (for shell jobs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "model-dir":
        print("usage: python -m exgrpo.verl_plugin.collect model-dir MANIFEST", file=sys.stderr)
        return 2
    try:
        print(cached_model_dir(args[1]))
    except (CollectError, FileNotFoundError, ValueError) as err:
        print(f"model-dir: error: {err}", file=sys.stderr)
        return 2
    return 0


__all__ = [
    "EXPORT_MARKER",
    "KEY_MAP",
    "TRACKER_FILE",
    "CollectError",
    "cached_model_dir",
    "clean_value",
    "collect_run",
    "contract_key",
    "contract_rows",
    "export_hf",
    "latest_checkpoint",
    "merge_argv",
    "merge_attempts",
    "metric_files",
    "read_metrics",
]

if __name__ == "__main__":
    sys.exit(main())
