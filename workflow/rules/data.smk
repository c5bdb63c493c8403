# Data stage.
#   tiny scale:  `exgrpo make-data` writes the task splits and work/<source>/data/s<seed>/manifest.json.
#   paper scale: `exgrpo download` fills the shared HF cache on the submit host (it needs internet;
#                compute nodes run offline), recording row counts and checksums in manifests.
#                `exgrpo retemplate` writes, next to a downloaded verl file, a copy prompted the way
#                a backbone not trained through its chat template is (Llama base, paper §G.1).


rule make_data:
    output:
        manifest="work/{source}/data/s{seed}/manifest.json",
    log:
        "logs/make_data/{source}/s{seed}.log",
    benchmark:
        f"{RESULTS}/{{source}}/benchmarks/make_data/s{{seed}}.tsv"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        out=output_folder("manifest"),
    shell:
        "exgrpo make-data --out {params.out} --seed {wildcards.seed} > {log} 2>&1"


rule download:
    output:
        manifest=download_manifest(),
    log:
        "logs/download/data.log",
    benchmark:
        "logs/download/data.benchmark.tsv"
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        out=output_folder("manifest"),
        # the training set's committed lock (its commit and files' sha256): an unpinned one is refused
        locks="config/locks",
    shell:
        "exgrpo download --out {params.out} --lock-dir {params.locks} > {log} 2>&1"


rule download_model:
    output:
        manifest=model_manifest("{backbone}"),
    log:
        "logs/download_model/{backbone}.log",
    benchmark:
        "logs/download_model/{backbone}.benchmark.tsv"
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output.manifest)),
        hf_id=lambda wc: BACKBONES[wc.backbone]["hf_id"],
        # the registry's pinned commit, and the committed lock of the files' sha256 (written when absent)
        pin=lambda wc: (
            f"--revision {BACKBONES[wc.backbone]['revision']} "
            if BACKBONES[wc.backbone].get("revision")
            else ""
        ),
        lock=lambda wc: f"config/locks/{wc.backbone}.json",
        field=lambda wc: f"backbones.{wc.backbone}.revision (config/backbones.yaml)",
    shell:
        "exgrpo download --out {params.out} --model {params.hf_id} --name {wildcards.backbone}"
        " {params.pin}--lock {params.lock} --revision-field '{params.field}' > {log} 2>&1"


# Paper §5.3 (Table 2): the WildChat-IF prompts, in their own folder and manifest (the math studies' download
# never waits for them), and the study's reward model, fetched into the cache like a backbone. Both pinned
# like the rest (config/locks/<name>.json; an unpinned one is refused naming its registry field).
rule download_chat_if:
    output:
        manifest=chat_if_manifest(),
    log:
        "logs/download/chat_if.log",
    benchmark:
        "logs/download/chat_if.benchmark.tsv"
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        out=output_folder("manifest"),
        locks="config/locks",
    shell:
        "exgrpo download --out {params.out} --only wildchat_if --lock-dir {params.locks} > {log} 2>&1"


# Paper §5.3 (Table 2): its evaluation sets (IFEval, IFBench, Arena-Hard v2.0; the names of `benchmarks.chat_if`,
# each a source of exgrpo/hub/sources.py at its commit) snapshotted into the hub cache compute jobs read (HF_HOME),
# their manifest beside the study's other chat files: eval_paper_chat_if reads each set at the commit it records.
rule download_chat_if_eval:
    output:
        manifest=f"{chat_if_dir()}/eval/manifest.json",
    log:
        "logs/download/chat_if_eval.log",
    benchmark:
        "logs/download/chat_if_eval.benchmark.tsv"
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        # <hf_cache>/chat_if/eval/manifest.json -> <hf_cache>, whose hub/ the evaluation jobs read (HF_HOME)
        out=lambda wc, output: os.path.dirname(
            os.path.dirname(os.path.dirname(output.manifest))
        ),
        sets=",".join(eval_benchmarks("paper", data="chat_if")),
        locks="config/locks",
    shell:
        "exgrpo download --out {params.out} --only {params.sets} --manifest {output.manifest}"
        " --lock-dir {params.locks} > {log} 2>&1"


