"""`ExGRPOTrainer`: verl 0.9.1's synchronous V1 trainer with the exgrpo core's experience replay.

Registered as `trainer.v1.trainer_mode=exgrpo` (`@register_trainer`). The trainer owns one
`ExperienceManager`, keyed by the plug-in's question id, and only executes the step the core plans
(`exgrpo.core.step_questions`, `step`, `step_batch`, `step_metrics`: fresh questions, o*, groups, π_past per
row, records and the logged counts); bucketing, sampling, selection, advantages, the shaped loss and the
delayed start all come from `exgrpo.core`. One global step:

1. `prepare_step`: the replay plan made at the end of the previous step (questions + chosen o*) and
   B - n_exp fresh questions from the plug-in's `DataOrder` (B with `drop_fresh_overflow`, as released)
   become prompt rows; experiential rows go to `ReplayAgentLoop` (o* is session K-1 of their group), their
   o* into the `exgrpo_replay` TransferQueue partition.
2. verl samples the finished groups, balances them and recomputes old_log_probs + entropy (unchanged).
3. `_compute_advantage`: through `exgrpo.core.step`, the groups (one per prompt), mixed-group advantages,
   difficulty mask and records; the advantages, `is_replay` flag and π_past are written to the
   TransferQueue; each complete group's fresh trajectories are recorded with the manager.
4. `_update_actor`: verl's update with the plug-in's loss (`set_loss_fn`, installed in `on_init_end`) and
   the batch-level `replay_active` flag.
5. `step` ends with `manager.end_step` (collection, retirement, delayed-start switch), BEFORE verl saves the
   checkpoint; `_save_checkpoint` writes the plug-in state before verl's own files.
6. `on_step_end`, while the rollout replicas still sleep and the actor holds the new weights: plan the next
   step's replay and score the candidates under this current policy (one extra log-prob pass over them,
   paper §4.1); then verl syncs the weights to the rollout replicas.
7. verl logs the step's metrics; only then is the step's staged checkpoint published (checkpoint.py).

Departures, stated up front:
- Fresh questions come from the plug-in's `DataOrder` (seeded epoch shuffles, retired questions pruned at
  epoch boundaries, JSON state in the checkpoint), not verl's dataloader, whose state verl still saves.
- `skip_grad_bound` is not applied (verl skips only non-finite grad norms); see hydra_config.DEPARTURES.
- Only `trainer_mode=exgrpo` on top of the sync trainer: async modes would sample groups generated under
  older weights, which the delayed-start and selection bookkeeping do not model.
- A failed rollout session never stops the run. verl's sync sampler keeps a failed group with the sessions
  that finished (or, with `trainer.v1.sampler.sync_refill_failed_groups`, replaces a group with none by a
  fresh prompt from `_next_train_batch`); the short group is trained on the rows it has and not recorded.
  Counted per step: `exgrpo/short_groups`, `exgrpo/missing_rollouts`, `exgrpo/failed_prompts` (submitted
  prompts with no row in the batch).
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import collate_fn
from verl.workers.utils.padding import response_to_nested

from exgrpo.core import step as core_step
from exgrpo.core import step_batch as core_batch
from exgrpo.core import step_metrics as core_metrics
from exgrpo.core import step_questions
from exgrpo.core.buffer import Trajectory
from exgrpo.core.data_order import DataOrder
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.loss import resolve_norm_const
from exgrpo.records import metrics as M
from exgrpo.records.metrics_verl import live_names
from exgrpo.verl_plugin import batch as vb
from exgrpo.verl_plugin import checkpoint as ckpt
from exgrpo.verl_plugin import segments
from exgrpo.verl_plugin.collect import validation_accuracies
from exgrpo.verl_plugin.cpu.debug import debug_dir, dumping_actor_loss, fault_point
from exgrpo.verl_plugin.failures import ERROR_PARTITION, FailureBudget
from exgrpo.verl_plugin.hydra_config import check_verl_config
from exgrpo.verl_plugin.loss import exgrpo_actor_loss
from exgrpo.verl_plugin.scoring import nested, score_on_actor

logger = logging.getLogger(__name__)

STEP_FIELDS = [
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "old_log_probs",
    "entropy",
    vb.EXGRPO_QID,
]


@register_trainer("exgrpo")
class ExGRPOTrainer(PPOTrainerSync):
    """Synchronous V1 trainer + ExGRPO experience replay (see the module docstring for the step)."""

    # set by verl's trainer; declared since mypy reads verl as untyped (pyproject.toml)
    total_training_steps: int

    def __init__(self, config: Any):
        self._init_exgrpo_state(config)
        super().__init__(config)
        # verl keys its sync-vs-async behaviour on `trainer_mode == "sync"` (replay-buffer class, TransferQueue
        # checkpointing, refill granularity); this trainer IS the sync trainer, registered under its own name.
        self.trainer_mode = "sync"
        self.replay_buffer = self._build_replay_buffer()

    def _init_exgrpo_state(self, config: Any) -> None:
        self.exgrpo_cfg = check_verl_config(config)
        self.exgrpo_seed = int(config.exgrpo.seed)
        self.manager = ExperienceManager(self.exgrpo_cfg, seed=self.exgrpo_seed)
        self.norm_const = resolve_norm_const(
            self.exgrpo_cfg.loss_norm_const, int(config.data.max_response_length)
        )
        self.select_generator = torch.Generator().manual_seed(self.exgrpo_seed + 2)  # as CPUTrainer
        self.failure_budget = FailureBudget.from_config(config.exgrpo.get("failure_budget", None))
        self.prompt_cache: dict[str, np.ndarray] = {}
        self.data_order: DataOrder | None = None
        self.qid_pos: dict[str, int] = {}
        self._replayed = core_step.ReplayedPlan([], {}, [])  # the next step's replayed questions and o*
        self._replay_by_uid: dict[str, Trajectory] = {}
        self._submitted: list[str] = []  # uids of this step's prompts, in submission order (refills appended)
        self._step_pass1: float | None = None
        self._prep_metrics: dict[str, float] = {}
        self._selection_metrics: dict[str, float] = {}
        self._publish_after_log = False  # set by on_train_begin: inside verl's loop (checkpoint.py docstring)
        self._staged_step: int | None = None  # a staged checkpoint waiting for its step's log line

    # ------------------------------------------------------------------ data
    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        qids = vb.dataset_qids(self.train_dataset.dataframe)
        self.qid_pos = vb.qid_positions(qids)
        self.data_order = DataOrder(qids, self.exgrpo_seed)
        print(
            f"[exgrpo] {len(qids)} training questions; replay active: {self.manager.replay_active}",
            flush=True,
        )

    def _data_order(self) -> DataOrder:
        """The fresh-question order (built by _init_dataloader, or restored from a checkpoint)."""
        if self.data_order is None:
            raise RuntimeError("no DataOrder yet: the trainer's dataloader has not been initialised")
        return self.data_order

    def _items(self, qids: list[str]) -> list[dict[str, Any]]:
        return [self.train_dataset[self.qid_pos[q]] for q in qids]

    def _rows_to_batch(self, rows: list[dict[str, Any]]) -> TensorDict:
        batch = tu.get_tensordict(collate_fn(rows))
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        return batch

    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        """Fresh prompts from the DataOrder (verl calls this to refill failed groups)."""
        batch_size = int(self.config.data.train_batch_size)
        qids = step_questions.take_questions(
            self._data_order(), self.manager, int(num_prompts or batch_size), batch_size
        )
        rows = vb.prompt_rows(self._items(qids), [])
        self._submitted.extend(r["uid"] for r in rows)
        return self._rows_to_batch(rows)

    def prepare_step(self) -> dict:
        """Submit this step's prompts: B - n_exp fresh questions and the planned experiential ones."""
        batch_size = int(self.config.data.train_batch_size)
        plan, chosen = self._replayed, self._replayed.chosen
        fresh = step_questions.take_fresh(
            self.exgrpo_cfg, self._data_order(), self.manager, batch_size, len(plan.qids)
        )
        rows = vb.prompt_rows(self._items(fresh), self._items(plan.qids))
        self._replay_by_uid = {row["uid"]: traj for row, traj in zip(rows[len(fresh) :], chosen)}
        self._submitted = [row["uid"] for row in rows]
        self._replayed = core_step.ReplayedPlan([], {}, [])
        if chosen:
            keys, fields = vb.replay_payload(list(self._replay_by_uid), chosen)
            tq.kv_batch_put(
                keys=keys, partition_id=vb.REPLAY_PARTITION, fields=tu.list_of_dict_to_tensordict(fields)
            )
        self._submit_batch_to_rollout(self._rows_to_batch(rows))
        fault_point("rollout", self.global_steps)
        self._prep_metrics = {
            **core_metrics.plan_metrics(plan, len(fresh), self.global_steps),
            **core_metrics.data_metrics(self._data_order()),
        }
        return {}

    # ------------------------------------------------------------------ advantages, records, loss
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Core groups, mixed-group advantages (no std by default, paper §3.1), difficulty mask, is_replay, π_past."""
        cfg = self.exgrpo_cfg
        if (
            self._replay_by_uid
        ):  # every session of the step has finished: the stored trajectories are delivered
            tq.kv_clear(keys=list(self._replay_by_uid), partition_id=vb.REPLAY_PARTITION)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=vb.STEP_FIELDS)
        for key in ("prompts", "responses", "response_mask", "rm_scores", "old_log_probs", "entropy"):
            data[key] = nested(data[key])
        response_mask = data["response_mask"]
        rewards = data["rm_scores"].to_padded_tensor(0.0).sum(dim=-1)
        rows, uids = vb.step_rows(
            batch.keys,
            batch.tags,
            vb.as_list(data[vb.EXGRPO_QID]),
            rewards,
            self._replay_by_uid,
            cfg.n_rollouts,
            submitted=self._submitted,
        )
        adv, sample_mask = core_step.advantages_and_mask(rows, cfg)
        lens = response_mask.offsets().diff().tolist()
        behav = core_batch.behaviour_log_probs(
            rows, uids, lens, {u: t.logprobs for u, t in self._replay_by_uid.items()}
        )
        padded_mask = response_mask.to_padded_tensor(0).float()
        token_adv = response_to_nested(adv[:, None] * padded_mask, response_mask)
        out = TensorDict(
            {
                "advantages": token_adv,
                "returns": token_adv.clone(),
                vb.IS_REPLAY_FIELD: rows.is_replay.float(),
                vb.SAMPLE_MASK_FIELD: sample_mask.float(),
                vb.BEHAV_FIELD: torch.nested.as_nested_tensor(behav, layout=torch.jagged),
            },
            batch_size=len(batch.keys),
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)
        self._record_groups(rows, data)
        counts = core_metrics.step_metrics(rows, sample_mask, cfg, self.manager)
        self._step_pass1 = counts[M.PASS1.name]
        metrics.update(self._check_failures(int(rows.real.sum())))
        fresh = vb.fresh_response_metrics(rows, data["entropy"], response_mask)
        metrics.update(M.logged_by({**counts, **fresh}, M.VERL))
        return batch

    def _check_failures(self, real_rows: int) -> dict[str, float]:
        """The failure budget (failures.py) on this step's sessions: K per submitted prompt, minus the real rows
        that came back; raises before the update when it is spent. Reads and clears the errors the agent loops
        reported."""
        listed = tq.kv_list(ERROR_PARTITION) or {}
        tags = listed.get(ERROR_PARTITION, {}) or {}
        if tags:
            tq.kv_clear(keys=list(tags), partition_id=ERROR_PARTITION)
        errors = [str(t.get("error")) for t in tags.values() if isinstance(t, dict) and t.get("error")]
        total = int(self.exgrpo_cfg.n_rollouts) * len(self._submitted)
        return self.failure_budget.check(self.global_steps, max(0, total - real_rows), total, errors)

    def _record_groups(self, rows: core_step.StepRows, data: TensorDict) -> None:
        ids, old, ent, prompts = (
            list(data[k].unbind()) for k in ("responses", "old_log_probs", "entropy", "prompts")
        )
        trajectory = core_batch.row_trajectories(ids, old, ent, self.global_steps)
        records = core_step.record_groups(self.manager, rows, trajectory, self.global_steps)
        for rec in records:
            # every complete group's prompt (its rows are real: verl's padding rows carry a dummy prompt), whatever
            # the reward kind decides is stored; `step` keeps only the buffered questions' prompts
            if rec.qid not in self.prompt_cache:
                self.prompt_cache[rec.qid] = prompts[rec.fresh_rows[0]].numpy().astype(np.int32)

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        fault_point("update", self.global_steps)
        batch.extra_info[vb.REPLAY_ACTIVE_KEY] = self.manager.replay_active
        return super()._update_actor(batch, metrics)

    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        """verl's step, then the core's step-end bookkeeping (before verl saves the checkpoint)."""
        if self.parameter_sync_step != 1:
            raise ValueError("the ExGRPO trainer needs one update per global step (parameter_sync_step=1)")
        batch = super().step(metrics, timing_raw)
        if self._step_pass1 is None:
            raise RuntimeError(f"step {self.global_steps}: the batch never reached _compute_advantage")
        metrics.update(self.manager.end_step(self.global_steps, self._step_pass1))
        metrics.update(self._prep_metrics)
        metrics.update(self._selection_metrics)
        self._step_pass1 = None
        self.prompt_cache = {q: v for q, v in self.prompt_cache.items() if q in self.manager.buffer}
        return batch

    def _compute_metrics(
        self, batch: KVBatchMeta, metrics: dict, timing_raw: dict, global_steps: int, epoch: int
    ) -> None:
        """verl's step metrics, then every key renamed to the results contract's (`exgrpo.records.metrics_verl.live_names`):
        the last hook before verl's trackers log the step, so they show the CPU trainer's names live."""
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        live_names(metrics)
        metrics.update(
            validation_accuracies(metrics)
        )  # val/<benchmark>, val/acc live, as verl-collect writes them

    # ------------------------------------------------------------------ replay plan and selection
    def on_init_end(self) -> None:
        loss_fn = partial(exgrpo_actor_loss, cfg=self.exgrpo_cfg, norm_const=self.norm_const)
        if (dump := debug_dir()) is not None:  # tests: dump what the worker's loss saw (cpu/debug.py)
            loss_fn = partial(dumping_actor_loss, loss_fn=loss_fn, dump_dir=str(dump))
        self.actor_rollout_wg.set_loss_fn(loss_fn)
        self._plan_next_step()  # replicas sleep after _setup: the actor can run the scoring pass
        super().on_init_end()

    def on_step_end(self) -> None:
        """Plan the next step's replay; at a segment's stop step instead checkpoint and end verl's loop (segments.py)."""
        stop = segments.stop_after(self.config.exgrpo, self.total_training_steps)
        if stop is not None and self.global_steps >= stop:
            if not segments.checkpointed_by_verl(
                self.global_steps, self.total_training_steps, int(self.config.trainer.save_freq)
            ):
                self._save_checkpoint()
            print(f"[exgrpo] segment ends after step {self.global_steps} (exgrpo.stop_after)", flush=True)
            self.total_training_steps = self.global_steps  # verl's loop: log this step, then end
        elif self.global_steps < self.total_training_steps:
            self._plan_next_step()
        super().on_step_end()

    def _plan_next_step(self) -> None:
        t0 = time.perf_counter()
        plan = self.manager.plan_replay(int(self.config.data.train_batch_size))
        self._replayed = core_step.plan_replayed(
            self.exgrpo_cfg, plan, self.manager.candidates, self.select_generator, self._score_current_policy
        )
        self._selection_metrics = {M.TIME_SELECTION.name: time.perf_counter() - t0}

    def _score_current_policy(self, flat: list[tuple[str, Trajectory]]) -> torch.Tensor:
        """[N] current-policy scores of all candidates of the plan, from one actor forward (`scoring.py`)."""
        temperature = self.config.actor_rollout_ref.rollout.temperature
        return score_on_actor(
            self.actor_rollout_wg, flat, self.prompt_cache, self.exgrpo_cfg, self.tokenizer, temperature
        )

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_root(self) -> Path:
        root = Path(self.config.trainer.default_local_dir)
        return root if root.is_absolute() else Path.cwd() / root

    def _save_plugin_state(self, folder: Path) -> None:
        ckpt.save_plugin_state(
            folder,
            step=self.global_steps,
            cfg=self.exgrpo_cfg,
            manager=self.manager,
            data_order=self._data_order().state_dict(),
            prompt_cache=self.prompt_cache,
            select_rng_state=self.select_generator.get_state(),
        )

    def _save_checkpoint(self) -> None:
        """The whole step folder staged (`checkpoint.stage_step`: plug-in state and verl's files under `.staging/`,
        manifest), then published (rename into place, tracker, pruning): at once, or inside verl's loop after the
        step's log line (`on_train_begin`)."""
        save_verl = super()._save_checkpoint

        def write(staging_root: Path, staged: Path) -> None:
            self._save_plugin_state(staged)
            # verl's workers would delete old checkpoints BEFORE writing the new one; here nothing is deleted
            # until the new one is in place
            with ckpt.trainer_settings(
                self.config,
                default_local_dir=str(staging_root),
                max_actor_ckpt_to_keep=None,
                remove_previous_ckpt_in_save=False,
            ):
                save_verl()
            fault_point("checkpoint", self.global_steps)

        ckpt.stage_step(self._checkpoint_root(), self.global_steps, write)
        self._staged_step = self.global_steps
        if not self._publish_after_log:
            self._publish_staged()

    def _publish_staged(self) -> None:
        if self._staged_step is not None:
            keep = self.config.trainer.get("max_actor_ckpt_to_keep", None)
            ckpt.publish_staged(self._checkpoint_root(), self._staged_step, keep)
            self._staged_step = None

    def on_train_begin(self) -> None:
        """From here on a checkpoint is published once verl has logged its step (checkpoint.py docstring)."""
        log = self.logger.log

        def log_then_publish(*args: Any, **kwargs: Any) -> None:
            log(*args, **kwargs)
            self._publish_staged()

        self.logger.log = log_then_publish  # type: ignore[method-assign]  # this instance only: verl calls it
        self._publish_after_log = True
        super().on_train_begin()

    def _load_checkpoint(self) -> None:
        """verl's load of the newest checkpoint that passes its checks (`checkpoint.announce_resume`), then the plug-in's."""
        settings = ckpt.resume_settings(self.config.trainer.resume_mode, self._checkpoint_root())
        with ckpt.trainer_settings(self.config, **settings):
            super()._load_checkpoint()
        if self.global_steps == 0:
            return
        folder = ckpt.resumed_folder(self.config.trainer, self._checkpoint_root(), self.global_steps)
        state = ckpt.load_plugin_state(folder, self.exgrpo_cfg)
        if state.step != self.global_steps:
            raise ValueError(
                f"{folder}: plug-in state is for step {state.step}, verl resumes at {self.global_steps}"
            )
        self.manager = state.manager
        self.data_order = DataOrder.from_state(state.data_order)
        self.prompt_cache = state.prompt_cache
        self.select_generator.set_state(state.select_rng_state)
        logger.info(
            "ExGRPO state restored from %s: %d buffered questions, replay active=%s",
            folder,
            len(self.manager.buffer),
            self.manager.replay_active,
        )
        if (dump := debug_dir()) is not None:  # tests: write back what was restored (cpu/debug.py)
            self._save_plugin_state(dump / f"resumed_step_{self.global_steps}")


__all__ = ["ExGRPOTrainer"]
