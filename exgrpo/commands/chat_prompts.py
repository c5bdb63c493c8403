"""`exgrpo chat-prompts`: Table 2's WildChat-IF rows (hub columns) as verl's prompt parquet (paper §5.3).

    exgrpo chat-prompts --in CHAT_IF/files/wildchat_if.parquet --out CHAT_IF/files/wildchat_if.verl.parquet

The library code is `exgrpo.hub.chat_prompt_rows` (columns, qid, duplicates and refusals are described there).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Convert WildChat-IF rows (hub columns: id, prompt, chosen, rejected) into verl's prompt parquet."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--in", dest="src", required=True, type=Path, help="hub-column parquet or .jsonl (exgrpo download)"
    )
    parser.add_argument("--out", required=True, type=Path, help="verl prompt parquet to write")
    parser.add_argument(
        "--limit", type=int, default=None, help="keep the first N converted rows (default: all)"
    )


def run(args: argparse.Namespace) -> int:
    from exgrpo.hub.chat_prompt_rows import ChatPromptsError, convert

    if args.limit is not None and args.limit < 1:
        print("exgrpo chat-prompts: error: --limit must be >= 1", file=sys.stderr)
        return 2
    try:
        meta = convert(args.src, args.out, args.limit)
    except (ChatPromptsError, FileNotFoundError) as err:
        print(f"exgrpo chat-prompts: error: {err}", file=sys.stderr)
        return 1
    print(
        f"{meta['rows']} prompt rows ({meta['dropped_repeated_prompts']} repeated prompts dropped) -> {args.out}"
    )
    return 0
