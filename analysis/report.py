"""Render one source: validate, build every table and figure in memory, then write them and index.md.

Nothing is written until the whole source has loaded and every table and figure has been built, so a
bad input leaves the previous rendering untouched. Outputs are staged in results/<source>/.render/
and swapped into tables/ and figures/ (files from an older rendering that no longer apply disappear);
index.md is written last and is the sentinel a workflow rule can declare.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from analysis import catalog, figures, figures_train, labels, regimes, schema
from analysis import estimates as repro_estimates
from analysis import paper as paper_numbers
from analysis.figures import Plot
from analysis.loader import DEFAULT_BACKBONES, Results, load
from analysis.tables import Table, write, write_text

log = logging.getLogger("analysis")


@dataclass
class Rendering:
    """What one render produced (paths relative to the source directory)."""

    source: str
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    index: Path | None = None


def build_plots(results: Results, profile: str | None) -> tuple[list[Plot], list[str]]:
    """Every figure the source's data allows, and one line per figure skipped."""
    main: str | None  # the main backbone; None when the source has none
    if results.source == "paper":
        est = paper_numbers.estimates(results.scores)
        main, others = labels.MAIN_PAPER_BACKBONE, []
    else:
        est = repro_estimates.reproduced(results, profile)
        roles = catalog.roles(results, sorted(set(est["backbone"]))) if len(est) else {"main": [], "t5": []}
        main, others = (roles["main"][0] if roles["main"] else None), roles["t5"]
    builders = {
        "fig1a_masked_scores": lambda: figures.fig1a(results, est, main),
        "fig1b_entropy_validity": lambda: figures.fig1b(results),
        "fig1c_entropy_density": lambda: figures.fig1c(results),
        # a slice with the main backbone alone (target paper_headline) gets its panel instead of none
        "fig3_backbones": lambda: figures.fig3(results, est, others or ([main] if main else [])),
        "fig4_dynamics": lambda: figures_train.fig4(results),
        "fig5_buffer": lambda: figures_train.fig5(results),
        "fig6_buffer_variants": lambda: figures_train.fig6(results),
        "fig7_validation": lambda: figures_train.fig7(results),
        "fig8_entropy": lambda: figures_train.fig8(results),
        "fig9_masked_questions": lambda: figures_train.fig9(results),
        "fig10_ppl_entropy": lambda: figures.fig10(results),
        "regimes_forest": lambda: regimes.forest(regimes.rows(results.regimes)),
    }
    plots, skipped = [], []
    for name in figures.FIGURE_ORDER:
        plot = builders[name]()
        if plot is None:
            skipped.append(f"{name}: no data in results/{results.source}")
        else:
            plots.append(plot)
    return plots, skipped


COMMITTED_PAPER = Path(__file__).resolve().parents[1] / "results" / "paper"
"""The published numbers committed with the code (results/paper/), beside which every source renders."""


def published(results_root: str | Path, backbones: str | Path = DEFAULT_BACKBONES) -> Results | None:
    """The published numbers: `<results_root>/paper` where the results folder has them, else the committed
    results/paper/ (a study's rerun renders from reruns/, which holds no paper folder: without the fallback its
    tables had no published column); None where neither exists."""
    root = Path(results_root)
    if (root / "paper").is_dir():
        return load(root, "paper", backbones)
    if COMMITTED_PAPER.is_dir():
        return load(COMMITTED_PAPER.parent, "paper", backbones)
    return None


