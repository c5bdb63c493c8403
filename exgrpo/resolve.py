"""One resolution of a training run's settings, and the file that hands them to the runtime.

`resolve(backbone, variant, overrides)` is the only place an `ExGRPOConfig` is assembled for a run;
the workflow, `exgrpo train`, `exgrpo verl-config` and the verl Hydra config all call it.

Precedence, lowest first (`PRECEDENCE`):
1. the `ExGRPOConfig` defaults (the paper's settings);
2. what the backbone entry decides (`backbone_method_settings`: delayed start, graded region);
3. the named variant (`ABLATIONS[variant]`): a variant means the same thing on every backbone;
4. the budget preset (`BUDGETS`: the smoke budget turns replay on from step 1);
5. explicit overrides (a `methods` / `ablations` / `prelim` entry of config.yaml, or `--set`).
Explicit overrides may tune a variant but not change what it is: setting `method`, changing a field
the variant itself sets, or landing exactly on another named variant is refused (`check_overrides`).

The workflow writes the resolved run (`run_spec`) once per run as JSON (`method.json`, atomically);
`exgrpo train --run-file` and `exgrpo verl-config --run-file` read it back (`read_run_file`), so the
runtime trains exactly what was validated, with no `--set` strings in between.

`fingerprint` hashes what produced an artefact (a checkpoint, a finished run, an evaluation cache);
`code_digest` hashes the package sources a stage runs, so a code change invalidates what it affects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.backbones import backbone_method_settings
from exgrpo.config import ConfigError, ExGRPOConfig
from exgrpo.io import hash_file
from exgrpo.suggest import unknown
from exgrpo.trainer_settings import RUNTIME_ONLY, TrainerSettings
from exgrpo.variants import ABLATIONS, config_for

PRECEDENCE = ("defaults", "backbone", "variant", "budget", "overrides")
"""Layers of `resolve`, lowest first (module docstring)."""

BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    "full": {},
    "tiny": {},
    # CI smoke: minimal budget, replay forced on from step 1 so every path runs; asserts plumbing only.
    "smoke": {
        "trainer": {
            "steps": 6,
            "batch_size": 8,
            "val_every": 3,
            "val_size": 16,
            "ckpt_every": 3,
            "max_new_tokens": 48,
        },
        "method": {"delayed_start": False, "collect_before_activation": True},
    },
}
"""Budget presets: `method` (ExGRPOConfig fields) and `trainer` (TrainerSettings fields) settings."""

RUN_FILE_FORMAT = 1
PACKAGE_ROOT = Path(__file__).resolve().parent


def check_overrides(variant: str, overrides: Mapping[str, Any], where: str = "") -> None:
    """Refuse overrides that would turn `variant` into something else (ConfigError naming the field)."""
    if variant not in ABLATIONS:
        raise ConfigError(f"{where}variant".rstrip("."), unknown("variant", variant, ABLATIONS))
    own = {"method": ExGRPOConfig().method, **ABLATIONS[variant]}
    for key, value in overrides.items():
        if key in own and value != own[key]:
            what = "the method" if key == "method" else f"what `{variant}` is"
            raise ConfigError(
                f"{where}{key}",
                f"{value!r} would change {what} (the variant sets {key}="
                f"{own[key]!r}); add a named variant to exgrpo.variants.ABLATIONS "
                "instead",
            )
    if not overrides:
        return
    mine = ExGRPOConfig.from_dict({**ABLATIONS[variant], **overrides}, where=where).to_dict()
    for other in ABLATIONS:
        if other != variant and config_for(other).to_dict() == mine:
            key = next(iter(overrides))
            raise ConfigError(
                f"{where}{key}",
                f"turns `{variant}` into the named variant `{other}`; train `{other}` instead",
            )


def resolve(
    backbone: Mapping[str, Any],
    variant: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    budget: str = "full",
    where: str = "",
) -> ExGRPOConfig:
    """The validated method config of `variant` on `backbone` (layers in `PRECEDENCE` order).

    `where` prefixes field names in errors (e.g. `methods.exgrpo.`)."""
    overrides = dict(overrides or {})
    check_overrides(variant, overrides, where)
    if budget not in BUDGETS:
        raise ConfigError("budget", unknown("budget", budget, BUDGETS))
    values = {**backbone_method_settings(backbone), **ABLATIONS[variant], **BUDGETS[budget].get("method", {})}
    try:
        ExGRPOConfig.from_dict(values)
    except ConfigError as err:  # a layer below the overrides is wrong: not the user's field
        raise ConfigError(
            err.field, f"{err} (from the backbone, variant {variant!r} or budget {budget!r})"
        ) from None
    return ExGRPOConfig.from_dict({**values, **overrides}, where=where)


def trainer_settings(
    backbone: Mapping[str, Any], budget: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Trainer settings (TrainerSettings fields) of a tiny run: backbone steps and length, budget, overrides.

    Only the fields these layers set (the schema's defaults fill the rest where a runtime reads them); checked
    against the schema, so an unknown or out-of-range value is refused here, naming `trainer.<field>`."""
    values: dict[str, Any] = {
        "steps": int(backbone["steps"]),
        "max_new_tokens": int(backbone["max_response_length"]),
        **BUDGETS[budget].get("trainer", {}),
        **(overrides or {}),
    }
    TrainerSettings.from_dict(values)
    return values


