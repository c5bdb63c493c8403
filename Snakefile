# ExGRPO replication suite: the whole study as one Snakemake workflow.
#
# Targets (config/config.yaml says WHAT each runs; the profile says WHERE). Every study of the config
# is the target of its own name (`exgrpo studies` lists them); each writes under the config's results_dir
# (reruns/, beside the committed references in results/); the shipped ones:
#   tiny       (default) the embedded CPU study into reruns/tiny/, from the shipped bases (models/tiny/)
#   tiny_pretrain  rebuild the shipped tiny bases (SFT) into models/tiny/
#   tiny_full  the same with more seeds and every ablation
#   tiny_regimes  the pre-registered regime map (docs/regimes.md) into reruns/tiny/regimes/
#   smoke      minimal budgets on one tiny backbone (tests, CI)
#   all        (= paper_repro + paper_continuous) the paper replication at full scale into reruns/paper-repro/
#              and Table 2's reruns/paper-continuous/ (GPUs)
#   paper_cpu  the paper route (verl's trainer, CPU mode) on a tiny base into reruns/paper-cpu/
#   paper_headline  Table 1's Qwen2.5-Math-7B row (On-Policy vs ExGRPO, ID+OOD) into reruns/paper-repro/
#   paper_ablation_shaping  one ablation slice (Table 6 w/o Shaping) into reruns/paper-repro/
#   tiny_plugins  the plug-in example (docs/plugins.md) at 3 seeds; tiny_continuous  the Table 2 analogue
#   figures    re-render tables and figures from what is already under results/
# `snakemake --profile slurm all` submits to SLURM (./slurm -> profiles/slurm). Run locally, `all`
# refuses to start where nvidia-smi sees no GPU (dry runs always work).
import os

from snakemake.utils import min_version

from exgrpo.workflow.workflow_config import (
    DEFAULT_CONFIG,
    DEFAULT_STUDY,
    check_config_files,
    target_also,
)

min_version("9.0")

# Snakemake's own YAML reader lets a duplicated key win silently and reports a syntax error
# without the file: read the file strictly first (common.smk checks the overlays given with
# --configfile once Snakemake has merged them, and not this file again).
STRICTLY_READ = (
    check_config_files([DEFAULT_CONFIG]) if os.path.exists(DEFAULT_CONFIG) else []
)


configfile: DEFAULT_CONFIG


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/prelim.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/segments.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/verl_segments.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/regimes.smk"


onstart:
    refuse_without_gpus(workflow.dag, workflow.dag_settings.targets)
    refuse_without_vllm(workflow.dag)
    start_warm_starts()  # a local run: jobs forked by preloaded servers (exgrpo.warm_start, docs/cli.md)


onsuccess:
    stop_warm_starts()


onerror:
    stop_warm_starts()


localrules:
    tiny_regimes,


rule tiny_regimes:
    input:
        regime_targets(),


# One target per study, of the study's own name (and `all` for paper_repro, with Table 2's paper_continuous: the
# map is exgrpo.workflow.workflow_config.target_studies, the studies a target builds besides, target_also), so a
# study added by config or an overlay is a target too.
for _target, _study in study_target_map().items():
    _studies = (_study, *target_also(_target, STUDIES))

    rule:
        name:
            _target
        default_target: _target == DEFAULT_STUDY
        input:
            [path for s in _studies for path in study_targets(s)],
            # an input function: the partition limit is checked as this target's DAG is built (WF.check_target)
            lambda wc, ss=_studies: [x for s in ss for x in WF.check_target(s)],
        localrule: True
