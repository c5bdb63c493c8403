"""What each wired stage adds to a study's target, the regime map's inputs and targets, and the target -> study
map of `rule all`-style targets (moved from workflow/rules/targets.smk and regime_paths.smk).

A stage file calls `register_stage(name)` once its rules exist, so a target lists exactly the stages that are
wired (never a stage without a command). `WorkflowHelpers` is the object common.smk builds once per run; every
helper the rules use is one of its methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.workflow.segments import Segments
from exgrpo.workflow.study import Study
from exgrpo.workflow.workflow_config import WorkflowConfig, target_studies

NOT_RENDER_INPUTS = ("report", "data", "reproduce")
"""Stages whose outputs a study's rendering does not read (they follow it or precede its runs)."""


def results_root_of(report: str, source: str) -> str:
    """The results folder of `<root>/<source>/reproduction/<study>.md` (a params function)."""
    return str(Path(report).parents[2 + source.count("/")])


class WorkflowHelpers(Segments):
    """Every path, argument, resource and target helper of the workflow, for one validated configuration."""

    def __init__(self, wf: WorkflowConfig) -> None:
        super().__init__(wf)
        self.registered_stages: dict[str, set[str]] = {}
        self.stage_targets: dict[str, Callable[[Study], list[str]]] = {
            "data": self.data_targets,
            "train": self.train_targets,
            "eval": self.eval_targets,
            "eval_base": self.base_eval_targets,
            "prelim": self.prelim_targets,
            "report": self.report_targets,
            "reproduce": self.reproduce_targets,
        }

    def register_stage(self, stage: str, scales: Iterable[str] = ("tiny", "paper")) -> None:
        """Add a wired stage's outputs to the targets of the studies of `scales` (tiny and/or paper)."""
        self.registered_stages.setdefault(stage, set()).update(scales)

    def data_targets(self, study: Study) -> list[str]:
        """The study's data: the tiny splits (Table 2's CPU route: its hub cache), or the downloads of its backbones
        (and Table 2's prompts)."""
        if (
            study.scale == "tiny" and study.data == "chat_if"
        ):  # Table 2 on CPU: the published prompts and rows
            return [self.hub_cache_manifest(study.source)]
        if study.scale == "tiny":
            return [self.data_manifest(study.source, str(study.data_seed))]
        models = [self.model_manifest(b) for b in study.backbones]
        if study.data == "chat_if":  # paper §5.3: the WildChat-IF prompts and the study's reward model
            return [self.chat_if_manifest(), self.model_manifest(str(study.reward_model)), *models]
        return [self.download_manifest(), *models]

    def train_targets(self, study: Study) -> list[str]:
        """run.json of every training run of the study."""
        return [f"{self.train_dir(study.source, b, v, s)}/run.json" for b, v, s in study.runs()]

    def eval_targets(self, study: Study) -> list[str]:
        """Every benchmark x profile result of every trained model of the study."""
        return [
            f"{self.eval_dir(study.source, b, v, s)}/{bench}.{profile}.json"
            for b, v, s in study.runs()
            for bench in study.benchmarks
            for profile in study.profiles
        ]

    def base_eval_targets(self, study: Study) -> list[str]:
        """Evaluation of every backbone before RL (variant `base`: the SFT checkpoint or the HF model)."""
        return [
            f"{self.eval_dir(study.source, b, 'base', s)}/{bench}.{profile}.json"
            for b in study.backbones
            for s in study.seeds[:1]
            for bench in study.benchmarks
            for profile in study.profiles
        ]

    def prelim_targets(self, study: Study) -> list[str]:
        """Trajectory analysis of the on-policy model of each ablation backbone (paper §3.2 uses Full)."""
        if not study.prelim:
            return []
        return [
            self.prelim_file(study.source, b, "on_policy", s)
            for b in study.ablation_backbones
            for s in study.seeds
        ]

    def report_targets(self, study: Study) -> list[str]:
        """A flag written once the study's source is rendered (results/<source>/{tables,figures,index.md}).

        The flag is per study, not per source: `tiny` and `tiny_full` share results/tiny/, but each renders
        only after its own runs are done.
        """
        return [f"work/{study.source}/rendered.{study.name}.done"]

    def reproduce_targets(self, study: Study) -> list[str]:
        """The study's reproduction report against results/<source>/ (rule reproduce_study)."""
        return [f"{self.results}/{study.source}/reproduction/{study.name}.md"]

    def study_targets(self, name: str) -> list[str]:
        """Everything study `name`'s target builds: the outputs of each stage wired for its scale."""
        study = self.wf.studies[name]
        return [
            path
            for st, scales in self.registered_stages.items()
            if study.scale in scales
            for path in self.stage_targets[st](study)
        ]

    def study_inputs(self, wildcards: Any) -> list[str]:
        """Everything a study's rendering depends on: its train, eval and prelim outputs (for the regime map,
        `tiny_regimes`, every regime's: regimes.smk)."""
        if wildcards.study == "tiny_regimes":
            return self.regime_inputs()
        study = self.wf.studies[wildcards.study]
        return [
            p
            for st, scales in self.registered_stages.items()
            if st not in NOT_RENDER_INPUTS and study.scale in scales
            for p in self.stage_targets[st](study)
        ]

    def study_target_map(self, rule_names: Iterable[str]) -> dict[str, str]:
        """Target -> study for every study (workflow_config.target_studies), refusing a study whose target would
        be one of the workflow's own rules `rule_names` (asked once every rule file is included)."""
        taken = set(rule_names)
        mapping = target_studies(self.wf.studies)
        for target, study in mapping.items():
            if target in taken:
                raise ConfigError(
                    f"studies.{study}",
                    f"its target `{target}` is already one of the workflow's rules; rename the study",
                )
        return mapping

    # ------------------------------------------------------------ the regime map (docs/regimes.md)
    def regime_base_source(self) -> str:
        """The source of the regime map's base study (config `regimes.base_study`)."""
        return self.wf.studies[self.wf.raw["regimes"]["base_study"]].source

    def regime_spec_file(self, name: str) -> str:
        """regime.json of regime `name`, under the base source's regimes/ folder."""
        return f"{self.results}/{self.regime_base_source()}/regimes/{name}/regime.json"

    def regime_spec_json(self, wc: Any) -> str:
        """regime.json's content (params: a config change rewrites it); reused arms point at the base tree."""
        regime = self.wf.regimes[wc.regime]
        reused = {arm: "../.." for arm in self.wf.regime_reuse[wc.regime]}
        return json.dumps(regime.spec(reused), sort_keys=True)

    def regime_reused_targets(self, name: str) -> list[str]:
        """The base study's train and eval outputs that a regime reads for its reused arms."""
        regime, base = self.wf.regimes[name], self.wf.studies[self.wf.raw["regimes"]["base_study"]]
        seeds = self.wf.regime_studies[name].seeds
        return [
            path
            for arm in self.wf.regime_reuse[name]
            for seed in seeds
            for path in [f"{self.train_dir(base.source, regime.backbone, arm, seed)}/run.json"]
            + [
                f"{self.eval_dir(base.source, regime.backbone, arm, seed)}/{bench}.{profile}.json"
                for bench in base.benchmarks
                for profile in base.profiles
            ]
        ]

    def regime_inputs(self, wildcards: Any = None) -> list[str]:
        """Everything the regime map's rendering reads: every regime's spec, runs and evaluations."""
        out: list[str] = []
        for name, study in self.wf.regime_studies.items():
            out += [self.regime_spec_file(name), *self.regime_reused_targets(name)]
            out += self.train_targets(study) + self.eval_targets(study)
        return out

    def regime_targets(self) -> list[str]:
        """Target tiny_regimes: the regime map's inputs, its data, the rendered base source and, when results
        go beside results/ (the reproduce stage is wired), the regime map's reproduction report.
        """
        if not self.wf.regimes:
            return []
        base = self.regime_base_source()
        data = [t for study in self.wf.regime_studies.values() for t in self.data_targets(study)]
        wired = "reproduce" in self.registered_stages
        reproduction = [f"{self.results}/{base}/reproduction/tiny_regimes.md"] if wired else []
        return data + self.regime_inputs() + [f"work/{base}/rendered.tiny_regimes.done"] + reproduction
