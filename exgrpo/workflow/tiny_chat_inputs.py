"""Table 2's route on CPU (a tiny-scale study with `data: chat_if`, paper_continuous_cpu): its jobs' inputs and flags.

paper_continuous's rules at tiny scale, each input read from the hub cache as a cluster job reads its own
(exgrpo.hub.tiny_chat publishes them in rule hf_cache_tiny):
- the prompts: rule chat_prompts_tiny converts the dataset repo `exgrpo-tiny/wildchat-if-tiny` (the hub's columns)
  with the paper route's converter (`exgrpo chat-prompts`) into `work/<source>/chat_if/wildchat_if.verl.parquet`,
  which train_verl_cpu hands to `exgrpo verl-config` as `--train-files` and `--val-files` (as train_paper does
  the WildChat-IF file; the reward-model runs never validate);
- the reward model: `--reward-model <name> --reward-model-path <its model repo's snapshot>` (the study's
  `reward_model`, a `scale: tiny` entry of config/backbones.yaml `reward_models`, at its `revision`);
- the benchmarks: rule eval_tiny_chat_if evaluates every model on Table 2's three sets in one `exgrpo eval` call
  with `--data` the snapshot of `exgrpo-tiny/chat-if-eval-tiny` and the Arena-Hard judge on vLLM (transformers on
  the stand-ins), a shipped base (TINY_JUDGE) with vLLM's CPU-build settings, as the tiny preliminary study's judge.
"""

from __future__ import annotations

import os
from typing import Any

from exgrpo.workflow.hub_inputs import TINY_JUDGE, HubInputs, committed_revision, hub_path_cmd
from exgrpo.workflow.paths import one_of

CHAT_DIR = "models/tiny/chat_if"
"""The shipped tiny chat folder hf_cache_tiny publishes (exgrpo.hub.tiny_chat.CHAT_DIR)."""


def lock_revision(lock_name: str, repo_id: str) -> str:
    """The commit a committed lock config/locks/<lock_name>.json pins (a dataset repo of the hub cache)."""
    return committed_revision(lock_name, repo_id, f"--chat-if {CHAT_DIR}")


class TinyChatInputs(HubInputs):
    """The inputs and flags of a tiny-scale `data: chat_if` study's jobs (module docstring)."""

    def tiny_chat_if(self, source: str) -> bool:
        """Whether a source's study is a tiny-scale one trained on chat prompts (Table 2's CPU route)."""
        study = self.study_of_source(source)
        return (study.scale, study.data) == ("tiny", "chat_if")

    def tiny_chat_if_sources(self) -> str:
        """Regex of the sources of tiny-scale `data: chat_if` studies (a wildcard constraint)."""
        return one_of(s.source for s in self.wf.studies.values() if (s.scale, s.data) == ("tiny", "chat_if"))

    def tiny_chat_prompts_file(self, source: str) -> str:
        """verl's prompt parquet of the source's tiny chat prompts (rule chat_prompts_tiny's output)."""
        return f"work/{source}/chat_if/wildchat_if.verl.parquet"

    def tiny_chat_prompts_src(self, source: str) -> str:
        """`exgrpo chat-prompts --in`: the prompts' file in the dataset repo's snapshot, resolved offline."""
        from exgrpo.hub.tiny_chat import PROMPTS_FILE, PROMPTS_REPO

        revision = lock_revision(PROMPTS_REPO.lock_name, PROMPTS_REPO.repo_id)
        return f"{hub_path_cmd(PROMPTS_REPO.repo_id, revision, 'dataset')}/{PROMPTS_FILE}"

    def tiny_train_inputs(self, wc: Any) -> list[str]:
        """What a tiny-scale training job reads besides its base and run file: the task data's manifest, or the
        converted chat prompts."""
        if self.tiny_chat_if(wc.source):
            return [self.tiny_chat_prompts_file(wc.source)]
        return [self.study_data(wc)]

    def tiny_verl_data_args(self, source: str) -> str:
        """`exgrpo verl-config`'s data flags on CPU: `--data <task splits>`, or the converted chat prompts as
        `--train-files` and `--val-files` (absolute: the launch script runs in the run directory)."""
        if not self.tiny_chat_if(source):
            return f"--data {self.tiny_data_arg(source)}"
        prompts = os.path.abspath(self.tiny_chat_prompts_file(source))
        return f"--train-files {prompts} --val-files {prompts}"

    def tiny_reward_model_args(self, wc: Any) -> str:
        """` --reward-model NAME --reward-model-path <snapshot>` (leading space) for a run trained on the study's
        reward model, read from the hub cache at its registry revision; nothing otherwise."""
        name = self.study_of_source(wc.source).reward_model
        if not name or self.run_reward_kind(wc) != "reward_model":
            return ""
        entry = self.wf.reward_models[name]
        return f" --reward-model {name} --reward-model-path {hub_path_cmd(entry['hf_id'], entry['revision'])}"

    def tiny_chat_eval_data_arg(self, source: str) -> str:
        """`exgrpo eval --data` of Table 2's three benchmarks on CPU: the eval repo's snapshot, resolved offline."""
        from exgrpo.hub.tiny_chat import EVAL_REPO

        revision = lock_revision(EVAL_REPO.lock_name, EVAL_REPO.repo_id)
        return hub_path_cmd(EVAL_REPO.repo_id, revision, "dataset")

    def tiny_arena_args(self, wc: Any) -> str:
        """Arena-Hard's flags on CPU: the judge, a shipped base (TINY_JUDGE, read as the study reads its bases),
        with the judge engine's CPU settings (judge_engine.judge_vllm_cpu_flags, the flags the tiny prelim
        judge gets: its served window raised past the base's 256 positions, since Arena-Hard's judge prompt is
        ~2,000 tokens of a character-level tokenizer), on vLLM or, on the stand-ins, on transformers
        (`--arena-judge-engine hf`); and the policy's answer budget, the backbone's response length."""
        from exgrpo.prelim.judge_engine import judge_vllm_cpu_flags

        judge = self.tiny_base_arg(wc.source, TINY_JUDGE)
        engine = "vllm" if self.study_engines(wc.source) == "vllm" else "hf"
        tokens = int(self.backbones[wc.backbone]["max_response_length"])
        return " ".join(
            [
                f'--arena-judge-model "{judge}" --arena-judge-engine {engine}',
                *judge_vllm_cpu_flags(),
                f"--arena-max-tokens {tokens}",
            ]
        )

    def hf_cache_tiny_inputs(self, wc: Any) -> list[str]:
        """What rule hf_cache_tiny publishes from the study's own files: the task data's manifest, or the shipped
        tiny chat files (exgrpo.hub.tiny_chat)."""
        if not self.tiny_chat_if(wc.source):
            return [self.data_manifest(wc.source, wc.seed)]
        from exgrpo.hub.tiny_chat import CHAT_REPOS

        return sorted({f"{CHAT_DIR}/{file}" for repo in CHAT_REPOS for file in repo.files()})

    def hf_cache_tiny_args(self, wc: Any) -> str:
        """`exgrpo hf-cache build`'s study flags: `--data <task splits> --seed S`, or `--chat-if <shipped folder>`."""
        if not self.tiny_chat_if(wc.source):
            return f"--data {self.data_dir(wc.source, wc.seed)} --seed {wc.seed}"
        return f"--chat-if {CHAT_DIR}"


__all__ = ["CHAT_DIR", "TinyChatInputs", "lock_revision"]
