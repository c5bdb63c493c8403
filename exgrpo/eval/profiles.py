"""Decoding profiles: how every evaluation samples, named in every result (paper §5.1; docs/evaluation.md).

- `paper`: temperature 0.6, top-p 1.0, 8,192 new tokens; avg@32 on AIME24, AIME25 and AMC, one sample
  elsewhere; the model's chat template with the system prompt removed (released `generate_vllm.py`,
  `--remove_system True`); graded by the `release` grader (the release's OAT label). k is fixed: a
  different k is not the paper's protocol (use `community`). The other profiles grade with `strict`.
- `community`: temperature 0.6, top-p 0.95 (the DeepSeek-R1 / DeepScaleR / Unify-Post-Training
  re-evaluation protocol), 8,192 new tokens; the same k per benchmark as `paper` unless `--k` sets one
  k for every benchmark.
- `tiny`: the CPU testbed. Temperature 0.6, top-p 1.0 (the paper's evaluation temperature, and the
  tiny trainer's validation temperature, so tiny and paper-scale numbers are read the same way), 80
  new tokens (tiny responses are at most ~65 tokens, docs/testbed.md), k = 4 everywhere.

Departure from the release, stated up front: the release gets avg@32 by duplicating each problem 32
times in the test parquet; here k samples are drawn per problem (lm-eval `repeats`) and recorded with
their sample index, so avg@k, pass@k and maj@k are computed from the same explicit samples
(`exgrpo.eval.metrics`). `metrics.collapse_duplicated_rows` shows the two give the same avg@k.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.suggest import unknown

_PAPER_K = MappingProxyType({"aime24": 32, "aime25": 32, "amc": 32})
"""Benchmarks the paper reports as Avg@32 (paper §5.1); every other benchmark gets one sample."""


@dataclass(frozen=True)
class DecodingProfile:
    """One way of sampling answers. Every aggregate file names its profile and records these values."""

    name: str
    """Registry key, also the `<profile>` part of the result file names."""
    temperature: float
    """Sampling temperature."""
    top_p: float
    """Nucleus sampling mass (1.0 = off)."""
    max_new_tokens: int
    """Cap on generated tokens per sample; a sample that reaches it is marked `truncated`."""
    k_default: int
    """Samples per problem for benchmarks not listed in `k_by_benchmark`."""
    k_by_benchmark: Mapping[str, int] = field(default_factory=dict)
    """Per-benchmark k (the paper's avg@32 sets)."""
    k_configurable: bool = True
    """Whether `--k` may override k (False for `paper`, whose k is part of the protocol)."""
    grader: str = "strict"
    """Evaluation grader by default (`exgrpo.eval.grading.GRADERS`): `release` grades as the paper's tables
    were graded (the release's OAT label), `strict` with the training reward's math-verify rule."""
    system_prompt: str | None = None
    """System message given to the chat template; None = no system message (released `--remove_system`)."""
    description: str = ""
    """One line for tables and provenance."""

    def k_for(self, benchmark: str, override: int | None = None) -> int:
        """Samples per problem for `benchmark`; `override` (from `--k`) replaces every per-benchmark k."""
        if override is not None:
            if not self.k_configurable:
                raise ConfigError(
                    "k",
                    f"profile {self.name!r} fixes k per benchmark (avg@32 on AIME24/AIME25/AMC, "
                    f"1 elsewhere); use --profile community to choose k",
                )
            if override < 1:
                raise ConfigError("k", f"must be >= 1, got {override}")
            return override
        return int(self.k_by_benchmark.get(benchmark, self.k_default))

    def gen_kwargs(self) -> dict[str, Any]:
        """lm-eval `generation_kwargs` for this profile (same keys for the HF and vLLM backends).

        `until: []` leaves only the model's end-of-sequence token as a stop (lm-eval adds it), so long
        reasoning is never cut at a blank line.
        """
        return {
            "do_sample": True,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_gen_toks": self.max_new_tokens,
            "until": [],
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for provenance blocks."""
        return {
            f.name: (dict(getattr(self, f.name)) if f.name == "k_by_benchmark" else getattr(self, f.name))
            for f in fields(self)
        }


PROFILES: dict[str, DecodingProfile] = {
    "paper": DecodingProfile(
        name="paper",
        temperature=0.6,
        top_p=1.0,
        max_new_tokens=8192,
        k_default=1,
        k_by_benchmark=_PAPER_K,
        k_configurable=False,
        grader="release",
        description="ExGRPO release: T=0.6, top-p 1.0, 8192 tokens, avg@32 on AIME24/AIME25/AMC, 1 sample elsewhere, "
        "chat template without system prompt, the release's grader",
    ),
    "community": DecodingProfile(
        name="community",
        temperature=0.6,
        top_p=0.95,
        max_new_tokens=8192,
        k_default=1,
        k_by_benchmark=_PAPER_K,
        description="T=0.6, top-p 0.95, 8192 tokens; k as in `paper` unless --k sets one k for all benchmarks",
    ),
    "tiny": DecodingProfile(
        name="tiny",
        temperature=0.6,
        top_p=1.0,
        max_new_tokens=80,
        k_default=4,
        description="CPU testbed: T=0.6, top-p 1.0, 80 tokens, avg@4",
    ),
}
"""All decoding profiles by name."""


def get_profile(name: str) -> DecodingProfile:
    """The profile called `name`; an unknown name is a ConfigError listing the known ones."""
    if name not in PROFILES:
        raise ConfigError("profile", unknown("decoding profile", name, PROFILES))
    return PROFILES[name]


__all__ = ["PROFILES", "DecodingProfile", "get_profile"]
