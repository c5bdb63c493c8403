"""Arena-Hard's style-controlled score: a Bradley-Terry fit of the model vs the baseline with style features.

Follows upstream show_result.py's `--control-features length markdown` (lmarena/arena-hard-auto, Apache-2.0,
commit 005ac120c11d3a1bbc35b0408a926dbc614de9c7; read, not copied): per battle, four features of the model's
answer against the baseline's,
- length: (len_m - len_b) / (len_m + len_b);
- headers, lists, bold (markdown counts outside ``` code blocks, `markdown_counts`), as densities per length
  unit d = count / len: (d_m - d_b) / (d_m + d_b + 1);
each z-scored over the battles; the outcome (the battle score: 1, 0.5, 0) is fitted by a logistic (BT) model on
[+1 for the model, features] without intercept, and the style-controlled win rate is sigmoid of the model's
coefficient: its chance of beating the baseline with the style differences held at the mean. Upstream
bootstraps the fit 100 times and reports the median with the 5th/95th percentiles; so does `style_controlled`.

Departures, stated: length is counted by `length_fn` (default: whitespace words) where upstream uses tiktoken's
gpt-4o token count (not installed here; pass a tokenizer's count to match); the fit is scikit-learn's
unpenalised logistic regression with a tie split into a win and a loss of weight 1/2 each (the same likelihood
as upstream's soft-label BT loss); a feature that is constant over the battles (zero spread, so no z-score)
is left out of the fit, where upstream would divide by zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

_CODE = re.compile(r"```[^`]*```")
_HEADER = re.compile(r"^#{1,6}\s", re.MULTILINE)
_LIST = re.compile(r"^\s*(?:\d+\.|[-*+])\s", re.MULTILINE)
_BOLD = (re.compile(r"\*\*[^*\n]+\*\*"), re.compile(r"__[^_\n]+__"))


def markdown_counts(text: str) -> tuple[int, int, int]:
    """(headers, list items, bold spans) of an answer, code blocks removed first (upstream add_markdown_info)."""
    text = _CODE.sub("", text)
    bold = sum(len(p.findall(text)) for p in _BOLD)
    return len(_HEADER.findall(text)), len(_LIST.findall(text)), bold


def style_features(
    model_answer: str, baseline_answer: str, length_fn: Callable[[str], int] = lambda s: len(s.split())
) -> list[float]:
    """The four raw (not yet z-scored) style differences of one question's model vs baseline answer."""
    len_m, len_b = max(length_fn(model_answer), 1), max(length_fn(baseline_answer), 1)
    feats = [(len_m - len_b) / (len_m + len_b)]
    for c_m, c_b in zip(markdown_counts(model_answer), markdown_counts(baseline_answer)):
        d_m, d_b = c_m / len_m, c_b / len_b
        feats.append((d_m - d_b) / (d_m + d_b + 1))
    return feats


def _design(features: np.ndarray) -> np.ndarray:
    """[1 | z-scored non-constant features]: the model's indicator column, then the style columns."""
    spread = features.std(axis=0, ddof=1) if len(features) > 1 else np.zeros(features.shape[1])
    keep = spread > 1e-12
    z = (features[:, keep] - features[:, keep].mean(axis=0)) / spread[keep]
    return np.hstack([np.ones((len(features), 1)), z])


def _fit_win_rate(x: np.ndarray, y: np.ndarray) -> float:
    """sigmoid of the model coefficient of an unpenalised logistic fit with soft (0, 0.5, 1) outcomes."""
    from sklearn.linear_model import LogisticRegression

    if np.all(y == y[0]) and y[0] in (0.0, 1.0):
        return float(y[0])  # all wins (or all losses): the MLE is at infinity; its limit
    rows = np.vstack([x, x])
    labels = np.concatenate([np.ones(len(y)), np.zeros(len(y))])
    weights = np.concatenate([y, 1.0 - y])
    fit = LogisticRegression(C=np.inf, fit_intercept=False, max_iter=1000)  # C=inf: unpenalised
    fit.fit(rows, labels, sample_weight=weights)
    return float(1.0 / (1.0 + np.exp(-fit.coef_[0, 0])))


def _arrays(scores: Sequence[float], features: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(scores, dtype=float)
    f = np.asarray(features, dtype=float).reshape(-1, 4) if len(features) else np.zeros((0, 4))
    if f.shape != (y.size, 4):
        raise ValueError(f"features: expected shape ({y.size}, 4), got {f.shape}")
    return y, f


def fit_style_controlled(scores: Sequence[float], features: Sequence[Sequence[float]]) -> float:
    """The style-controlled win rate of one fit on all battles (no bootstrap)."""
    y, f = _arrays(scores, features)
    return _fit_win_rate(_design(f), y) if y.size else float("nan")


def style_controlled(
    scores: Sequence[float], features: Sequence[Sequence[float]], *, n_boot: int = 100, seed: int = 0
) -> dict[str, float]:
    """Style-controlled win rate: median and 5th/95th percentile over `n_boot` bootstrap fits of the battles.

    `scores[i]` is battle i's outcome for the model, `features[i]` the raw style differences of its question
    (`style_features`; repeated for each battle of the question, as upstream explodes battles).
    """
    y, f = _arrays(scores, features)
    if y.size == 0:
        return {"win_rate": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
    x = _design(f)
    rng = np.random.default_rng(seed)
    rates = [_fit_win_rate(x[idx], y[idx]) for idx in rng.integers(0, y.size, size=(n_boot, y.size))]
    return {
        "win_rate": float(np.quantile(rates, 0.5)),
        "ci_low": float(np.quantile(rates, 0.05)),
        "ci_high": float(np.quantile(rates, 0.95)),
    }


__all__ = ["fit_style_controlled", "markdown_counts", "style_controlled", "style_features"]
