"""transformers without scikit-learn and SciPy: the start-up switch of every job that loads a model.

Two transformers modules import a package only because it is installed, for code this project never runs:
- `transformers.generation.candidate_generator` imports `sklearn.metrics.roc_curve` (scikit-learn, which
  lm-eval installs, brings `scipy.stats`), used only by assisted generation's confidence-threshold tuning;
  every causal-LM class and `transformers.models.auto` import it through `transformers.generation.utils`;
- `transformers.loss.loss_for_object_detection` (and the other detection losses) import `scipy.optimize`
  for Hungarian matching, imported by the model base class (`transformers.modeling_utils`).
Leaving them out saves 1.1-2.4 s of CPU in the start-up of each training, SFT, evaluation and
preliminary-study job on a 2-core AMD EPYC (2026-12-07; benchmarks/profile.md, "Start-up").

`skip_unused_imports()` imports those modules (`WINDOW`) while the packages are hidden from the import
system (`sys.modules[name] = None` makes `importlib.util.find_spec` report them absent and `import` fail),
then unhides them, so later code that wants scikit-learn or SciPy imports them as usual. transformers caches
its answers (`is_sklearn_available`, `is_scipy_available`), so for the rest of the process it consistently
treats them as absent: assisted generation tunes no threshold, detection losses have no matcher, neither of
which a causal LM calls. Nothing computed changes (tests/tiny and the 20-step training check in
benchmarks/profile.md: the same final weights). Call it before the first model class or Auto class is
imported: `from transformers import AutoTokenizer` already imports the generation code
(`PreTrainedTokenizerFast` does not). It is a no-op once that code is loaded, and hides nothing already
imported. tests/testbed/test_lean_transformers.py loads a tiny model after it and asserts neither package
reached `sys.modules`, so a transformers release that imports them elsewhere fails there, loudly.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

GENERATION_MODULE = "transformers.generation.candidate_generator"
"""The transformers module that imports scikit-learn only because it is installed."""
WINDOW = ("transformers", GENERATION_MODULE, "transformers.modeling_utils")
"""Imported with `UNUSED` hidden: transformers itself (which records whether SciPy is installed), the generation
code, and the model base class (whose `transformers.loss` imports `scipy.optimize` for the detection losses)."""
UNUSED = ("sklearn", "scipy")
"""Top-level packages hidden while `WINDOW` is imported (SciPy only when transformers is not imported yet: its
answer is cached from the first import on)."""


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
    """Import transformers, its generation helpers and its model base class with scikit-learn and SciPy hidden
    (see the module docstring); call it before a transformers model or Auto class is imported. Idempotent."""
    if GENERATION_MODULE in sys.modules:
        return
    # torch and its compiler are imported outside the window, so torch never sees a package hidden; both are
    # imported by every model class anyway (transformers.modeling_utils decorates with torch._dynamo)
    import torch._dynamo  # noqa: F401

    names = UNUSED if "transformers" not in sys.modules else ("sklearn",)
    try:
        with hidden(names):
            for module in WINDOW:
                importlib.import_module(module)
    except ImportError:
        # transformers had already answered "is it installed?" (the answer is cached) and so imports it
        # regardless: import the modules as they are, at the old cost, rather than fail the job.
        for module in WINDOW:
            importlib.import_module(module)
