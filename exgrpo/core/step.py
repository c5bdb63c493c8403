"""The assembly of one training step, written once for both runtimes (paper Alg. 1 lines 9-17, Eq. 4, Eq. 14).

The core plans the whole step; the CPU trainer (`exgrpo/tiny/trainer.py`) and the verl plug-in
(`exgrpo/verl_plugin/trainer.py`) only execute the plan (generate, score, compute log-probs, apply the update):
they convert their tensors into the plain arrays these functions take and call them. Neither holds its own
copy of:

- the fresh questions beside the replayed ones and the CPU row order (`exgrpo.core.step_questions`);
- choosing o* per replayed question and where it sits in the scoring pass (`plan_replayed`, `ReplayedPlan`,
  `scoring_needed`, `flat_candidates`, `choose_replayed`), o*'s place in its group (`replayed_session`);
- the row -> group table of a step (`step_rows`): one group per PROMPT SLOT, never per question id; which
  rows are fresh (`fresh_rows`);
- per-group success counts, what is recorded into the `ExperienceManager`, the batch pass@1, the
  advantages and the difficulty-mask rows (`group_success`, `group_records`, `record_groups`,
  `batch_pass1`, `advantages_and_mask`, `kept_groups`, `step_stats`);
- padding, the update batch, π_past per row, mini-batch rows, rows as trajectories
  (`exgrpo.core.step_batch`), and the counts that become metrics, named from the registry
  (`exgrpo.core.step_metrics`).

Groups. A prompt slot is one fresh question (K fresh rollouts) or one experiential question (its replayed
trajectory o* plus K-1 fresh rollouts, paper Eq. 4). After an epoch boundary a question can be fresh and
replayed in the same step, or handed out twice; each slot is then its own group, trained, counted and
recorded separately (the manager applies the groups of a step in recording order).

One RNG discipline for o* (both runtimes draw the same numbers from the same seeded generator):
- random selection (`selection_metric="random"` or `selection_mode="random"`): one U[0,1) score per
  candidate, all candidates of the plan in one `torch.rand` call, in plan order; then mode `random` draws
  each question's index with `torch.randint(n)`, in plan order (mode `argmin` takes the lowest score);
- otherwise nothing is drawn: `at_collection` ranks by the entropy recorded at collection, `current` by
  the scores of one current-policy forward pass over ALL candidates of the plan in plan order (singletons
  too: the released entropy mask depends on a candidate's global index in that pass).

Departures, stated up front:
- A group with fewer than K rows (a failed rollout session in verl) is trained as verl's GRPO trains it
  (advantages over the rows present) but not recorded: its difficulty key k is undefined without all K
  results. A group of one gets advantage 0 (verl: A = r). `step_stats` counts such groups.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from exgrpo.core.advantages import difficulty_mask, group_accuracy, group_advantages, success_histogram
from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.experience_groups import StepKeys
from exgrpo.core.selection import select_index


# --------------------------------------------------------------------------- choosing o*
def scoring_needed(cfg: ExGRPOConfig) -> bool:
    """Whether o* needs a current-policy forward pass over the plan's candidates (paper §4.1)."""
    return (
        cfg.selection_policy == "current"
        and cfg.selection_mode != "random"
        and cfg.selection_metric != "random"
    )


def flat_candidates(
    plan: Sequence[str], candidates: Mapping[str, Sequence[Trajectory]]
) -> list[tuple[str, Trajectory]]:
    """All candidates of the plan, in plan order: the rows of the scoring pass and of `choose_replayed`'s scores."""
    out: list[tuple[str, Trajectory]] = []
    for qid in plan:
        cands = candidates[qid]
        if not cands:
            raise ValueError(f"question {qid!r} was planned for replay but has no stored trajectory")
        out.extend((qid, c) for c in cands)
    return out


