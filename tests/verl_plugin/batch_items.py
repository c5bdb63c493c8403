"""Shared by the verl batch tests: a dataset item as verl's RLHFDataset yields it, and a stored trajectory."""

from __future__ import annotations

import numpy as np
import torch

from exgrpo.core.buffer import Trajectory


def dataset_item(qid: str, question: str = "what is 1+1 ?") -> dict:
    """A dataset item as RLHFDataset.__getitem__ returns it."""
    return {
        "data_source": "math",
        "qid": qid,
        "raw_prompt": [{"role": "user", "content": question}],
        "reward_model": {"ground_truth": "2"},
        "extra_info": {"index": 0},
        "index": 0,
        "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
    }


def trajectory(ids, logp, step=3, entropy=float("nan")) -> Trajectory:
    """A stored trajectory (token ids, behaviour log-probs) recorded at `step`."""
    return Trajectory(np.asarray(ids, dtype=np.int32), np.asarray(logp, dtype=np.float32), step, entropy)
