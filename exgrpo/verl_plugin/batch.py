"""Moving data between verl 0.9.1's structures and the exgrpo core (no method logic lives here).

verl's V1 trainer keeps every trajectory in the TransferQueue under the key `{uid}_{session}_{index}`, where
`uid` is a fresh uuid per prompt and step and `session` in [0, n) is the GRPO sample index. The plug-in
keys everything the core sees by its own stable question id (`qid`, a dataset column), never by `uid`.

How a replayed trajectory reaches its group (paper Eq. 4, verl.md §11 route A1): the prompt row of an
experiential question carries the chosen stored trajectory (`exgrpo_replay_ids`, `exgrpo_replay_logp`)
and `agent_name = exgrpo_replay`; `ReplayAgentLoop` returns that trajectory for session K-1 without
calling the rollout server and generates sessions 0..K-2 normally. All K rows share the prompt's uid, so
they form one group. After sampling, the driver derives per row: `is_replay` (uid planned for replay and
session K-1), the behaviour log-probs π_past (stored, for replayed rows), the group index, rewards, and the
mixed-group advantages (core `group_advantages`), and writes them back for the loss.

Departures from the CPU trainer, stated up front:
- Collected trajectories store the actor's recomputed `old_log_probs` as π_past (as released) where the
  CPU trainer stores its sampler's own log-probs (identical there: same model, temperature 1).
- verl may append synthetic padding rows (`is_padding` tag, uid `pad...`) to make the batch divisible;
  they are excluded from the core's bookkeeping, get advantage 0 and no gradient (empty response mask).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from exgrpo.config import ExGRPOConfig
from exgrpo.core.advantages import difficulty_mask, group_accuracy, group_advantages, success_histogram
from exgrpo.core.buffer import Trajectory
from exgrpo.core.selection import candidate_scores, select_index

QID_COLUMN = "qid"
"""Dataset column with the stable question id; falls back to `extra_info["index"]`."""
EXGRPO_QID = "exgrpo_qid"
"""Prompt column (and so TransferQueue field of every trajectory) holding the resolved question id."""
AGENT_NAME = "agent_name"
REPLAY_AGENT = "exgrpo_replay"
"""Agent loop of experiential prompts (exgrpo.verl_plugin.agent_loop.ReplayAgentLoop)."""
FRESH_AGENT = "single_turn_agent"
"""verl's own single-turn agent loop, for on-policy prompts."""
REPLAY_IDS = "exgrpo_replay_ids"
REPLAY_LOGP = "exgrpo_replay_logp"
IS_REPLAY_FIELD = "exgrpo_is_replay"
"""TQ field, float [1] per trajectory: 1 = the replayed trajectory of an experiential group."""
BEHAV_FIELD = "exgrpo_behav_log_probs"
"""TQ field, nested [response_len]: π_past on replayed rows, 0 elsewhere (read on replayed rows only)."""
SAMPLE_MASK_FIELD = "exgrpo_sample_mask"
"""TQ field, float [1]: 1 = the row gets gradient (difficulty-masked GRPO, paper Eq. 14)."""
REPLAY_ACTIVE_KEY = "exgrpo_replay_active"
"""Batch-level (extra_info) flag read by the loss: mixed-policy mode is on (paper §4.2)."""


# --------------------------------------------------------------------------- question ids and prompt rows
def question_id(row: Mapping[str, Any]) -> str:
    """The stable question id of a dataset row: its `qid` column, else `extra_info["index"]`."""
    qid = row.get(QID_COLUMN)
    if qid is None:
        extra = row.get("extra_info") or {}
        qid = extra.get("index") if isinstance(extra, Mapping) else None
    if qid is None or str(qid) == "":
        raise ValueError(f"dataset row has neither a '{QID_COLUMN}' column nor extra_info.index")
    return str(qid)


