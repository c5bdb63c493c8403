"""A self-contained CPU-mode run of the verl plug-in: a tiny random Qwen2, a toy task, a few ExGRPO steps.

`python -m exgrpo.verl_plugin.cpu.demo OUT_DIR [--steps N] [-- extra Hydra overrides]` writes, under OUT_DIR,
a tiny HF-format Qwen2 (`model/`, made locally with transformers: no download), toy train/validation parquet
files in verl's format (with a `qid` column), a toy reward rule and a CPU-mode run directory (`run/`, written
by `hydra_config` on top of config/exgrpo_cpu.yaml), then starts `python -m exgrpo.verl_plugin.main` on it:
verl's own TaskRunner, Ray, FSDP2 workers, TransferQueue and agent loop, with the plug-in's CPU rollout.

The test assets, stated up front:
- The tokenizer is byte-level and character-sized (printable ASCII, space, newline, and the ChatML tokens
  `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` as special tokens). A byte-level vocabulary is what makes it
  survive transformers' AutoTokenizer, which rebuilds any `model_type: qwen2` tokenizer as `Qwen2Tokenizer`
  (byte-level pre-tokenisation), and verl's Qwen chat-boundary code needs "\\n" to be one token.
- The reward is a toy rule (`TOY_REWARDS`): by default an even number of response characters is "correct",
  so a random model solves groups partially and replay happens from step 1 (delayed start off). A trained
  base answers in a fixed format whose length hardly varies (tiny-math-h32: 22 or 24 characters, nearly all
  "correct"), so its groups are rarely mixed; `reward="digest_parity"` grades a response by the parity of its
  text's sha256 instead, a coin flip per distinct response, so a group of differing samples is mixed with
  probability 1 - 2^(1-d) for d distinct texts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHARACTERS = (*[chr(c) for c in range(33, 127)], "Ġ", "Ċ")
"""Byte-level symbols of printable ASCII; 'Ġ' is the space byte and 'Ċ' the newline byte."""
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOY_REWARDS = {
    "even_length": '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Toy rule: an even number of response characters is 'correct' (a random model solves ~half)."""
    return {"score": float(len(solution_str) % 2 == 0)}
''',
    "digest_parity": '''
import hashlib


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Toy rule: a response whose text's sha256 starts with an even byte is 'correct' (a coin flip per text)."""
    return {"score": float(hashlib.sha256(solution_str.encode()).digest()[0] % 2 == 0)}
