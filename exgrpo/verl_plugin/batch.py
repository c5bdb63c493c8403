"""Moving data between verl 0.9.1's structures and the exgrpo core (no method logic lives here).

verl's V1 trainer keeps every trajectory in the TransferQueue under the key `{uid}_{session}_{index}`, where
`uid` is a fresh uuid per prompt and step and `session` in [0, n) is the GRPO sample index. The plug-in
keys everything the core sees by its own stable question id (`qid`, a dataset column), never by `uid`;
the core's groups are prompt slots, i.e. uids (`exgrpo.core.step`).

How a replayed trajectory reaches its group (paper Eq. 4): the prompt row of an experiential question has
`agent_name = exgrpo_replay`, and the chosen stored trajectory (token ids, behaviour log-probs) is put into
the TransferQueue partition `exgrpo_replay` under the prompt's uid (`replay_payload`). `ReplayAgentLoop`
fetches it for session K-1 and returns it without calling the rollout server; sessions 0..K-2 generate
normally. The stored tokens so travel once, to the replayed row: verl copies every prompt column into each
of the K trajectories of a group (and into every reward request), so they are not a prompt column. All K
rows share the prompt's uid, so they form one group. After sampling, the driver derives per row: `is_replay`
(uid planned for replay and session K-1), the behaviour log-probs π_past (stored, for replayed rows), and,
through `exgrpo.core.step`, the groups, rewards, mixed-group advantages, records and pass@1, and writes
them back for the loss.

Departures from the CPU trainer, stated up front:
- Collected trajectories store the actor's recomputed `old_log_probs` as π_past (as released) where the
  CPU trainer stores its sampler's own log-probs (identical there: same model, temperature 1).
- verl may append synthetic padding rows (`is_padding` tag, uid `pad...`) to make the batch divisible;
  they are excluded from the core's bookkeeping, get advantage 0 and no gradient (empty response mask).
- A failed rollout session leaves its group short (verl's sync sampler keeps failed groups): the group is
  trained on the rows it has, as verl's GRPO would, not recorded, and counted (`exgrpo/short_groups`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from exgrpo.core import step as core_step
from exgrpo.core import step_batch as core_batch
from exgrpo.core import step_metrics as core_metrics
from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.selection import candidate_scores

QID_COLUMN = "qid"
"""Dataset column with the stable question id; falls back to `extra_info["index"]`."""
EXGRPO_QID = "exgrpo_qid"
"""Prompt column (and so TransferQueue field of every trajectory) holding the resolved question id."""
AGENT_NAME = "agent_name"
REPLAY_AGENT = "exgrpo_replay"
"""Agent loop of experiential prompts (exgrpo.verl_plugin.agent_loop.ReplayAgentLoop)."""
FRESH_AGENT = "exgrpo_fresh"
"""Agent loop of on-policy prompts: verl's single-turn loop that reports failed sessions
(exgrpo.verl_plugin.agent_loop.ReportingAgentLoop)."""
REPLAY_PARTITION = "exgrpo_replay"
"""TransferQueue partition with each experiential prompt's chosen trajectory, keyed by the prompt's uid."""
REPLAY_IDS = "exgrpo_replay_ids"
REPLAY_LOGP = "exgrpo_replay_logp"
"""Fields of a `REPLAY_PARTITION` entry: the stored token ids (int64) and behaviour log-probs (float32)."""
IS_REPLAY_FIELD = "exgrpo_is_replay"
"""TQ field, float [1] per trajectory: 1 = the replayed trajectory of an experiential group."""
BEHAV_FIELD = "exgrpo_behav_log_probs"
"""TQ field, nested [response_len]: π_past on replayed rows, 0 elsewhere (read on replayed rows only)."""
SAMPLE_MASK_FIELD = "exgrpo_sample_mask"
"""TQ field, float [1]: 1 = the row gets gradient (difficulty-masked GRPO, paper Eq. 14)."""
REPLAY_ACTIVE_KEY = "exgrpo_replay_active"
"""Batch-level (extra_info) flag read by the loss: mixed-policy mode is on (paper §4.2)."""
STEP_FIELDS = ["prompts", "responses", "response_mask", "rm_scores", "old_log_probs", "entropy", EXGRPO_QID]
"""The TQ fields the trainer reads back for a step's core assembly (ExGRPOTrainer._compute_advantage)."""


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
    raise ValueError(
        f"training data has neither a '{QID_COLUMN}' column nor extra_info.index; columns: {names}"
    )


