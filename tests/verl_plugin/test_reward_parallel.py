"""The verl reward function under verl's calling pattern (one answer per call, many calls at once from executor
threads): the answers are spread over `reward_workers` graders, each with the score a lone call gives."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_verl_reward import grade_like_verl  # noqa: E402

from exgrpo.core.reward import Verifier  # noqa: E402
from exgrpo.verl_plugin import reward as vr  # noqa: E402


def test_concurrent_calls_are_spread_over_the_graders_and_score_as_alone(monkeypatch):
    import threading

    seen = []
    real = Verifier.grade

    def spy(self, responses, golds, kinds=None):
        seen.append((threading.current_thread().name, id(self), len(responses)))
        return real(self, responses, golds, kinds)

    monkeypatch.setattr(Verifier, "grade", spy)
    responses = [
        f"</think> so \\boxed{{{i}/{i + 1}}}" if i % 3 else f"</think> \\boxed{{{i}}}" for i in range(60)
    ]
    golds = [str(i) if i % 2 else f"\\frac{{{i}}}{{{i + 1}}}" for i in range(60)]
    got = asyncio.run(grade_like_verl(responses, golds, workers=2))
    calls = list(seen)  # the verl path's calls (the reference below goes through grade too)
    with Verifier(workers=0) as alone:  # in-process, one at a time
        want = [
            {
                "score": r.score,
                "acc": r.score,
                "timeout": 0.0,
                "no_think_close": float(r.status == "no_think_close"),
            }
            for r in (alone.grade([a], [g])[0] for a, g in zip(responses, golds))
        ]
    assert got == want
    assert [n for *_, n in calls] == [1] * len(responses)
    # two graders, each its own Verifier (one process each), both took answers
    assert len({v for _, v, _ in calls}) == 2 and {t for t, *_ in calls} == {
        "exgrpo-grading-0",
        "exgrpo-grading-1",
    }
    assert [v.workers for v in vr._grading_queue("after_think", True, 4000, 5.0, 2).verifiers] == [
        1,
        1,
    ]  # concurrent calls shared batches


def test_a_malformed_answer_fails_alone(monkeypatch):
    q = vr._grading_queue("after_think", True, 4000, 5.0, 0)
    with pytest.raises(Exception, match="str"):
        q.grade(None, "1", "math")  # type: ignore[arg-type]
    assert q.grade("</think> \\boxed{1}", "1", "math").score == 1.0
