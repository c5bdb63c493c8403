"""A tiny-scale study's inputs read as a cluster's jobs read theirs: by repo id and revision from a hub cache with
HF_HUB_OFFLINE=1 (study field `inputs: hub_cache`; docs/real-engines.md). Moved from workflow/rules/hub_paths.smk.

Rule hf_cache_tiny (data.smk) publishes the shipped tiny backbones (config/backbones.yaml hf_id, revision) and the
study's task data (the dataset repo exgrpo-tiny/tiny-task-s<seed>, pinned by config/locks/tiny-task-s<seed>.json)
into <hf_cache>/hub; the jobs then resolve each repo with `exgrpo hf-cache path`. The methods give the local
paths instead when the study reads local files (`inputs: local`, the default). Also the tiny-scale engine
choice (`engines: stand_in | vllm`), which decides the same jobs' flags.
"""

from __future__ import annotations

import json
import os
from typing import Any

from exgrpo.workflow.paper_paths import PaperPaths

TINY_JUDGE = "tiny-math-h32"
"""The judge model of a tiny-scale study's preliminary study on the real engines (`engines: vllm`): a shipped base
vLLM's CPU build can serve (docs/real-engines.md)."""
VERL_CPU_THREADS = 2
"""Cores of a verl CPU-mode run: its driver, Ray, the FSDP worker and the rollout server share them."""


def hub_path_cmd(repo_id: str, revision: str, repo_type: str = "model") -> str:
    """Shell substitution printing the offline snapshot folder of a repo at a revision."""
    return f"$(exgrpo hf-cache path {repo_id} --revision {revision} --repo-type {repo_type})"


def committed_revision(lock_name: str, repo_id: str, build_flags: str) -> str:
    """The commit the committed lock config/locks/<lock_name>.json pins for `repo_id`; a missing lock is refused
    with the `exgrpo hf-cache build` call (its `build_flags`) that writes it."""
    lock = f"config/locks/{lock_name}.json"
    if not os.path.exists(lock):
        raise ValueError(
            f"{lock}: no lock pins {repo_id}; run `HF_HUB_OFFLINE=1 exgrpo hf-cache build --out DIR {build_flags}"
            " --pin` once and commit the lock"
        )
    with open(lock) as fh:
        return str(json.load(fh)["revision"])


def data_revision(seed: int) -> str:
    """The commit of the data repo of `seed`, from its committed lock (the build refuses an unpinned one)."""
    # imported here, as the .smk did at include time: exgrpo.hub is needed only for hub-cache studies
    from exgrpo.hub.tiny import data_lock_name, data_repo_id

    return committed_revision(
        data_lock_name(seed), data_repo_id(seed), f"--data work/<source>/data/s{seed} --seed {seed}"
    )


