# Helpers shared by every stage: validated configuration, output paths, resources, targets.
#
# The logic lives in the package (exgrpo.workflow: paths, paper_paths, hub_inputs, tiny_chat_inputs, job_args,
# rule_resources, segments, targets, guards), under ruff, mypy and tests/workflow/; this file builds
# it once from the validated config (H) and binds each helper to the name the rules use.
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
import os
import re
import shlex
from pathlib import Path

from exgrpo.core.variants import ABLATIONS
from exgrpo.records.code_digest import code_digest
from exgrpo.workflow.guards import gpu_guard, vllm_guard
from exgrpo.workflow.hub_inputs import TINY_JUDGE, VERL_CPU_THREADS, data_revision
from exgrpo.workflow.job_args import SMOKE_SFT_STEPS, input_folder, output_folder
from exgrpo.workflow.paper_paths import (
    CHAT_IF_FILES,
    JUDGE_MODEL,
    JUDGE_NAME,
    JUDGE_REVISION,
    PRELIM_QUESTIONS,
    VERL_DATA_FILES,
    cached_model_cmd,
)
from exgrpo.workflow.paths import log_file, one_of
from exgrpo.workflow.rule_resources import VERL_CPU_RESOURCES, cpu_resources
from exgrpo.workflow.targets import WorkflowHelpers, results_root_of
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


# ---------------------------------------------------------------- helpers (exgrpo.workflow)
H = WorkflowHelpers(WF)
"""Every path, argument, resource and target helper, for this run's configuration."""
REGISTERED_STAGES = H.registered_stages

data_dir = H.data_dir
data_manifest = H.data_manifest
hf_cache = H.hf_cache
download_manifest = H.download_manifest
model_manifest = H.model_manifest
sft_dir = H.sft_dir
base_dir = H.base_dir
train_dir = H.train_dir
ckpt_dir = H.ckpt_dir
run_file = H.run_file
eval_dir = H.eval_dir
prelim_dir = H.prelim_dir
bench_file = H.bench_file
backbones_file = H.backbones_file
figure_sources = H.figure_sources
eval_benchmarks = H.eval_benchmarks
study_data = H.study_data
base_config = H.base_config
eval_model_input = H.eval_model_input
eval_model_path = H.eval_model_path
study_of_source = H.study_of_source
sources_of_runtime = H.sources_of_runtime
study_engines = H.study_engines
verl_rollout_arg = H.verl_rollout_arg
tiny_eval_backend_args = H.tiny_eval_backend_args
tiny_engine_threads = H.tiny_engine_threads
tiny_engine_env = H.tiny_engine_env
data_for = H.data_for
eval_data_for = H.eval_data_for
init_for = H.init_for
sft_init = H.sft_init
sft_steps_arg = H.sft_steps_arg
eval_limit_arg = H.eval_limit_arg
resolved_run = H.resolved_run
resolved_run_summary = H.resolved_run_summary
benchmarks_arg = H.benchmarks_arg
offline_env = H.offline_env
backbone_threads = H.backbone_threads
backbone_resources = H.backbone_resources
eval_parallel_args = H.eval_parallel_args
prelim_parallel_args = H.prelim_parallel_args
backbones_of_scale = H.backbones_of_scale
downloads_dir = H.downloads_dir
downloaded_file = H.downloaded_file
retemplated_file = H.retemplated_file
retemplated_formats = H.retemplated_formats
chat_if_dir = H.chat_if_dir
chat_if_manifest = H.chat_if_manifest
data_manifest_of = H.data_manifest_of
verl_data_files = H.verl_data_files
retemplated_inputs = H.retemplated_inputs
verl_data_args = H.verl_data_args
reward_model_inputs = H.reward_model_inputs
reward_model_args = H.reward_model_args
run_reward_kind = H.run_reward_kind
launch_script = H.launch_script
paper_eval_model_input = H.paper_eval_model_input
paper_eval_model = H.paper_eval_model
prompt_format_of = H.prompt_format_of
data_targets = H.data_targets
train_targets = H.train_targets
eval_targets = H.eval_targets
base_eval_targets = H.base_eval_targets
prelim_targets = H.prelim_targets
report_targets = H.report_targets
reproduce_targets = H.reproduce_targets
prelim_file = H.prelim_file
register_stage = H.register_stage
study_targets = H.study_targets
study_inputs = H.study_inputs
regime_base_source = H.regime_base_source
regime_spec_file = H.regime_spec_file
regime_spec_json = H.regime_spec_json
regime_reused_targets = H.regime_reused_targets
regime_inputs = H.regime_inputs
regime_targets = H.regime_targets
partition_limit = H.partition_limit
run_runtime_min = H.run_runtime_min
run_segments = H.run_segments
segment_runtime_of = H.segment_runtime_of
segment_flag = H.segment_flag
segment_output = H.segment_output
segment_log = H.segment_log
segment_benchmark = H.segment_benchmark
previous_segment = H.previous_segment
last_segment = H.last_segment
segment_before = H.segment_before
train_resources = H.train_resources
verl_cpu_train_resources = H.verl_cpu_train_resources
segment_stop_override = H.segment_stop_override
verl_collect_command = H.verl_collect_command
hub_inputs = H.hub_inputs
hub_cache_manifest = H.hub_cache_manifest
tiny_hub_inputs = H.tiny_hub_inputs
tiny_offline_prefix = H.tiny_offline_prefix
tiny_data_arg = H.tiny_data_arg
tiny_base_arg = H.tiny_base_arg
tiny_eval_model_arg = H.tiny_eval_model_arg
tiny_prelim_judge_args = H.tiny_prelim_judge_args
tiny_chat_if_sources = H.tiny_chat_if_sources
tiny_chat_prompts_file = H.tiny_chat_prompts_file
tiny_chat_prompts_src = H.tiny_chat_prompts_src
tiny_train_inputs = H.tiny_train_inputs
tiny_verl_data_args = H.tiny_verl_data_args
tiny_reward_model_args = H.tiny_reward_model_args
tiny_chat_eval_data_arg = H.tiny_chat_eval_data_arg
tiny_arena_args = H.tiny_arena_args
hf_cache_tiny_inputs = H.hf_cache_tiny_inputs
hf_cache_tiny_args = H.hf_cache_tiny_args