# Paper §5.3 (Table 2): the downloaded WildChat-IF rows (hub columns) as verl's prompt parquet: `prompt` messages
# (verl applies the backbone's chat template itself), a `qid` from the row's id (exgrpo.hub.chat_prompt_rows).
rule chat_prompts:
    input:
        manifest=chat_if_manifest(),
    output:
        parquet=f"{chat_if_dir()}/files/wildchat_if.verl.parquet",
    log:
        "logs/chat_prompts/wildchat_if.log",
    benchmark:
        "logs/chat_prompts/wildchat_if.benchmark.tsv"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        src=f"{chat_if_dir()}/files/wildchat_if.parquet",
    shell:
        "exgrpo chat-prompts --in {params.src} --out {output.parquet} > {log} 2>&1"


rule download_reward_model:
    output:
        manifest=model_manifest("{reward_model}"),
    log:
        "logs/download_model/{reward_model}.log",
    benchmark:
        "logs/download_model/{reward_model}.benchmark.tsv"
    wildcard_constraints:
        reward_model=one_of(WF.reward_models),
    localrule: True
    conda:
        "../envs/gpu.yaml"
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output.manifest)),
        hf_id=lambda wc: WF.reward_models[wc.reward_model]["hf_id"],
        pin=lambda wc: (
            f"--revision {WF.reward_models[wc.reward_model]['revision']} "
            if WF.reward_models[wc.reward_model].get("revision")
            else ""
        ),
        lock=lambda wc: f"config/locks/{wc.reward_model}.json",
        field=lambda wc: f"reward_models.{wc.reward_model}.revision (config/backbones.yaml)",
    shell:
        "exgrpo download --out {params.out} --model {params.hf_id} --name {wildcards.reward_model}"
        " {params.pin}--lock {params.lock} --revision-field '{params.field}' > {log} 2>&1"


rule retemplate:
    input:
        manifest=download_manifest(),
    output:
        parquet=retemplated_file("{name}", "{prompt_format}"),
    log:
        "logs/retemplate/{name}.{prompt_format}.log",
    benchmark:
        "logs/retemplate/{name}.{prompt_format}.benchmark.tsv"
    wildcard_constraints:
        name=r"[a-z0-9_]+",
        prompt_format=retemplated_formats(),
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        src=lambda wc: downloaded_file(wc.name),
    shell:
        "exgrpo retemplate --in {params.src} --out {output.parquet}"
        " --prompt-format {wildcards.prompt_format} > {log} 2>&1"


register_stage("data")


# The hub cache a study with `inputs: hub_cache` reads (helpers in exgrpo.workflow.hub_inputs): the shipped models
# and the study's task data, or for Table 2's CPU route (`data: chat_if`) its tiny chat prompts and benchmark rows
# (exgrpo.hub.tiny_chat, exgrpo.workflow.tiny_chat_inputs).
rule hf_cache_tiny:
    input:
        data=hf_cache_tiny_inputs,
        backbones=backbones_file(),
    output:
        manifest=f"{hf_cache()}/tiny/{{source}}/s{{seed}}.json",
    log:
        "logs/hf_cache_tiny/{source}/s{seed}.log",
    benchmark:
        f"{RESULTS}/{{source}}/benchmarks/hf_cache_tiny/s{{seed}}.tsv"
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        # <hf_cache>/tiny/<source>/s<seed>.json -> <hf_cache>
        out=lambda wc, output: os.path.dirname(
            os.path.dirname(os.path.dirname(output.manifest))
        ),
        inputs=hf_cache_tiny_args,
    shell:
        "HF_HUB_OFFLINE=1 exgrpo hf-cache build --out {params.out} {params.inputs}"
        " --backbones {input.backbones} --manifest {output.manifest} > {log} 2>&1"


# Table 2's route on CPU: the tiny prompts, a dataset repo in the hub's columns, become verl's prompt rows with
# rule chat_prompts' converter, read offline from the hub cache as the study's other inputs are.
rule chat_prompts_tiny:
    input:
        hub=tiny_hub_inputs,
    output:
        parquet=tiny_chat_prompts_file("{source}"),
    log:
        "logs/chat_prompts/{source}.log",
    benchmark:
        f"{RESULTS}/{{source}}/benchmarks/chat_prompts/wildchat_if.tsv"
    wildcard_constraints:
        source=tiny_chat_if_sources(),
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        offline=lambda wc: tiny_offline_prefix(wc.source),
        src=lambda wc: tiny_chat_prompts_src(wc.source),
    shell:
        "{params.offline}exgrpo chat-prompts --in {params.src} --out {output.parquet} > {log} 2>&1"
