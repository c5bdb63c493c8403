"""verl custom reward function: the exgrpo core's Math-Verify grader (paper §3.5) behind verl's signature.

Configured as `reward.custom_reward_function.path = pkg://exgrpo.verl_plugin.reward`, `name = compute_score`;
the ExGRPOConfig `reward_*` settings arrive as `reward_kwargs` (written by hydra_config). Grading goes through
the core's `Verifier` (process pool with a hard wall-clock timeout per answer), never `grade_one` in the
reward worker's thread, where math-verify's SIGALRM timeouts raise (they only work in a main thread).

Parallel grading (`reward_workers` > 1 takes effect): verl's reward loop calls `compute_score` once per answer,
many at a time from its executor threads (`NaiveRewardManager.run_single` through `loop.run_in_executor`).
One `Verifier.grade` call at a time with one answer each would keep one worker busy however many there are.
`_GradingQueue` puts the concurrent calls in one queue served by `reward_workers` grading threads, each with its
own one-process Verifier (the same hang-proof pool: a hard wall-clock timeout per answer, a hung or crashed
process replaced): an answer goes to whichever grader is free, so no grader waits for another's slow answer.
An answer's result does not depend on which grader takes it. `reward_workers = 0` grades in-process (unsafe
against hanging inputs, tests only), as the Verifier does.

verl decodes `solution_str` with special tokens skipped; the `</think>` rule needs `</think>` to be plain
text in the tokenizer (it is for the paper's backbones, where it is not a special token).
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any

from exgrpo.core.reward import GradeResult, Verifier


class _GradingQueue:
    """`workers` one-process Verifiers serving one queue of answers (module docstring)."""

    def __init__(self, workers: int, **settings: Any):
        self.verifiers = [Verifier(workers=min(workers, 1), **settings) for _ in range(max(workers, 1))]
        self._queue: queue.SimpleQueue[tuple[str, str, str, Future]] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, args=(v,), name=f"exgrpo-grading-{i}", daemon=True)
            for i, v in enumerate(self.verifiers)
        ]
        for thread in self._threads:
            thread.start()

    def grade(self, response: str, gold: str, kind: str) -> GradeResult:
        done: Future = Future()
        self._queue.put((response, gold, kind, done))
        return done.result()

    def _serve(self, verifier: Verifier) -> None:
        while True:
            response, gold, kind, done = self._queue.get()
            try:
                done.set_result(verifier.grade([response], [gold], [kind])[0])
            except Exception as err:  # a malformed item fails its own call only
                done.set_exception(err)


_QUEUES: dict[tuple, _GradingQueue] = {}
_LOCK = threading.Lock()


def _grading_queue(
    region: str,
    require_think_close: bool,
    max_chars: int,
    timeout_s: float,
    workers: int,
    rule: str = "release",
) -> _GradingQueue:
    # the pid: a forked child inherits the dict but not the grading thread
    key = (
        os.getpid(),
        region,
        bool(require_think_close),
        int(max_chars),
        float(timeout_s),
        int(workers),
        rule,
    )
    with _LOCK:
        if key not in _QUEUES:
            _QUEUES[key] = _GradingQueue(
                int(workers),
                timeout_s=timeout_s,
                region=region,
                require_think_close=require_think_close,
                max_chars=max_chars,
                rule=rule,
            )
        return _QUEUES[key]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    *,
    region: str = "after_think",
    require_think_close: bool = True,
    max_chars: int = 4000,
    timeout_s: float = 5.0,
    workers: int = 1,
    rule: str = "release",
    **_: Any,
) -> dict[str, Any]:
    """Reward of one response: {"score": 1.0 | 0.0, "acc": same, "timeout": 0/1, "no_think_close": 0/1}.

    Extra keys are numeric because verl averages them in its validation metrics. `extra_info["kind"]`
    selects `math` (default) or `choice` grading.
    """
    kind = str((extra_info or {}).get("kind", "math"))
    result = _grading_queue(region, require_think_close, max_chars, timeout_s, workers, rule).grade(
        solution_str, str(ground_truth), kind
    )
    return {
        "score": float(result.score),
        "acc": float(result.score),
        "timeout": float(result.status == "timeout"),
        "no_think_close": float(result.status == "no_think_close"),
    }


__all__ = ["compute_score"]
