"""verl custom reward function: the exgrpo core's Math-Verify grader (paper §3.5) behind verl's signature.

Configured as `reward.custom_reward_function.path = pkg://exgrpo.verl_plugin.reward`, `name = compute_score`;
the ExGRPOConfig `reward_*` settings arrive as `reward_kwargs` (written by hydra_config). Grading goes through
the core's `Verifier` (process pool with a hard wall-clock timeout per answer), never `grade_one` in the
reward worker's thread, where math-verify's SIGALRM timeouts do not work (ecosystem.md §4).

verl decodes `solution_str` with special tokens skipped; the `</think>` rule needs `</think>` to be plain
text in the tokenizer (it is for the paper's backbones, where it is not a special token).
"""

from __future__ import annotations

import threading
from typing import Any

from exgrpo.core.reward import Verifier

_VERIFIERS: dict[tuple, Verifier] = {}
_LOCK = threading.Lock()


def _verifier(region: str, require_think_close: bool, max_chars: int, timeout_s: float, workers: int,
              rule: str = "release") -> Verifier:
    key = (region, bool(require_think_close), int(max_chars), float(timeout_s), int(workers), rule)
    with _LOCK:
        if key not in _VERIFIERS:
            _VERIFIERS[key] = Verifier(timeout_s=timeout_s, workers=workers, region=region,
                                       require_think_close=require_think_close, max_chars=max_chars, rule=rule)
        return _VERIFIERS[key]


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, *,
                  region: str = "after_think", require_think_close: bool = True, max_chars: int = 4000,
                  timeout_s: float = 5.0, workers: int = 1, rule: str = "release", **_: Any) -> dict[str, Any]:
    """Reward of one response: {"score": 1.0 | 0.0, "acc": same, "timeout": 0/1, "no_think_close": 0/1}.

    Extra keys are numeric because verl averages them in its validation metrics. `extra_info["kind"]`
    selects `math` (default) or `choice` grading.
    """
    kind = str((extra_info or {}).get("kind", "math"))
    result = _verifier(region, require_think_close, max_chars, timeout_s, workers, rule).grade(
        [solution_str], [str(ground_truth)], [kind])[0]
    return {"score": float(result.score), "acc": float(result.score),
            "timeout": float(result.status == "timeout"), "no_think_close": float(result.status == "no_think_close")}


__all__ = ["compute_score"]
