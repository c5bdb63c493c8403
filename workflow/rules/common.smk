# Helpers shared by every stage: validated configuration, output paths, resources, targets.
#
# Rules read `config` only through these helpers. Path layout (the results contract):
#   <R>/<source>/{train,eval,prelim}/...           results; <R> = config `results_dir` (default reruns/,
#                                                  git-ignored; results/ holds the committed references)
#   <R>/<source>/benchmarks/<rule>/...             Snakemake benchmark files -> compute ledger
#   <R>/<source>/reproduction/<study>.{md,png,json}  the rerun against results/<source>/ (analysis.reproduce)
#   work/<source>/{data,ckpt}/..., work/tiny/sft/  data and checkpoints (git-ignored)
#   work/<source>/runs/<backbone>/<variant>/s<seed>/method.json   each run's resolved config
#   <hf_cache>/                                    paper-scale downloads (shared, see config.yaml)
#   logs/<rule>/...                                job logs; logs of shared jobs also hold
#                                                  their benchmark files (no study to charge)
import importlib.util
import json
import os
import re

from exgrpo.core.variants import ABLATIONS
from exgrpo.records.code_digest import code_digest
from exgrpo.workflow.cluster import (
    GPU_SITE_ENV,
    SITE_ENV,
    VLLM_CPU_RULES,
    engine_refusal,
    gpu_refusal,
    job_gpus,
    job_resources,
    job_threads,
    site_resources,
    slurm_job_resources,
    visible_gpus,
    vllm_parallel,
)
from exgrpo.workflow.workflow_config import load_workflow_config

# Schemas sit next to this file (workflow/schemas), wherever the including Snakefile is. The
# Snakefile read config/config.yaml strictly before Snakemake did (STRICTLY_READ), so only the
# overlays are read again here; a Snakefile that did not (a test's probe) has every file checked.
WF = load_workflow_config(
    config,
    schema_dir=f"{workflow.current_basedir}/../schemas",
    config_files=workflow.configfiles,
    already_read=globals().get("STRICTLY_READ", ()),
)
REPORT_DIR = f"{workflow.current_basedir}/../report"
RESULTS = WF.results_dir
"""Where this run writes its results (config `results_dir`, default reruns/): never the committed
results/ unless asked (`--config results_dir=results`); `exgrpo promote` copies a rerun there."""
BACKBONES = WF.backbones
STUDIES = WF.studies


wildcard_constraints:
    # a study's source, or a regime's (<base source>/regimes/<regime>, exgrpo.workflow.regimes)
    source=r"[a-z0-9][a-z0-9-]*(/regimes/[a-z][a-z0-9_]*)?",
    seed=r"\d+",
    backbone="|".join(re.escape(name) for name in BACKBONES),
    # a variant, or an arm of a regime (<variant>-<tag>)
    variant="|".join(
        ["base", *ABLATIONS]
        + sorted(
            {re.escape(a) for r in WF.regimes.values() for a in r.arms}
            - set(ABLATIONS)
        )
    ),
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
    the registry entry and the study's data seed (exgrpo.testbed.models.shipped_base; not for the smoke
    budget, which trains its own short SFT), else the checkpoint the `sft` rule builds.
    """
    from exgrpo.testbed.models import shipped_base

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
    return f"{RESULTS}/{source}/train/{backbone}/{variant}/s{seed}"


def ckpt_dir(source, backbone, variant, seed):
    """Checkpoints of one training run; a retried job resumes from here."""
    return f"work/{source}/ckpt/{backbone}/{variant}/s{seed}"


def run_file(source, backbone, variant, seed):
    """The run's resolved config (rule resolve_run), read by `exgrpo train` / `exgrpo verl-config`."""
    return f"work/{source}/runs/{backbone}/{variant}/s{seed}/method.json"


def eval_dir(source, backbone, variant, seed):
    """`exgrpo eval --out` of one trained model: <benchmark>.<profile>.json (+ .samples.parquet)."""
    return f"{RESULTS}/{source}/eval/{backbone}/{variant}/s{seed}"


def prelim_dir(source, backbone, variant, seed):
    return f"{RESULTS}/{source}/prelim/{backbone}/{variant}/s{seed}"


def log_file(rule, *parts):
    """logs/<rule>/<part>/.../<last>.log"""
    return os.path.join("logs", rule, *map(str, parts)) + ".log"


def bench_file(source, rule, *parts):
    """<results_dir>/<source>/benchmarks/<rule>/<parts>.tsv: summarised later into the compute ledger."""
    return os.path.join(RESULTS, source, "benchmarks", rule, *map(str, parts)) + ".tsv"


