# Preliminary study (paper §3.2, Table 9, Fig. 1): difficulty-masked GRPO runs (the `prelim`
# variants, trained by the train stage on a study's ablation_backbones, see Study.runs) and the
# trajectory analysis of the on-policy ("Full") model: entropy and PPL of correct-answer
# trajectories by difficulty bucket, with reasoning correctness from the judge (the exact step
# checker on the tiny task) and code-block detection (R1-R17).


rule prelim_tiny:
    input:
        run=f"{train_dir('{source}', '{backbone}', '{variant}', '{seed}')}/run.json",
        data=lambda wc: data_manifest(wc.source, study_of_source(wc.source).data_seed),
    output:
        "results/{source}/prelim/{backbone}/trajectories.{variant}.s{seed}.parquet",
    log:
        log_file("prelim", "{source}", "{backbone}", "{variant}", "s{seed}"),
    benchmark:
        bench_file("{source}", "prelim", "{backbone}", "{variant}", "s{seed}")
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **backbone_resources(),
    params:
        model=lambda wc: f"{ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)}/final",
        data=lambda wc, input: os.path.dirname(input.data),
        questions=lambda wc: 64 if study_of_source(wc.source).budget == "smoke" else 400,
    shell:
        "exgrpo prelim-analyze --model {params.model} --data {params.data} --split train"
        " --questions {params.questions} --k 8 --judge step --seed {wildcards.seed}"
        " --backbone {wildcards.backbone} --out {output} --no-progress > {log} 2>&1"


register_stage("prelim", scales=("tiny",))
