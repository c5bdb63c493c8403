"""The tiny study's inputs as hub repos in a local hub cache, read offline by repo id and revision.

`build` publishes (exgrpo.hub.layout) what a tiny-scale study reads:
- every tiny backbone with an `hf_id` in the registry whose shipped folder `models/tiny/<name>` exists, as the
  model repo `hf_id` (e.g. `exgrpo-tiny/tiny-math-h32`): all the folder's files, weights, tokenizer and chat
  template included; and so every tiny reward model of the registry's `reward_models` (`tiny-rm-h32` as
  `exgrpo-tiny/tiny-rm-h32`, which a verl CPU run with a served reward model reads by repo id);
- the task data of one data seed (an `exgrpo make-data` folder) as the dataset repo `exgrpo-tiny/tiny-task-s<seed>`:
  every split file (the training splits and the tiny benchmarks) with a manifest.json reduced to what the data
  are (`DATA_MANIFEST_KEYS`: no time, host or git commit, so the commit depends on the rows only) and a dataset
  card whose `configs` let `datasets.load_dataset(<snapshot folder>, split=...)` read each split (how the
  paper route's download exports a hub dataset; datasets itself does not read the hub cache offline);
- every tiny reward model of the registry's `reward_models` with a shipped folder (`tiny-rm-h32`), as the model
  repo `hf_id`, and, given the shipped tiny chat folder, Table 2's tiny prompts and benchmark rows as dataset
  repos (exgrpo.hub.tiny_chat: study paper_continuous_cpu);

then runs the paper route's download on each repo (exgrpo.hub.fetch: `download_model` for models, the
dataset snapshot + lock check of `fetch_hf_dataset` for the data) with HF_HUB_OFFLINE=1 against that cache, so
pins and locks are checked exactly as a cluster's download checks them. Pins: a model's commit is its registry
`revision` (config/backbones.yaml), a dataset's its lock (config/locks/tiny-task-s<seed>.json); a published commit
other than the pinned one is refused naming the field, and a file other than the lock's naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.hub.layout import Published, dataset_card, publish, repo_files

DATA_ORG = "exgrpo-tiny"
DATA_MANIFEST_KEYS = ("format", "seed", "sizes", "train_difficulties", "splits")
"""The make-data manifest keys a data repo keeps (its `provenance` names a time, a host and a commit)."""


def data_repo_id(seed: int) -> str:
    return f"{DATA_ORG}/tiny-task-s{int(seed)}"


def data_lock_name(seed: int) -> str:
    return f"tiny-task-s{int(seed)}"


def data_files(data_dir: Path, seed: int) -> dict[str, bytes]:
    """The files of the data repo of `data_dir` (a make-data folder written with `seed`)."""
    from exgrpo.testbed.splits import load_manifest

    manifest = load_manifest(data_dir)
    if manifest.get("seed") != seed:
        raise ConfigError(
            "data_seed", f"{data_dir}/manifest.json has seed {manifest.get('seed')!r}, expected {seed}"
        )
    missing = [k for k in DATA_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise ConfigError("data", f"{data_dir}/manifest.json lacks {missing}: not a make-data folder")
    split_files = {name: info["file"] for name, info in manifest["splits"].items()}
    files = repo_files(data_dir, sorted(split_files.values()))
    reduced = {k: manifest[k] for k in DATA_MANIFEST_KEYS}
    files["manifest.json"] = (json.dumps(reduced, indent=1, sort_keys=True) + "\n").encode()
    files["README.md"] = dataset_card(
        data_repo_id(seed),
        {"default": split_files},
        "The tiny task's splits (`exgrpo make-data`), one file per split.",
    ).encode()
    return files


def model_repos(backbones: Mapping[str, Mapping[str, Any]], models_dir: Path) -> dict[str, Path]:
    """name -> shipped folder of each tiny backbone (or tiny reward model: the same entry keys) the cache
    publishes (an `hf_id` and a shipped folder)."""
    return {
        name: models_dir / name
        for name, entry in backbones.items()
        if entry.get("scale") == "tiny"
        and entry.get("hf_id")
        and (models_dir / name / "config.json").is_file()
    }


def _require_offline() -> None:
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        raise ConfigError(
            "HF_HUB_OFFLINE",
            "set HF_HUB_OFFLINE=1 for `exgrpo hf-cache`: its download check must read the local cache, never the hub",
        )


def _check_model(
    out: Path,
    name: str,
    entry: Mapping[str, Any],
    published: Published,
    lock_dir: Path,
    registry: str = "backbones",
) -> dict:
    """The published model read back by the paper route's download at its registry pin (`<registry>.<name>`)."""
    from exgrpo.hub.fetch import download_model

    field = f"{registry}.{name}.revision (config/backbones.yaml)"
    revision = entry.get("revision")
    if revision is None:
        raise ConfigError(
            field, f"{published.repo_id} is not pinned; its files publish commit {published.commit}"
        )
    if revision != published.commit:
        raise ConfigError(
            field,
            f"pins {revision}, but models/tiny/{name} publishes {published.commit} as {published.repo_id}: the "
            f"shipped files changed; set {published.commit} and delete {lock_dir / (name + '.json')} deliberately",
        )
    return download_model(
        out, published.repo_id, name, revision, lock_dir / f"{name}.json", revision_field=field
    )


