# Paper-scale helpers: the verl plug-in's data and launch, vLLM evaluation, the preliminary
# study's judge. Included by common.smk (which holds the configuration and the paths).
# ---------------------------------------------------------------- paper scale (verl plug-in, vLLM)
def backbones_of_scale(scale):
    """Regex of the registered backbones of `scale`. As a rule's wildcard constraint it keeps
    the paper rules off tiny targets; `ruleorder` prefers them on paper targets."""
    return one_of(n for n, e in BACKBONES.items() if e["scale"] == scale)


VERL_DATA_FILES = {"train": "openr1_math_46k", "val": "exgrpo_valid"}
"""`exgrpo download` files (<hf_cache>/files/<name>.parquet) that verl trains and validates on:
the released training set (paper §3.2) and the released 2.2k validation set (`valid.parquet`, 2,259 rows)."""
CHAT_IF_FILES = {"train": "wildchat_if.verl", "val": "wildchat_if.verl"}
"""A `data: chat_if` study's verl files (paper §5.3): the WildChat-IF prompts (rule chat_prompts' conversion of
the downloaded hub-column file into verl's prompt rows) for training, and the same file as
verl's validation set, which the reward-model runs never evaluate (trainer.test_freq -1, reward_serving)."""
JUDGE_MODEL = "Qwen/Qwen3-32B"
JUDGE_NAME = "judge-qwen3-32b"
JUDGE_REVISION = "9216db5781bf21249d130ec9da846c4624c16137"
"""The preliminary study's LLM judge (paper §F.2), its manifest name in the HF cache and its hub commit
(read from hub-cache snapshot folders in public code, not from the hub; the first download writes the lock
config/locks/judge-qwen3-32b.json of its files, which every later download checks)."""
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
    return one_of({prompt_format_of(b) for b in BACKBONES} - {"chat"})


def chat_if_dir():
    """Where `exgrpo download --only wildchat_if` writes Table 2's prompts (own manifest, paper §5.3)."""
    return f"{hf_cache()}/chat_if"


def chat_if_manifest():
    return f"{chat_if_dir()}/manifest.json"


def data_manifest_of(wc):
    """The download a paper-scale run trains on: the math data, or a `data: chat_if` study's prompts."""
    if study_of_source(wc.source).data == "chat_if":
        return chat_if_manifest()
    return download_manifest()


def verl_data_files(backbone, source):
    """role (train, val) -> the parquet verl reads for `backbone` in `source`: the downloaded file, or
    for a backbone not prompted through its chat template (Llama base, paper §G.1) its
    re-templated copy; a `data: chat_if` study's WildChat-IF file."""
    if study_of_source(source).data == "chat_if":
        return {
            role: f"{chat_if_dir()}/files/{name}.parquet"
            for role, name in CHAT_IF_FILES.items()
        }
    fmt = prompt_format_of(backbone)
    return {
        role: downloaded_file(name) if fmt == "chat" else retemplated_file(name, fmt)
        for role, name in VERL_DATA_FILES.items()
    }


def retemplated_inputs(wildcards):
    """train_paper's converted data files: a `data: chat_if` study's verl prompt rows (rule chat_prompts), the
    re-templated copies for other prompt formats, none for chat-template backbones on the math data."""
    if study_of_source(wildcards.source).data == "chat_if":
        return list(verl_data_files(wildcards.backbone, wildcards.source).values())
    if prompt_format_of(wildcards.backbone) == "chat":
        return []
    return list(verl_data_files(wildcards.backbone, wildcards.source).values())


def verl_data_args(backbone, source):
    """`--train-files/--val-files` of `exgrpo verl-config`, absolute: the launch script runs in the
    run directory."""
    files = verl_data_files(backbone, source)
    train, val = (os.path.abspath(files[r]) for r in ("train", "val"))
    return f"--train-files {train} --val-files {val}"


def reward_model_inputs(wc):
    """The manifest of the study's reward model (rule download_reward_model), for a run that trains on it."""
    name = study_of_source(wc.source).reward_model
    return (
        [model_manifest(name)] if name and run_reward_kind(wc) == "reward_model" else []
    )


def reward_model_args(wc):
    """`exgrpo verl-config --reward-model NAME --reward-model-path <its snapshot>` (paper §5.3), or nothing."""
    if not reward_model_inputs(wc):
        return ""
    name = study_of_source(wc.source).reward_model
    return f"--reward-model {name} --reward-model-path {cached_model_cmd(model_manifest(name))}"


def run_reward_kind(wc):
    return WF.study_run(
        wc.source, wc.backbone, wc.variant, int(wc.seed)
    ).method.reward_kind


def launch_script(backbone):
    """The script `exgrpo verl-launch` renders for the backbone's node count; the train job runs it
    inside its own allocation (the multi-node one starts Ray on the allocated nodes)."""
    nodes = int(BACKBONES[backbone]["resources"]["train"].get("nodes", 1))
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
    """The HF folder evaluated: the cached backbone (`base`) or the run's export (ckpt_dir/final).

    A backbone with a `context_extension` (config/backbones.yaml) is evaluated, like it is trained,
    from a copy whose config.json carries the extension (the export of a run already does).
    """
    if wc.variant == "base":
        snapshot = cached_model_cmd(model_manifest(wc.backbone))
        if not BACKBONES[wc.backbone].get("context_extension"):
            return snapshot
        return (
            f"$(python -m exgrpo.settings.backbones extend-context --backbones {backbones_file()}"
            f" --backbone {wc.backbone} --snapshot {snapshot}"
            f" --out work/{wc.source}/models/{wc.backbone})"
        )
    return eval_model_path(wc)


def prompt_format_of(backbone):
    """`exgrpo eval --prompt-format`: the paper's plain prompt for Llama base, else the chat template."""
    template = BACKBONES[backbone].get("template")
    return "llama_base" if template == "llama_base" else "chat"
