"""The command-line arguments the workflow's rules hand to `exgrpo` commands: data, init and budget flags, the
resolved run (moved from workflow/rules/common.smk)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from exgrpo.workflow.tiny_chat_inputs import TinyChatInputs

SMOKE_SFT_STEPS = 150
"""SFT steps of every backbone under the smoke budget (plumbing only: weak but not useless models)."""


def input_folder(name: str) -> Callable[[Any, Any], str]:
    """A params callable: the folder of input `name` (commands take folders, rules track files)."""
    return lambda wc, input: os.path.dirname(input[name])


def output_folder(name: str | int = 0) -> Callable[[Any, Any], str]:
    """A params callable: the folder of output `name` (default the first)."""
    return lambda wc, output: os.path.dirname(output[name])


class JobArgs(TinyChatInputs):
    """Per-source and per-run arguments of the training, evaluation and SFT commands."""

    def data_for(self, source: str) -> str:
        """`--data` of a source's jobs: tiny splits, or the HF cache for paper scale."""
        study = self.study_of_source(source)
        if study.scale == "tiny":
            return self.data_dir(source, str(study.data_seed))
        return self.hf_cache()

    def eval_data_for(self, source: str) -> str:
        """`exgrpo eval --data` of eval_tiny / eval_paper: the tiny splits or the released eval files `exgrpo
        download` wrote (a `data: chat_if` study's sets come from its manifest, rule eval_paper_chat_if)."""
        study = self.study_of_source(source)
        if study.scale == "tiny":
            return self.data_dir(source, str(study.data_seed))
        return self.downloads_dir()

    def init_for(self, source: str, backbone: str) -> str:
        """`--init` of training: the SFT checkpoint (tiny) or the HF model id, read from the cache (paper)."""
        entry = self.backbones[backbone]
        return self.base_dir(source, backbone) if entry["scale"] == "tiny" else str(entry["hf_id"])

    def sft_init(self, source: str, backbone: str) -> str | None:
        """The SFT checkpoint a tiny backbone starts from (`sft.init`), or None."""
        init = self.backbones[backbone]["sft"]["init"]
        return self.sft_dir(source, init) if init else None

    def sft_steps_arg(self, source: str) -> str:
        """`exgrpo sft --steps` under the smoke budget (SMOKE_SFT_STEPS), else the registry's steps."""
        return f"--steps {SMOKE_SFT_STEPS}" if self.study_of_source(source).budget == "smoke" else ""

    def eval_limit_arg(self, source: str) -> str:
        """Smoke evaluation looks at the first 32 problems of each benchmark."""
        return "--limit 32" if self.study_of_source(source).budget == "smoke" else ""

    def benchmarks_arg(self, source: str) -> str:
        """`--benchmarks` of a source's evaluations: its study's benchmarks, comma-separated."""
        return ",".join(self.study_of_source(source).benchmarks)

    def resolved_run(self, wc: Any) -> str:
        """The run's resolution (exgrpo.settings.resolve.run_spec) as canonical JSON: rule resolve_run's params,
        so a config change that alters it reruns that rule, and through method.json the training.
        """
        spec = self.wf.study_run(wc.source, wc.backbone, wc.variant, int(wc.seed))
        return json.dumps(spec.to_dict(), sort_keys=True)

    def resolved_run_summary(self, wc: Any) -> str:
        """One line for the resolve_run job's log: which run, resolved how, written where."""
        spec = self.wf.study_run(wc.source, wc.backbone, wc.variant, int(wc.seed))
        path = self.run_file(wc.source, wc.backbone, wc.variant, wc.seed)
        return (
            f"{wc.backbone}/{wc.variant}/s{wc.seed} ({spec.budget} budget): resolved "
            f"{' < '.join(spec.to_dict()['precedence'])} -> {path}"
        )
