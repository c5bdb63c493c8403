"""Table 2's CPU inputs in the tiny hub cache (exgrpo.hub.tiny_chat, `exgrpo hf-cache build --chat-if`): the tiny
reward model as a model repo at its registry revision, the tiny prompts and benchmark rows as dataset repos at their
locks' commits, read back offline by the readers the jobs use (the paper route's prompt converter, the IFEval and
IFBench row loaders, Arena-Hard's folder loader, `datasets` through the dataset cards)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exgrpo.hub import layout, tiny, tiny_chat
from exgrpo.settings.backbones import load_reward_models
from tests.hub.test_hf_cache import LOCKS, MODELS, ROOT, _exgrpo, _offline_env

CHAT = MODELS / "chat_if"
RM = "tiny-rm-h32"


def _lock(name: str) -> dict:
    return json.loads((LOCKS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def chat_cache(tmp_path_factory) -> tuple[Path, dict]:
    """A cache built by `exgrpo hf-cache build --chat-if` against the committed pins and locks, and its manifest."""
    hf = tmp_path_factory.mktemp("hf")
    manifest = hf / "m.json"
    argv = ("hf-cache", "build", "--out", str(hf), "--chat-if", str(CHAT), "--manifest", str(manifest))
    done = _exgrpo(*argv, env=_offline_env(hf))
    assert done.returncode == 0, done.stdout + done.stderr
    return hf, json.loads(manifest.read_text())


def test_the_tiny_reward_model_is_pinned_to_the_commit_of_its_shipped_folder():
    entry = load_reward_models(ROOT / "config/backbones.yaml")[RM]
    assert entry["revision"] == layout.commit_id(entry["hf_id"], layout.repo_files(ROOT / entry["shipped"]))


def test_the_build_publishes_the_reward_model_and_both_dataset_repos_at_their_pins(chat_cache):
    _, manifest = chat_cache
    repos = {r["repo_id"]: r for r in manifest["repos"]}
    entry = load_reward_models(ROOT / "config/backbones.yaml")[RM]
    assert (
        repos[entry["hf_id"]]["commit"] == entry["revision"] and repos[entry["hf_id"]]["repo_type"] == "model"
    )
    for repo in tiny_chat.CHAT_REPOS:
        assert repos[repo.repo_id]["repo_type"] == "dataset"
        assert repos[repo.repo_id]["commit"] == _lock(repo.lock_name)["revision"]
    assert not any("tiny-task" in r for r in repos)  # no task data without --data


def _snapshot(hf: Path, repo: tiny_chat.ChatRepo) -> Path:
    name = "datasets--" + repo.repo_id.replace("/", "--")
    return hf / "hub" / name / "snapshots" / _lock(repo.lock_name)["revision"]


def test_the_prompts_convert_from_the_snapshot_as_the_hub_split_does(chat_cache, tmp_path):
    hf, _ = chat_cache
    src = _snapshot(hf, tiny_chat.PROMPTS_REPO) / tiny_chat.PROMPTS_FILE
    assert src.read_bytes() == (CHAT / tiny_chat.PROMPTS_FILE).read_bytes()
    out = tmp_path / "prompts.parquet"
    done = _exgrpo("chat-prompts", "--in", str(src), "--out", str(out), env=_offline_env(hf))
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pylist()
    shipped = [json.loads(line) for line in (CHAT / tiny_chat.PROMPTS_FILE).read_text().splitlines()]
    assert len(rows) == len({r["prompt"] for r in shipped}) == 32  # models/tiny/chat_if/README.md: 32 prompts
    assert {r["qid"] for r in rows} == {f"wildchat_if-{r['id']}" for r in shipped}


def test_the_benchmark_rows_load_from_the_eval_snapshot(chat_cache):
    from exgrpo.eval import ifbench_scorer, ifeval_scorer
    from exgrpo.eval.arena_hard import load_benchmark
    from exgrpo.eval.if_scoring import load_rows

    hf, _ = chat_cache
    folder = _snapshot(hf, tiny_chat.EVAL_REPO)
    assert len(load_rows(folder / "ifeval.jsonl", ifeval_scorer.known_instructions())) == 8
    assert len(load_rows(folder / "ifbench.jsonl", ifbench_scorer.known_instructions())) == 8
    questions, baselines = load_benchmark(folder)  # `exgrpo eval --data <snapshot>` for arenahard_v2
    assert len(questions) == 4 and {q.category for q in questions} == set(baselines)
    assert all(q.uid in baselines[q.category] for q in questions)


def test_the_dataset_card_lets_datasets_read_each_set_offline(chat_cache):
    hf, _ = chat_cache
    folder = _snapshot(hf, tiny_chat.EVAL_REPO)
    probe = (
        "import sys, datasets\n"
        "print(len(datasets.load_dataset(sys.argv[1], 'ifeval', split='train', cache_dir=sys.argv[2])),"
        " len(datasets.load_dataset(sys.argv[1], 'arenahard_v2', split='test', cache_dir=sys.argv[2])))"
    )
    cmd = [sys.executable, "-c", probe, str(folder), str(hf / "datasets")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_offline_env(hf), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8", "4"]


def test_a_changed_shipped_row_is_refused_naming_the_file(chat_cache, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from exgrpo.hub.locks import ChecksumError

    hf, _ = chat_cache
    copy = tmp_path / "hf"
    shutil.copytree(hf, copy, symlinks=True)
    changed = tmp_path / "chat_if"
    shutil.copytree(CHAT, changed)
    lines = (changed / "eval/ifeval.jsonl").read_text().splitlines(keepends=True)
    (changed / "eval/ifeval.jsonl").write_text("".join(lines[1:]))  # a row dropped
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ChecksumError, match=r"ifeval\.jsonl has sha256"):
        tiny.build(
            copy,
            backbones={},
            models_dir=MODELS,
            data_dir=None,
            data_seed=None,
            lock_dir=LOCKS,
            chat_dir=changed,
        )
