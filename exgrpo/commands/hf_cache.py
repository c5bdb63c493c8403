"""`exgrpo hf-cache`: the tiny study's models and data as hub repos in a local hub cache, read offline.

    HF_HUB_OFFLINE=1 exgrpo hf-cache build --out work/hf --data work/paper-cpu/data/s0 --seed 0
    HF_HOME=work/hf HF_HUB_OFFLINE=1 exgrpo hf-cache path exgrpo-tiny/tiny-math-h32 --revision COMMIT

`build` publishes the shipped tiny backbones and reward models (config/backbones.yaml `hf_id`, `revision`), the task
data of one seed and, with `--chat-if`, Table 2's tiny chat files (exgrpo.hub.tiny_chat) into `<out>/hub` in the
hub's format, then checks each by `exgrpo download`'s own code offline: pins, locks
(config/locks/<name>.json), retries and errors (exgrpo.hub.tiny). `path` prints the snapshot folder of a repo
at a revision as huggingface_hub resolves it from the cache alone (for shell jobs, like `collect model-dir`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Publish the tiny models and data as hub repos in a local HF cache (build) and resolve them offline (path)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser(
        "build", help="publish models/tiny/* and a make-data folder into OUT/hub, check them"
    )
    build.add_argument(
        "--out", required=True, type=Path, help="cache folder (HF_HOME of the jobs that read it)"
    )
    build.add_argument(
        "--data", type=Path, default=None, help="`exgrpo make-data` folder to publish (optional)"
    )
    build.add_argument("--seed", type=int, default=None, help="the data seed of --data")
    build.add_argument(
        "--backbones", type=Path, default=None, help="backbone registry (default config/backbones.yaml)"
    )
    build.add_argument("--models-dir", type=Path, default=Path("models/tiny"), help="shipped tiny models")
    build.add_argument(
        "--lock-dir", type=Path, default=Path("config/locks"), help="locks of the repos' files"
    )
    build.add_argument(
        "--chat-if",
        type=Path,
        default=None,
        help="Table 2's shipped tiny chat folder (models/tiny/chat_if) to publish (optional)",
    )
    build.add_argument(
        "--pin", action="store_true", help="record a data repo's commit in its lock when unpinned"
    )
    build.add_argument(
        "--manifest", type=Path, default=None, help="manifest to write (default OUT/tiny/s<seed>.json)"
    )
    path = sub.add_parser("path", help="print a cached repo's snapshot folder (offline)")
    path.add_argument("repo_id", help="org/name")
    path.add_argument("--revision", required=True, help="commit (40 hex digits) or a ref such as main")
    path.add_argument("--repo-type", choices=("model", "dataset"), default="model")


def run(args: argparse.Namespace) -> int:
    from exgrpo.hub import tiny
    from exgrpo.hub.locks import DownloadError

    if args.action == "path":
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            print(tiny.snapshot_path(args.repo_id, args.revision, args.repo_type))
        except LocalEntryNotFoundError as err:
            print(f"exgrpo hf-cache path: error: {args.repo_id}@{args.revision}: {err}", file=sys.stderr)
            return 2
        return 0
    from exgrpo.settings.backbones import DEFAULT_BACKBONES, load_reward_models
    from exgrpo.testbed.models import load_backbones

    try:
        manifest = tiny.build(
            args.out,
            backbones=load_backbones(args.backbones),
            reward_models=load_reward_models(args.backbones or DEFAULT_BACKBONES),
            chat_dir=args.chat_if,
            models_dir=args.models_dir,
            data_dir=args.data,
            data_seed=args.seed,
            lock_dir=args.lock_dir,
            pin=args.pin,
            manifest_path=args.manifest,
        )
    except DownloadError as err:
        print(f"exgrpo hf-cache build: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    for repo in manifest["repos"]:
        print(f"{repo['repo_type']} {repo['repo_id']} @ {repo['commit']}")
    return 0
