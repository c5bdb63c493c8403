"""Close-match suggestions for unknown names ("did you mean 'tiny-math'?"), from the standard library's difflib.

Used by every registry lookup a user types a name into: backbones, variants, benchmarks, decoding profiles,
budgets and the workflow config's references to them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, known: Iterable[object]) -> str:
    """`" did you mean 'x'?"` (or `'x' or 'y'`) for the close matches of `name` among `known`; "" when none."""
    matches = difflib.get_close_matches(str(name), [str(k) for k in known], n=3, cutoff=0.6)
    return f" did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""


def unknown(kind: str, name: object, known: Iterable[object], note: str = "") -> str:
    """The message for an unknown `kind` called `name`: the suggestion first, then the known names (sorted)."""
    known = sorted(str(k) for k in known)
    return f"unknown {kind} {name!r};{did_you_mean(name, known)} known{note}: {', '.join(known)}"


__all__ = ["did_you_mean", "unknown"]
