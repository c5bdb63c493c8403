"""`exgrpo hf-cache`: the tiny models and data as hub repos in a local hub cache, read by real hub clients offline.

Independent expectations: `git` itself (the commit hash of the same files), huggingface_hub's own cache scanner and
resolvers, transformers' `from_pretrained(repo_id, revision=...)` and the tokenizer's chat template from the shipped
folder, and the paper route's download code (locks, retries, errors) run against the cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exgrpo.core.config import ConfigError
from exgrpo.hub import fetch as D
from exgrpo.hub import layout, retries, tiny
from exgrpo.testbed.models import load_backbones

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models" / "tiny"
LOCKS = ROOT / "config" / "locks"
H32 = "tiny-math-h32"


def _offline_env(hf_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {
        **env,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }


def _exgrpo(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "exgrpo.cli", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The make-data folder of seed 0, written afresh (the data lock pins what it must hash to)."""
    out = tmp_path_factory.mktemp("data") / "s0"
    done = _exgrpo("make-data", "--out", str(out), "--seed", "0", env=_offline_env(out.parent / "hf"))
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory, data_dir) -> Path:
    """A cache built by `exgrpo hf-cache build` against the committed pins and locks (in a process of its own:
    huggingface_hub reads HF_HUB_OFFLINE at import)."""
    hf = tmp_path_factory.mktemp("hf")
    done = _exgrpo(
        "hf-cache", "build", "--out", str(hf), "--data", str(data_dir), "--seed", "0", env=_offline_env(hf)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return hf


def test_commit_is_gits_own_hash_of_the_files(tmp_path):
    """The commit hash equals the one git computes for the same tree (LFS files as their pointers), author and date."""
    files = layout.repo_files(MODELS / H32)
    files["sub/dir/a.txt"] = b"nested\n"  # a folder, to check the tree's entry order and modes
    repo = tmp_path / "git"
    for rel, body in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(layout.lfs_pointer(body) if layout.is_lfs(rel) else body)
    name, email = "exgrpo hf-cache", "hf-cache@exgrpo.invalid"
    env = {**os.environ, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name}
    env.update(GIT_COMMITTER_EMAIL=email, GIT_AUTHOR_DATE="@0 +0000", GIT_COMMITTER_DATE="@0 +0000")
    git = ["git", "-c", "commit.gpgsign=false", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run([*git, "add", "-A"], check=True, env=env)
    message = layout.MESSAGE.format(repo_id="exgrpo-tiny/x")
    subprocess.run([*git, "commit", "-q", "--cleanup=verbatim", "-m", message], check=True, env=env)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True)
    assert layout.commit_id("exgrpo-tiny/x", files) == head.stdout.strip()


def test_registered_revisions_are_the_commits_of_the_shipped_files():
    """Each tiny backbone's registry revision is the commit its shipped folder publishes (a stale pin fails here)."""
    backbones = load_backbones()
    repos = tiny.model_repos(backbones, MODELS)
    assert H32 in repos and "tiny-llama-h32" in repos
    for name, folder in repos.items():
        assert backbones[name]["hf_id"] == f"exgrpo-tiny/{name}"
        assert backbones[name]["revision"] == layout.commit_id(
            backbones[name]["hf_id"], layout.repo_files(folder)
        )


def test_the_tiny_reward_model_is_published_at_its_pin(cache):
    """tiny-rm-h32 (config/backbones.yaml `reward_models`, read by repo id by a verl CPU run with a served reward
    model) is in the cache at the commit its registry revision pins, which is the commit of its shipped files."""
    from exgrpo.settings.backbones import load_reward_models

    entry = load_reward_models(ROOT / "config" / "backbones.yaml")["tiny-rm-h32"]
    assert entry["revision"] == layout.commit_id(entry["hf_id"], layout.repo_files(MODELS / "tiny-rm-h32"))
    manifest = json.loads((cache / "tiny" / "s0.json").read_text())
    (repo,) = [r for r in manifest["repos"] if r["name"] == "tiny-rm-h32"]
    assert (repo["repo_id"], repo["commit"]) == (entry["hf_id"], entry["revision"])
    assert (cache / "hub" / "models--exgrpo-tiny--tiny-rm-h32" / "snapshots" / entry["revision"]).is_dir()


def test_hub_clients_read_the_cache_offline(cache, data_dir):
    """huggingface_hub scans it without complaint; transformers loads tokenizer (with the shipped chat template),
    config and weights by repo id at the pinned commit and at `main`, with HF_HUB_OFFLINE=1; the data repo
    resolves by repo id and its splits are make-data's bytes."""
    revision = load_backbones()[H32]["revision"]
    data_rev = json.loads((LOCKS / "tiny-task-s0.json").read_text())["revision"]
    probe = f"""
import json, sys
from huggingface_hub import scan_cache_dir, snapshot_download
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
info = scan_cache_dir()
repos = {{r.repo_id: (r.repo_type, sorted(r.refs), [x.commit_hash for x in r.revisions]) for r in info.repos}}
conv = [{{"role": "user", "content": "2*8-8"}}]
out = {{"warnings": [str(w) for w in info.warnings], "repos": repos}}
for rev in ("{revision}", "main"):
    tok = AutoTokenizer.from_pretrained("exgrpo-tiny/{H32}", revision=rev)
    out[rev] = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
model = AutoModelForCausalLM.from_pretrained("exgrpo-tiny/{H32}", revision="{revision}")
out["params"] = float(sum(p.detach().double().sum() for p in model.parameters()))
out["config"] = AutoConfig.from_pretrained("exgrpo-tiny/{H32}", revision="{revision}").to_dict()["num_attention_heads"]
out["data"] = snapshot_download("exgrpo-tiny/tiny-task-s0", repo_type="dataset", revision="{data_rev}")
json.dump(out, sys.stdout)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_offline_env(cache)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["warnings"] == []
    assert got["repos"][f"exgrpo-tiny/{H32}"] == ["model", ["main"], [revision]]
    assert got["repos"]["exgrpo-tiny/tiny-task-s0"] == ["dataset", ["main"], [data_rev]]

    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = AutoTokenizer.from_pretrained(MODELS / H32)
    want = local.apply_chat_template(
        [{"role": "user", "content": "2*8-8"}], add_generation_prompt=True, tokenize=False
    )
    assert want.startswith("<|bos|><|user|>2*8-8") and got[revision] == got["main"] == want
    model = AutoModelForCausalLM.from_pretrained(MODELS / H32)
    assert got["params"] == float(sum(p.detach().double().sum() for p in model.parameters()))
    assert got["config"] == 2
    snapshot = Path(got["data"])
    for split in ("train", "validation", "test", "ood_words"):
        assert (snapshot / f"{split}.jsonl").read_bytes() == (data_dir / f"{split}.jsonl").read_bytes()
    reduced = json.loads((snapshot / "manifest.json").read_text())
    assert (
        "provenance" not in reduced
        and reduced["splits"] == json.loads((data_dir / "manifest.json").read_text())["splits"]
    )


def test_path_resolves_by_repo_id_and_refuses_an_unknown_revision(cache):
    revision = load_backbones()[H32]["revision"]
    done = _exgrpo("hf-cache", "path", f"exgrpo-tiny/{H32}", "--revision", revision, env=_offline_env(cache))
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder == cache / "hub" / f"models--exgrpo-tiny--{H32}" / "snapshots" / revision
    assert (folder / "model.safetensors").is_symlink() and (folder / "chat_template.jinja").is_file()
    other = "0" * 40
    done = _exgrpo("hf-cache", "path", f"exgrpo-tiny/{H32}", "--revision", other, env=_offline_env(cache))
    assert done.returncode == 2 and f"exgrpo-tiny/{H32}@{other}" in done.stderr


def test_build_refuses_without_offline_mode(tmp_path):
    env = _offline_env(tmp_path)
    env.pop("HF_HUB_OFFLINE")
    done = _exgrpo("hf-cache", "build", "--out", str(tmp_path / "hf"), env=env)
    assert done.returncode != 0 and "HF_HUB_OFFLINE" in done.stderr


# ---------------------------------------------------------------- the paper route's download against the cache
@pytest.fixture
def offline_hub(monkeypatch, cache, tmp_path):
    """A copy of the cache, huggingface_hub in offline mode (its flag is read at import), and no backoff sleeps."""
    from huggingface_hub import constants

    hf = tmp_path / "hf"
    shutil.copytree(cache, hf, symlinks=True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    sleeps: list[float] = []
    monkeypatch.setattr(retries, "_sleep", sleeps.append)
    return hf, sleeps


def _download_h32(hf: Path, lock: Path):
    revision = load_backbones()[H32]["revision"]
    return D.download_model(hf, f"exgrpo-tiny/{H32}", H32, revision, lock)


def test_download_checks_the_lock_and_refuses_a_changed_file_by_name(offline_hub, tmp_path):
    hf, _ = offline_hub
    lock = tmp_path / "lock.json"
    shutil.copy(LOCKS / f"{H32}.json", lock)
    manifest = _download_h32(hf, lock)  # the committed lock: passes
    assert (
        manifest["commit"] == load_backbones()[H32]["revision"]
        and "chat_template.jinja" in manifest["sha256"]
    )
    blob = (
        Path(manifest["path"]) if Path(manifest["path"]).is_absolute() else hf / manifest["path"]
    ) / "tokenizer.json"
    target = blob.resolve()
    target.write_bytes(target.read_bytes().replace(b'"<|end|>"', b'"<|END|>"', 1))
    with pytest.raises(D.ChecksumError, match=r"tokenizer\.json has sha256"):
        _download_h32(hf, lock)


def test_download_retries_transient_failures_then_reads_the_cache(offline_hub, monkeypatch, tmp_path):
    """Two dropped connections, then the real offline fetch: two backoff waits (2 s, 4 s), the cached snapshot."""
    hf, sleeps = offline_hub
    real, calls = D.fetch_model, []

    def flaky(hf_id, out, revision):
        calls.append(revision)
        if len(calls) <= 2:
            raise ConnectionResetError("connection reset by peer")
        return real(hf_id, out, revision)

    monkeypatch.setattr(D, "fetch_model", flaky)
    manifest = _download_h32(hf, tmp_path / "new-lock.json")
    assert len(calls) == 3 and sleeps == [retries.BACKOFF_S, 2 * retries.BACKOFF_S]
    assert json.loads((tmp_path / "new-lock.json").read_text())["files"] == manifest["sha256"]


def test_download_of_a_revision_the_cache_lacks_is_an_error_without_retries(offline_hub, tmp_path):
    """Offline, a missing snapshot cannot appear by waiting: one attempt, a DownloadError naming the model."""
    hf, sleeps = offline_hub
    with pytest.raises(D.DownloadError, match=rf"exgrpo-tiny/{H32}: not in the local cache"):
        D.download_model(hf, f"exgrpo-tiny/{H32}", H32, "1" * 40, tmp_path / "lock.json")
    assert sleeps == []


def test_build_refuses_a_stale_pin_naming_the_field(offline_hub, tmp_path, data_dir):
    hf, _ = offline_hub
    backbones = load_backbones()
    backbones = {H32: {**backbones[H32], "revision": "2" * 40}}
    with pytest.raises(ConfigError, match=rf"backbones\.{H32}\.revision"):
        tiny.build(hf, backbones=backbones, models_dir=MODELS, data_dir=None, data_seed=None, lock_dir=LOCKS)


def test_build_refuses_changed_data_naming_the_file(offline_hub, tmp_path, data_dir):
    hf, _ = offline_hub
    changed = tmp_path / "s0"
    shutil.copytree(data_dir, changed)
    lines = (changed / "test.jsonl").read_text().splitlines(keepends=True)
    (changed / "test.jsonl").write_text("".join(lines[1:]))  # a row dropped
    with pytest.raises(D.ChecksumError, match=r"test\.jsonl has sha256"):
        tiny.build(hf, backbones={}, models_dir=MODELS, data_dir=changed, data_seed=0, lock_dir=LOCKS)
