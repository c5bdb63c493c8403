"""The README and the pages of docs/ as a contract.

- The README's two commands: `.ci/run` runs exactly the README's test command, and the main command installs CPU
  torch and runs the `tiny` target. The README stays a five-minute read (`README_MAX_LINES`).
- Each check of a fact follows the page that states it: the engine environment's block (docs/real-engines.md),
  the generated switch table (docs/method.md), the commits and the compute ledger of the tiny study (whichever
  page states them: exactly one may).
- Every number a page quotes from a file of the repository is that file's (`number_problems`), on the README and
  on every page under docs/: the statistics of the results tables (`76.2 ± 3.2`, `−2.58 [−4.19, −1.10]`) and the
  measurements of the benchmark JSON and Snakemake benchmark files (`2.14×`, `7.3 ms`, `181 s`) a passage cites.
- Every link and every repository path or `exgrpo` module a page names exists, and docs/README.md indexes every
  page.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250


def pages() -> list[Path]:
    """The README and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a page, up to the next `## ` heading."""
    (body,) = re.findall(rf"\n## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", text, flags=re.S)
    return body


# ------------------------------------------------------------------------------------------ the README's commands
def test_the_readme_is_a_five_minute_read():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to a docs/ page"


def test_ci_runs_the_readme_test_command():
    readme_blocks = _bash_blocks(README.read_text())
    test_cmds = [b for b in readme_blocks if b.endswith("&& pytest")]
    assert len(test_cmds) == 1, "the README must show exactly one test command ending in '&& pytest'"
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert test_cmds[0] in ci_lines, f".ci/run does not run the README test command {test_cmds[0]!r}"


def test_main_command_installs_cpu_torch_and_runs_tiny():
    blocks = _bash_blocks(README.read_text())
    main = [b for b in blocks if "snakemake" in b and b.endswith(" tiny")]
    assert main, "the README must show the main command that runs the `tiny` target"
    assert "torch==2.13.0" in main[0]
    # the CPU build on any Linux machine: PyTorch's CPU index, not the registry's CUDA wheel of that version
    assert (
        "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && " in main[0]
    )


# ------------------------------------------------------------------------------------------ facts, where they are
def test_real_engines_block_sets_up_the_engine_environment_and_runs_paper_cpu_on_vllm():
    """The one block of docs/real-engines.md's "The environment": the engine environment's installer, its
    activation, then `snakemake --cores 2 paper_cpu` in it, whose committed study is on vLLM; `.ci/paper_cpu` runs
    the same."""
    import yaml

    (block,) = _bash_blocks(_section((DOCS / "real-engines.md").read_text(), "The environment"))
    steps = [step.strip() for step in block.split("&&")]
    assert steps[:3] == [
        ".ci/engines_env",
        ". .venv-engines/bin/activate",
        "snakemake --cores 2 paper_cpu",
    ], block
    assert (ROOT / ".ci/engines_env").is_file()
    study = yaml.safe_load((ROOT / "config/config.yaml").read_text())["studies"]["paper_cpu"]
    assert (study["engines"], study["inputs"]) == ("vllm", "hub_cache")
    ci = (ROOT / ".ci/paper_cpu").read_text()
    assert "[ -x .venv-engines/bin/python ] || .ci/engines_env" in ci and ". .venv-engines/bin/activate" in ci
    assert re.search(r"^snakemake --cores 2 --forceall paper_cpu --config ", ci, flags=re.M)


def test_the_switch_table_is_the_generated_one():
    from exgrpo.commands.switches import switch_table

    assert switch_table() in (DOCS / "method.md").read_text(), (
        "docs/method.md switch table is stale: run `exgrpo switches`"
    )


def _stated_once(pattern: str) -> re.Match[str]:
    """The one match of `pattern` over the README and the docs pages (whitespace folded): a fact is stated on one
    page, and its check follows it there."""
    found = [(path, m) for path in pages() if (m := re.search(pattern, " ".join(path.read_text().split())))]
    assert len(found) == 1, f"{pattern!r} is stated on {[_rel(p) for p, _ in found]}, not on exactly one page"
    return found[0][1]


def test_the_tiny_numbers_are_the_ones_the_files_hold():
    """The commits the pages say made the tiny numbers are the ones the run files record, and the job count and
    wall hours quoted for `results/tiny` are the compute ledger's (results/tiny/tables/ledger_rules.md,
    `all rules`)."""
    named = _stated_once(r"The runs record the commits ([0-9a-f, and]+) \(")
    claimed = set(re.findall(r"[0-9a-f]{7,40}", named.group(1)))
    recorded = {
        json.loads(p.read_text())["git_commit"].removesuffix("-dirty")[:7]
        for p in (ROOT / "results/tiny/train").glob("*/*/s*/run.json")
    }
    assert claimed == recorded
    ledger = (ROOT / "results/tiny/tables/ledger_rules.md").read_text()
    row = next(line for line in ledger.splitlines() if line.startswith("| all rules"))
    jobs, wall_h = (cell.strip() for cell in row.split("|")[2:4])
    compute = _stated_once(r"([\d.]+) wall-h in all for the (\d+) jobs of `results/tiny`")
    assert compute.group(2) == jobs and compute.group(1) == f"{float(wall_h):.2f}"


# ------------------------------------------------------------------------------------------ numbers vs files
@dataclass
class Passage:
    """A paragraph, a list item or a table row of a page, with what stands above it (a table's introducing
    paragraph and header, a list's lead paragraph)."""

    line: int
    text: str
    context: str


_ITEM = re.compile(r"^(?:[-*] |\d+\. )")


def passages(text: str) -> list[Passage]:
    """The passages of a markdown page, code (fenced or indented) and headings left out."""
    groups: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start, fenced = 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            line = ""
        if fenced or not line.strip():
            if current:
                groups.append((start, current))
            current = []
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        groups.append((start, current))
    out: list[Passage] = []
    above = ""
    for start, lines in groups:
        if all(line.startswith("    ") for line in lines):  # an indented code block
            continue
        if lines[0].startswith("#"):
            above, start, lines = "", start + 1, lines[1:]
            if not lines:
                continue
        if all(line.lstrip().startswith("|") for line in lines):
            context = above + "\n" + lines[0]
            out += [Passage(start + k, row, context) for k, row in enumerate(lines[2:], 2)]
            continue
        lead: list[str] = []
        items: list[list] = []
        for k, line in enumerate(lines):
            if _ITEM.match(line):
                items.append([start + k, line])
            elif items:
                items[-1][1] += "\n" + line
            else:
                lead.append(line)
        lead_text = "\n".join(lead)
        if lead:
            out.append(Passage(start, lead_text, above))
        out += [Passage(number, item, lead_text or above) for number, item in items]
        above = "\n".join(lines)
    return out


_ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "Fig.", "Eq.", "App.", "Alg.", "al.", "Tab.", "Sec.", "No.")


