"""IFBench (allenai/IFBench_test) scored by IFBench's own verification functions, vendored unchanged.

The checkers are AllenAI's (exgrpo/eval/third_party/ifbench: source commit, licence and the import-only
changes in its README.md). The loop that applies them follows IFBench's `evaluation_lib.py`
(`test_instruction_following_strict` / `_loose`): per instruction, build the checker from its registry id,
pass the row's kwargs with None values dropped (IFBench drops only None, unlike lm-eval's IFEval, which drops
every falsy value), re-build with the prompt when the checker takes one, and check the response (strict) or
any of the eight loose variants (exgrpo.eval.if_scoring.loose_variants); an empty response fails every
instruction. Table 2's number is prompt-level loose (IFBench's README; exgrpo.eval.if_scoring).

Needs emoji, syllapy, nltk, langdetect, immutabledict (the `cpu` extra) and nltk data (punkt, punkt_tab,
stopwords, averaged_perceptron_tagger_eng): on import the vendored code tries to download any that is
missing (upstream behaviour); offline the checkers that need them raise a LookupError naming the prompt and
the download command. Departure: langdetect is seeded (reproducible language verdicts).

Limits: checked on hand-made rows with known verdicts (tests/fixtures/ifbench_sample.jsonl) and on checkers
that need no nltk data; the hub's 300 rows, the checkers that need nltk data, and IFBench's own unit tests
(instructions_test.py, not vendored) were not run here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from exgrpo.eval.if_scoring import (
    IFVerdict,
    check_row,
    loose_variants,
    score_set,
    seed_langdetect,
    with_nltk_hint,
)


def _registry() -> ModuleType:
    """The vendored registry (imported late: it pulls nltk, emoji, syllapy and may try nltk downloads)."""
    try:
        from exgrpo.eval.third_party.ifbench import instructions_registry
    except ImportError as err:
        raise ImportError(
            f"IFBench scoring needs emoji, syllapy, nltk, langdetect, immutabledict: {err}"
        ) from err
    seed_langdetect()
    return instructions_registry


def known_instructions() -> frozenset[str]:
    """IFBench's instruction ids (its 58 new constraints and IFEval's classic ones), from its registry."""
    return frozenset(_registry().INSTRUCTION_DICT)


def _checker(instruction_id: str, kwargs: Mapping[str, Any], prompt: str) -> Any:
    """One instruction's checker, built as evaluation_lib builds it."""
    checker = _registry().INSTRUCTION_DICT[instruction_id](instruction_id)
    checker.build_description(**{k: v for k, v in kwargs.items() if v is not None})
    args = checker.get_instruction_args()
    if args and "prompt" in args:
        checker.build_description(prompt=prompt)
    return checker


def _holds(checker: Any, text: str, where: str) -> bool:
    """One checker on one text (nltk's missing-data error re-raised naming the prompt)."""
    return bool(with_nltk_hint(lambda: checker.check_following(text), where))


def score_ifbench(row: Mapping[str, Any], response: str, where: str = "ifbench") -> IFVerdict:
    """One prompt's strict and loose verdicts under IFBench's checkers."""
    here = f"{where}: key {row.get('key')!r}"
    check_row(row, known_instructions(), here)
    variants = [r for r in loose_variants(response) if r.strip()]
    strict, loose = [], []
    for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
        checker = _checker(instruction_id, kwargs, row["prompt"])
        at = f"{here}, instruction {instruction_id}"
        strict.append(bool(response.strip()) and _holds(checker, response, at))
        loose.append(any(_holds(checker, r, at) for r in variants))
    return IFVerdict(str(row["key"]), tuple(row["instruction_id_list"]), tuple(strict), tuple(loose))


def score_ifbench_set(
    rows: list[Mapping[str, Any]], responses: list[str], where: str = "ifbench"
) -> tuple[list[IFVerdict], dict[str, float]]:
    """Every prompt's verdicts and the four accuracies (one response per row, in order)."""
    return score_set(rows, responses, known_instructions(), score_ifbench, where)


__all__ = ["known_instructions", "score_ifbench", "score_ifbench_set"]
