"""The README's commands are a contract: .ci/run must run exactly the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_test_command():
    readme_blocks = _bash_blocks((ROOT / "README.md").read_text())
    test_cmds = [b for b in readme_blocks if b.endswith("&& pytest")]
    assert len(test_cmds) == 1, "the README must show exactly one test command ending in '&& pytest'"
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert test_cmds[0] in ci_lines, f".ci/run does not run the README test command {test_cmds[0]!r}"


def test_main_command_installs_cpu_torch_and_runs_tiny():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    main = [b for b in blocks if "snakemake" in b and b.endswith(" tiny")]
    assert main, "the README must show the main command that runs the `tiny` target"
    assert "torch==2.13.0" in main[0]
    # the CPU build on any Linux machine: PyTorch's CPU index, not the registry's CUDA wheel of that version
    assert (
        "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && " in main[0]
    )


def test_real_engines_block_sets_up_the_engine_environment_and_runs_paper_cpu_on_vllm():
    """The one block of the section "Real engines on CPU": the engine environment's installer, its activation,
    then `snakemake --cores 2 paper_cpu` in it, whose committed study is on vLLM; `.ci/paper_cpu` runs the same."""
    import yaml

    text = (ROOT / "README.md").read_text()
    (section,) = re.findall(r"\n## ([^\n]*[Rr]eal engines[^\n]*)\n(.*?)(?=\n## )", text, flags=re.S)
    (block,) = _bash_blocks(section[1])
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


def test_readme_switch_table_is_the_generated_one():
    from exgrpo.commands.switches import switch_table

    assert switch_table() in (ROOT / "README.md").read_text(), (
        "README switch table is stale: run `exgrpo switches`"
    )


def test_readme_numbers_are_the_ones_the_files_hold():
    """The commits the README says made the tiny numbers are the ones the run files record, and its job count and
    wall hours are the compute ledger's (results/tiny/tables/ledger_rules.md, `all rules`)."""
    import json

    text = " ".join((ROOT / "README.md").read_text().split())
    named = re.search(r"The runs record the commits ([0-9a-f, and]+) \(", text)
    assert named, "the README names the commits the tiny runs record"
    claimed = set(re.findall(r"[0-9a-f]{7,40}", named.group(1)))
    recorded = {
        json.loads(p.read_text())["git_commit"].removesuffix("-dirty")[:7]
        for p in (ROOT / "results/tiny/train").glob("*/*/s*/run.json")
    }
    assert claimed == recorded
    ledger = (ROOT / "results/tiny/tables/ledger_rules.md").read_text()
    row = next(line for line in ledger.splitlines() if line.startswith("| all rules"))
    jobs, wall_h = (cell.strip() for cell in row.split("|")[2:4])
    compute = re.search(r"([\d.]+) wall-h in all for the (\d+) jobs of `results/tiny`", text)
    assert compute and compute.group(2) == jobs and compute.group(1) == f"{float(wall_h):.2f}"
