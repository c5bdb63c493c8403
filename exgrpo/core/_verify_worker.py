"""A process pool with a hard wall-clock timeout per task (used by `exgrpo.core.reward.Verifier`).

Why not plain `ProcessPoolExecutor.map(timeout=...)`: a future's timeout only stops *waiting*; the
hung worker keeps running and blocks the pool forever (as verl PR #5839 did: it hung at step 2).
Signal-based timeouts cannot be used either: they raise in non-main threads and math-verify's
own SIGALRM handler can be starved by long C-level sympy calls (a 20-deep nested fraction ignores a
1 s alarm for ~30 s, measured here). So this pool:

- keeps at most `workers` tasks in flight, so a task starts as soon as it is submitted and its
  deadline (submit time + timeout) measures its own run time, not time spent queued;
- on a missed deadline SIGKILLs every worker of the executor, records the task as timed out,
  starts a fresh executor and resubmits the other in-flight tasks (they were innocent);
- starts workers eagerly and waits for each to run `warmup` (imports, lazy caches) before any
  deadline starts, so worker start-up never counts as a timeout;
- treats a worker that dies by itself (segfault, OOM kill) as a crash: the in-flight tasks are
  retried once, then reported as `CRASHED`.

Workers use the `forkserver` start method where available (else `spawn`), never `fork`: the
parent may hold threads (torch, trainers) that `fork` would copy in a broken state.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

TIMED_OUT = "__timed_out__"
"""Result placeholder for a task killed at its wall-clock deadline."""
CRASHED = "__crashed__"
"""Result placeholder for a task whose worker died twice (or raised)."""

_STARTUP_TIMEOUT_S = 120.0  # generous: 2 contended cores, sympy import ~1 s per worker
_MAX_ATTEMPTS = 2


def _worker_init(ready: Any, warmup: Callable[[], None] | None) -> None:
    """Runs once in each worker: warm up, then report the pid so the parent can kill it later."""
    if warmup is not None:
        warmup()
    ready.put(os.getpid())


def _noop() -> None:
    return None


def default_start_method() -> str:
    """`forkserver` on POSIX systems that have it, else `spawn` (never `fork`, see module docstring)."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class TimeoutPool:
    """Run picklable `fn(*args)` tasks in `workers` processes, each under a hard wall-clock timeout.

    Results come back in input order; a task past its deadline yields `TIMED_OUT`, a task whose
    worker kept dying (or that raised) yields `CRASHED`. The pool stays usable after either.
    Not thread-safe: callers serialise `run` (the Verifier holds a lock).
    """

    def __init__(
        self,
        workers: int,
        timeout_s: float,
        *,
        warmup: Callable[[], None] | None = None,
        start_method: str | None = None,
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.workers = workers
        self.timeout_s = float(timeout_s)
        self._warmup = warmup
        self._ctx = multiprocessing.get_context(start_method or default_start_method())
        self._executor: ProcessPoolExecutor | None = None
        self._pids: list[int] = []
        self.restarts = 0
        """Executors replaced after a timeout or crash (a metric: each costs a worker start-up)."""

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> ProcessPoolExecutor:
        ready = self._ctx.Queue()
        executor = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=self._ctx,
            initializer=_worker_init,
            initargs=(ready, self._warmup),
        )
        # Workers are spawned on demand, one per submit that finds no idle worker: submit one
        # no-op per worker so all of them start now, then wait until each has warmed up.
        starters = [executor.submit(_noop) for _ in range(self.workers)]
        pids: list[int] = []
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        try:
            while len(pids) < self.workers:
                try:
                    pids.append(ready.get(timeout=0.2))
                except queue.Empty:
                    # a failing initializer breaks the pool: report it now, not after the deadline
                    broken = [e for f in starters if f.done() and (e := f.exception()) is not None]
                    if broken or time.monotonic() > deadline:
                        raise (broken[0] if broken else queue.Empty()) from None
            for fut in starters:
                fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except (queue.Empty, TimeoutError, BrokenProcessPool) as err:
            self._kill(executor, pids)
            raise RuntimeError(
                f"verifier workers failed to start ({len(pids)}/{self.workers} ready "
                f"within {_STARTUP_TIMEOUT_S:.0f} s): {err!r}"
            ) from err
        finally:
            ready.close()
        self._executor, self._pids = executor, pids
        return executor

    @staticmethod
    def _kill(executor: ProcessPoolExecutor, pids: Sequence[int]) -> None:
        # SIGKILL, not SIGTERM: a worker stuck in C code must die now. The pids came from the
        # workers themselves; they cannot have been reused because workers only exit when killed.
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        executor.shutdown(wait=True, cancel_futures=True)

    def _restart(self) -> ProcessPoolExecutor:
        if self._executor is not None:
            self._kill(self._executor, self._pids)
            self._executor, self._pids = None, []
        self.restarts += 1
        return self._start()

    def close(self) -> None:
        """Stop the workers (idle ones exit normally). Safe to call twice."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor, self._pids = None, []

    # ------------------------------------------------------------------ running tasks
    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list[Any]:
        """Return `[fn(*t) for t in tasks]` computed in the workers, with `TIMED_OUT` / `CRASHED`
        in place of tasks that missed their deadline or kept crashing."""
        results: list[Any] = [None] * len(tasks)
        if not tasks:
            return results
        executor = self._executor or self._start()
        pending: collections.deque[int] = collections.deque(range(len(tasks)))
        attempts = [0] * len(tasks)
        inflight: dict[Future, tuple[int, float]] = {}

        while pending or inflight:
            while pending and len(inflight) < self.workers:
                i = pending.popleft()
                attempts[i] += 1
                inflight[executor.submit(fn, *tasks[i])] = (i, time.monotonic() + self.timeout_s)
            next_deadline = min(d for _, d in inflight.values())
            wait(
                list(inflight),
                timeout=max(0.0, next_deadline - time.monotonic()),
                return_when=FIRST_COMPLETED,
            )
            crashed = False
            for fut in [f for f in inflight if f.done()]:  # also those finished since wait returned
                i, _ = inflight.pop(fut)
                err = fut.exception()
                if err is None:
                    results[i] = fut.result()
                elif isinstance(err, BrokenProcessPool):
                    crashed = True  # a worker died on its own; which task killed it is unknown
                    self._retry_or_fail(i, attempts, pending, results)
                else:
                    results[i] = CRASHED  # fn raised: not retried, it would raise again
            now = time.monotonic()
            expired = [f for f, (_, d) in inflight.items() if d <= now and not f.done()]
            if not expired and not crashed:
                continue
            for fut in expired:
                results[inflight.pop(fut)[0]] = TIMED_OUT
            # Everything still in flight dies with the executor; innocent tasks go back to the
            # front of the queue (a crash counts as an attempt, our own kill does not).
            for i in sorted((i for i, _ in inflight.values()), reverse=True):
                if crashed:
                    self._retry_or_fail(i, attempts, pending, results, front=True)
                else:
                    attempts[i] -= 1
                    pending.appendleft(i)
            inflight.clear()
            executor = self._restart()
        return results

    @staticmethod
    def _retry_or_fail(
        i: int, attempts: list[int], pending: collections.deque[int], results: list[Any], front: bool = False
    ) -> None:
        if attempts[i] >= _MAX_ATTEMPTS:
            results[i] = CRASHED
        elif front:
            pending.appendleft(i)
        else:
            pending.append(i)


__all__ = ["CRASHED", "TIMED_OUT", "TimeoutPool", "default_start_method"]
