"""The named method variants (paper Tables 3, 6, 7, 9): each is a set of `ExGRPOConfig` overrides.

`ABLATIONS` maps a variant name to the fields it changes from the paper's defaults (`exgrpo.core.config`);
`config_for` builds a variant's validated config; plug-in modules add variants with `register_variant`
(docs/plugins.md). A run's full config (backbone, budget, overrides on top) is `exgrpo.settings.resolve.resolve`.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.registry import PluginDict
from exgrpo.core.suggest import unknown

ABLATIONS: dict[str, dict[str, Any]] = PluginDict(
    {
        "on_policy": {"method": "on_policy"},
        "exgrpo": {"method": "exgrpo"},
        "wo_q_selection": {"sampler": "uniform"},
        "wo_t_selection": {"selection_mode": "random"},
        "wo_qt_selection": {"sampler": "uniform", "selection_mode": "random"},
        "wo_shaping": {"replay_shaping": "clipped"},
        "wo_shaping_as_released": {"replay_shaping": "unclipped"},
        "wo_is_correction": {"is_correction": False},
        "highest_entropy": {"selection_mode": "argmax"},
        "rho_25": {"rho": 0.25},
        "rho_75": {"rho": 0.75},
        "sigma_wide": {"sampler_sigma": 1.5},
        "sigma_narrow": {"sampler_sigma": 0.5},
        "mu_hard": {"sampler_mu": 0.25},
        "retired_review": {"retired_review_fraction": 0.1, "retired_review_every": 25},
        "ppl_selection": {"selection_metric": "nll"},
        "entropy_as_released": {"entropy_mask": "as_released"},
        "continuous_on_policy": {
            "method": "on_policy",
            "reward_kind": "step_credit",
            "difficulty_signal": "reward_std",
        },
        "continuous_exgrpo": {"reward_kind": "step_credit", "difficulty_signal": "reward_std"},
        # paper Table 2 at paper scale: a reward model's score. No pass@1 exists for a score, so the delayed
        # start (batch pass@1 > 0.35) could never fire: replay is on from step 1 (the paper states no switch)
        "rm_on_policy": {
            "method": "on_policy",
            "reward_kind": "reward_model",
            "difficulty_signal": "reward_std",
            "delayed_start": False,
        },
        "rm_exgrpo": {
            "reward_kind": "reward_model",
            "difficulty_signal": "reward_std",
            "delayed_start": False,
        },
        "masked_easy": {"method": "on_policy", "difficulty_mask": "easy"},
        "masked_medium": {"method": "on_policy", "difficulty_mask": "medium"},
        "masked_hard": {"method": "on_policy", "difficulty_mask": "hard"},
    }
)
"""Named variants (paper Tables 3, 6, 7, 9) as overrides of the defaults. `exgrpo` and `on_policy` are the two methods."""

PLUGIN_VARIANTS: dict[str, str] = {}
"""Variant name -> the plug-in module that registered it (`register_variant`)."""


def register_variant(name: str, overrides: dict[str, Any], module: str) -> None:
    """Add a named variant from a plug-in module (exgrpo.core.registry): `overrides` of the defaults.

    The variant is validated when a config uses it (its values must be registered choices). A name that
    exists already is an error, so a plug-in can never redefine a paper variant."""
    if not name.isidentifier():
        raise ValueError(f"variant names are identifiers, got {name!r}")
    existing = dict.get(ABLATIONS, name)
    if existing is not None and (existing != overrides or PLUGIN_VARIANTS.get(name) != module):
        raise ValueError(
            f"variant {name!r} is already defined"
            + (
                f" by {PLUGIN_VARIANTS[name]}"
                if name in PLUGIN_VARIANTS
                else " (exgrpo.core.variants.ABLATIONS)"
            )
        )
    unknown = sorted(set(overrides) - {f.name for f in fields(ExGRPOConfig)})
    if unknown:
        raise ValueError(f"variant {name!r} ({module}): unknown settings {unknown}")
    dict.__setitem__(ABLATIONS, name, dict(overrides))
    PLUGIN_VARIANTS[name] = module


VARIANT_ALIASES: dict[str, str] = {"masked_full": "on_policy"}
"""Names the analysis uses for a run of another variant, never trained under their own name: Table 9's
"Full" row (masked GRPO with no mask) is the on-policy run itself."""


def config_for(variant: str, **overrides: Any) -> ExGRPOConfig:
    """The validated config of a named variant (or alias), with extra `overrides` on top.

    Only the variant and the overrides: a run's config is `exgrpo.settings.resolve.resolve`, which adds the
    backbone's and the budget's settings in its documented order."""
    variant = VARIANT_ALIASES.get(variant, variant)
    if variant not in ABLATIONS:
        raise ConfigError("variant", unknown("variant", variant, ABLATIONS))
    return ExGRPOConfig.from_dict({**ABLATIONS[variant], **overrides})


__all__ = ["ABLATIONS", "PLUGIN_VARIANTS", "VARIANT_ALIASES", "config_for", "register_variant"]
