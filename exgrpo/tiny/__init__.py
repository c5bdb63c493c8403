"""The CPU trainer for tiny backbones (the embedded default runtime), on the testbed of `exgrpo.testbed`.

- `sft`: the "pre-training" of each backbone on noisy-teacher solutions.
- `trainer`: one RL step on the core (`exgrpo.core.step`); `run`: the training loop, resumable.
- `checkpoint`, `best`, `tracker`: checkpoints, the best-validation model, the metrics log.
"""
