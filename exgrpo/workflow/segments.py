"""Training runs cut into segment jobs under a partition time limit (config `partition_limit_min`); moved from
workflow/rules/segment_paths.smk.

A run whose requested runtime exceeds the limit is a chain of jobs. Segment k (rule train_tiny_segment on the CPU
trainer, train_verl_cpu_segment / train_paper_segment on the verl route: verl_segments.smk) trains up to its stop
step (exgrpo.workflow.cluster.segment_stops), checkpoints and exits; the next resumes from the checkpoint; the last
segment is the run's own training job, which finishes and writes run.json. Each job requests its share of the
runtime (exgrpo.workflow.cluster.segment_runtime). Unset limit: no segment jobs, the DAG is unchanged.
"""

from __future__ import annotations

import os
from typing import Any

from exgrpo.workflow.cluster import segment_runtime, segment_stops
from exgrpo.workflow.paths import log_file
from exgrpo.workflow.rule_resources import VERL_CPU_RESOURCES, RuleResources, cpu_resources


class Segments(RuleResources):
    """The segment jobs of each training run, their flags, logs, inputs and runtimes."""

    def partition_limit(self) -> int | None:
        """The partition time limit in minutes (config `partition_limit_min`), or None when unset."""
        value = self.wf.raw.get("partition_limit_min")
        return int(value) if value else None

    def run_runtime_min(self, source: str, backbone: str) -> int:
        """Minutes the run's training job asks for when it is one job: a verl CPU-mode run of a tiny base its
        own size (VERL_CPU_RESOURCES), any other run its backbone's `resources.train.runtime_min`.
        """
        if self.backbones[backbone]["scale"] == "tiny" and self.study_of_source(source).runtime == "verl":
            return int(VERL_CPU_RESOURCES["runtime"])
        return int(self.backbones[backbone]["resources"]["train"]["runtime_min"])

    def run_segments(self, source: str, backbone: str, variant: str, seed: int | str) -> list[int]:
        """Stop steps of the run's segments before the last ([] = one job)."""
        limit = self.partition_limit()
        if limit is None:
            return []
        if self.backbones[backbone]["scale"] == "paper":  # verl's trainer.total_training_steps (hydra_config)
            steps = int(self.backbones[backbone]["steps"])
        else:
            steps = int(self.wf.study_run(source, backbone, variant, int(seed)).trainer["steps"])
        return segment_stops(steps, self.run_runtime_min(source, backbone), limit)

    def segment_runtime_of(self, wc: Any) -> int:
        """`runtime` of one training job of the run (a segment, or the whole run under no limit)."""
        return segment_runtime(self.run_runtime_min(wc.source, wc.backbone), self.partition_limit())

    def segment_flag(self, source: str, backbone: str, variant: str, seed: int | str, k: int | str) -> str:
        """The flag file segment `k` of a run leaves in its checkpoint folder."""
        return f"{self.ckpt_dir(source, backbone, variant, seed)}/segments/{k}.done"

    def segment_output(self) -> str:
        """A segment job's flag file (output `done`, wrapped in touch()), as a wildcard pattern."""
        return self.segment_flag("{source}", "{backbone}", "{variant}", "{seed}", "{segment}")

    def segment_log(self) -> str:
        """A segment job's log, as a wildcard pattern."""
        return log_file("train", "{source}", "{backbone}", "{variant}", "s{seed}.segment{segment}")

    def segment_benchmark(self) -> str:
        """A segment job's benchmark file, as a wildcard pattern."""
        return self.bench_file("{source}", "train", "{backbone}", "{variant}", "s{seed}.segment{segment}")

    def previous_segment(self, wc: Any) -> list[str]:
        """Segment k waits for segment k-1 (the first for nothing)."""
        k = int(wc.segment)
        return [] if k == 1 else [self.segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, k - 1)]

    def last_segment(self, wc: Any) -> list[str]:
        """The run's training job (the last segment) waits for the segment before it; [] when the run is one
        job."""
        stops = self.run_segments(wc.source, wc.backbone, wc.variant, wc.seed)
        return [self.segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, len(stops))] if stops else []

    def segment_before(self, wc: Any) -> list[str]:
        """The verl route's training rules serve the run's own job and (verl_segments.smk) its segment jobs:
        each waits for the segment before it."""
        # Snakemake's Wildcards is a list of values with named keys: `in wc` would test the values
        return self.previous_segment(wc) if "segment" in wc.keys() else self.last_segment(wc)  # noqa: SIM118

    def train_resources(self) -> dict[str, Any]:
        """backbone_resources("train") with the runtime of one segment under the partition limit."""
        return {**self.backbone_resources("train"), "runtime": self.segment_runtime_of}

    def verl_cpu_train_resources(self) -> dict[str, Any]:
        """A verl CPU-mode training job: VERL_CPU_RESOURCES and the site's CPU settings, with the runtime of
        one segment under the partition limit."""
        return {**VERL_CPU_RESOURCES, **cpu_resources(), "runtime": self.segment_runtime_of}

    def segment_stop_override(self, wc: Any) -> str:
        """The launch script's override that ends verl segment `wc.segment` after its stop step
        (exgrpo.verl_plugin.segments), with its leading space (the run's own job passes none).
        """
        stops = self.run_segments(wc.source, wc.backbone, wc.variant, wc.seed)
        return f" exgrpo.stop_after={stops[int(wc.segment) - 1]}"

    def verl_collect_command(self, wc: Any, output: Any) -> str:
        """The verl route's last command in the run's own job: the results contract from the attempts'
        metrics, and the final actor exported in HF format for evaluation."""
        run_dir = self.ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)
        return (
            f"exgrpo verl-collect --run-dir {run_dir} --out {os.path.dirname(output.run)}"
            f" --export-hf {run_dir}/final"
        )
