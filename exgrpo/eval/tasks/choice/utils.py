"""lm-eval hooks for this task family (shared implementation in `exgrpo.eval.tasks`)."""

from exgrpo.eval.benchmark_documents import load_dataset_dict
from exgrpo.eval.tasks import keep_all_samples, process_results

__all__ = ["keep_all_samples", "load_dataset_dict", "process_results"]
