"""exgrpo.core.advantages: mixed-group advantages by hand (paper Eq. 4), difficulty buckets (Eq. 14)."""

from __future__ import annotations

import math

import pytest
import torch

from exgrpo.core.advantages import difficulty_mask, group_accuracy, group_advantages, success_histogram
from exgrpo.core.config import ConfigError, ExGRPOConfig

# One experiential group: the replayed success first, then 7 fresh rollouts with 2 successes → k = 3 of 8.
MIXED_REWARDS = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_mixed_group_dr_grpo_by_hand():
    adv = group_advantages(torch.tensor(MIXED_REWARDS), torch.full((8,), 42))
    # mean = 3/8; successes 1 − 0.375, failures −0.375; replayed row is a member like any other
    want = [0.625, 0.625, -0.375, -0.375, 0.625, -0.375, -0.375, -0.375]
    assert adv.tolist() == pytest.approx(want, abs=1e-7)
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_mixed_group_std_norm_is_unbiased_by_hand():
    adv = group_advantages(
        torch.tensor(MIXED_REWARDS, dtype=torch.float64),
        torch.zeros(8, dtype=torch.long),
        std_norm=True,
        eps=1e-6,
    )
    # unbiased variance: (3·0.625² + 5·0.375²) / 7 = 1.875 / 7
    std = math.sqrt(1.875 / 7)
    assert std == pytest.approx(0.5175491695, abs=1e-9)
    assert adv[0].item() == pytest.approx(0.625 / (std + 1e-6), abs=1e-12)
    assert adv[2].item() == pytest.approx(-0.375 / (std + 1e-6), abs=1e-12)


def test_groups_are_separate_with_arbitrary_labels():
    # two interleaved groups labelled 17 and 3: group 17 = {1, 0, 0, 0}, group 3 = {1, 1, 1, 0}
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    labels = torch.tensor([17, 3, 17, 3, 17, 3, 17, 3])
    adv = group_advantages(rewards, labels)
    assert adv.tolist() == pytest.approx([0.75, 0.25, -0.25, 0.25, -0.25, 0.25, -0.25, -0.75])
    acc = group_accuracy(rewards, labels)
    assert acc.tolist() == pytest.approx([0.25, 0.75] * 4)


def test_uniform_group_has_zero_advantage_even_with_std():
    for std_norm in (False, True):
        adv = group_advantages(torch.ones(8), torch.zeros(8, dtype=torch.long), std_norm=std_norm)
        assert torch.all(adv == 0)
    single = group_advantages(torch.tensor([1.0]), torch.tensor([0]), std_norm=True)
    assert single.tolist() == [0.0]


def test_integer_rewards_and_bad_input():
    assert group_advantages(torch.tensor([1, 0]), torch.tensor([0, 0])).tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match="group_index"):
        group_advantages(torch.ones(3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        group_advantages(torch.ones(2), torch.zeros(2))


# ----------------------------------------------------------------------------- difficulty buckets (Eq. 14)
ACCS = torch.tensor([0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0])


@pytest.mark.parametrize(
    ("bucket", "want"),
    [
        ("hard", [0, 1, 1, 0, 0, 0, 0, 0, 0]),  # (0, 0.25]
        ("medium", [0, 0, 0, 1, 1, 1, 0, 0, 0]),  # (0.25, 0.75)
        ("easy", [0, 0, 0, 0, 0, 0, 1, 1, 0]),  # [0.75, 1)
        ("none", [1, 1, 1, 1, 1, 1, 1, 1, 1]),
    ],
)
def test_difficulty_mask_boundaries(bucket, want):
    assert difficulty_mask(ACCS, bucket).int().tolist() == want


def test_buckets_partition_the_open_interval_and_use_config_bounds():
    acc = torch.linspace(0, 1, 101)
    hits = sum(difficulty_mask(acc, b).int() for b in ("hard", "medium", "easy"))
    inside = (acc > 0) & (acc < 1)
    assert torch.equal(hits, inside.int())
    c = ExGRPOConfig(mask_hard_high=0.4, mask_easy_low=0.6)
    assert difficulty_mask(
        torch.tensor([0.4, 0.5, 0.6]), "medium", c.mask_hard_high, c.mask_easy_low
    ).tolist() == [False, True, False]


def test_group_accuracy_hits_the_boundary_exactly():
    # 2 of 8 and 6 of 8 must land in Hard and Easy, not drift across the boundary
    rewards = torch.tensor([1.0, 1.0] + [0.0] * 6 + [1.0] * 6 + [0.0] * 2)
    labels = torch.tensor([0] * 8 + [1] * 8)
    acc = group_accuracy(rewards, labels)
    assert difficulty_mask(acc, "hard").tolist() == [True] * 8 + [False] * 8
    assert difficulty_mask(acc, "easy").tolist() == [False] * 8 + [True] * 8


def test_difficulty_mask_rejects_unknown_bucket():
    with pytest.raises(ConfigError, match="difficulty_mask"):
        difficulty_mask(ACCS, "medium-hard")


def test_success_histogram_by_hand():
    # K = 4: groups with 0, 2, 2, 4 and 1 successes -> mixed: the 2, 2 and 1 groups (3 of 5)
    assert success_histogram([0, 2, 2, 4, 1], 4) == (0.6, [1.0, 1.0, 2.0, 0.0, 1.0])
    assert success_histogram([], 8) == (0.0, [0.0] * 9)
