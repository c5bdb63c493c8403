"""Difficulty buckets of the preliminary study (paper §3.2, Eq. 14) and their agreement with masked GRPO."""

from __future__ import annotations

import pytest
import torch

from exgrpo.core.advantages import difficulty_mask
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.variants import ABLATIONS, VARIANT_ALIASES, config_for
from exgrpo.prelim.trajectories import BUCKETS, BucketBounds, bucket_of

# Eq. 14 / Fig. 10: Hard (0, 0.25], Medium (0.25, 0.75), Easy [0.75, 1); 0 and K successes are in no bucket.
HAND_K8 = {
    0: None,
    1: "hard",
    2: "hard",
    3: "medium",
    4: "medium",
    5: "medium",
    6: "easy",
    7: "easy",
    8: None,
}
HAND_K4 = {0: None, 1: "hard", 2: "medium", 3: "easy", 4: None}  # both boundaries hit exactly: 1/4 and 3/4


def test_hand_computed_buckets():
    assert {k: bucket_of(k, 8) for k in range(9)} == HAND_K8
    assert {k: bucket_of(k, 4) for k in range(5)} == HAND_K4
    assert bucket_of(1, 2) == "medium"  # 0.5


def test_custom_bounds():
    bounds = BucketBounds(hard_high=0.4, easy_low=0.6)
    assert [bucket_of(k, 10, bounds) for k in range(11)] == [
        None,
        "hard",
        "hard",
        "hard",
        "hard",
        "medium",
        "easy",
        "easy",
        "easy",
        "easy",
        None,
    ]
    assert BucketBounds.from_config(ExGRPOConfig(mask_hard_high=0.4, mask_easy_low=0.6)) == bounds
    with pytest.raises(ConfigError, match="mask_hard_high"):
        BucketBounds(0.8, 0.6)
    with pytest.raises(ValueError, match="n_correct"):
        bucket_of(9, 8)


@pytest.mark.parametrize(
    "variant, bucket", [("masked_hard", "hard"), ("masked_medium", "medium"), ("masked_easy", "easy")]
)
def test_masked_variants_train_on_the_analysis_buckets(variant, bucket):
    """The masked-GRPO variants (Table 9) give gradient exactly to the questions this analysis puts in
    their bucket, for every K and k (Eq. 14's indicator)."""
    cfg = config_for(variant)
    assert cfg.method == "on_policy" and cfg.difficulty_mask == bucket
    assert (cfg.mask_hard_high, cfg.mask_easy_low) == (0.25, 0.75)
    bounds = BucketBounds.from_config(cfg)
    for n in range(2, 17):
        acc = torch.arange(n + 1, dtype=torch.float32) / n
        mask = difficulty_mask(acc, cfg.difficulty_mask, cfg.mask_hard_high, cfg.mask_easy_low).tolist()
        assert mask == [bucket_of(k, n, bounds) == bucket for k in range(n + 1)], f"K={n}"


def test_masked_full_is_the_unmasked_baseline():
    cfg = config_for("masked_full")
    assert cfg.method == "on_policy" and cfg.difficulty_mask == "none"
    # "Full" is the on-policy run itself: an alias the analysis reads, never trained under its own name.
    assert VARIANT_ALIASES["masked_full"] == "on_policy" and "masked_full" not in ABLATIONS
    assert {name for name in ABLATIONS if name.startswith("masked_")} == {f"masked_{b}" for b in BUCKETS}
