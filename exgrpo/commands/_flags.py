"""Shared command-line conventions: one flag name per concept across subcommands, old names kept as aliases,
and one reading of `--set KEY=VALUE` (`run_from_flags`).

An alias is hidden from `--help`, sets the same destination as the flag it stands for, and says on stderr that
it is deprecated (kept for one release: workflows and scripts written against it keep working meanwhile).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exgrpo.settings.resolve import RunSpec


def deprecated_alias(parser: argparse.ArgumentParser, old: str, action: argparse.Action) -> None:
    """Accept `old` as a deprecated spelling of the flag `action` (returned by `add_argument`)."""
    new = action.option_strings[0]

    class _Alias(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            print(f"{parser.prog}: {old} is deprecated (kept for one release); use {new}", file=sys.stderr)
            setattr(namespace, action.dest, values)

    parser.add_argument(
        old,
        dest=action.dest,
        # typeshed's add_argument does not admit type=None, argparse's own default for an untyped flag
        type=action.type,  # type: ignore[arg-type]
        choices=action.choices,
        action=_Alias,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        metavar=action.metavar,
    )


def run_from_flags(
    backbone_name: str, backbone: dict[str, Any], variant: str, seed: int, budget: str, settings: list[str]
) -> RunSpec:
    """The run of `--backbone`, `--variant`, `--seed`, `--budget` and `--set KEY=VALUE` strings (`exgrpo train`,
    `exgrpo verl-config`): each value parsed by its field's type (an ExGRPOConfig or a TrainerSettings field),
    then exgrpo.settings.resolve.run_spec, the one resolution. Trainer settings exist for tiny backbones only: on
    another they are refused, naming the key."""
    import dataclasses

    from exgrpo.core.config import ConfigError, ExGRPOConfig
    from exgrpo.settings.resolve import run_spec
    from exgrpo.settings.trainer_settings import TrainerSettings

    method_fields = {f.name: f.type for f in dataclasses.fields(ExGRPOConfig)}
    trainer_fields = {f.name: f.type for f in dataclasses.fields(TrainerSettings)}
    method: dict[str, Any] = {}
    trainer: dict[str, Any] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"expected KEY=VALUE, got {item!r}")
        if key in method_fields:
            method[key] = _parse(key, raw, method_fields[key])
        elif key in trainer_fields:
            if backbone["scale"] != "tiny":
                raise ConfigError(
                    key, f"a trainer setting of tiny backbones; {backbone_name} is {backbone['scale']}-scale"
                )
            trainer[key] = _parse(key, raw, trainer_fields[key])
        else:
            raise ConfigError(key, "unknown setting (neither an ExGRPOConfig nor a TrainerSettings field)")
    return run_spec(
        backbone_name,
        backbone,
        variant,
        seed,
        budget=budget,
        overrides=method,
        trainer_overrides=trainer,
        where="--set ",
    )


def _parse(key: str, raw: str, typ: Any) -> Any:
    from exgrpo.core.config import ConfigError

    name = typ if isinstance(typ, str) else typ.__name__
    try:
        if name == "bool":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if name.startswith("tuple"):  # tuple[int, ...]: comma-separated
            return tuple(int(x) for x in raw.split(",") if x.strip())
        return {"int": int, "float": float}.get(name, str)(raw)
    except ValueError:
        raise ConfigError(key, f"expected {name}, got {raw!r}") from None


__all__ = ["deprecated_alias", "run_from_flags"]
