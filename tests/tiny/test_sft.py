"""SFT: schedule, loss masking, micro-batch exactness, held-out hygiene, a short run, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from exgrpo.cli import main
from exgrpo.core.config import ConfigError
from exgrpo.testbed import models, task
from exgrpo.testbed import splits as tiny_splits
from exgrpo.testbed.tokenizer import build_tokenizer
from exgrpo.tiny.sft_trainer import NoisyTeacherStream, SFTSettings, collate, evaluate, lr_at, train_sft

ROOT = Path(__file__).resolve().parents[2]

ARCH = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
SIZES = {
    "train": 60,
    "validation": 20,
    "test": 40,
    "ood_words": 20,
    "ood_choice4": 20,
    "ood_choice10": 20,
    "probe_length": 8,
}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    splits = tiny_splits.make_splits(0, SIZES)
    tiny_splits.write_dataset(out, splits)
    return out, splits


def test_lr_schedule_hand_values():
    s = SFTSettings(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, s) == pytest.approx(0.1) and lr_at(9, s) == pytest.approx(1.0)
    assert lr_at(10, s) == pytest.approx(1.0)
    assert lr_at(99, s) == pytest.approx(0.1)  # cosine ends at lr * min_lr_ratio
    mid = 10 + (99 - 10) / 2
    assert lr_at(int(mid), s) == pytest.approx(0.55, abs=0.02)  # halfway: (1 + 0.1) / 2


def test_collate_masks_prompt_and_padding():
    ids, labels = collate([[1, 2, 3], [4]], [[7, 8], [9, 10, 11]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 7, 8], [4, 9, 10, 11, 0]]
    assert labels.tolist() == [[-100, -100, -100, 7, 8], [-100, 9, 10, 11, -100]]


def test_stream_never_shows_heldout_problems(tok, data):
    _, splits = data
    heldout = tiny_splits.heldout_expressions(splits)
    stream = NoisyTeacherStream(tok, heldout, SFTSettings(steps=1, lr=1e-3), "s")
    problems = stream.problems(3000)
    assert not {task.expression_of(p) for p in problems} & heldout
    forms = {p["form"] for p in problems}
    assert forms == {"symbolic", "words", "choice4", "choice10"}
    assert {p["difficulty"] for p in problems} == {1, 2, 3, 4}
    again = NoisyTeacherStream(tok, heldout, SFTSettings(steps=1, lr=1e-3), "s").batch(8)
    assert again == NoisyTeacherStream(tok, heldout, SFTSettings(steps=1, lr=1e-3), "s").batch(8)


def test_micro_batching_does_not_change_the_update(tok, data):
    _, splits = data
    heldout = tiny_splits.heldout_expressions(splits)
    finals = []
    for micro in (3, 16):
        model = models.build_model("qwen2", ARCH, tok, seed=0)
        settings = SFTSettings(steps=2, lr=1e-3, batch_size=16, micro_batch=micro, warmup=1)
        losses = train_sft(model, tok, heldout, settings, "m", progress=False)
        finals.append((losses, torch.cat([p.detach().flatten() for p in model.parameters()])))
    assert finals[0][0] == pytest.approx(finals[1][0], rel=1e-5)
    assert torch.allclose(finals[0][1], finals[1][1], atol=1e-6)


def test_short_sft_lowers_the_loss(tok, data):
    _, splits = data
    model = models.build_model("llama", ARCH, tok, seed=0)
    settings = SFTSettings(steps=40, lr=1e-2, batch_size=16, warmup=5)
    losses = train_sft(model, tok, tiny_splits.heldout_expressions(splits), settings, "short", progress=False)
    assert losses[0] > 4.0  # ~ln(106) at init
    assert sum(losses[-5:]) / 5 < 0.7 * losses[0]
    result = evaluate(model, tok, splits["validation"][:6], temperature=1.0, max_new_tokens=8)
    assert result["n"] == 6 and 0 <= result["logical"] <= result["accuracy"] <= 1


def test_settings_validation():
    with pytest.raises(ConfigError, match="sft.steps"):
        SFTSettings(steps=0, lr=1e-3).validate()
    with pytest.raises(ConfigError, match="sft.form_mix"):
        SFTSettings(steps=1, lr=1e-3, form_mix={"latin": 1.0}).validate()


def test_cli_base_then_instruct_continuation(tmp_path, data, capsys):
    data_dir, _ = data
    # two small entries next to the real registry (their `mirrors` must name a registered paper backbone)
    config = yaml.safe_load((ROOT / "config" / "backbones.yaml").read_text())
    arch = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    for name, sft in (
        ("base", {"steps": 3, "lr": 1.0e-3, "init": None}),
        ("inst", {"steps": 2, "lr": 1.0e-4, "init": "base"}),
    ):
        config["backbones"][name] = {**config["backbones"]["tiny-math"], "arch": arch, "sft": sft}
    registry = tmp_path / "backbones.yaml"
    registry.write_text(yaml.safe_dump(config))
    common = ["--data", str(data_dir), "--backbones", str(registry), "--eval-rows", "4"]
    assert main(["sft", "--backbone", "base", "--out", str(tmp_path / "ck" / "base"), *common]) == 0
    record = json.loads((tmp_path / "ck" / "base" / "sft.json").read_text())
    assert record["backbone"] == "base" and record["steps"] == 3 and record["init"] is None
    assert record["provenance"]["versions"]["torch"] == torch.__version__
    assert set(record["validation"]) == {"t1_mean@2", "greedy"}
    # the instruct entry continues from the sibling checkpoint named by sft.init
    assert main(["sft", "--backbone", "inst", "--out", str(tmp_path / "ck" / "inst"), *common]) == 0
    inst = json.loads((tmp_path / "ck" / "inst" / "sft.json").read_text())
    assert inst["init"]["backbone"] == "base" and inst["steps_total"] == 5
    base_w = models.load_checkpoint(tmp_path / "ck" / "base")[0].lm_head.weight
    inst_w = models.load_checkpoint(tmp_path / "ck" / "inst")[0].lm_head.weight
    assert (base_w - inst_w).abs().max() < 0.01  # continued, not re-initialised
    # wrong init checkpoint and missing data are one-line errors
    assert (
        main(
            [
                "sft",
                "--backbone",
                "inst",
                "--init",
                str(tmp_path / "ck" / "inst"),
                "--out",
                str(tmp_path / "x"),
                *common,
            ]
        )
        == 2
    )
    assert "expected 'base'" in capsys.readouterr().err
    assert (
        main(
            [
                "sft",
                "--backbone",
                "base",
                "--out",
                str(tmp_path / "y"),
                "--data",
                str(tmp_path / "nodata"),
                "--backbones",
                str(registry),
            ]
        )
        == 2
    )
    assert "manifest.json" in capsys.readouterr().err
