"""The CPU testbed: a synthetic verifiable task and tiny transformers backbones (docs/testbed.md).

- `task`: seeded arithmetic problems with exactly checkable steps, splits (train / validation /
  ID test / three OOD sets / length probe), noisy SFT teacher, exact-match grading.
- `tokenizer`: character tokenizer with single-token tags and a chat template (HF-loadable).
- `models`: Qwen2 / Llama backbones from config/backbones.yaml, save/load via the Auto classes.
- `sft`: the "pre-training" of each backbone on noisy-teacher solutions.
- `rollout`: batched KV-cache sampling (`generate`) and teacher-forced scoring (`score`).
- `trainer`, `run`, `checkpoint`, `data_order`: the RL trainer on top of them.
"""
