# Helpers shared by every stage: validated configuration, output paths, resources, targets.
#
# Rules read `config` only through these helpers. Path layout (the results contract):
#   results/<source>/{train,eval,prelim}/...       results (tracked for tiny and paper sources)
#   results/<source>/benchmarks/<rule>/...         Snakemake benchmark files -> compute ledger
#   work/<source>/{data,ckpt}/..., work/tiny/sft/  data and checkpoints (git-ignored)
#   <hf_cache>/                                    paper-scale downloads (shared, see config.yaml)
#   logs/<rule>/...                                job logs; logs of shared jobs also hold
#                                                  their benchmark files (no study to charge)
import os
import re

from exgrpo.config import ABLATIONS
from exgrpo.workflow_config import (
    GPU_SITE_ENV,
    SITE_ENV,
    gpu_refusal,
    job_resources,
    job_threads,
    load_workflow_config,
    site_resources,
    visible_gpus,
)

# Schemas sit next to this file (workflow/schemas), wherever the including Snakefile is.
WF = load_workflow_config(config, schema_dir=f"{workflow.current_basedir}/../schemas")
REPORT_DIR = f"{workflow.current_basedir}/../report"
BACKBONES = WF.backbones
STUDIES = WF.studies


wildcard_constraints:
    source=r"[a-z0-9][a-z0-9-]*",
    seed=r"\d+",
    backbone="|".join(re.escape(name) for name in BACKBONES),
    variant="|".join(["base", *ABLATIONS]),
    profile="paper|community|tiny",


# ---------------------------------------------------------------- paths
def data_dir(source, seed):
    """Tiny task splits written by `exgrpo make-data --out DIR --seed SEED`."""
    return f"work/{source}/data/s{seed}"


def data_manifest(source, seed):
    return f"{data_dir(source, seed)}/manifest.json"


def hf_cache():
    """Shared HF cache of paper-scale data, benchmarks and weights (EXGRPO_HF_CACHE overrides)."""
    return WF.hf_cache.rstrip("/")


def download_manifest():
    return f"{hf_cache()}/manifest.json"


def model_manifest(backbone):
    return f"{hf_cache()}/models/{backbone}.json"


def sft_dir(source, backbone):
    """SFT checkpoint of a tiny backbone (`exgrpo sft --out`), shared by every run of a source."""
    return f"work/{source}/sft/{backbone}"


def base_dir(source, backbone):
    """The base a tiny run starts from: the shipped models/tiny/<backbone> when its recipe matches
    the registry entry and the study's data seed (exgrpo.tiny.models.shipped_base; not for the smoke
    budget, which trains its own short SFT), else the checkpoint the `sft` rule builds.
    """
    from exgrpo.tiny.models import shipped_base

    study = study_of_source(source)
    if study.budget != "smoke":
        shipped = shipped_base(
            backbone, BACKBONES[backbone], study.data_seed, root="models/tiny"
        )
        if shipped is not None:
            return str(shipped)
    return sft_dir(source, backbone)


def train_dir(source, backbone, variant, seed):
    """`exgrpo train --out`: log.jsonl.gz and run.json land here."""
    return f"results/{source}/train/{backbone}/{variant}/s{seed}"


def ckpt_dir(source, backbone, variant, seed):
    """Checkpoints of one training run; a retried job resumes from here."""
    return f"work/{source}/ckpt/{backbone}/{variant}/s{seed}"


def eval_dir(source, backbone, variant, seed):
    """`exgrpo eval --out` of one trained model: <benchmark>.<profile>.json (+ .samples.parquet)."""
    return f"results/{source}/eval/{backbone}/{variant}/s{seed}"


def prelim_dir(source, backbone, variant, seed):
    return f"results/{source}/prelim/{backbone}/{variant}/s{seed}"


def log_file(rule, *parts):
    """logs/<rule>/<part>/.../<last>.log"""
    return os.path.join("logs", rule, *map(str, parts)) + ".log"


def bench_file(source, rule, *parts):
    """results/<source>/benchmarks/<rule>/<parts>.tsv: summarised later into the compute ledger."""
    return (
        os.path.join("results", source, "benchmarks", rule, *map(str, parts)) + ".tsv"
    )


def backbones_file():
    """The backbone registry in use (`backbones_file`, also handed to commands as --backbones)."""
    return WF.raw["backbones_file"]


def figure_sources():
    """Configured result sources that exist under results/ (re-rendered by `figures`)."""
    return [s for s in WF.raw["figures"]["sources"] if os.path.isdir(f"results/{s}")]


# ---------------------------------------------------------------- evaluated models
def tiny_eval_benchmarks():
    """Every benchmark a tiny-scale study evaluates, in config order.

    A tiny model is evaluated on all of them in one `exgrpo eval` call (one job per model and
    profile): lm-eval's start-up (~8 s) costs more than generating a tiny benchmark (~1-3 s), so
    one process per benchmark would spend most of the `tiny` budget importing.
    """
    names = []
    for study in STUDIES.values():
        if study.scale == "tiny":
            names += [b for b in study.benchmarks if b not in names]
    return names


