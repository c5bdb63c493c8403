# Training stage: SFT of tiny backbones (`exgrpo sft`), then RL (`exgrpo train`) per
# backbone x variant x seed (Study.runs: methods on every backbone, ablations and prelim variants
# on the ablation backbones).
#
# A retried job (profile `retries`) resumes from its last checkpoint because it is handed the same
# --ckpt folder again; checkpoints live in work/, never under results/.
# Paper-scale training (the verl plug-in) is not wired yet: `all` lists no training jobs until it is.


rule sft:
    input:
        data=lambda wc: data_manifest(wc.source, study_of_source(wc.source).data_seed),
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
        data=lambda wc, input: os.path.dirname(input.data),
        out=lambda wc, output: os.path.dirname(output.model),
        init=lambda wc: (
            f"--init {sft_init(wc.source, wc.backbone)}"
            if sft_init(wc.source, wc.backbone)
            else ""
        ),
        steps=lambda wc: sft_steps_arg(wc.source),
        backbones=backbones_file(),
    shell:
        "exgrpo sft --backbone {wildcards.backbone} --data {params.data} --out {params.out}"
        " {params.init} {params.steps} --backbones {params.backbones} --threads {threads}"
        " > {log} 2>&1"


rule train_tiny:
    input:
        data=lambda wc: data_manifest(wc.source, study_of_source(wc.source).data_seed),
        init=f"{sft_dir('{source}', '{backbone}')}/config.json",
    output:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        log=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/log.jsonl",
    log:
        log_file("train", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "train", "{backbone}", "{variant}", "s{seed}")
    conda:
        "../envs/cpu.yaml"
    threads: backbone_threads
    resources:
        **backbone_resources(),
    params:
        data=lambda wc, input: os.path.dirname(input.data),
        init=lambda wc, input: os.path.dirname(input.init),
        out=lambda wc, output: os.path.dirname(output.run),
        ckpt=lambda wc: ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed),
        budget=lambda wc: budget_args(wc.source),
        sets=lambda wc: set_args(wc.variant),
        backbones=backbones_file(),
    shell:
        "exgrpo train --backbone {wildcards.backbone} --method {wildcards.variant}"
        " --data {params.data} --init {params.init} --out {params.out} --ckpt {params.ckpt}"
        " --seed {wildcards.seed} {params.budget} {params.sets} --backbones {params.backbones}"
        " --set threads={threads} > {log} 2>&1"


register_stage("train", scales=("tiny",))
