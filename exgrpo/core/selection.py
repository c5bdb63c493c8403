"""Trajectory selection: which stored success of a question is replayed (paper §4.1, Alg. 1 line 11).

For every replayed question, each stored trajectory is scored under the current policy and the one with the
lowest score is replayed (`argmin`; `argmax` is the "w/ Highest Entropy T." ablation, `random` is
"w/o T. Selection", paper Table 6).

Departures from the paper, stated up front:
- The paper gives three definitions of the trajectory entropy H (§3.1, Alg. 1 and §F.3 differ). `entropy` here is the released
  one: the mean over response tokens of the full-vocabulary token entropy. `nll` is Alg. 1 line 11's mean
  negative log-prob (log-perplexity; §F.3 "PPL selection"); ranking by NLL and by PPL = exp(NLL) is the same.
- The released code averages entropy with a buggy mask (upstream issue #57). The default
  (`entropy_mask="response"`) is the clean mean; `entropy_mask="as_released"` re-creates the bug exactly, as
  pure tensor code (`released_entropy_mask`, `to_left_padded_window`, `released_sequence_scores`), so its
  effect on which trajectory is picked can be measured.
- Ties go to the first candidate, and a NaN score wins both argmin and argmax (as `np.argmin` in the release;
  the released mask can give an empty mean, i.e. NaN).
"""

from __future__ import annotations

from typing import TypeAlias

import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.registry import SELECTION_METRICS, SELECTION_MODES

RELEASED_CHUNK_SIZE = 8
"""The released scoring forward pass runs in chunks of 8 candidates (`BATCH_SIZE = 8` in `compute_postcal_metrics`)."""


def token_entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Full-vocabulary entropy of each next-token distribution.

    H_t = logsumexp(z_t) − Σ_v softmax(z_t)_v · z_t,v with z = logits / temperature, computed in float32 at least
    (the verl `entropy_from_logits` form, which never forms log(0)).

    Args:
        logits: [N, T, V] (any leading shape works; the last dim is the vocabulary).
        temperature: the released code divides logits by the rollout temperature (1.0) before scoring.
    Returns:
        [N, T] entropies in nats.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if temperature != 1.0:
        z = z / temperature
    probs = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (probs * z).sum(dim=-1)


def _masked_row_mean(values: torch.Tensor, mask: torch.Tensor, name: str) -> torch.Tensor:
    """Mean of `values` [N, T] over `mask` [N, T] per row; every row must have at least one token."""
    if values.shape != mask.shape:
        raise ValueError(f"{name} has shape {tuple(values.shape)} but mask has {tuple(mask.shape)}")
    m = mask.to(values.dtype)
    counts = m.sum(dim=-1)
    if bool((counts == 0).any()):
        rows = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"mask: rows {rows} have no response tokens to score")
    return (values * m).sum(dim=-1) / counts


_Opt: TypeAlias = torch.Tensor | None


