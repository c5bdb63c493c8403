"""A whole CPU training run: load, resume, step, validate, checkpoint, log, finish.

Outputs:
- `<ckpt>/log.jsonl`  the live per-step log (work/, next to the checkpoints, so that Snakemake's
  cleanup of a failed job's outputs never deletes it); truncated to the checkpoint on resume;
- `<ckpt>/step_<N>/`  resumable checkpoints (see `checkpoint.py`), `<ckpt>/final/` the final HF model;
- `<out>/log.jsonl.gz`, `<out>/run.json`  copied/written atomically at the end; `run.json` is last, so
  its presence means the run is complete.
A run killed at any point and started again with the same arguments continues from its last
checkpoint, and its final metrics are bit-identical to an uninterrupted run (tests/tiny/test_resume.py).

Nothing stale: every checkpoint and run.json records the run's fingerprint (`run_fingerprint`: the
resolved method and trainer settings, the seeds, the data manifest's hash, the init weights' hash and
the trainer code's digest). A run resumes only from a checkpoint with its own fingerprint; any other
checkpoint is discarded and training starts from step 1, saying so in the log. A finished run
(run.json and the final model) with the same fingerprint is not trained again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from exgrpo.core import step_metrics as core_metrics
from exgrpo.core import step_questions
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.data_order import DataOrder
from exgrpo.core.experience import ExperienceManager
from exgrpo.records import metrics as M
from exgrpo.records.code_digest import code_digest
from exgrpo.records.fingerprints import file_digest, fingerprint, library_versions_of
from exgrpo.records.fingerprints import weights_digest as model_dir_digest
from exgrpo.records.io import TRAIN_LOG, atomic_open, write_json, write_jsonl
from exgrpo.records.provenance import provenance
from exgrpo.settings.resolve import RunSpec, training_parts
from exgrpo.settings.trainer_settings import TrainerSettings
from exgrpo.tiny.best import clear_best, maybe_save_best
from exgrpo.tiny.checkpoint import (
    checkpoint_fingerprint,
    discard_checkpoints,
    latest_checkpoint,
    load_checkpoint_state,
    save_checkpoint,
)
from exgrpo.tiny.tracker import TENSORBOARD_DIR, Tracker, open_tracker
from exgrpo.tiny.trainer import CPUTrainer, Question, weights_digest


def run_fingerprint(
    cfg: ExGRPOConfig,
    args: TrainerSettings,
    seed: int,
    data_order_seed: int,
    data_dir: Path | None,
    model_dir: Path,
) -> tuple[str, dict[str, Any]]:
    """(fingerprint, its parts) of a CPU training run: what decides the weights it produces."""
    parts = {
        **training_parts(cfg, dataclasses.asdict(args), seed, data_order_seed),
        "data": file_digest([data_dir / "manifest.json"]) if data_dir is not None else None,
        "init": model_dir_digest(model_dir),
        "code": code_digest("train_tiny"),
        "libraries": library_versions_of(),
    }
    return fingerprint(parts), parts


@dataclasses.dataclass
class _Run:
    """What the steps of one run share once it is loaded: the model, its trainer, the data order, where the
    run starts (1, or the step after its checkpoint) and logs, and its fingerprint."""

    model: Any
    tokenizer: Any
    trainer: CPUTrainer
    order: DataOrder
    start: int
    log_path: Path
    fp: str
    fp_parts: dict[str, Any]
    data_order_seed: int


def run_training(
    *,
    model_dir: Path,
    data_questions: tuple[list[Question], list[Question]],
    cfg: ExGRPOConfig,
    args: TrainerSettings,
    seed: int,
    ckpt_dir: Path,
    out_dir: Path,
    meta: dict[str, Any],
    data_dir: Path | None = None,
    spec: RunSpec | None = None,
    logger: str = "jsonl",
) -> dict[str, Any]:
    """Train (or resume, or recognise as done) and write the results. Returns the final summary.

    `data_dir` (its manifest.json) enters the fingerprint; `spec` gives the data-order seed (default: `seed`).
    `logger`: `jsonl` (the log only) or `tensorboard` (also TensorBoard events under `<ckpt>/tensorboard/`,
    next to the log, with the log's keys as tags; needs the `tensorboard` package).
    """
    tracker = open_tracker(logger, ckpt_dir / TENSORBOARD_DIR)  # a missing package fails before any work

    torch.set_num_threads(args.threads)
    torch.manual_seed(seed)
    data_order_seed = spec.data_order_seed if spec is not None else seed
    fp, fp_parts = run_fingerprint(cfg, args, seed, data_order_seed, data_dir, model_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    done = _finished(out_dir, ckpt_dir, fp)
    if done is not None:
        print(
            f"{meta.get('name', 'run')}: finished with the same fingerprint {fp[:12]} ({out_dir / 'run.json'}); "
            "not training again",
            flush=True,
        )
        return done
    run = _load_run(
        model_dir, data_questions, cfg, args, seed, ckpt_dir, (fp, fp_parts), data_order_seed, meta
    )
    t_run = time.perf_counter()
    stopped = _train_steps(run, cfg, args, ckpt_dir, tracker, meta)
    if stopped is not None:
        return stopped
    return _write_results(run, cfg, args, seed, ckpt_dir, out_dir, meta, t_run)


def _load_run(
    model_dir: Path,
    data_questions: tuple[list[Question], list[Question]],
    cfg: ExGRPOConfig,
    args: TrainerSettings,
    seed: int,
    ckpt_dir: Path,
    fingerprinted: tuple[str, dict[str, Any]],
    data_order_seed: int,
    meta: dict[str, Any],
) -> _Run:
    """Load the model and trainer from this run's own checkpoint (restoring optimizer, generators, experience,
    data order and log) or from `model_dir` (clearing the log and the best-validation model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fp, fp_parts = fingerprinted
    train, valid = data_questions
    resume = _own_checkpoint(ckpt_dir, fp, meta.get("name", "run"))
    source = resume / "model" if resume else model_dir
    if not (source / "config.json").exists():
        raise FileNotFoundError(f"{source}: no HF model (config.json) found; run `exgrpo sft` first")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source)
    trainer = CPUTrainer(model, tokenizer, cfg, args, train, valid, seed)
    order = DataOrder([q.qid for q in train], data_order_seed)
    log_path = ckpt_dir / "log.jsonl"
    start = 1
    if resume:
        state = load_checkpoint_state(resume, trainer.optimizer, trainer.generators)
        trainer.manager = ExperienceManager.load(resume / "experience", cfg)
        order = DataOrder.from_state(state["data_order"])
        start = int(state["step"]) + 1
        _truncate_log(log_path, int(state["step"]))
        print(
            f"{meta.get('name', 'run')}: resuming from step {start} ({resume}, same fingerprint {fp[:12]})",
            flush=True,
        )
    else:
        log_path.unlink(missing_ok=True)
        clear_best(ckpt_dir)
        print(f"{meta.get('name', 'run')}: training from step 1 (fingerprint {fp[:12]})", flush=True)
    return _Run(model, tokenizer, trainer, order, start, log_path, fp, fp_parts, data_order_seed)


