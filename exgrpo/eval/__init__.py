"""Evaluation: the paper's ID/OOD benchmarks and the tiny testbed through lm-eval, graded by Math-Verify.

- `benchmarks`: the registry (sources, row counts, answer kinds, ID/OOD) and document loading.
- `profiles`: decoding profiles `paper`, `community`, `tiny`.
- `tasks/`: the lm-eval task folder (one YAML per benchmark, a `utils.py` per family).
- `harness`: lm-eval calls (HF and vLLM backends) and the per-model evaluation loop.
- `grading`: grading cached completions with the core's reward (shared by eval and regrade).
- `cache`: per-sample parquet records and aggregate JSON (results layout contract).
- `metrics`: avg@k, unbiased pass@k, maj@k, bootstrap CI, ID/OOD averages (pure functions).

Submodules are imported on use; importing this package loads neither lm-eval nor torch.
"""
