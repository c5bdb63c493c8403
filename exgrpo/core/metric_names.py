"""The names of the metrics the core computes for both runtimes (`exgrpo.core.step_metrics`), and the `Metric`
record every logged key is defined with.

Part of the metric registry, `exgrpo.records.metrics` (the results contract: every key of a training log, defined
once), which imports these and lists them with the rest; they live here because the core names what it computes
and depends on nothing outside the core and the configuration. Pure Python, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TINY, VERL = "tiny", "verl"
"""Runtime tags: the CPU trainer (exgrpo/tiny) and the verl plug-in (exgrpo/verl_plugin)."""
BOTH = frozenset({TINY, VERL})


@dataclass(frozen=True)
class Metric:
    """One logged key."""

    name: str
    """The key in the results log; `{k}` / `{name}` stand for an integer / a benchmark in a family of keys."""
    meaning: str
    """What the number is, and how each runtime computes it when they differ."""
    unit: str
    """fraction, count, tokens, nats, seconds, bytes, step, loss, ratio or flag (0/1)."""
    writers: frozenset[str]
    """Runtimes that write it (`TINY`, `VERL`)."""
    verl_key: str | None = None
    """The key verl's own logger records for it, when that differs from `name` (renamed by verl-collect)."""

    def pattern(self) -> re.Pattern[str]:
        """A regex matching the key, or every key of the family."""
        text = re.escape(self.name).replace(r"\{k\}", r"\d+").replace(r"\{name\}", r"[A-Za-z0-9_.@-]+")
        return re.compile(f"^{text}$")


def define(
    name: str, meaning: str, unit: str, writers: frozenset[str] | str = BOTH, verl_key: str | None = None
) -> Metric:
    """A `Metric`; `writers` is one runtime tag or a set of them (both runtimes by default)."""
    return Metric(
        name, meaning, unit, frozenset({writers}) if isinstance(writers, str) else writers, verl_key
    )


# ------------------------------------------------------------------------------------------ the step
PASS1 = define(
    "pass1",
    "Mean reward of the step's freshly generated rollouts (replayed o* excluded): batch pass@1, "
    "the delayed-start signal.",
    "fraction",
    verl_key="exgrpo/pass1",
)
REWARD_BATCH_MEAN = define(
    "reward/batch_mean",
    "Mean reward over every row the update trained on, replayed o* "
    "(reward 1 under the binary grader) included (verl: its critic/score/mean).",
    "fraction",
    verl_key="critic/score/mean",
)
ENTROPY = define(
    "entropy",
    "Token-mean entropy of the fresh responses under the policy that generated them (CPU: "
    "at sampling; verl: the old-policy recomputation before the update).",
    "nats",
    verl_key="exgrpo/entropy",
)
RESPONSE_LENGTH = define(
    "response_length",
    "Mean response length of the fresh rollouts.",
    "tokens",
    verl_key="exgrpo/response_length",
)
TRUNCATED_FRACTION = define("truncated_fraction", "Fresh rollouts that hit the length cap.", "fraction", TINY)
REPLAY_QUESTIONS = define(
    "replay/n_trajectories",
    "Replayed questions (one o* each) in the step.",
    "count",
    verl_key="exgrpo/replay_questions",
)
MIXED_FRACTION = define(
    "groups/mixed_fraction",
    "Mixed groups: 0 < k < K successes (k as trained); under reward_std, groups whose rewards are not all equal"
    " (core.step.step_stats).",
    "fraction",
    verl_key="exgrpo/mixed_fraction",
)
MASKED_QUESTIONS = define(
    "masked/questions",
    "Questions that got gradient under the difficulty mask (all of them without one).",
    "count",
    verl_key="exgrpo/masked_questions",
)
GROUP_BUCKET = define(
    "exp/bucket_{k}",
    "Groups of the step with k successes (as trained); under reward_std, with key round(σ̃·K) = k (core.step.step_stats).",
    "count",
)
TRAINING_QUESTIONS = define(
    "data/training_questions",
    "Questions left in the training data (retired pruned at epoch boundaries).",
    "count",
    verl_key="exgrpo/training_questions",
)
DATA_EPOCH = define("data/epoch", "Epoch of the data order (0-based).", "count", verl_key="exgrpo/data_epoch")
# ------------------------------------------------------------------------------------------ plug-in only
FRESH_QUESTIONS = define("exgrpo/fresh_questions", "Fresh questions in the step.", "count", VERL)
REPLAY_ROWS = define("exgrpo/replay_rows", "Replayed rows in the step's batch.", "count", VERL)
REPLAY_REWARD_MEAN = define(
    "exgrpo/replay_reward_mean",
    "Mean reward of the replayed rows (1 by construction under the binary grader).",
    "fraction",
    VERL,
)
REPLAY_AGE_MEAN = define(
    "exgrpo/replay_age_mean", "Mean age in steps of the replayed trajectories.", "step", VERL
)
SAMPLE_FRAC = define(
    "exgrpo/sample_frac", "Rows that get gradient under the difficulty mask.", "fraction", VERL
)
SELECTION_CANDIDATES = define(
    "exgrpo/selection_candidates", "Candidate trajectories scored for the step's o*.", "count", VERL
)
SHORT_GROUPS = define(
    "exgrpo/short_groups",
    "Groups trained with fewer than K rollouts (failed agent-loop sessions; core.step.step_stats).",
    "count",
    VERL,
)
MISSING_ROLLOUTS = define("exgrpo/missing_rollouts", "Rollouts the short groups lack.", "count", VERL)
FAILED_PROMPTS = define(
    "exgrpo/failed_prompts",
    "Submitted prompts with no rollout back at all (not trained, not recorded).",
    "count",
    VERL,
)


__all__ = [
    "BOTH",
    "DATA_EPOCH",
    "ENTROPY",
    "FAILED_PROMPTS",
    "FRESH_QUESTIONS",
    "GROUP_BUCKET",
    "MASKED_QUESTIONS",
    "MISSING_ROLLOUTS",
    "MIXED_FRACTION",
    "Metric",
    "PASS1",
    "REPLAY_AGE_MEAN",
    "REPLAY_QUESTIONS",
    "REPLAY_REWARD_MEAN",
    "REPLAY_ROWS",
    "RESPONSE_LENGTH",
    "REWARD_BATCH_MEAN",
    "SAMPLE_FRAC",
    "SELECTION_CANDIDATES",
    "SHORT_GROUPS",
    "TINY",
    "TRAINING_QUESTIONS",
    "TRUNCATED_FRACTION",
    "VERL",
    "define",
]