@dataclass(frozen=True)
class RunSpec:
    """One run, resolved: what `method.json` holds."""

    backbone: str
    variant: str
    seed: int
    budget: str
    scale: str
    data_order_seed: int
    """Seed of the training-data shuffle (the study's `data_order_seed`; the release fixes 47)."""
    method: ExGRPOConfig
    trainer: dict[str, Any]
    """Trainer settings (TrainerSettings fields the run sets; tiny scale); empty at paper scale, where the verl
    config holds them."""
    arm: str | None = None
    """The regime arm this run is (`on_policy-b24`: its results folder name, docs/regimes.md); None outside the
    regime map. A label only: what the arm changes is already in `method` and `trainer`."""

    @property
    def label(self) -> str:
        """The run's name in results folders: its arm, else its variant."""
        return self.arm or self.variant

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RUN_FILE_FORMAT,
            "backbone": self.backbone,
            "variant": self.variant,
            "seed": self.seed,
            "budget": self.budget,
            "scale": self.scale,
            "data_order_seed": self.data_order_seed,
            "precedence": list(PRECEDENCE),
            "method": self.method.to_dict(),
            "trainer": dict(self.trainer),
            **({"arm": self.arm} if self.arm else {}),
        }

    def fingerprint_parts(self) -> dict[str, Any]:
        """What of the run decides its training (`training_parts`)."""
        return training_parts(self.method, self.trainer, self.seed, self.data_order_seed)


def training_parts(
    method: ExGRPOConfig, trainer: Mapping[str, Any], seed: int, data_order_seed: int
) -> dict[str, Any]:
    """The fingerprint parts of a run's training settings, for every route (`RunSpec.fingerprint_parts`, the CPU
    trainer's `tiny.run.run_fingerprint`): the method, the seeds and the trainer settings, runtime-only fields
    (`RUNTIME_ONLY`: threads and the like, which change no number) dropped."""
    return {
        "method": method.to_dict(),
        "seed": seed,
        "data_order_seed": data_order_seed,
        "trainer": {k: v for k, v in trainer.items() if k not in RUNTIME_ONLY},
    }


def _check_context(name: str, backbone: Mapping[str, Any], trainer: Mapping[str, Any]) -> None:
    """A tiny run's prompt + generated tokens must fit the model's context on every route: the registry checks
    its own lengths (exgrpo.backbones), a `trainer.max_new_tokens` override is checked here, before any job."""
    from exgrpo.backbones import run_context

    total = int(backbone["max_prompt_length"]) + int(trainer["max_new_tokens"])
    if total > run_context(backbone):
        raise ConfigError(
            "trainer.max_new_tokens",
            f"{trainer['max_new_tokens']}: max_prompt_length {backbone['max_prompt_length']} + "
            f"max_new_tokens = {total} exceeds {name}'s context ({run_context(backbone)})",
        )


def run_spec(
    name: str,
    backbone: Mapping[str, Any],
    variant: str,
    seed: int,
    *,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    trainer_overrides: Mapping[str, Any] | None = None,
    data_order_seed: int | None = None,
    where: str = "",
) -> RunSpec:
    """Resolve one run of `variant` on backbone `name`. `data_order_seed` None = the run seed."""
    method = resolve(backbone, variant, overrides, budget=budget, where=where)
    trainer = trainer_settings(backbone, budget, trainer_overrides) if backbone["scale"] == "tiny" else {}
    if trainer:
        _check_context(name, backbone, trainer)
    return RunSpec(
        backbone=name,
        variant=variant,
        seed=int(seed),
        budget=budget,
        scale=backbone["scale"],
        data_order_seed=int(seed if data_order_seed is None else data_order_seed),
        method=method,
        trainer=trainer,
    )


def write_run_file(path: str | Path, spec: RunSpec) -> Path:
    """Write `spec` as JSON atomically (the workflow's one writer of method.json)."""
    from exgrpo.io import write_json

    write_json(path, spec.to_dict())
    return Path(path)