def dataset_qids(columns: Mapping[str, Sequence[Any]]) -> list[str]:
    """Question ids of all rows of a column store (an HF `datasets.Dataset`, as `RLHFDataset.dataframe`)."""
    names = list(getattr(columns, "column_names", None) or columns.keys())
    if QID_COLUMN in names:
        return [question_id({QID_COLUMN: q}) for q in columns[QID_COLUMN]]
    if "extra_info" in names:
        return [question_id({"extra_info": e}) for e in columns["extra_info"]]
    raise ValueError(f"training data has neither a '{QID_COLUMN}' column nor extra_info.index; columns: {names}")


def qid_positions(qids: Sequence[str]) -> dict[str, int]:
    """qid → dataset position; a duplicated id is an error (the buffer would merge two questions)."""
    out: dict[str, int] = {}
    for pos, qid in enumerate(qids):
        if qid in out:
            raise ValueError(f"question id {qid!r} appears twice in the training data (rows {out[qid]} and {pos})")
        out[qid] = pos
    return out


def new_uid() -> str:
    """A verl prompt uid: uuid4 hex (verl splits trajectory keys on '_', so no '_' allowed)."""
    return uuid.uuid4().hex


def prompt_rows(fresh: Sequence[dict[str, Any]], replay: Sequence[dict[str, Any]],
                chosen: Sequence[Trajectory]) -> list[dict[str, Any]]:
    """Dataset items → verl prompt rows: fresh ones first, then one row per experiential question.

    Every row gets `uid`, `agent_name` and the replay columns (empty lists on fresh rows, so all rows share
    one schema). An experiential row carries its chosen trajectory's token ids and behaviour log-probs.
    """
    if len(replay) != len(chosen):
        raise ValueError(f"{len(replay)} replay rows but {len(chosen)} chosen trajectories")
    rows = []
    for item in fresh:
        rows.append({**item, "uid": new_uid(), EXGRPO_QID: question_id(item), AGENT_NAME: FRESH_AGENT,
                     REPLAY_IDS: [], REPLAY_LOGP: []})
    for item, traj in zip(replay, chosen):
        ids = np.asarray(traj.token_ids).astype(np.int64).tolist()
        logp = np.asarray(traj.logprobs).astype(np.float64).tolist()
        if not ids or len(ids) != len(logp):
            raise ValueError(f"question {question_id(item)!r}: stored trajectory has {len(ids)} tokens and "
                             f"{len(logp)} log-probs")
        rows.append({**item, "uid": new_uid(), EXGRPO_QID: question_id(item), AGENT_NAME: REPLAY_AGENT,
                     REPLAY_IDS: ids, REPLAY_LOGP: logp})
    return rows


def replay_session(n_rollouts: int) -> int:
    """The session id that holds the replayed trajectory in an experiential group (the last one)."""
    return n_rollouts - 1


# --------------------------------------------------------------------------- trajectory rows after sampling
def parse_key(key: str) -> tuple[str, int, int]:
    """`{uid}_{session}_{index}` → (uid, session, index)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"unexpected trajectory key {key!r}; expected '{{uid}}_{{session}}_{{index}}'")
    return parts[0], int(parts[1]), int(parts[2])


@dataclass
class StepRows:
    """One sampled training batch, row-aligned with the TransferQueue keys (B rows)."""

    keys: list[str]
    uids: list[str]
    qids: list[str]
    sessions: list[int]
    is_replay: torch.Tensor
    """[B] bool: the replayed trajectory of an experiential group."""
    is_padding: torch.Tensor
    """[B] bool: verl's synthetic padding rows."""
    group: torch.Tensor
    """[B] long: group index (one per uid, in first-appearance order)."""
    rewards: torch.Tensor
    """[B] float: sequence reward (sum of rm_scores)."""


