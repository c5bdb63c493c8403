"""Paper-scale inputs and arguments of the workflow: the verl plug-in's data and launch, vLLM evaluation, the
preliminary study's judge, a `data: chat_if` study's reward model (moved from workflow/rules/paper_paths.smk)."""

from __future__ import annotations

import os
from typing import Any

from exgrpo.workflow.paths import Layout, one_of

VERL_DATA_FILES = {"train": "openr1_math_46k", "val": "exgrpo_valid"}
"""`exgrpo download` files (<hf_cache>/files/<name>.parquet) that verl trains and validates on: the released
training set (paper §3.2) and the released 2.2k validation set (`valid.parquet`, 2,259 rows)."""
CHAT_IF_FILES = {"train": "wildchat_if.verl", "val": "wildchat_if.verl"}
"""A `data: chat_if` study's verl files (paper §5.3): the WildChat-IF prompts (rule chat_prompts' conversion of
the downloaded hub-column file into verl's prompt rows) for training, and the same file as verl's validation set, which the reward-model runs never evaluate (trainer.test_freq -1, reward_serving)."""
JUDGE_MODEL = "Qwen/Qwen3-32B"
JUDGE_NAME = "judge-qwen3-32b"
JUDGE_REVISION = "9216db5781bf21249d130ec9da846c4624c16137"
"""The preliminary study's LLM judge (paper §F.2), its manifest name in the HF cache and its hub commit (read
from hub-cache snapshot folders in public code, not from the hub; the first download writes the lock
config/locks/judge-qwen3-32b.json of its files, which every later download checks)."""
PRELIM_QUESTIONS = 1000
"""Training questions the paper-scale trajectory analysis samples K rollouts for (paper: unstated)."""


def cached_model_cmd(manifest: str) -> str:
    """Shell substitution printing the snapshot folder named by a model manifest of `exgrpo download` (its
    commit is known only once the download ran)."""
    return f"$(python -m exgrpo.verl_plugin.collect model-dir {manifest})"


class PaperPaths(Layout):
    """The paper route's data files, reward model, launch script and evaluated model."""

    def prompt_format_of(self, backbone: str) -> str:
        """`exgrpo eval --prompt-format`: the paper's plain prompt for Llama base, else the chat template."""
        template = self.backbones[backbone].get("template")
        return "llama_base" if template == "llama_base" else "chat"

    def retemplated_formats(self) -> str:
        """Regex of the prompt formats some backbone trains on other than the chat template (rule
        retemplate)."""
        return one_of({self.prompt_format_of(b) for b in self.backbones} - {"chat"})

    def data_manifest_of(self, wc: Any) -> str:
        """The download a paper-scale run trains on: the math data, or a `data: chat_if` study's prompts."""
        if self.study_of_source(wc.source).data == "chat_if":
            return self.chat_if_manifest()
        return self.download_manifest()

    def verl_data_files(self, backbone: str, source: str) -> dict[str, str]:
        """role (train, val) -> the parquet verl reads for `backbone` in `source`: the downloaded file, or for
        a backbone not prompted through its chat template (Llama base, paper §G.1) its re-templated copy; a
        `data: chat_if` study's WildChat-IF file."""
        if self.study_of_source(source).data == "chat_if":
            return {
                role: f"{self.chat_if_dir()}/files/{name}.parquet" for role, name in CHAT_IF_FILES.items()
            }
        fmt = self.prompt_format_of(backbone)
        return {
            role: self.downloaded_file(name) if fmt == "chat" else self.retemplated_file(name, fmt)
            for role, name in VERL_DATA_FILES.items()
        }

    def retemplated_inputs(self, wildcards: Any) -> list[str]:
        """train_paper's converted data files: a `data: chat_if` study's verl prompt rows (rule chat_prompts), the
        re-templated copies for other prompt formats, none for chat-template backbones on the math data."""
        if self.study_of_source(wildcards.source).data == "chat_if":
            return list(self.verl_data_files(wildcards.backbone, wildcards.source).values())
        if self.prompt_format_of(wildcards.backbone) == "chat":
            return []
        return list(self.verl_data_files(wildcards.backbone, wildcards.source).values())

    def verl_data_args(self, backbone: str, source: str) -> str:
        """`--train-files/--val-files` of `exgrpo verl-config`, absolute: the launch script runs in the run
        directory."""
        files = self.verl_data_files(backbone, source)
        train, val = (os.path.abspath(files[r]) for r in ("train", "val"))
        return f"--train-files {train} --val-files {val}"

    def run_reward_kind(self, wc: Any) -> str:
        """The reward kind of the run's resolved method (`reward_model` for a Table 2 run)."""
        spec = self.wf.study_run(wc.source, wc.backbone, wc.variant, int(wc.seed))
        return str(spec.method.reward_kind)

    def reward_model_inputs(self, wc: Any) -> list[str]:
        """The manifest of the study's reward model (rule download_reward_model), for a run that trains on
        it."""
        name = self.study_of_source(wc.source).reward_model
        return [self.model_manifest(name)] if name and self.run_reward_kind(wc) == "reward_model" else []

    def reward_model_args(self, wc: Any) -> str:
        """`exgrpo verl-config --reward-model NAME --reward-model-path <its snapshot>` (paper §5.3), or
        nothing."""
        name = self.study_of_source(wc.source).reward_model
        if not name or not self.reward_model_inputs(wc):
            return ""
        return f"--reward-model {name} --reward-model-path {cached_model_cmd(self.model_manifest(name))}"

    def launch_script(self, backbone: str) -> str:
        """The script `exgrpo verl-launch` renders for the backbone's node count; the train job runs it inside
        its own allocation (the multi-node one starts Ray on the allocated nodes)."""
        nodes = int(self.backbones[backbone]["resources"]["train"].get("nodes", 1))
        return "launch_multi_node.sbatch" if nodes > 1 else "launch_single_node.sh"

    def paper_eval_model_input(self, wc: Any) -> str:
        """What a paper-scale evaluation waits for: the backbone's download, or the run's run.json."""
        if wc.variant == "base":
            return self.model_manifest(wc.backbone)
        return f"{self.train_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/run.json"

    def paper_eval_model(self, wc: Any) -> str:
        """The HF folder evaluated: the cached backbone (`base`) or the run's export (ckpt_dir/final).

        A backbone with a `context_extension` (config/backbones.yaml) is evaluated, like it is trained, from a
        copy whose config.json carries the extension (the export of a run already does).
        """
        if wc.variant != "base":
            return self.eval_model_path(wc)
        snapshot = cached_model_cmd(self.model_manifest(wc.backbone))
        if not self.backbones[wc.backbone].get("context_extension"):
            return snapshot
        return (
            f"$(python -m exgrpo.settings.backbones extend-context --backbones {self.backbones_file()}"
            f" --backbone {wc.backbone} --snapshot {snapshot}"
            f" --out work/{wc.source}/models/{wc.backbone})"
        )