class HubInputs(PaperPaths):
    """The tiny-scale jobs' data, base and judge arguments, local or from the hub cache."""

    def study_engines(self, source: str) -> str:
        """`stand_in` or `vllm`: the CPU engines of a source's study (Study.engines)."""
        return self.study_of_source(source).engines

    def hub_inputs(self, source: str) -> bool:
        """Whether a source's study reads its models and data from the hub cache (Study.inputs)."""
        return self.study_of_source(source).inputs == "hub_cache"

    def hub_cache_manifest(self, source: str) -> str:
        """What hf_cache_tiny (data.smk) writes for a source: the repos it published and their commits."""
        return f"{self.hf_cache()}/tiny/{source}/s{self.study_of_source(source).data_seed}.json"

    def tiny_hub_inputs(self, wc: Any) -> list[str]:
        """An input of a tiny-scale job: the hub cache manifest when its study reads the cache, else nothing."""
        return [self.hub_cache_manifest(wc.source)] if self.hub_inputs(wc.source) else []

    def tiny_offline_prefix(self, source: str) -> str:
        """Shell prefix of a tiny-scale job: the compute nodes' offline environment when it reads the cache."""
        return f"export {self.offline_env()} && " if self.hub_inputs(source) else ""

    def tiny_data_arg(self, source: str) -> str:
        """`--data` of a tiny-scale job: the make-data folder, or the data repo's snapshot resolved offline."""
        seed = self.study_of_source(source).data_seed
        if not self.hub_inputs(source):
            return self.data_dir(source, str(seed))
        from exgrpo.hub.tiny import data_repo_id

        return hub_path_cmd(data_repo_id(int(seed or 0)), data_revision(int(seed or 0)), "dataset")

    def tiny_base_arg(self, source: str, backbone: str) -> str:
        """The base a tiny-scale job starts from or evaluates: base_dir, or the backbone's repo resolved offline
        (only a shipped base is published: a study whose base the sft job builds cannot read the cache).
        """
        if not self.hub_inputs(source):
            return self.base_dir(source, backbone)
        entry = self.backbones[backbone]
        if self.base_dir(source, backbone) == self.sft_dir(source, backbone) or not entry.get("hf_id"):
            raise ValueError(
                f"{backbone}: a study with inputs: hub_cache reads the shipped base models/tiny/{backbone} from"
                " the hub cache; this one has no hf_id or no shipped base matching its recipe and data seed"
            )
        return hub_path_cmd(entry["hf_id"], entry["revision"])

    def tiny_eval_model_arg(self, wc: Any) -> str:
        """`--model` of a tiny-scale evaluation: the run's final model, or for `base` the base
        (tiny_base_arg)."""
        if wc.variant == "base":
            return self.tiny_base_arg(wc.source, wc.backbone)
        return self.eval_model_path(wc)

    def tiny_prelim_judge_args(self, source: str) -> str:
        """`exgrpo prelim-analyze` judge flags of a tiny-scale study: the exact step checker, or on the real
        engines the paper route's LLM judge on vLLM with a tiny judge model (JUDGE_VLLM_CPU_ARGS its only
        differences).
        """
        if self.study_engines(source) != "vllm":
            return "--judge step"
        from exgrpo.prelim.judge_engine import judge_vllm_cpu_flags

        judge = self.tiny_base_arg(source, TINY_JUDGE)
        return " ".join(
            [
                f'--judge llm --judge-model "{judge}"',
                f"--judge-cache work/{source}/prelim/judge_cache.jsonl",
                *judge_vllm_cpu_flags(),
            ]
        )

    def verl_rollout_arg(self, source: str) -> str:
        """`exgrpo verl-config` flag choosing a tiny-scale verl study's rollout (verl's vLLM or exgrpo_cpu)."""
        return "--rollout vllm" if self.study_engines(source) == "vllm" else ""

    def tiny_eval_backend_args(self, source: str) -> str:
        """`exgrpo eval` backend flags of a tiny-scale evaluation: the `tiny` sampler, or lm-eval's `vllm`
        backend with the paper route's model_args changed by exgrpo.eval.backends.VLLM_CPU_ARGS only.
        """
        if self.study_engines(source) != "vllm":
            return "--backend tiny"
        from exgrpo.eval.backends import vllm_cpu_flags

        return " ".join(["--backend vllm", *vllm_cpu_flags()])

    def tiny_engine_threads(self, wc: Any) -> int:
        """`threads:` of a tiny-scale evaluation or preliminary-study job: one (tiny_model_args) on the
        stand-ins; on the real engines the cores of a verl CPU run (VERL_CPU_THREADS), so that a vLLM engine
        never shares them with another: each binds every core of its NUMA node, and two evaluations started
        together on the 2-core machine lost their vLLM workers at the same moment (docs/real-engines.md)."""
        return VERL_CPU_THREADS if self.study_engines(wc.source) == "vllm" else 1

    def tiny_engine_env(self, source: str) -> str:
        """Shell prefix of a tiny-scale evaluation or preliminary-study job: on the real engines, the
        environment vLLM's CPU build runs under there (exgrpo.eval.backends.VLLM_CPU_ENV); nothing on the
        stand-ins.
        """
        if self.study_engines(source) != "vllm":
            return ""
        from exgrpo.eval.backends import vllm_cpu_env_prefix

        return vllm_cpu_env_prefix()