def backbones_file():
    """The backbone registry in use (`backbones_file`, also handed to commands as --backbones)."""
    return WF.raw["backbones_file"]


def figure_sources():
    """Configured result sources that exist under results/ (re-rendered by `figures`)."""
    return [s for s in WF.raw["figures"]["sources"] if os.path.isdir(f"results/{s}")]


# ---------------------------------------------------------------- evaluated models
def eval_benchmarks(scale, data="math"):
    """Every benchmark the studies of `scale` (and training `data`: `chat_if` is Table 2's) evaluate, in
    config order.

    A model is evaluated on all of them in one `exgrpo eval` call (one job per model and profile):
    one start of lm-eval (~8 s, which dominates a tiny benchmark) or of the vLLM engine (minutes at
    paper scale) serves every benchmark.
    """
    names = []
    for study in STUDIES.values():
        if study.scale == scale and study.data == data:
            names += [b for b in study.benchmarks if b not in names]
    return names


def study_data(wc):
    """manifest.json of the task data the run's study trains and evaluates on (a tiny-scale input)."""
    return data_manifest(wc.source, study_of_source(wc.source).data_seed)


def base_config(wc):
    """config.json of the backbone's tiny base (the model a tiny-scale run starts from)."""
    return f"{base_dir(wc.source, wc.backbone)}/config.json"


def input_folder(name):
    """A params callable: the folder of input `name` (commands take folders, rules track files)."""
    return lambda wc, input: os.path.dirname(input[name])


def output_folder(name=0):
    """A params callable: the folder of output `name` (default the first)."""
    return lambda wc, output: os.path.dirname(output[name])


def eval_model_input(wc):
    if wc.variant == "base":
        return base_config(wc)
    return f"{train_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/run.json"


def eval_model_path(wc):
    if wc.variant == "base":
        return base_dir(wc.source, wc.backbone)
    return f"{ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final"


# ---------------------------------------------------------------- studies and arguments
def study_of_source(source):
    return WF.study_for_source(source)


def one_of(names):
    """Regex matching exactly one of `names` (a wildcard constraint); matches nothing for no names."""
    return "|".join(re.escape(n) for n in sorted(set(names))) or "(?!)"


def sources_of_runtime(runtime, scale):
    """Regex of the result sources of the `scale` studies trained by `runtime` (a rule's wildcard
    constraint: train_verl_cpu takes the tiny-scale studies with `runtime: verl`)."""
    return one_of(
        s.source
        for s in WF.studies.values()
        if (s.runtime, s.scale) == (runtime, scale)
    )


def study_engines(source):
    """`stand_in` or `vllm`: the CPU engines of a source's study (Study.engines)."""
    return study_of_source(source).engines


def verl_rollout_arg(source):
    """`exgrpo verl-config` flag choosing a tiny-scale verl study's rollout (verl's vLLM or exgrpo_cpu)."""
    return "--rollout vllm" if study_engines(source) == "vllm" else ""


def tiny_eval_backend_args(source):
    """`exgrpo eval` backend flags of a tiny-scale evaluation: the `tiny` sampler, or lm-eval's `vllm`
    backend with the paper route's model_args changed by exgrpo.eval.backends.VLLM_CPU_ARGS only.
    """
    if study_engines(source) != "vllm":
        return "--backend tiny"
    from exgrpo.eval.backends import vllm_cpu_flags

    return " ".join(["--backend vllm", *vllm_cpu_flags()])


def tiny_engine_threads(wc):
    """`threads:` of a tiny-scale evaluation or preliminary-study job: one (tiny_model_args) on the stand-ins;
    on the real engines the cores of a verl CPU run (VERL_CPU_THREADS), so that a vLLM engine never shares
    them with another: each binds every core of its NUMA node, and two evaluations started together on the
    2-core machine lost their vLLM workers at the same moment (docs/real-engines.md)."""
    return VERL_CPU_THREADS if study_engines(wc.source) == "vllm" else 1


def tiny_engine_env(source):
    """Shell prefix of a tiny-scale evaluation or preliminary-study job: on the real engines, the environment
    vLLM's CPU build runs under there (exgrpo.eval.backends.VLLM_CPU_ENV); nothing on the stand-ins.
    """
    if study_engines(source) != "vllm":
        return ""
    from exgrpo.eval.backends import vllm_cpu_env_prefix

    return vllm_cpu_env_prefix()


VERL_CPU_THREADS = 2
"""Cores of a verl CPU-mode run: its driver, Ray, the FSDP worker and the rollout server share them."""
VERL_CPU_RESOURCES = {"mem_mb": 16000, "runtime": 120}
"""Job size of a verl CPU-mode run of a tiny base: about ten Python processes of 0.3-0.7 GB each (Ray,
TransferQueue, the workers), and minutes of start-up before the first step."""


