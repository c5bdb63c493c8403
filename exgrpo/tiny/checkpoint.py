"""Resumable training state in plain formats: safetensors for tensors, JSON for everything else.

A checkpoint is a directory `step_<N>/` holding
- `model/`            the HF model (`save_pretrained`, safetensors) and tokenizer;
- `optimizer.safetensors` + `optimizer.json`   AdamW state tensors and the param groups / scalars;
- `rng.safetensors`   the torch generator states (rollout, minibatch shuffling);
- `experience/`       the ExperienceManager (buffer, retired set, delayed start, its numpy RNG);
- `trainer.json`      step, data position, numpy RNG states, the log length, and the run's
                      `fingerprint` (exgrpo.tiny.run.run_fingerprint): a run resumes only from a
                      checkpoint with its own fingerprint.
It is written to `step_<N>.tmp/`, given a manifest (`exgrpo.records.io.MANIFEST`: size and sha256 of every file),
fsynced and renamed into place (`exgrpo.records.io.publish_dir`: a checkpoint of the same step is removed only after
the new one is in place), and `latest` names the newest complete step, so a run killed at any point resumes
from a whole checkpoint. On start `latest_checkpoint` takes the newest checkpoint that passes its manifest and
names each newer one skipped (a checkpoint from before manifests is taken as it is). Nothing is pickled.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from exgrpo.records.io import (
    MANIFEST,
    atomic_open,
    check_manifest,
    publish_dir,
    read_json,
    write_json,
    write_manifest,
)


def optimizer_to_plain(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split `opt.state_dict()` into a flat tensor dict and a JSON-able remainder."""
    state = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, pstate in state["state"].items():
        for key, value in pstate.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{key}"] = value.detach().clone().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_from_plain(
    opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> None:
    """Inverse of `optimizer_to_plain`: load the state back into `opt` exactly."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = value
    for pid, values in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(
    root: Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    generators: dict[str, torch.Generator],
    manager: Any,
    trainer_state: dict[str, Any],
    fingerprint: str | None = None,
    keep: int = 2,
) -> Path:
    """Write checkpoint `root/step_<step>` atomically and point `root/latest` at it; keep the newest `keep`."""
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    tensors, meta = optimizer_to_plain(optimizer)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    write_json(tmp / "optimizer.json", meta)
    save_file({name: g.get_state() for name, g in generators.items()}, str(tmp / "rng.safetensors"))
    manager.save(tmp / "experience")
    write_json(tmp / "trainer.json", {"step": step, "fingerprint": fingerprint, **trainer_state})
    write_manifest(tmp)
    publish_dir(tmp, final)
    with atomic_open(root / "latest", "w") as fh:
        fh.write(final.name + "\n")
    _prune(root, keep)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The newest checkpoint under `root` that passes its checks, or None when there is none at all; each newer
    one that fails is named on stdout with the reason. `latest` naming a missing checkpoint, or checkpoints none
    of which passes, is an error."""
    pointer = root / "latest"
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    if not (path / "trainer.json").exists():
        raise FileNotFoundError(f"{pointer}: names checkpoint {path} which is missing or incomplete")
    for candidate in _steps_newest_first(root):
        problem = _problem(candidate)
        if problem is None:
            return candidate
        print(f"skipping checkpoint {candidate}: {problem}", flush=True)
    raise RuntimeError(
        f"{root}: no checkpoint passes its checks (see above); discard them to start from step 1"
    )


def _problem(path: Path) -> str | None:
    if not (path / "trainer.json").exists():
        return "no trainer.json"
    if not (path / MANIFEST).exists():
        return None  # written before manifests: taken as it is
    return check_manifest(path)


def _steps_newest_first(root: Path) -> list[Path]:
    steps = [p for p in root.glob("step_*") if p.is_dir() and p.name.removeprefix("step_").isdigit()]
    return sorted(steps, key=lambda p: int(p.name.removeprefix("step_")), reverse=True)


def checkpoint_fingerprint(path: Path) -> str | None:
    """The fingerprint a checkpoint was written with (None for one written without)."""
    return read_json(path / "trainer.json").get("fingerprint")


def discard_checkpoints(root: Path) -> None:
    """Remove every checkpoint, the `latest` pointer and the final model under `root` (a stale run's)."""
    for path in root.glob("step_*"):
        shutil.rmtree(path, ignore_errors=True)
    for name in ("final", "final.tmp"):
        shutil.rmtree(root / name, ignore_errors=True)
    (root / "latest").unlink(missing_ok=True)


def load_checkpoint_state(
    path: Path, optimizer: torch.optim.Optimizer, generators: dict[str, torch.Generator]
) -> dict[str, Any]:
    """Restore optimizer and generator states from `path`; return trainer.json (model and manager load separately)."""
    for name in ("optimizer.safetensors", "optimizer.json", "rng.safetensors", "trainer.json"):
        if not (path / name).exists():
            raise FileNotFoundError(f"{path / name}: checkpoint file missing")
    optimizer_from_plain(
        optimizer, load_file(str(path / "optimizer.safetensors")), read_json(path / "optimizer.json")
    )
    states = load_file(str(path / "rng.safetensors"))
    for name, gen in generators.items():
        if name not in states:
            raise ValueError(f"{path / 'rng.safetensors'}: missing generator state '{name}'")
        gen.set_state(states[name])
    return read_json(path / "trainer.json")


def _prune(root: Path, keep: int) -> None:
    for old in _steps_newest_first(root)[keep:]:
        shutil.rmtree(old)
