"""The plug-in logs `entropy` and `response_length` over fresh rows, as the CPU trainer does (exgrpo.records.metrics)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402

from exgrpo.records import metrics as M  # noqa: E402
from exgrpo.verl_plugin.batch import fresh_response_metrics  # noqa: E402


def test_fresh_rows_only_by_hand():
    # rows: fresh [1, 3], fresh [2] + one masked slot, replayed [9, 9, 9], padding [7]
    ent = torch.nested.as_nested_tensor(
        [
            torch.tensor([1.0, 3.0]),
            torch.tensor([2.0, 5.0]),
            torch.tensor([9.0, 9.0, 9.0]),
            torch.tensor([7.0]),
        ],
        layout=torch.jagged,
    )
    mask = torch.nested.as_nested_tensor(
        [torch.ones(2), torch.tensor([1.0, 0.0]), torch.ones(3), torch.ones(1)], layout=torch.jagged
    )
    rows = SimpleNamespace(
        qids=["a", "a", "b", "a"],
        is_replay=torch.tensor([False, False, True, False]),
        real=torch.tensor([True, True, True, False]),
    )
    stats = fresh_response_metrics(rows, ent, mask)
    assert stats == {M.ENTROPY.name: (1 + 3 + 2) / 3, M.RESPONSE_LENGTH.name: 3 / 2}
