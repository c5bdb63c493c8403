"""`exgrpo regrade --grader release|strict` re-grades a cache (old grader names included), and profiles pick graders."""

from __future__ import annotations

import json

import pytest

from exgrpo.cli import main as cli
from exgrpo.eval import cache
from exgrpo.eval.profiles import PROFILES

# (problem, completion, gold, region, release score, strict score): hand-traced from both rules
CASES = [
    ("p1", "Compute.</think> So \\boxed{7}.", "7", "after_think", 1.0, 1.0),
    (
        "p2",
        "never closes the think block \\boxed{7}",
        "7",
        "after_think",
        1.0,
        0.0,
    ),  # release grades the whole text
    ("p3", "Compute.</think> it takes 7 minutes", "7", "after_think", 0.0, 1.0),  # unboxed: release 0
    ("p4", "Compute.</think> Step \\boxed{3}. Final \\boxed{5}", "5", "after_think", 1.0, 1.0),
    ("p5", "plain \\fbox{6}", "6", "full", 0.0, 0.0),  # neither reads \fbox (nor did math-verify 0.6.0)
    ("p6", "plain answer \\boxed{\\frac{1}{2}}", "0.5", "full", 1.0, 1.0),
]


def write_old_cache(path, kind: str = "math", cases=CASES) -> None:
    """A cache written under the grader's former name `math-verify`."""
    rows = [
        {
            "problem_id": pid,
            "sample_index": 0,
            "seed": 0,
            "prompt_hash": "h",
            "completion": text,
            "n_tokens": len(text),
            "truncated": False,
            "extracted": None,
            "label": gold,
            "score": 0.5,
            "status": "stale",
            "grader": "math-verify",
            "grader_version": "old",
        }
        for pid, text, gold, *_ in cases
    ]
    meta = {
        "benchmark": "math500",
        "split": "id",
        "kind": kind,
        "profile": "paper",
        "k": 1,
        "seed": 0,
        "limit": None,
        "model": "/m",
        "prompt_format": "chat",
        "provenance": {"git_commit": "abc"},
        "grading": {
            "grader": "math-verify",
            "region": "mixed",
            "region_by_problem": {c[0]: c[3] for c in cases},
            "require_think_close": True,
            "max_chars": 4000,
            "timeout_s": 5.0,
            "workers": 1,
        },
    }
    cache.write_samples(path, cache.records_table(rows), meta)


@pytest.mark.parametrize(("grader", "column"), [("release", 4), ("strict", 5), (None, 5)])
def test_regrade_with_each_grader(tmp_path, grader, column):
    src = tmp_path / "math500.paper.samples.parquet"
    write_old_cache(src)
    extra = [] if grader is None else ["--grader", grader]
    assert (
        cli(["regrade", "--cache", str(src), "--out", str(tmp_path / "new"), "--grader-workers", "1", *extra])
        == 0
    )
    records, meta = cache.read_samples(tmp_path / "new" / src.name)
    assert records["score"].tolist() == [c[column] for c in CASES]
    name = grader or "strict"  # default: the stored grader; `math-verify` is read as `strict`
    assert set(records["grader"]) == {name} and meta["grading"]["grader"] == (grader or "math-verify")
    agg = json.loads(cache.aggregate_path_for(tmp_path / "new" / src.name).read_text())
    assert agg["grader"] == name and agg["provenance"]["grader"] == name


def test_regrade_multiple_choice_release_needs_a_boxed_letter(tmp_path):
    cases = [
        ("q1", "Reasoning.</think> ANSWER: C", "C", "after_think", 0.0, 1.0),
        ("q2", "Reasoning.</think> \\boxed{C}", "C", "after_think", 1.0, 1.0),
        ("q3", "Reasoning.</think> \\boxed{2}", "2", "after_think", 1.0, 1.0),
    ]  # ARC-c numbered item
    src = tmp_path / "arc_c.paper.samples.parquet"
    write_old_cache(src, "choice", cases)
    for grader, column in (("release", 4), ("strict", 5)):
        assert (
            cli(
                [
                    "regrade",
                    "--cache",
                    str(src),
                    "--out",
                    str(tmp_path / grader),
                    "--grader",
                    grader,
                    "--grader-workers",
                    "1",
                ]
            )
            == 0
        )
        assert cache.read_samples(tmp_path / grader / src.name)[0]["score"].tolist() == [
            c[column] for c in cases
        ]


def test_unknown_grader_is_refused(tmp_path, capsys):
    src = tmp_path / "math500.paper.samples.parquet"
    write_old_cache(src)
    assert cli(["regrade", "--cache", str(src), "--in-place", "--grader", "oat"]) == 2
    assert "unknown grader 'oat'" in capsys.readouterr().err


def test_profiles_name_their_grader():
    assert PROFILES["paper"].grader == "release"
    assert PROFILES["community"].grader == "strict" and PROFILES["tiny"].grader == "strict"
    assert PROFILES["paper"].to_dict()["grader"] == "release"  # recorded in every aggregate's provenance
