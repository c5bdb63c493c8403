"""IFEval (google/IFEval) scored by lm-eval 0.4's own `ifeval` task code, so its verdicts are lm-eval's.

`score_ifeval(row, response)` hands the row (hub columns: key, prompt, instruction_id_list, kwargs) and the
response to `lm_eval.tasks.ifeval.utils.process_results`, the function lm-eval's task calls per document, and
returns its strict and loose verdicts; `score_ifeval_set` adds the four accuracies (exgrpo.eval.if_scoring:
which one Table 2 reports and why). Needs lm-eval's `ifeval` extra (langdetect, immutabledict, nltk >= 3.9.1;
in the `cpu` extra). Importing lm-eval's module tries to download nltk's `punkt_tab` when it is missing
(upstream behaviour); offline that fails quietly, and the one check that needs it
(`length_constraints:number_sentences`, nltk's sentence splitter; `change_case:capital_word_frequency` uses
nltk's word tokenizer, which needs it too) raises a LookupError naming the prompt and the download command.

Departure: langdetect is seeded (if_scoring.seed_langdetect), so language verdicts are reproducible.

Limits: checked on hand-made rows with known verdicts (tests/fixtures/ifeval_sample.jsonl), not on the hub's
541 rows (not reachable here); agreement with lm-eval on the real set follows from calling its own function.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from exgrpo.eval.if_scoring import IFVerdict, check_row, score_set, seed_langdetect, with_nltk_hint


def _utils() -> ModuleType:
    """lm-eval's ifeval task module (imported late: it pulls nltk and langdetect)."""
    try:
        from lm_eval.tasks.ifeval import utils
    except ImportError as err:
        raise ImportError(
            f"IFEval scoring needs lm-eval's `ifeval` extra (langdetect, immutabledict, nltk>=3.9.1): {err}"
        ) from err
    seed_langdetect()
    return utils


def known_instructions() -> frozenset[str]:
    """IFEval's instruction ids, from lm-eval's registry."""
    from lm_eval.tasks.ifeval import instructions_registry

    return frozenset(instructions_registry.INSTRUCTION_DICT)


def score_ifeval(row: Mapping[str, Any], response: str, where: str = "ifeval") -> IFVerdict:
    """One prompt's strict and loose verdicts, as lm-eval's `process_results` gives them."""
    utils = _utils()
    check_row(row, known_instructions(), f"{where}: key {row.get('key')!r}")
    doc = {c: row[c] for c in ("key", "prompt", "instruction_id_list", "kwargs")}
    out = with_nltk_hint(lambda: utils.process_results(doc, [response]), f"{where}: key {row['key']!r}")
    return IFVerdict(
        key=str(row["key"]),
        instruction_id_list=tuple(row["instruction_id_list"]),
        strict=tuple(bool(v) for v in out["inst_level_strict_acc"]),
        loose=tuple(bool(v) for v in out["inst_level_loose_acc"]),
    )


def score_ifeval_set(
    rows: list[Mapping[str, Any]], responses: list[str], where: str = "ifeval"
) -> tuple[list[IFVerdict], dict[str, float]]:
    """Every prompt's verdicts and the four accuracies (one response per row, in order)."""
    return score_set(rows, responses, known_instructions(), score_ifeval, where)


__all__ = ["known_instructions", "score_ifeval", "score_ifeval_set"]