def eval_model_input(wc):
    if wc.variant == "base":
        return f"{base_dir(wc.source, wc.backbone)}/config.json"
    return f"{train_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/run.json"


def eval_model_path(wc):
    if wc.variant == "base":
        return base_dir(wc.source, wc.backbone)
    return f"{ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final"


# ---------------------------------------------------------------- paper scale (verl plug-in, vLLM)
def backbones_of_scale(scale):
    """Regex of the registered backbones of `scale`. As a rule's wildcard constraint it keeps
    the paper rules off tiny targets; `ruleorder` prefers them on paper targets."""
    names = [re.escape(n) for n, e in BACKBONES.items() if e["scale"] == scale]
    return "|".join(names) if names else "(?!)"


VERL_DATA_FILES = {"train": "openr1_math_46k", "val": "exgrpo_valid"}
"""`exgrpo download` files (<hf_cache>/files/<name>.parquet) that verl trains and validates on:
the released training set (paper §3.2) and the released 2.2k validation set (paper.md §4.1)."""
VLLM_TP = 2
"""vLLM tensor parallel size of evaluation and trajectory sampling: the training rollouts' TP
(run_exgrpo.sh), which divides every paper backbone's attention heads (8 would not divide 28)."""
JUDGE_MODEL = "Qwen/Qwen3-32B"
JUDGE_NAME = "judge-qwen3-32b"
"""The preliminary study's LLM judge (paper §F.2) and its manifest name in the HF cache."""
JUDGE_TP = 4
PRELIM_QUESTIONS = 1000
"""Training questions the paper-scale trajectory analysis samples K rollouts for (paper: unstated)."""


def downloads_dir():
    """Where `exgrpo download` writes the training set and the released evaluation files."""
    return f"{hf_cache()}/files"


def downloaded_file(name):
    """A parquet file `exgrpo download` wrote (not a declared output: the manifest stands for it)."""
    return f"{downloads_dir()}/{name}.parquet"


def retemplated_file(name, prompt_format):
    """`exgrpo retemplate` copy of a downloaded file, its prompts in `prompt_format` (rule retemplate)."""
    return f"{downloads_dir()}/{name}.{prompt_format}.parquet"


def retemplated_formats():
    """Regex of the prompt formats some backbone trains on other than the chat template (rule retemplate)."""
    formats = sorted({prompt_format_of(b) for b in BACKBONES} - {"chat"})
    return "|".join(re.escape(f) for f in formats) if formats else "(?!)"


def verl_data_files(backbone):
    """role (train, val) -> the parquet verl reads for `backbone`: the downloaded file, or
    for a backbone not prompted through its chat template (Llama base, paper §G.1) its
    re-templated copy."""
    fmt = prompt_format_of(backbone)
    return {
        role: downloaded_file(name) if fmt == "chat" else retemplated_file(name, fmt)
        for role, name in VERL_DATA_FILES.items()
    }


def retemplated_inputs(wildcards):
    """train_paper's re-templated data files: none for chat-template backbones."""
    if prompt_format_of(wildcards.backbone) == "chat":
        return []
    return list(verl_data_files(wildcards.backbone).values())


def verl_data_args(backbone):
    """`--train-files/--val-files` of `exgrpo verl-config`, absolute: the launch script runs in the
    run directory."""
    files = verl_data_files(backbone)
    train, val = (os.path.abspath(files[r]) for r in ("train", "val"))
    return f"--train-files {train} --val-files {val}"


def launch_script(backbone):
    """The script `exgrpo verl-launch` renders for the backbone's node count; the train job runs it
    inside its own allocation (the multi-node one starts Ray on the allocated nodes)."""
    nodes = int(BACKBONES[backbone]["resources"].get("nodes", 1))
    return "launch_multi_node.sbatch" if nodes > 1 else "launch_single_node.sh"


def cached_model_cmd(manifest):
    """Shell substitution printing the snapshot folder named by a model manifest of `exgrpo
    download` (its commit is known only once the download ran)."""
    return f"$(python -m exgrpo.verl_plugin.collect model-dir {manifest})"


def paper_eval_model_input(wc):
    if wc.variant == "base":
        return model_manifest(wc.backbone)
    return f"{train_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/run.json"


def paper_eval_model(wc):
    """The HF folder evaluated: the cached backbone (`base`) or the run's export (ckpt_dir/final)."""
    if wc.variant == "base":
        return cached_model_cmd(model_manifest(wc.backbone))
    return eval_model_path(wc)


def prompt_format_of(backbone):
    """`exgrpo eval --prompt-format`: the paper's plain prompt for Llama base, else the chat template."""
    template = BACKBONES[backbone].get("template")
    return "llama_base" if template == "llama_base" else "chat"


