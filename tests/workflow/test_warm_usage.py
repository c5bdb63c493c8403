"""Every rule whose job may run warm hands its benchmark's usage file to the job (common.smk `warm_usage`), so the
compute ledger counts a warm job's compute: read from the rule files, with the served commands taken from the
client (exgrpo.warm_client.COMMANDS), so a command served warm later is checked too."""

from __future__ import annotations

import re
from pathlib import Path

from exgrpo import warm_client

RULES = Path(__file__).resolve().parents[2] / "workflow" / "rules"
_COMMANDS = "|".join(re.escape(c) for c in warm_client.COMMANDS)
SERVED = re.compile(rf"\bexgrpo (?:{_COMMANDS})\b|python -m analysis (?:render|reproduce)\b")
ENGINE = re.compile(rf"--(?:backend|engine)[ =](?:{'|'.join(warm_client.ENGINE_FLAGS)})\b")


def _rules() -> dict[str, str]:
    """Rule name -> its text, for every rule of workflow/rules/."""
    found: dict[str, str] = {}
    for path in sorted(RULES.glob("*.smk")):
        for block in re.split(r"\n(?=rule )", path.read_text())[1:]:
            name = re.match(r"rule (\w+):", block)
            assert name, block[:80]
            # the rule ends at the next line that is not indented (a comment, a call, another statement)
            found[name.group(1)] = re.split(r"\n(?=[^\s])", block, maxsplit=1)[0]
    return found


def test_the_rules_are_found():
    rules = _rules()
    assert {"train_tiny", "eval_tiny", "prelim_tiny", "render_study", "sft"} <= set(rules)


def test_every_benchmarked_rule_that_may_run_warm_names_its_usage_file():
    checked = []
    for name, text in _rules().items():
        shell = text.split("    shell:", 1)[-1]
        if "    benchmark:" not in text or not SERVED.search(shell) or ENGINE.search(shell):
            continue
        checked.append(name)
        assert f'usage=warm_usage("{name}")' in text, (
            f"rule {name}: params usage=warm_usage({name!r}) missing"
        )
        assert "{params.usage}" in shell, f"rule {name}: its shell does not start with {{params.usage}}"
    assert {"train_tiny", "train_tiny_segment", "sft", "eval_tiny", "prelim_tiny", "render_study"} <= set(
        checked
    )


def test_warm_usage_names_the_rule_it_sits_in():
    for name, text in _rules().items():
        for named in re.findall(r'warm_usage\("(\w+)"\)', text):
            assert named == name, f"rule {name} hands over the usage file of rule {named}"
