"""The CPU testbed: a synthetic verifiable task and tiny transformers backbones (docs/testbed.md).

Used by the CPU trainer (`exgrpo.tiny`), evaluation, the preliminary study, the verl plug-in's CPU mode and the
hub cache; it trains nothing itself.

- `task`: seeded arithmetic problems with exactly checkable steps, noisy SFT teacher, exact-match grading.
- `splits`: the task's splits (train / validation / ID test / three OOD sets / length probe) and their manifest.
- `tokenizer`: character tokenizer with single-token tags and a chat template (HF-loadable).
- `models`: Qwen2 / Llama backbones from config/backbones.yaml, save/load via the Auto classes.
- `decoder`: the KV-cache decoder; `rollout`: batched sampling (`generate`) and teacher-forced scoring (`score`).
"""
