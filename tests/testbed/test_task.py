"""Synthetic task: generator determinism, split disjointness, step checker, teacher noise, files."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from exgrpo.cli import main
from exgrpo.testbed import splits as tiny_splits
from exgrpo.testbed import task

SMALL = {
    "train": 120,
    "validation": 40,
    "test": 80,
    "ood_words": 40,
    "ood_choice4": 40,
    "ood_choice10": 40,
    "probe_length": 20,
}


@pytest.fixture(scope="module")
def splits():
    return tiny_splits.make_splits(0)


def test_canonical_steps_hand_examples():
    expr = task.Expression((3, 4, 2, 5), ("+", "*", "-"))
    assert task.reduce_steps(expr) == (["4*2=8", "3+8=11", "11-5=6"], 6)
    assert task.reduce_steps(task.Expression((9, 3, 2), ("-", "-"))) == (["9-3=6", "6-2=4"], 4)
    assert task.reduce_steps(task.Expression((2, 3, 4, 5), ("*", "*", "-"))) == (
        ["2*3=6", "6*4=24", "24-5=19"],
        19,
    )
    assert task.reduce_steps(task.Expression((1, 8, 3), ("-", "+"))) == (["1-8=-7", "-7+3=-4"], -4)
    assert expr.symbolic() == "3+4*2-5" and expr.words() == "3 plus 4 times 2 minus 5"


def test_value_limit_applies_to_intermediates():
    assert not task.is_valid(task.Expression((9, 9, 2, 90), ("*", "*", "-")))  # 81*2 = 162 before the minus
    assert task.is_valid(task.Expression((9, 9, 9), ("*", "+")))  # 81 + 9 = 90
    assert len(task.enumerate_expressions(1)) == 243  # 9 * 3 * 9, all within ±99


def test_generator_is_deterministic_and_seeded(splits):
    again = tiny_splits.make_splits(0)
    assert again == splits
    other = tiny_splits.make_splits(1)
    assert {r["question"] for r in other["test"]} != {r["question"] for r in splits["test"]}


def test_sizes_and_difficulties(splits):
    for name, size in tiny_splits.DEFAULT_SIZES.items():
        assert len(splits[name]) == size
    for name in ("validation", "test", "ood_words", "ood_choice4", "ood_choice10"):
        counts = Counter(r["difficulty"] for r in splits[name])
        assert counts == {d: tiny_splits.DEFAULT_SIZES[name] // 4 for d in (1, 2, 3, 4)}
    assert {r["difficulty"] for r in splits["probe_length"]} == {5}
    train_d = Counter(r["difficulty"] for r in splits["train"])
    # d=1 has 243 problems; validation (50) and test (100) take theirs first, train gets the rest
    assert train_d[1] == 243 - 50 - 100
    assert sum(train_d.values()) == 1600 and min(train_d[2], train_d[3], train_d[4]) >= 500


def test_splits_are_disjoint(splits):
    expr = {name: {task.expression_of(r) for r in rows} for name, rows in splits.items()}
    test_group = expr["test"] | expr["probe_length"]
    assert not expr["train"] & expr["validation"]
    assert not expr["train"] & test_group
    assert not expr["validation"] & test_group
    for name in ("ood_words", "ood_choice4", "ood_choice10"):  # paired re-renderings of ID test problems
        assert expr[name] <= expr["test"]
    questions = [r["question"] for rows in splits.values() for r in rows]
    assert len(questions) == len(set(questions))
    qids = [r["qid"] for rows in splits.values() for r in rows]
    assert len(qids) == len(set(qids))
    assert all(len(rows) == len({task.expression_of(r) for r in rows}) for rows in splits.values())


def test_rows_are_self_consistent(splits):
    for name, rows in splits.items():
        for r in rows:
            assert r["split"] == name and r["prompt"] == [{"role": "user", "content": r["question"]}]
            steps, value = task.reduce_steps(task.expression_of(r))
            assert (r["steps"], r["value"]) == (steps, value)
            assert task.classify(r, task.target_response(r)) == "logical"
            if r["kind"] == "choice":
                assert len(set(r["choices"])) == len(r["choices"]) == (4 if r["form"] == "choice4" else 10)
                # the letter is a fixed function of the final digit (documented departure)
                n = len(r["choices"])
                assert [task.option_slot(v, n) for v in r["choices"]] == list(range(n))
                assert "ABCDEFGHIJ".index(r["answer"]) == (
                    abs(value) % 10 if n == 10 else abs(value) % 10 % 4
                )
                assert f"{value}({r['answer']})" in r["question"]
                assert r["choices"]["ABCDEFGHIJ".index(r["answer"])] == value
            else:
                assert r["answer"] == str(value)
    assert splits["ood_words"][0]["question"].split()[1] in ("plus", "minus", "times")
    letters = Counter(r["answer"] for r in splits["ood_choice4"])
    assert set(letters) == set("ABCD") and min(letters.values()) > 25  # every gold position is used


def test_check_reasoning_correct_lucky_wrong():
    problem = task.make_problem(
        task.Expression((3, 4, 2, 5), ("+", "*", "-")), "symbolic", "test", random.Random(0)
    )
    right = "4*2=8;3+8=11;11-5=6</think>\\boxed{6}"
    lucky = "4*2=9;3+8=11;11-5=6</think>\\boxed{6}"  # a slip: wrong value written, right one carried
    wrong = "4*2=9;3+9=12;12-5=7</think>\\boxed{7}"
    assert task.check_reasoning(problem, right) and task.classify(problem, right) == "logical"
    assert not task.check_reasoning(problem, lucky) and task.classify(problem, lucky) == "lucky"
    assert task.classify(problem, wrong) == "wrong"
    assert task.classify(problem, "<think>4*2=8; 3+8=11 ;11-5=6</think> \\boxed{ 6 }") == "logical"
    assert task.classify(problem, "4*2=8;3+8=11;11-5=6 \\boxed{6}") == "wrong"  # no </think>: ungraded
    assert not task.check_reasoning(problem, "4*2=8;3+8=11</think>\\boxed{6}")  # a missing step
    assert task.split_response("a</think>x\\boxed{1} then \\boxed{2}") == ("a", "2")  # last box counts


def test_choice_grading_uses_letters():
    rng = random.Random(3)
    problem = task.make_problem(task.Expression((7, 6), ("-",)), "choice4", "ood_choice4", rng)
    gold = problem["answer"]
    assert f"1({gold})" in problem["question"]  # options are written value(letter)
    assert task.target_response(problem) == f"7-6=1({gold})</think>\\boxed{{{gold}}}"
    assert task.classify(problem, f"7-6=1({gold})</think>\\boxed{{{gold}}}") == "logical"
    assert task.classify(problem, f"7-6=1</think>\\boxed{{{gold}}}") == "lucky"  # no lookup step
    other = next(c for c in "ABCD" if c != gold)
    assert task.classify(problem, f"7-6=1({other})</think>\\boxed{{{other}}}") == "wrong"
    assert (
        task.classify(problem, f"7-6=1({gold})</think>\\boxed{{1}}") == "wrong"
    )  # the value is not the answer


def test_noisy_teacher_rates_match_hand_computation():
    # d=1: the answer is wrong only when the step is noisy AND the error is carried: 0.2 * 0.7 = 0.14;
    # a slip (noisy, not carried) is a lucky hit: 0.2 * 0.3 = 0.06.
    rng = random.Random(0)
    problem = task.make_problem(task.Expression((3, 4), ("*",)), "symbolic", "x", rng)
    verdicts = Counter(task.classify(problem, task.noisy_solution(problem, rng)) for _ in range(6000))
    assert verdicts["wrong"] / 6000 == pytest.approx(0.14, abs=0.015)
    assert verdicts["lucky"] / 6000 == pytest.approx(0.06, abs=0.01)
    clean = task.noisy_solution(problem, rng, p_noise=0.0)
    assert clean == task.target_response(problem) == "3*4=12</think>\\boxed{12}"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_files_round_trip_with_checksums(tmp_path, fmt):
    splits = tiny_splits.make_splits(5, SMALL)
    manifest = tiny_splits.write_dataset(tmp_path, splits, fmt)
    assert {k: v["rows"] for k, v in manifest["splits"].items()} == SMALL
    for name in splits:
        assert tiny_splits.load_split(tmp_path, name) == splits[name]
    path = tmp_path / manifest["splits"]["test"]["file"]
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="sha256"):
        tiny_splits.load_split(tmp_path, "test")


def test_make_data_cli(tmp_path, capsys):
    out = tmp_path / "data"
    args = [
        "make-data",
        "--out",
        str(out),
        "--seed",
        "2",
        "--train-size",
        "100",
        "--validation-size",
        "20",
        "--test-size",
        "40",
        "--ood-words-size",
        "20",
        "--ood-choice4-size",
        "20",
        "--ood-choice10-size",
        "20",
        "--probe-size",
        "8",
    ]
    assert main(args) == 0
    manifest = tiny_splits.load_manifest(out)
    assert manifest["splits"]["probe_length"]["rows"] == 8 and manifest["seed"] == 2
    assert (
        tiny_splits.load_split(out, "ood_words")
        == tiny_splits.make_splits(
            2,
            {
                **SMALL,
                "train": 100,
                "validation": 20,
                "test": 40,
                "ood_words": 20,
                "ood_choice4": 20,
                "ood_choice10": 20,
                "probe_length": 8,
            },
        )["ood_words"]
    )
    # an OOD set larger than the test set it re-renders is a clean error naming the flag
    assert (
        main(["make-data", "--out", str(tmp_path / "bad"), "--test-size", "40", "--ood-words-size", "80"])
        == 2
    )
    assert "ood-words-size" in capsys.readouterr().err
