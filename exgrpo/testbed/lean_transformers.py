"""transformers' model classes without scikit-learn: the start-up switch of every job that loads a model.

`transformers.generation.candidate_generator` imports `sklearn.metrics.roc_curve` at import time whenever
scikit-learn is installed (lm-eval installs it), and every causal-LM class imports that module through
`transformers.generation.utils`. scikit-learn (with the `scipy.stats` it imports) was 1.4-2.8 s of each
training, SFT, evaluation and preliminary-study job's start-up on a 2-core AMD EPYC (2026-12-07,
benchmarks/results/startup.json), for a function only assisted generation's confidence-threshold tuning
(`AssistedCandidateGenerator` with `assistant_confidence_threshold`) calls, which this project never uses.

`skip_unused_imports()` imports that one module while `sklearn` is hidden from the import system
(`sys.modules[name] = None` makes `importlib.util.find_spec` report it absent and `import` fail), then
unhides it, so later code that does want scikit-learn imports it as usual. transformers caches its answer
(`is_sklearn_available`), so its assisted generation then consistently sees no scikit-learn. Nothing
computed changes: the module differs only in whether `roc_curve` is bound. Call it before the first model
class or Auto class is imported (`from transformers import AutoTokenizer` already imports
`transformers.models.auto` and with it the generation code; `PreTrainedTokenizerFast` does not). It is a
no-op once the module is loaded, and does nothing for scikit-learn already imported.
tests/testbed/test_lean_transformers.py loads a tiny model after it and asserts `sklearn` stayed out of
`sys.modules`, so a transformers release that imports scikit-learn elsewhere fails there.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

GENERATION_MODULE = "transformers.generation.candidate_generator"
"""The transformers module that imports scikit-learn only because it is installed."""
UNUSED = ("sklearn",)
"""Top-level packages hidden while `GENERATION_MODULE` is imported."""


@contextmanager
def hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, `import name` fails and `find_spec(name)` is None for each of `names` not yet imported;
    afterwards they are importable again (entries already in `sys.modules` are left alone)."""
    added = [name for name in names if name not in sys.modules]
    for name in added:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" marker
    try:
        yield
    finally:
        for name in added:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]


def skip_unused_imports() -> None:
    """Import transformers' generation helpers with scikit-learn hidden (see the module docstring); call it
    before a transformers model class is imported. Idempotent."""
    if GENERATION_MODULE in sys.modules:
        return
    try:
        with hidden(UNUSED):
            importlib.import_module(GENERATION_MODULE)
    except ImportError:
        # transformers had already answered "is scikit-learn installed?" (the answer is cached) and so
        # imports it regardless: import the module as it is, at the old cost, rather than fail the job.
        importlib.import_module(GENERATION_MODULE)
