"""The tiny reward model: a sequence-classification head (one scalar) on a shipped head-size-32 base (paper §5.3's
Skywork-Reward-Llama-3.1-8B-v0.2 at testbed size, for a CPU analogue of Table 2's reward-model runs).

`build_reward_model(base, out, seed)` loads the base folder (models/tiny/tiny-math-h32, Qwen2; or tiny-llama-h32,
Llama) with `AutoModelForSequenceClassification(num_labels=1)`: the transformer body keeps the base's trained
weights and the `score` head (hidden -> 1, no bias) is initialised under `torch.manual_seed(seed)`, so the same
base and seed give the same bytes. Why the base's body and not a fresh one: the RM then reads the tokens through
representations the policy shares, as Skywork's RM is a Llama-3.1 body with a scalar head; why no training: the
CPU analogue checks the route (served, scored per response, bucketed by the reward std), not a reward's quality.

The folder holds config.json (`architectures: [Qwen2ForSequenceClassification]`, `num_labels` 1, the base's
`pad_token_id` so batched scoring finds each sequence's last token), model.safetensors, the base's tokenizer and
chat template, and build.json (base, its weights' sha256, seed, our sha256). `python -m
exgrpo.testbed.reward_model OUT` rebuilds it; tests/testbed/test_reward_model.py checks the shipped one is that.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from exgrpo.records.io import file_sha256

DEFAULT_BASE = Path("models/tiny/tiny-math-h32")
DEFAULT_OUT = Path("models/tiny/tiny-rm-h32")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def build_reward_model(base: str | Path = DEFAULT_BASE, out: str | Path = DEFAULT_OUT, seed: int = 0) -> dict:
    """Write the reward-model folder `out` from the base folder `base`; returns its build record."""
    import torch
    from transformers import AutoModelForSequenceClassification

    base, out = Path(base), Path(out)
    if not (base / "model.safetensors").exists():
        raise FileNotFoundError(f"{base}: no model.safetensors (a shipped tiny base folder)")
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=torch.float32)
    if model.config.pad_token_id is None:
        raise ValueError(f"{base / 'config.json'}: pad_token_id is null (batched scoring needs it)")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (base / name).exists():
            shutil.copyfile(base / name, out / name)
    record = {
        "base": base.name,
        "base_weights_sha256": file_sha256(base / "model.safetensors"),
        "seed": seed,
        "architectures": list(model.config.architectures or []),
        "weights_sha256": file_sha256(out / "model.safetensors"),
    }
    (out / "build.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def score_texts(folder: str | Path, texts: list[str]) -> list[float]:
    """The scalar reward of each text (one batch, padded on the right as the tokenizer pads)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model: Any = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    return [float(v) for v in logits[:, 0]]


if __name__ == "__main__":  # python -m exgrpo.testbed.reward_model [OUT [BASE]]
    args = sys.argv[1:]
    print(
        build_reward_model(Path(args[1]) if len(args) > 1 else DEFAULT_BASE, args[0] if args else DEFAULT_OUT)
    )
