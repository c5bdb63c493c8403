"""Optional experiment trackers for the CPU trainer, fed the same rows, under the same keys, as its log.

`--logger jsonl` (default) writes only `<ckpt>/log.jsonl`; `--logger tensorboard` also writes TensorBoard
events to `<ckpt>/tensorboard/` (next to the log), one scalar per logged key (exgrpo.records.metrics names) at the
row's step. A resumed run purges the events past its checkpoint, as it truncates the log. The verl plug-in
uses verl's own `trainer.logger` instead (console, file, wandb, tensorboard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"
"""Folder of the TensorBoard events, inside the checkpoint directory (next to log.jsonl)."""
LOGGERS = ("jsonl", "tensorboard")


class Tracker:
    """The log only: every call is a no-op. Use as a context manager; `start(first_step)` before the rows."""

    def start(self, first_step: int) -> None:  # noqa: B027 (no-op by design)
        """Called once the first step of this (possibly resumed) run is known."""

    def log(self, row: dict[str, Any]) -> None:  # noqa: B027
        """One log row ({"step": N, key: number, ...})."""

    def close(self) -> None:  # noqa: B027
        """Flush and release."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardTracker(Tracker):
    """Scalars via torch's `SummaryWriter` (needs the `tensorboard` package)."""

    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401 (availability check before any work)
        except ImportError as err:
            raise RuntimeError(
                f"--logger tensorboard needs the tensorboard package ({err}); "
                "pip install tensorboard, or use --logger jsonl"
            ) from None
        self.log_dir = Path(log_dir)
        self.writer: Any = None

    def start(self, first_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events at steps >= first_step left by a run killed after its checkpoint
        self.writer = SummaryWriter(str(self.log_dir), purge_step=first_step if first_step > 1 else None)

    def log(self, row: dict[str, Any]) -> None:
        if self.writer is None:
            raise RuntimeError("TensorBoardTracker.log before start()")
        step = int(row["step"])
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def open_tracker(name: str, log_dir: Path) -> Tracker:
    """The tracker called `name` (`LOGGERS`); a clear error for an unknown one or a missing package."""
    if name == "jsonl":
        return Tracker()
    if name == "tensorboard":
        return TensorBoardTracker(log_dir)
    raise ValueError(f"unknown logger {name!r}; expected one of {list(LOGGERS)}")


__all__ = ["LOGGERS", "TENSORBOARD_DIR", "TensorBoardTracker", "Tracker", "open_tracker"]
