"""What decides one evaluation: the decoding profile, the benchmarks' data, the backend and the grading.

Its own module so that the harness and the generation step (which the harness calls) both read it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exgrpo.eval.grading import GradingSettings
from exgrpo.eval.profiles import DecodingProfile


@dataclass
class EvalSettings:
    """Everything that decides what one evaluation generates and how it is graded."""

    profile: DecodingProfile
    seed: int = 0
    limit: int | None = None
    """First N problems of each benchmark (smoke runs); recorded in every file."""
    k: int | None = None
    """Override of the profile's k (only profiles with `k_configurable`)."""
    data_dir: str | None = None
    """Folder with local benchmark files (source schema) or the tiny splits; None = the hub."""
    prompt_format: str = "chat"
    grading: GradingSettings = field(default_factory=GradingSettings)
    n_boot: int = 1000
    batch_size: int | str = 8
    backend: str = "hf"
    """Backend that generates (`BACKENDS`); recorded in the cache and part of its identity."""
    max_model_len: int | None = None
    """vLLM context length (prompt + generation); None = the model's own, as the release."""
    reuse_other_versions: bool = False
    """Reuse a cache made with other grader or engine versions (`cache.VERSION_KEYS`) instead of recomputing it;
    the aggregate then records the differences (`reused_with_other_versions`)."""
    overlong_prompts: str = "auto"
    """A prompt whose tokens + max_new_tokens exceed the context: `filter` (drop and count it), `truncate`
    (lm-eval's left truncation) or `auto`: filter on vLLM, truncate on the CPU backends (`hf`, `tiny`, whose
    testbed caches were made that way)."""


__all__ = ["EvalSettings"]