def _train_steps(
    run: _Run,
    cfg: ExGRPOConfig,
    args: TrainerSettings,
    ckpt_dir: Path,
    tracker: Tracker,
    meta: dict[str, Any],
) -> dict[str, Any] | None:
    """Steps `run.start`..`args.steps`: step, log, validate (keeping the best model), checkpoint. Returns
    `{"stopped_at": step}` when a segment stops early (`stop_after`), None when all steps ran."""
    trainer = run.trainer
    tracker.start(run.start)
    with (
        open(run.log_path, "a", encoding="utf-8") as log,
        tracker,
        tqdm(total=args.steps, initial=run.start - 1, desc=meta.get("name", "train"), unit="step") as bar,
    ):
        for step in range(run.start, args.steps + 1):
            replay = trainer.manager.plan_replay(args.batch_size)
            fresh = step_questions.take_fresh(cfg, run.order, trainer.manager, args.batch_size, len(replay))
            metrics = {**trainer.step(step, fresh, replay), **core_metrics.data_metrics(run.order)}
            _write_row(log, metrics, tracker)
            if args.val_every and (step % args.val_every == 0 or step == args.steps):
                val = trainer.validate(step)
                _write_row(log, val, tracker)
                if M.VAL_ACC.name in val:  # the release's best-validation checkpoint (tiny/best.py)
                    maybe_save_best(
                        ckpt_dir, step, val[M.VAL_ACC.name], model=run.model, tokenizer=run.tokenizer
                    )
            # a segment's last step (stop_after, exgrpo.workflow.cluster.segment_stops) always checkpoints: the next job resumes
            if (
                step % args.ckpt_every == 0
                or step == args.steps
                or (args.stop_after and step >= args.stop_after)
            ):
                _checkpoint(run, ckpt_dir, step, log)
            bar.set_postfix(
                pass1=f"{metrics[M.PASS1.name]:.2f}", replay=int(metrics[M.REPLAY_QUESTIONS.name])
            )
            bar.update(1)
            if args.stop_after and step >= args.stop_after:
                return {"stopped_at": step}
    return None


def _checkpoint(run: _Run, ckpt_dir: Path, step: int, log: Any) -> None:
    """Save a resumable checkpoint of `step`, the log synced to disk first (a resume truncates it to here)."""
    log.flush()
    os.fsync(log.fileno())
    save_checkpoint(
        ckpt_dir,
        step,
        model=run.model,
        tokenizer=run.tokenizer,
        optimizer=run.trainer.optimizer,
        generators=run.trainer.generators,
        manager=run.trainer.manager,
        trainer_state={"data_order": run.order.state_dict()},
        fingerprint=run.fp,
    )


