"""verl's names for the registry's metrics (`exgrpo.records.metrics`): the namespaces verl keeps under its own names, the
keys verl and its actor worker record the registry's metrics under, and the live renaming to the registry's names.

The plug-in (`exgrpo.verl_plugin`) and `exgrpo verl-collect` use these; the CPU trainer never does. Pure Python,
no verl import: the analysis reads collected logs with `is_verl_passthrough`.
"""

from __future__ import annotations

import re

from exgrpo.records.metrics import METRICS, VERL_VALIDATION_NAMESPACES, Metric

VERL_VAL_CORE_ACC = re.compile(r"^val-core/(?P<source>.+)/acc/mean@(?P<n>\d+)$")
"""verl's accuracy on one data source, mean@N over N samples per question: `VAL_BENCHMARK` is read from the
largest N logged."""

VERL_ACTOR_PREFIX = "actor/"
"""verl prefixes every metric an actor worker's loss returns with this: the worker reports `verl_key` without it."""


def worker_key(metric: Metric) -> str:
    """The key verl's actor worker returns a loss metric under (its `verl_key` less verl's `actor/` prefix)."""
    if metric.verl_key is None or not metric.verl_key.startswith(VERL_ACTOR_PREFIX):
        raise ValueError(f"{metric.name} is not a metric of verl's actor worker")
    return metric.verl_key.removeprefix(VERL_ACTOR_PREFIX)


VERL_NAMESPACES: tuple[str, ...] = (
    "actor/",
    "critic/",
    "training/",
    "validation/",
    "perf/",
    "rollout/",
    "rollout_corr/",
    "global_seqlen/",
    "response_length/",
    "response_length_non_aborted/",
    "prompt_length/",
    "num_turns/",
    "tool_call_counts/",
    "agent_loop/",
    "timing_s/",
    "timing_per_token_ms/",
    "response/",
    *VERL_VALIDATION_NAMESPACES,
    "verl/",
)
"""verl's own metric namespaces, kept in a collected log under their verl names (see verl's documentation).
`verl/` holds any other key verl logged that the registry does not know (verl-collect prefixes it)."""


def is_verl_passthrough(key: str) -> bool:
    """A verl metric kept under its own name (one of `VERL_NAMESPACES`)."""
    return key.startswith(VERL_NAMESPACES)


def verl_key_map() -> dict[str, str]:
    """verl / plug-in key -> results-log key, for every metric verl records under another name."""
    return {m.verl_key: m.name for m in METRICS if m.verl_key}


_LIVE_RENAMES = verl_key_map()


def live_names(metrics: dict[str, object]) -> dict[str, object]:
    """Rename, in place, every key verl or the plug-in records under another name (`Metric.verl_key`) to its
    registry name, and return the dict: the plug-in calls it on each step's metrics before verl's trackers log
    them, so console, file, TensorBoard and W&B show the CPU trainer's names live. Idempotent."""
    for key, name in _LIVE_RENAMES.items():
        if key in metrics:
            metrics[name] = metrics.pop(key)
    return metrics