def data_for(source):
    """`--data` of a source's jobs: tiny splits, or the HF cache for paper scale."""
    study = study_of_source(source)
    if study.scale == "tiny":
        return data_dir(source, study.data_seed)
    return hf_cache()


def eval_data_for(source):
    """`exgrpo eval --data`: the tiny splits, the released eval files `exgrpo download` wrote, or (a
    `data: chat_if` study) the folder of Table 2's download."""
    study = study_of_source(source)
    if study.scale == "tiny":
        return data_dir(source, study.data_seed)
    return f"{chat_if_dir()}/files" if study.data == "chat_if" else downloads_dir()


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


def resolved_run(wc):
    """The run's resolution (exgrpo.settings.resolve.run_spec) as canonical JSON: rule resolve_run's params,
    so a config change that alters it reruns that rule, and through method.json the training.
    """
    spec = WF.study_run(wc.source, wc.backbone, wc.variant, int(wc.seed))
    return json.dumps(spec.to_dict(), sort_keys=True)


def resolved_run_summary(wc):
    """One line for the resolve_run job's log: which run, resolved how, written where."""
    spec = WF.study_run(wc.source, wc.backbone, wc.variant, int(wc.seed))
    path = run_file(wc.source, wc.backbone, wc.variant, wc.seed)
    return (
        f"{wc.backbone}/{wc.variant}/s{wc.seed} ({spec.budget} budget): resolved "
        f"{' < '.join(spec.to_dict()['precedence'])} -> {path}"
    )


def code_digest_of(stage):
    """Digest of the package sources a stage runs (exgrpo.records.code_digest, from its imports): a params entry, so
    a code change reruns the jobs of the stages it touches."""
    return code_digest(stage)


def benchmarks_arg(source):
    return ",".join(study_of_source(source).benchmarks)


def offline_env():
    """Shell prefix for paper-scale jobs on compute nodes: everything comes from the shared cache."""
    return f"HF_HOME={hf_cache()} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"


# ---------------------------------------------------------------- resources
# Per-backbone jobs take their size from one stage of the backbone's `resources` in
# config/backbones.yaml (train for train_*, eval for eval_*, judge for prelim_*). The vLLM arguments
# below come from the same entry, so a job requests exactly the GPUs its command uses.
def backbone_threads(stage):
    """`threads:` of a per-backbone rule of `stage` (a callable of the wildcards)."""
    return lambda wildcards: job_threads(BACKBONES[wildcards.backbone], stage)


def backbone_resources(stage):
    """`resources:` of a per-backbone rule: the backbone's `stage` entry plus EXGRPO_SLURM_* site settings.

    Use as `resources: **backbone_resources(stage)` with `threads: backbone_threads(stage)`. A value
    of None drops the resource for that job (CPU backbones get no gpu/nodes; unset site settings vanish).
    """

    def resources_of(backbone):
        return slurm_job_resources(BACKBONES[backbone], stage)

    def pick(key):
        return lambda wc: resources_of(wc.backbone).get(key)

    keys = {
        "mem_mb",
        "runtime",
        "gpu",
        "gres",
        "nodes",
        *SITE_ENV.values(),
        *GPU_SITE_ENV.values(),
    }
    return {key: pick(key) for key in sorted(keys)}


def cpu_resources():
    """Site settings for light CPU jobs (sizes come from the profile's default-resources)."""
    return site_resources(gpu=False)


def eval_parallel_args(backbone):
    """`exgrpo eval` vLLM flags: the backbone's eval tensor_parallel x data_parallel (= the job's GPUs)."""
    tp, dp = vllm_parallel(BACKBONES[backbone], "eval")
    return f"--tensor-parallel-size {tp} --data-parallel-size {dp}"


def prelim_parallel_args(backbone):
    """`exgrpo prelim-analyze` flags: the policy samples on eval's tensor_parallel, then the judge runs
    on its own (the job requests the larger of the two)."""
    policy_tp, _ = vllm_parallel(BACKBONES[backbone], "eval")
    judge_tp, _ = vllm_parallel(BACKBONES[backbone], "judge")
    return f"--tensor-parallel-size {policy_tp} --judge-tensor-parallel-size {judge_tp}"


# Paper-scale helpers (verl plug-in, vLLM) and the targets of each study, by responsibility.
include: "paper_paths.smk"
include: "targets.smk"
include: "regime_paths.smk"
include: "segment_paths.smk"
include: "hub_paths.smk"
