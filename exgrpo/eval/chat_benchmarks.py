"""Table 2's benchmarks (paper §5.3): instruction following and chat, registered beside the math registry.

The paper evaluates its continuous-reward runs on ArenaHardV2, IFEval and IFBench and says nothing more (no
hub ids, versions, judges or metrics). They are registered here with what is known, so a study can name them
(`benchmarks.chat_if` in config/config.yaml) and the workflow plans their evaluation jobs. `scored` says whether a
scorer exists: IFEval's and IFBench's do (exgrpo.eval.ifeval_scorer, exgrpo.eval.ifbench_scorer: a pure function
from a hub row and a response to strict and loose verdicts, and the four accuracies), Arena-Hard v2's not yet.
`exgrpo eval` still refuses all three by name, each with its reason: no scorer (arenahard_v2), or a scorer but
no generation path (ifeval, ifbench: the harness's benchmarks are question/answer documents graded per sample,
and nothing yet feeds a hub row's `prompt` through the backends and hands the completion to the scorer).

What is known, and what is inferred (the setup §5.3 follows is RLMT's: WildChat-IF prompts, the Skywork reward
model, these three benchmarks):
- `ifeval`: Google's IFEval (`google/IFEval`, 541 prompts with verifiable instructions); lm-eval ships it as
  task `ifeval`. Which of its four accuracies the paper reports is not stated.
- `ifbench`: AllenAI's IFBench (inferred: `allenai/IFBench_test`), out-of-domain verifiable constraints
  checked by its own verification code (vendored: exgrpo/eval/third_party/ifbench); its README says its
  paper reports prompt-level loose accuracy.
- `arenahard_v2`: Arena-Hard-Auto v2.0 (inferred: lmarena-ai/arena-hard-auto), a pairwise LLM judge against a
  baseline model's answers; the judge and baseline the paper used are not stated.
"""

from __future__ import annotations

from dataclasses import dataclass

from exgrpo.core.config import ConfigError


@dataclass(frozen=True)
class ChatBenchmark:
    """One of Table 2's evaluation sets."""

    name: str
    """Registry key (the `<benchmark>` of result file names; results/paper/table2.csv uses the same)."""
    label: str
    source: str
    """Hub dataset (or repository) the prompts come from; inferred where the paper names none."""
    scorer: str
    """How it is scored (what an implementation must reproduce)."""
    lm_eval_task: str | None = None
    """lm-eval's own task, where one exists."""
    n_rows: int | None = None
    """Prompts in the set, where known."""
    scored: bool = False
    """A scorer exists (module docstring); `refuse_unscored` consults it."""


CHAT_BENCHMARKS: dict[str, ChatBenchmark] = {
    b.name: b
    for b in (
        ChatBenchmark(
            "arenahard_v2",
            "ArenaHardV2",
            "lmarena-ai/arena-hard-auto (v2.0 prompts; inferred)",
            "pairwise LLM judge against a baseline model's answers (judge and baseline not stated)",
        ),
        ChatBenchmark(
            "ifeval",
            "IFEval",
            "google/IFEval",
            "lm-eval's ifeval checks, strict and loose; Table 2: prompt-level loose (inferred)",
            lm_eval_task="ifeval",
            n_rows=541,
            scored=True,
        ),
        ChatBenchmark(
            "ifbench",
            "IFBench",
            "allenai/IFBench_test (inferred)",
            "IFBench's own verification functions (vendored), strict and loose; Table 2: prompt-level loose",
            n_rows=300,
            scored=True,
        ),
    )
}
"""Table 2's three benchmarks, in the paper's column order."""


def refuse_unscored(names: list[str]) -> None:
    """`exgrpo eval` on a Table 2 benchmark: refused by name, saying what is missing (module docstring)."""
    unscored = [n for n in names if n in CHAT_BENCHMARKS and not CHAT_BENCHMARKS[n].scored]
    if unscored:
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(unscored)}: Table 2's benchmarks are registered (exgrpo.eval.chat_benchmarks) but "
            "have no scorer yet (docs/studies.md, Table 2 at paper scale)",
        )
    ungenerated = [n for n in names if n in CHAT_BENCHMARKS]
    if ungenerated:
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(ungenerated)}: scored by exgrpo.eval.ifeval_scorer / ifbench_scorer, but `exgrpo "
            "eval` does not generate their responses yet (docs/studies.md, Table 2 at paper scale)",
        )


__all__ = ["CHAT_BENCHMARKS", "ChatBenchmark", "refuse_unscored"]
