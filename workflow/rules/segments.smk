# The segment jobs of a CPU-trainer run under a partition time limit; helpers in exgrpo.workflow.segments.


rule train_tiny_segment:
    input:
        data=study_data,
        init=base_config,
        run=run_file("{source}", "{backbone}", "{variant}", "{seed}"),
        previous=previous_segment,
    output:
        done=touch(segment_output()),
    log:
        segment_log(),
    benchmark:
        segment_benchmark()
    wildcard_constraints:
        segment=r"\d+",
    priority: 1
    conda:
        "../envs/cpu.yaml"
    threads: backbone_threads("train")
    resources:
        **train_resources(),
    params:
        usage=warm_usage("train_tiny_segment"),  # a warm job's CPU and RSS (common.smk)
        data=input_folder("data"),
        init=input_folder("init"),
        ckpt=lambda wc: ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed),
        scratch=lambda wc: f"work/{wc.source}/segments/{wc.backbone}/{wc.variant}/s{wc.seed}",
        stop=lambda wc: run_segments(wc.source, wc.backbone, wc.variant, wc.seed)[
            int(wc.segment) - 1
        ],
        code=code_digest_of("train_tiny"),
    shell:
        "{params.usage}exgrpo train --run-file {input.run} --data {params.data} --init {params.init}"
        " --out {params.scratch} --ckpt {params.ckpt} --threads {threads}"
        " --stop-after {params.stop} > {log} 2>&1"