def _check_data(out: Path, lock_name: str, published: Published, lock_dir: Path, pin: bool) -> dict:
    """The published dataset read back by the paper route's snapshot and lock check at its lock's pin."""
    from exgrpo.hub.fetch import fetch_dataset_snapshot
    from exgrpo.hub.locks import ChecksumError, check_lock, file_lock, pinned_revision
    from exgrpo.hub.retries import with_retries

    lock = lock_dir / f"{lock_name}.json"
    field = f"the lock {lock}"
    revision = pinned_revision(None, lock, published.repo_id, field, pin=pin)
    if revision is not None and revision != published.commit:
        # name the changed file: the lock of the pinned commit against what was published
        snapshot = published.snapshot
        check_lock(
            lock,
            file_lock(snapshot, sorted(p for p in snapshot.rglob("*") if p.is_file())),
            published.repo_id,
        )
        raise ChecksumError(
            f"{published.repo_id}: published {published.commit}, the lock {lock} pins {revision}"
        )
    snapshot = with_retries(
        lambda: fetch_dataset_snapshot(published.repo_id, out, revision),
        f"{lock_name} ({published.repo_id})",
    )
    files = sorted(p for p in snapshot.rglob("*") if p.is_file())
    check_lock(lock, file_lock(snapshot, files), published.repo_id, snapshot.name, pin=pin)
    return {"repo_id": published.repo_id, "commit": snapshot.name, "path": str(snapshot.relative_to(out))}


def build(
    out: Path,
    *,
    backbones: Mapping[str, Mapping[str, Any]],
    models_dir: Path,
    data_dir: Path | None,
    data_seed: int | None,
    lock_dir: Path,
    pin: bool = False,
    manifest_path: Path | None = None,
    reward_models: Mapping[str, Mapping[str, Any]] | None = None,
    chat_dir: Path | None = None,
) -> dict[str, Any]:
    """Publish the tiny models and tiny reward models (and the data of `data_dir`, Table 2's tiny files of
    `chat_dir`: exgrpo.hub.tiny_chat) into `out/hub`, check them by the offline download, write
    `out/tiny/<data seed | models>.json`; returns that manifest."""
    from exgrpo.hub.fetch import offline_env
    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    _require_offline()
    out = Path(out).resolve()  # hub clients return absolute snapshot paths
    entries = _publish_models(out, backbones, models_dir, lock_dir, reward_models or {})
    if data_dir is not None:
        if data_seed is None:
            raise ConfigError("--seed", "give the data seed of --data")
        published = publish(out / "hub", data_repo_id(data_seed), "dataset", data_files(data_dir, data_seed))
        checked = _check_data(out, data_lock_name(data_seed), published, lock_dir, pin)
        entries.append({"name": data_lock_name(data_seed), "repo_type": "dataset", **checked})
    if chat_dir is not None:
        entries += _publish_chat(out, Path(chat_dir), lock_dir, pin)
    manifest = {
        "kind": "tiny_hub_cache",
        "repos": entries,
        "offline_env": offline_env(out),
        "provenance": provenance(),
    }
    default = out / "tiny" / (f"s{data_seed}.json" if data_dir is not None else "models.json")
    write_json(manifest_path or default, manifest)
    return manifest


def _publish_models(
    out: Path,
    backbones: Mapping[str, Mapping[str, Any]],
    models_dir: Path,
    lock_dir: Path,
    reward_models: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Publish and check the shipped tiny backbones, then the shipped tiny reward models (their registry pins:
    `backbones.<name>.revision`, `reward_models.<name>.revision`); one manifest entry each."""
    from exgrpo.hub.tiny_chat import tiny_reward_models

    folders = [
        (name, folder, backbones[name], "backbones")
        for name, folder in model_repos(backbones, models_dir).items()
    ]
    # a reward model's `shipped` is relative to the repository root, which holds models_dir (models/tiny)
    root = Path(models_dir).parent.parent
    folders += [
        (name, folder, reward_models[name], "reward_models")
        for name, folder in tiny_reward_models(reward_models, root).items()
    ]
    entries = []
    for name, folder, entry, registry in folders:
        published = publish(out / "hub", entry["hf_id"], "model", repo_files(folder))
        manifest = _check_model(out, name, entry, published, lock_dir, registry)
        entries.append(
            {"name": name, "repo_type": "model", "repo_id": published.repo_id, "commit": manifest["commit"]}
        )
    return entries


def _publish_chat(out: Path, chat_dir: Path, lock_dir: Path, pin: bool) -> list[dict[str, Any]]:
    """Publish and check Table 2's tiny dataset repos (exgrpo.hub.tiny_chat.CHAT_REPOS)."""
    from exgrpo.hub import tiny_chat

    entries = []
    for repo in tiny_chat.CHAT_REPOS:
        published = publish(out / "hub", repo.repo_id, "dataset", tiny_chat.repo_files(repo, chat_dir))
        checked = _check_data(out, repo.lock_name, published, lock_dir, pin)
        entries.append({"name": repo.lock_name, "repo_type": "dataset", **checked})
    return entries


def snapshot_path(repo_id: str, revision: str, repo_type: str = "model") -> Path:
    """The snapshot folder of `repo_id` at `revision`, resolved by huggingface_hub from its cache only
    (HF_HOME / HF_HUB_CACHE), as a job under HF_HUB_OFFLINE=1 resolves it."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(repo_id=repo_id, repo_type=repo_type, revision=revision, local_files_only=True)
    )


__all__ = [
    "DATA_ORG",
    "build",
    "data_files",
    "data_lock_name",
    "data_repo_id",
    "model_repos",
    "snapshot_path",
]