def step_rows(keys: Sequence[str], tags: Sequence[Mapping[str, Any]], qids: Sequence[str],
              rewards: torch.Tensor, replay_uids: Iterable[str], n_rollouts: int) -> StepRows:
    """Row table of a sampled batch. Multi-output agent loops (index > 0) are not used by ExGRPO: an error."""
    replay_uids = set(replay_uids)
    uids, sessions = [], []
    for key in keys:
        uid, session, index = parse_key(key)
        if index != 0:
            raise ValueError(f"trajectory {key!r}: multi-output agent loops are not supported by the plug-in")
        uids.append(uid)
        sessions.append(session)
    if not (len(tags) == len(qids) == len(uids) == rewards.shape[0]):
        raise ValueError(f"misaligned batch: {len(keys)} keys, {len(tags)} tags, {len(qids)} qids, "
                         f"{rewards.shape[0]} rewards")
    last = replay_session(n_rollouts)
    padding = torch.tensor([bool(t.get("is_padding", False)) for t in tags], dtype=torch.bool)
    replay = torch.tensor([u in replay_uids and s == last for u, s in zip(uids, sessions)], dtype=torch.bool)
    replay &= ~padding
    order: dict[str, int] = {}
    group = torch.tensor([order.setdefault(u, len(order)) for u in uids], dtype=torch.long)
    return StepRows(list(keys), uids, [str(q) for q in qids], sessions, replay, padding, group,
                    rewards.to(torch.float32))


def check_groups(rows: StepRows, replay_uids: Iterable[str], n_rollouts: int) -> None:
    """Every real group has K rows, and exactly one replayed row iff its uid was planned for replay."""
    replay_uids = set(replay_uids)
    for g in torch.unique(rows.group[~rows.is_padding]).tolist():
        members = (rows.group == g).nonzero().flatten().tolist()
        uid = rows.uids[members[0]]
        n_rep = int(rows.is_replay[members].sum())
        if len(members) != n_rollouts:
            raise ValueError(f"group {uid} (question {rows.qids[members[0]]!r}) has {len(members)} rows, "
                             f"expected n_rollouts={n_rollouts}")
        if n_rep != (1 if uid in replay_uids else 0):
            raise ValueError(f"group {uid}: {n_rep} replayed rows (planned for replay: {uid in replay_uids})")


