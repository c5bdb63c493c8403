"""The CPU trainer's checkpoints: manifested and published whole; a corrupted latest one is skipped for the one
before, by name; nothing usable is an error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from exgrpo.records.io import MANIFEST
from exgrpo.tiny.checkpoint import latest_checkpoint, save_checkpoint


class _Saves:
    """Stands in for the HF model / tokenizer / ExperienceManager: writes one file into the folder it is given."""

    def __init__(self, name: str, payload: bytes):
        self.name, self.payload = name, payload

    def save_pretrained(self, folder, **_):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / self.name).write_bytes(self.payload)

    save = save_pretrained


def _save(root: Path, step: int) -> Path:
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([param])
    param.grad = torch.ones(3)
    opt.step()
    return save_checkpoint(
        root,
        step,
        model=_Saves("model.safetensors", b"w%d" % step),
        tokenizer=_Saves("tok.json", b"t"),
        optimizer=opt,
        generators={"rollout": torch.Generator().manual_seed(step)},
        manager=_Saves("buffer.json", b"{}"),
        trainer_state={"data_pos": step},
        keep=3,
    )


def test_corrupt_latest_is_skipped_for_the_one_before(tmp_path, capsys):
    for step in (1, 2, 3):
        assert (_save(tmp_path, step) / MANIFEST).exists()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_3"
    (tmp_path / "step_3" / "model" / "model.safetensors").write_bytes(b"w9")  # same size, other bytes
    assert latest_checkpoint(tmp_path) == tmp_path / "step_2"
    assert (
        "skipping checkpoint " + str(tmp_path / "step_3") + ": model/model.safetensors: sha256 differs"
        in capsys.readouterr().out
    )
    for step in (1, 2):
        (tmp_path / f"step_{step}" / "trainer.json").write_text("{}\n")
    with pytest.raises(RuntimeError, match="no checkpoint passes its checks"):
        latest_checkpoint(tmp_path)


def test_resaving_a_step_replaces_it_whole(tmp_path):
    _save(tmp_path, 1)
    (tmp_path / "step_1" / "stale").write_text("x")
    _save(tmp_path, 1)
    assert not (tmp_path / "step_1" / "stale").exists() and latest_checkpoint(tmp_path) == tmp_path / "step_1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_1"]
