"""Table 2's benchmarks (paper §5.3): instruction following and chat, registered beside the math registry.

The paper evaluates its continuous-reward runs on ArenaHardV2, IFEval and IFBench and says nothing more (no
hub ids, versions, judges or metrics). They are registered here with what is known, so a study can name them
(`benchmarks.chat_if` in config/config.yaml) and the workflow plans their evaluation jobs; `exgrpo eval`
refuses by name those not `scored` yet instead of scoring them some other way (arenahard_v2 is scored:
exgrpo.eval.arena_hard).

What is known, and what is inferred (the setup §5.3 follows is RLMT's: WildChat-IF prompts, the Skywork reward
model, these three benchmarks):
- `ifeval`: Google's IFEval (`google/IFEval`, 541 prompts with verifiable instructions); lm-eval ships it as
  task `ifeval`. Which of its four accuracies the paper reports is not stated.
- `ifbench`: AllenAI's IFBench (inferred: `allenai/IFBench_test`), out-of-domain verifiable constraints
  checked by its own verification code.
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
    """`exgrpo eval` scores it (True) or refuses it by name (False)."""


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
            "rule checks of verifiable instructions (which accuracy: not stated)",
            lm_eval_task="ifeval",
            n_rows=541,
        ),
        ChatBenchmark(
            "ifbench",
            "IFBench",
            "allenai/IFBench_test (inferred)",
            "IFBench's own constraint verification code (not in lm-eval)",
        ),
    )
}
"""Table 2's three benchmarks, in the paper's column order."""


def refuse_unscored(names: list[str]) -> None:
    """`exgrpo eval` on a Table 2 benchmark: refused by name (no scorer is wired; module docstring)."""
    chat = [n for n in names if n in CHAT_BENCHMARKS and not CHAT_BENCHMARKS[n].scored]
    if chat:
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(chat)}: Table 2's benchmarks are registered (exgrpo.eval.chat_benchmarks) but not "
            "scored by `exgrpo eval` yet (docs/studies.md, Table 2 at paper scale)",
        )


__all__ = ["CHAT_BENCHMARKS", "ChatBenchmark", "refuse_unscored"]
