"""The method: everything ExGRPO computes, written once and driven by both runtimes (torch, numpy, math-verify).

Configuration: `config` (`ExGRPOConfig`, every setting with the paper's meaning as default),
`config_rules` (the rules tying settings together), `declared` (how a setting is declared and checked),
`variants` (the paper's named ablations), `switches` (paper vs release), `registry` (the replaceable parts and
plug-ins), `suggest` (did-you-mean).
Experience: `buffer` (stored trajectories), `experience` and `experience_state` (buckets, retirement, delayed
start; resumable state), `experience_groups` (a step's groups and their bucket keys), `sampler` (bucket
weighting, Alg. 2), `selection` (which trajectory is replayed), `ordered_set`, `data_order` (the training-data
position).
One step: `step` (its assembly), `step_questions`, `step_batch`, `step_metrics`, `metric_names`,
`advantages` (Dr.GRPO groups, difficulty masks).
The objective: `loss` (Eq. 4 and its aggregation), `loss_inputs` (what one call is given), `loss_batch` (its
checks and metrics), `token_loss` (per-token PPO-clip and shaped replay losses).
The reward: `reward` (the batch `Verifier`), `answer_grade`, `answers`, `math_verify_060`, `_verify_worker`.
Files: `atomic_files` (atomic writes the buffer and state use).
"""