def code_digest_of(stage):
    """Digest of the package sources a stage runs (exgrpo.records.code_digest, from its imports): a params entry, so
    a code change reruns the jobs of the stages it touches."""
    return code_digest(stage)


def study_target_map():
    """Target -> study for every study, refusing one whose target is a rule (after every rule file is included)."""
    return H.study_target_map(r.name for r in workflow.rules)


# `snakemake --report report.html <target>` collects outputs wrapped in report().
def as_report(path, category, caption=None, **kwargs):
    """Mark an output for the Snakemake report, with its caption from workflow/report/."""
    if caption:
        caption = os.path.join(REPORT_DIR, caption)
    return report(path, category=category, caption=caption, **kwargs)


def refuse_without_gpus(dag, targets):
    """Stop a real local run of GPU work where no GPU is visible (called from `onstart`)."""
    why = gpu_guard(dag.needrun_jobs(), targets, workflow.local_exec, WF)
    if why:
        raise WorkflowError(why)


def refuse_without_vllm(dag):
    """Stop a real run whose jobs start vLLM's CPU build where vLLM is not installed (called from `onstart`)."""
    why = vllm_guard(dag.needrun_jobs(), workflow.configfiles, WF)
    if why:
        raise WorkflowError(why)


def start_warm_starts():
    """A local real run (called from `onstart`): a private folder for the warm-start servers, named to every job
    by EXGRPO_WARM_DIR (exgrpo.warm_client; each job kind's first job starts its server). Off under a cluster
    executor, with `--config warm_start=False` (the schema's default is true), or with EXGRPO_WARM_START=0.
    """
    from exgrpo.warm_client import ENV_DIR, ENV_OFF, ENV_OWNER

    if not (workflow.local_exec and WF.warm_start and os.environ.get(ENV_OFF) != "0"):
        os.environ.pop(ENV_DIR, None)
        return
    folder = os.path.abspath(
        os.path.join(".snakemake", "exgrpo-warm", str(os.getpid()))
    )
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    os.environ[ENV_DIR] = folder
    os.environ[ENV_OWNER] = str(os.getpid())


def warm_usage(rule_name):
    """A params entry of each job that may run warm (exgrpo.warm_client.COMMANDS, `python -m analysis`), the
    shell prefix that names `<its benchmark file>.warm.json` to the job (EXGRPO_BENCHMARK_USAGE) and removes a
    stale one, so the server records the child's CPU and peak RSS there, which the benchmark file, measuring
    only the client, lacks (analysis.ledger). Found by the rule's name, as Snakemake names no job's benchmark
    to its shell.
    """
    from exgrpo.warm_client import ENV_USAGE

    def prefix(wildcards):
        bench = workflow.get_rule(rule_name).expand_benchmark(dict(wildcards.items()))
        if bench is None:
            raise WorkflowError(
                f"warm_usage({rule_name!r}): rule {rule_name} has no benchmark file"
            )
        usage = shlex.quote(f"{bench}.warm.json")
        return f"export {ENV_USAGE}={usage} && rm -f {usage} && "

    return prefix


def stop_warm_starts():
    """Stop this run's warm-start servers (called from `onsuccess` and `onerror`); they also exit on their own
    once this Snakemake process is gone."""
    from exgrpo.warm_client import ENV_DIR

    folder = os.environ.pop(ENV_DIR, None)
    if folder and os.path.isdir(folder):
        from exgrpo.warm_start import stop_all

        stop_all(Path(folder))
