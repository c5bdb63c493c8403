# Pre-training stage of the tiny testbed: `snakemake tiny_pretrain` rebuilds the shipped bases.
#
# The five tiny bases play the part of the paper's downloaded checkpoints: they are committed under
# models/tiny/<backbone>/ (HF format, safetensors, with base.json: recipe and weights sha256), and
# `tiny` / `tiny_full` start from them (base_dir in common.smk), as the paper starts from a base
# model. This target rebuilds them: the `sft` rule (exgrpo sft, registry steps, data seed of the
# `tiny` study) for every tiny backbone, then `install-bases` copies each checkpoint to
# models/tiny/ and records whether it is bit-identical to the base it replaces.

PRETRAIN_BACKBONES = [
    name for name, entry in BACKBONES.items() if entry["scale"] == "tiny"
]


rule install_bases:
    input:
        data=lambda wc: data_manifest("tiny", study_of_source("tiny").data_seed),
        built=lambda wc: [
            f"{sft_dir('tiny', b)}/config.json" for b in PRETRAIN_BACKBONES
        ],
    output:
        "models/tiny/bases.json",
    log:
        log_file("install_bases", "tiny"),
    benchmark:
        bench_file("tiny", "install_bases", "tiny")
    conda:
        "../envs/cpu.yaml"
    threads: 1
    params:
        built=sft_dir("tiny", ""),
        data=input_folder("data"),
        seed=lambda wc: study_of_source("tiny").data_seed,
        backbones=",".join(PRETRAIN_BACKBONES),
        registry=backbones_file(),
    shell:
        "python -m exgrpo.testbed.models install-bases --built {params.built} --backbones {params.backbones}"
        " --data {params.data} --data-seed {params.seed} --registry {params.registry}"
        " --out models/tiny > {output}.tmp 2> {log} && mv {output}.tmp {output}"


rule tiny_pretrain:
    input:
        "models/tiny/bases.json",


localrules:
    tiny_pretrain,
