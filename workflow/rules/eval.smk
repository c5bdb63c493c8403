# Evaluation stage: `exgrpo eval` into eval_dir(source, backbone, variant, seed) as
# <benchmark>.<profile>.json + .samples.parquet. Variant `base` is the backbone before RL (the SFT
# checkpoint of a tiny backbone, the cached HF model of a paper-scale one).
# One job per (model, profile) covers every benchmark of the model's scale (eval_benchmarks): one
# start of lm-eval and of the model (a vLLM engine at paper scale) serves them all. Paper-scale jobs
# run offline from the shared HF cache and request exactly the GPUs of their vLLM engine
# (resources.eval: tensor_parallel x data_parallel). An interrupted job leaves no complete-looking
# file (each aggregate JSON is written last, atomically); a rerun completes the cache.


rule eval_tiny:
    input:
        model=eval_model_input,
        data=study_data,
        hub=tiny_hub_inputs,
    output:
        [
            f"{eval_dir('{source}', '{backbone}', '{variant}', '{seed}')}/{bench}.{{profile}}.json"
            for bench in eval_benchmarks("tiny")
        ],
    log:
        log_file("eval", "{source}", "{backbone}", "{variant}", "s{seed}", "{profile}"),
    benchmark:
        bench_file(
            "{source}", "eval", "{backbone}", "{variant}", "s{seed}", "{profile}"
        )
    conda:
        "../envs/cpu.yaml"
    threads: tiny_engine_threads
    resources:
        **backbone_resources("eval"),
    params:
        usage=warm_usage("eval_tiny"),  # a warm job's CPU and RSS (common.smk)
        model=tiny_eval_model_arg,
        benchmarks=",".join(eval_benchmarks("tiny")),
        data=lambda wc: tiny_data_arg(wc.source),
        offline=lambda wc: tiny_offline_prefix(wc.source),
        engine_env=lambda wc: tiny_engine_env(wc.source),
        out=output_folder(),
        code=code_digest_of("eval"),  # a change to the evaluation code re-evaluates
        limit=lambda wc: eval_limit_arg(wc.source),
        backend=lambda wc: tiny_eval_backend_args(wc.source),
    shell:
        "{params.usage}{params.offline}{params.engine_env}exgrpo eval {params.backend} --model {params.model} --benchmarks {params.benchmarks}"
        " --profile {wildcards.profile} --data {params.data} --out {params.out}"
        " --seed {wildcards.seed} --threads {threads} {params.limit} --no-progress > {log} 2>&1"


# Table 2's route on CPU (a tiny-scale `data: chat_if` study, paper_continuous_cpu): eval_paper_chat_if's one call
# for the three benchmarks, on the tiny route's engines (lm-eval's vllm backend, the Arena-Hard judge on vLLM, a
# shipped base) and with the tiny benchmark rows read from the hub cache (exgrpo.workflow.tiny_chat_inputs).
rule eval_tiny_chat_if:
    input:
        model=eval_model_input,
        hub=tiny_hub_inputs,
    output:
        [
            f"{eval_dir('{source}', '{backbone}', '{variant}', '{seed}')}/{bench}.{{profile}}.json"
            for bench in eval_benchmarks("tiny", data="chat_if")
        ],
    log:
        log_file("eval", "{source}", "{backbone}", "{variant}", "s{seed}", "{profile}"),
    benchmark:
        bench_file(
            "{source}", "eval", "{backbone}", "{variant}", "s{seed}", "{profile}"
        )
    wildcard_constraints:
        source=tiny_chat_if_sources(),
    conda:
        "../envs/cpu.yaml"
    threads: tiny_engine_threads
    resources:
        **backbone_resources("eval"),
    params:
        usage=warm_usage("eval_tiny_chat_if"),  # a warm job's CPU and RSS (common.smk)
        model=tiny_eval_model_arg,
        benchmarks=",".join(eval_benchmarks("tiny", data="chat_if")),
        data=lambda wc: tiny_chat_eval_data_arg(wc.source),
        offline=lambda wc: tiny_offline_prefix(wc.source),
        engine_env=lambda wc: tiny_engine_env(wc.source),
        out=output_folder(),
        code=code_digest_of("eval"),
        backend=lambda wc: tiny_eval_backend_args(wc.source),
        arena=tiny_arena_args,
    shell:
        "{params.usage}{params.offline}{params.engine_env}exgrpo eval {params.backend} --model {params.model} --benchmarks {params.benchmarks}"
        " --profile {wildcards.profile} --data {params.data} {params.arena} --out {params.out}"
        " --seed {wildcards.seed} --threads {threads} --no-progress > {log} 2>&1"


