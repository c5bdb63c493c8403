# Preliminary study (paper §3.2, Table 9, Fig. 1): difficulty-masked GRPO runs (the `prelim`
# variants, trained by the train stage on a study's ablation_backbones, see Study.runs) and the
# trajectory analysis of the on-policy ("Full") model: entropy and PPL of correct-answer
# trajectories by difficulty bucket, with reasoning correctness from the judge (the exact step
# checker on the tiny task) and code-block detection (R1-R17).


rule prelim_tiny:
    input:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        data=study_data,
        hub=tiny_hub_inputs,
    output:
        f"{RESULTS}/{{source}}/prelim/{{backbone}}/trajectories.{{variant}}.s{{seed}}.parquet",
    log:
        log_file("prelim", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "prelim", "{backbone}", "{variant}", "s{seed}")
    conda:
        "../envs/cpu.yaml"
    threads: tiny_engine_threads
    resources:
        **backbone_resources("judge"),
    params:
        usage=warm_usage("prelim_tiny"),  # a warm job's CPU and RSS (common.smk)
        model=lambda wc: f"{ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final",
        data=lambda wc: tiny_data_arg(wc.source),
        offline=lambda wc: tiny_offline_prefix(wc.source),
        engine_env=lambda wc: tiny_engine_env(wc.source),
        judge=lambda wc: tiny_prelim_judge_args(wc.source),
        questions=lambda wc: 64 if study_of_source(wc.source).budget == "smoke" else 400,
    shell:
        "{params.usage}{params.offline}{params.engine_env}exgrpo prelim-analyze --model {params.model} --data {params.data} --split train"
        " --questions {params.questions} --k 8 {params.judge} --seed {wildcards.seed}"
        " --backbone {wildcards.backbone} --out {output} --no-progress > {log} 2>&1"


register_stage("prelim", scales=("tiny",))


# Paper scale: the LLM judge (paper §F.2) is fetched into the shared cache like a backbone.
rule download_judge:
    output:
        manifest=model_manifest(JUDGE_NAME),
    log:
        "logs/download_model/judge.log",
    benchmark:
        "logs/download_model/judge.benchmark.tsv"
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output.manifest)),
        model=JUDGE_MODEL,
        name=JUDGE_NAME,
        revision=JUDGE_REVISION,
        lock=f"config/locks/{JUDGE_NAME}.json",
    shell:
        "exgrpo download --out {params.out} --model {params.model} --name {params.name}"
        " --revision {params.revision} --lock {params.lock}"
        " --revision-field 'JUDGE_REVISION (exgrpo/workflow/paper_paths.py)' > {log} 2>&1"


# vLLM samples K rollouts per training question from the run's HF export, the judge (vLLM, after
# the policy is freed) rates the reasoning of correct-answer trajectories; offline from the cache.
rule prelim_paper:
    input:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        data=download_manifest(),
        judge=model_manifest(JUDGE_NAME),
    output:
        f"{RESULTS}/{{source}}/prelim/{{backbone}}/trajectories.{{variant}}.s{{seed}}.parquet",
    log:
        log_file("prelim", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "prelim", "{backbone}", "{variant}", "s{seed}")
    wildcard_constraints:
        backbone=backbones_of_scale("paper"),
    conda:
        "../envs/gpu.yaml"
    threads: backbone_threads("judge")
    resources:
        **backbone_resources("judge"),
    params:
        offline=offline_env(),
        model=lambda wc: f"{ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final",
        data=downloaded_file(VERL_DATA_FILES["train"]),
        questions=PRELIM_QUESTIONS,
        parallel=lambda wc: prelim_parallel_args(wc.backbone),
        judge_cache=lambda wc: f"work/{wc.source}/prelim/judge_cache.jsonl",
    shell:
        "(export {params.offline}"
        " && judge=$(python -m exgrpo.verl_plugin.collect model-dir {input.judge})"
        " && exgrpo prelim-analyze --engine vllm --model {params.model} --data {params.data}"
        " --questions {params.questions} --k 8 {params.parallel} --judge llm"
        ' --judge-model "$judge" --judge-cache {params.judge_cache}'
        " --seed {wildcards.seed} --backbone {wildcards.backbone} --out {output}"
        " --no-progress) > {log} 2>&1"


ruleorder: prelim_paper > prelim_tiny


register_stage("prelim", scales=("paper",))
