"""Preliminary study (paper §3.2, App. F): which questions and which trajectories are worth replaying.

- `code_rules`: the R1-R17 code-block detector (Table 11).
- `judge`: reasoning-correctness judges (exact step checker for the tiny task; Qwen3-32B via vLLM).
- `policies`: sampling K rollouts and measuring token entropy / perplexity (tiny CPU, vLLM + transformers).
- `trajectories`: bucketing by k/K, the analysis, and the `prelim/<backbone>/trajectories*.parquet` records.

Difficulty-masked GRPO (Eq. 14) is a mode of the trainers (`ExGRPOConfig.difficulty_mask`), not part of this package.
"""