def choose_replayed(
    cfg: ExGRPOConfig,
    plan: Sequence[str],
    candidates: Mapping[str, Sequence[Trajectory]],
    generator: torch.Generator,
    scores: torch.Tensor | None = None,
) -> list[int]:
    """Index of o* among each planned question's candidates, in plan order (paper §4.1, Alg. 1 line 11).

    Args:
        plan: the step's replayed question ids (`ExperienceManager.plan_replay`).
        candidates: qid -> its stored trajectories (`ExperienceManager.candidates`).
        generator: the run's selection RNG (see the module docstring for what is drawn).
        scores: [N] current-policy scores of `flat_candidates(plan, candidates)` (`selection.candidate_scores`);
            required iff `scoring_needed(cfg)`, ignored otherwise.
    Returns:
        one int per planned question.
    """
    flat = flat_candidates(plan, candidates)
    if not flat:
        return []
    if cfg.selection_mode == "random" or cfg.selection_metric == "random":
        s = torch.rand(len(flat), generator=generator)
    elif cfg.selection_policy == "at_collection":
        s = torch.tensor([c.entropy for _, c in flat], dtype=torch.float32)
    else:
        if scores is None:
            raise ValueError(
                "selection_policy='current' needs the current-policy scores of the plan's candidates"
            )
        s = torch.as_tensor(scores)
        if s.shape != (len(flat),):
            raise ValueError(f"{tuple(s.shape)} scores for {len(flat)} candidates of the plan")
    out, start = [], 0
    for qid in plan:
        n = len(candidates[qid])
        out.append(select_index(s[start : start + n], cfg.selection_mode, generator))
        start += n
    return out


@dataclass
class ReplayedPlan:
    """The replayed side of a step: the planned questions and the o* chosen for each (plan order)."""

    qids: list[str]
    """The replayed question ids (`ExperienceManager.plan_replay`)."""
    candidates: dict[str, list[Trajectory]]
    """qid -> its stored trajectories when the plan was made."""
    picked: list[int]
    """Index of o* among each question's candidates."""

    @property
    def chosen(self) -> list[Trajectory]:
        """o* per planned question."""
        return [self.candidates[q][i] for q, i in zip(self.qids, self.picked)]

    @property
    def n_candidates(self) -> int:
        """Candidates the selection looked at (the rows of a scoring pass)."""
        return sum(len(self.candidates[q]) for q in self.qids)

    def chosen_flat_rows(self) -> list[int]:
        """Row of each o* in `flat_candidates(qids, candidates)` (the scoring pass's rows), plan order."""
        starts = np.cumsum([0] + [len(self.candidates[q]) for q in self.qids[:-1]]).tolist()
        return [int(s) + i for s, i in zip(starts, self.picked)] if self.qids else []


def plan_replayed(
    cfg: ExGRPOConfig,
    qids: Sequence[str],
    candidates: Callable[[str], list[Trajectory]],
    generator: torch.Generator,
    score: Callable[[list[tuple[str, Trajectory]]], torch.Tensor],
) -> ReplayedPlan:
    """o* for each of a step's replayed questions (paper Alg. 1 lines 9-11, §4.1).

    Args:
        qids: the step's replayed question ids (`ExperienceManager.plan_replay`).
        candidates: qid -> its stored trajectories (`ExperienceManager.candidates`).
        generator: the run's selection RNG (`choose_replayed`).
        score: flat candidates -> [N] current-policy scores (`selection.candidate_scores`): the runtime's
            forward over all candidates of the plan, in `flat_candidates` order. Called only when
            `scoring_needed(cfg)` and the plan is not empty.
    """
    cands = {qid: candidates(qid) for qid in qids}
    scores = score(flat_candidates(qids, cands)) if qids and scoring_needed(cfg) else None
    return ReplayedPlan(list(qids), cands, choose_replayed(cfg, qids, cands, generator, scores))


def replayed_session(n_rollouts: int) -> int:
    """Position of o* inside its experiential group (verl: its session id): the last of the K."""
    return n_rollouts - 1


# --------------------------------------------------------------------------- rows and groups
@dataclass
class StepRows:
    """The rows of one trained batch, in the runtime's order (N rows)."""

    qids: list[str]
    """[N] question id of each row."""
    group: torch.Tensor
    """[N] long: group id = prompt slot (see `step_rows` for the numbering)."""
    position: list[int]
    """[N] order inside the group (verl: the session id); records keep the fresh rows in this order."""
    is_replay: torch.Tensor
    """[N] bool: the replayed trajectory of an experiential group."""
    rewards: torch.Tensor
    """[N] float32 sequence rewards (the replayed row's is 1.0: stored trajectories are correct)."""
    real: torch.Tensor
    """[N] bool: False on filler rows of the runtime (verl's synthetic padding), which belong to no group."""
    n_rollouts: int
    """K."""
    n_submitted: int = 0
    """Slots named in `step_rows`'s `slot_order` (the prompts submitted); the first group ids."""


