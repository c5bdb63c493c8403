"""The README and the pages of docs/ as a contract.

- The README's two commands: `.ci/run` runs exactly the README's test command, and the main command installs CPU
  torch, then the hash-pinned workflow/envs/cpu.lock (the versions the committed results record), and runs the
  `tiny` target. The README stays a five-minute read (`README_MAX_LINES`).
- Each check of a fact follows the page that states it: the engine environment's block (docs/real-engines.md),
  the generated switch table (docs/method.md), the commits and the compute ledger of the tiny study (whichever
  page states them: exactly one may).
- Every number a page quotes from a file of the repository is that file's: tests/test_docs_numbers.py.
- Every link and every repository path or `exgrpo` module a page names exists, and docs/README.md indexes every
  page.
"""

from __future__ import annotations

import json
import re
import shlex
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


def rel(path: Path) -> str:
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
    test_cmds = [b for b in readme_blocks if re.search(r"&& pytest( -[^&]*)?$", b)]
    assert len(test_cmds) == 1, (
        "the README must show exactly one test command ending in '&& pytest [options]'"
    )
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert test_cmds[0] in ci_lines, f".ci/run does not run the README test command {test_cmds[0]!r}"


CPU_LOCK = ROOT / "workflow/envs/cpu.lock"


def _main_command() -> str:
    main = [b for b in _bash_blocks(README.read_text()) if "snakemake" in b and b.endswith(" tiny")]
    assert main, "the README must show the main command that runs the `tiny` target"
    return main[0]


def test_main_command_installs_cpu_torch_then_the_lock_and_runs_tiny():
    main = _main_command()
    # the CPU build on any Linux machine: PyTorch's CPU index, not the registry's CUDA wheel of that version
    assert "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && " in main
    # everything else from the hash-pinned lock, never a fresh resolution; the project on top, without deps
    steps = [step.strip() for step in main.split("&&")]
    torch_at = next(i for i, s in enumerate(steps) if "torch==2.13.0" in s)
    lock_at = next(
        i for i, s in enumerate(steps) if s.endswith("--require-hashes --no-deps -r workflow/envs/cpu.lock")
    )
    project_at = next(i for i, s in enumerate(steps) if re.search(r"--no-deps .*-e \.$", s))
    assert torch_at < lock_at < project_at < len(steps) - 1 and steps[-1] == "snakemake --cores 2 tiny"
    assert not any(re.search(r"-e \S*\[", s) for s in steps), "the main command must not resolve the extras"


def test_the_main_command_installs_as_benchmarked():
    """The README's install (its main command up to `snakemake`) is the variant benchmarks/bench_install.py measured
    fastest, so the seconds the README quotes from benchmarks/results/install.json are its own."""
    install = _main_command().rsplit(" && snakemake", 1)[0]
    result = json.loads((ROOT / "benchmarks/results/install.json").read_text())
    fastest = result["variants"][result["fastest"]]
    assert fastest["command"] == install
    assert (
        fastest["versions"]["transformers"] == "5.10.4"
        and fastest["pip_check"] == "No broken requirements found."
    )


def _lock_entries() -> dict[str, str]:
    """Each pin of cpu.lock (normalised name -> its whole entry: the pin line, its hashes, its `# via`)."""
    body = CPU_LOCK.read_text().split("\n", 2)[2]
    entries = re.split(r"\n(?=[A-Za-z0-9])", body)
    return {
        re.sub(r"[-_.]+", "-", m.group(1)).lower(): entry
        for entry in entries
        if (m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", entry))
    }


def test_the_cpu_lock_pins_what_the_committed_results_record():
    """The lock's torch, transformers, lm-eval and math-verify are the versions every committed tiny run records
    (run.json `versions`), each pin carries hashes (pip --require-hashes refuses the file otherwise), and the
    project itself is resolved but not emitted (the main command installs it from the checkout)."""
    entries = _lock_entries()
    pins = {name: entry.split(" ", 1)[0].split("==")[1] for name, entry in entries.items()}
    recorded = {
        tuple(sorted(json.loads(p.read_text())["versions"].items()))
        for p in (ROOT / "results/tiny/train").glob("*/*/s*/run.json")
    }
    (versions,) = recorded  # one environment made them all
    for name in ("torch", "transformers", "lm-eval", "math-verify"):
        assert pins[name] == dict(versions)[name], name
    assert all("--hash=sha256:" in entry for entry in entries.values())
    assert "exgrpo" not in entries and not re.search(r"^-e ", CPU_LOCK.read_text(), re.M)
    assert "# via exgrpo" in CPU_LOCK.read_text() or "#   exgrpo" in CPU_LOCK.read_text()


def test_the_cpu_lock_header_is_its_refresh_command():
    (line,) = [ln for ln in CPU_LOCK.read_text().splitlines()[:3] if "uv pip compile" in ln]
    cmd = shlex.split(line.lstrip("# ").strip())
    assert cmd[:4] == ["uv", "pip", "compile", "workflow/envs/cpu.in"] and "--generate-hashes" in cmd
    opts = dict(zip(cmd[4:], cmd[5:]))
    assert opts["--python-platform"] == "x86_64-manylinux_2_28" and opts["--python-version"] == "3.11"
    assert opts["-o"] == "workflow/envs/cpu.lock" and opts["--no-emit-package"] == "exgrpo"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT00:00:00Z", opts["--exclude-newer"])  # reproducible re-resolution
    assert "workflow/envs/cpu.in" in (DOCS / "install.md").read_text()  # the page says how to refresh it


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
    assert len(found) == 1, f"{pattern!r} is stated on {[rel(p) for p, _ in found]}, not on exactly one page"
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


# ------------------------------------------------------------------------------------------ links and names
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and spaces dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), flags=re.M)}


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_every_link_of_a_page_resolves(page):
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{rel(page)}: links to nothing: {broken}"


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


@pytest.mark.parametrize("page", [*pages(), *(ROOT / p for p in OTHER_PAGES)], ids=rel)
def test_every_path_and_module_a_page_names_exists(page):
    problems = name_problems(page.read_text())
    assert not problems, f"{rel(page)} names what the tree does not have: {sorted(set(problems))}"


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
