"""The workflow's path layout (the results contract), from the validated workflow configuration.

Moved out of workflow/rules/common.smk so that ruff, mypy and unit tests reach it; common.smk binds each method
to the name its rules use (`train_dir = H.train_dir`). Layout, with <R> the config's `results_dir`:

    <R>/<source>/{train,eval,prelim}/...            results (default reruns/; results/ holds the references)
    <R>/<source>/benchmarks/<rule>/...              Snakemake benchmark files -> compute ledger
    work/<source>/{data,ckpt,sft,runs}/...          data, checkpoints, resolved run configs (git-ignored)
    <hf_cache>/                                     paper-scale downloads (shared)
    logs/<rule>/...                                 job logs

Every method takes explicit arguments (the wildcards object `wc` of an input function is any object with the
wildcards as attributes), never Snakemake's globals.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from exgrpo.workflow.study import Study
from exgrpo.workflow.workflow_config import WorkflowConfig


def one_of(names: Iterable[str]) -> str:
    """Regex matching exactly one of `names` (a wildcard constraint); matches nothing for no names."""
    return "|".join(re.escape(n) for n in sorted(set(names))) or "(?!)"


def log_file(rule: str, *parts: object) -> str:
    """logs/<rule>/<part>/.../<last>.log"""
    return os.path.join("logs", rule, *map(str, parts)) + ".log"


class Layout:
    """Where each stage of a study reads and writes (the paths of common.smk's header)."""

    def __init__(self, wf: WorkflowConfig) -> None:
        self.wf = wf

    @property
    def results(self) -> str:
        """Where this run writes its results (config `results_dir`, default reruns/)."""
        return self.wf.results_dir

    @property
    def backbones(self) -> dict[str, dict[str, Any]]:
        """The backbone registry in use (config/backbones.yaml or `backbones_file`)."""
        return self.wf.backbones

    def study_of_source(self, source: str) -> Study:
        """The study that writes `source` (WorkflowConfig.study_for_source)."""
        return self.wf.study_for_source(source)

    def data_dir(self, source: str, seed: object) -> str:
        """Tiny task splits written by `exgrpo make-data --out DIR --seed SEED`."""
        return f"work/{source}/data/s{seed}"

    def data_manifest(self, source: str, seed: object) -> str:
        """The manifest of the tiny task splits of `seed`."""
        return f"{self.data_dir(source, seed)}/manifest.json"

    def hf_cache(self) -> str:
        """Shared HF cache of paper-scale data, benchmarks and weights (EXGRPO_HF_CACHE overrides)."""
        return self.wf.hf_cache.rstrip("/")

    def download_manifest(self) -> str:
        """The manifest `exgrpo download` writes for the paper-scale data."""
        return f"{self.hf_cache()}/manifest.json"

    def model_manifest(self, backbone: str) -> str:
        """The manifest of one downloaded model (a backbone or a reward model)."""
        return f"{self.hf_cache()}/models/{backbone}.json"

    def sft_dir(self, source: str, backbone: str) -> str:
        """SFT checkpoint of a tiny backbone (`exgrpo sft --out`), shared by every run of a source."""
        return f"work/{source}/sft/{backbone}"

    def base_dir(self, source: str, backbone: str) -> str:
        """The base a tiny run starts from: the shipped models/tiny/<backbone> when its recipe matches the
        registry entry and the study's data seed (exgrpo.testbed.models.shipped_base; not for the smoke budget,
        which trains its own short SFT), else the checkpoint the `sft` rule builds.
        """
        # imported here: the testbed is only needed once a tiny path is asked for
        from exgrpo.testbed.models import shipped_base

        study = self.study_of_source(source)
        if study.budget != "smoke" and study.data_seed is not None:
            entry = self.backbones[backbone]
            shipped = shipped_base(backbone, entry, study.data_seed, root="models/tiny")
            if shipped is not None:
                return str(shipped)
        return self.sft_dir(source, backbone)

    def train_dir(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """`exgrpo train --out`: log.jsonl.gz and run.json land here."""
        return f"{self.results}/{source}/train/{backbone}/{variant}/s{seed}"

    def ckpt_dir(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """Checkpoints of one training run; a retried job resumes from here."""
        return f"work/{source}/ckpt/{backbone}/{variant}/s{seed}"

    def run_file(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """The run's resolved config (rule resolve_run), read by `exgrpo train` / `exgrpo verl-config`."""
        return f"work/{source}/runs/{backbone}/{variant}/s{seed}/method.json"

    def eval_dir(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """`exgrpo eval --out` of one trained model: <benchmark>.<profile>.json (+ .samples.parquet)."""
        return f"{self.results}/{source}/eval/{backbone}/{variant}/s{seed}"

    def prelim_dir(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """The preliminary study's outputs of one run."""
        return f"{self.results}/{source}/prelim/{backbone}/{variant}/s{seed}"

    def prelim_file(self, source: str, backbone: str, variant: str, seed: int | str) -> str:
        """The loader reads prelim/<backbone>/trajectories*.parquet (results/README.md)."""
        return f"{self.results}/{source}/prelim/{backbone}/trajectories.{variant}.s{seed}.parquet"

    def bench_file(self, source: str, rule: str, *parts: object) -> str:
        """<results_dir>/<source>/benchmarks/<rule>/<parts>.tsv: summarised later into the compute ledger."""
        return os.path.join(self.results, source, "benchmarks", rule, *map(str, parts)) + ".tsv"

    def backbones_file(self) -> str:
        """The backbone registry in use (`backbones_file`, also handed to commands as --backbones)."""
        return str(self.wf.raw["backbones_file"])

    def figure_sources(self) -> list[str]:
        """Configured result sources that exist under results/ (re-rendered by `figures`)."""
        return [s for s in self.wf.raw["figures"]["sources"] if os.path.isdir(f"results/{s}")]

    def downloads_dir(self) -> str:
        """Where `exgrpo download` writes the training set and the released evaluation files."""
        return f"{self.hf_cache()}/files"

    def downloaded_file(self, name: str) -> str:
        """A parquet file `exgrpo download` wrote (not a declared output: the manifest stands for it)."""
        return f"{self.downloads_dir()}/{name}.parquet"

    def retemplated_file(self, name: str, prompt_format: str) -> str:
        """`exgrpo retemplate` copy of a downloaded file, its prompts in `prompt_format` (rule retemplate)."""
        return f"{self.downloads_dir()}/{name}.{prompt_format}.parquet"

    def chat_if_dir(self) -> str:
        """Where `exgrpo download --only wildchat_if` writes Table 2's prompts (own manifest, paper §5.3)."""
        return f"{self.hf_cache()}/chat_if"

    def chat_if_manifest(self) -> str:
        """The manifest of Table 2's download."""
        return f"{self.chat_if_dir()}/manifest.json"

    def offline_env(self) -> str:
        """Shell prefix for paper-scale jobs on compute nodes: everything comes from the shared cache."""
        return f"HF_HOME={self.hf_cache()} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"

    def study_data(self, wc: Any) -> str:
        """manifest.json of the task data the run's study trains and evaluates on (a tiny-scale input)."""
        return self.data_manifest(wc.source, self.study_of_source(wc.source).data_seed)

    def base_config(self, wc: Any) -> str:
        """config.json of the backbone's tiny base (the model a tiny-scale run starts from)."""
        return f"{self.base_dir(wc.source, wc.backbone)}/config.json"

    def eval_model_input(self, wc: Any) -> str:
        """What a tiny-scale evaluation waits for: the base's config.json, or the run's run.json."""
        if wc.variant == "base":
            return self.base_config(wc)
        return f"{self.train_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/run.json"

    def eval_model_path(self, wc: Any) -> str:
        """The model a tiny-scale evaluation loads: the base, or the run's final checkpoint."""
        if wc.variant == "base":
            return self.base_dir(wc.source, wc.backbone)
        return f"{self.ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final"

    def eval_benchmarks(self, scale: str, data: str = "math") -> list[str]:
        """Every benchmark the studies of `scale` (and training `data`: `chat_if` is Table 2's) evaluate, in
        config order.

        A model is evaluated on all of them in one `exgrpo eval` call (one job per model and profile): one
        start of lm-eval (~8 s, which dominates a tiny benchmark) or of the vLLM engine (minutes at paper
        scale) serves every benchmark.
        """
        names: list[str] = []
        for study in self.wf.studies.values():
            if study.scale == scale and study.data == data:
                names += [b for b in study.benchmarks if b not in names]
        return names

    def sources_of_runtime(self, runtime: str, scale: str) -> str:
        """Regex of the result sources of the `scale` studies trained by `runtime` (a rule's wildcard
        constraint: train_verl_cpu takes the tiny-scale studies with `runtime: verl`)."""
        return one_of(s.source for s in self.wf.studies.values() if (s.runtime, s.scale) == (runtime, scale))

    def backbones_of_scale(self, scale: str) -> str:
        """Regex of the registered backbones of `scale`. As a rule's wildcard constraint it keeps the paper
        rules off tiny targets; `ruleorder` prefers them on paper targets."""
        return one_of(n for n, e in self.backbones.items() if e["scale"] == scale)
