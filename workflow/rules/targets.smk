# What each stage adds to a study's target, the report hook and the GPU guard. Included by
# common.smk.
# ---------------------------------------------------------------- targets
# What each stage adds to a study's target. A stage file calls register_stage(name) once its rules
# exist, so a target lists exactly the stages that are wired (never a stage without a command).
def data_targets(study):
    if study.scale == "tiny":
        return [data_manifest(study.source, study.data_seed)]
    if (
        study.data == "chat_if"
    ):  # paper §5.3: the WildChat-IF prompts and the study's reward model
        return [chat_if_manifest(), model_manifest(study.reward_model)] + [
            model_manifest(b) for b in study.backbones
        ]
    return [download_manifest()] + [model_manifest(b) for b in study.backbones]


def train_targets(study):
    return [f"{train_dir(study.source, b, v, s)}/run.json" for b, v, s in study.runs()]


def eval_targets(study):
    return [
        f"{eval_dir(study.source, b, v, s)}/{bench}.{profile}.json"
        for b, v, s in study.runs()
        for bench in study.benchmarks
        for profile in study.profiles
    ]


def base_eval_targets(study):
    """Evaluation of every backbone before RL (variant `base`: the SFT checkpoint or the HF model)."""
    return [
        f"{eval_dir(study.source, b, 'base', s)}/{bench}.{profile}.json"
        for b in study.backbones
        for s in study.seeds[:1]
        for bench in study.benchmarks
        for profile in study.profiles
    ]


def prelim_targets(study):
    """Trajectory analysis of the on-policy model of each ablation backbone (paper §3.2 uses Full)."""
    if not study.prelim:
        return []
    return [
        prelim_file(study.source, b, "on_policy", s)
        for b in study.ablation_backbones
        for s in study.seeds
    ]


def report_targets(study):
    """A flag written once the study's source is rendered (results/<source>/{tables,figures,index.md}).

    The flag is per study, not per source: `tiny` and `tiny_full` share results/tiny/, but each
    renders only after its own runs are done.
    """
    return [f"work/{study.source}/rendered.{study.name}.done"]


def reproduce_targets(study):
    """The study's reproduction report against results/<source>/ (rule reproduce_study)."""
    return [f"{RESULTS}/{study.source}/reproduction/{study.name}.md"]


def results_root_of(report, source):
    """The results folder of `<root>/<source>/reproduction/<study>.md` (a params function)."""
    from pathlib import Path

    return str(Path(report).parents[2 + source.count("/")])


def prelim_file(source, backbone, variant, seed):
    """The loader reads prelim/<backbone>/trajectories*.parquet (results/README.md)."""
    return (
        f"{RESULTS}/{source}/prelim/{backbone}/trajectories.{variant}.s{seed}.parquet"
    )


STAGE_TARGET_FUNCTIONS = {
    "data": data_targets,
    "train": train_targets,
    "eval": eval_targets,
    "eval_base": base_eval_targets,
    "prelim": prelim_targets,
    "report": report_targets,
    "reproduce": reproduce_targets,
}
REGISTERED_STAGES = {}


def register_stage(stage, scales=("tiny", "paper")):
    """Add a wired stage's outputs to the targets of the studies of `scales` (tiny and/or paper)."""
    REGISTERED_STAGES.setdefault(stage, set()).update(scales)


def study_target_map():
    """Target -> study for every study (exgrpo.workflow.workflow_config.target_studies), refusing a study whose
    target would be one of the workflow's own rules (called after every rule file is included).
    """
    from exgrpo.core.config import ConfigError
    from exgrpo.workflow.workflow_config import target_studies

    taken = {r.name for r in workflow.rules}
    mapping = target_studies(STUDIES)
    for target, study in mapping.items():
        if target in taken:
            raise ConfigError(
                f"studies.{study}",
                f"its target `{target}` is already one of the workflow's rules; rename the study",
            )
    return mapping


def study_targets(name):
    study = STUDIES[name]
    return [
        path
        for st, scales in REGISTERED_STAGES.items()
        if study.scale in scales
        for path in STAGE_TARGET_FUNCTIONS[st](study)
    ]


def study_inputs(wildcards):
    """Everything a study's rendering depends on: its train, eval and prelim outputs (for the
    regime map, `tiny_regimes`, every regime's: regimes.smk)."""
    if wildcards.study == "tiny_regimes":
        return regime_inputs()
    study = STUDIES[wildcards.study]
    return [
        p
        for st, scales in REGISTERED_STAGES.items()
        if st not in ("report", "data", "reproduce") and study.scale in scales
        for p in STAGE_TARGET_FUNCTIONS[st](study)
    ]


# ---------------------------------------------------------------- report hook
# `snakemake --report report.html <target>` collects outputs wrapped in report().
def as_report(path, category, caption=None, **kwargs):
    """Mark an output for the Snakemake report, with its caption from workflow/report/."""
    if caption:
        caption = os.path.join(REPORT_DIR, caption)
    return report(path, category=category, caption=caption, **kwargs)


# ---------------------------------------------------------------- GPU guard
def refuse_without_gpus(dag, targets):
    """Stop a real local run of GPU work where no GPU is visible (called from `onstart`)."""
    gpu_jobs = [
        job.rule.name for job in dag.needrun_jobs() if job_gpus(job.resources) > 0
    ]
    why = gpu_refusal(
        targets,
        gpu_jobs,
        local_exec=workflow.local_exec,
        gpus=visible_gpus() if workflow.local_exec else 0,
        allow_no_gpu=WF.allow_no_gpu,
    )
    if why:
        raise WorkflowError(why)


# ---------------------------------------------------------------- engine guard
def refuse_without_vllm(dag):
    """Stop a real run whose jobs start vLLM's CPU build where vLLM is not installed (called from `onstart`)."""
    vllm_jobs = [
        (study_of_source(job.wildcards.source).name, job.rule.name)
        for job in dag.needrun_jobs()
        if job.rule.name in VLLM_CPU_RULES
        and study_engines(job.wildcards.source) == "vllm"
    ]
    config_files = ", ".join(map(str, workflow.configfiles)) or "the config"
    why = engine_refusal(
        vllm_jobs,
        has_vllm=importlib.util.find_spec("vllm") is not None,
        config=config_files,
    )
    if why:
        raise WorkflowError(why)
