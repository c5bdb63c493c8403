"""The CPU trainer: on-policy Dr.GRPO and ExGRPO on tiny transformers backbones.

Everything that is the method comes from `exgrpo.core` (the verl plug-in calls the same functions):
question sampling, bookkeeping, retirement and the delayed start (`ExperienceManager`), the step's plan
(`step_questions`: fresh questions and row order; `step`: o* per replayed question, groups, success counts,
records, pass@1, advantages and the difficulty mask; `step_batch`: padding, the update batch, mini-batch
rows, rows as trajectories; `step_metrics`: the counts logged, by the registry's names), the shaped loss
(`loss`) and the reward (`reward.Verifier`). This file only executes the plan: rollouts, scoring forwards,
optimizer steps, logs, checkpoints.

One training step, as in the released code: plan replay → select o* per replayed question →
roll out K fresh (K-1 for replayed questions) → reward → mixed-group advantages → `mini_batches`
optimizer steps over the batch (paper: 128 prompts, mini-batch 64 → 2 steps) → collect experience
→ step-end bookkeeping (retire, delayed-start switch).

Departures from the paper, stated up front: batch, lengths and learning rate are scaled down for
tiny models (B=16 prompts, 72 new tokens, lr 1e-4 instead of 128, 8192, 1e-6); the old log-probs
π_θold of fresh rows are the rollout's own log-probs at temperature 1 (exact at T=1, top-p=1; verl's
"bypass" mode), not a second forward pass. The teacher-forced forwards (update, o* selection) go through
`exgrpo.testbed.packed_score`: each distinct prompt once, response tokens packed without padding, log-softmax
on real tokens only. The same maths as the transformers forward over the padded batch, equal up to float
rounding (~1e-5 in log-probs), so not bit-identical to the runs before it (the committed results are
regenerated with it): 1.15x on a whole 20-step tiny-math ExGRPO training, 1.29x on its steps
(benchmarks/results/train_speed_packed.json).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from exgrpo.core import step as core_step
from exgrpo.core import step_batch as core_batch
from exgrpo.core import step_metrics as core_metrics
from exgrpo.core import step_questions
from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.loss import exgrpo_policy_loss, resolve_norm_const
from exgrpo.core.loss_inputs import LossInputs
from exgrpo.core.reward import Verifier
from exgrpo.core.selection import candidate_scores, metric_needs
from exgrpo.records import metrics as M
from exgrpo.settings.trainer_settings import TrainerSettings
from exgrpo.testbed.packed_score import packed_score
from exgrpo.testbed.rollout import RolloutBatch, generate
from exgrpo.tiny.malloc import keep_freed_memory


@dataclass
class Question:
    qid: str
    prompt_ids: list[int]
    answer: str
    kind: str
    steps: tuple[str, ...] = ()
    """The canonical reasoning steps (the continuous reward `step_credit` grades them)."""


class CPUTrainer:
    """Drives the exgrpo core on a tiny HF model. State lives in `state_dict`-able parts only."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        cfg: ExGRPOConfig,
        args: TrainerSettings,
        train: list[Question],
        valid: list[Question],
        seed: int,
    ):
        if (
            cfg.reward_kind == "reward_model"
        ):  # never graded as step credit by the `else` of the reward branch
            raise ConfigError(
                "reward_kind",
                "'reward_model' is the verl plug-in's (a served reward model); the CPU trainer "
                "trains on 'binary' or 'step_credit'",
            )
        self.model, self.tok, self.cfg, self.args, self.seed = model, tokenizer, cfg, args, seed
        keep_freed_memory()  # the steps' large tensors reuse freed heap blocks (bit-identical; exgrpo.tiny.malloc)
        self.questions = {q.qid: q for q in train}
        self.valid = valid[: args.val_size]
        self.manager = ExperienceManager(cfg, seed=seed)
        # torch's default (on CPU the for-loop AdamW): for these 39 small tensors it beat foreach (2.4 vs 9.3 ms a
        # step, measured 2026-12-07), and the optimizer step is under 1% of the update either way.
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=args.lr, betas=args.betas, weight_decay=args.weight_decay
        )
        self.generators = {
            "rollout": torch.Generator().manual_seed(seed),
            "shuffle": torch.Generator().manual_seed(seed + 1),
            "select": torch.Generator().manual_seed(seed + 2),
        }
        self.verifier = Verifier.from_config(cfg)
        self.norm_const = resolve_norm_const(cfg.loss_norm_const, args.max_new_tokens)
        self._replayed = core_step.ReplayedPlan([], {}, [])
        """This step's replayed questions and their o* (`_select_all`)."""
        self._current_logp: list[torch.Tensor] = []
        """This step's o* log-probs under the current policy, in plan order, from the selection forward (π_θold
        of the replayed rows; empty when the selection scored nothing)."""

    # ------------------------------------------------------------------ one step
    def step(self, step: int, fresh_qids: list[str], replay_qids: list[str]) -> dict[str, float]:
        """Run training step `step` on the given fresh and replayed questions; return its metrics."""
        K = self.cfg.n_rollouts
        t0 = time.perf_counter()
        chosen = self._select_all(replay_qids)
        t_sel = time.perf_counter() - t0

        qids, slots, is_replay = step_questions.canonical_layout(fresh_qids, replay_qids, K)
        owners = qids[: len(qids) - len(replay_qids)]  # the rows that are rolled out
        roll, rewards, replay_rewards = self._roll_out(owners, replay_qids, chosen)
        t_roll = time.perf_counter() - t0 - t_sel

        rows = core_step.step_rows(
            qids, slots, is_replay, [*np.asarray(rewards, dtype=np.float32), *replay_rewards], K
        )
        n_roll = len(owners)
        masks = [roll.response_mask[i] for i in range(n_roll)]  # the rollout rows' response tokens
        response_ids = [roll.response_ids[i][m] for i, m in enumerate(masks)]
        sampling_logp = [roll.logprobs[i][m] for i, m in enumerate(masks)]
        batch = self._assemble(rows, response_ids, sampling_logp, chosen)
        update_metrics = self._update(batch)
        t_upd = time.perf_counter() - t0 - t_sel - t_roll

        entropies = [roll.entropy[i][m] for i, m in enumerate(masks)]
        trajectory = core_batch.row_trajectories(response_ids, sampling_logp, entropies, step)
        core_step.record_groups(self.manager, rows, trajectory, step)
        counts = core_metrics.step_metrics(rows, batch["sample_mask"], self.cfg, self.manager)
        exp_metrics = self.manager.end_step(step, counts[M.PASS1.name])
        metrics: dict[str, float] = {
            M.STEP.name: step,
            **core_metrics.reward_metrics(rows),
            **core_metrics.response_metrics(roll.entropy, roll.response_mask, roll.truncated),
            **M.logged_by(
                {**core_metrics.plan_metrics(self._replayed, len(fresh_qids), step), **counts}, M.TINY
            ),
            **exp_metrics,
            **update_metrics,
            **self.verifier.metrics(),
            M.TIME_SELECTION.name: t_sel,
            M.TIME_ROLLOUT.name: t_roll,
            M.TIME_UPDATE.name: t_upd,
            M.TIME_STEP.name: time.perf_counter() - t0,
        }
        self.verifier.reset_metrics()
        return metrics

    # ------------------------------------------------------------------ pieces
    def _roll_out(
        self, owners: list[str], replay_qids: list[str], chosen: list[Trajectory]
    ) -> tuple[RolloutBatch, np.ndarray | list[float], list[float]]:
        """Sample the fresh rows of `owners` and score them; the replayed rows' rewards beside them."""
        prompts = [self.questions[qid].prompt_ids for qid in owners]
        self.model.eval()
        with torch.no_grad():
            roll = generate(
                self.model,
                self.tok,
                prompts,
                max_new_tokens=self.args.max_new_tokens,
                temperature=self.args.temperature,
                top_p=self.args.top_p,
                generator=self.generators["rollout"],
            )
        rewards: np.ndarray | list[float] = self.verifier.scores(
            roll.texts, [self.questions[q].answer for q in owners], [self.questions[q].kind for q in owners]
        )
        if self.cfg.reward_kind == "binary":
            # stored trajectories are correct by construction: the replayed rows' reward is 1
            replay_rewards = [1.0] * len(chosen)
        else:
            rewards = self._continuous(owners, roll.texts, rewards)
            replay_rewards = self._replay_rewards(replay_qids, chosen)
        return roll, rewards, replay_rewards

    def _continuous(self, qids: list[str], texts: list[str], answer_rewards: Any) -> list[float]:
        """`reward_kind="step_credit"`: the continuous reward of each response (exgrpo.testbed.task.step_credit)."""
        from exgrpo.testbed.task import step_credit

        return [
            step_credit(
                self.questions[q].steps, self.questions[q].kind, self.questions[q].answer, text, float(r)
            )
            for q, text, r in zip(qids, texts, answer_rewards)
        ]

    def _replay_rewards(self, qids: list[str], chosen: list[Trajectory]) -> list[float]:
        """A replayed trajectory's own continuous reward (a stored one was above its group's mean, not 1)."""
        if not chosen:
            return []
        eos = self.tok.eos_token_id
        texts = [
            self.tok.decode(
                t.token_ids[:-1] if len(t.token_ids) and int(t.token_ids[-1]) == eos else t.token_ids,
                skip_special_tokens=False,
            )
            for t in chosen
        ]
        grades = self.verifier.scores(
            texts, [self.questions[q].answer for q in qids], [self.questions[q].kind for q in qids]
        )
        return self._continuous(qids, texts, grades)

    def _select_all(self, qids: list[str]) -> list[Trajectory]:
        """o* per replayed question, in plan order (`core.step.plan_replayed`; paper §4.1).

        Current-policy scores come from one forward pass over all candidates of the step, in plan order, as
        the released collate function does (the released entropy mask depends on the global candidate index).
        """
        self._current_logp = []
        scored: list[tuple[torch.Tensor, torch.Tensor]] = []

        def score_candidates(flat: list[tuple[str, Trajectory]]) -> torch.Tensor:
            ids, mask = core_batch.candidate_tokens(flat, self.tok.pad_token_id)
            self.model.eval()
            with torch.no_grad():
                logp, ent = packed_score(
                    self.model,
                    [self.questions[q].prompt_ids for q, _ in flat],
                    ids,
                    mask,
                    temperature=1.0,
                    with_entropy=metric_needs(self.cfg.selection_metric) == "entropy",
                )
            scored.append((logp, mask))
            return candidate_scores(
                self.cfg,
                mask=mask,
                token_entropy=ent,
                token_logp=logp,
                response_ids=ids,
                pad_id=self.tok.pad_token_id,
            )

        plan = core_step.plan_replayed(
            self.cfg, qids, self.manager.candidates, self.generators["select"], score_candidates
        )
        self._replayed = plan
        if scored:  # the same weights as π_θold of the replayed rows: no second forward
            logp, mask = scored[0]
            self._current_logp = [logp[r][mask[r]] for r in plan.chosen_flat_rows()]
        return plan.chosen

    def _assemble(
        self,
        rows: core_step.StepRows,
        response_ids: list[torch.Tensor],
        sampling_logp: list[torch.Tensor],
        chosen: list[Trajectory],
    ) -> dict[str, Any]:
        """The update batch (`core.step_batch.update_batch`): rollout rows, then one replayed row per
        experiential question (Eq. 4); π_θold of the replayed rows from the current policy."""
        n_roll = len(response_ids)
        batch = core_batch.update_batch(
            self.cfg,
            rows,
            [self.questions[q].prompt_ids for q in rows.qids],
            response_ids + [torch.tensor(t.token_ids, dtype=torch.long) for t in chosen],
            sampling_logp + [torch.tensor(t.logprobs, dtype=torch.float32) for t in chosen],
            self.tok.pad_token_id,
        )
        if chosen and len(self._current_logp) == len(chosen):  # scored by the selection forward
            for row, lp in enumerate(self._current_logp, start=n_roll):
                batch["old_logp"][row, : len(lp)] = lp
        elif chosen:  # π_θold for replayed rows: the current policy before this step's update
            ids, mask = batch["ids"][n_roll:], batch["mask"][n_roll:]
            self.model.eval()
            with torch.no_grad():
                lp, _ = packed_score(self.model, batch["prompts"][n_roll:], ids, mask, with_entropy=False)
            batch["old_logp"][n_roll:] = torch.where(mask, lp, 0.0)
        return batch

    def _update(self, batch: dict[str, Any]) -> dict[str, float]:
        """`mini_batches` optimizer steps over a seeded shuffle of the rows (ppo_epochs = 1)."""
        self.model.train()
        chunks = core_batch.mini_batch_rows(
            batch["ids"].shape[0], self.args.mini_batches, self.generators["shuffle"]
        )
        sums: dict[str, float] = {}
        skipped = 0
        for chunk in chunks:
            idx = chunk.tolist()
            logp, ent = packed_score(
                self.model,
                [batch["prompts"][i] for i in idx],
                batch["ids"][chunk],
                batch["mask"][chunk],
                temperature=1.0,
                with_entropy=True,
            )
            inputs = LossInputs(
                logp=logp,
                old_logp=batch["old_logp"][chunk],
                advantages=batch["adv"][chunk],
                response_mask=batch["mask"][chunk],
                is_replay=batch["is_replay"][chunk],
                behaviour_logp=batch["blogp"][chunk],
                token_entropy=ent,
                sample_mask=batch["sample_mask"][chunk],
            )
            loss, m = exgrpo_policy_loss(
                inputs, cfg=self.cfg, replay_active=self.manager.replay_active, norm_const=self.norm_const
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = float(
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip or float("inf"))
            )
            if not np.isfinite(gnorm) or (self.cfg.skip_grad_bound and gnorm > self.cfg.skip_grad_bound):
                skipped += 1  # released: skip the step on a non-finite or huge grad norm
            else:
                self.optimizer.step()
            for key, val in {**m, "loss": float(loss.detach()), "grad_norm": gnorm}.items():
                name = M.UPDATE_BY_KEY[key].name
                sums[name] = sums.get(name, 0.0) + float(val) / self.args.mini_batches
        sums[M.SKIPPED_STEPS.name] = float(skipped)
        return sums

    def validate(self, step: int) -> dict[str, float]:
        """Validation accuracy: one sample per question at `val_temperature` (paper: n_val=1, T=0.6)."""
        if not self.valid:
            return {}
        gen = torch.Generator().manual_seed(self.seed * 100_003 + step)  # independent of the training RNG
        self.model.eval()
        with torch.no_grad():
            roll = generate(
                self.model,
                self.tok,
                [q.prompt_ids for q in self.valid],
                max_new_tokens=self.args.max_new_tokens,
                temperature=self.args.val_temperature,
                top_p=1.0,
                generator=gen,
            )
        scores = self.verifier.scores(
            roll.texts, [q.answer for q in self.valid], [q.kind for q in self.valid]
        )
        self.verifier.reset_metrics()
        return {M.STEP.name: step, M.VAL_ACC.name: float(np.mean(scores))}


def weights_digest(model: Any) -> str:
    """sha256 over the model's parameters, for bit-identity checks across resumes."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