def core_advantages(rows: StepRows, cfg: ExGRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixed-group advantages and the difficulty sample mask, from the core (paper Eq. 4, Eq. 14).

    Returns: ([B] advantages, [B] bool sample mask); padding rows get advantage 0 and mask False.
    """
    adv = group_advantages(rows.rewards, rows.group, std_norm=cfg.adv_std_norm, eps=cfg.adv_eps)
    acc = group_accuracy(rows.rewards, rows.group)
    mask = difficulty_mask(acc, cfg.difficulty_mask, cfg.mask_hard_high, cfg.mask_easy_low)
    return torch.where(rows.is_padding, 0.0, adv), mask & ~rows.is_padding


def group_stats(rows: StepRows, sample_mask: torch.Tensor, cfg: ExGRPOConfig) -> dict[str, float]:
    """Per-step group metrics the CPU trainer logs too (results contract), over real (non-padding) groups.

    k per group counts the fresh successes, plus the replayed one when `replay_counts_in_k` (as trained;
    mirrors `CPUTrainer._group_success`). Returns `exgrpo/mixed_fraction` (share of groups with 0 < k < K),
    `exgrpo/masked_questions` (groups the difficulty mask keeps) and `exp/bucket_<k>` (groups with k
    successes, k = 0..K).
    """
    real = ~rows.is_padding
    ks, kept = [], 0
    for g in torch.unique(rows.group[real]).tolist():
        members = (rows.group == g) & real
        fresh = members & ~rows.is_replay
        replayed = bool((members & rows.is_replay).any())
        ks.append(int((rows.rewards[fresh] > 0.5).sum()) + int(replayed and cfg.replay_counts_in_k))
        kept += int(bool(sample_mask[members].any()))
    mixed, buckets = success_histogram(ks, cfg.n_rollouts)
    return {"exgrpo/mixed_fraction": mixed, "exgrpo/masked_questions": float(kept),
            **{f"exp/bucket_{k}": n for k, n in enumerate(buckets)}}


def behaviour_log_probs(rows: StepRows, response_lens: Sequence[int],
                        replay_logp: Mapping[str, np.ndarray]) -> list[torch.Tensor]:
    """Per row, [response_len] float32: the stored π_past of the replayed trajectory on replayed rows,
    zeros on all other rows. `replay_logp` maps uid → the chosen trajectory's log-probs."""
    out = []
    for i, n in enumerate(response_lens):
        if bool(rows.is_replay[i]):
            lp = np.asarray(replay_logp[rows.uids[i]], dtype=np.float32)
            if lp.shape != (n,):
                raise ValueError(f"replayed trajectory of question {rows.qids[i]!r}: {lp.shape[0]} stored "
                                 f"log-probs but {n} response tokens in the batch (truncated?)")
            out.append(torch.from_numpy(lp.copy()))
        else:
            out.append(torch.zeros(int(n), dtype=torch.float32))
    return out


def group_records(rows: StepRows, response_ids: Sequence[torch.Tensor], old_log_probs: Sequence[torch.Tensor],
                  entropies: Sequence[torch.Tensor], step: int) -> list[tuple[str, np.ndarray, list[Trajectory], bool]]:
    """What `ExperienceManager.record_group` gets per group: (qid, FRESH rewards, FRESH trajectories, replayed).

    Fresh rows keep their session order; the replayed row and padding rows are left out (the manager counts
    the replayed success itself, `replay_counts_in_k`). Mirrors `CPUTrainer._record`.
    """
    out = []
    for g in torch.unique(rows.group[~rows.is_padding]).tolist():
        members = [i for i in (rows.group == g).nonzero().flatten().tolist()
                   if not bool(rows.is_replay[i]) and not bool(rows.is_padding[i])]
        members.sort(key=lambda i: rows.sessions[i])
        replayed = bool(rows.is_replay[rows.group == g].any())
        trajs = []
        for i in members:
            ent = entropies[i]
            trajs.append(Trajectory(token_ids=response_ids[i].numpy().astype(np.int32),
                                    logprobs=old_log_probs[i].numpy().astype(np.float32), step=int(step),
                                    entropy=float(ent.mean()) if ent.numel() else float("nan")))
        qid = rows.qids[members[0]] if members else rows.qids[(rows.group == g).nonzero()[0, 0]]
        out.append((qid, rows.rewards[members].numpy().astype(np.float32), trajs, replayed))
    return out


def batch_pass1(rows: StepRows) -> float:
    """Fraction of the batch's FRESH responses with reward 1 (delayed-start signal; as `CPUTrainer.step`)."""
    fresh = ~rows.is_replay & ~rows.is_padding
    return float(rows.rewards[fresh].mean()) if bool(fresh.any()) else 0.0


# --------------------------------------------------------------------------- trajectory selection
def needs_current_policy(cfg: ExGRPOConfig, candidates: Sequence[Trajectory]) -> bool:
    """Whether this question's selection needs a forward pass under the current policy (paper §4.1)."""
    return (len(candidates) > 1 and cfg.selection_mode != "random" and cfg.selection_metric != "random"
            and cfg.selection_policy == "current")


def choose_trajectories(cfg: ExGRPOConfig, plan: Sequence[str], candidates: Mapping[str, Sequence[Trajectory]],
                        scores: Mapping[str, torch.Tensor], generator: torch.Generator) -> list[Trajectory]:
    """o* for each planned question, in plan order (paper §4.1, Alg. 1 line 11; mirrors `CPUTrainer._select`).

    `scores[qid]`: [n] current-policy scores for questions where `needs_current_policy`; single candidates
    and random selection draw uniform scores from `generator`; `at_collection` uses the recorded entropy.
    """
    out = []
    for qid in plan:
        cands = list(candidates[qid])
        if not cands:
            raise ValueError(f"question {qid!r} was planned for replay but has no stored trajectory")
        if len(cands) == 1 or cfg.selection_mode == "random" or cfg.selection_metric == "random":
            s, mode = torch.rand(len(cands), generator=generator), "argmin"
        elif cfg.selection_policy == "at_collection":
            s, mode = torch.tensor([c.entropy for c in cands], dtype=torch.float32), cfg.selection_mode
        else:
            s, mode = scores[qid], cfg.selection_mode
            if s.shape != (len(cands),):
                raise ValueError(f"question {qid!r}: {tuple(s.shape)} scores for {len(cands)} candidates")
        out.append(cands[select_index(s, mode, generator)])
    return out


def scoring_rows(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Per candidate, the no-padding fields verl's actor forward reads (as the agent loop writes them):
    prompts, responses, input_ids = prompt + response, position_ids = arange, response_mask = loss_mask = 1."""
    rows = []
    for p, r in zip(prompt_ids, response_ids):
        prompts = torch.as_tensor(list(p), dtype=torch.int64)
        responses = torch.as_tensor(np.asarray(r), dtype=torch.int64)
        if prompts.numel() == 0 or responses.numel() == 0:
            raise ValueError("scoring needs a non-empty prompt and response")
        input_ids = torch.cat([prompts, responses])
        mask = torch.ones_like(responses)
        rows.append({"prompts": prompts, "responses": responses, "input_ids": input_ids,
                     "position_ids": torch.arange(input_ids.numel(), dtype=torch.int64),
                     "response_mask": mask, "loss_mask": mask})
    return rows


def score_candidates(cfg: ExGRPOConfig, plan: Sequence[str], candidates: Mapping[str, Sequence[Trajectory]],
                     token_logp: Sequence[torch.Tensor], token_entropy: Sequence[torch.Tensor], pad_id: int
                     ) -> dict[str, torch.Tensor]:
    """Current-policy scores per question from one forward pass over all candidates of the scored questions
    (concatenated in plan order; each tensor [len_i]), via the core's `candidate_scores`."""
    scored = [q for q in plan if needs_current_policy(cfg, candidates[q])]
    flat = [c for q in scored for c in candidates[q]]
    if len(flat) != len(token_logp) or len(flat) != len(token_entropy):
        raise ValueError(f"{len(flat)} candidates but {len(token_logp)} log-prob rows")
    if not flat:
        return {}
    width = max(len(c.token_ids) for c in flat)
    mask = torch.zeros(len(flat), width, dtype=torch.bool)
    ids = torch.full((len(flat), width), pad_id, dtype=torch.long)
    logp = torch.zeros(len(flat), width)
    ent = torch.zeros(len(flat), width)
    for i, c in enumerate(flat):
        n = len(c.token_ids)
        if token_logp[i].shape != (n,) or token_entropy[i].shape != (n,):
            raise ValueError(f"candidate {i}: forward returned {tuple(token_logp[i].shape)} values for {n} tokens")
        mask[i, :n] = True
        ids[i, :n] = torch.as_tensor(np.asarray(c.token_ids), dtype=torch.long)
        logp[i, :n] = token_logp[i].float()
        ent[i, :n] = token_entropy[i].float()
    s = candidate_scores(cfg, mask=mask, token_entropy=ent, token_logp=logp, response_ids=ids, pad_id=pad_id)
    out, start = {}, 0
    for q in scored:
        n = len(candidates[q])
        out[q] = s[start:start + n]
        start += n
    return out


__all__ = ["AGENT_NAME", "BEHAV_FIELD", "EXGRPO_QID", "dataset_qids", "FRESH_AGENT", "IS_REPLAY_FIELD", "QID_COLUMN", "REPLAY_ACTIVE_KEY",
           "REPLAY_AGENT", "REPLAY_IDS", "REPLAY_LOGP", "SAMPLE_MASK_FIELD", "StepRows", "batch_pass1",
           "behaviour_log_probs", "check_groups", "choose_trajectories", "core_advantages", "group_records",
           "needs_current_policy", "new_uid", "parse_key", "prompt_rows", "qid_positions", "question_id",
           "replay_session", "score_candidates", "scoring_rows", "step_rows"]
