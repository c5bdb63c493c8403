"""Evaluation: the paper's ID/OOD benchmarks and the tiny testbed through lm-eval, graded by Math-Verify.

- `benchmarks`: the registry (sources, row counts, answer kinds, ID/OOD) and document loading.
- `profiles`: decoding profiles `paper`, `community`, `tiny`.
- `tasks/`: the lm-eval task folder (one YAML per benchmark, a `utils.py` per family).
- `harness`: lm-eval calls (HF and vLLM backends) and the per-model evaluation loop.
- `grading`: grading cached completions with the core's reward (shared by eval and regrade).
- `cache`: per-sample parquet records and aggregate JSON (results layout contract).
- `metrics`: avg@k, unbiased pass@k, maj@k, bootstrap CI, ID/OOD averages (pure functions).
- `chat_run`: Table 2's benchmarks (IFEval, IFBench, Arena-Hard v2.0) in one call on the same backends: inputs
  (`chat_inputs`), the shared chat rows -> completions step (`chat_generation`), the IF scorers and eval files
  (`ifeval_scorer`, `ifbench_scorer`, `if_eval_files`), the Arena-Hard judge (`arena_hard*`).

Submodules are imported on use; importing this package loads neither lm-eval nor torch.
"""