def sentences(text: str) -> list[str]:
    """`text` cut after each full stop that ends a sentence (one followed by a capital, a backtick or a bracket)."""
    out, begin = [], 0
    for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z`(\[*])", text):
        if not text[: m.start()].endswith(_ABBREVIATIONS):
            out.append(text[begin : m.start()])
            begin = m.end()
    return [*out, text[begin:]]


_CITED = re.compile(r"(?<![\w/.-])((?:results|benchmarks)/[\w./-]*[\w/])|(?<![\w/.-])([\w.-]+\.json)\b")
DATA_SUFFIXES = (".md", ".json", ".tsv")


def cited_files(text: str) -> list[Path]:
    """The data files `text` names: results tables (`.md`), benchmark JSON and Snakemake benchmark files (`.tsv`)
    under results/ or benchmarks/. A folder stands for its tables, and for its benchmark files where it is a
    benchmarks folder or inside one (`results/paper-cpu/benchmarks/`, `benchmarks/results/`); a bare `name.json`
    is `benchmarks/results/name.json`."""
    files: list[Path] = []
    for m in _CITED.finditer(text):
        path = ROOT / m.group(1) if m.group(1) else ROOT / "benchmarks" / "results" / m.group(2)
        if path.is_dir():
            kinds = DATA_SUFFIXES if "benchmarks" in path.relative_to(ROOT).parts else (".md",)
            files += sorted(p for p in path.rglob("*") if p.suffix in kinds)
        elif path.is_file() and path.suffix in DATA_SUFFIXES:
            files.append(path)
    return files


_MINUS = str.maketrans({"−": "-", "–": "-"})
_SIGNED = r"[+\-−]?\d+(?:\.\d+)?"
_PLUS_MINUS = re.compile(rf"({_SIGNED}) ± (\d+(?:\.\d+)?)")
_INTERVAL = re.compile(rf"({_SIGNED}) \[({_SIGNED}), ({_SIGNED})\]")


def _signed(number: str) -> str:
    return number.translate(_MINUS).removeprefix("+")


def statistics(text: str) -> list[tuple[str, str]]:
    """(as written, normalised) for each `mean ± half-width` and `estimate [low, high]` of `text`."""
    text = text.replace("**", "")
    found = [(m.group(0), f"{_signed(m.group(1))} ± {m.group(2)}") for m in _PLUS_MINUS.finditer(text)]
    found += [(m.group(0), "{} [{}, {}]".format(*map(_signed, m.groups()))) for m in _INTERVAL.finditer(text)]
    return found


@cache
def _file_statistics(path: Path) -> frozenset[str]:
    return frozenset(key for _, key in statistics(path.read_text()))


@cache
def _results_tables() -> tuple[Path, ...]:
    return tuple(sorted((ROOT / "results").rglob("*.md")))


@cache
def _file_values(path: Path) -> tuple[float, ...]:
    """Every number of a JSON file (its leaves), or a Snakemake benchmark file's seconds (columns `s` and
    `cpu_time`)."""
    if path.suffix == ".tsv":
        header, *rows = (line.split("\t") for line in path.read_text().splitlines())
        return tuple(float(row[header.index(c)]) for row in rows for c in ("s", "cpu_time") if c in header)
    if path.suffix != ".json":
        return ()
    values: list[float] = []

    def walk(node: object) -> None:
        if isinstance(node, bool):
            return
        if isinstance(node, int | float):
            values.append(float(node))
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(path.read_text()))
    return tuple(values)


UNIT_SCALES: dict[str, tuple[float, ...]] = {
    "×": (1,),
    "x": (1,),
    "ms": (1, 1e3),
    "s": (1, 1e-3, 60),
    "min": (1, 1 / 60),
    "h": (1, 1 / 60, 1 / 3600),
    "GB": (1, 1e-3, 1e-9),
    "MB": (1, 1e-6),
    "B/token": (1,),
    "tokens/s": (1,),
    "answers/s": (1,),
    "samples/s": (1,),
    "nats": (1,),
    "": (1,),
}
"""What a quoted unit may be of a file's number: the number itself, or that number in a smaller unit (a file's
seconds quoted in ms or minutes, bytes in GB)."""
_UNIT = r"(?:(?<=\d)[×x](?![\w])|(?<=k)[×x](?![\w])| ?(?:ms|s|min|h|GB|MB|nats)\b| ?(?:B/token|tokens/s|answers/s|samples/s))"
_AMOUNT = r"\d[\d,]*(?:\.\d+)?"
_MEASURE = re.compile(rf"(?<![\w.,/+\-−])({_AMOUNT})(k)?({_UNIT})?")
_BOLD = re.compile(rf"\*\*({_AMOUNT})(k)?({_UNIT})?\*\*")


def measurements(text: str) -> list[tuple[str, str, bool, str]]:
    """(as written, amount, thousands, unit) for each measurement `text` quotes: a number with a unit of
    `UNIT_SCALES` or a `k`, or a number in bold. Left out: code, dates, versions, commits; `A-B unit` is two
    measurements, `M min S s` one (in seconds)."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\b\d{4}-\d{2}-\d{2}\b|\b\d+\.\d+\.\d+\S*|\b[0-9a-f]{7,40}\b", " ", text)
    text = re.sub(r"\b(\d+) min (\d+) s\b", lambda m: f"{int(m.group(1)) * 60 + int(m.group(2))} s", text)
    text = re.sub(
        rf"({_AMOUNT}k?) ?[-–] ?(?=({_AMOUNT}k?)({_UNIT}))", lambda m: f"{m.group(1)}{m.group(3)} and ", text
    )
    found = [
        (m.group(0), m.group(1), bool(m.group(2)), (m.group(3) or "").strip()) for m in _BOLD.finditer(text)
    ]
    for m in _MEASURE.finditer(_BOLD.sub(" ", text).replace("**", "")):
        if m.group(2) or m.group(3):
            found.append((m.group(0), m.group(1), bool(m.group(2)), (m.group(3) or "").strip()))
    return found


def _holds(amount: str, thousands: bool, unit: str, values: tuple[float, ...]) -> bool:
    """Whether one of `values` (in one of the unit's scales) is `amount` to the quoted precision."""
    quoted = float(amount.replace(",", "")) * (1000 if thousands else 1)
    decimals = len(amount.partition(".")[2])
    tolerance = 0.5 * 10**-decimals * (1000 if thousands else 1) + 1e-9 * abs(quoted)
    return any(abs(v * s - quoted) <= tolerance for v in values for s in UNIT_SCALES[unit])


def number_problems(name: str, text: str) -> list[str]:
    """Each number of page `text` that the files it quotes do not hold, as `name:line: ...`.

    Statistics (`mean ± half-width`, `estimate [low, high]`) must appear in the results tables cited by their
    sentence, else by their passage, else by what stands above it; with none cited, in some table under
    results/. Measurements (a number with a unit, or in bold) are checked in a sentence (or a table row) that
    cites a benchmark JSON or a Snakemake benchmark file: one of those files must hold the number, to the quoted
    precision (`UNIT_SCALES`)."""
    problems = []
    for passage in passages(text):
        around = cited_files(passage.text) or cited_files(passage.context)
        is_row = passage.text.lstrip().startswith("|")
        for sentence in [passage.text] if is_row else sentences(passage.text):
            files = cited_files(sentence) or around
            tables = [f for f in files if f.suffix == ".md" and _file_statistics(f)] or list(
                _results_tables()
            )
            held = frozenset().union(*(_file_statistics(f) for f in tables))
            for written, key in statistics(sentence):
                if key not in held:
                    where = ", ".join(_rel(f) for f in tables[:3]) + (" ..." if len(tables) > 3 else "")
                    problems.append(f"{name}:{passage.line}: {written!r} is not in {where}")
            own = cited_files(sentence) or (around if is_row else [])
            measured = [f for f in own if f.suffix in (".json", ".tsv")]
            if not measured:
                continue
            values = tuple(v for f in measured for v in _file_values(f))
            for written, amount, thousands, unit in measurements(sentence):
                if not _holds(amount, thousands, unit, values):
                    where = ", ".join(sorted({_rel(f) for f in measured})[:3])
                    problems.append(f"{name}:{passage.line}: {written.strip()!r} is not in {where}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=_rel)
def test_every_number_a_page_quotes_is_the_files(page):
    problems = number_problems(_rel(page), page.read_text())
    assert not problems, "numbers the cited files do not hold:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("page", "right", "wrong"),
    [
        ("docs/plugins.md", "−0.17 [−1.79, +1.54]", "−0.27 [−1.79, +1.54]"),  # a results table's interval
        ("docs/results.md", "−1.7 [−3.2, −0.1]", "−1.7 [−3.3, −0.1]"),  # in the cited table only (regimes.md)
        ("README.md", "51.9 ± 4.2", "51.9 ± 4.7"),  # a mean ± half-width quoted from some table
        ("docs/performance.md", "**2.14×**", "**2.41×**"),  # a benchmark JSON's ratio
        ("docs/performance.md", "7.3 ms", "7.6 ms"),
        ("docs/real-engines.md", "181 s (ExGRPO)", "191 s (ExGRPO)"),  # a Snakemake benchmark file's seconds
    ],
)
def test_the_number_check_catches_a_planted_wrong_number(tmp_path, page, right, wrong):
    text = (ROOT / page).read_text()
    assert text.count(right) == 1, f"{right!r} is not once in {page}: update the planted case"
    copy = tmp_path / Path(page).name
    copy.write_text(text.replace(right, wrong))
    assert number_problems(page, text) == []
    problems = number_problems(page, copy.read_text())
    assert len(problems) == 1 and wrong.strip("*")[:4] in problems[0], problems


def test_the_number_check_reads_passages_sentences_and_units():
    text = (
        "# T\n\nIntro citing `results/tiny/tables/table1_main.md`.\n\n| a | b |\n|---|---|\n| x | 76.2 ± 3.2 |\n\n"
        "```bash\necho 9.99 s\n```\n\n- item one.\n- item two\n"
    )
    assert [(p.line, p.text) for p in passages(text)] == [
        (3, "Intro citing `results/tiny/tables/table1_main.md`."),
        (7, "| x | 76.2 ± 3.2 |"),
        (13, "- item one."),
        (14, "- item two"),
    ]
    assert sentences("Took 3 s, e.g. in CI. Then `x` ran. vs. Fig. 3 held.") == [
        "Took 3 s, e.g. in CI.",
        "Then `x` ran. vs. Fig. 3 held.",
    ]
    got = [
        (a, k, u) for _, a, k, u in measurements("**0.987** at 91cdcb1, 28.4k vs 13.3k tokens/s, 2 min 22 s")
    ]
    assert got == [("0.987", False, ""), ("28.4", True, ""), ("13.3", True, "tokens/s"), ("142", False, "s")]
    assert [a for _, a, _, _ in measurements("1.12–1.17× on 2026-12-02, torch 2.13.0, 16 × 8")] == [
        "1.12",
        "1.17",
    ]
    assert _holds("7.3", False, "ms", (0.00731,)) and not _holds("7.3", False, "ms", (0.0075,))


# ------------------------------------------------------------------------------------------ links and names
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and spaces dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), flags=re.M)}


@pytest.mark.parametrize("page", pages(), ids=_rel)
def test_every_link_of_a_page_resolves(page):
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{_rel(page)}: links to nothing: {broken}"


_REPO_PATH = re.compile(
    r"(?<![\w/.$-])((?:exgrpo|analysis|tests|workflow|benchmarks|\.ci|docs|models|config)/[\w./-]*)"
)
_MODULE = re.compile(r"(?<![\w./-])(exgrpo(?:\.\w+)+)")


def _defines(module: Path, name: str) -> bool:
    source = module.read_text()
    return bool(
        re.search(
            rf"^\s*(?:def|class|async def) {name}\b|^\s*{name}\s*[:=]|import .*\b{name}\b", source, re.M
        )
    )


@cache
def _named_like_code() -> tuple[frozenset[str], frozenset[str]]:
    """What reads like a path or a module of exgrpo and is neither: the metric names (`exgrpo/replay_rows`,
    exgrpo.records.metrics) and the keys of the verl run config's `exgrpo` block (`exgrpo.stop_after`)."""
    import yaml

    from exgrpo.records.metrics import METRICS

    metrics = frozenset(n for m in METRICS for n in (m.name, m.verl_key) if n)
    trainer = yaml.safe_load((ROOT / "exgrpo/verl_plugin/config/exgrpo_trainer.yaml").read_text())
    return metrics, frozenset(trainer["exgrpo"])


def name_problems(text: str) -> list[str]:
    """Repository paths and `exgrpo.` modules (and their attributes) that `text` names and the tree lacks.

    Not checked: metric names and run-config keys (`_named_like_code`), folders a run creates (config/locks/),
    placeholders and globs."""
    metrics, keys = _named_like_code()
    problems = []
    for m in _REPO_PATH.finditer(text):
        path = m.group(1).rstrip(".,;:")
        if path in metrics or path.startswith("config/locks/") or any(c in path for c in "*<>{}"):
            continue
        if not (ROOT / path).exists():
            problems.append(path)
    for m in _MODULE.finditer(text):
        parts = m.group(1).split(".")
        if parts[1] in keys:
            continue
        for k in range(len(parts), 1, -1):
            base = ROOT.joinpath(*parts[:k])
            module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if module.is_file():
                if parts[k:] and not _defines(module, parts[k]):
                    problems.append(m.group(1))
                break
        else:
            problems.append(m.group(1))
    return problems


OTHER_PAGES = ("results/README.md", "results/paper/README.md", "benchmarks/profile.md")
"""Pages outside docs/ whose paths and module names are checked too."""


@pytest.mark.parametrize("page", [*pages(), *(ROOT / p for p in OTHER_PAGES)], ids=_rel)
def test_every_path_and_module_a_page_names_exists(page):
    problems = name_problems(page.read_text())
    assert not problems, f"{_rel(page)} names what the tree does not have: {sorted(set(problems))}"


def test_the_name_check_catches_a_moved_module():
    assert name_problems("`exgrpo.records.provenance.provenance` and `exgrpo/core/step.py`") == []
    assert name_problems("`exgrpo.provenance.provenance`, `exgrpo/metrics.py`") == [
        "exgrpo/metrics.py",
        "exgrpo.provenance.provenance",
    ]
    assert name_problems("`exgrpo.core.config.NoSuchThing`; metric `exgrpo/replay_rows`") == [
        "exgrpo.core.config.NoSuchThing"
    ]


def test_the_docs_index_links_every_page_with_its_purpose():
    index = (DOCS / "README.md").read_text()
    rows = dict(re.findall(r"^\| \[[^\]]+\]\(([\w-]+\.md)\) \| (.+?) \|$", index, flags=re.M))
    pages_here = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert set(rows) == pages_here, (
        f"docs/README.md misses {pages_here - set(rows)}, or lists {set(rows) - pages_here}"
    )
    assert all(purpose.strip() for purpose in rows.values())
