"""Every key of a training log, defined once: its name, meaning, unit and the runtimes that write it.

A results log (`results/<source>/train/.../log.jsonl.gz`, results/README.md) has the same keys whichever
runtime made it. The step's counts are computed and named once, by the core (`exgrpo.core.step_metrics`; their
names are defined in `exgrpo.core.metric_names` and listed here with the rest), and both runtimes log them under
these names, each the ones `writers` lists it for (`logged_by`). verl computes some others under
its own namespaces (`actor/exgrpo/...`, `critic/score/mean`, `timing_s/...`: `Metric.verl_key`), and the plug-in
renames them to these names before verl's trackers log them (`exgrpo.records.metrics_verl.live_names`), so both runtimes
show one vocabulary live; `exgrpo verl-collect` applies the same map (`metrics_verl.verl_key_map`) to read logs written before that (where the
plug-in's own counts were `exgrpo/...` keys).
`analysis.loader` checks every training log against `lookup`: an
unknown key is an error naming it. Pure Python, no torch: the analysis imports it without a runtime.

Where a metric is computed differently by the two runtimes, its meaning says how, and it is a number of the
same quantity. Keys verl computes itself and the project does not interpret (its perf, timing and actor
statistics) pass through under their verl names: `metrics_verl.VERL_NAMESPACES`.
"""

from __future__ import annotations

from exgrpo.core.metric_names import (
    BOTH,
    DATA_EPOCH,
    ENTROPY,
    FAILED_PROMPTS,
    FRESH_QUESTIONS,
    GROUP_BUCKET,
    MASKED_QUESTIONS,
    MISSING_ROLLOUTS,
    MIXED_FRACTION,
    PASS1,
    REPLAY_AGE_MEAN,
    REPLAY_QUESTIONS,
    REPLAY_REWARD_MEAN,
    REPLAY_ROWS,
    RESPONSE_LENGTH,
    REWARD_BATCH_MEAN,
    SAMPLE_FRAC,
    SELECTION_CANDIDATES,
    SHORT_GROUPS,
    TINY,
    TRAINING_QUESTIONS,
    TRUNCATED_FRACTION,
    VERL,
    Metric,
    define,
)

# ------------------------------------------------------------------------------------------ the step
STEP = define("step", "Training step (1-based); validation rows carry the step they follow.", "step")
TIME_SELECTION = define(
    "time/selection",
    "Seconds choosing o* (scoring the candidates).",
    "seconds",
    verl_key="exgrpo/selection_seconds",
)
TIME_ROLLOUT = define(
    "time/rollout",
    "Seconds generating rollouts (CPU: with grading; verl: its timing_s/gen).",
    "seconds",
    verl_key="timing_s/gen",
)
TIME_UPDATE = define(
    "time/update",
    "Seconds of the actor update (CPU: with batch assembly).",
    "seconds",
    verl_key="timing_s/update_actor",
)
TIME_STEP = define("time/step", "Seconds of the whole step.", "seconds", verl_key="timing_s/step")
VAL_PREFIX = "val/"
"""The prefix of the validation keys of a results log (`VAL_ACC`, `VAL_BENCHMARK`)."""
VAL_ACC = define(
    "val/acc",
    "Validation accuracy (CPU: one sample per question at T=0.6; verl: the unweighted mean "
    "of val/<benchmark>).",
    "fraction",
)
VAL_BENCHMARK = define(
    "val/{name}",
    "Validation accuracy on one benchmark (verl: val-core/<source>/acc/mean@N, the largest N).",
    "fraction",
    VERL,
)
VERL_VALIDATION_NAMESPACES: tuple[str, ...] = ("val-core/", "val-aux/")
"""verl's validation namespaces: verl-collect puts a metric under one of them on the step's validation row."""


def val_benchmark_key(benchmark: str) -> str:
    """The `VAL_BENCHMARK` key of one benchmark (`val/aime24`)."""
    return VAL_BENCHMARK.name.format(name=benchmark)


def is_validation_key(key: str) -> bool:
    """A validation metric: a results log's `val/...` or one of verl's validation namespaces."""
    return key.startswith((VAL_PREFIX, *VERL_VALIDATION_NAMESPACES))