@SELECTION_METRICS.register(
    "entropy", doc="mean full-vocabulary token entropy over the response (released `ent`)", needs="entropy"
)
def _score_entropy(
    token_entropy: _Opt, token_logp: _Opt, mask: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    if token_entropy is None:
        raise ValueError("selection metric 'entropy' needs token_entropy [N, T]")
    return _masked_row_mean(token_entropy, mask, "token_entropy")


@SELECTION_METRICS.register(
    "nll", doc="mean −log π of the response tokens, log-PPL (Alg. 1 line 11, §F.3)", needs="logp"
)
def _score_nll(
    token_entropy: _Opt, token_logp: _Opt, mask: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    if token_logp is None:
        raise ValueError("selection metric 'nll' needs token_logp [N, T]")
    return _masked_row_mean(-token_logp, mask, "token_logp")


@SELECTION_METRICS.register(
    "random", doc="U[0,1) per candidate: no scoring pass (w/o T. Selection)", needs="none"
)
def _score_random(
    token_entropy: _Opt, token_logp: _Opt, mask: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    return torch.rand(mask.shape[0], generator=generator)


SCORE_FNS = SELECTION_METRICS
"""`cfg.selection_metric` → fn(token_entropy, token_logp, mask, generator) -> [N] scores (the registry)."""


def metric_needs(metric: str) -> str:
    """What a selection metric reads from the scoring pass: `entropy`, `logp` or `none`."""
    return str(SELECTION_METRICS.entry(metric).extra.get("needs", "entropy"))


def sequence_scores(
    metric: str,
    *,
    token_entropy: torch.Tensor | None = None,
    token_logp: torch.Tensor | None = None,
    mask: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One score per candidate trajectory, averaged over its response tokens (clean mean).

    Args:
        metric: `entropy` (mean token entropy), `nll` (mean −log π, Alg. 1 line 11) or `random` (U[0,1)).
        token_entropy: [N, T] full-vocabulary token entropies (for `entropy`).
        token_logp: [N, T] log-probs of the sampled tokens (for `nll`).
        mask: [N, T] 1/True on response tokens (right-padded layout is not required; any positions work).
        generator: torch RNG for `random`.
    Returns:
        [N] float scores; lower = more confident.
    """
    if metric not in SCORE_FNS:
        raise ConfigError("selection_metric", f"got {metric!r}, expected one of {sorted(SCORE_FNS)}")
    return SCORE_FNS[metric](token_entropy, token_logp, mask.bool(), generator)


# --------------------------------------------------------------------------- released (buggy) mask, issue #57
def released_entropy_mask(
    response_ids: torch.Tensor, pad_id: int, chunk_size: int = RELEASED_CHUNK_SIZE
) -> torch.Tensor:
    """The averaging mask the released `compute_postcal_metrics` applies to candidate i (upstream issue #57).

    Released: `mask = ~(ppl_batch.batch['responses'][i % BATCH_SIZE] != pad_token_id)`, where `ppl_batch` is the
    *last* chunk of 8 candidates, whose `responses` are right-padded token ids (prompt-free, EOS appended). So
    candidate i is averaged over the pad positions of the right-padded copy of candidate
    `last_start + i % 8`; a short last chunk is filled with dummy rows made only of pad tokens (all True).
    Any real token equal to `pad_id` (e.g. EOS when eos == pad) is also selected, as in the release.

    Args:
        response_ids: [N, T] right-padded response token ids of all N candidates of one collate call, in order.
        pad_id: the tokenizer's pad token id.
        chunk_size: candidates per scoring forward pass (8 in the release).
    Returns:
        [N, T] bool mask over the released entropy window (see `to_left_padded_window`).
    """
    if response_ids.dim() != 2 or response_ids.shape[0] == 0:
        raise ValueError(
            f"response_ids must be a non-empty [N, T] tensor, got shape {tuple(response_ids.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    n, t = response_ids.shape
    last_start = ((n - 1) // chunk_size) * chunk_size
    last_chunk = response_ids[last_start:] == pad_id
    if last_chunk.shape[0] < chunk_size:  # dummy rows `pad_token * max_target_length`: all pad
        filler = torch.ones(chunk_size - last_chunk.shape[0], t, dtype=torch.bool, device=response_ids.device)
        last_chunk = torch.cat([last_chunk, filler], dim=0)
    return last_chunk[torch.arange(n, device=response_ids.device) % chunk_size]


def to_left_padded_window(
    values: torch.Tensor,
    response_mask: torch.Tensor,
    prefix_values: torch.Tensor | None = None,
    fill: float = 0.0,
) -> torch.Tensor:
    """Move per-token values into the released scoring window, where the response sits at the *end*.

    The release left-pads prompt + response to P + T tokens and keeps the last T positions of the output, so
    window slot j scores the token at absolute position P + j: a response of length L occupies slots
    [T − L, T), and slots before it hold the tail of the prompt (or left padding, which reads 0 under verl's
    remove-padding path).

    Args:
        values: [N, T] per-token values (entropy or −log π) in response order; response token k in column k.
        response_mask: [N, T] marks the L_i response tokens; they must be the first L_i columns (right padding).
        prefix_values: [N, T] values of the T positions just before each response, right-aligned (column T−1 =
            the position that predicts the last prompt token); 0 for left padding. None → `fill` everywhere.
        fill: value for slots before the response when `prefix_values` is None.
    Returns:
        [N, T] window values.
    """
    if values.shape != response_mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and response_mask {tuple(response_mask.shape)} differ"
        )
    n, t = values.shape
    lengths = response_mask.bool().sum(dim=-1)
    cols = torch.arange(t, device=values.device).expand(n, t)
    if not bool((response_mask.bool() == (cols < lengths[:, None])).all()):
        raise ValueError("response_mask must be right-padded: response tokens first, then padding")
    # slot j holds response token j − (T − L) when j >= T − L, else prefix position j + L
    shift = (t - lengths)[:, None]
    from_response = cols >= shift
    resp_src = (cols - shift).clamp(min=0, max=t - 1)
    window = torch.gather(values, 1, resp_src)
    if prefix_values is None:
        before = torch.full_like(values, fill)
    else:
        if prefix_values.shape != values.shape:
            raise ValueError(
                f"prefix_values {tuple(prefix_values.shape)} must match values {tuple(values.shape)}"
            )
        before = torch.gather(prefix_values, 1, (cols + lengths[:, None]).clamp(max=t - 1))
    return torch.where(from_response, window, before)


def released_sequence_scores(window_values: torch.Tensor, released_mask: torch.Tensor) -> torch.Tensor:
    """The released per-candidate score: `window_values[i][mask_i].mean()`; NaN when the mask row is empty.

    Args:
        window_values: [N, T] values in the released window layout (`to_left_padded_window`).
        released_mask: [N, T] bool from `released_entropy_mask`.
    Returns:
        [N] scores (float).
    """
    if window_values.shape != released_mask.shape:
        raise ValueError(f"window {tuple(window_values.shape)} and mask {tuple(released_mask.shape)} differ")
    m = released_mask.to(window_values.dtype)
    return (window_values * m).sum(dim=-1) / m.sum(dim=-1)  # 0/0 = NaN, like an empty torch .mean()


# --------------------------------------------------------------------------- choosing
def select_index(scores: torch.Tensor, mode: str, generator: torch.Generator | None = None) -> int:
    """Index of the trajectory to replay among one question's candidates.

    Args:
        scores: [n] candidate scores (n >= 1).
        mode: `argmin` (paper), `argmax` (highest-entropy ablation) or `random` (uniform, ignores scores).
        generator: torch RNG for `random`.
    Returns:
        int in [0, n). Ties → first index; a NaN score wins (numpy semantics, as released).
    """
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-D tensor, got shape {tuple(scores.shape)}")
    if mode not in SELECTION_MODES:
        raise ConfigError("selection_mode", f"got {mode!r}, expected one of {sorted(SELECTION_MODES)}")
    return int(SELECTION_MODES[mode](scores, generator))


@SELECTION_MODES.register("argmin", doc="the lowest score (paper: the lowest-entropy correct trajectory)")
def _pick_argmin(scores: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.argmin(scores).item())


@SELECTION_MODES.register("argmax", doc='the highest score ("w/ Highest-Entropy T.", Table 6)')
def _pick_argmax(scores: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.argmax(scores).item())


@SELECTION_MODES.register("random", doc='uniform over the candidates, scores ignored ("w/o T. Selection")')
def _pick_random(scores: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.randint(scores.numel(), (1,), generator=generator).item())


def candidate_scores(
    cfg: ExGRPOConfig,
    *,
    mask: torch.Tensor,
    token_entropy: torch.Tensor | None = None,
    token_logp: torch.Tensor | None = None,
    response_ids: torch.Tensor | None = None,
    pad_id: int | None = None,
    prefix_values: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Scores of all N candidates of one batch under `cfg.selection_metric` and `cfg.entropy_mask`.

    With `entropy_mask="as_released"` (and metric `entropy` or `nll`; the release masks both) the values are
    moved into the released window and averaged with the released mask; this needs `response_ids` [N, T]
    (right-padded with `pad_id`) and, for an exact re-creation, `prefix_values` [N, T] of the metric's value at
    the positions before each response (see `to_left_padded_window`). N must be all candidates of one collate
    call in order, because the released mask depends on the global candidate index.

    Args:
        mask: [N, T] response-token mask (right-padded layout for `as_released`).
        token_entropy / token_logp: [N, T], as in `sequence_scores`.
    Returns:
        [N] scores.
    """
    metric = cfg.selection_metric
    if metric == "random" or cfg.entropy_mask == "response":
        return sequence_scores(
            metric, token_entropy=token_entropy, token_logp=token_logp, mask=mask, generator=generator
        )
    if metric not in ("entropy", "nll"):  # the released mask is defined for the released metrics only
        raise ConfigError(
            "entropy_mask", f"'as_released' applies to selection_metric entropy or nll, got {metric!r}"
        )
    if response_ids is None or pad_id is None:
        raise ValueError("entropy_mask='as_released' needs response_ids [N, T] and pad_id")
    source = token_entropy if metric == "entropy" else (None if token_logp is None else -token_logp)
    if source is None:
        raise ValueError(
            f"selection metric {metric!r} needs {'token_entropy' if metric == 'entropy' else 'token_logp'}"
        )
    window = to_left_padded_window(source, mask, prefix_values)
    return released_sequence_scores(window, released_entropy_mask(response_ids, pad_id))


__all__ = [
    "RELEASED_CHUNK_SIZE",
    "SCORE_FNS",
    "SELECTION_METRICS",
    "SELECTION_MODES",
    "metric_needs",
    "candidate_scores",
    "released_entropy_mask",
    "released_sequence_scores",
    "select_index",
    "sequence_scores",
    "to_left_padded_window",
    "token_entropy_from_logits",
]
