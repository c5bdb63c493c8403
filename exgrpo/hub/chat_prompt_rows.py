"""Table 2's chat prompts (paper §5.3) as verl's prompt parquet: `exgrpo chat-prompts`, rule `chat_prompts`.

The hub split `allenai/tulu-3-wildchat-if-on-policy-8b` (exgrpo.hub.sources `wildchat_if`) is a preference set
in its own columns, read from its dataset card: `id` (string), `prompt` (string: the user's request with its
instruction constraints written into the text), `chosen` and `rejected` (lists of `{role, content}`: the
conversation ending in an assistant reply). verl 0.9.1 reads none of these. It reads `prompt` as a list of
messages and applies the backbone's chat template to it itself (the agent loop calls
`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`; `exgrpo retemplate`'s docstring), so this
module keeps messages as messages and writes no template: the same file serves every backbone.

One verl row per hub row:
- `prompt`: the conversation up to the reply, i.e. `chosen` without its final assistant turn (a multi-turn
  WildChat row keeps its earlier turns), or, for a row without `chosen`, one user message holding `prompt`;
- `qid`: `wildchat_if-<id>`, from the row's own id, so it does not move when the file is reordered or cut
  (the plug-in keys the replay buffer by it, exgrpo.verl_plugin.batch); a row without `id` gets
  `wildchat_if-sha<12 hex of the prompt messages' JSON>`;
- `data_source` `wildchat_if`, `ability` `chat_if`, `reward_model` `{style: model, ground_truth: ""}`: the score
  is the served reward model's (reward_serving), there is no reference answer;
- `extra_info`: `{index: qid, hub_id, constraints}`. The hub split carries its constraints only inside the prompt
  text; a source that has a separate `constraints` column (RLVR-IF style: a JSON/string description of the
  IFEval checks) has it kept verbatim here for IFEval-style checks, else it is "".

Duplicates: two rows with the same id are refused (they would be one question twice in the buffer). Two rows
with different ids but the same prompt messages keep only the smallest qid (order-independent), because a
repeated prompt would be sampled twice as often as the paper's prompt set intends; the count is recorded.
Bad rows (no usable prompt, a message without role/content) are refused naming the file, row and field, before
anything is written. Provenance goes into the parquet footer under `exgrpo`, as `exgrpo retemplate` does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

DATA_SOURCE = "wildchat_if"
ABILITY = "chat_if"
META_KEY = b"exgrpo"
HUB_COLUMNS = ("id", "prompt", "chosen", "rejected")
"""The hub split's columns (dataset card of allenai/tulu-3-wildchat-if-on-policy-8b)."""


class ChatPromptsError(ValueError):
    """A hub row that cannot become a verl prompt row; the message names the file, row and field."""


def read_hub_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a hub-column file: parquet (what `exgrpo download` exports) or JSON lines (shipped samples)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: input file not found")
    if path.suffix == ".jsonl":
        rows = []
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ChatPromptsError(f"{path}: line {line_no}: not JSON ({err})") from None
        return rows
    import pyarrow.parquet as pq

    return list(pq.read_table(path).to_pylist())


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    """`value` as a list of {role, content} strings, or an error naming `where`."""
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ChatPromptsError(f"{where}: expected a non-empty list of messages")
    out = []
    for i, msg in enumerate(value):
        if not isinstance(msg, Mapping):
            raise ChatPromptsError(f"{where}[{i}]: not a message")
        role, content = msg.get("role"), msg.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ChatPromptsError(f"{where}[{i}]: role and content must be strings")
        out.append({"content": content, "role": role})
    return out


def prompt_messages(row: Mapping[str, Any], where: str) -> list[dict[str, str]]:
    """The messages the policy answers: `chosen` less its final assistant turn, else `prompt` as one user turn."""
    chosen = row.get("chosen")
    if chosen is not None:
        msgs = _messages(chosen, f"{where}: field 'chosen'")
        if msgs[-1]["role"] == "assistant":
            msgs = msgs[:-1]
        if not msgs or msgs[-1]["role"] != "user" or not msgs[-1]["content"].strip():
            raise ChatPromptsError(f"{where}: field 'chosen' has no user turn before its reply")
        return msgs
    text = row.get("prompt")
    if not isinstance(text, str) or not text.strip():
        raise ChatPromptsError(f"{where}: field 'prompt' is empty or not a string (and no 'chosen')")
    return [{"content": text, "role": "user"}]


def row_qid(row: Mapping[str, Any], messages: list[dict[str, str]], where: str) -> str:
    """The stable question id: from the row's `id`, else a hash of its prompt messages (never the position)."""
    hub_id = row.get("id")
    if hub_id is None:
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        return f"{DATA_SOURCE}-sha{digest[:12]}"
    if not isinstance(hub_id, (str, int)) or str(hub_id).strip() == "":
        raise ChatPromptsError(f"{where}: field 'id' is empty or not a string")
    return f"{DATA_SOURCE}-{hub_id}"


def verl_rows(rows: Iterable[Mapping[str, Any]], source: str) -> tuple[list[dict[str, Any]], int]:
    """verl prompt rows of the hub rows (input order, repeated prompts dropped); returns (rows, dropped)."""
    out: list[dict[str, Any]] = []
    seen_ids: dict[str, int] = {}
    for n, row in enumerate(rows):
        where = f"{source}: row {n}"
        if not isinstance(row, Mapping):
            raise ChatPromptsError(f"{where}: not a record")
        messages = prompt_messages(row, where)
        qid = row_qid(row, messages, where)
        if qid in seen_ids:
            raise ChatPromptsError(f"{where}: field 'id' {qid!r} repeats row {seen_ids[qid]}")
        seen_ids[qid] = n
        constraints = row.get("constraints")
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": messages,
                "ability": ABILITY,
                "reward_model": {"style": "model", "ground_truth": ""},
                "extra_info": {
                    "index": qid,
                    "hub_id": "" if row.get("id") is None else str(row["id"]),
                    "constraints": "" if constraints is None else _text(constraints),
                },
                "qid": qid,
            }
        )
    keep: dict[str, str] = {}  # prompt JSON -> smallest qid: the same survivor whatever the order
    for r in out:
        key = json.dumps(r["prompt"], sort_keys=True)
        keep[key] = min(keep.get(key, r["qid"]), r["qid"])
    kept = [r for r in out if keep[json.dumps(r["prompt"], sort_keys=True)] == r["qid"]]
    return kept, len(out) - len(kept)


def _text(value: Any) -> str:
    """A constraints field as text: strings as they are, structures as sorted JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def convert(src: str | Path, out: str | Path, limit: int | None = None) -> dict[str, Any]:
    """Write verl's prompt parquet of the hub file `src` to `out` (atomically); returns the provenance."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.records.io import atomic_path, file_sha256
    from exgrpo.records.provenance import provenance

    src, out = Path(src), Path(out)
    rows, dropped = verl_rows(read_hub_rows(src), str(src))
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise ChatPromptsError(f"{src}: no rows to convert")
    meta = {
        "source": str(src.resolve()),
        "source_sha256": file_sha256(src),
        "rows": len(rows),
        "dropped_repeated_prompts": dropped,
        "limit": limit,
        "provenance": provenance(config={"data_source": DATA_SOURCE, "limit": limit}),
    }
    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True, default=str).encode()})
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp)
    return meta
