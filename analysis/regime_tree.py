"""The regime trees of one results folder, read and validated (the map's rows, table and plot: analysis.regimes).

Layout (results/README.md): `results/<source>/regimes/<regime>/regime.json` holds the regime as it ran (its
backbone, what it tests, its arms and which comparisons it reports, the primary one first), and beside it a
results tree of the usual shape, `train/<backbone>/<arm>/s<seed>/` and `eval/<backbone>/<arm>/s<seed>/`. An arm
is named `<variant>` or `<variant>-<tag>` (`on_policy-b24`), `<variant>` being a known method variant. An arm
listed under `reused` (arm -> `../..`, the source's own tree) is a run of the base study, read from there
(exgrpo.workflow.regimes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.readers import ResultsError, check_keys, read_json
from analysis.run_trees import known_variants, load_eval, load_train

REGIME_FILE = "regime.json"
REGIME_REQUIRED = {
    "name": "str",
    "title": "str",
    "backbone": "str",
    "tests": "str",
    "arms": "object",
    "comparisons": "list",
}


@dataclass
class Regime:
    """One regime as it ran: its spec (regime.json), training logs and per-sample evaluation records."""

    spec: dict[str, Any]
    path: Path
    train: pd.DataFrame
    samples: pd.DataFrame
    evals: pd.DataFrame


def arm_variant(arm: str) -> str:
    """The method variant an arm runs (`on_policy-b24` -> `on_policy`)."""
    return arm.split("-", 1)[0]


def load(
    source_root: Path,
    registry: dict[str, Any],
    source_frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None,
) -> list[Regime]:
    """Every regime under results/<source>/regimes/, validated (ResultsError naming the file and field).

    `source_frames`: the source tree's own (train, evals, samples), where reused arms are read (`../..`).
    """
    base = Path(source_root) / "regimes"
    if not base.is_dir():
        return []
    known = known_variants()
    out = []
    for spec_path in sorted(base.glob(f"*/{REGIME_FILE}")):
        spec = read_json(spec_path)
        check_keys(
            spec_path,
            spec,
            REGIME_REQUIRED,
            {"description": "str", "format": "int", "reused": "object", "data_seed": "int"},
        )
        root = spec_path.parent
        if spec["name"] != root.name:
            raise ResultsError(
                spec_path, "name", f"{spec['name']!r} does not match the directory {root.name!r}"
            )
        for arm in spec["arms"]:
            if arm_variant(arm) not in known:
                raise ResultsError(spec_path, f"arms.{arm}", f"unknown variant {arm_variant(arm)!r}")
        for i, comp in enumerate(spec["comparisons"]):
            if not (
                isinstance(comp, dict)
                and {"treatment", "control"} <= set(comp)
                and comp["treatment"] in spec["arms"]
                and comp["control"] in spec["arms"]
            ):
                raise ResultsError(
                    spec_path,
                    f"comparisons[{i}]",
                    f"expected {{treatment, control}} naming arms of the regime, got {comp!r}",
                )
        reused = spec.get("reused", {})
        for arm, where in reused.items():
            if arm not in spec["arms"] or where != "../.." or source_frames is None:
                raise ResultsError(
                    spec_path,
                    f"reused.{arm}",
                    f"expected an arm of the regime read from '../..' (the source's tree), got {where!r}",
                )
        # `base`: the regime's own base models (eval/<backbone>/base/), built when it has its own data seed
        allowed = set(spec["arms"]) - set(reused) | {"base"}
        notes: list[str] = []
        _, train = load_train(root, registry, variants=allowed, notes=notes)
        evals, samples = load_eval(root, registry, notes, variants=allowed)
        if reused:
            assert source_frames is not None  # every reused arm was checked to have the source's tree
            extra = [_reused(frame, spec["backbone"], set(reused)) for frame in source_frames]
            train, evals, samples = (
                pd.concat([own, more], ignore_index=True) if not more.empty else own
                for own, more in zip((train, evals, samples), extra)
            )
        out.append(Regime(spec, root, train, samples, evals))
    return out


def _reused(frame: pd.DataFrame, backbone: str, arms: set[str]) -> pd.DataFrame:
    """The rows of the base tree's frame that a regime reuses (its backbone, the reused arms)."""
    if frame.empty or "variant" not in frame.columns:
        return frame.iloc[0:0]
    return frame[(frame["backbone"] == backbone) & frame["variant"].isin(arms)]


DEVIATIONS_FILE = "deviations.json"
"""results/<source>/regimes/deviations.json: `{"deviations": [text, ...]}`, every departure from the protocol
(docs/regimes.md) with its reason, listed under the table."""


def deviations(source_root: Path) -> list[str]:
    """The protocol deviations recorded for a source's regime map (none when the file is absent)."""
    path = Path(source_root) / "regimes" / DEVIATIONS_FILE
    if not path.exists():
        return []
    data = read_json(path)
    check_keys(path, data, {"deviations": "list"}, {})
    if not all(isinstance(d, str) for d in data["deviations"]):
        raise ResultsError(path, "deviations", "expected a list of strings")
    return list(data["deviations"])
