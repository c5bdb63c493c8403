"""Table 2's benchmarks (paper §5.3): instruction following and chat, registered beside the math registry.

The paper evaluates its continuous-reward runs on ArenaHardV2, IFEval and IFBench and says nothing more (no
hub ids, versions, judges or metrics). They are registered here with what is known, so a study can name them
(`benchmarks.chat_if` in config/config.yaml) and the workflow plans their evaluation jobs. `scored` says whether a
scorer exists: all three have one (exgrpo.eval.arena_hard: a pairwise judge; exgrpo.eval.ifeval_scorer,
exgrpo.eval.ifbench_scorer: a pure function from a hub row and a response to strict and loose verdicts), and
`exgrpo eval` runs them, all three in one call if asked (exgrpo.eval.chat_run): every prompt goes through the
backend as one user turn of the backbone's chat template (exgrpo.eval.chat_generation), the IF sets are scored
and written as an eval file pair (exgrpo.eval.if_eval_files), Arena-Hard's answers are judged last.
`NOT_GENERATED` is empty: a benchmark scored but without a generation path would be refused there by name.
Where the rows come from: `hub_id` (read from the hub cache, offline, as lm-eval's `ifeval` task reads
google/IFEval by repo id) and `hub_files` (the rows inside that repo), unless `--data` holds a local copy
(exgrpo.eval.chat_inputs).

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
    hub_id: str | None = None
    """The hub dataset repo its rows are read from (the hub cache, offline; exgrpo.eval.chat_inputs)."""
    hub_files: str | None = None
    """The rows inside that repo: a file glob (IF sets) or Arena-Hard's folder."""


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
            hub_id="lmarena-ai/arena-hard-auto",
            hub_files="data/arena-hard-v2.0",
        ),
        ChatBenchmark(
            "ifeval",
            "IFEval",
            "google/IFEval",
            "lm-eval's ifeval checks, strict and loose; Table 2: prompt-level loose (inferred)",
            lm_eval_task="ifeval",
            n_rows=541,
            scored=True,
            hub_id="google/IFEval",
            hub_files="ifeval_input_data.jsonl",
        ),
        ChatBenchmark(
            "ifbench",
            "IFBench",
            "allenai/IFBench_test (inferred)",
            "IFBench's own verification functions (vendored), strict and loose; Table 2: prompt-level loose",
            n_rows=300,
            scored=True,
            hub_id="allenai/IFBench_test",
            hub_files="data/train-*.parquet",
        ),
    )
}
"""Table 2's three benchmarks, in the paper's column order."""

NOT_GENERATED: tuple[str, ...] = ()
"""Scored, but `exgrpo eval` cannot generate their responses (none now: module docstring): refused by name."""


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
            f"{', '.join(ungenerated)}: scored, but `exgrpo eval` does not generate their responses "
            "(docs/studies.md, Table 2 at paper scale)",
        )


def is_chat(names: list[str]) -> bool:
    """Whether `--benchmarks` names Table 2's benchmarks; mixing them with math benchmarks is refused (their
    files, grading and judge differ; the workflow runs them in their own job). Here, not in chat_run, so that
    `exgrpo eval` checks its flags before importing pandas and the backends."""
    chat = [n for n in names if n in CHAT_BENCHMARKS]
    if chat and len(chat) != len(names):
        others = [n for n in names if n not in CHAT_BENCHMARKS]
        raise ConfigError(
            "--benchmarks",
            f"{', '.join(chat)} (Table 2's) are evaluated apart from {', '.join(others)}: one call each",
        )
    return bool(chat)


__all__ = ["CHAT_BENCHMARKS", "NOT_GENERATED", "ChatBenchmark", "is_chat", "refuse_unscored"]
