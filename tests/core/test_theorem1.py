"""Monte-Carlo check of Theorem 1 (paper App. D): importance-weighted replay is unbiased.

Toy policy: trajectories are two binary tokens, so there are 4 of them, with an autoregressive categorical policy
π_θ (first-token logits, then second-token logits given the first) and a different behaviour policy π_past.
The replayed trajectory's contribution g(o*, G) = A(o*, G) · φ(o*) depends on the whole mixed group G = {o*} ∪
{o_1..o_{K−1}} through the group advantage (exgrpo.core.advantages, also with std normalisation), times a
score-function component φ(o*) = v·∇_θ log π_θ(o*). Theorem 1: with o* ~ π_past and the sequence-level weight
W = Π_t π_θ(o*_t)/π_past(o*_t), E[W·g] equals E[g] with o* ~ π_θ (computed exactly by enumeration). The
unweighted estimate must miss (so the check can fail), and so does the shaped f(W) = W/(W+β), which trades
bias for bounded variance (paper Prop. 2 discussion).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from exgrpo.core.advantages import group_advantages
from exgrpo.core.token_loss import shaped_weight

K = 8  # 1 replayed + 7 fresh, as in the paper
Z99 = 2.5758  # two-sided 99% normal quantile
TRAJ = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])  # the 4 possible trajectories (token ids)
REWARD = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)


def token_logp(first_logits: torch.Tensor, second_logits: torch.Tensor) -> torch.Tensor:
    """[4, 2] per-token log-probs of each trajectory under an autoregressive 2-step categorical policy."""
    lp1 = torch.log_softmax(first_logits, -1)[TRAJ[:, 0]]
    lp2 = torch.log_softmax(second_logits, -1)[TRAJ[:, 0], TRAJ[:, 1]]
    return torch.stack([lp1, lp2], dim=-1)


THETA = (
    torch.tensor([0.3, -0.2], dtype=torch.float64),
    torch.tensor([[0.5, -0.5], [-1.0, 0.8]], dtype=torch.float64),
)
PAST = (
    torch.tensor([-0.6, 0.4], dtype=torch.float64),
    torch.tensor([[-0.2, 0.9], [0.7, -0.3]], dtype=torch.float64),
)
LOGP_THETA = token_logp(*THETA)
LOGP_PAST = token_logp(*PAST)
P_THETA = LOGP_THETA.sum(-1).exp()
P_PAST = LOGP_PAST.sum(-1).exp()
W = (LOGP_THETA - LOGP_PAST).sum(-1).exp()  # sequence-level importance weight, product of token ratios


def score_component() -> torch.Tensor:
    """φ(o) = v · ∇_θ log π_θ(o) for each of the 4 trajectories, by autograd."""
    v = torch.tensor([0.7, -1.1, 0.4, 1.3, -0.9, 0.2], dtype=torch.float64)
    out = []
    for i in range(4):
        a = THETA[0].clone().requires_grad_(True)
        b = THETA[1].clone().requires_grad_(True)
        token_logp(a, b)[i].sum().backward()
        out.append(torch.dot(v, torch.cat([a.grad, b.grad.flatten()])))
    return torch.stack(out)


PHI = score_component()


def replay_contribution(o_star: torch.Tensor, fresh: torch.Tensor, std_norm: bool) -> torch.Tensor:
    """g(o*, G) for n groups: o_star [n] trajectory ids, fresh [n, K−1] ids → [n]."""
    n = o_star.shape[0]
    members = torch.cat([o_star[:, None], fresh], dim=1)  # [n, K], replayed member first
    group = torch.arange(n).repeat_interleave(K)
    adv = group_advantages(REWARD[members].flatten(), group, std_norm=std_norm).view(n, K)
    return adv[:, 0] * PHI[o_star]


def exact_on_policy(std_norm: bool) -> float:
    """E_{o*~π_θ, fresh~π_θ}[g] by enumerating all 4^K groups."""
    combos = torch.tensor(list(itertools.product(range(4), repeat=K)))  # [65536, K]
    prob = P_THETA[combos].prod(dim=1)
    return float((prob * replay_contribution(combos[:, 0], combos[:, 1:], std_norm)).sum())


def mc_mean(values: torch.Tensor) -> tuple[float, float]:
    return float(values.mean()), float(values.std() / values.numel() ** 0.5)


@pytest.mark.parametrize("std_norm", [False, True])
def test_importance_weighted_replay_is_unbiased(std_norm):
    n = 60_000
    g = torch.Generator().manual_seed(1234)
    o_star = torch.multinomial(P_PAST, n, replacement=True, generator=g)  # replay: o* ~ π_past
    fresh = torch.multinomial(P_THETA, n * (K - 1), replacement=True, generator=g).view(n, K - 1)
    contrib = replay_contribution(o_star, fresh, std_norm)
    exact = exact_on_policy(std_norm)

    weighted, se_w = mc_mean(W[o_star] * contrib)
    assert abs(weighted - exact) < Z99 * se_w, (weighted, exact, se_w)

    unweighted, se_u = mc_mean(contrib)
    assert abs(unweighted - exact) > 5 * Z99 * se_u, (unweighted, exact, se_u)  # the test can fail

    shaped, se_s = mc_mean(shaped_weight(W[o_star], 0.1) * contrib)
    assert abs(shaped - exact) > 5 * Z99 * se_s, (shaped, exact, se_s)  # f(W) is biased, as the paper says


def test_conditional_on_fresh_members_matches_exactly():
    # Theorem 1 conditions on the K−1 fresh members: with 4 outcomes the change of measure is a finite sum
    fresh = torch.tensor([[0, 1, 2, 3, 3, 1, 2]]).expand(4, K - 1)
    g_all = replay_contribution(torch.arange(4), fresh, std_norm=True)
    on_policy = float((P_THETA * g_all).sum())
    replay_weighted = float((P_PAST * W * g_all).sum())
    replay_plain = float((P_PAST * g_all).sum())
    assert replay_weighted == pytest.approx(on_policy, abs=1e-12)
    assert abs(replay_plain - on_policy) > 0.05
    assert float(P_THETA.sum()) == pytest.approx(1.0) and float(P_PAST.sum()) == pytest.approx(1.0)