def qid_positions(qids: Sequence[str]) -> dict[str, int]:
    """qid → dataset position; a duplicated id is an error (the buffer would merge two questions)."""
    out: dict[str, int] = {}
    for pos, qid in enumerate(qids):
        if qid in out:
            raise ValueError(
                f"question id {qid!r} appears twice in the training data (rows {out[qid]} and {pos})"
            )
        out[qid] = pos
    return out


def new_uid() -> str:
    """A verl prompt uid: uuid4 hex (verl splits trajectory keys on '_', so no '_' allowed)."""
    return uuid.uuid4().hex


def prompt_rows(fresh: Sequence[dict[str, Any]], replay: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset items → verl prompt rows: fresh ones first, then one row per experiential question.

    Every row gets `uid`, the resolved question id and `agent_name`; the chosen trajectories travel separately
    (`replay_payload`), so fresh and experiential rows have one schema and carry nothing per token.
    """
    rows = []
    for items, agent in ((fresh, FRESH_AGENT), (replay, REPLAY_AGENT)):
        for item in items:
            rows.append({**item, "uid": new_uid(), EXGRPO_QID: question_id(item), AGENT_NAME: agent})
    return rows


def replay_payload(
    uids: Sequence[str], chosen: Sequence[Trajectory]
) -> tuple[list[str], list[dict[str, Any]]]:
    """(keys, per-key fields) of the `REPLAY_PARTITION` entries for the experiential prompts `uids`."""
    if len(uids) != len(chosen):
        raise ValueError(f"{len(uids)} experiential prompts but {len(chosen)} chosen trajectories")
    fields = []
    for uid, traj in zip(uids, chosen):
        ids = torch.as_tensor(np.asarray(traj.token_ids).astype(np.int64))
        logp = torch.as_tensor(np.asarray(traj.logprobs).astype(np.float32))
        if ids.numel() == 0 or ids.shape != logp.shape:
            raise ValueError(
                f"prompt {uid}: stored trajectory has {ids.numel()} tokens and {logp.numel()} log-probs"
            )
        fields.append({REPLAY_IDS: ids, REPLAY_LOGP: logp})
    return list(uids), fields


# --------------------------------------------------------------------------- trajectory rows after sampling
def parse_key(key: str) -> tuple[str, int, int]:
    """`{uid}_{session}_{index}` → (uid, session, index)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"unexpected trajectory key {key!r}; expected '{{uid}}_{{session}}_{{index}}'")
    return parts[0], int(parts[1]), int(parts[2])


def step_rows(
    keys: Sequence[str],
    tags: Sequence[Mapping[str, Any]],
    qids: Sequence[str],
    rewards: torch.Tensor,
    replay_uids: Iterable[str],
    n_rollouts: int,
    submitted: Sequence[str] = (),
) -> tuple[core_step.StepRows, list[str]]:
    """The core's row table of a sampled batch, and each row's uid.

    Rows of one uid are one group (its slot), numbered in `submitted` order (the prompts as submitted), so
    groups are recorded in the order the CPU trainer records them. Multi-output agent loops (index > 0) are
    not used by ExGRPO: an error.
    """
    replay_uids = set(replay_uids)
    uids, sessions = [], []
    for key in keys:
        uid, session, index = parse_key(key)
        if index != 0:
            raise ValueError(f"trajectory {key!r}: multi-output agent loops are not supported by the plug-in")
        uids.append(uid)
        sessions.append(session)
    if not (len(tags) == len(qids) == len(uids) == rewards.shape[0]):
        raise ValueError(
            f"misaligned batch: {len(keys)} keys, {len(tags)} tags, {len(qids)} qids, "
            f"{rewards.shape[0]} rewards"
        )
    last = core_step.replayed_session(n_rollouts)
    real = [not bool(t.get("is_padding", False)) for t in tags]
    is_replay = [u in replay_uids and s == last for u, s in zip(uids, sessions)]
    rows = core_step.step_rows(
        qids,
        uids,
        is_replay,
        rewards.to(torch.float32).tolist(),
        n_rollouts,
        position=sessions,
        real=real,
        slot_order=submitted,
    )
    return rows, uids