# ------------------------------------------------------------------------------------------ the experience manager
_EXP = {
    "active": ("Replay is active (the delayed start has switched).", "flag"),
    "collecting": ("The step's groups were collected into the buffer.", "flag"),
    "activation_step": ("Step at which replay activated; -1 before.", "step"),
    "groups": ("Groups handed to the manager this step.", "count"),
    "stored": ("Trajectories stored this step.", "count"),
    "duplicates": ("Stored trajectories that duplicated one already buffered.", "count"),
    "buffered_questions": ("Questions in the experience buffer.", "count"),
    "buffered_trajectories": ("Trajectories in the experience buffer.", "count"),
    "buffered_tokens": ("Response tokens in the experience buffer.", "tokens"),
    "eligible_questions": ("Buffered questions in a replayable bucket.", "count"),
    "retired": ("Retired questions (all rollouts correct), in total.", "count"),
    "retired_this_step": ("Questions retired this step.", "count"),
    "reviewed": ("Retired questions brought back for review this step.", "count"),
    "buffer_payload_bytes": ("Stored token ids + log-probs (8 B/token).", "bytes"),
    "mean_key": ("Mean bucket key of the step's groups (success count, or the reward-std bucket).", "count"),
}
EXPERIENCE = tuple(define(f"exp/{key}", meaning, unit) for key, (meaning, unit) in _EXP.items())
EXPERIENCE_BY_NAME = {m.name: m for m in EXPERIENCE}
BUFFER_BUCKET = define("exp/buffer_bucket_{k}", "Eligible buffered questions in bucket k.", "count")

# ------------------------------------------------------------------------------------------ the reward (CPU trainer)
_REWARD = {
    "graded": ("Responses graded this step.", "count"),
    "correct": ("Graded correct.", "count"),
    "timeouts": ("Grades that timed out.", "count"),
    "parse_errors": ("Unparsable answers.", "count"),
    "no_think_close": ("Responses without </think>.", "count"),
    "no_answer": ("Responses without an answer.", "count"),
    "errors": ("Grader errors.", "count"),
    "math_verify_calls": ("math-verify calls.", "count"),
    "pool_restarts": ("Grader pool restarts.", "count"),
    "seconds": ("Seconds grading.", "seconds"),
    "correct_rate": ("correct / graded.", "fraction"),
    "timeout_rate": ("timeouts / graded.", "fraction"),
    "parse_error_rate": ("parse_errors / graded.", "fraction"),
    "no_think_close_rate": ("no_think_close / graded.", "fraction"),
    "no_answer_rate": ("no_answer / graded.", "fraction"),
    "error_rate": ("errors / graded.", "fraction"),
}
REWARD_COUNTERS = tuple(
    define(f"reward/{key}", f"Verifier: {meaning}", unit, TINY) for key, (meaning, unit) in _REWARD.items()
)

# ------------------------------------------------------------------------------------------ the update (the loss)
_UPDATE = {
    "loss": (
        "Loss of each loss call on its own batch (CPU: a mini-batch; verl: a micro-batch), averaged.",
        "loss",
    ),
    "pg_loss": ("Policy term of `loss`.", "loss"),
    "on_tokens": ("Fresh response tokens per loss call.", "tokens"),
    "replay_tokens": ("Replayed response tokens per loss call.", "tokens"),
    "clipfrac": ("Fresh tokens on PPO's clipped branch.", "fraction"),
    "ppo_kl": ("Mean log π_θold − log π_θ over fresh tokens.", "nats"),
    "on_ratio_mean": ("Mean π_θ/π_θold over fresh tokens.", "ratio"),
    "sample_frac": ("Rows that got gradient (difficulty mask).", "fraction"),
    "replay_ratio_mean": ("Mean w* over replayed tokens.", "ratio"),
    "replay_ratio_max": ("Largest w* over replayed tokens.", "ratio"),
    "replay_weight_mean": ("Mean shaped weight f(w*) (or clip(w*), w*) over replayed tokens.", "ratio"),
    "replay_clipfrac": ("Replayed tokens on the clipped branch (`clipped` shaping).", "fraction"),
    "entropy": ("Token-mean entropy in the update's forward pass, all rows.", "nats"),
    "kl": ("Token-mean k3 KL to the reference (kl_coef > 0).", "nats"),
}
UPDATE = tuple(
    define(f"update/{key}", meaning, unit, verl_key=f"actor/exgrpo/{key}")
    for key, (meaning, unit) in _UPDATE.items()
)
GRAD_NORM = define(
    "update/grad_norm",
    "Gradient norm before clipping, averaged over optimizer steps.",
    "ratio",
    verl_key="actor/grad_norm",
)
SKIPPED_STEPS = define(
    "update/skipped_steps",
    "Optimizer steps skipped (non-finite or > skip_grad_bound grad norm).",
    "count",
    TINY,
)
REPLAY_ACTIVE_IN_LOSS = define(
    "update/replay_active",
    "The loss ran in mixed-policy mode.",
    "flag",
    VERL,
    verl_key="actor/exgrpo/replay_active",
)
UPDATE_BY_KEY: dict[str, Metric] = {
    m.name.removeprefix("update/"): m for m in (*UPDATE, GRAD_NORM, SKIPPED_STEPS, REPLAY_ACTIVE_IN_LOSS)
}
"""The update's metrics by the key the core loss (`core.loss_batch.loss_metrics`) and the trainers report them
under (`pg_loss`, `grad_norm`, ...)."""
# ------------------------------------------------------------------------------------------ plug-in only
FAILED_SESSIONS = define(
    "exgrpo/failed_sessions",
    "Rollout sessions of the step that failed: K per submitted prompt minus the rows "
    "back (verl_plugin.failures, the failure budget).",
    "count",
    VERL,
)
FAILED_SESSION_SHARE = define(
    "exgrpo/failed_session_share",
    "failed_sessions / (K x submitted prompts); past the failure budget's max_failed_share the run stops.",
    "fraction",
    VERL,
)
PLUGIN = (
    FRESH_QUESTIONS,
    REPLAY_ROWS,
    REPLAY_REWARD_MEAN,
    REPLAY_AGE_MEAN,
    SAMPLE_FRAC,
    SELECTION_CANDIDATES,
    SHORT_GROUPS,
    MISSING_ROLLOUTS,
    FAILED_PROMPTS,
    FAILED_SESSIONS,
    FAILED_SESSION_SHARE,
)

