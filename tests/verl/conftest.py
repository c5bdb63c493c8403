"""Shared fixtures of the verl plug-in tests: a tiny random Qwen2 with a word-level tokenizer, toy parquet data in
verl's format (with a `qid` column) and a test reward rule, written into a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WORDS = ["<pad>", "<eos>", "<|im_start|>", "<|im_end|>", "system", "user", "assistant", "what", "is", "?",
         *[str(i) for i in range(100)]]

TOY_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Test rule: an even number of words is 'correct', so a random model solves groups partially."""
    return {"score": float(len(solution_str.split()) % 2 == 0)}
'''


def _tiny_model(path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.chat_template = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
    fast.save_pretrained(path)
    config = Qwen2Config(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=1, pad_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path, safe_serialization=True)


def _toy_parquet(path: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"data_source": "toy", "prompt": [{"role": "user", "content": f"what is {i} ?"}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}, "qid": f"q{i}"}
            for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture
def toy_run(tmp_path):
    """A generated run directory for a toy backbone (1 GPU, K=4, replay active from step 1), returns a dict of
    paths: root, model, run, reward."""
    from exgrpo.verl_plugin import hydra_config as hc

    model, run, reward = tmp_path / "model", tmp_path / "run", tmp_path / "toy_reward.py"
    _tiny_model(model)
    _toy_parquet(tmp_path / "train.parquet", 64)
    _toy_parquet(tmp_path / "valid.parquet", 8)
    reward.write_text(TOY_REWARD)
    backbone = {"scale": "paper", "hf_id": str(model), "steps": 4, "max_prompt_length": 32,
                "max_response_length": 16, "resources": {"train": {"nodes": 1, "gpus_per_node": 1}}}
    cfg = hc.variant_config("exgrpo", backbone, {"n_rollouts": 4, "delayed_start": False})
    flat = hc.verl_overrides("toy", backbone, cfg, variant="exgrpo", seed=0, run_dir=run,
                             train_files=str(tmp_path / "train.parquet"), val_files=str(tmp_path / "valid.parquet"))
    hc.write_run_config(run, flat)
    return {"root": tmp_path, "model": model, "run": run, "reward": reward}


SMALL_OVERRIDES = [
    "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=1", "actor_rollout_ref.rollout.max_model_len=64",
    "reward.num_workers=1", "trainer.save_freq=2", "trainer.test_freq=-1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1", "ray_kwargs.ray_init.num_cpus=8",
]
"""Command-line overrides that shrink a toy run to one GPU and a few seconds per step."""


@pytest.fixture
def small_overrides(toy_run) -> list[str]:
    """SMALL_OVERRIDES plus the toy reward rule."""
    return [*SMALL_OVERRIDES, f"reward.custom_reward_function.path={toy_run['reward']}"]


def run_entry_point(run_dir: Path, overrides: list[str], log: Path, timeout: int) -> subprocess.CompletedProcess:
    """`python -m exgrpo.verl_plugin.main` on a run directory, as the launch scripts start it."""
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "exgrpo.verl_plugin", "VERL_FILE_LOGGER_PATH": str(log),
           "HYDRA_FULL_ERROR": "1"}
    cmd = [sys.executable, "-m", "exgrpo.verl_plugin.main", "--config-path", str(run_dir), "--config-name",
           "exgrpo_run", *overrides]
    return subprocess.run(cmd, cwd=run_dir, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def entry_point():
    return run_entry_point