def read_run_file(path: str | Path) -> RunSpec:
    """Read and validate a run file; errors name the file and field."""
    from exgrpo.io import read_json

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run file not found")
    data = read_json(path)
    keys = ("backbone", "variant", "seed", "budget", "scale", "data_order_seed", "method", "trainer")
    missing = [k for k in keys if k not in (data if isinstance(data, dict) else {})]
    if missing or data.get("format") != RUN_FILE_FORMAT:
        raise ConfigError(
            str(path), f"not a run file of format {RUN_FILE_FORMAT} (missing {missing or 'format'})"
        )
    method = ExGRPOConfig.from_dict(data["method"], where=f"{path}: method.")
    TrainerSettings.from_dict(data["trainer"], where=f"{path}: trainer.")
    if data["variant"] not in ABLATIONS:
        raise ConfigError(f"{path}: variant", unknown("variant", data["variant"], ABLATIONS))
    return RunSpec(
        backbone=data["backbone"],
        variant=data["variant"],
        seed=int(data["seed"]),
        budget=data["budget"],
        scale=data["scale"],
        data_order_seed=int(data["data_order_seed"]),
        method=method,
        trainer=dict(data["trainer"]),
        arm=data.get("arm"),
    )


def fingerprint(parts: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `parts` (sorted keys): equal inputs, equal fingerprints."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


TRAINING_LIBRARIES = (
    "torch",
    "transformers",
    "verl",
    "vllm",
    "math-verify",
    "latex2sympy2_extended",
    "antlr4-python3-runtime",
    "sympy",
)
"""Libraries whose versions decide what a training run produces (engines and the reward's grader): part of
both routes' run fingerprints, so a run resumed or reused under other versions is not silently the same run."""


def library_versions_of(names: Iterable[str] = TRAINING_LIBRARIES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent), read now (not cached)."""
    import importlib.metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def file_digest(paths: Iterable[str | Path]) -> str:
    """sha256 over the named files' bytes, in the given order (each prefixed by its name)."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path)
        digest.update(path.name.encode() + b"\0")
        hash_file(path, digest)
    return digest.hexdigest()


def weights_digest(model_dir: str | Path) -> str:
    """sha256 of an HF model folder's weights and config (`*.safetensors`, `*.bin`, config.json)."""
    model_dir = Path(model_dir)
    files = sorted(
        p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin") or p.name == "config.json"
    )
    if not files:
        raise FileNotFoundError(f"{model_dir}: no model weights (*.safetensors) found")
    return file_digest(files)


_SETTINGS = ("config.py", "variants.py", "trainer_settings.py", "resolve.py")
"""The method's settings, its named variants and their one resolution: code of every training stage."""
_CPU_MODE = ("tiny/rollout.py", "tiny/decoder.py", "tiny/trainer.py", "tiny/splits.py", "tiny/task.py")
"""The tiny-route modules the plug-in's CPU mode runs (`train_verl_cpu`, below)."""

CODE_OF_STAGE: dict[str, tuple[str, ...]] = {
    # plugins/: the replay-idea plug-ins, imported by core/registry.py (docs/plugins.md)
    "train_tiny": (*_SETTINGS, "core", "plugins", "tiny"),
    "train_paper": (*_SETTINGS, "core", "plugins", "verl_plugin"),
    # the plug-in's CPU mode also runs the tiny route (tiny splits, trainer settings) and the project's sampler
    "train_verl_cpu": (*_SETTINGS, "core", "plugins", "verl_plugin", *_CPU_MODE),
    "eval": (
        "eval",
        "core/reward.py",
        "core/answer_grade.py",
        "core/answers.py",
        "core/_verify_worker.py",
        "core/math_verify_060.py",
        "tiny/rollout.py",
        "tiny/decoder.py",
    ),
}
"""Package sources (relative to exgrpo/) each stage runs: their digest is part of its fingerprint.
`tests/test_code_digest.py` checks that every module of core/, tiny/, eval/, verl_plugin/ and prelim/ a stage
imports is listed."""


def _is_source(path: Path) -> bool:
    """A file the stage reads as code: every file of the folder (modules, lm-eval task YAML, Hydra
    config, launch templates), except Python's byte-code cache."""
    return path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"


def stage_sources(stage: str) -> list[Path]:
    """The files of CODE_OF_STAGE[stage], sorted: what `code_digest` hashes."""
    files: list[Path] = []
    for part in CODE_OF_STAGE[stage]:
        path = PACKAGE_ROOT / part
        files += [f for f in path.rglob("*") if _is_source(f)] if path.is_dir() else [path]
    return sorted(files)


def code_digest(stage: str) -> str:
    """sha256 of the package sources `stage` runs (`stage_sources`), by relative path and content."""
    digest = hashlib.sha256()
    for path in stage_sources(stage):
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


__all__ = [
    "BUDGETS",
    "CODE_OF_STAGE",
    "PRECEDENCE",
    "TRAINING_LIBRARIES",
    "RunSpec",
    "check_overrides",
    "code_digest",
    "file_digest",
    "fingerprint",
    "library_versions_of",
    "read_run_file",
    "resolve",
    "run_spec",
    "stage_sources",
    "trainer_settings",
    "training_parts",
    "weights_digest",
    "write_run_file",
]
