"""The actor loss installed with `ActorRolloutRefWorker.set_loss_fn` (docs/verl-plugin.md).

A registered verl policy loss only sees old_log_probs, log_prob, advantages, response_mask and
rollout_is_weights, so it cannot tell replayed rows from fresh ones; a full loss function sees every
TransferQueue field of the micro-batch. `exgrpo_actor_loss` reads the plug-in's fields (`exgrpo_is_replay`,
`exgrpo_behav_log_probs`, `exgrpo_sample_mask`, the batch-level `exgrpo_replay_active` flag) and calls the
core's `exgrpo_policy_loss`, the function the CPU trainer calls, so both compute the same number on the same
tensors (paper Eq. 4 with §4.2 shaping; Eq. 14 with the sample mask).

verl's FSDP engine calls the loss once per micro-batch, SUMS the micro-batch losses of a mini-batch and
AVERAGES gradients over data-parallel ranks. The core's data-parallel split (`DataParallel`: verl's
`dp_size`, `batch_num_tokens` = response tokens of the mini-batch over all ranks, `global_batch_size`) makes
each micro-batch's value its share, so this sum-then-average equals the core loss of the whole mini-batch
(verl's own global-batch normalisation). With one micro-batch on one rank the value is the core's.

Departures, stated up front:
- The released code divided the Σ/8192 loss of each micro-batch by gradient_accumulation = 1 and let FSDP
  average over 8 GPUs, i.e. its mini-batch loss was the core's divided by dp_size (Adam is invariant to it,
  the grad-norm clip at 1.0 and the skip bound are not). This loss is global-batch invariant instead, like the
  CPU trainer (`grad_scale="whole_batch"`); `grad_scale="as_released"` divides it by dp_size, the release's
  scale (with `entropy_scale="per_micro_batch"` every term then equals the release's).
- The released entropy bonus used each micro-batch's own token mean (summed over micro-batches, averaged
  over ranks): `entropy_scale="per_micro_batch"` reproduces its size relative to the policy term; the default
  `token_mean` is the paper's (core `entropy_term`).
- `seq_mean` divides by verl's global_batch_size, which also counts verl's synthetic padding rows (only
  present when the batch is not divisible by the mini-batch size; never in the paper's 128 x 8 setting).
"""

from __future__ import annotations

from typing import Any

import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.loss import exgrpo_policy_loss
from exgrpo.core.loss_inputs import ONE_BATCH, DataParallel, LossInputs
from exgrpo.records import metrics as M
from exgrpo.records.metrics_verl import worker_key
from exgrpo.verl_plugin.batch import BEHAV_FIELD, IS_REPLAY_FIELD, REPLAY_ACTIVE_KEY, SAMPLE_MASK_FIELD

VERL_INPUTS = {
    "entropy_coef": "the model output needs entropy: set actor_rollout_ref.actor.calculate_entropy=true",
    "kl_coef": "the batch needs ref_log_prob: actor_rollout_ref.actor.use_kl_loss must be true",
}
"""Loss inputs a config may need, by the ConfigError field the core's check names, and the verl setting behind each."""


