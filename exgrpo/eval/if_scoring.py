"""What the IFEval and IFBench scorers share: the row contract, one prompt's verdicts, the four accuracies.

Both benchmarks give each prompt a list of verifiable instructions (`instruction_id_list`) with one kwargs
object per instruction (`kwargs`), and score a response two ways (Zhou et al. 2023, IFBench follows): strict
(the response as written) and loose (the best of eight variants: first and/or last line dropped, `*`
removed). Four accuracies follow, named as lm-eval's `ifeval` task names them:
- `prompt_level_strict_acc` / `prompt_level_loose_acc`: fraction of prompts whose every instruction holds;
- `inst_level_strict_acc` / `inst_level_loose_acc`: fraction of all instructions (pooled over prompts) that hold.

Table 2's number (`HEADLINE`): prompt-level loose, for both. Evidence: IFBench's README says its paper
"generally report[s] the prompt-level loose accuracy"; ExGRPO (§5.3) and RLMT, whose setup it follows, do not
say which IFEval accuracy they report, so IFEval uses the same as IFBench (also the OLMES / Tulu 3
convention). This is an inference: every eval file records all four so another choice needs no rerun.

Limits (not checkable without the hub sets): the real rows' kwargs shapes beyond the hub's documented
columns, the row counts (541 and 300), and agreement with published scores of a known model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

METRICS = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)
"""The four accuracies, in lm-eval's order (fractions in [0, 1])."""

HEADLINE = "prompt_level_loose_acc"
"""The accuracy Table 2 reports (module docstring: an inference, stated with its evidence)."""

COLUMNS = ("key", "prompt", "instruction_id_list", "kwargs")
"""The hub's columns, the same for google/IFEval and allenai/IFBench_test."""


class IFRowError(ValueError):
    """A row of an instruction-following set is malformed: the message names the source, row and field."""


@dataclass(frozen=True)
class IFVerdict:
    """One prompt's verdicts: per instruction, strict and loose."""

    key: str
    instruction_id_list: tuple[str, ...]
    strict: tuple[bool, ...]
    loose: tuple[bool, ...]

    def as_record(self) -> dict[str, Any]:
        """The per-sample record: the key, the ids and the four verdicts under lm-eval's metric names."""
        return {
            "key": self.key,
            "instruction_id_list": list(self.instruction_id_list),
            "prompt_level_strict_acc": all(self.strict),
            "inst_level_strict_acc": list(self.strict),
            "prompt_level_loose_acc": all(self.loose),
            "inst_level_loose_acc": list(self.loose),
        }


def check_row(row: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    """Raise IFRowError unless `row` has the hub's columns, known instruction ids and one kwargs per id."""
    missing = [c for c in COLUMNS if c not in row]
    if missing:
        raise IFRowError(f"{where}: field {missing[0]!r}: required column missing")
    ids, kwargs = row["instruction_id_list"], row["kwargs"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise IFRowError(f"{where}: field 'instruction_id_list': expected a non-empty list of strings")
    if not isinstance(kwargs, list) or not all(isinstance(k, dict) for k in kwargs):
        raise IFRowError(f"{where}: field 'kwargs': expected a list of objects")
    if len(kwargs) != len(ids):
        raise IFRowError(f"{where}: field 'kwargs': {len(kwargs)} objects for {len(ids)} instructions")
    unknown = sorted(set(ids) - set(known))
    if unknown:
        raise IFRowError(f"{where}: field 'instruction_id_list': unknown instruction ids {unknown}")
    if not isinstance(row["prompt"], str):
        raise IFRowError(f"{where}: field 'prompt': expected a string")


def load_rows(path: Path, known: Iterable[str]) -> list[dict[str, Any]]:
    """A JSON-lines set in the hub's columns, every row checked before any is scored."""
    known = frozenset(known)
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise IFRowError(f"{path}: line {n}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise IFRowError(f"{path}: line {n}: expected an object")
        check_row(row, known, f"{path}: line {n}")
        rows.append(row)
    if not rows:
        raise IFRowError(f"{path}: no rows")
    return rows


def aggregate(verdicts: list[IFVerdict]) -> dict[str, float]:
    """The four accuracies over prompts: prompt-level a mean over prompts, instruction-level pooled."""
    if not verdicts:
        raise ValueError("no verdicts to aggregate")
    strict = [v for x in verdicts for v in x.strict]
    loose = [v for x in verdicts for v in x.loose]
    return {
        "prompt_level_strict_acc": sum(all(x.strict) for x in verdicts) / len(verdicts),
        "inst_level_strict_acc": sum(strict) / len(strict),
        "prompt_level_loose_acc": sum(all(x.loose) for x in verdicts) / len(verdicts),
        "inst_level_loose_acc": sum(loose) / len(loose),
    }


def score_set(
    rows: list[Mapping[str, Any]],
    responses: list[str],
    known: Iterable[str],
    score_one: Callable[[Mapping[str, Any], str, str], IFVerdict],
    where: str,
) -> tuple[list[IFVerdict], dict[str, float]]:
    """Every prompt's verdicts under `score_one` and the four accuracies (one response per row, in order); every
    row is checked against the `known` instruction ids before any is scored."""
    if len(rows) != len(responses):
        raise ValueError(f"{where}: {len(responses)} responses for {len(rows)} rows")
    known = frozenset(known)
    for row in rows:
        check_row(row, known, f"{where}: key {row.get('key')!r}")
    verdicts = [score_one(r, resp, where) for r, resp in zip(rows, responses, strict=True)]
    return verdicts, aggregate(verdicts)


def loose_variants(response: str) -> list[str]:
    """The eight responses the loose score tries (IFEval's definition, which IFBench's evaluation_lib keeps)."""
    lines = response.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [response, response.replace("*", ""), *cut, *(c.replace("*", "") for c in cut)]


def with_nltk_hint(check: Callable[[], T], where: str) -> T:
    """Run one checker; nltk's LookupError (its data is missing, offline) re-raised naming the prompt."""
    try:
        return check()
    except LookupError as err:
        raise LookupError(
            f"{where}: a checker needs nltk data that is not installed (offline machines: run "
            "`python -m nltk.downloader punkt punkt_tab stopwords averaged_perceptron_tagger_eng` where "
            f"the hub is reachable and copy nltk_data over; NLTK_DATA names its folder). nltk said: "
            f"{str(err).strip().splitlines()[0] if str(err).strip() else err!r}"
        ) from err


def seed_langdetect() -> None:
    """Fix langdetect's seed: without it `detect` is random on short texts, so one response's language
    verdict (change_case:*, language:*) could differ between its strict and loose checks or between runs."""
    from langdetect import DetectorFactory

    DetectorFactory.seed = 0


__all__ = [
    "score_set",
    "COLUMNS",
    "HEADLINE",
    "METRICS",
    "IFRowError",
    "IFVerdict",
    "aggregate",
    "check_row",
    "load_rows",
    "loose_variants",
    "seed_langdetect",
    "with_nltk_hint",
]
