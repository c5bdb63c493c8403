"""The CPU trainer: on-policy Dr.GRPO and ExGRPO on tiny transformers backbones.

Everything that is the method comes from `exgrpo.core` (the verl plug-in calls the same functions):
question sampling, bookkeeping, retirement and the delayed start (`ExperienceManager`), trajectory
selection (`selection`), mixed-group advantages (`advantages`), the shaped loss (`loss`) and the
reward (`reward.Verifier`). This file only moves data: rollouts, batches, optimizer steps, logs,
checkpoints.

One training step, as released (paper.md §6.2): plan replay → select o* per replayed question →
roll out K fresh (K-1 for replayed questions) → reward → mixed-group advantages → `mini_batches`
optimizer steps over the batch (paper: 128 prompts, mini-batch 64 → 2 steps) → collect experience
→ step-end bookkeeping (retire, delayed-start switch).

Departures from the paper, stated up front: batch, lengths and learning rate are scaled down for
tiny models (B=16 prompts, 72 new tokens, lr 1e-4 instead of 128, 8192, 1e-6); the old log-probs
π_θold of fresh rows are the rollout's own log-probs at temperature 1 (exact at T=1, top-p=1; verl's
"bypass" mode), not a second forward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from exgrpo.config import ExGRPOConfig
from exgrpo.core.advantages import difficulty_mask, group_accuracy, group_advantages, success_histogram
from exgrpo.core.buffer import Trajectory
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.loss import exgrpo_policy_loss
from exgrpo.core.reward import Verifier
from exgrpo.core.selection import candidate_scores, select_index
from exgrpo.tiny.rollout import generate, score


@dataclass
class TrainArgs:
    """Runtime settings of the CPU trainer (the method's settings live in ExGRPOConfig)."""

    steps: int = 200
    """Training steps (one rollout batch each)."""
    batch_size: int = 16
    """B: questions per step (fresh + replayed)."""
    mini_batches: int = 2
    """Optimizer steps per training step (paper: 128 prompts, mini-batch 64 → 2)."""
    lr: float = 1e-4
    """AdamW learning rate (tiny-testbed.md §4: 1e-4 gains without eroding greedy accuracy)."""
    adam_beta2: float = 0.99
    """AdamW β2 (β1 = 0.9)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    temperature: float = 1.0
    """Rollout temperature (paper: 1.0)."""
    top_p: float = 1.0
    """Rollout top-p (paper: 1.0)."""
    max_new_tokens: int = 72
    """Response length cap; also the constant loss normaliser when `loss_norm_const` is 0."""
    val_every: int = 25
    """Validate every N steps (and at the last step); 0 disables."""
    val_size: int = 200
    """Validation questions (first N of the valid split)."""
    val_temperature: float = 0.6
    """Validation temperature (paper: 0.6, one sample)."""
    ckpt_every: int = 25
    """Checkpoint every N steps (and at the last step)."""
    threads: int = 1
    """torch intra-op threads."""
    stop_after: int = 0
    """Exit after this step without finishing (tests and failure drills); 0 = run to the end."""


@dataclass
class Question:
    qid: str
    prompt_ids: list[int]
    answer: str
    kind: str


class CPUTrainer:
    """Drives the exgrpo core on a tiny HF model. State lives in `state_dict`-able parts only."""

    def __init__(self, model: Any, tokenizer: Any, cfg: ExGRPOConfig, args: TrainArgs, train: list[Question],
                 valid: list[Question], seed: int):
        self.model, self.tok, self.cfg, self.args, self.seed = model, tokenizer, cfg, args, seed
        self.questions = {q.qid: q for q in train}
        self.valid = valid[: args.val_size]
        self.manager = ExperienceManager(cfg, seed=seed)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, args.adam_beta2),
                                           weight_decay=args.weight_decay)
        self.generators = {"rollout": torch.Generator().manual_seed(seed),
                           "shuffle": torch.Generator().manual_seed(seed + 1),
                           "select": torch.Generator().manual_seed(seed + 2)}
        self.verifier = Verifier.from_config(cfg)
        self.norm_const = cfg.loss_norm_const or args.max_new_tokens
        self._current_logp: dict[str, torch.Tensor] = {}
        """This step's o* log-probs under the current policy, from the selection forward (π_θold of replay rows)."""

    # ------------------------------------------------------------------ one step
    def step(self, step: int, fresh_qids: list[str], replay_qids: list[str]) -> dict[str, float]:
        """Run training step `step` on the given fresh and replayed questions; return its metrics."""
        K = self.cfg.n_rollouts
        t0 = time.perf_counter()
        chosen = self._select_all(replay_qids)
        t_sel = time.perf_counter() - t0

        owners = [qid for qid in fresh_qids for _ in range(K)] + [qid for qid in replay_qids for _ in range(K - 1)]
        prompts = [self.questions[qid].prompt_ids for qid in owners]
        self.model.eval()
        with torch.no_grad():
            roll = generate(self.model, self.tok, prompts, max_new_tokens=self.args.max_new_tokens,
                            temperature=self.args.temperature, top_p=self.args.top_p,
                            generator=self.generators["rollout"])
        rewards = self.verifier.scores(roll.texts, [self.questions[q].answer for q in owners],
                                       [self.questions[q].kind for q in owners])
        t_roll = time.perf_counter() - t0 - t_sel

        batch = self._assemble(owners, prompts, roll, torch.as_tensor(rewards, dtype=torch.float32), chosen)
        update_metrics = self._update(batch)
        t_upd = time.perf_counter() - t0 - t_sel - t_roll

        self._record(step, owners, roll, rewards, set(replay_qids))
        pass1 = float(np.mean(rewards)) if len(rewards) else 0.0
        exp_metrics = self.manager.end_step(step, pass1)
        mixed, buckets = success_histogram(self._group_success(owners, rewards, set(replay_qids)), K)
        metrics: dict[str, float] = {
            "step": step,
            "reward/mean": pass1,
            "pass1": pass1,
            "entropy": _masked_mean(roll.entropy, roll.response_mask),
            "response_length": float(roll.response_mask.sum(1).float().mean()),
            "truncated_fraction": float(roll.truncated.float().mean()),
            "replay/n_trajectories": len(replay_qids),
            "groups/mixed_fraction": mixed,
            "masked/questions": float(batch["question_mask"].sum()),
            **{f"exp/bucket_{k}": n for k, n in enumerate(buckets)},
            **exp_metrics, **update_metrics, **self.verifier.metrics(),
            "time/selection": t_sel, "time/rollout": t_roll, "time/update": t_upd,
            "time/step": time.perf_counter() - t0,
        }
        self.verifier.reset_metrics()
        return metrics

    # ------------------------------------------------------------------ pieces
    def _select_all(self, qids: list[str]) -> dict[str, Trajectory]:
        """o* per replayed question: the candidate with the lowest (highest / a random) score (paper §4.1).

        All candidates of the step are scored in one forward pass, in plan order, as the released
        collate function does (the released entropy mask depends on the global candidate index).
        """
        self._current_logp = {}
        if not qids:
            return {}
        cands = {qid: self.manager.candidates(qid) for qid in qids}
        flat = [(qid, c) for qid in qids for c in cands[qid]]
        cfg = self.cfg
        logp = None
        if cfg.selection_mode == "random" or cfg.selection_metric == "random":
            scores = torch.rand(len(flat), generator=self.generators["select"])
        elif cfg.selection_policy == "at_collection":
            scores = torch.tensor([c.entropy for _, c in flat], dtype=torch.float32)
        else:
            ids, mask = _pad([torch.tensor(c.token_ids, dtype=torch.long) for _, c in flat], self.tok.pad_token_id)
            self.model.eval()
            with torch.no_grad():
                logp, ent = score(self.model, [self.questions[q].prompt_ids for q, _ in flat], ids, mask,
                                  temperature=1.0, with_entropy=cfg.selection_metric == "entropy")
            scores = candidate_scores(cfg, mask=mask, token_entropy=ent, token_logp=logp, response_ids=ids,
                                      pad_id=self.tok.pad_token_id)
        chosen, offset = {}, 0
        for qid in qids:
            n = len(cands[qid])
            pick = select_index(scores[offset:offset + n], cfg.selection_mode, self.generators["select"])
            chosen[qid] = cands[qid][pick]
            if logp is not None:  # the same weights as π_θold of the replayed row: no second forward
                self._current_logp[qid] = logp[offset + pick][mask[offset + pick]]
            offset += n
        return chosen

    def _assemble(self, owners: list[str], prompts: list[list[int]], roll: Any, rewards: torch.Tensor,
                  chosen: dict[str, Trajectory]) -> dict[str, Any]:
        """Fresh rows plus one replayed row per experiential question, grouped by question (Eq. 4)."""
        rows_ids = [roll.response_ids[i][roll.response_mask[i]] for i in range(len(owners))]
        rows_blogp = [roll.logprobs[i][roll.response_mask[i]] for i in range(len(owners))]
        all_owners, all_prompts, all_rewards = list(owners), list(prompts), rewards.tolist()
        for qid, traj in chosen.items():
            rows_ids.append(torch.tensor(traj.token_ids, dtype=torch.long))
            rows_blogp.append(torch.tensor(traj.logprobs, dtype=torch.float32))
            all_owners.append(qid)
            all_prompts.append(self.questions[qid].prompt_ids)
            all_rewards.append(1.0)  # stored trajectories are correct by construction
        ids, mask = _pad(rows_ids, self.tok.pad_token_id)
        blogp, _ = _pad(rows_blogp, 0.0)
        n_fresh = len(owners)
        is_replay = torch.zeros(len(all_owners), dtype=torch.bool)
        is_replay[n_fresh:] = True
        old_logp = blogp.clone()
        if chosen and all(q in self._current_logp for q in chosen):  # scored by the selection forward
            for row, qid in enumerate(chosen, start=n_fresh):
                old_logp[row, :len(self._current_logp[qid])] = self._current_logp[qid]
        elif chosen:  # π_θold for replayed rows: the current policy before this step's update
            self.model.eval()
            with torch.no_grad():
                lp, _ = score(self.model, all_prompts[n_fresh:], ids[n_fresh:], mask[n_fresh:], with_entropy=False)
            old_logp[n_fresh:] = torch.where(mask[n_fresh:], lp, 0.0)
        order = {qid: i for i, qid in enumerate(dict.fromkeys(all_owners))}
        group = torch.tensor([order[q] for q in all_owners], dtype=torch.long)
        reward_t = torch.tensor(all_rewards, dtype=torch.float32)
        adv = group_advantages(reward_t, group, std_norm=self.cfg.adv_std_norm, eps=self.cfg.adv_eps)
        sample_mask = difficulty_mask(group_accuracy(reward_t, group), self.cfg.difficulty_mask,
                                      self.cfg.mask_hard_high, self.cfg.mask_easy_low)
        first_rows = torch.tensor([all_owners.index(q) for q in order])
        question_mask = sample_mask[first_rows]
        return {"prompts": all_prompts, "ids": ids, "mask": mask, "old_logp": old_logp, "blogp": blogp,
                "adv": adv, "is_replay": is_replay, "sample_mask": sample_mask, "question_mask": question_mask}

    def _update(self, batch: dict[str, Any]) -> dict[str, float]:
        """`mini_batches` optimizer steps over a seeded shuffle of the rows (ppo_epochs = 1)."""
        self.model.train()
        n = batch["ids"].shape[0]
        perm = torch.randperm(n, generator=self.generators["shuffle"])
        sums: dict[str, float] = {}
        skipped = 0
        for chunk in torch.tensor_split(perm, self.args.mini_batches):
            if len(chunk) == 0:
                continue
            idx = chunk.tolist()
            logp, ent = score(self.model, [batch["prompts"][i] for i in idx], batch["ids"][chunk],
                              batch["mask"][chunk], temperature=1.0, with_entropy=True)
            loss, m = exgrpo_policy_loss(
                logp, batch["old_logp"][chunk], batch["adv"][chunk], batch["mask"][chunk],
                is_replay=batch["is_replay"][chunk], behaviour_logp=batch["blogp"][chunk],
                replay_active=self.manager.replay_active, cfg=self.cfg, norm_const=self.norm_const,
                token_entropy=ent, sample_mask=batch["sample_mask"][chunk])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip or float("inf")))
            if not np.isfinite(gnorm) or (self.cfg.skip_grad_bound and gnorm > self.cfg.skip_grad_bound):
                skipped += 1  # released: skip the step on a non-finite or huge grad norm
            else:
                self.optimizer.step()
            for key, val in {**m, "loss": float(loss.detach()), "grad_norm": gnorm}.items():
                sums[f"update/{key}"] = sums.get(f"update/{key}", 0.0) + float(val) / self.args.mini_batches
        sums["update/skipped_steps"] = float(skipped)
        return sums

    def _record(self, step: int, owners: list[str], roll: Any, rewards: np.ndarray, replayed: set[str]) -> None:
        """Hand each group's fresh trajectories and rewards to the manager (collection and bucketing)."""
        by_q: dict[str, list[int]] = {}
        for i, qid in enumerate(owners):
            by_q.setdefault(qid, []).append(i)
        for qid, rows in by_q.items():
            trajs = []
            for i in rows:
                m = roll.response_mask[i]
                ent = float(roll.entropy[i][m].mean()) if m.any() else float("nan")
                trajs.append(Trajectory(token_ids=roll.response_ids[i][m].numpy().astype(np.int32),
                                        logprobs=roll.logprobs[i][m].numpy().astype(np.float32),
                                        step=step, entropy=ent))
            group_rewards = np.asarray(rewards[rows], dtype=np.float32)
            if qid in replayed:  # the whole group as trained: the replayed (correct) trajectory at index 0
                group_rewards = np.concatenate([np.ones(1, dtype=np.float32), group_rewards])
            self.manager.record_group(qid, group_rewards, trajs, replayed=qid in replayed, step=step)

    def _group_success(self, owners: list[str], rewards: np.ndarray, replayed: set[str]) -> list[int]:
        """k per group as trained (the replayed success counts when `replay_counts_in_k`, paper.md §6.6-4)."""
        ks: dict[str, int] = {}
        for qid, r in zip(owners, rewards):
            ks[qid] = ks.get(qid, 0) + int(r > 0.5)
        return [k + (1 if q in replayed and self.cfg.replay_counts_in_k else 0) for q, k in ks.items()]

    def validate(self, step: int) -> dict[str, float]:
        """Validation accuracy: one sample per question at `val_temperature` (paper: n_val=1, T=0.6)."""
        if not self.valid:
            return {}
        gen = torch.Generator().manual_seed(self.seed * 100_003 + step)  # independent of the training RNG
        self.model.eval()
        with torch.no_grad():
            roll = generate(self.model, self.tok, [q.prompt_ids for q in self.valid],
                            max_new_tokens=self.args.max_new_tokens, temperature=self.args.val_temperature,
                            top_p=1.0, generator=gen)
        scores = self.verifier.scores(roll.texts, [q.answer for q in self.valid], [q.kind for q in self.valid])
        self.verifier.reset_metrics()
        return {"step": step, "val/acc": float(np.mean(scores))}


def _pad(rows: list[torch.Tensor], value: float | int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D tensors to [N, T] and return (padded, mask)."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=rows[0].dtype if rows else torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        mask[i, : len(r)] = True
    return out, mask


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def weights_digest(model: Any) -> str:
    """sha256 over the model's parameters, for bit-identity checks across resumes."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
