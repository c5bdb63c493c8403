"""A settings dataclass to and from a plain mapping (`ExGRPOConfig.from_dict`, `replace`, `to_dict`).

`from_dict` is how every configuration file reaches the method (the workflow's study table, a run's saved
config, a variant's overrides): unknown keys are errors naming the key and listing the known ones, and a bad value
is the `ConfigError` of its declaration (`exgrpo.core.declared`) with the caller's `where` before the field name.
Split out of `exgrpo.core.config` to keep that file under the house's 400 lines; `ExGRPOConfig` inherits it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from exgrpo.core.declared import ConfigError

_S = TypeVar("_S", bound="DictRoundTrip")


class DictRoundTrip:
    """Mapping round trip of a dataclass of declared settings with a `validate()` that returns itself."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on the subclass

    def validate(self: _S) -> _S:
        """Check the settings; the subclass defines it (`ExGRPOConfig.validate`)."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[_S], values: dict[str, Any] | None, where: str = "") -> _S:
        """Build and validate from a mapping; unknown keys are errors. `where` prefixes field names in errors."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"{where}{key}", f"unknown setting; known settings: {', '.join(sorted(known))}"
                )
        try:
            cfg = cls(**values)
            return cfg.validate()
        except ConfigError as err:
            raise ConfigError(f"{where}{err.field}", str(err).split(": ", 1)[1]) from None

    def replace(self: _S, **overrides: Any) -> _S:
        """A validated copy with `overrides` applied (unknown names are errors)."""
        return type(self).from_dict({**dataclasses.asdict(self), **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (`dataclasses.asdict`, in declaration order)."""
        return dataclasses.asdict(self)


__all__ = ["DictRoundTrip"]