def step_rows(
    qids: Sequence[str],
    slots: Sequence[Hashable],
    is_replay: Sequence[bool],
    rewards: Sequence[float],
    n_rollouts: int,
    *,
    position: Sequence[int] | None = None,
    real: Sequence[bool] | None = None,
    slot_order: Sequence[Hashable] = (),
) -> StepRows:
    """Row table of a step. `slots[i]` names row i's prompt slot (CPU trainer: the slot index; verl: the uid).

    Groups are numbered in `slot_order` (the order the prompts were submitted; slots absent from the rows
    keep their number unused), then in order of first appearance; records follow this numbering.

    Errors (a bug, not a rollout failure): a group with more than K rows, more than one replayed row, or rows
    of two questions.
    """
    n = len(qids)
    if not (len(slots) == len(is_replay) == len(rewards) == n):
        raise ValueError(
            f"misaligned step: {n} qids, {len(slots)} slots, {len(is_replay)} replay flags, "
            f"{len(rewards)} rewards"
        )
    order: dict[Hashable, int] = {s: i for i, s in enumerate(dict.fromkeys(slot_order))}
    n_submitted = len(order)
    group = torch.tensor([order.setdefault(s, len(order)) for s in slots], dtype=torch.long)
    rows = StepRows(
        [str(q) for q in qids],
        group,
        list(range(n)) if position is None else [int(p) for p in position],
        torch.as_tensor(list(is_replay), dtype=torch.bool),
        torch.as_tensor(np.asarray(rewards, dtype=np.float32)),
        torch.ones(n, dtype=torch.bool) if real is None else torch.as_tensor(list(real), dtype=torch.bool),
        int(n_rollouts),
        n_submitted,
    )
    rows.is_replay &= rows.real
    slot_of = {g: s for s, g in order.items()}
    for members in _members(rows):
        if (
            len(members) > n_rollouts
            or int(rows.is_replay[members].sum()) > 1
            or len({rows.qids[i] for i in members}) > 1
        ):
            raise ValueError(
                f"slot {slot_of[int(rows.group[members[0]])]!r}: {len(members)} rows, "
                f"{int(rows.is_replay[members].sum())} replayed, questions "
                f"{sorted({rows.qids[i] for i in members})} (n_rollouts={n_rollouts})"
            )
    return rows


def _members(rows: StepRows) -> list[list[int]]:
    """Real rows of each group, in group-id order (groups of filler rows only are left out)."""
    out: dict[int, list[int]] = {}
    for i, g in enumerate(rows.group.tolist()):
        if bool(rows.real[i]):
            out.setdefault(g, []).append(i)
    return [out[g] for g in sorted(out)]


def fresh_rows(rows: StepRows) -> torch.Tensor:
    """[N] bool: the real rows that are not a replayed o* (the step's fresh responses)."""
    return rows.real & ~rows.is_replay


