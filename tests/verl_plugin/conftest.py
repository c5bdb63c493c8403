"""Shared fixtures of the verl plug-in tests: a tiny random Qwen2 with a word-level tokenizer, toy parquet data in
verl's format (with a `qid` column) and a test reward rule, written into a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHAT_WORDS = ["<pad>", "<eos>", "<|im_start|>", "<|im_end|>", "system", "user", "assistant", "what", "is"]
"""The words every test vocabulary starts with: the special tokens, the chat roles and the question's start."""
WORDS = [*CHAT_WORDS, "?", *[str(i) for i in range(100)]]

TOY_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Test rule: an even number of words is 'correct', so a random model solves groups partially."""
    return {"score": float(len(solution_str.split()) % 2 == 0)}
'''


def word_tokenizer(words: list[str]):
    """A whitespace word-level tokenizer over `words` (id = position; `<pad>` 0 doubles as unknown, `<eos>` 1)
    with a plain chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.chat_template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
        "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
    )
    return fast


def _tiny_model(path: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    word_tokenizer(WORDS).save_pretrained(path)
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=1,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path, safe_serialization=True)


def _toy_parquet(path: Path, n: int) -> None:
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
        for i in range(n)
    ]
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
    backbone = {
        "scale": "paper",
        "hf_id": str(model),
        "steps": 4,
        "max_prompt_length": 32,
        "max_response_length": 16,
        "resources": {"train": {"nodes": 1, "gpus_per_node": 1}},
    }
    cfg = hc.variant_config("exgrpo", backbone, {"n_rollouts": 4, "delayed_start": False})
    flat = hc.verl_overrides(
        "toy",
        backbone,
        cfg,
        variant="exgrpo",
        seed=0,
        run_dir=run,
        train_files=str(tmp_path / "train.parquet"),
        val_files=str(tmp_path / "valid.parquet"),
    )
    hc.write_run_config(run, flat)
    return {"root": tmp_path, "model": model, "run": run, "reward": reward}


SMALL_OVERRIDES = [
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=2048",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "actor_rollout_ref.rollout.max_model_len=64",
    "reward.num_workers=1",
    "trainer.save_freq=2",
    "trainer.test_freq=-1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "ray_kwargs.ray_init.num_cpus=8",
]
"""Command-line overrides that shrink a toy run to one GPU and a few seconds per step."""


@pytest.fixture
def small_overrides(toy_run) -> list[str]:
    """SMALL_OVERRIDES plus the toy reward rule."""
    return [*SMALL_OVERRIDES, f"reward.custom_reward_function.path={toy_run['reward']}"]