def _write_results(
    run: _Run,
    cfg: ExGRPOConfig,
    args: TrainerSettings,
    seed: int,
    ckpt_dir: Path,
    out_dir: Path,
    meta: dict[str, Any],
    t_run: float,
) -> dict[str, Any]:
    """Save the final model, copy the log to `<out>` and write run.json last (its presence: the run is
    complete). Returns the summary; `t_run` is when the steps began (run.json's wall time)."""
    final = _save_final(ckpt_dir, run.model, run.tokenizer)
    rows = [json.loads(line) for line in run.log_path.read_text().splitlines() if line.strip()]
    val_accs = [r["val/acc"] for r in rows if "val/acc" in r]
    summary = {
        "final_val_acc": val_accs[-1] if val_accs else None,
        "weights_sha256": weights_digest(run.model),
        "steps": args.steps,
        "final_model": str(final),
        "final_model_sha256": model_dir_digest(final),
    }
    write_jsonl(out_dir / TRAIN_LOG, rows)
    write_json(
        out_dir / "run.json",
        provenance(
            {
                "method": cfg.to_dict(),
                "trainer": dataclasses.asdict(args),
                "data_order_seed": run.data_order_seed,
            },
            seed,
            **meta,
            summary=summary,
            wall_time_s=time.perf_counter() - t_run,
            resumed_from=run.start - 1,
            fingerprint=run.fp,
            fingerprint_parts=run.fp_parts,
        ),
    )
    return summary


def _own_checkpoint(ckpt_dir: Path, fp: str, name: str) -> Path | None:
    """The latest checkpoint under `ckpt_dir` if it has this run's fingerprint `fp`; checkpoints of any other
    fingerprint are discarded (saying so), and None means training starts from step 1."""
    resume = latest_checkpoint(ckpt_dir)
    if resume is not None and checkpoint_fingerprint(resume) != fp:
        print(
            f"{name}: checkpoint {resume} was made by another configuration, data, init or "
            f"code (fingerprint {str(checkpoint_fingerprint(resume))[:12]}, this run {fp[:12]}): discarding "
            "the checkpoints and starting from step 1",
            flush=True,
        )
        discard_checkpoints(ckpt_dir)
        resume = None
    return resume


def _save_final(ckpt_dir: Path, model: Any, tokenizer: Any) -> Path:
    """Write the final HF model to `<ckpt>/final` via a sibling temp folder (never a half-written final)."""
    final = ckpt_dir / "final"
    tmp = ckpt_dir / "final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def _finished(out_dir: Path, ckpt_dir: Path, fp: str) -> dict[str, Any] | None:
    """The summary of a finished run with fingerprint `fp` whose final model is intact, else None."""
    from exgrpo.records.io import read_json

    run_json, final = out_dir / "run.json", ckpt_dir / "final"
    if not (run_json.is_file() and (out_dir / TRAIN_LOG).is_file() and (final / "config.json").is_file()):
        return None
    try:
        record = read_json(run_json)
    except ValueError:
        return None
    summary = record.get("summary") or {}
    if record.get("fingerprint") != fp or summary.get("final_model_sha256") != model_dir_digest(final):
        return None
    return summary


def load_questions(
    data_dir: Path, split: str, tokenizer: Any, size: int = 0, difficulties: tuple[int, ...] = ()
) -> list[Question]:
    """A split of the tiny task as trainer questions (prompt token ids via the chat template).

    `difficulties` keeps the questions with those numbers of operations, then `size` (> 0) the first `size` of
    them in the split's stored order, which is shuffled (TrainerSettings.train_difficulties, train_size).
    """
    from exgrpo.testbed.splits import load_split
    from exgrpo.testbed.tokenizer import encode_prompt

    rows = [r for r in load_split(data_dir, split) if not difficulties or r["difficulty"] in difficulties]
    if size > 0:
        if size > len(rows):
            raise ConfigError(
                "train_size",
                f"{size} questions asked, {data_dir} has {len(rows)} in split {split!r}"
                + (f" of difficulty {list(difficulties)}" if difficulties else ""),
            )
        rows = rows[:size]
    if not rows:
        raise ConfigError(
            "train_difficulties", f"no question of difficulty {list(difficulties)} in {data_dir}"
        )
    return [
        Question(
            row["qid"],
            encode_prompt(tokenizer, row["prompt"]),
            str(row["answer"]),
            row["kind"],
            tuple(row.get("steps") or ()),
        )
        for row in rows
    ]


def _write_row(log: Any, row: dict[str, Any], tracker: Tracker) -> None:
    if row:
        log.write(json.dumps(row, sort_keys=True) + "\n")
        log.flush()
        tracker.log(row)


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the log rows up to the checkpoint's step (a kill may leave later rows or half a line)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a half-written last line from a kill
        if row.get("step", 0) <= last_step:
            kept.append(line)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{line}\n" for line in kept))
