"""verl Hydra configs for one paper-scale run: a backbone (config/backbones.yaml) x a method variant.

The static paper hyper-parameters (Table 4, run_exgrpo.sh) live in `config/exgrpo_trainer.yaml`
(`defaults: [ppo_trainer, _self_]`). This module writes, per run, a small primary config
`<run_dir>/exgrpo_run.yaml` (`defaults: [exgrpo_trainer, _self_]`) holding what depends on the backbone
(model, steps, lengths, GPUs) and on the variant (every verl key derived from `ExGRPOConfig`, plus the
whole `ExGRPOConfig` under `exgrpo.config`). Hydra composes the three layers; `compose_run_config`
does it in-process (needs hydra + verl), `main.py` does it at launch and writes the resolved config
as JSON, from which `table4()` renders paper Table 4 for what actually ran.

Departures, stated up front:
- `skip_grad_bound` (released: skip the optimizer step when the grad norm exceeds 500) has no verl 0.9.1
  hook short of patching the FSDP engine; verl skips only non-finite grad norms. Recorded in the
  resolved JSON under `departures`.
- `grad_clip = 0` (no clipping) becomes verl `clip_grad = 1e10`: verl requires a number.

Matched to the release:
- Steps: `trainer.total_training_steps` is the backbone's `steps` (700 for Qwen2.5-Math-7B). The
  release's script sets 701, but its trainer (verl 0.1 fork, `mix_trainer_experience.fit`) increments
  the step counter after each update and stops once it reaches 701, so it runs updates 1..700 and
  saves at 700. verl 0.9.1 runs steps 1..total_training_steps, so 700 here is the release's 700.
- Data order: `data.seed` is the run's `data_order_seed` (config.yaml `studies.*.data_order_seed`;
  `paper_repro` sets 47, the release's fixed `ResumableRandomSampler` seed): verl 0.9.1 draws the
  first epoch as `torch.randperm(n)` from a generator seeded with it, the release's draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.settings.resolve import resolve, route_refusal
from exgrpo.verl_plugin.resolved_config import DEPARTURES, table4, write_resolved
from exgrpo.verl_plugin.reward_serving import check_reward_serving, reward_keys
from exgrpo.verl_plugin.reward_serving import config_value as _get

CONFIG_DIR = Path(__file__).resolve().parent / "config"
"""The plug-in's Hydra config directory (exgrpo_trainer.yaml)."""
RUN_CONFIG_NAME = "exgrpo_run"
"""File stem of the per-run primary config written into the run directory."""
SEARCHPATH = ["pkg://exgrpo.verl_plugin.config", "pkg://verl.trainer.config"]
PLUGIN_MODULE = "exgrpo.verl_plugin"

LOSS_AGG_TO_VERL = {
    "seq_sum_const": "seq-mean-token-sum-norm",
    "token_mean": "token-mean",
    "seq_mean": "seq-mean-token-mean",
}
"""`cfg.loss_agg` → verl `loss_agg_mode` (verl uses it for its own entropy metric; the loss is the core's)."""
NO_CLIP_GRAD = 1e10
PLAIN_CHAT_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)
"""`actor_rollout_ref.model.custom_chat_template` of `template: llama_base` backbones. verl 0.9.1 always
renders prompts through the chat template. This one writes the BOS token and then the message contents
verbatim, with no role headers and no generation prompt. The prompt it gets is the single user message
of `exgrpo retemplate`, so the model sees exactly the paper §G.1 plain prompt."""


