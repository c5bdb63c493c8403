"""Step-level experience bookkeeping shared by both trainers (paper §4.1-4.2, Alg. 1, §5.3; docs/method.md).

One training step, as a trainer drives it::

    qids = mgr.plan_replay(B)                 # questions to replay (n_exp = min(#eligible, ⌊ρB⌋))
    cands = {q: mgr.candidates(q) for q in qids}   # trajectory selection (selection.py) picks one each
    ... roll out, score ...
    mgr.record_group(qid, rewards, fresh_trajectories, replayed=..., step=t)   # once per group
    metrics = mgr.end_step(t, batch_pass1)
    (at an epoch boundary) data = mgr.prune_training_data(all_qids, B)

Order of operations inside `end_step(t)` (all groups recorded in step t, in recording order):
 1. Bookkeeping per group: the group's difficulty key k becomes the question's latest key (re-bucketed on
    every rollout, on-policy or experiential). `success`: k = #correct of K; for a replayed group with
    `replay_counts_in_k` the replayed trajectory counts (1 + K-1 fresh, released); without it k is the fresh
    accuracy on the K scale, round_half_up(K·k_fresh/(K-1)). `reward_std` (§5.3): k = round(σ̃·K) over the
    step's groups. k = K retires the question (from step 1, whether or not replay is active; k = 0 never
    retires). Otherwise, if collection is on and k is eligible, the group's correct FRESH trajectories are
    stored (deduplicated, capped).
 2. Retirement from the buffer (`retire_from_buffer`): questions retired in this step leave the buffer.
 3. Retired Review (paper Table 7; no released code): if `retired_review_fraction` > 0 and
    t % `retired_review_every` == 0, round_half_up(fraction·|retired|) retired questions, drawn uniformly
    without replacement with the seeded Generator, are UN-RETIRED: removed from the retired set and returned
    to the training data by the next `prune_training_data` (appended if the list passed in no longer holds
    them), and listed by `drain_reviewed()` for trainers that re-inject them at once. Their buffer entries
    were deleted when they retired, so they re-enter the buffer only through fresh rollouts.
 4. Delayed start (paper §4.2): if not active and batch_pass1 > `start_threshold`, replay becomes active
    (one way). It takes effect AFTER the step, as released: collection in step t used the state before the
    switch, so the buffer is empty at the switch (unless `collect_before_activation`); `plan_replay(t+1)`
    returns [] and replay starts at t+2, once step t+1 has stored eligible questions.
 5. Metrics (state after the step).

Definitions. Eligible for replay: in the buffer and lbound < k <= rbound (`success`), or lbound < k
(`reward_std`, where the top key K is the batch's most informative question, not a solved one). Collection
is on when `method == "exgrpo"` and replay is active, or always with `collect_before_activation`. Retirement
is permanent except through Retired Review: a retired question rolled out again (before the epoch prune, or
with `retire_from_data="never"`) updates its key but stores nothing while `retire_from_buffer` (released:
stored, then deleted the same step).

Departures from the paper / released code, stated up front:
- A question whose latest k falls out of the eligible range (e.g. 0/8) keeps its trajectories but is not
  replayed until k is eligible again (paper: buckets by the LATEST correctness). The released code skips the
  bucket update for such groups, leaving the question replayable under its stale bucket and counted in
  n_exp: `keep_stale_bucket=True`.
- Epoch pruning guard: by default retired questions leave the data only if more than B + margin questions
  remain afterwards; the release checks the size before pruning (`retire_data_guard="before"`).
- n_exp = ⌊ρB⌋ is the exact floor; the release's `int(B·ρ)` is `n_exp_rounding="int"` (sampler.py).
- `reward_std` (§5.3, no released code): "correct" means reward above the mean of the counted group
  (positive advantage), and there is no retirement (no solved end of the scale).
- `method == "on_policy"` keeps the bookkeeping (keys, retired set, metrics) but never replays, and
  `prune_training_data` returns the data unchanged: the Dr.GRPO baseline trains on all questions.
- All randomness comes from one seeded numpy Generator saved with the state, so a resumed run replays the
  same questions as an uninterrupted one (released: unseeded global RNG, pickled dataloader).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

from exgrpo.core.buffer import DEFAULT_CHUNK_TOKENS, ExperienceBuffer, Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.experience_groups import Group, StepKeys, key_groups, round_half_up
from exgrpo.core.experience_state import ARRAYS_FILE, STATE_FILE, load_state, save_state
from exgrpo.core.ordered_set import IndexedOrderedSet
from exgrpo.core.sampler import n_replay, restrict_range, sample_questions


class ExperienceManager:
    """The experience buffer E, difficulty buckets, retired set S and delayed-start switch of one run."""

    def __init__(self, cfg: ExGRPOConfig, seed: int, *, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
        self.cfg = cfg.validate()
        self.seed = int(seed)
        self.rng = np.random.Generator(np.random.PCG64(self.seed))
        self.buffer = ExperienceBuffer(cfg.max_traj_per_question, chunk_tokens)
        self._k: dict[str, int] = {}  # latest difficulty key of every question seen
        self._retired: dict[str, None] = {}  # ordered set, in order of retirement
        self._buckets: dict[int, IndexedOrderedSet] = {}  # key -> bucketed buffered questions, arrival order
        self._bucket_key: dict[str, int] = {}  # bucketed question -> its bucket
        self._active = cfg.method == "exgrpo" and not cfg.delayed_start
        self._activation_step: int | None = 0 if self._active else None
        self._last_step: int | None = None
        self._pending: list[Group] = []
        self._step_keys: StepKeys | None = None  # key_groups(self._pending), computed once per step
        self._reviewed: list[str] = []  # un-retired, not yet drained by the trainer
        self._returning: list[str] = []  # un-retired, not yet handed back through prune_training_data

    # ------------------------------------------------------------------ state queries
    @property
    def replay_active(self) -> bool:
        """True once ExGRPO replay is on (one way); always False for `method="on_policy"`."""
        return self._active

    @property
    def collecting(self) -> bool:
        """Whether correct trajectories are stored in the current step."""
        return (self.cfg.method == "exgrpo" and self._active) or self.cfg.collect_before_activation

    @property
    def activation_step(self) -> int | None:
        """Step after which replay became active (0 = from the start); None while inactive."""
        return self._activation_step

    @property
    def retired(self) -> list[str]:
        """The retired set S, in order of retirement."""
        return list(self._retired)

    def latest_key(self, qid: str) -> int | None:
        """Latest difficulty key k of `qid` (None if never rolled out)."""
        return self._k.get(qid)

    def buckets(self) -> dict[int, list[str]]:
        """Eligible buffered questions per key (ascending key; arrival order inside a bucket)."""
        return {k: list(v) for k, v in sorted(self._buckets.items()) if v}

    def is_eligible_key(self, k: int) -> bool:
        """lbound < k <= rbound (`success`) or lbound < k (`reward_std`)."""
        upper = self.cfg.n_rollouts if self.cfg.difficulty_signal == "reward_std" else self.cfg.rbound
        return self.cfg.buffer_lbound < k <= upper

    # ------------------------------------------------------------------ step API
    def plan_replay(self, batch_size: int) -> list[str]:
        """Question ids to replay this step: min(#eligible, ⌊ρB⌋) distinct ones drawn with `cfg.sampler` over
        the eligible buckets (after `cfg.sample_range`). [] if `method != "exgrpo"` or replay is not active.

        O(n_exp · log |E|) with `sample_range="all"` (the buckets are indexed, nothing is copied); the halves
        need the buffer's insertion order and cost O(|E|), as released."""
        if self._pending:
            raise RuntimeError("plan_replay called after record_group and before end_step")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self.cfg.method != "exgrpo" or not self._active:
            return []
        cfg = self.cfg
        buckets: dict[int, Sequence[str]]
        if (
            cfg.sample_range == "all"
        ):  # the indexed live sets themselves (`s[i]`, `len(s)`: a sequence of qids)
            buckets = {k: cast("Sequence[str]", v) for k, v in sorted(self._buckets.items()) if len(v)}
        else:
            in_order = [q for q in self.buffer.qids() if q in self._bucket_key]
            halves: dict[int, list[str]] = {}
            for q in restrict_range(in_order, cfg.sample_range):
                halves.setdefault(self._bucket_key[q], []).append(q)
            buckets = dict(sorted(halves.items()))
        n = n_replay(cfg.rho, batch_size, sum(len(v) for v in buckets.values()), rounding=cfg.n_exp_rounding)
        return sample_questions(
            buckets,
            n,
            kind=cfg.sampler,
            n_rollouts=cfg.n_rollouts,
            mu=cfg.sampler_mu,
            sigma_count=cfg.sigma_count,
            rng=self.rng,
        )

    def candidates(self, qid: str) -> list[Trajectory]:
        """Stored trajectories of `qid` (read-only views, oldest first) for trajectory selection."""
        return self.buffer.get(qid)

    def record_group(
        self, qid: str, rewards: np.ndarray, trajectories: list[Trajectory], *, replayed: bool, step: int
    ) -> None:
        """Record one trained group; applied in `end_step` (see the module docstring).

        Args:
            qid: stable question id.
            rewards: float [K] — the whole group as trained. For a replayed group either [K] with the replayed
                trajectory's reward at index 0, or [K-1] fresh rewards only (the replayed one then counts as
                correct). `success` needs rewards in {0, 1}.
            trajectories: the group's FRESH trajectories, aligned with the fresh rewards ([K] or [K-1]).
                Their arrays must stay unchanged until `end_step`.
            replayed: the group holds one replayed trajectory.
            step: the current training step (must equal the `end_step` step).
        """
        cfg, big_k = self.cfg, self.cfg.n_rollouts
        if not isinstance(qid, str) or not qid:
            raise ValueError(f"question id must be a non-empty str, got {qid!r}")
        r = np.asarray(rewards, dtype=np.float64)
        allowed = (big_k, big_k - 1) if replayed else (big_k,)
        if r.ndim != 1 or r.size not in allowed:
            raise ValueError(
                f"question {qid!r}: rewards must have length {' or '.join(map(str, allowed))} "
                f"(n_rollouts={big_k}, replayed={replayed}), got shape {r.shape}"
            )
        if not np.all(np.isfinite(r)):
            raise ValueError(f"question {qid!r}: rewards must be finite")
        if cfg.difficulty_signal == "success" and not np.all((r == 0) | (r == 1)):
            raise ValueError(
                f"question {qid!r}: difficulty_signal='success' needs 0/1 rewards, got {r.tolist()}"
            )
        fresh = r[1:] if replayed and r.size == big_k else r
        if len(trajectories) != fresh.size:
            raise ValueError(
                f"question {qid!r}: {len(trajectories)} trajectories for {fresh.size} fresh rewards"
            )
        if replayed and cfg.replay_counts_in_k:
            if r.size == big_k:
                counted = r
            elif cfg.difficulty_signal == "success":
                counted = np.concatenate([[1.0], fresh])
            else:
                raise ValueError(f"question {qid!r}: reward_std with replay_counts_in_k needs all K rewards")
        else:
            counted = fresh
        self._pending.append(Group(qid, counted, fresh, list(trajectories), replayed, int(step)))
        self._step_keys = None

    def step_keys(self) -> StepKeys:
        """Keys of the groups recorded so far in this step (`experience_groups.key_groups`), computed once:
        `end_step` applies these, and the step metrics read them (`step_metrics.step_metrics`)."""
        if self._step_keys is None:
            self._step_keys = key_groups(self._pending, self.cfg)
        return self._step_keys

    def end_step(self, step: int, batch_pass1: float) -> dict[str, float]:
        """Apply the step's groups, retire, review, check the delayed start; return metrics (module docstring).

        Args:
            step: the training step just finished; strictly increasing.
            batch_pass1: fraction of the batch's responses with reward 1 (released `batch/solved`); with
                `reward_std`, whatever batch score `start_threshold` is meant for (finite).
        """
        self._check_end_step(step, batch_pass1)
        cfg = self.cfg
        keyed = self.step_keys()
        keys, correct = list(keyed.keys), list(keyed.correct)
        groups, self._pending, self._step_keys = self._pending, [], None
        collecting = self.collecting
        newly_retired, stored, duplicates = self._store_groups(groups, keys, correct, collecting)
        if cfg.retire_from_buffer:
            for qid in newly_retired:
                self._unbucket(qid)
                self.buffer.remove(qid)
        reviewed = self._review(step)
        if not self._active and cfg.method == "exgrpo" and batch_pass1 > cfg.start_threshold:
            self._active, self._activation_step = True, step
        self._last_step = step
        metrics = {
            "exp/active": float(self._active),
            "exp/collecting": float(collecting),
            # -1 until replay activates (NaN is not valid JSON in the results contract)
            "exp/activation_step": -1.0 if self._activation_step is None else float(self._activation_step),
            "exp/groups": float(len(groups)),
            "exp/stored": float(stored),
            "exp/duplicates": float(duplicates),
            "exp/buffered_questions": float(len(self.buffer)),
            "exp/buffered_trajectories": float(self.buffer.num_trajectories),
            "exp/buffered_tokens": float(self.buffer.num_tokens),
            "exp/eligible_questions": float(sum(len(v) for v in self._buckets.values())),
            "exp/retired": float(len(self._retired)),
            "exp/retired_this_step": float(len(newly_retired)),
            "exp/reviewed": float(len(reviewed)),
            # stored token ids + log-probs (8 B/token); the arena's reserved size depends on history, so
            # it is left out of the per-step log to keep resumed logs bit-identical
            "exp/buffer_payload_bytes": float(8 * self.buffer.num_tokens),
        }
        if keys:
            metrics["exp/mean_key"] = float(np.mean(keys))
        upper = cfg.n_rollouts if cfg.difficulty_signal == "reward_std" else cfg.rbound
        for key in range(cfg.buffer_lbound + 1, upper + 1):
            # eligible buffered questions per bucket (the step's group histogram is the trainer's exp/bucket_<k>)
            metrics[f"exp/buffer_bucket_{key}"] = float(len(self._buckets.get(key, ())))
        return metrics

    def _check_end_step(self, step: int, batch_pass1: float) -> None:
        """Refuse a step out of order, a batch score out of range, or groups recorded at another step."""
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"end_step: step {step} does not follow the previous step {self._last_step}")
        if not math.isfinite(batch_pass1) or (
            self.cfg.difficulty_signal == "success" and not 0.0 <= batch_pass1 <= 1.0
        ):
            raise ValueError(f"end_step: batch_pass1 must be a fraction in [0, 1], got {batch_pass1}")
        if bad := [g.qid for g in self._pending if g.step != step]:
            raise ValueError(f"end_step({step}): groups recorded with a different step: {bad[:5]}")

    def _store_groups(
        self, groups: list[Group], keys: list[int], correct: list[np.ndarray], collecting: bool
    ) -> tuple[list[str], int, int]:
        """Key each group's question, retire the all-correct ones, store eligible correct trajectories.

        Returns the questions retired this step, the trajectories stored and the duplicates refused."""
        cfg, big_k = self.cfg, self.cfg.n_rollouts
        newly_retired: list[str] = []
        stored = duplicates = 0
        for g, k, ok in zip(groups, keys, correct):
            self._set_key(g.qid, k)
            if cfg.difficulty_signal == "success" and k == big_k and g.qid not in self._retired:
                self._retired[g.qid] = None
                newly_retired.append(g.qid)
            if not (collecting and self.is_eligible_key(k)):
                continue
            if cfg.retire_from_buffer and g.qid in self._retired:
                continue
            was_buffered = g.qid in self.buffer
            for traj, is_correct in zip(g.trajectories, ok):
                if is_correct:
                    added = self.buffer.add(g.qid, traj)
                    stored += added
                    duplicates += not added
            if not was_buffered and g.qid in self.buffer:
                self._bucket(g.qid, k)
        return newly_retired, stored, duplicates

    def prune_training_data(self, qids: list[str], batch_size: int) -> list[str]:
        """Epoch-boundary filtering (released: once per epoch, docs/method.md): the current training question list `qids` without retired
        questions, plus the questions Retired Review un-retired since the last call that `qids` lacks (appended
        in review order).

        Nothing is removed when `method != "exgrpo"`, when `retire_from_data == "never"`, or when the guard
        fails: with `retire_data_guard="after"` batch_size + `retire_data_margin` or fewer questions would
        remain; with `"before"` (released) `qids` itself holds that few, so the pruned list may be shorter than
        one batch (the release's DataLoader then yields no full batch).
        """
        present = set(qids)
        returning = [q for q in self._returning if q not in present and q not in self._retired]
        self._returning = []
        if self.cfg.method != "exgrpo" or self.cfg.retire_from_data == "never":
            return list(qids) + returning
        kept = [q for q in qids if q not in self._retired]
        checked = len(qids) if self.cfg.retire_data_guard == "before" else len(kept)
        return (kept if checked > batch_size + self.cfg.retire_data_margin else list(qids)) + returning

    def drain_reviewed(self) -> list[str]:
        """Questions un-retired by Retired Review since the last call (for immediate re-injection)."""
        out, self._reviewed = self._reviewed, []
        return out

    # ------------------------------------------------------------------ internals
    def _set_key(self, qid: str, k: int) -> None:
        """Record the latest key; a buffered question follows it into bucket k, or leaves the buckets when k
        is not eligible (with `keep_stale_bucket`, as released, it stays in its old bucket)."""
        self._k[qid] = k
        if qid not in self.buffer:
            return
        if self.is_eligible_key(k):
            self._bucket(qid, k)
        elif not self.cfg.keep_stale_bucket:
            self._unbucket(qid)

    def _bucket(self, qid: str, k: int) -> None:
        old = self._bucket_key.get(qid)
        if old == k:
            return  # keeps its place in the bucket's arrival order
        if old is not None:
            self._buckets[old].discard(qid)
        bucket = self._buckets.get(k)
        if bucket is None:
            bucket = self._buckets[k] = IndexedOrderedSet()
        bucket.add(qid)
        self._bucket_key[qid] = k

    def _unbucket(self, qid: str) -> None:
        old = self._bucket_key.pop(qid, None)
        if old is not None:
            self._buckets[old].discard(qid)

    def _review(self, step: int) -> list[str]:
        cfg = self.cfg
        if cfg.retired_review_fraction <= 0 or step % cfg.retired_review_every != 0 or not self._retired:
            return []
        n = min(len(self._retired), round_half_up(cfg.retired_review_fraction * len(self._retired)))
        pool = list(self._retired)
        chosen = [pool[i] for i in sorted(self.rng.choice(len(pool), size=n, replace=False))] if n else []
        for qid in chosen:
            del self._retired[qid]
        self._reviewed.extend(chosen)
        self._returning.extend(chosen)
        return chosen

    # ------------------------------------------------------------------ save / load
    def save(self, directory: str | Path) -> None:
        """Write the whole state (buffer, keys, buckets, retired set, switch, RNG) to `directory`
        (`experience_state.save_state`). Call between steps."""
        if self._pending:
            raise RuntimeError("save called after record_group and before end_step")
        save_state(self, directory)

    @classmethod
    def load(cls, directory: str | Path, cfg: ExGRPOConfig) -> ExperienceManager:
        """Restore a manager saved by `save` (`experience_state.load_state`); `cfg` must agree on
        n_rollouts, difficulty_signal, bounds and `keep_stale_bucket`."""
        return load_state(cls, directory, cfg)


__all__ = ["ARRAYS_FILE", "STATE_FILE", "ExperienceManager", "Trajectory"]
