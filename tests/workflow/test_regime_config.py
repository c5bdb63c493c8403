"""The regime map as configured (config `regimes:`, exgrpo.workflow.regimes): each arm resolves to the run the protocol
(docs/regimes.md) describes, arms that are base-study runs are reused, and bad entries are named."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.settings.resolve import read_run_file, write_run_file
from exgrpo.workflow.regimes import with_mechanism_ablations
from exgrpo.workflow.workflow_config import load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def load(config: dict | None = None):
    return load_workflow_config(copy.deepcopy(config or CONFIG), workdir=ROOT)


def test_the_committed_map_resolves_as_the_protocol_says():
    wf = load()
    assert set(wf.regimes) == {
        "default",
        "fresh_anchored",
        "data_limited",
        "weak_long",
        "long_horizon",
        "rollout_matched",
        "hard_mix",
    }

    def run(regime: str, arm: str, seed: int = 0):
        return wf.study_run(f"tiny/regimes/{regime}", wf.regimes[regime].backbone, arm, seed)

    anchored, b24 = run("fresh_anchored", "exgrpo-anchored"), run("fresh_anchored", "on_policy-b24")
    assert (
        anchored.method.fresh_anchored and anchored.variant == "exgrpo" and anchored.arm == "exgrpo-anchored"
    )
    assert anchored.method.rho == 0.5 and not b24.method.fresh_anchored and b24.trainer["batch_size"] == 24
    assert b24.method.method == "on_policy"
    assert run("data_limited", "exgrpo").trainer["train_size"] == 200
    assert (
        run("weak_long", "on_policy").trainer["steps"] == 300
        and wf.regimes["weak_long"].backbone == "tiny-llama"
    )
    assert run("long_horizon", "exgrpo").trainer["steps"] == 300
    assert run("rollout_matched", "exgrpo-s107").trainer["steps"] == 107
    assert list(run("hard_mix", "on_policy").trainer["train_difficulties"]) == [3, 4]
    # the arms that are runs of tiny_full are read from results/tiny, not trained again
    assert wf.regime_reuse["default"] == {"exgrpo": "tiny", "on_policy": "tiny"}
    assert wf.regime_reuse["fresh_anchored"] == {"on_policy": "tiny"}
    assert wf.regime_reuse["rollout_matched"] == {"on_policy": "tiny"}
    assert wf.regime_reuse["long_horizon"] == {}  # 300 steps: not a tiny_full run
    # R1 holds the mechanism ablations (the best primary Δ ID, docs/regimes.md): each a copy of its treatment arm
    assert wf.regime_studies["fresh_anchored"].methods == (
        "exgrpo-anchored",
        "on_policy-b24",
        "wo_shaping-anchored",
        "wo_is_correction-anchored",
        "highest_entropy-anchored",
        "wo_t_selection-anchored",
        "exgrpo-anchored-released_mask",
    )
    assert run("fresh_anchored", "exgrpo-anchored-released_mask").method.entropy_mask == "as_released"
    assert run("fresh_anchored", "wo_shaping-anchored").method.fresh_anchored
    assert all(s.seeds == (0, 1, 2) for s in wf.regime_studies.values())


def test_an_arm_label_survives_the_run_file(tmp_path):
    wf = load()
    spec = wf.study_run("tiny/regimes/fresh_anchored", "tiny-math", "exgrpo-anchored", 2)
    back = read_run_file(write_run_file(tmp_path / "method.json", spec))
    assert back == spec and back.label == "exgrpo-anchored"
    plain = wf.study_run("tiny/regimes/hard_mix", "tiny-math", "exgrpo", 0)
    assert plain.arm is None and plain.label == "exgrpo"


def test_mechanism_ablations_copy_the_primary_treatment_arm():
    regime = with_mechanism_ablations(
        load().regimes["fresh_anchored"], ["wo_shaping", "highest_entropy"], True
    )
    assert set(regime.arms) >= {
        "wo_shaping-anchored",
        "highest_entropy-anchored",
        "exgrpo-anchored-released_mask",
    }
    assert regime.arms["wo_shaping-anchored"].method == {"fresh_anchored": True}
    assert regime.arms["exgrpo-anchored-released_mask"].method == {
        "fresh_anchored": True,
        "entropy_mask": "as_released",
    }
    assert regime.comparisons[0] == ("exgrpo-anchored", "on_policy-b24")  # the primary comparison stays first
    assert ("wo_shaping-anchored", "exgrpo-anchored") in regime.comparisons


def _edit(change):
    config = copy.deepcopy(CONFIG)
    change(config["regimes"])
    return config


BAD = [
    (
        "an arm of an unknown variant",
        lambda r: r["map"]["default"]["arms"].update({"grpo-x": {}}),
        "regimes.map.default.arms.grpo-x",
    ),
    (
        "a comparison naming no arm",
        lambda r: r["map"]["default"]["compare"].append(["exgrpo", "missing"]),
        "regimes.map.default.compare[1]",
    ),
    (
        "a paper backbone",
        lambda r: r["map"]["default"].update(backbone="qwen2.5-math-7b"),
        "regimes.map.default.backbone",
    ),
    (
        "an unknown ablation regime",
        lambda r: r["ablations"].update(regime="nowhere"),
        "regimes.ablations.regime",
    ),
    (
        "an unknown trainer setting",
        lambda r: r["map"]["hard_mix"].update(trainer={"batchsize": 8}),
        "trainer.batchsize",
    ),
    ("a base study of paper scale", lambda r: r.update(base_study="paper_repro"), "regimes.base_study"),
]


@pytest.mark.parametrize(("case", "change", "field"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_regime_entry_is_named(case, change, field):
    with pytest.raises(ConfigError) as err:
        load(_edit(change))
    assert err.value.field == field, str(err.value)
