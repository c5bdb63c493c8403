"""What a study's jobs would refuse minutes in, refused before any job (moved from exgrpo.workflow.study): each fact
checked by its owner (exgrpo.settings.backbones: the shapes vLLM's CPU build serves; exgrpo.hub.locks: pins against
locks; exgrpo.workflow.cluster: time limits and GPUs per job), the ConfigError naming the field and its file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.settings.yaml_files import field_path
from exgrpo.workflow.study import Study


@dataclass(frozen=True)
class Files:
    """Where the facts a study is checked against come from, for the messages: the config file(s) the study
    is read from, the backbones file, the hub locks' folder (config/locks) and the partition time limit."""

    config: str
    backbones: str
    locks: Path
    limit_min: int | None = None


def check_study_jobs(
    study: Study,
    raw: Mapping[str, Any],
    backbones: Mapping[str, Mapping[str, Any]],
    reward_models: Mapping[str, Mapping[str, Any]],
    files: Files,
) -> None:
    """Refuse, before any job, what a study's jobs would refuse minutes in: each fact checked by its owner
    (exgrpo.settings.backbones: the shapes vLLM's CPU build serves; exgrpo.hub.locks: pins against locks;
    exgrpo.workflow.cluster: time limits and GPUs per job). The ConfigError names the field and its file."""
    if study.engines == "vllm":
        _check_engine_shapes(study, raw, backbones, files)
    if study.inputs == "hub_cache":
        _check_hub_pins(study, backbones, files)
    if study.reward_model is not None:
        _check_reward_model(study, reward_models, files)
        if study.scale == "paper":  # a tiny study serves it on the CPU, beside the CPU-mode actor
            _check_served_gpus(study, backbones, reward_models, files)


def _check_reward_model(study: Study, reward_models: Mapping[str, Mapping[str, Any]], files: Files) -> None:
    """The reward model is of the study's scale (the registry's default: paper), and a hub-cache study's is pinned
    as its backbones are (it is read by repo id and revision)."""
    from exgrpo.hub.locks import check_registry_pin

    name = str(study.reward_model)
    entry = reward_models[name]
    if entry.get("scale", "paper") != study.scale:
        raise ConfigError(
            field_path(["studies", study.name, "reward_model"]),
            f"{name!r} has scale {entry.get('scale', 'paper')!r} (reward_models.{name}.scale, {files.backbones}), "
            f"the study's scale is {study.scale!r} ({files.config})",
        )
    if study.inputs == "hub_cache":
        field = field_path(["reward_models", name, "revision"])
        try:
            check_registry_pin(entry.get("revision"), files.locks / f"{name}.json", name, field)
        except ConfigError as err:
            raise ConfigError(err.field, f"{err.reason} (study {study.name!r}: {files.backbones})") from None


def _check_engine_shapes(
    study: Study, raw: Mapping[str, Any], backbones: Mapping[str, Mapping[str, Any]], files: Files
) -> None:
    from exgrpo.settings.backbones import vllm_cpu_refusal

    for i, name in enumerate(study.backbones):
        why = vllm_cpu_refusal(name, backbones[name])
        if why is not None:
            where = ["studies", study.name, "backbones", *([i] if isinstance(raw["backbones"], list) else [])]
            raise ConfigError(
                field_path(where), f"`engines: vllm` serves it on vLLM's CPU build: {why} ({files.config})"
            )


def _check_hub_pins(study: Study, backbones: Mapping[str, Mapping[str, Any]], files: Files) -> None:
    from exgrpo.hub.locks import check_registry_pin

    for name in study.backbones:
        field = field_path(["backbones", name, "revision"])
        try:
            check_registry_pin(backbones[name].get("revision"), files.locks / f"{name}.json", name, field)
        except ConfigError as err:
            raise ConfigError(
                err.field,
                f"{err.reason} (study {study.name!r} reads it from the hub cache: {files.backbones})",
            ) from None


def _check_served_gpus(
    study: Study,
    backbones: Mapping[str, Mapping[str, Any]],
    reward_models: Mapping[str, Mapping[str, Any]],
    files: Files,
) -> None:
    from exgrpo.workflow.cluster import served_gpus_refusal

    serve = reward_models[str(study.reward_model)]["serve"]
    for name in study.backbones:
        why = served_gpus_refusal(serve, backbones[name])
        if why is not None:
            raise ConfigError(
                field_path(["reward_models", str(study.reward_model), "serve", "tensor_parallel"]),
                f"{why} of backbone {name!r} (study {study.name!r}; {files.backbones})",
            )


def check_stage_times(study: Study, backbones: Mapping[str, Mapping[str, Any]], files: Files) -> None:
    """Every evaluation job (each backbone) and judge job (each ablation backbone, when the study has a
    preliminary study) of `study` fits the partition time limit (exgrpo.workflow.cluster.stage_time_refusal)."""
    from exgrpo.workflow.cluster import check_stage_time

    stages = [("eval", b) for b in study.backbones]
    stages += [("judge", b) for b in study.ablation_backbones if study.prelim]
    for stage, name in stages:
        check_stage_time(
            name, backbones[name], stage, files.limit_min, f"study {study.name!r}; {files.backbones}"
        )


__all__ = ["Files", "check_stage_times", "check_study_jobs"]
