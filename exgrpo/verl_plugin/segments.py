"""A verl run cut into segment jobs under a partition time limit: each job but the last trains to its stop step,
checkpoints and exits cleanly; the next job resumes from that checkpoint (`trainer.resume_mode=auto`).

The stop is the launch command's Hydra override `exgrpo.stop_after=S` (workflow/rules/verl_segments.smk), not a
setting of the run: the run's resolved config, written once, is the same for every segment, and so are verl's
step count and learning-rate schedule (`trainer.total_training_steps` keeps the whole run's value; lowering it
would end the run as verl's "last step", with a final validation and another schedule). At step S the trainer
makes sure step S is checkpointed (verl saves only every `save_freq` steps and at the run's last step), skips the
next step's replay plan (the next segment makes it from the checkpoint, with the same weights and selection RNG,
as an uninterrupted run makes it after that checkpoint) and lowers its own loop bound so that verl's loop ends
after logging step S.
"""

from __future__ import annotations

from typing import Any

from exgrpo.core.config import ConfigError


def stop_after(exgrpo_section: Any, total_steps: int) -> int | None:
    """The step this job stops after (`exgrpo.stop_after`), or None when it trains to the end.

    A stop at or past the run's last step is no stop: that job is the run's last segment."""
    value = exgrpo_section.get("stop_after", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("exgrpo.stop_after", f"a step >= 1 or null, got {value!r}")
    return value if value < total_steps else None


def checkpointed_by_verl(step: int, total_steps: int, save_freq: int) -> bool:
    """Whether verl's loop saved a checkpoint at `step` (its rule: every `save_freq` steps and the last one)."""
    return save_freq > 0 and (step >= total_steps or step % save_freq == 0)


__all__ = ["checkpointed_by_verl", "stop_after"]