# ---------------------------------------------------------------- studies and arguments
def study_of_source(source):
    return WF.study_for_source(source)


def data_for(source):
    """`--data` of a source's jobs: tiny splits, or the HF cache for paper scale."""
    study = study_of_source(source)
    if study.scale == "tiny":
        return data_dir(source, study.data_seed)
    return hf_cache()


def eval_data_for(source):
    """`exgrpo eval --data-dir`: the tiny splits, or the released eval files `exgrpo download` wrote."""
    study = study_of_source(source)
    if study.scale == "tiny":
        return data_dir(source, study.data_seed)
    return downloads_dir()


def init_for(source, backbone):
    """`--init` of training: the SFT checkpoint (tiny) or the HF model id, read from the cache (paper)."""
    entry = BACKBONES[backbone]
    return base_dir(source, backbone) if entry["scale"] == "tiny" else entry["hf_id"]


def sft_init(source, backbone):
    """The SFT checkpoint a tiny backbone starts from (`sft.init`), or None."""
    init = BACKBONES[backbone]["sft"]["init"]
    return sft_dir(source, init) if init else None


SMOKE_SFT_STEPS = 150
"""SFT steps of every backbone under the smoke budget (plumbing only: weak but not useless models)."""


def sft_steps_arg(source):
    return (
        f"--steps {SMOKE_SFT_STEPS}"
        if study_of_source(source).budget == "smoke"
        else ""
    )


def eval_limit_arg(source):
    """Smoke evaluation looks at the first 32 problems of each benchmark."""
    return "--limit 32" if study_of_source(source).budget == "smoke" else ""


def budget_args(source):
    budget = study_of_source(source).budget
    return "" if budget == "full" else f"--budget {budget}"


def set_args(variant):
    """`--set key=value ...` for the config's extra overrides of a variant (ABLATIONS gives the rest)."""
    items = WF.variant_overrides[variant].items()
    return " ".join(
        f"--set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in items
    )


def benchmarks_arg(source):
    return ",".join(study_of_source(source).benchmarks)


def offline_env():
    """Shell prefix for paper-scale jobs on compute nodes: everything comes from the shared cache."""
    return f"HF_HOME={hf_cache()} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"


# ---------------------------------------------------------------- resources
def backbone_threads(wildcards):
    return job_threads(BACKBONES[wildcards.backbone])


def backbone_resources():
    """`resources:` of a per-backbone rule: the backbone's entry plus EXGRPO_SLURM_* site settings.

    Use as `resources: **backbone_resources()` with `threads: backbone_threads`. A value of None
    drops the resource for that job (CPU backbones get no gpu/nodes; unset site settings vanish).
    """

    def resources_of(backbone):
        entry = job_resources(BACKBONES[backbone])
        return {**entry, **site_resources(gpu=bool(entry.get("gpu")))}

    def pick(key):
        return lambda wc: resources_of(wc.backbone).get(key)

    keys = {
        "mem_mb",
        "runtime",
        "gpu",
        "nodes",
        *SITE_ENV.values(),
        *GPU_SITE_ENV.values(),
    }
    return {key: pick(key) for key in sorted(keys)}


def cpu_resources():
    """Site settings for light CPU jobs (sizes come from the profile's default-resources)."""
    return site_resources(gpu=False)


# ---------------------------------------------------------------- targets
# What each stage adds to a study's target. A stage file calls register_stage(name) once its rules
# exist, so a target lists exactly the stages that are wired (never a stage without a command).
def data_targets(study):
    if study.scale == "tiny":
        return [data_manifest(study.source, study.data_seed)]
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


def prelim_file(source, backbone, variant, seed):
    """The loader reads prelim/<backbone>/trajectories*.parquet (results/README.md)."""
    return f"results/{source}/prelim/{backbone}/trajectories.{variant}.s{seed}.parquet"


STAGE_TARGET_FUNCTIONS = {
    "data": data_targets,
    "train": train_targets,
    "eval": eval_targets,
    "eval_base": base_eval_targets,
    "prelim": prelim_targets,
    "report": report_targets,
}
REGISTERED_STAGES = {}


def register_stage(stage, scales=("tiny", "paper")):
    """Add a wired stage's outputs to the targets of the studies of `scales` (tiny and/or paper)."""
    REGISTERED_STAGES.setdefault(stage, set()).update(scales)


def study_targets(name):
    study = STUDIES[name]
    return [
        path
        for st, scales in REGISTERED_STAGES.items()
        if study.scale in scales
        for path in STAGE_TARGET_FUNCTIONS[st](study)
    ]


def study_inputs(wildcards):
    """Everything a study's rendering depends on: its train, eval and prelim outputs."""
    study = STUDIES[wildcards.study]
    return [
        p
        for st, scales in REGISTERED_STAGES.items()
        if st not in ("report", "data") and study.scale in scales
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
        job.rule.name
        for job in dag.needrun_jobs()
        if (job.resources.get("gpu") or 0) > 0
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
