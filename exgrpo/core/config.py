"""One configuration object for the ExGRPO method (paper §3-4; docs/method.md maps each field to its equation).

Every switch of the method lives here, with the paper's meaning as default. Where the released
code (ElliottYan/LUFFY, folder ExGRPO/) behaves differently, that behaviour sits behind a named
switch, declared with the field (`paper=`, `released=`, `ablation=`), and `exgrpo.core.release_switches.SWITCHES`
lists them for the README table; the named variants built from these
fields (the paper's ablations) are `exgrpo.core.variants`. Both runtimes (the CPU trainer and the
verl plug-in) and the Snakemake config validation read this one object, so there is one source of
truth.

Departures from the paper, stated up front:
- `sigma_units` defaults to "count" (σ=1 in success-count units, σ_acc=0.125), as released. The
  paper's text reads σ=1 in accuracy units, but its own sensitivity discussion only makes sense in
  count units (docs/method.md §7), so the released reading is what the paper's numbers came from.
- `entropy_mask` defaults to "response" (clean mean over response tokens), not the released mask
  (docs/method.md §7, upstream issue #57); "as_released" reproduces the bug.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from exgrpo.core import declared
from exgrpo.core.config_dict import DictRoundTrip
from exgrpo.core.config_rules import check_tied_fields
from exgrpo.core.declared import ConfigError, check_fields, choices_of, setting
from exgrpo.core.registry import (
    QUESTION_SAMPLERS,
    REPLAY_WEIGHTINGS,
    SELECTION_METRICS,
    SELECTION_MODES,
    Registry,
    RegistryChoices,
)


@dataclass
class ExGRPOConfig(DictRoundTrip):
    """All method settings. Each field is declared once (`exgrpo.core.declared.setting`: type, default, range or
    choices); its docstring follows it (CleanRL style). `from_dict`, `replace`, `to_dict`: `DictRoundTrip`."""

    # ---------------------------------------------------------------- method
    method: str = setting("exgrpo", choices=frozenset({"on_policy", "exgrpo"}))
    """`on_policy` (Dr.GRPO baseline, paper Table 1 "On-Policy") or `exgrpo`."""
    n_rollouts: int = setting(8, lo=1)
    """K: rollouts per question (paper §3.3). Experiential groups have 1 replayed + K-1 fresh."""
    rho: float = setting(
        0.5, lo=0.0, hi=1.0, hi_open=True, paper=0.5, released=0.5, ablation="Table 6 ρ=25% / 75%"
    )
    """ρ: share of the batch's questions drawn from the buffer, in [0, 1) (paper Eq. 4). n_exp = min(#eligible, ⌊ρB⌋)."""
    n_exp_rounding: str = setting(
        "floor",
        choices=frozenset({"floor", "int"}),
        paper="floor (⌊ρB⌋)",
        released="int (int(B·ρ) in floats)",
        ablation="bookkeeping",
    )
    """How ⌊ρB⌋ is computed: `floor` (the exact floor, the paper's ⌊ρB⌋; a 1e-9 guard absorbs float error) or `int` (released `int(B·ρ)` on the float product: 41 of the 512,000 points B = 1..512, ρ = 0.000..0.999 in steps of 0.001 differ, e.g. B=50, ρ=0.58 gives 28, not 29)."""

    # ---------------------------------------------------------------- reward (paper §3.5)
    reward_region: str = setting(
        "after_think",
        choices=frozenset({"after_think", "full"}),
        paper="after_think",
        released="after_think (reward_impl_version=3)",
        ablation="grader study",
    )
    """Which part of the response is graded: `after_think` (text after `</think>`, as released) or `full`."""
    reward_require_think_close: bool = True
    """With `after_think`: a response without `</think>` scores 0 (released). False grades the whole response instead."""
    reward_answer_rule: str = setting(
        "release",
        choices=frozenset({"release", "release_060", "last_box"}),
        paper="release (Math-Verify)",
        released="release (math-verify 0.6.0 on the region)",
        ablation="last_box: stricter grader study",
    )
    """`release`: the region as math-verify 0.6.0 (pinned by the release) read it, several boxes joined by
    "and"/"or"/"," as a set and a final answer after the last box included; `release_060`: also 0.6.0's readings
    where 0.9.0 changed them (percent numbers, floats against irrationals, equations, decimal commas, boxed
    golds: equal to 0.6.0 on math-verify's 269 test cases); `last_box`: only the last box."""
    reward_timeout_s: float = setting(5.0, lo=0, lo_open=True)
    """Wall-clock timeout per answer, enforced by a process pool (never signals in threads)."""
    reward_max_chars: int = setting(4000, lo=1)
    """Graded text is capped to its last N characters before parsing (answers come last)."""
    reward_workers: int = setting(1, lo=1)
    """Processes in the verifier pool."""
    reward_kind: str = setting(
        "binary",
        choices=frozenset({"binary", "step_credit", "reward_model"}),
        paper="binary (Math-Verify); Table 2: a reward model's score",
        released="binary",
        ablation="Table 2 analogue on the tiny task (step_credit)",
    )
    """The training reward: `binary` (1 iff the final answer is right, paper §3.1); `step_credit`, the tiny
    task's continuous reward for the Table 2 analogue: (reasoning steps equal to the canonical step at their
    position + the binary answer reward) / (steps + 1), in [0, 1] and 1 only for a fully right response (CPU
    trainer); or `reward_model`, paper §5.3's: a discriminative reward model's score of (prompt, response),
    the model named by the study and served by verl (verl plug-in only). Both continuous kinds need
    `difficulty_signal: reward_std`."""

    drop_fresh_overflow: bool = setting(
        False,
        paper="False (B_on = B − B_exp)",
        released="True (fresh rows dropped)",
        ablation="data consumption",
    )
    """Released: each step consumes B fresh questions and drops the n_exp it does not use (docs/method.md §7); False consumes B - n_exp."""
    fresh_anchored: bool = False
    """Replay on top of the fresh questions: B fresh plus n_exp replayed per step (a batch of B + n_exp groups), instead of the paper's B - n_exp fresh plus n_exp replayed (docs/regimes.md, R1). CPU trainer only."""

    # ---------------------------------------------------------------- experience buffer (paper §4.1, Alg. 1)
    buffer_lbound: int = setting(0, lo=0)
    """A question is eligible for the buffer when lbound < k <= rbound (k successes of K)."""
    buffer_rbound: int = -1
    """Upper eligibility bound on k; -1 means K-1 (released: lbound=0, rbound=7 for K=8)."""
    max_traj_per_question: int = setting(0, lo=0)
    """Cap on stored trajectories per question (oldest dropped); 0 = unlimited, as released."""
    replay_counts_in_k: bool = setting(
        True, paper="True (group of K)", released=True, ablation="bookkeeping quirk"
    )
    """For an experiential group, k counts the replayed (always correct) trajectory too: the group is 1+7 (released; docs/method.md §7)."""
    collect_before_activation: bool = setting(
        False, paper="not stated", released=False, ablation="buffer warm-up"
    )
    """Collect experience from step 1. Released: collection starts only once replay is active (docs/method.md §7)."""
    retire_from_buffer: bool = setting(True, paper=True, released=True, ablation="retirement")
    """Questions with k = K leave the buffer at the end of every step (paper Alg. 1, E ← E \\ S)."""
    retire_from_data: str = setting(
        "epoch",
        choices=frozenset({"epoch", "never"}),
        paper="not stated",
        released="epoch",
        ablation="retirement",
    )
    """When retired questions leave the training data: `epoch` (at epoch boundaries, as released) or `never`."""
    retire_data_margin: int = setting(20, lo=0)
    """Released: pruning the data only happens if more than batch + margin questions remain. Which count is compared (after or before pruning) is `retire_data_guard`."""
    retire_data_guard: str = setting(
        "after",
        choices=frozenset({"after", "before"}),
        paper="not stated",
        released="before (dataset size checked before pruning)",
        ablation="retirement",
    )
    """When the margin is checked at an epoch boundary: `after` (prune only if more than batch + margin questions remain afterwards; the project's reading, the paper is silent) or `before` (released: prune whenever the data held more than batch + margin before pruning, however few remain; 200 questions, 190 retired, B=16 keeps 10)."""
    keep_stale_bucket: bool = setting(
        False,
        paper="False (buckets by the latest correctness)",
        released="True (a stored question scoring 0/K keeps its old bucket, replayable, counted in n_exp)",
        ablation="bookkeeping",
    )
    """Released: a buffered question whose new k falls outside (lbound, rbound] (e.g. 0/8) keeps its old bucket, so it stays replayable and counts towards n_exp. False (paper: buckets by the latest correctness) drops it from the buckets until k is eligible again; its trajectories stay stored either way."""
    retired_review_fraction: float = setting(
        0.0,
        lo=0.0,
        hi=1.0,
        paper=0.0,
        released="0 (no code)",
        ablation="Table 7 w/ Retired Review (0.1 every 25)",
    )
    """"Retired Review" (paper Table 7): fraction of retired questions un-retired (removed from the retired set and returned to the training data) every `retired_review_every` steps; 0 = off."""
    retired_review_every: int = setting(25, lo=1)
    """Retired Review period in steps (paper Table 7 uses 10% every 25 steps)."""

    # ---------------------------------------------------------------- question sampler (paper §4.1, Alg. 2)
    sampler: str = setting(
        "gaussian",
        choices=QUESTION_SAMPLERS,
        paper="gaussian",
        released="gaussian (script); null = uniform (YAML default)",
        ablation="Table 6 w/o Q. Selection",
    )
    """Bucket weighting: `gaussian` (paper), `uniform` ("w/o Q. Selection"), `linear`, `sqrt`, `linear_clip` (released options)."""
    sampler_mu: float = setting(
        0.5, paper=0.5, released="0.5 (hard-coded)", ablation="Table 3: hard-biased 0.25"
    )
    """Gaussian mean, in accuracy units k/K (0.5 paper default; 0.25 = "Hard-Biased", Table 3)."""
    sampler_sigma: float = setting(
        1.0,
        lo=0,
        lo_open=True,
        paper=1.0,
        released="1.0 (hard-coded)",
        ablation="Table 3: wider 1.5 / narrower 0.5",
    )
    """Gaussian σ, in the units given by `sigma_units` (Table 3 varies 0.5 / 1.0 / 1.5)."""
    sigma_units: str = setting(
        "count",
        choices=frozenset({"count", "accuracy"}),
        paper="σ=1, units unstated (count is what ran: σ_acc=0.125)",
        released="count (hard-coded)",
        ablation="Table 3 σ variants",
    )
    """`count`: σ in success counts, as released (σ_acc = σ/K); `accuracy`: σ in units of k/K, the paper's literal text."""
    sample_range: str = setting("all", choices=frozenset({"all", "first_half", "last_half"}))
    """Released `exp_sample_range`: restrict candidates by insertion order to `all`, `first_half` or `last_half`."""
    difficulty_signal: str = setting(
        "success",
        choices=frozenset({"success", "reward_std"}),
        paper="success",
        released="success (no code for reward_std)",
        ablation="Table 2 continuous reward",
    )
    """Bucket key: `success` (k of K, binary reward) or `reward_std` (paper §5.3 continuous-reward extension)."""

    # ---------------------------------------------------------------- trajectory selection (paper §4.1)
    selection_mode: str = setting(
        "argmin",
        choices=SELECTION_MODES,
        paper="argmin",
        released="argmin",
        ablation="Table 6 w/ Highest-Entropy T. (argmax), w/o T. Selection (random)",
    )
    """`argmin` (lowest score, paper), `argmax` ("w/ Highest Entropy T."), or `random` ("w/o T. Selection")."""
    selection_metric: str = setting(
        "entropy",
        choices=SELECTION_METRICS,
        paper="entropy",
        released="ent (script); random (YAML default)",
        ablation="§F.3 PPL selection",
    )
    """Score: `entropy` (mean full-vocabulary token entropy), `nll` (mean NLL, log-PPL; Alg. 1 line 11) or `random`."""
    selection_policy: str = setting(
        "current",
        choices=frozenset({"current", "at_collection"}),
        paper="current",
        released="current",
        ablation="cheaper at_collection (verl)",
    )
    """Score under the `current` policy with an extra forward pass (paper), or use the value recorded `at_collection` (cheaper)."""
    entropy_mask: str = setting(
        "response",
        choices=frozenset({"response", "as_released"}),
        paper="response",
        released="as_released (pad-position mask, last chunk)",
        ablation="measures issue #57",
    )
    """`response`: mean over response tokens; `as_released`: the released pad-position mask (docs/method.md §7, issue #57)."""

    # ---------------------------------------------------------------- advantages (paper §3.1, Dr.GRPO)
    adv_std_norm: bool = setting(
        False, paper=False, released="False (script); True (YAML default)", ablation="Dr.GRPO vs GRPO"
    )
    """Divide group advantages by the group std (vanilla GRPO). False = mean-centred only (Dr.GRPO, paper)."""
    adv_eps: float = setting(1e-6, lo=0, lo_open=True)
    """Epsilon added to the std when `adv_std_norm` is on."""

    # ---------------------------------------------------------------- policy loss (paper Eq. 4, §1.8-1.9)
    clip_eps: float = setting(0.2, lo=0, lo_open=True)
    """PPO clip ε for on-policy tokens (before replay activates, or always with `keep_clip_after_activation`)."""
    keep_clip_after_activation: bool = setting(
        False,
        paper="False (App. D.1: clipping removed)",
        released="False (all tokens unclipped)",
        ablation="isolates the clip removal",
    )
    """Released removes clipping for all tokens once replay is active (docs/method.md §7); True keeps PPO clip on fresh tokens."""
    replay_shaping: str = setting(
        "shaped",
        choices=REPLAY_WEIGHTINGS,
        paper="shaped (β=0.1); w/o Shaping = clipped",
        released="p_div_p_0.1; w/o Shaping = no_reshape (unclipped)",
        ablation="Table 6 w/o Shaping",
    )
    """Replayed tokens: `shaped` f(w)=w/(w+β) (paper); `clipped` PPO ratio ("w/o Shaping", Table 6); `unclipped` −w·A (released no_reshape)."""
    shaping_beta: float = setting(0.1, lo=0, lo_open=True)
    """β of the policy shaping f(w) = w/(w+β)."""
    is_correction: bool = setting(True, paper=True, released=True, ablation="Table 6 w/o IS Correction")
    """Replayed ratio w = π_θ/π_past with recorded behaviour log-probs (paper); False uses π_θold ("w/o IS Correction")."""
    loss_agg: str = setting(
        "seq_sum_const",
        choices=frozenset({"seq_sum_const", "token_mean", "seq_mean"}),
        paper="seq_sum_const",
        released="seq_sum_const (/8192)",
        ablation="aggregation study",
    )
    """`seq_sum_const`: Σ tokens over sequences / constant (released, Dr.GRPO); `token_mean`; `seq_mean` (mean of per-sequence token means)."""
    loss_norm_const: int = setting(0, lo=0)
    """Constant normaliser for `seq_sum_const`; 0 = the maximum response length (released: 8192)."""
    entropy_coef: float = setting(0.001, lo=0)
    """Entropy bonus coefficient on the token-mean entropy (paper Table 4)."""
    entropy_scale: str = setting(
        "token_mean",
        choices=frozenset({"token_mean", "per_micro_batch"}),
        paper="token_mean (coefficient 0.001)",
        released="per_micro_batch (Σ of micro-batch token means, FSDP rank average)",
        ablation="the release's entropy-bonus size (verl, several micro-batches or ranks)",
    )
    """Entropy bonus on a mini-batch split into micro-batches and ranks (the verl plug-in): `token_mean`, the
    token mean over the whole mini-batch (paper); `per_micro_batch`, each micro-batch's own token mean summed
    over micro-batches and averaged over ranks (released: gradient accumulation 1, FSDP average), i.e. about
    ranks x micro-batches times larger relative to the policy term. Identical with one micro-batch on one rank
    (the CPU trainer)."""
    grad_scale: str = setting(
        "whole_batch",
        choices=frozenset({"whole_batch", "as_released"}),
        paper="whole_batch (the mini-batch's loss)",
        released="as_released (1/dp: FSDP averages ranks)",
        ablation="the release's clipping and skip points on several ranks",
    )
    """Gradient scale of a mini-batch split over data-parallel ranks (the verl plug-in): `whole_batch`, the
    gradient of the whole mini-batch's loss (paper); `as_released`, that divided by the number of ranks (the
    release's FSDP averaged ranks whose losses already carried the global normaliser), so grad-norm clipping and
    the skip bound act where the release's did. Identical on one rank (the CPU trainer)."""
    kl_coef: float = setting(0.0, lo=0)
    """KL coefficient to a reference policy; 0 = no KL (paper)."""
    grad_clip: float = setting(1.0, lo=0)
    """Gradient-norm clip."""
    log_ratio_clamp: float = setting(
        20.0,
        lo=0,
        paper="not stated (no clamp in Eq. 4)",
        released="0 (no clamp)",
        ablation="numerical safeguard",
    )
    """|log π_θ − log π_old| (and the KL's log-ratio) is clamped to this before exp, as verl 0.9 does, so an extreme ratio cannot overflow; 0 = no clamp, as released (ExGRPO's loss has none: at log-ratio 25 it gives −A·e^25 and a gradient, the clamp −A·e^20 and none). The paper states no clamp."""
    skip_grad_bound: float = setting(
        500.0, lo=0, paper="not stated", released=500.0, ablation="optimizer robustness"
    )
    """Released: skip the optimizer step when the grad norm is non-finite or above this; 0 disables."""

    # ---------------------------------------------------------------- delayed start (paper §4.2)
    delayed_start: bool = setting(
        True, paper="True (off for Llama base)", released=True, ablation="Table 5 Llama base"
    )
    """Run on-policy until batch pass@1 exceeds `start_threshold`, then switch to ExGRPO (one way). Off for Llama base (paper §5.1)."""
    start_threshold: float = setting(0.35, lo=0.0, hi=1.0)
    """Batch pass@1 (fraction of all responses with reward 1) that activates replay."""

    # ---------------------------------------------------------------- difficulty-masked GRPO (paper §3.2, Eq. 14)
    difficulty_mask: str = setting(
        "none",
        choices=frozenset({"none", "hard", "medium", "easy"}),
        paper="none",
        released="none (no code)",
        ablation="Table 9/10, Fig. 1a masked GRPO",
    )
    """Preliminary study: only questions whose online accuracy is in this bucket get gradient: `none`, `hard`, `medium`, `easy`."""
    mask_hard_high: float = 0.25
    """Hard = (0, mask_hard_high]."""
    mask_easy_low: float = 0.75
    """Easy = [mask_easy_low, 1); Medium = (mask_hard_high, mask_easy_low)."""

    # ------------------------------------------------------------------ helpers
    @property
    def rbound(self) -> int:
        """Resolved upper eligibility bound (K-1 when `buffer_rbound` is -1)."""
        return self.n_rollouts - 1 if self.buffer_rbound < 0 else self.buffer_rbound

    @property
    def sigma_count(self) -> float:
        """σ in success-count units."""
        return self.sampler_sigma if self.sigma_units == "count" else self.sampler_sigma * self.n_rollouts

    def validate(self) -> ExGRPOConfig:
        """Check every field (its declaration: type, choices, range), then the rules that tie fields together;
        raise ConfigError naming the first bad one. Returns self."""
        check_fields(self)
        check_tied_fields(self)
        return self


STATIC_CHOICES: dict[str, frozenset[str]] = {
    name: frozenset(allowed)
    for name, allowed in choices_of(ExGRPOConfig).items()
    if not isinstance(allowed, Registry)
}
"""Allowed values of the enumerated fields that are not implementations (from their declarations)."""


CHOICES: Mapping[str, frozenset[str]] = RegistryChoices(STATIC_CHOICES)
"""Allowed values of every enumerated field (derived: a registered plug-in is a valid choice)."""


@lru_cache(maxsize=1)
def field_docs() -> dict[str, str]:
    """Field name → docstring of `ExGRPOConfig` (for the README and error messages)."""
    return declared.field_docs(ExGRPOConfig)


__all__ = [
    "CHOICES",
    "STATIC_CHOICES",
    "ConfigError",
    "ExGRPOConfig",
    "field_docs",
]