def variant_config(
    variant: str, backbone: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> ExGRPOConfig:
    """The ExGRPOConfig of `variant` for `backbone`, with `overrides` (field -> value): exgrpo.settings.resolve.resolve,
    the one resolution (defaults < backbone < variant < overrides)."""
    return resolve(backbone, variant, overrides)


def verl_overrides(
    backbone_name: str,
    backbone: Mapping[str, Any],
    cfg: ExGRPOConfig,
    *,
    variant: str,
    seed: int,
    run_dir: str | Path,
    train_files: str,
    val_files: str,
    model_path: str | None = None,
    nnodes: int | None = None,
    gpus_per_node: int | None = None,
    data_order_seed: int | None = None,
    device: str = "cuda",
    reward_model: Mapping[str, Any] | None = None,
    trainer: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Dotted verl config keys → values for one run (everything not fixed in exgrpo_trainer.yaml): the one
    writer of a run's verl keys.

    `trainer` (a tiny-scale run's trainer settings, `RunSpec.trainer`): its verl keys are the declared ones
    (`exgrpo.settings.trainer_settings.trainer_overrides`), and the steps and response length come from it
    instead of the backbone entry; no other key may coincide with one of them.

    `reward_model` (`reward_kind: reward_model` only, paper §5.3): the study's reward model, its registry entry
    (config/backbones.yaml `reward_models`) with `path`, the local snapshot verl serves (reward_model_keys).

    `data_order_seed` seeds the training-data shuffle (`data.seed`); None = the run's `seed`. A `tiny`
    backbone trains only in the CPU mode (`device="cpu"`), from a local `model_path` (its shipped base):
    the paper route on the tiny task (exgrpo.verl_plugin.tiny_route)."""
    _check_backbone(backbone_name, backbone, device, model_path)
    resources = _train_resources(backbone, nnodes, gpus_per_node, device)
    max_resp = int(backbone["max_response_length"])
    run_dir = str(Path(run_dir).resolve())
    flat = {
        "data.train_files": train_files,
        "data.val_files": val_files,
        "data.max_prompt_length": int(backbone["max_prompt_length"]),
        "data.seed": int(seed if data_order_seed is None else data_order_seed),
        **_policy_keys(cfg, seed, model_path or backbone["hf_id"], max_resp),
        **reward_keys(cfg, backbone, reward_model, device=device),
        "trainer.nnodes": resources["nodes"],
        "trainer.n_gpus_per_node": resources["gpus_per_node"],
        "trainer.experiment_name": f"{backbone_name}-{variant}-s{seed}",
        "trainer.default_local_dir": f"{run_dir}/checkpoints",
        "trainer.validation_data_dir": f"{run_dir}/val_generations",
        "exgrpo.variant": variant,
        "exgrpo.backbone": backbone_name,
        "exgrpo.seed": int(seed),
        "exgrpo.run_dir": run_dir,
        "exgrpo.resources": resources,
        "exgrpo.config": cfg.to_dict(),
    }
    if backbone.get("template") == "llama_base":
        flat["actor_rollout_ref.model.custom_chat_template"] = PLAIN_CHAT_TEMPLATE
    return {**flat, **_trainer_keys(backbone, trainer, set(flat))}


def _check_backbone(
    backbone_name: str, backbone: Mapping[str, Any], device: str, model_path: str | None
) -> bool:
    """Refuse a backbone entry verl cannot train (scale, missing keys, a tiny one without its local folder);
    True for a tiny backbone in the CPU mode."""
    tiny = backbone.get("scale") == "tiny" and device == "cpu"
    if backbone.get("scale") != "paper" and not tiny:
        raise ConfigError(
            f"backbones.{backbone_name}.scale",
            f"verl runs on GPUs are for scale 'paper' backbones, got {backbone.get('scale')!r} "
            "(a tiny backbone trains with verl in the CPU mode only)",
        )
    for key in ("steps", "max_prompt_length", "max_response_length", *(() if tiny else ("hf_id",))):
        if key not in backbone:
            raise ConfigError(f"backbones.{backbone_name}.{key}", "missing (needed for a verl run)")
    if tiny and not model_path:
        raise ConfigError(
            "model_path", f"tiny backbone {backbone_name!r} has no hf_id: pass its local model folder"
        )
    return tiny


def _train_resources(
    backbone: Mapping[str, Any], nnodes: int | None, gpus_per_node: int | None, device: str
) -> dict[str, Any]:
    """The training stage's job size: nodes and GPUs per node (the arguments, else the registry's
    `resources.train`, else 1 node of 8 GPUs, 1 on CPU), then the entry's other resource keys."""
    res = (backbone.get("resources") or {}).get("train") or {}
    nodes = int(nnodes or res.get("nodes", 1))
    gpus = int(gpus_per_node or res.get("gpus_per_node", 1 if device == "cpu" else 8))
    return {
        "nodes": nodes,
        "gpus_per_node": gpus,
        **{k: v for k, v in res.items() if k not in ("nodes", "gpus_per_node")},
    }


def _policy_keys(cfg: ExGRPOConfig, seed: int, model: str, max_response_length: int) -> dict[str, Any]:
    """The model, rollout, advantage and actor-loss keys of a run (from the ExGRPOConfig and the seed)."""
    from exgrpo.core.loss import resolve_norm_const  # torch: only where a run is configured

    norm = resolve_norm_const(cfg.loss_norm_const, max_response_length)
    actor = "actor_rollout_ref.actor"
    return {
        "actor_rollout_ref.model.path": model,
        "actor_rollout_ref.rollout.n": cfg.n_rollouts,
        "actor_rollout_ref.rollout.seed": int(seed),
        "algorithm.norm_adv_by_std_in_grpo": cfg.adv_std_norm,
        f"{actor}.entropy_coeff": cfg.entropy_coef,
        f"{actor}.use_kl_loss": cfg.kl_coef > 0,
        f"{actor}.kl_loss_coef": cfg.kl_coef,
        f"{actor}.clip_ratio": cfg.clip_eps,
        f"{actor}.clip_ratio_low": cfg.clip_eps,
        f"{actor}.clip_ratio_high": cfg.clip_eps,
        f"{actor}.loss_agg_mode": LOSS_AGG_TO_VERL[cfg.loss_agg],
        f"{actor}.loss_scale_factor": norm,
        f"{actor}.optim.clip_grad": cfg.grad_clip if cfg.grad_clip > 0 else NO_CLIP_GRAD,
        f"{actor}.data_loader_seed": int(seed),
    }


def _trainer_keys(
    backbone: Mapping[str, Any], trainer: Mapping[str, Any] | None, taken: set[str]
) -> dict[str, Any]:
    """The run's steps, response length and, with `trainer`, every key its trainer settings declare."""
    if trainer is None:
        return {
            "trainer.total_training_steps": int(backbone["steps"]),
            "data.max_response_length": int(backbone["max_response_length"]),
        }
    from exgrpo.settings.trainer_settings import trainer_overrides

    keys = trainer_overrides(trainer, int(backbone["max_prompt_length"]))
    # a served reward model turns validation off (reward_serving.reward_keys)
    if "trainer.test_freq" in taken:
        keys.pop("trainer.test_freq", None)
    if taken & set(keys):
        raise AssertionError(f"verl keys written twice: {sorted(taken & set(keys))}")
    return keys


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b.c": v} → {"a": {"b": {"c": v}}}; a key that is both a leaf and a prefix is an error."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{dotted}: '{part}' is already a value")
        if parts[-1] in node:
            raise ValueError(f"{dotted}: duplicate key")
        node[parts[-1]] = value
    return out


BASE_CONFIGS = {"cuda": "exgrpo_trainer", "cpu": "exgrpo_cpu"}
"""Device -> the plug-in config a run yaml sits on (exgrpo_cpu.yaml = exgrpo_trainer.yaml + the CPU mode)."""


def run_config(flat: Mapping[str, Any], device: str = "cuda") -> dict[str, Any]:
    """The per-run primary Hydra config: search path, `defaults: [<base of device>, _self_]`, the run's values."""
    if device not in BASE_CONFIGS:
        raise ConfigError("device", f"expected one of {sorted(BASE_CONFIGS)}, got {device!r}")
    return {
        "hydra": {"searchpath": list(SEARCHPATH)},
        "defaults": [BASE_CONFIGS[device], "_self_"],
        **nest(flat),
    }


def write_run_config(run_dir: str | Path, flat: Mapping[str, Any], device: str = "cuda") -> Path:
    """Write `<run_dir>/exgrpo_run.yaml` (and the ExGRPOConfig as JSON next to it), atomically."""
    from exgrpo.records.io import atomic_open, write_json

    run_dir = Path(run_dir)
    path = run_dir / f"{RUN_CONFIG_NAME}.yaml"
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(
            "# Generated by `exgrpo verl-config`; launch with\n"
            f"#   python -m exgrpo.verl_plugin.main --config-path {run_dir.resolve()} "
            f"--config-name {RUN_CONFIG_NAME}\n"
        )
        yaml.safe_dump(run_config(flat, device), fh, sort_keys=False, default_flow_style=False)
    write_json(run_dir / "exgrpo_config.json", flat["exgrpo.config"])
    return path


def compose_run_config(run_dir: str | Path, overrides: list[str] | None = None) -> Any:
    """Compose `<run_dir>/exgrpo_run.yaml` with Hydra (verl's config dir on the search path). Needs hydra + verl."""
    from hydra import compose, initialize_config_dir

    run_dir = Path(run_dir).resolve()
    if not (run_dir / f"{RUN_CONFIG_NAME}.yaml").exists():
        raise FileNotFoundError(f"{run_dir / (RUN_CONFIG_NAME + '.yaml')}: run config not found")
    with initialize_config_dir(config_dir=str(run_dir), version_base=None):
        return compose(RUN_CONFIG_NAME, overrides=list(overrides or []))


def exgrpo_config_from(config: Any) -> ExGRPOConfig:
    """The validated ExGRPOConfig stored in a composed verl config (`exgrpo.config`)."""
    raw = _get(config, "exgrpo.config")
    values = dict(raw.items()) if hasattr(raw, "items") else raw
    if not values:
        raise ConfigError("exgrpo.config", "empty: generate the run config with `exgrpo verl-config`")
    return ExGRPOConfig.from_dict({k: v for k, v in values.items()}, where="exgrpo.config.")


def check_verl_config(config: Any) -> ExGRPOConfig:
    """Refuse a composed verl config whose verl keys contradict its `exgrpo.config`; return that config.

    verl keys that must agree: rollout.n = K, norm_adv_by_std_in_grpo = adv_std_norm, entropy_coeff =
    entropy_coef with entropy computed, use_kl_loss iff kl_coef > 0, no KL in the reward, the V1 trainer
    with trainer_mode `exgrpo`, and the plug-in module in the Ray workers' environment.
    """
    cfg = exgrpo_config_from(config)
    # one owner of what only the CPU trainer has (a verl study is refused the same at load time)
    refusal = route_refusal(cfg)
    if refusal is not None:
        field, why = refusal
        raise ConfigError(f"exgrpo.config.{field}", why)
    check_reward_serving(config, cfg)
    actor = "actor_rollout_ref.actor"
    expected = {
        "actor_rollout_ref.rollout.n": cfg.n_rollouts,
        "algorithm.norm_adv_by_std_in_grpo": cfg.adv_std_norm,
        f"{actor}.entropy_coeff": cfg.entropy_coef,
        f"{actor}.use_kl_loss": cfg.kl_coef > 0,
        "algorithm.use_kl_in_reward": False,
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": "exgrpo",
        "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
    }
    if cfg.kl_coef > 0:
        expected[f"{actor}.kl_loss_coef"] = cfg.kl_coef
    for key, want in expected.items():
        got = _get(config, key)
        if got != want:
            raise ConfigError(key, f"is {got!r} but exgrpo.config requires {want!r}")
    if cfg.entropy_coef > 0 and not _get(config, f"{actor}.calculate_entropy"):
        raise ConfigError(f"{actor}.calculate_entropy", "must be true: the ExGRPO loss needs token entropies")
    rc = _get(config, "algorithm.rollout_correction")
    for key in ("rollout_is", "rollout_rs"):
        if rc.get(key) if hasattr(rc, "get") else None:
            raise ConfigError(
                f"algorithm.rollout_correction.{key}",
                "must be null: the ExGRPO loss does its own importance weighting",
            )
    if rc.get("bypass_mode", False):
        raise ConfigError(
            "algorithm.rollout_correction.bypass_mode", "must be false (old_log_probs are recomputed)"
        )
    return cfg


__all__ = [
    "CONFIG_DIR",
    "DEPARTURES",
    "LOSS_AGG_TO_VERL",
    "RUN_CONFIG_NAME",
    "check_verl_config",
    "compose_run_config",
    "exgrpo_config_from",
    "nest",
    "run_config",
    "table4",
    "variant_config",
    "verl_overrides",
    "write_resolved",
    "write_run_config",
]