def render(
    results_root: str | Path,
    source: str,
    profile: str | None = None,
    backbones: str | Path = DEFAULT_BACKBONES,
) -> Rendering:
    """Validate results/<source>/ and write its tables/, figures/ and index.md."""
    results = load(results_root, source, backbones)
    for note in results.notes:
        log.warning("%s", note)
    paper = published(results_root, backbones) if source != "paper" else None
    chosen = repro_estimates.choose_profile(results, profile)
    tables, skipped_tables = catalog.build(results, paper, chosen)
    plots, skipped_plots = build_plots(results, chosen)
    skipped = skipped_tables + skipped_plots
    for line in skipped:
        log.info("skip %s", line)

    # Two studies of one source (e.g. tiny_plugins and tiny_continuous) render it in parallel jobs: the
    # lock makes them take turns over the shared staging folder, the swap and index.md.
    with (results.root / ".render.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stage = results.root / ".render"
        shutil.rmtree(stage, ignore_errors=True)
        (stage / "tables").mkdir(parents=True)
        (stage / "figures").mkdir(parents=True)
        try:
            for table in tables:
                write(table, stage / "tables")
            for plot in plots:
                figures.save(plot, stage / "figures")
            for sub in ("tables", "figures"):
                _swap(stage / sub, results.root / sub)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        index = write_index(results, chosen, tables, plots, skipped)
    return Rendering(
        source,
        [f"tables/{t.name}.md" for t in tables],
        [f"figures/{p.name}.png" for p in plots],
        skipped,
        index,
    )


def render_extension(
    results_root: str | Path,
    source: str,
    profile: str | None = None,
    backbones: str | Path = DEFAULT_BACKBONES,
) -> list[Path]:
    """Write only Table 2's analogue and the plug-in rows (analysis.extension_tables) into
    results/<source>/tables/, leaving every other file as it is; the full `render` builds them too."""
    from analysis import extension_tables

    results = load(results_root, source, backbones)
    paper = published(results_root, backbones)
    chosen = repro_estimates.choose_profile(results, profile)
    written: list[Path] = []
    for table in (
        extension_tables.table2_continuous(results, paper, chosen),
        extension_tables.plugin_table(results, chosen),
    ):
        if table:
            written += write(table, results.root / "tables")
    return written


def _swap(new: Path, target: Path) -> None:
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)


def write_index(
    results: Results, profile: str | None, tables: list[Table], plots: list[Plot], skipped: list[str]
) -> Path:
    """results/<source>/index.md: every table (inline) and figure with its caption; skipped items listed."""
    lines = [
        f"# Results: {results.source}",
        "",
        f"Rendered by `python -m analysis render --source {results.source}` from results/{results.source}/ "
        "(do not edit; re-render instead). Layout and schema: results/README.md.",
        "",
    ]
    if profile:
        lines += [f"Evaluation profile: `{profile}`.", ""]
    if results.notes:
        lines += ["Notes from validation:", "", *[f"- {n}" for n in results.notes], ""]
    lines += ["## Tables", ""]
    for table in tables:
        lines += [
            f"### {table.title} ({table.name})",
            "",
            f"[Markdown](tables/{table.name}.md) · [LaTeX](tables/{table.name}.tex)",
            "",
            table.markdown(),
            "",
        ]
    lines += ["## Figures", ""]
    for plot in plots:
        lines += [
            f"### {plot.title} ({plot.name})",
            "",
            f"![{plot.title}](figures/{plot.name}.png)",
            "",
            f"**{plot.title}.** {plot.caption} [PDF](figures/{plot.name}.pdf)",
            "",
        ]
    if skipped:
        lines += ["## Not rendered for this source", "", *[f"- {s}" for s in skipped], ""]
    path = results.root / "index.md"
    write_text(path, "\n".join(lines).rstrip() + "\n")
    return path


def cache_size(results_root: str | Path) -> int:
    """Bytes under results/ (the committed cache must stay below schema.MAX_CACHE_BYTES)."""
    return sum(p.stat().st_size for p in Path(results_root).rglob("*") if p.is_file())


def check(results_root: str | Path, source: str, backbones: str | Path = DEFAULT_BACKBONES) -> list[str]:
    """Validate one source only; returns summary lines (raises on a contract violation)."""
    results = load(results_root, source, backbones)
    lines = [
        f"results/{source}: valid",
        f"  paper cells: {len(results.scores)}, paper files: {len(results.paper)}",
        f"  train runs: {len(results.runs)}, log rows: {len(results.train)}",
        f"  eval aggregates: {len(results.evals)}, per-sample records: {len(results.samples)}",
        f"  trajectories: {len(results.trajectories)}, benchmark records: {len(results.bench)}",
    ]
    if not results.scores.empty:
        for row in paper_numbers.discrepancies(results.scores).itertuples():
            lines.append(
                f"  flag: {row.table} {row.label} {row.split.upper()} avg printed {row.printed:.1f}, "
                f"recomputed {row.recomputed:.2f}"
            )
    lines += [f"  note: {n}" for n in results.notes]
    size = cache_size(results_root)
    if size > schema.MAX_CACHE_BYTES:
        lines.append(
            f"  warning: results/ holds {size / 2**20:.1f} MiB (limit {schema.MAX_CACHE_BYTES / 2**20:.0f} MiB)"
        )
    return lines
