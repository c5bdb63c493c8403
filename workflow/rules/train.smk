# Training stage: SFT of tiny backbones (`exgrpo sft`), then RL (`exgrpo train`) per
# backbone x variant x seed (Study.runs: methods on every backbone, ablations and prelim variants
# on the ablation backbones).
#
# Each run is resolved once, into its run file (method.json), by a shell write rather than a `run:` block:
# Snakemake executes each `run:` job in a fresh Snakemake process that re-parses the workflow (seconds
# per job, x100 runs); this takes milliseconds.
rule resolve_run:
    output:
        run_file("{source}", "{backbone}", "{variant}", "{seed}"),
    log:
        log_file("resolve_run", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        "logs/resolve_run/{source}/{backbone}/{variant}/s{seed}.benchmark.tsv"
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        spec=resolved_run,
        summary=resolved_run_summary,
    shell:
        "printf '%s\\n' {params.spec:q} > {output}.tmp && mv {output}.tmp {output}"
        " && echo {params.summary:q} > {log}"


# Paper-scale backbones train with the verl plug-in instead (train_paper, GPUs, offline from the
# shared HF cache); both write the same results: log.jsonl.gz and run.json under results/.


rule sft:
    input:
        data=study_data,
        init=lambda wc: (
            [f"{sft_init(wc.source, wc.backbone)}/config.json"]
            if sft_init(wc.source, wc.backbone)
            else []
        ),
    output:
        model=f"{sft_dir('{source}', '{backbone}')}/config.json",
    log:
        log_file("sft", "{source}", "{backbone}"),
    benchmark:
        bench_file("{source}", "sft", "{backbone}")
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        usage=warm_usage("sft"),  # a warm job's CPU and RSS (common.smk)
        data=input_folder("data"),
        out=output_folder("model"),
        init=lambda wc: (
            f"--init {sft_init(wc.source, wc.backbone)}"
            if sft_init(wc.source, wc.backbone)
            else ""
        ),
        steps=lambda wc: sft_steps_arg(wc.source),
        backbones=backbones_file(),
    shell:
        "{params.usage}exgrpo sft --backbone {wildcards.backbone} --data {params.data} --out {params.out}"
        " {params.init} {params.steps} --backbones {params.backbones} --threads {threads}"
        " > {log} 2>&1"


rule train_tiny:
    input:
        data=study_data,
        init=base_config,
        run=run_file("{source}", "{backbone}", "{variant}", "{seed}"),
        segments=last_segment,  # the segment before it, under a partition limit (segments.smk)
        hub=tiny_hub_inputs,  # `inputs: hub_cache`: the published repos (exgrpo.workflow.hub_inputs)
    output:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        log=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/log.jsonl.gz",
    log:
        log_file("train", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "train", "{backbone}", "{variant}", "s{seed}")
    # training before evaluation when both are ready: the short evaluation jobs then fill both cores at
    # the end of a local run instead of one long training job running alone
    priority: 1
    conda:
        "../envs/cpu.yaml"
    threads: backbone_threads("train")
    resources:
        **train_resources(),
    params:
        usage=warm_usage("train_tiny"),  # a warm job's CPU and RSS (common.smk)
        data=lambda wc: tiny_data_arg(wc.source),
        init=lambda wc: tiny_base_arg(wc.source, wc.backbone),
        offline=lambda wc: tiny_offline_prefix(wc.source),
        out=output_folder("run"),
        ckpt=lambda wc: ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed),
        code=code_digest_of("train_tiny"),
    shell:
        "{params.usage}{params.offline}exgrpo train --run-file {input.run} --data {params.data} --init {params.init}"
        " --out {params.out} --ckpt {params.ckpt} --threads {threads} > {log} 2>&1"


register_stage("train", scales=("tiny",))