def advantages_and_mask(rows: StepRows, cfg: ExGRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixed-group advantages (paper Eq. 4; Dr.GRPO unless `adv_std_norm`) and the difficulty sample mask
    (Eq. 14) per row. Filler rows get advantage 0 and mask False."""
    group = torch.where(rows.real, rows.group, -1)  # filler rows: one group of their own
    adv = group_advantages(rows.rewards, group, std_norm=cfg.adv_std_norm, eps=cfg.adv_eps)
    mask = difficulty_mask(
        group_accuracy(rows.rewards, group), cfg.difficulty_mask, cfg.mask_hard_high, cfg.mask_easy_low
    )
    return torch.where(rows.real, adv, 0.0), mask & rows.real


def group_success(rows: StepRows, cfg: ExGRPOConfig) -> list[int]:
    """k per real group as trained: its fresh successes, plus the replayed one when `replay_counts_in_k`."""
    ks = []
    for members in _members(rows):
        fresh = [i for i in members if not bool(rows.is_replay[i])]
        replayed = len(fresh) < len(members)
        ks.append(int((rows.rewards[fresh] > 0.5).sum()) + int(replayed and cfg.replay_counts_in_k))
    return ks


def kept_groups(rows: StepRows, sample_mask: torch.Tensor) -> int:
    """Groups the difficulty mask keeps (any real row with gradient)."""
    return sum(int(bool(sample_mask[m].any())) for m in _members(rows))


def batch_pass1(rows: StepRows) -> float:
    """Fraction of the batch's real FRESH responses with reward 1 (the delayed-start signal, released `batch/solved`)."""
    fresh = fresh_rows(rows)
    return (
        float(rows.rewards[fresh].mean()) if bool(fresh.any()) else 0.0
    )  # float32, as both runtimes logged it


@dataclass
class GroupRecord:
    """What `ExperienceManager.record_group` gets for one complete group."""

    qid: str
    rewards: np.ndarray
    """float32 [K]: the group as trained, the replayed row's reward first (experiential groups)."""
    fresh_rows: list[int]
    """Row indices of the group's fresh trajectories, in `position` order (aligned with rewards[-len:])."""
    replayed: bool


def group_records(rows: StepRows) -> list[GroupRecord]:
    """One record per COMPLETE real group (K rows), in group-id order; short groups are left out."""
    out = []
    for members in _members(rows):
        if len(members) != rows.n_rollouts:
            continue
        rep = [i for i in members if bool(rows.is_replay[i])]
        fresh = sorted((i for i in members if not bool(rows.is_replay[i])), key=lambda i: rows.position[i])
        rewards = rows.rewards[rep + fresh].numpy().astype(np.float32)
        out.append(GroupRecord(rows.qids[members[0]], rewards, fresh, bool(rep)))
    return out


def record_groups(
    manager: object, rows: StepRows, trajectory: Callable[[int], Trajectory], step: int
) -> list[GroupRecord]:
    """Hand every complete group to `manager.record_group`; `trajectory(i)` builds row i's fresh trajectory."""
    records = group_records(rows)
    for rec in records:
        manager.record_group(  # type: ignore[attr-defined]
            rec.qid,
            rec.rewards,
            [trajectory(i) for i in rec.fresh_rows],
            replayed=rec.replayed,
            step=step,
        )
    return records


def step_stats(
    rows: StepRows, sample_mask: torch.Tensor, cfg: ExGRPOConfig, keyed: StepKeys | None = None
) -> dict[str, float]:
    """The step's group statistics, as plain numbers (the runtimes choose the logged names).

    mixed_fraction / bucket_<k> (k = 0..K), as the method bucketed the step: `success`: share of real groups
    with 0 < k < K and groups with k successes (`group_success`, short groups included); `reward_std`: the
    manager's keys of the step's recorded (complete) groups, `keyed` = `ExperienceManager.step_keys()` after
    `record_groups`, read, not recomputed, and the share of them whose rewards are not all equal
    (`experience_groups.StepKeys`). kept_groups: groups the difficulty mask keeps; short_groups / missing_rows:
    groups with fewer than K real rows and the rows they lack; empty_slots: submitted slots (`n_submitted`)
    with no real row.
    """
    members = _members(rows)
    present = {int(rows.group[m[0]]) for m in members}
    if cfg.difficulty_signal != "reward_std":
        mixed, buckets = success_histogram(group_success(rows, cfg), cfg.n_rollouts)
    else:
        complete = sum(len(m) == rows.n_rollouts for m in members)
        if keyed is None or len(keyed.keys) != complete:
            raise ValueError(
                f"difficulty_signal='reward_std': the step's {complete} complete groups need the manager's "
                f"keys of this step (ExperienceManager.step_keys after record_groups), got "
                f"{'none' if keyed is None else len(keyed.keys)}"
            )
        mixed, buckets = keyed.histogram(cfg.n_rollouts)
    short = [m for m in members if len(m) < rows.n_rollouts]
    return {
        "mixed_fraction": mixed,
        "kept_groups": float(kept_groups(rows, sample_mask)),
        "short_groups": float(len(short)),
        "missing_rows": float(sum(rows.n_rollouts - len(m) for m in short)),
        "empty_slots": float(sum(g not in present for g in range(rows.n_submitted))),
        **{f"bucket_{k}": n for k, n in enumerate(buckets)},
    }


__all__ = [
    "GroupRecord",
    "ReplayedPlan",
    "StepRows",
    "advantages_and_mask",
    "batch_pass1",
    "choose_replayed",
    "flat_candidates",
    "fresh_rows",
    "group_records",
    "group_success",
    "kept_groups",
    "plan_replayed",
    "record_groups",
    "replayed_session",
    "scoring_needed",
    "step_rows",
    "step_stats",
]