register_stage("eval", scales=("tiny",))
register_stage("eval_base", scales=("tiny",))


rule eval_paper:
    input:
        model=paper_eval_model_input,
        data=download_manifest(),
    output:
        [
            f"{eval_dir('{source}', '{backbone}', '{variant}', '{seed}')}/{bench}.{{profile}}.json"
            for bench in eval_benchmarks("paper")
        ],
    log:
        log_file("eval", "{source}", "{backbone}", "{variant}", "s{seed}", "{profile}"),
    benchmark:
        bench_file(
            "{source}", "eval", "{backbone}", "{variant}", "s{seed}", "{profile}"
        )
    wildcard_constraints:
        backbone=backbones_of_scale("paper"),
    conda:
        "../envs/gpu.yaml"
    threads: backbone_threads("eval")
    resources:
        **backbone_resources("eval"),
    params:
        offline=offline_env(),
        model=paper_eval_model,
        benchmarks=",".join(eval_benchmarks("paper")),
        data=lambda wc: eval_data_for(wc.source),
        out=output_folder(),
        code=code_digest_of("eval"),  # a change to the evaluation code re-evaluates
        prompt_format=lambda wc: prompt_format_of(wc.backbone),
        parallel=lambda wc: eval_parallel_args(wc.backbone),
    shell:
        "(export {params.offline} && model={params.model}"
        ' && exgrpo eval --model "$model" --benchmarks {params.benchmarks}'
        " --profile {wildcards.profile} --data {params.data} --out {params.out}"
        " --seed {wildcards.seed} --backend vllm {params.parallel}"
        " --prompt-format {params.prompt_format} --no-progress) > {log} 2>&1"


ruleorder: eval_paper > eval_tiny


# Table 2's benchmarks (paper §5.3) for a `data: chat_if` study's models: one job per model and profile like
# eval_paper. One `exgrpo eval` call generates all three on the vLLM backend, scores IFEval and IFBench, then
# starts the judge for Arena-Hard (exgrpo.eval.chat_run); their rows are read from the hub cache by repo id, at the
# commit rule download_chat_if_eval fetched (its manifest's folder is `--data`: exgrpo.eval.chat_inputs).
rule eval_paper_chat_if:
    input:
        model=paper_eval_model_input,
        data=f"{chat_if_dir()}/eval/manifest.json",
    output:
        [
            f"{eval_dir('{source}', '{backbone}', '{variant}', '{seed}')}/{bench}.{{profile}}.json"
            for bench in eval_benchmarks("paper", data="chat_if")
        ],
    log:
        log_file("eval", "{source}", "{backbone}", "{variant}", "s{seed}", "{profile}"),
    benchmark:
        bench_file(
            "{source}", "eval", "{backbone}", "{variant}", "s{seed}", "{profile}"
        )
    wildcard_constraints:
        backbone=backbones_of_scale("paper"),
        source=one_of(s.source for s in STUDIES.values() if s.data == "chat_if"),
    conda:
        "../envs/gpu.yaml"
    threads: backbone_threads("eval")
    resources:
        **backbone_resources("eval"),
    params:
        offline=offline_env(),
        model=paper_eval_model,
        benchmarks=",".join(eval_benchmarks("paper", data="chat_if")),
        data=lambda wc, input: os.path.dirname(input.data),
        out=output_folder(),
        code=code_digest_of("eval"),
        parallel=lambda wc: eval_parallel_args(wc.backbone),
    shell:
        "(export {params.offline} && model={params.model}"
        ' && exgrpo eval --model "$model" --benchmarks {params.benchmarks}'
        " --profile {wildcards.profile} --data {params.data} --out {params.out}"
        " --seed {wildcards.seed} --backend vllm {params.parallel} --no-progress) > {log} 2>&1"


register_stage("eval", scales=("paper",))
register_stage("eval_base", scales=("paper",))
