"""One owner for the trainer settings of both runtimes (beside `exgrpo.core.config.ExGRPOConfig`, which owns the method's).

`TrainerSettings` holds every setting that says how a run is trained rather than what the method is: steps,
batch, optimiser, sampling, validation and checkpoint cadence, threads. Each field documents its meaning, its
default at each scale, its range, and what the verl route (`exgrpo.verl_plugin.tiny_route`) makes of it: the
verl key(s) it becomes, or that the route refuses it, with the reason. The CPU trainer reads its settings from
this object (it replaced `exgrpo.tiny.trainer.TrainArgs`); the verl route writes every verl key it derives
from it; `exgrpo.settings.resolve` validates a run's trainer settings against it. Torch-free, so configuration code can
import it without importing a runtime.

Defaults per scale (the `paper` entry of each field's metadata):
- tiny: the dataclass defaults, then the backbone's `steps` and `max_response_length`, then the budget preset
  (`exgrpo.settings.resolve.BUDGETS`), then the study's `trainer:` overrides.
- paper: verl's trainer reads `verl_plugin/config/exgrpo_trainer.yaml` (paper Table 4, run_exgrpo.sh) and the
  backbone entry; `paper` states those values, and tests/settings/test_trainer_settings.py checks that the yaml agrees.

Fixed on both routes, so not settings: AdamW's eps is torch's default 1e-8 (verl 0.9.1 has no key for it), the
learning rate is constant with no warm-up (exgrpo_trainer.yaml `lr_scheduler_type: constant`,
`lr_warmup_steps_ratio: 0`), one PPO epoch per step (`ppo_epochs: 1`), validation top-p 1.0.

Departures from the paper, stated up front:
- tiny-scale batch, lengths and learning rate are scaled down (B=16 prompts, 72 new tokens, lr 1e-4 instead of
  128, 8192, 1e-6).
- `adam_beta2` is 0.99 at tiny scale, not the paper's 0.999: the tiny runs are 100-300 steps, shorter than the
  ~1000-step averaging window of β2=0.999, and the committed tiny study was trained with 0.99. The paper
  scale uses 0.999. Both routes carry the schema's value (the verl tiny route included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from exgrpo.core.declared import ConfigError, check_fields, setting

NOT_AT_PAPER = "not a paper-scale setting (CPU trainer only)"


def _setting(
    default: Any,
    *,
    paper: Any,
    verl: tuple[str, ...] | Mapping[str, Callable[[Any, int], Any]] = (),
    refused: str = "",
    runtime_only: bool = False,
    **allowed: Any,
) -> Any:
    """A trainer setting (`exgrpo.core.declared.setting`): its `paper` default (a value, or a sentence where the
    backbone decides), the `verl` keys it becomes on the verl route (a tuple: each key gets the field's value;
    a mapping: key -> fn(settings, max_prompt_length), for a value derived from it) or the reason it is `refused` there (then
    only the default is accepted), `runtime_only` (where or how far a process runs, not what it trains: not
    fingerprinted) and its `allowed` values (lo, hi, lo_open, hi_open, items)."""
    if bool(verl) == bool(refused):
        raise ValueError("a trainer setting either becomes verl keys or is refused on the verl route")
    return setting(default, paper=paper, verl=verl, refused=refused, runtime_only=runtime_only, **allowed)


_ACTOR, _ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"


def _token_budget(s: TrainerSettings, prompt: int) -> int:
    """Per-GPU token budget of a dynamic micro-batch: 4 x the model length (prompt + response)."""
    return 4 * (prompt + s.max_new_tokens)


def _betas(s: TrainerSettings, prompt: int) -> list[float]:
    return [float(b) for b in s.betas]


@dataclass
class TrainerSettings:
    """All trainer settings, each declared once (`_setting`); field docstrings follow each field (CleanRL style)."""

    steps: int = _setting(
        200,
        paper="the backbone's `steps` (700 for Qwen2.5-Math-7B)",
        verl=("trainer.total_training_steps",),
        lo=1,
    )
    """Training steps (one rollout batch each). Tiny: the backbone's `steps` (100 for tiny-math)."""
    batch_size: int = _setting(16, paper=128, verl=("data.train_batch_size",), lo=1)
    """B: questions per step (fresh + replayed; B fresh + replayed with `fresh_anchored`). Paper Table 4: 128."""
    train_size: int = _setting(
        0, paper=0, lo=0, refused="a regime setting: the verl route converts the whole train split"
    )
    """Training questions used: the first N of the train split's (shuffled) stored order; 0 = all of them."""
    train_difficulties: tuple[int, ...] = _setting(
        (),
        paper=(),
        refused="a regime setting: the verl route converts the whole train split",
        items={"lo": 1},
    )
    """Keep only training questions with these numbers of operations (e.g. (3, 4): a harder mix); () = all."""
    mini_batches: int = _setting(
        2,
        paper=2,
        verl={f"{_ACTOR}.ppo_mini_batch_size": lambda s, prompt: s.batch_size // s.mini_batches},
        lo=1,
    )
    """Optimizer steps per training step (paper: 128 prompts, mini-batch 64 → 2); verl: mini-batches of
    `batch_size / mini_batches` prompts (refused unless it divides `batch_size`)."""
    lr: float = _setting(1e-4, paper=1e-6, verl=(f"{_ACTOR}.optim.lr",), lo=0, lo_open=True)
    """AdamW learning rate, constant (1e-4: the largest that gains on the tiny task without eroding greedy
    accuracy; paper Table 4: 1e-6). Must be > 0."""
    adam_beta1: float = _setting(
        0.9, paper=0.9, verl={f"{_ACTOR}.optim.betas": _betas}, lo=0.0, hi=1.0, hi_open=True
    )
    """AdamW β1 (paper: 0.9)."""
    adam_beta2: float = _setting(
        0.99, paper=0.999, verl={f"{_ACTOR}.optim.betas": _betas}, lo=0.0, hi=1.0, hi_open=True
    )
    """AdamW β2: 0.99 at tiny scale (runs of 100-300 steps, shorter than β2=0.999's ~1000-step window; the
    committed tiny study was trained with it), 0.999 at paper scale (the paper's AdamW)."""
    weight_decay: float = _setting(0.0, paper=0.01, verl=(f"{_ACTOR}.optim.weight_decay",), lo=0.0)
    """AdamW weight decay (decoupled). Paper scale: 0.01, verl's and the release's."""
    temperature: float = _setting(1.0, paper=1.0, verl=(f"{_ROLLOUT}.temperature",), lo=0.0)
    """Rollout temperature (paper: 1.0; 0 = greedy). The fresh rows' π_θold is the rollout's own log-probs, exact
    only at 1.0."""
    top_p: float = _setting(1.0, paper=1.0, verl=(f"{_ROLLOUT}.top_p",), lo=0.0, hi=1.0, lo_open=True)
    """Rollout top-p (paper: 1.0), in (0, 1]."""
    max_new_tokens: int = _setting(
        72,
        paper="the backbone's `max_response_length` (8192)",
        verl={
            "data.max_response_length": lambda s, prompt: s.max_new_tokens,
            f"{_ROLLOUT}.max_model_len": lambda s, prompt: prompt + s.max_new_tokens,
            f"{_ACTOR}.ppo_max_token_len_per_gpu": _token_budget,
            f"{_ROLLOUT}.log_prob_max_token_len_per_gpu": _token_budget,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": _token_budget,
        },
        lo=1,
    )
    """Response length cap; also the constant loss normaliser when `loss_norm_const` is 0. Tiny: the backbone's
    `max_response_length` (72). verl: the response length, the model length (prompt + response) and the token
    budgets of a dynamic micro-batch (4 x model length)."""
    val_every: int = _setting(
        25, paper=10, verl={"trainer.test_freq": lambda s, prompt: s.val_every or -1}, lo=0
    )
    """Validate every N steps (and at the last step); 0 disables (verl: test_freq -1)."""
    val_size: int = _setting(200, paper="the whole validation split", verl=("data.val_max_samples",), lo=0)
    """Validation questions (first N of the valid split)."""
    val_temperature: float = _setting(0.6, paper=0.6, verl=(f"{_ROLLOUT}.val_kwargs.temperature",), lo=0.0)
    """Validation temperature (paper: 0.6, one sample)."""
    ckpt_every: int = _setting(25, paper=50, verl=("trainer.save_freq",), lo=1)
    """Checkpoint every N steps (and at the last step)."""
    threads: int = _setting(
        1,
        paper=NOT_AT_PAPER,
        lo=1,
        runtime_only=True,
        refused="torch intra-op threads of the CPU trainer's own process; verl's Ray workers are sized by the "
        "backbone's resources",
    )
    """torch intra-op threads (not part of the run's identity)."""
    stop_after: int = _setting(
        0,
        paper=NOT_AT_PAPER,
        lo=0,
        runtime_only=True,
        refused="a per-job stop, not a run setting: on verl a segment job's launch override exgrpo.stop_after",
    )
    """Exit after this step without finishing (tests and failure drills); 0 = run to the end."""

    def __post_init__(self) -> None:
        if isinstance(self.train_difficulties, list):  # a run file is JSON: its tuples come back as lists
            self.train_difficulties = tuple(self.train_difficulties)

    @property
    def betas(self) -> tuple[float, float]:
        """AdamW (β1, β2)."""
        return (self.adam_beta1, self.adam_beta2)

    def validate(self, where: str = "trainer.") -> TrainerSettings:
        """Check every field against its declaration; raise ConfigError naming `<where><field>`. Returns self."""
        try:
            check_fields(self)
        except ConfigError as err:
            raise ConfigError(f"{where}{err.field}", err.reason) from None
        return self

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "trainer.") -> TrainerSettings:
        """Build and validate from a mapping (a run file's `trainer`); unknown keys are errors naming the key."""
        values = dict(values or {})
        known = names()
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"{where}{key}", f"unknown trainer setting; known: {', '.join(sorted(known))}"
                )
        return cls(**values).validate(where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def names() -> tuple[str, ...]:
    """The field names, in declaration order."""
    return tuple(f.name for f in fields(TrainerSettings))


def spec(name: str) -> Mapping[str, Any]:
    """The metadata of field `name` (`_meta`)."""
    return {f.name: f.metadata for f in fields(TrainerSettings)}[name]


RUNTIME_ONLY = frozenset(f.name for f in fields(TrainerSettings) if f.metadata["runtime_only"])
"""Fields that say where or how far a process runs, not what it trains (not fingerprinted)."""
REFUSED_ON_VERL = {f.name: f.metadata["refused"] for f in fields(TrainerSettings) if f.metadata["refused"]}
"""Fields the verl route cannot follow → why; it accepts only their default."""


VERL_KEYS = frozenset(key for name in names() for key in spec(name)["verl"])


@lru_cache(maxsize=1)
def _hints() -> dict[str, Any]:
    from typing import get_type_hints

    return get_type_hints(TrainerSettings)


"""Every verl key a trainer setting names (its field metadata)."""


def trainer_overrides(trainer: Mapping[str, Any], max_prompt_length: int) -> dict[str, Any]:
    """Dotted verl keys for a tiny-scale run's trainer settings (RunSpec.trainer: the fields it sets, on top of the
    `TrainerSettings` defaults, as `exgrpo train` reads them).

    Every field of the schema either becomes the verl keys its declaration names (`VERL_KEYS`: each one written
    here, from the declaration alone, so none falls back to a verl or exgrpo_trainer.yaml default unseen and a new
    field needs no edit here) or is refused unless it has its default (`REFUSED_ON_VERL`). Raises ConfigError
    naming the `trainer.<field>`.
    """
    settings = TrainerSettings.from_dict(trainer)
    default = TrainerSettings()
    for key, why in REFUSED_ON_VERL.items():
        if getattr(settings, key) != getattr(default, key):
            raise ConfigError(
                f"trainer.{key}",
                f"{getattr(settings, key)!r}: not supported by the verl route "
                f"({why}); train this run with the CPU trainer",
            )
    batch, minis = settings.batch_size, settings.mini_batches
    if batch % minis:
        raise ConfigError("trainer.mini_batches", f"batch_size {batch} is not a multiple of {minis}")
    keys: dict[str, Any] = {}
    for f in fields(TrainerSettings):
        verl = f.metadata["verl"]
        if isinstance(verl, Mapping):  # values derived from the settings
            keys.update({key: value_of(settings, max_prompt_length) for key, value_of in verl.items()})
        else:  # the field's own value, as its declared type (an int given for a float is written as a float)
            value = getattr(settings, f.name)
            keys.update(dict.fromkeys(verl, float(value) if _hints()[f.name] is float else value))
    return keys


__all__ = [
    "REFUSED_ON_VERL",
    "RUNTIME_ONLY",
    "VERL_KEYS",
    "TrainerSettings",
    "names",
    "spec",
    "trainer_overrides",
]
