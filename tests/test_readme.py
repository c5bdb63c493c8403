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
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && " in main[0]


def test_readme_switch_table_is_the_generated_one():
    from exgrpo.commands.switches import switch_table

    assert switch_table() in (ROOT / "README.md").read_text(), "README switch table is stale: run `exgrpo switches`"
