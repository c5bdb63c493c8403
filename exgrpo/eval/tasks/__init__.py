"""lm-eval task directory: one folder per benchmark family (math, choice, tiny), one YAML per benchmark.

Register with `TaskManager(include_path=TASK_DIR, metadata={"data_dir": ...})` (see `exgrpo.eval.harness`),
or from the lm-eval CLI: `lm-eval run --include_path exgrpo/eval/tasks --tasks exgrpo_math500
--metadata '{"data_dir": "resources/benchmarks"}' --apply_chat_template ...`.

Every task is generative: `repeats` samples per problem (set from the decoding profile by the harness),
all kept (no `take_first`), each graded by the core's Math-Verify reward. The hooks the YAMLs call live
here, so the three families share one implementation; each family's `utils.py` re-exports them
(lm-eval resolves `!function utils.x` next to the YAML).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parent
"""The folder to pass to lm-eval's TaskManager as `include_path`."""


def keep_all_samples(resps: Any, docs: Any) -> Any:
    """lm-eval filter (`function: custom`): keep every one of the k samples of each document."""
    return resps


def process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, float]:
    """Grade the k samples of one document: `results == [[completion_1, ..., completion_k]]`.

    Returns lm-eval's own per-document metrics (`avg_at_k` = share correct, `pass_at_k` = any correct).
    The harness does not use them (it bypasses lm-eval's metrics and grades once into the cache);
    they make the task usable on its own and let tests check that both paths agree.
    """
    from exgrpo.core.config import ExGRPOConfig
    from exgrpo.core.reward import grade_one

    samples = results[0] if results and isinstance(results[0], list) else results
    max_chars = ExGRPOConfig().reward_max_chars
    scores = [
        grade_one(
            str(text),
            doc["answer"],
            doc["kind"],
            region=doc.get("grade_region", "after_think"),
            require_think_close=bool(doc.get("require_think_close", True)),
            max_chars=max_chars,
        ).score
        for text in samples
    ]
    n = max(len(scores), 1)
    return {"avg_at_k": sum(scores) / n, "pass_at_k": float(any(s > 0 for s in scores))}