# A tiny-scale study with `runtime: verl` (paper_cpu) trains the same bases on the same task splits
# with verl's own trainer, in the plug-in's CPU mode (exgrpo.verl_plugin.tiny_route): the paper
# route's commands (verl-config, verl-launch, the launch script, verl-collect), on CPU. The export
# lands where a CPU-trainer run's final model does (ckpt_dir/final), so evaluation and the
# preliminary study read it with the tiny rules.
rule train_verl_cpu:
    input:
        data=tiny_train_inputs,  # the task data, or Table 2's converted chat prompts (tiny_chat_inputs)
        init=base_config,
        run=run_file("{source}", "{backbone}", "{variant}", "{seed}"),
        segments=segment_before,  # under a partition limit (exgrpo.workflow.segments, verl_segments.smk)
        hub=tiny_hub_inputs,
    output:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        log=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/log.jsonl.gz",
    log:
        log_file("train", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "train", "{backbone}", "{variant}", "s{seed}")
    wildcard_constraints:
        source=sources_of_runtime("verl", scale="tiny"),
    conda:
        "../envs/verl-cpu.yaml"
    threads: VERL_CPU_THREADS
    resources:
        **verl_cpu_train_resources(),
    params:
        data=lambda wc: tiny_verl_data_args(wc.source),
        init=lambda wc: tiny_base_arg(wc.source, wc.backbone),
        offline=lambda wc: tiny_offline_prefix(wc.source),
        run_dir=lambda wc: ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed),
        code=code_digest_of("train_verl_cpu"),
        backbones=backbones_file(),
        rollout=lambda wc: verl_rollout_arg(wc.source),
        reward_model=tiny_reward_model_args,  # Table 2's CPU route: the study's tiny reward model, served by verl
        stop="",  # a segment's " exgrpo.stop_after=S" (verl_segments.smk)
        finish=verl_collect_command,
    shell:
        "{params.offline}(exgrpo verl-config --run-file {input.run} --out {params.run_dir} --backbones {params.backbones}"
        " --device cpu {params.data} --model-path {params.init} {params.rollout}{params.reward_model}"
        " && exgrpo verl-launch --run-dir {params.run_dir}"
        " && bash {params.run_dir}/launch_single_node.sh{params.stop}"
        " && {params.finish}) > {log} 2>&1"


ruleorder: train_verl_cpu > train_tiny


# Paper scale, one job per run: write the verl config into the run directory (= ckpt_dir, so a
# retried job finds its checkpoints and resumes: trainer.resume_mode=auto), render the launch
# script, run it inside this job's allocation (one node, or Ray over `resources.nodes` nodes),
# then collect the per-attempt metrics into the results contract and export the final actor to
# ckpt_dir/final (HF format) for evaluation. run.json is written last.
rule train_paper:
    input:
        data=data_manifest_of,
        model=model_manifest("{backbone}"),
        reward_model=reward_model_inputs,  # paper §5.3: the study's reward model, served by verl
        prompts=retemplated_inputs,
        run=run_file("{source}", "{backbone}", "{variant}", "{seed}"),
        segments=segment_before,  # under a partition limit (exgrpo.workflow.segments, verl_segments.smk)
    output:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        log=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/log.jsonl.gz",
    log:
        log_file("train", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "train", "{backbone}", "{variant}", "s{seed}")
    wildcard_constraints:
        backbone=backbones_of_scale("paper"),
    conda:
        "../envs/gpu.yaml"
    threads: backbone_threads("train")
    resources:
        **train_resources(),
    params:
        offline=offline_env(),
        run_dir=lambda wc: ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed),
        data=lambda wc: verl_data_args(wc.backbone, wc.source),
        reward_model=reward_model_args,
        code=code_digest_of("train_paper"),
        launch=lambda wc: launch_script(wc.backbone),
        hf_home=lambda wc: hf_cache(),  # the shared cache (a chat_if study's data sit in a subfolder)
        backbones=backbones_file(),
        stop="",  # a segment's " exgrpo.stop_after=S" (verl_segments.smk)
        finish=verl_collect_command,
    shell:
        "(export {params.offline}"
        " && model=$(python -m exgrpo.verl_plugin.collect model-dir {input.model})"
        " && exgrpo verl-config --run-file {input.run} --out {params.run_dir}"
        ' --backbones {params.backbones} --model-path "$model" {params.data} {params.reward_model}'
        " && exgrpo verl-launch --run-dir {params.run_dir} --hf-home {params.hf_home}"
        " && bash {params.run_dir}/{params.launch}{params.stop}"
        " && {params.finish}) > {log} 2>&1"


ruleorder: train_paper > train_tiny


register_stage("train", scales=("paper",))
