# A tiny-scale study's inputs read as a cluster's jobs read theirs: by repo id and revision from a hub cache
# with HF_HUB_OFFLINE=1 (study field `inputs: hub_cache`; docs/real-engines.md). Rule hf_cache_tiny publishes
# the shipped tiny backbones (config/backbones.yaml hf_id, revision) and the study's task data (the dataset repo
# exgrpo-tiny/tiny-task-s<seed>, pinned by config/locks/tiny-task-s<seed>.json) into <hf_cache>/hub and checks
# them with the download's own lock code; the jobs then resolve each repo with `exgrpo hf-cache path`. The
# helpers below give the local paths instead when the study reads local files (`inputs: local`, the default).
# Included by common.smk; hf_cache_tiny itself is in data.smk.
from exgrpo.hub.tiny import data_lock_name, data_repo_id

TINY_JUDGE = "tiny-math-h32"
"""The judge model of a tiny-scale study's preliminary study on the real engines (`engines: vllm`): a shipped
base vLLM's CPU build can serve (docs/real-engines.md)."""


def hub_inputs(source):
    """Whether a source's study reads its models and data from the hub cache (Study.inputs)."""
    return study_of_source(source).inputs == "hub_cache"


def hub_cache_manifest(source):
    """What hf_cache_tiny (data.smk) writes for a source: the repos it published and their commits."""
    return f"{hf_cache()}/tiny/{source}/s{study_of_source(source).data_seed}.json"


def tiny_hub_inputs(wc):
    """An input of a tiny-scale job: the hub cache manifest when its study reads the cache, else nothing."""
    return [hub_cache_manifest(wc.source)] if hub_inputs(wc.source) else []


def tiny_offline_prefix(source):
    """Shell prefix of a tiny-scale job: the compute nodes' offline environment when it reads the cache."""
    return f"export {offline_env()} && " if hub_inputs(source) else ""


def _hub_path_cmd(repo_id, revision, repo_type="model"):
    return f"$(exgrpo hf-cache path {repo_id} --revision {revision} --repo-type {repo_type})"


def data_revision(seed):
    """The commit of the data repo of `seed`, from its committed lock (the build refuses an unpinned one)."""
    lock = f"config/locks/{data_lock_name(seed)}.json"
    if not os.path.exists(lock):
        raise ValueError(
            f"{lock}: no lock pins {data_repo_id(seed)}; run `HF_HUB_OFFLINE=1 exgrpo hf-cache build --out DIR"
            f" --data work/<source>/data/s{seed} --seed {seed} --pin` once and commit the lock"
        )
    with open(lock) as fh:
        return json.load(fh)["revision"]


def tiny_data_arg(source):
    """`--data` of a tiny-scale job: the make-data folder, or the data repo's snapshot resolved offline."""
    seed = study_of_source(source).data_seed
    if not hub_inputs(source):
        return data_dir(source, seed)
    return _hub_path_cmd(data_repo_id(seed), data_revision(seed), "dataset")


def tiny_base_arg(source, backbone):
    """The base a tiny-scale job starts from or evaluates: base_dir, or the backbone's repo resolved offline
    (only a shipped base is published: a study whose base the sft job builds cannot read the cache).
    """
    if not hub_inputs(source):
        return base_dir(source, backbone)
    entry = BACKBONES[backbone]
    if base_dir(source, backbone) == sft_dir(source, backbone) or not entry.get(
        "hf_id"
    ):
        raise ValueError(
            f"{backbone}: a study with inputs: hub_cache reads the shipped base models/tiny/{backbone} from the"
            " hub cache; this one has no hf_id or no shipped base matching its recipe and data seed"
        )
    return _hub_path_cmd(entry["hf_id"], entry["revision"])


def tiny_eval_model_arg(wc):
    """`--model` of a tiny-scale evaluation: the run's final model, or for `base` the base (tiny_base_arg)."""
    if wc.variant == "base":
        return tiny_base_arg(wc.source, wc.backbone)
    return eval_model_path(wc)


def tiny_prelim_judge_args(source):
    """`exgrpo prelim-analyze` judge flags of a tiny-scale study: the exact step checker, or on the real engines
    the paper route's LLM judge on vLLM with a tiny judge model (JUDGE_VLLM_CPU_ARGS its only differences).
    """
    if study_engines(source) != "vllm":
        return "--judge step"
    from exgrpo.prelim.judge_engine import judge_vllm_cpu_flags

    judge = tiny_base_arg(source, TINY_JUDGE)
    return " ".join(
        [
            f'--judge llm --judge-model "{judge}"',
            f"--judge-cache work/{source}/prelim/judge_cache.jsonl",
            *judge_vllm_cpu_flags(),
        ]
    )