''',
}
"""The toy reward rules a demo run can grade with (`write_demo(reward=...)`; module docstring)."""
SMALL_OVERRIDES = (
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.max_model_len=96",
    "trainer.test_freq=-1",
    "trainer.logger=[console,file]",
)
"""Hydra overrides that shrink the demo to seconds per step (8 questions x K=4 rollouts)."""


def byte_tokenizer() -> Any:
    """A `PreTrainedTokenizerFast` over single byte-level characters (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(SPECIAL_TOKENS + CHARACTERS)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def write_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """A random 2-layer Qwen2 (hidden 64, vocab 128, tied embeddings) + the byte tokenizer, save_pretrained."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    tok = byte_tokenizer()
    tok.save_pretrained(path)
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


def write_toy_data(path: str | Path, n: int, start: int = 0) -> Path:
    """`n` toy questions in verl's RL parquet format, with a stable `qid` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": f"what is {i} ?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i},
            "qid": f"q{i}",
        }
        for i in range(start, start + n)
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_demo(
    root: str | Path,
    *,
    steps: int = 4,
    n_train: int = 64,
    n_val: int = 8,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    variant: str = "exgrpo",
    model: str | Path | None = None,
    rollout: str = "exgrpo_cpu",
    reward: str = "even_length",
) -> dict[str, Path]:
    """Model, data, reward and a CPU-mode run directory under `root`; returns their paths.

    `model`: an existing HF model folder to train (e.g. models/tiny/tiny-math-h32, which vLLM's CPU attention
    serves) instead of the random one written under `root`; `rollout`: a CPU-mode rollout of
    `exgrpo.verl_plugin.cpu.ROLLOUTS` (`vllm` needs the engine environment); `reward`: a rule of TOY_REWARDS."""
    from exgrpo.verl_plugin import hydra_config as hc
    from exgrpo.verl_plugin.cpu import ROLLOUTS

    if rollout not in ROLLOUTS:
        raise ValueError(f"rollout {rollout!r}: expected one of {sorted(ROLLOUTS)}")
    if reward not in TOY_REWARDS:
        raise ValueError(f"reward {reward!r}: expected one of {sorted(TOY_REWARDS)}")
    root = Path(root).resolve()
    paths = {
        "root": root,
        "model": Path(model).resolve() if model is not None else root / "model",
        "run": root / "run",
        "reward": root / "toy_reward.py",
        "train": root / "train.parquet",
        "val": root / "valid.parquet",
    }
    if model is None:
        write_tiny_model(paths["model"], seed=seed)
    write_toy_data(paths["train"], n_train)
    write_toy_data(paths["val"], n_val, start=n_train)
    paths["reward"].write_text(TOY_REWARDS[reward], encoding="utf-8")
    flat = _demo_overrides(paths, steps=steps, seed=seed, variant=variant, overrides=overrides)
    flat.update(ROLLOUTS[rollout])
    hc.write_run_config(paths["run"], flat, device="cpu")
    return paths


def _demo_overrides(
    paths: dict[str, Path], *, steps: int, seed: int, variant: str, overrides: dict[str, Any] | None
) -> dict[str, Any]:
    """The demo run's verl keys: a paper-scale stand-in backbone on the toy model and data, the toy reward."""
    from exgrpo.verl_plugin import hydra_config as hc

    backbone = {
        "scale": "paper",
        "hf_id": str(paths["model"]),
        "steps": int(steps),
        "max_prompt_length": 48,
        "max_response_length": 16,
        "resources": {"train": {"nodes": 1, "gpus_per_node": 1}},
    }
    cfg = hc.variant_config(variant, backbone, {"n_rollouts": 4, "delayed_start": False, **(overrides or {})})
    flat = hc.verl_overrides(
        "toy",
        backbone,
        cfg,
        variant=variant,
        seed=seed,
        run_dir=paths["run"],
        train_files=str(paths["train"]),
        val_files=str(paths["val"]),
    )
    flat["reward.custom_reward_function.path"] = str(paths["reward"])
    return flat


def launch_command(run_dir: str | Path, overrides: list[str]) -> list[str]:
    """argv of `python -m exgrpo.verl_plugin.main` on a run directory, with the demo's small overrides."""
    return [
        sys.executable,
        "-m",
        "exgrpo.verl_plugin.main",
        "--config-path",
        str(Path(run_dir).resolve()),
        "--config-name",
        "exgrpo_run",
        *SMALL_OVERRIDES,
        *overrides,
    ]


def launch_env(log: str | Path | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment + the plug-in module, full Hydra errors and verl's metrics file `log`."""
    full_env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "exgrpo.verl_plugin",
        "HYDRA_FULL_ERROR": "1",
        **(env or {}),
    }
    if log is not None:
        full_env["VERL_FILE_LOGGER_PATH"] = str(Path(log).resolve())
    return full_env


def launch(
    run_dir: str | Path,
    overrides: list[str],
    *,
    log: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    capture: bool = False,
) -> subprocess.CompletedProcess:
    """`python -m exgrpo.verl_plugin.main` on a run directory, from inside it (as the launch scripts do)."""
    return subprocess.run(
        launch_command(run_dir, overrides),
        cwd=Path(run_dir).resolve(),
        env=launch_env(log, env),
        timeout=timeout,
        capture_output=capture,
        text=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exgrpo.verl_plugin.cpu.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", type=Path, help="folder for the model, data and run directory")
    parser.add_argument("--steps", type=int, default=4, help="training steps")
    parser.add_argument("--save-freq", type=int, default=2, help="verl checkpoint every N steps")
    parser.add_argument(
        "--rollout",
        choices=("exgrpo_cpu", "vllm"),
        default="exgrpo_cpu",
        help="vllm: verl's own vLLM rollout (the engine environment; vLLM's CPU attention needs head size 32, 64, ...)",
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="HF model folder (default: a random tiny Qwen2)"
    )
    parser.add_argument(
        "--reward",
        choices=sorted(TOY_REWARDS),
        default="even_length",
        help="the toy reward rule (digest_parity: partial groups also for a trained base such as tiny-math-h32)",
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    args = parser.parse_args(argv)
    paths = write_demo(args.out, steps=args.steps, model=args.model, rollout=args.rollout, reward=args.reward)
    print(f"[exgrpo] CPU-mode run directory: {paths['run']}", flush=True)
    done = launch(
        paths["run"],
        [f"trainer.save_freq={args.save_freq}", *args.overrides],
        log=paths["run"] / f"metrics.attempt0.{int(time.time())}.jsonl",
    )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
