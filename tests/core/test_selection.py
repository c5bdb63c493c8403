"""exgrpo.core.selection: token entropy, sequence scores, the released mask bug (issue #57), choosing."""

from __future__ import annotations

import math

import pytest
import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.selection import (
    candidate_scores,
    released_entropy_mask,
    released_sequence_scores,
    select_index,
    sequence_scores,
    to_left_padded_window,
    token_entropy_from_logits,
)


# ----------------------------------------------------------------------------- token entropy
def test_entropy_of_known_distributions():
    v = 50
    logits = torch.zeros(1, 3, v)
    logits[0, 1, 7] = 1e4  # (numerically) one-hot: entropy 0, no NaN from log(0)
    p = torch.tensor([0.5, 0.25, 0.25])
    logits[0, 2, :3] = p.log()
    logits[0, 2, 3:] = -1e9
    h = token_entropy_from_logits(logits)
    assert h.shape == (1, 3)
    assert h[0, 0].item() == pytest.approx(math.log(v), abs=1e-5)  # uniform
    assert h[0, 1].item() == pytest.approx(0.0, abs=1e-5)
    assert h[0, 2].item() == pytest.approx(1.5 * math.log(2), abs=1e-5)  # −Σ p log p by hand


def test_entropy_temperature_and_bf16():
    logits = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(
        token_entropy_from_logits(logits, temperature=2.0), token_entropy_from_logits(logits / 2)
    )
    assert token_entropy_from_logits(logits.bfloat16()).dtype == torch.float32
    with pytest.raises(ValueError, match="temperature"):
        token_entropy_from_logits(logits, temperature=0.0)


