"""IFEval and IFBench scorers on hand-made rows (tests/fixtures/if*_sample.jsonl) with hand-derived verdicts.

Every response below was written for its checker, and its expected strict and loose verdicts follow from the
instruction's published definition, not from running the code: e.g. a reply that ends with the required phrase
and then one more line fails strict and passes loose (loose may drop the last line). Only checkers that need
no nltk data are used, so the tests run offline (the limits: exgrpo.eval.if_scoring's docstring).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langdetect")
pytest.importorskip("immutabledict")
pytest.importorskip("emoji")
pytest.importorskip("syllapy")

from exgrpo.eval import ifbench_scorer, ifeval_scorer  # noqa: E402
from exgrpo.eval.if_scoring import IFRowError, IFVerdict, aggregate, load_rows  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IFEVAL = FIXTURES / "ifeval_sample.jsonl"
IFBENCH = FIXTURES / "ifbench_sample.jsonl"

T, F = True, False
IFEVAL_CASES = [
    # (row index, response, strict per instruction, loose per instruction)
    (
        0,
        "the river wakes slowly under a pale sky and the herons stand still in the cold shallow water",
        [T, T],
        [T, T],
    ),
    (0, "The river, calm and wide, wakes under a pale sky.", [F, F], [F, F]),
    (1, "Water it weekly and keep the soil damp.\nAny other questions?", [T], [T]),
    (1, "Water it weekly and keep the soil damp.\nAny other questions?\nGood luck.", [F], [T]),
    (2, "Lantern near harbor.", [T, T], [T, T]),  # 3 words < 5
    (2, "A lantern by the harbor.", [F, T], [F, T]),  # 5 words: not fewer than five
    (3, '"Fresh bread, warm hearts."', [T], [T]),
    (3, '*"Fresh bread, warm hearts."*', [F], [T]),  # loose removes the asterisks
    (3, "Fresh bread, warm hearts.", [F], [F]),
    (0, "   ", [F, F], [F, F]),  # an empty response follows nothing
]

KEYWORDS = "amber " + "cobalt " * 2 + "drift " * 3 + "fjord " * 5 + "quill " * 7
IFBENCH_CASES = [
    (0, "violet", [T], [T]),
    (0, "deep violet", [F], [F]),
    (0, "Sure:\nviolet", [F], [T]),  # loose drops the first line
    (1, KEYWORDS, [T], [T]),
    (1, KEYWORDS + "amber", [F], [F]),  # amber twice, not once
    (2, "BlueHarbor", [T, T], [T, T]),  # IFEval's classic no_comma, through IFBench's registry
    (2, "Blue,Harbor", [F, T], [F, T]),
    (2, "", [F, F], [F, F]),
]


@pytest.fixture(scope="module")
def ifeval_rows():
    return load_rows(IFEVAL, ifeval_scorer.known_instructions())


@pytest.fixture(scope="module")
def ifbench_rows():
    return load_rows(IFBENCH, ifbench_scorer.known_instructions())


@pytest.mark.parametrize("index,response,strict,loose", IFEVAL_CASES)
def test_ifeval_verdicts(ifeval_rows, index, response, strict, loose):
    verdict = ifeval_scorer.score_ifeval(ifeval_rows[index], response)
    assert (list(verdict.strict), list(verdict.loose)) == (strict, loose)
    record = verdict.as_record()
    assert record["prompt_level_strict_acc"] is all(strict) and record["prompt_level_loose_acc"] is all(loose)


@pytest.mark.parametrize("index,response,strict,loose", IFBENCH_CASES)
def test_ifbench_verdicts(ifbench_rows, index, response, strict, loose):
    verdict = ifbench_scorer.score_ifbench(ifbench_rows[index], response)
    assert (list(verdict.strict), list(verdict.loose)) == (strict, loose)


def test_loose_is_never_below_strict(ifeval_rows, ifbench_rows):
    """Loose tries the response itself among its variants, so it holds wherever strict holds."""
    for rows, cases, score in (
        (ifeval_rows, IFEVAL_CASES, ifeval_scorer.score_ifeval),
        (ifbench_rows, IFBENCH_CASES, ifbench_scorer.score_ifbench),
    ):
        for index, response, *_ in cases:
            v = score(rows[index], response)
            assert all(lo or not st for st, lo in zip(v.strict, v.loose, strict=True)), response


def test_the_set_scores_give_the_four_accuracies_by_hand(ifeval_rows):
    responses = [
        "the river wakes slowly under a pale sky and the herons stand still in the cold shallow water",
        "Water it weekly and keep the soil damp.\nAny other questions?\nGood luck.",
        "A lantern by the harbor.",
        '*"Fresh bread, warm hearts."*',
    ]
    verdicts, metrics = ifeval_scorer.score_ifeval_set(ifeval_rows, responses)
    # strict: [T,T] [F] [F,T] [F] -> 1 of 4 prompts, 3 of 6 instructions; loose: [T,T] [T] [F,T] [T]
    assert metrics == {
        "prompt_level_strict_acc": 1 / 4,
        "inst_level_strict_acc": 3 / 6,
        "prompt_level_loose_acc": 3 / 4,
        "inst_level_loose_acc": 5 / 6,
    }
    assert [v.key for v in verdicts] == ["9001", "9002", "9003", "9004"]


def test_aggregate_pools_instructions_and_averages_prompts():
    verdicts = [IFVerdict("a", ("x", "y", "z"), (T, T, F), (T, T, T)), IFVerdict("b", ("x",), (T,), (T,))]
    assert aggregate(verdicts) == {
        "prompt_level_strict_acc": 0.5,
        "inst_level_strict_acc": 0.75,
        "prompt_level_loose_acc": 1.0,
        "inst_level_loose_acc": 1.0,
    }
    with pytest.raises(ValueError, match="no verdicts"):
        aggregate([])


def _write(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda r: r.pop("kwargs"), "kwargs"),
        (lambda r: r.pop("prompt"), "prompt"),
        (lambda r: r.update(kwargs=[]), "kwargs"),
        (lambda r: r.update(instruction_id_list=["no_such:check"], kwargs=[{}]), "instruction_id_list"),
        (lambda r: r.update(instruction_id_list="punctuation:no_comma"), "instruction_id_list"),
    ],
)
def test_bad_rows_are_refused_naming_file_line_and_field(tmp_path, change, field):
    row = json.loads(IFEVAL.read_text().splitlines()[0])
    change(row)
    path = _write(tmp_path, [json.loads(IFEVAL.read_text().splitlines()[1]), row])
    with pytest.raises(IFRowError, match=rf"{path}: line 2: field '{field}'"):
        load_rows(path, ifeval_scorer.known_instructions())


def test_a_line_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(IFRowError, match=rf"{path}: line 1: not JSON"):
        load_rows(path, ifbench_scorer.known_instructions())


def test_a_response_count_mismatch_is_refused_before_scoring(ifbench_rows):
    with pytest.raises(ValueError, match="2 responses for 3 rows"):
        ifbench_scorer.score_ifbench_set(ifbench_rows, ["a", "b"])


def test_ifbench_ids_of_its_own_are_unknown_to_ifeval(ifbench_rows):
    with pytest.raises(IFRowError, match="unknown instruction ids \\['format:no_whitespace'\\]"):
        ifeval_scorer.score_ifeval(ifbench_rows[0], "violet")


def test_refuse_unscored_consults_the_scored_flag(monkeypatch):
    from dataclasses import replace

    from exgrpo.core.config import ConfigError
    from exgrpo.eval import chat_benchmarks
    from exgrpo.eval.chat_benchmarks import CHAT_BENCHMARKS, refuse_unscored

    assert CHAT_BENCHMARKS["ifeval"].scored and CHAT_BENCHMARKS["ifbench"].scored
    assert chat_benchmarks.NOT_GENERATED == ()  # all three are generated by `exgrpo eval` (chat_run)
    refuse_unscored(
        ["aime24", "tiny", "arenahard_v2", "ifeval", "ifbench"]
    )  # math names pass; all are scored
    # a benchmark without a scorer is refused saying so; one scored but not generated, saying that
    unscored = {**CHAT_BENCHMARKS, "ifbench": replace(CHAT_BENCHMARKS["ifbench"], scored=False)}
    monkeypatch.setattr(chat_benchmarks, "CHAT_BENCHMARKS", unscored)
    with pytest.raises(ConfigError, match="ifbench: Table 2's benchmarks are registered .* no scorer"):
        refuse_unscored(["ifeval", "ifbench"])
    monkeypatch.setattr(chat_benchmarks, "CHAT_BENCHMARKS", CHAT_BENCHMARKS)
    monkeypatch.setattr(chat_benchmarks, "NOT_GENERATED", ("ifeval",))
    with pytest.raises(ConfigError, match="ifeval: scored, but `exgrpo eval` does not generate"):
        refuse_unscored(["ifeval", "ifbench"])
