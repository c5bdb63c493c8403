"""Table 2's inputs on CPU as hub repos in the tiny hub cache (study paper_continuous_cpu, `data: chat_if`).

The paper route reads its Table 2 inputs from the hub: the WildChat-IF prompts (a dataset repo in the hub's
columns `id`, `prompt`, `chosen`, `rejected`; rule download_chat_if, then rule chat_prompts), the reward model (a
model repo; rule download_reward_model) and the benchmark rows. On CPU the same shapes come from the project's own
tiny files (`models/tiny/chat_if`, `CHAT_DIR`), published by `exgrpo.hub.tiny.build` (rule hf_cache_tiny):

- `PROMPTS_REPO` (`exgrpo-tiny/wildchat-if-tiny`): `wildchat_if_tiny.jsonl`, the 32 tiny prompts in the hub
  split's own columns, so rule chat_prompts' converter (`exgrpo chat-prompts`) reads them as it reads the hub's;
- `EVAL_REPO` (`exgrpo-tiny/chat-if-eval-tiny`): the tiny benchmark rows, one folder that `exgrpo eval --data`
  reads for all three of Table 2's benchmarks in one call (the workflow's rule names them together): the
  IFEval and IFBench rows in their hub columns (`key`, `prompt`, `instruction_id_list`, `kwargs`) as
  `ifeval.jsonl` and `ifbench.jsonl`, and Arena-Hard v2.0's layout (`question.jsonl`,
  `model_answer/<baseline>.jsonl`, exgrpo.eval.arena_hard.load_benchmark) at the top. One repo, not three as on
  the hub, because the evaluation takes one data folder (a departure of the CPU route only);
- the tiny reward model (config/backbones.yaml `reward_models` with `scale: tiny` and a `shipped` folder) as the
  model repo of its `hf_id`, pinned by its registry `revision` like a tiny backbone.

Each dataset repo is pinned by its lock, config/locks/<lock name>.json (`--pin` records a first one), and is read
back through the paper route's dataset snapshot and lock check, offline, as the task data is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.hub.layout import dataset_card

CHAT_DIR = Path("models/tiny/chat_if")
"""The shipped tiny chat files (models/tiny/chat_if/README.md says what each is)."""
ORG = "exgrpo-tiny"


@dataclass(frozen=True)
class ChatRepo:
    """One dataset repo of Table 2's tiny inputs: its id, lock name, and split -> file (inside `CHAT_DIR`)."""

    repo_id: str
    lock_name: str
    configs: Mapping[str, Mapping[str, str]]
    """Dataset-card config -> {split: file}: what `datasets.load_dataset(<snapshot>, config)` reads."""
    extra_files: tuple[str, ...] = ()
    """Files of the repo outside any config (Arena-Hard's baseline answers)."""

    def files(self) -> list[str]:
        listed = [f for config in self.configs.values() for f in config.values()]
        return sorted({*listed, *self.extra_files})


PROMPTS_REPO = ChatRepo(
    f"{ORG}/wildchat-if-tiny", "wildchat-if-tiny", {"default": {"train": "wildchat_if_tiny.jsonl"}}
)
EVAL_REPO = ChatRepo(
    f"{ORG}/chat-if-eval-tiny",
    "chat-if-eval-tiny",
    {
        "ifeval": {"train": "eval/ifeval.jsonl"},
        "ifbench": {"train": "eval/ifbench.jsonl"},
        "arenahard_v2": {"test": "eval/question.jsonl"},
    },
    extra_files=(
        "eval/model_answer/gemini-2.0-flash-001.jsonl",
        "eval/model_answer/o3-mini-2025-01-31.jsonl",
    ),
)
CHAT_REPOS = (PROMPTS_REPO, EVAL_REPO)
PROMPTS_FILE = "wildchat_if_tiny.jsonl"
"""The prompts' file inside PROMPTS_REPO's snapshot (rule chat_prompts' `--in`)."""


def _in_repo(file: str) -> str:
    """Where a `CHAT_DIR` file sits in its repo: the eval sets at the top (the folder `exgrpo eval --data` reads)."""
    return file.removeprefix("eval/")


def repo_files(repo: ChatRepo, chat_dir: Path) -> dict[str, bytes]:
    """The files of `repo` from the shipped folder, with its dataset card; a missing file is an error naming it."""
    out: dict[str, bytes] = {}
    for file in repo.files():
        path = Path(chat_dir) / file
        if not path.is_file():
            raise ConfigError("--chat-if", f"{path}: a file of {repo.repo_id} is missing")
        out[_in_repo(file)] = path.read_bytes()
    out["README.md"] = dataset_card(
        repo.repo_id,
        {
            name: {split: _in_repo(file) for split, file in splits.items()}
            for name, splits in repo.configs.items()
        },
        "The project's tiny Table 2 files (models/tiny/chat_if).",
    ).encode()
    return out


def tiny_reward_models(
    reward_models: Mapping[str, Mapping[str, Any]], root: Path = Path(".")
) -> dict[str, Path]:
    """name -> shipped folder (`shipped`, relative to the repository `root`) of each `scale: tiny` reward model
    whose folder holds a model."""
    return {
        name: Path(root) / entry["shipped"]
        for name, entry in reward_models.items()
        if entry.get("scale") == "tiny"
        and entry.get("shipped")
        and (Path(root) / entry["shipped"] / "config.json").is_file()
    }


__all__ = [
    "CHAT_DIR",
    "CHAT_REPOS",
    "EVAL_REPO",
    "PROMPTS_FILE",
    "PROMPTS_REPO",
    "ChatRepo",
    "repo_files",
    "tiny_reward_models",
]