# ----------------------------------------------------------------------------- clean sequence scores
def test_sequence_scores_by_hand():
    ent = torch.tensor([[0.1, 0.3, 9.0], [0.2, 0.5, 0.8]])
    logp = torch.log(torch.tensor([[0.5, 0.25, 1e-9], [1.0, 0.5, 0.5]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert sequence_scores("entropy", token_entropy=ent, mask=mask).tolist() == pytest.approx([0.2, 0.5])
    nll = sequence_scores("nll", token_logp=logp, mask=mask)
    assert nll.tolist() == pytest.approx([1.5 * math.log(2), 2 * math.log(2) / 3], abs=1e-6)
    r1 = sequence_scores("random", mask=mask, generator=torch.Generator().manual_seed(3))
    r2 = sequence_scores("random", mask=mask, generator=torch.Generator().manual_seed(3))
    assert torch.equal(r1, r2) and r1.shape == (2,) and bool(((r1 >= 0) & (r1 < 1)).all())


def test_sequence_scores_bad_input():
    mask = torch.tensor([[1, 1], [0, 0]])
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        sequence_scores("entropy", token_entropy=torch.zeros(2, 2), mask=mask)
    with pytest.raises(ValueError, match="token_logp"):
        sequence_scores("nll", token_entropy=torch.zeros(2, 2), mask=torch.ones(2, 2))
    with pytest.raises(ConfigError, match="selection_metric"):
        sequence_scores("ppl", mask=torch.ones(2, 2))


# ----------------------------------------------------------------------------- the released mask (issue #57)
PAD = 0
# T = 6. Candidate A has 3 response tokens, B has 5 (EOS included); right-padded ids as in the release.
IDS = torch.tensor([[5, 6, 2, PAD, PAD, PAD], [5, 6, 7, 8, 2, PAD]])
RESP_MASK = IDS != PAD
ENT = torch.tensor(
    [
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],  # A: flat 1.0 → clean mean 1.0
        [0.1, 0.1, 0.1, 0.1, 2.0, 0.0],
    ]
)  # B: confident until a spike at EOS → clean mean 0.48


def test_left_padded_window_by_hand():
    prefix = torch.tensor([[9.0, 9.0, 9.0, 7.0, 8.0, 9.5], [9.0, 9.0, 9.0, 9.0, 9.0, 4.0]])
    win = to_left_padded_window(ENT, RESP_MASK, prefix)
    # response at the end; slot before it = prefix column T−1 (predicts the last prompt token), etc.
    assert torch.allclose(win, torch.tensor([[7.0, 8.0, 9.5, 1.0, 1.0, 1.0], [4.0, 0.1, 0.1, 0.1, 0.1, 2.0]]))
    assert to_left_padded_window(ENT, RESP_MASK).tolist()[1] == pytest.approx([0.0, 0.1, 0.1, 0.1, 0.1, 2.0])
    with pytest.raises(ValueError, match="right-padded"):
        to_left_padded_window(ENT, torch.tensor([[0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]).bool())


def test_released_mask_differs_from_clean_mean_and_flips_the_choice():
    mask = released_entropy_mask(IDS, PAD)
    # N=2 < 8: each candidate reads its own right-padded copy → pad positions j >= L
    assert mask.int().tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]]
    released = released_sequence_scores(to_left_padded_window(ENT, RESP_MASK), mask)
    clean = sequence_scores("entropy", token_entropy=ENT, mask=RESP_MASK)
    assert clean.tolist() == pytest.approx([1.0, 0.48])
    # A (L = T/2) happens to be averaged correctly; B is "averaged" over its last token only
    assert released.tolist() == pytest.approx([1.0, 2.0])
    assert select_index(clean, "argmin") == 1
    assert select_index(released, "argmin") == 0


def test_released_mask_uses_the_last_chunk_of_eight():
    # 10 candidates: the last chunk is rows 8, 9 plus six all-pad dummy rows; candidate i reads row i % 8 of it
    lengths = [2, 3, 4, 5, 6, 1, 2, 3, 4, 5]
    t = 6
    ids = torch.tensor([[3] * n + [PAD] * (t - n) for n in lengths])
    mask = released_entropy_mask(ids, PAD)
    own = ids == PAD
    assert torch.equal(mask[0], own[8]) and torch.equal(mask[1], own[9])  # another trajectory's length
    assert torch.equal(mask[8], own[8]) and torch.equal(mask[9], own[9])
    assert bool(mask[2:8].all())  # dummy rows: the whole window, prompt tail and all
    # denominator = window length − the other trajectory's length
    assert mask.sum(-1).tolist() == [t - 4, t - 5, 6, 6, 6, 6, 6, 6, t - 4, t - 5]
    # a response filling the whole window leaves nothing to average: NaN, as an empty .mean() in the release
    full = released_sequence_scores(torch.ones(1, t), released_entropy_mask(torch.full((1, t), 3), PAD))
    assert math.isnan(full.item())
    assert select_index(torch.tensor([0.5, float("nan"), 0.1]), "argmin") == 1  # NaN wins, as np.argmin


def test_candidate_scores_follow_the_switch():
    clean_cfg = ExGRPOConfig()
    released_cfg = ExGRPOConfig(entropy_mask="as_released")
    assert candidate_scores(clean_cfg, mask=RESP_MASK, token_entropy=ENT).tolist() == pytest.approx(
        [1.0, 0.48]
    )
    got = candidate_scores(released_cfg, mask=RESP_MASK, token_entropy=ENT, response_ids=IDS, pad_id=PAD)
    assert got.tolist() == pytest.approx([1.0, 2.0])
    logp = -ENT  # the release masks PPL scores the same way: −logp window, same positions
    nll_cfg = ExGRPOConfig(entropy_mask="as_released", selection_metric="nll")
    assert candidate_scores(
        nll_cfg, mask=RESP_MASK, token_logp=logp, response_ids=IDS, pad_id=PAD
    ).tolist() == pytest.approx([1.0, 2.0])
    with pytest.raises(ValueError, match="response_ids"):
        candidate_scores(released_cfg, mask=RESP_MASK, token_entropy=ENT)


# ----------------------------------------------------------------------------- choosing
def test_select_index_modes():
    s = torch.tensor([0.3, 0.1, 0.9, 0.1])
    assert select_index(s, "argmin") == 1  # first of the tied minima
    assert select_index(s, "argmax") == 2
    g = torch.Generator().manual_seed(0)
    picks = {select_index(s, "random", g) for _ in range(200)}
    assert picks == {0, 1, 2, 3}
    with pytest.raises(ConfigError, match="selection_mode"):
        select_index(s, "no_such_mode")  # (`median` is the plug-in example)
    with pytest.raises(ValueError, match="non-empty"):
        select_index(torch.tensor([]), "argmin")