def fresh_response_metrics(
    rows: core_step.StepRows, entropy: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """`core.step_metrics.response_metrics` of the FRESH rows (`core.step.fresh_rows`: replayed and padding rows
    left out). Args: nested [B, response] entropy (the old-policy recomputation) and response mask."""
    fresh = core_step.fresh_rows(rows)
    return core_metrics.response_metrics(
        entropy.to_padded_tensor(0.0)[fresh], response_mask.to_padded_tensor(0)[fresh].bool()
    )


def as_list(values: Any) -> list:
    """A TransferQueue non-tensor column (NonTensorStack, numpy array or list) as a plain list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


# --------------------------------------------------------------------------- trajectory selection
def scoring_rows(
    prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[np.ndarray]
) -> list[dict[str, Any]]:
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
        rows.append(
            {
                "prompts": prompts,
                "responses": responses,
                "input_ids": input_ids,
                "position_ids": torch.arange(input_ids.numel(), dtype=torch.int64),
                "response_mask": mask,
                "loss_mask": mask,
            }
        )
    return rows


def score_candidates(
    cfg: ExGRPOConfig,
    flat: Sequence[Trajectory],
    token_logp: Sequence[torch.Tensor],
    token_entropy: Sequence[torch.Tensor],
    pad_id: int,
) -> torch.Tensor:
    """[N] current-policy scores of the plan's candidates (`core.step.flat_candidates`, in that order) from the
    actor's per-candidate log-probs and entropies ([len_i] each), via the core's `candidate_scores`."""
    if len(flat) != len(token_logp) or len(flat) != len(token_entropy):
        raise ValueError(f"{len(flat)} candidates but {len(token_logp)} log-prob rows")
    for i, c in enumerate(flat):
        n = len(c.token_ids)
        if token_logp[i].shape != (n,) or token_entropy[i].shape != (n,):
            raise ValueError(
                f"candidate {i}: forward returned {tuple(token_logp[i].shape)} values for {n} tokens"
            )
    ids, mask = core_batch.candidate_tokens([("", c) for c in flat], pad_id)
    logp, _ = core_batch.pad_rows([lp.float() for lp in token_logp], 0.0)
    ent, _ = core_batch.pad_rows([e.float() for e in token_entropy], 0.0)
    return candidate_scores(
        cfg, mask=mask, token_entropy=ent, token_logp=logp, response_ids=ids, pad_id=pad_id
    )


__all__ = [
    "AGENT_NAME",
    "BEHAV_FIELD",
    "EXGRPO_QID",
    "FRESH_AGENT",
    "IS_REPLAY_FIELD",
    "QID_COLUMN",
    "REPLAY_ACTIVE_KEY",
    "REPLAY_AGENT",
    "REPLAY_IDS",
    "REPLAY_LOGP",
    "REPLAY_PARTITION",
    "SAMPLE_MASK_FIELD",
    "as_list",
    "dataset_qids",
    "fresh_response_metrics",
    "new_uid",
    "parse_key",
    "prompt_rows",
    "qid_positions",
    "question_id",
    "replay_payload",
    "score_candidates",
    "scoring_rows",
    "step_rows",
]
