"""Every number a page quotes from a file of the repository is that file's (`number_problems`), on the README and
on every page under docs/: the statistics of the results tables (`76.2 ± 3.2`, `−2.06 [−3.90, −0.25]`) and the
measurements of the benchmark JSON and Snakemake benchmark files (`2.14×`, `7.3 ms`, `181 s`) a passage cites.

The pages themselves, and the README's other promises, are tests/test_readme.py's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.test_readme import ROOT, pages, rel


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
                    where = ", ".join(rel(f) for f in tables[:3]) + (" ..." if len(tables) > 3 else "")
                    problems.append(f"{name}:{passage.line}: {written!r} is not in {where}")
            own = cited_files(sentence) or (around if is_row else [])
            measured = [f for f in own if f.suffix in (".json", ".tsv")]
            if not measured:
                continue
            values = tuple(v for f in measured for v in _file_values(f))
            for written, amount, thousands, unit in measurements(sentence):
                if not _holds(amount, thousands, unit, values):
                    where = ", ".join(sorted({rel(f) for f in measured})[:3])
                    problems.append(f"{name}:{passage.line}: {written.strip()!r} is not in {where}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_every_number_a_page_quotes_is_the_files(page):
    problems = number_problems(rel(page), page.read_text())
    assert not problems, "numbers the cited files do not hold:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("page", "right", "wrong"),
    [
        ("docs/plugins.md", "+0.04 [−1.81, +2.10]", "+0.04 [−1.81, +2.01]"),  # a results table's interval
        ("docs/results.md", "−2.1 [−4.1, −0.3]", "−2.1 [−4.2, −0.3]"),  # in the cited table only (regimes.md)
        ("README.md", "51.9 ± 4.2", "51.9 ± 4.7"),  # a mean ± half-width quoted from some table
        ("docs/performance.md", "**2.14×**", "**2.41×**"),  # a benchmark JSON's ratio
        ("docs/performance.md", "7.3 ms", "7.6 ms"),
        (
            "docs/real-engines.md",
            "223 s (Tiny-Math-H32 ExGRPO)",
            "233 s (Tiny-Math-H32 ExGRPO)",
        ),  # a Snakemake benchmark file's seconds
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
