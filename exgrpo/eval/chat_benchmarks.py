"""Table 2's benchmarks (paper §5.3): instruction following and chat, registered beside the math registry.

The paper evaluates its continuous-reward runs on ArenaHardV2, IFEval and IFBench and says nothing more (no
hub ids, versions, judges or metrics). They are registered here with what is known, so a study can name them
(`benchmarks.chat_if` in config/config.yaml) and the workflow plans their evaluation jobs. `scored` says whether a
scorer exists: Arena-Hard v2's does and `exgrpo eval` runs it (exgrpo.eval.arena_hard); IFEval's and IFBench's do
(exgrpo.eval.ifeval_scorer, exgrpo.eval.ifbench_scorer: a pure function from a hub row and a response to strict
and loose verdicts, and the four accuracies; exgrpo.eval.if_eval_files writes the eval file pair), but `exgrpo
eval` still refuses these two by name (`NOT_GENERATED`): the harness's benchmarks are question/answer documents
graded per sample, and nothing yet feeds a hub row's `prompt` through the backends to the scorer.

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
    """A scorer exists (module docstring); `refuse_unscored` refuses by name those without one."""


CHAT_BENCHMARKS: dict[str, ChatBenchmark] = {
    b.name: b
    for b in (
        ChatBenchmark(
            "arenahard_v2",
            "ArenaHardV2",
            "lmarena-ai/arena-hard-auto (v2.0 prompts; inferred)",
            "pairwise LLM judge against each category's baseline answers, two position-swapped games, plain "
            "and style-controlled win rates (exgrpo.eval.arena_hard; judge not stated by the paper)",
            scored=True,
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

NOT_GENERATED = ("ifeval", "ifbench")
"""Scored, but `exgrpo eval` cannot yet generate their responses (module docstring): refused by name."""


def refuse_unscored(names: list[str]) -> None:
    """`exgrpo eval` on a Table 2 benchmark: refused by name, saying what is missing (module docstring)."""
    unscored = [n for n in names if n in CHAT_BENCHMARKS and not CHAT_BENCHMARKS[n].scored]
    if unscored:
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(unscored)}: Table 2's benchmarks are registered (exgrpo.eval.chat_benchmarks) but "
            "have no scorer yet (docs/studies.md, Table 2 at paper scale)",
        )
    ungenerated = [n for n in names if n in NOT_GENERATED]
    if ungenerated:
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(ungenerated)}: scored by exgrpo.eval.ifeval_scorer / ifbench_scorer, but `exgrpo "
            "eval` does not generate their responses yet (docs/studies.md, Table 2 at paper scale)",
        )


__all__ = ["CHAT_BENCHMARKS", "NOT_GENERATED", "ChatBenchmark", "refuse_unscored"]
