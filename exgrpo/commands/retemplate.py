"""`exgrpo retemplate`: a copy of a verl-schema parquet whose prompt column holds another prompt format.

Why: the paper trains Llama-3.1-8B base on a plain prompt, "User: {Question} Answer: Let's think step
by step.\\n" (paper §G.1). The downloaded training set
(`Elliott/Openr1-Math-46k-8192`) and the released validation file carry the LUFFY chat prompt instead: a
system instruction plus a user message holding the question. The workflow runs this command for
backbones with `template: llama_base` and trains them on the copy.

    exgrpo retemplate --in FILES/openr1_math_46k.parquet --out FILES/openr1_math_46k.llama_base.parquet

What the copy holds: the input's rows in order, every column, type and footer metadata unchanged except
the prompt column. Each prompt becomes ONE user message whose content is the plain prompt built by
`exgrpo.eval.benchmarks.format_question(question, "llama_base")`, the definition that `exgrpo eval
--prompt-format llama_base` also uses. The question is the row's last user message, stripped, which is
how evaluation reads released rows (`benchmark_documents.user_message`). The system message is dropped.

Why one user message and not a raw string: verl 0.9.1 has no raw-string prompt path. `RLHFDataset` passes
the prompt column on as `raw_prompt`, a list of messages. The agent loop always renders that list with
`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`. The model therefore sees exactly
the plain prompt (after the BOS token) only with a chat template that writes a lone message verbatim.
That template is `exgrpo.verl_plugin.hydra_config.PLAIN_CHAT_TEMPLATE`, which `exgrpo verl-config` sets
as `actor_rollout_ref.model.custom_chat_template` for `template: llama_base` backbones. Llama-3.1's own
template would wrap the prompt in header tokens and a dated system message. Validation rows go through
the same template, so the validation file is re-templated too.

Provenance is stored as JSON in the parquet footer under the key `exgrpo`, as
`exgrpo.prelim.trajectories` does. It records the source file with its sha256 and row count, the prompt
format with its template, and `exgrpo.records.provenance.provenance()`. The copy is written one row group at a
time, so memory stays bounded even though the training set carries R1 traces. It goes to a temporary
file that replaces --out atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = "Copy a verl training/validation parquet with its prompts rewritten to a plain prompt format (llama_base)."

FORMATS = ("llama_base",)
"""The prompt formats this command writes (`exgrpo.eval.benchmarks.PROMPT_FORMATS` other than `chat`)."""
META_KEY = b"exgrpo"
"""Footer metadata key of the provenance JSON (read back with exgrpo.prelim.trajectories.read_metadata)."""


class RetemplateError(ValueError):
    """The input does not have the verl prompt schema this command rewrites. The message names the file."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--in", dest="src", required=True, type=Path, help="verl-schema parquet (exgrpo download)"
    )
    parser.add_argument("--out", required=True, type=Path, help="re-templated copy to write")
    parser.add_argument(
        "--prompt-format",
        default="llama_base",
        choices=FORMATS,
        help="format_question() format of the new prompts (default llama_base, paper §G.1)",
    )
    parser.add_argument(
        "--prompt-key", default="prompt", help="prompt column (verl data.prompt_key, default prompt)"
    )


def plain_prompt(prompt: Any, prompt_format: str) -> str:
    """The text of one re-templated prompt: the row's question (last user message) in `prompt_format`."""
    from exgrpo.eval.benchmark_documents import user_message
    from exgrpo.eval.benchmarks import format_question

    return format_question(user_message(prompt).strip(), prompt_format)


def _message_type(field_type: Any) -> Any:
    """Arrow type of the new prompt column: the input's own when it is a list of {role, content}."""
    import pyarrow as pa

    if pa.types.is_list(field_type) or pa.types.is_large_list(field_type):
        item = field_type.value_type
        if pa.types.is_struct(item) and {"role", "content"} <= {
            item.field(i).name for i in range(item.num_fields)
        }:
            return field_type
    return pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))


def retemplate(
    src: str | Path, out: str | Path, prompt_format: str = "llama_base", prompt_key: str = "prompt"
) -> dict[str, Any]:
    """Write the re-templated copy of `src` to `out` (atomically); returns the provenance it records."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.eval.benchmarks import format_question
    from exgrpo.records.io import atomic_path, file_sha256
    from exgrpo.records.provenance import provenance

    src, out = Path(src), Path(out)
    if not src.exists():
        raise FileNotFoundError(f"{src}: input parquet not found")
    if src.resolve() == out.resolve():
        raise RetemplateError(f"{src}: --out must differ from --in")
    reader = pq.ParquetFile(src)
    schema = reader.schema_arrow
    if prompt_key not in schema.names:
        raise RetemplateError(f"{src}: no column {prompt_key!r} (columns: {', '.join(schema.names)})")
    index = schema.get_field_index(prompt_key)
    new_type = _message_type(schema.field(index).type)
    meta = {
        "source": str(src.resolve()),
        "source_sha256": file_sha256(src),
        "rows": reader.metadata.num_rows,
        "prompt_key": prompt_key,
        "prompt_format": prompt_format,
        "prompt_template": format_question("{Question}", prompt_format),
        "provenance": provenance(config={"prompt_format": prompt_format, "prompt_key": prompt_key}),
    }
    footer = dict(schema.metadata or {})
    if new_type != schema.field(index).type:
        footer.pop(b"huggingface", None)  # HF datasets' features would contradict the new column type
    footer[META_KEY] = json.dumps(meta, sort_keys=True, default=str).encode()
    out_schema = schema.set(index, schema.field(index).with_type(new_type)).with_metadata(footer)
    row = 0
    with atomic_path(out) as tmp, pq.ParquetWriter(tmp, out_schema) as writer:
        for group in range(reader.num_row_groups):
            table = reader.read_row_group(group)
            prompts = []
            for value in table.column(prompt_key).to_pylist():
                try:
                    prompts.append([{"content": plain_prompt(value, prompt_format), "role": "user"}])
                except (KeyError, TypeError, AttributeError) as err:
                    raise RetemplateError(
                        f"{src}: row {row}: column {prompt_key!r} holds no user message "
                        f"({type(err).__name__}: {err})"
                    ) from None
                row += 1
            table = table.set_column(
                index, schema.field(index).with_type(new_type), pa.array(prompts, new_type)
            )
            writer.write_table(table.replace_schema_metadata(out_schema.metadata))
    return meta


def run(args: argparse.Namespace) -> int:
    try:
        meta = retemplate(args.src, args.out, args.prompt_format, args.prompt_key)
    except RetemplateError as err:
        print(f"exgrpo retemplate: error: {err}", file=sys.stderr)
        return 1
    print(
        f"{meta['rows']} rows, prompts as {meta['prompt_format']} {meta['prompt_template']!r} -> {args.out}"
    )
    return 0