def run_entry_point(
    run_dir: Path, overrides: list[str], log: Path, timeout: int
) -> subprocess.CompletedProcess:
    """`python -m exgrpo.verl_plugin.main` on a run directory, as the launch scripts start it."""
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "exgrpo.verl_plugin",
        "VERL_FILE_LOGGER_PATH": str(log),
        "HYDRA_FULL_ERROR": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "exgrpo.verl_plugin.main",
        "--config-path",
        str(run_dir),
        "--config-name",
        "exgrpo_run",
        *overrides,
    ]
    return subprocess.run(cmd, cwd=run_dir, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def entry_point():
    return run_entry_point


# --------------------------------------------------------------------------- the trainer's hooks on fakes
# test_trainer.py and test_trainer_parity.py drive ExGRPOTrainer's own hooks with only verl's GPU/Ray parts
# (TransferQueue, actor workers, dataset) replaced by these fakes. verl imports are inside the functions:
# this file is also loaded where verl is not installed (those tests then skip).
TRAINER_K = 4
"""Rollouts per question of `trainer_config`."""
TRAINER_B = 4
"""Questions per step of `trainer_config`."""


class FakeTQ:
    """The TransferQueue KV API the trainer uses, backed by a dict (per-row values, verl's own collation)."""

    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = {}
        self.tags: dict[tuple[str, str], dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        import torch
        from transfer_queue import KVBatchMeta

        for key, tag in zip(keys, tags or []):
            self.tags[(partition_id, key)] = dict(tag)
        if fields is not None:
            for name, col in fields.items():
                vals = col.unbind() if isinstance(col, torch.Tensor) else col.tolist()
                for key, val in zip(keys, vals):
                    self.rows.setdefault((partition_id, key), {})[name] = val
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=list(tags or [{} for _ in keys]))

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from verl.utils import tensordict_utils as tu

        rows = [self.rows[(partition_id, k)] for k in keys]
        names = select_fields or list(rows[0])
        return tu.list_of_dict_to_tensordict([{n: r[n] for n in names} for r in rows])

    def put_rollout(self, row, sample, responses, reward, old_log_probs, entropy) -> str:
        """One finished rollout of a prompt row, as the agent loop leaves it in the `train` partition (the
        sequence reward on the last response token); returns its key."""
        import torch

        from exgrpo.verl_plugin import batch as vb

        rm = torch.zeros(len(responses))
        rm[-1] = reward
        key = f"{row['uid']}_{sample}_0"
        self.rows[("train", key)] = {
            "uid": row["uid"],
            vb.EXGRPO_QID: row[vb.EXGRPO_QID],
            "prompts": torch.tensor([3, 4, 5]),
            "responses": responses,
            "response_mask": torch.ones(len(responses), dtype=torch.long),
            "rm_scores": rm,
            "old_log_probs": old_log_probs,
            "entropy": entropy,
        }
        return key

    def kv_put(self, key, partition_id, fields=None, tag=None):
        """What an agent loop's `async_kv_put` of a tag does (the failure reports)."""
        self.tags[(partition_id, key)] = dict(tag or {})

    def kv_list(self, partition_id):
        """{partition: {key: tag}} as TransferQueue's kv_list returns it."""
        found = {k: t for (p, k), t in self.tags.items() if p == partition_id}
        return {partition_id: found} if found else {}

    def kv_clear(self, keys, partition_id):
        for k in keys:
            self.rows.pop((partition_id, k), None)
            self.tags.pop((partition_id, k), None)


class FakeActor:
    """compute_log_prob as the worker does it: writes full-sequence log_probs / entropy for the keys.
    Entropy of a token = token id / 100, so a candidate's score is its mean response id / 100."""

    world_size = 2  # the public WorkerGroup property; no private dispatch info exists on this fake

    def __init__(self, tq):
        self.tq, self.calls = tq, []

    def compute_log_prob(self, meta):
        import torch

        self.calls.append(meta)
        assert meta.extra_info["calculate_entropy"] and len(meta.keys) % 2 == 0
        for key in meta.keys:
            row = self.tq.rows[(meta.partition_id, key)]
            ids = row["input_ids"].float()
            shifted = torch.cat([ids[1:], ids[:1]])  # position t holds the value of token t+1
            row["entropy"], row["log_probs"] = shifted / 100, -shifted / 100

    def set_loss_fn(self, fn):
        self.loss_fn = fn


class FakeDataset:
    def __init__(self, n):
        self.qids = [f"q{i}" for i in range(n)]
        self.dataframe = {"qid": self.qids, "prompt": [None] * n}

    def __getitem__(self, i):
        import torch

        return {
            "data_source": "math",
            "qid": self.qids[i],
            "raw_prompt": [{"role": "user", "content": self.qids[i]}],
            "reward_model": {"ground_truth": "1"},
            "extra_info": {"index": i},
            "index": i,
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        }


@pytest.fixture(scope="module")
def trainer_config(tmp_path_factory):
    """The composed verl config of an exgrpo run of qwen2.5-math-1.5b with K = TRAINER_K, B = TRAINER_B."""
    from omegaconf import OmegaConf

    from exgrpo.settings.backbones import load_backbones
    from exgrpo.verl_plugin import hydra_config as hc

    run = tmp_path_factory.mktemp("run")
    bb = load_backbones(Path(__file__).resolve().parents[2] / "config" / "backbones.yaml")[
        "qwen2.5-math-1.5b"
    ]
    cfg = hc.variant_config("exgrpo", bb, {"n_rollouts": TRAINER_K, "delayed_start": False})
    flat = hc.verl_overrides(
        "qwen2.5-math-1.5b",
        bb,
        cfg,
        variant="exgrpo",
        seed=3,
        run_dir=run,
        train_files="t.parquet",
        val_files="v.parquet",
    )
    hc.write_run_config(run, flat)
    composed = hc.compose_run_config(run)
    OmegaConf.set_struct(composed, False)
    composed.data.train_batch_size = TRAINER_B
    return composed


@pytest.fixture
def fake_tq(monkeypatch):
    """A FakeTQ in place of the TransferQueue client, in the trainer, its scoring pass and verl's padding helpers."""
    import verl.trainer.ppo.padding_utils as pu

    import exgrpo.verl_plugin.scoring as scoring_mod
    import exgrpo.verl_plugin.trainer as trainer_mod

    fake = FakeTQ()
    monkeypatch.setattr(trainer_mod, "tq", fake)
    monkeypatch.setattr(scoring_mod, "tq", fake)
    monkeypatch.setattr(pu, "tq", fake)
    return fake


def new_trainer(config, fake_tq, tmp_path):
    """An ExGRPOTrainer past its constructor (no Ray, no workers): 12 questions, the fake actor and TQ; each
    prompt batch it submits is kept in `t.submitted` as its rows (what each agent loop receives)."""
    from types import SimpleNamespace

    from exgrpo.core.data_order import DataOrder
    from exgrpo.verl_plugin import batch as vb
    from exgrpo.verl_plugin.trainer import ExGRPOTrainer

    config = config.copy()
    config.trainer.default_local_dir = str(tmp_path / "ckpt")
    t = object.__new__(ExGRPOTrainer)
    t.config, t.global_steps, t.total_training_steps, t.parameter_sync_step = config, 1, 10, 1
    t._init_exgrpo_state(config)
    t.train_dataset = FakeDataset(12)
    t.qid_pos = vb.qid_positions(t.train_dataset.qids)
    t.data_order = DataOrder(t.train_dataset.qids, t.exgrpo_seed)
    t.tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=2)
    t.actor_rollout_wg = FakeActor(fake_tq)
    t.submitted = []
    t._submit_batch_to_rollout = lambda batch: t.submitted.append(prompt_rows(batch))
    return t


def prompt_rows(batch) -> list[dict]:
    """The rows of a prompt batch as dicts."""
    import torch

    return [
        {
            k: (v[i] if isinstance(v, torch.Tensor) else v[i].data if hasattr(v[i], "data") else v[i])
            for k, v in batch.items()
            if k != "global_steps"
        }
        for i in range(len(batch))
    ]


@pytest.fixture
def make_trainer():
    """`new_trainer(config, fake_tq, tmp_path)`."""
    return new_trainer