def micro_batch_loss(
    inputs: LossInputs,
    *,
    cfg: ExGRPOConfig,
    replay_active: bool,
    norm_const: int,
    dp: DataParallel = ONE_BATCH,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch's share of the core ExGRPO loss of its mini-batch (see module docstring).

    Args:
        inputs: the micro-batch's tensors (`LossInputs`, padded response layout): logp, old_logp,
            response_mask, behaviour_logp, token_entropy, ref_logp [b, T]; advantages [b] or [b, T];
            is_replay, sample_mask [b].
        dp: the mini-batch's data-parallel split (`DataParallel`): verl's dp_size, batch_num_tokens (response
            tokens of the whole mini-batch over all ranks; None = this micro-batch's) and global_batch_size
            (sequences of the mini-batch; None = this one's).
    Returns:
        (scalar loss to backpropagate, the core's metrics for this micro-batch alone). Over micro-batches
        (summed) and ranks (gradients averaged) the loss is the core loss of the mini-batch
        (`cfg.grad_scale="whole_batch"`) or that divided by dp_size (`as_released`).
    """
    try:
        loss, metrics = exgrpo_policy_loss(
            inputs, cfg=cfg, replay_active=replay_active, norm_const=norm_const, dp=dp
        )
    except ConfigError as err:  # the core's micro-batch check, with the verl setting that provides the input
        if err.field in VERL_INPUTS:
            raise ConfigError(err.field, f"{err.reason} ({VERL_INPUTS[err.field]})") from err
        raise
    if cfg.grad_scale == "as_released" and dp.dp_size != 1:
        loss = (
            loss / dp.dp_size
        )  # the release's 1/dp: FSDP's rank average of losses already globally normalised
    return loss, metrics


def _count(value: Any) -> int | None:
    """A mini-batch count from verl's non-tensor metadata: None stays None, else an int >= 1."""
    return None if value is None else max(int(value), 1)


def exgrpo_actor_loss(
    model_output: dict[str, Any], data: Any, dp_group: Any = None, *, cfg: ExGRPOConfig, norm_const: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl loss_fn(model_output, data, dp_group) → (loss, metrics); install with
    `actor_rollout_wg.set_loss_fn(functools.partial(exgrpo_actor_loss, cfg=cfg, norm_const=N))`.

    Args:
        model_output: {"log_probs": nested [b, j], "entropy": nested [b, j] (when computed)}.
        data: the micro-batch TensorDict (no-padding layout) with response_mask, old_log_probs, advantages and
            the plug-in's fields; non-tensor `dp_size`, `batch_num_tokens`, `global_batch_size`,
            `exgrpo_replay_active`.
    """
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    replay_active = tu.get_non_tensor_data(data=data, key=REPLAY_ACTIVE_KEY, default=None)
    if replay_active is None:
        raise KeyError(
            f"micro-batch has no '{REPLAY_ACTIVE_KEY}': the actor update was not issued by the "
            "ExGRPO trainer (trainer.v1.trainer_mode=exgrpo)"
        )
    logp = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy")
    entropy = None if entropy is None else no_padding_2_padding(entropy, data)
    fields = ["response_mask", "old_log_probs", "advantages", IS_REPLAY_FIELD, BEHAV_FIELD, SAMPLE_MASK_FIELD]
    if cfg.kl_coef > 0:
        fields.append("ref_log_prob")
    dp = DataParallel(
        dp_size=int(tu.get_non_tensor_data(data=data, key="dp_size", default=1)),
        batch_num_tokens=_count(tu.get_non_tensor_data(data=data, key="batch_num_tokens", default=None)),
        global_batch_size=_count(tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)),
    )
    d = data.select(*fields).to_padded_tensor()
    inputs = LossInputs(
        logp=logp,
        old_logp=d["old_log_probs"],
        advantages=d["advantages"],
        response_mask=d["response_mask"],
        is_replay=d[IS_REPLAY_FIELD].reshape(-1).bool(),
        behaviour_logp=d[BEHAV_FIELD],
        token_entropy=entropy,
        sample_mask=d[SAMPLE_MASK_FIELD].reshape(-1).bool(),
        ref_logp=d["ref_log_prob"] if cfg.kl_coef > 0 else None,
    )
    loss, metrics = micro_batch_loss(
        inputs, cfg=cfg, replay_active=bool(replay_active), norm_const=norm_const, dp=dp
    )
    out = {worker_key(M.UPDATE_BY_KEY[k]): v for k, v in metrics.items()}
    out[worker_key(M.REPLAY_ACTIVE_IN_LOSS)] = float(bool(replay_active))
    return loss, out


__all__ = ["exgrpo_actor_loss", "micro_batch_loss"]
