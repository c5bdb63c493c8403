"""A resolved verl run config read back for the record: paper Table 4's hyper-parameters and the ExGRPO
settings (`table4`), written beside the run with the departures (`write_resolved`).

Moved out of `hydra_config.py` (which re-exports them with DEPARTURES) to keep that file under the house's
400 lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exgrpo.verl_plugin.reward_serving import config_value as _get

DEPARTURES = (  # re-exported as hydra_config.DEPARTURES, where the docs name it
    "skip_grad_bound is not applied (verl 0.9.1 skips only non-finite grad norms)",
    "behaviour log-probs of stored trajectories are the actor's recomputed old_log_probs (as released), "
    "not the vLLM sampling log-probs",
)


def table4(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """Paper Table 4 (RLVR hyper-parameters) read back from a resolved verl config, plus the ExGRPO settings."""
    a = "actor_rollout_ref.actor"
    r = "actor_rollout_ref.rollout"
    cfg = dict(_get(resolved, "exgrpo.config"))
    n = _get(resolved, f"{r}.n")
    return {
        "backbone": _get(resolved, "exgrpo.backbone"),
        "variant": _get(resolved, "exgrpo.variant"),
        "model": _get(resolved, "actor_rollout_ref.model.path"),
        "rollout_batch_prompts": _get(resolved, "data.train_batch_size"),
        "update_batch_prompts": _get(resolved, f"{a}.ppo_mini_batch_size"),
        "rollouts_per_prompt": n,
        "train_temperature": _get(resolved, f"{r}.temperature"),
        "val_temperature": _get(resolved, f"{r}.val_kwargs.temperature"),
        "val_samples": _get(resolved, f"{r}.val_kwargs.n"),
        "learning_rate": _get(resolved, f"{a}.optim.lr"),
        "entropy_coef": _get(resolved, f"{a}.entropy_coeff"),
        "kl": "none"
        if not (_get(resolved, f"{a}.use_kl_loss") or _get(resolved, "algorithm.use_kl_in_reward"))
        else _get(resolved, f"{a}.kl_loss_coef"),
        "max_prompt_length": _get(resolved, "data.max_prompt_length"),
        "max_response_length": _get(resolved, "data.max_response_length"),
        "training_steps": _get(resolved, "trainer.total_training_steps"),
        "save_freq": _get(resolved, "trainer.save_freq"),
        "test_freq": _get(resolved, "trainer.test_freq"),
        "gpus": _get(resolved, "trainer.nnodes") * _get(resolved, "trainer.n_gpus_per_node"),
        "rollout_tp": _get(resolved, f"{r}.tensor_model_parallel_size"),
        "gpu_memory_utilization": _get(resolved, f"{r}.gpu_memory_utilization"),
        "adv_std_norm": _get(resolved, "algorithm.norm_adv_by_std_in_grpo"),
        "loss_agg_mode": _get(resolved, f"{a}.loss_agg_mode"),
        "loss_scale_factor": _get(resolved, f"{a}.loss_scale_factor"),
        "rho": cfg["rho"],
        "start_threshold": cfg["start_threshold"] if cfg["delayed_start"] else None,
        "shaping_beta": cfg["shaping_beta"],
        "sampler": cfg["sampler"],
        "sampler_mu": cfg["sampler_mu"],
        "sampler_sigma": cfg["sampler_sigma"],
        "selection": f"{cfg['selection_mode']} {cfg['selection_metric']} ({cfg['selection_policy']})",
    }


def write_resolved(run_dir: str | Path, resolved: Mapping[str, Any]) -> Path:
    """Write `<run_dir>/resolved_config.json`: the resolved verl config, its Table 4 view and the departures."""
    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    path = Path(run_dir) / "resolved_config.json"
    write_json(
        path,
        {
            "resolved": resolved,
            "table4": table4(resolved),
            "departures": list(DEPARTURES),
            "provenance": provenance(
                config=dict(resolved["exgrpo"]["config"]), seed=resolved["exgrpo"]["seed"]
            ),
        },
    )
    return path