METRICS: tuple[Metric, ...] = (
    STEP,
    PASS1,
    REWARD_BATCH_MEAN,
    ENTROPY,
    RESPONSE_LENGTH,
    TRUNCATED_FRACTION,
    REPLAY_QUESTIONS,
    MIXED_FRACTION,
    MASKED_QUESTIONS,
    GROUP_BUCKET,
    TRAINING_QUESTIONS,
    DATA_EPOCH,
    TIME_SELECTION,
    TIME_ROLLOUT,
    TIME_UPDATE,
    TIME_STEP,
    VAL_ACC,
    VAL_BENCHMARK,
    *EXPERIENCE,
    BUFFER_BUCKET,
    *REWARD_COUNTERS,
    *UPDATE,
    GRAD_NORM,
    SKIPPED_STEPS,
    REPLAY_ACTIVE_IN_LOSS,
    *PLUGIN,
)
"""The registry: every key of a training log."""

LEGACY_ALIASES: dict[str, str] = {
    "reward/mean": "pass1",
}
"""Keys of logs written before this registry -> the key that holds the same number. `reward/mean` meant the
fresh-rollout mean (= pass1) in the CPU trainer's logs and the all-rows mean in the plug-in's; the loader
accepts it where it equals `pass1` on every row (the committed CPU logs) and drops it."""


def _index() -> tuple[dict[str, Metric], list[Metric]]:
    exact, families = {}, []
    for metric in METRICS:
        if "{" in metric.name:
            families.append(metric)
        elif metric.name in exact:
            raise ValueError(f"metric {metric.name!r} is registered twice")
        else:
            exact[metric.name] = metric
    return exact, families


_EXACT, _FAMILIES = _index()


def lookup(key: str) -> Metric | None:
    """The registered metric of a results-log key (an exact name or a family member); None if unknown."""
    if key in _EXACT:
        return _EXACT[key]
    return next((m for m in _FAMILIES if m.pattern().match(key)), None)


def logged_by(metrics: dict[str, float], runtime: str) -> dict[str, float]:
    """The metrics a runtime (`TINY`, `VERL`) writes, by the registry's `writers`; an unregistered key is a
    bug (the results loader would refuse the log)."""
    out = {}
    for key, value in metrics.items():
        metric = lookup(key)
        if metric is None:
            raise KeyError(f"step metric {key!r} is not in the metric registry (exgrpo/records/metrics.py)")
        if runtime in metric.writers:
            out[key] = value
    return out


def written_by(runtime: str) -> list[Metric]:
    """The metrics a runtime writes."""
    return [m for m in METRICS if runtime in m.writers]


def markdown_table() -> str:
    """The registry as a Markdown table (`python -m exgrpo.records.metrics`)."""
    rows = ["| key | meaning | unit | written by | verl key |", "|---|---|---|---|---|"]
    for m in METRICS:
        verl = f"`{m.verl_key}`" if m.verl_key else ""
        rows.append(f"| `{m.name}` | {m.meaning} | {m.unit} | {', '.join(sorted(m.writers))} | {verl} |")
    return "\n".join(rows)


__all__ = [
    "BOTH",
    "LEGACY_ALIASES",
    "METRICS",
    "TINY",
    "UPDATE_BY_KEY",
    "VERL",
    "VERL_VALIDATION_NAMESPACES",
    "Metric",
    "is_validation_key",
    "logged_by",
    "lookup",
    "markdown_table",
    "val_benchmark_key",
    "written_by",
]

if __name__ == "__main__":
    print(markdown_table())
