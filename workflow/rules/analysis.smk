# Analysis stage: tables and figures.
#
# `figures` re-renders every configured source found under results/ with the analysis CLI
# (`python -m analysis render`, which writes results/<source>/{tables,figures}/ and index.md), from
# what is already there: it has no inputs, so it never pulls training or evaluation into the DAG,
# and no outputs (hence no benchmark file either), so it runs each time it is asked for.


rule figures:
    log:
        "logs/figures/figures.log",
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        sources=figure_sources(),
        backbones=backbones_file(),
    shell:
        "(for source in {params.sources}; do"
        " python -m analysis render --results results --source $source --backbones {params.backbones}"
        " || exit 1;"
        " done) > {log} 2>&1"


rule render_study:
    input:
        study_inputs,
    output:
        touch("work/{source}/rendered.{study}.done"),
    log:
        "logs/render/{source}/{study}.log",
    benchmark:
        "results/{source}/benchmarks/render/{study}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        backbones=backbones_file(),
    shell:
        "python -m analysis render --results results --source {wildcards.source}"
        " --backbones {params.backbones} > {log} 2>&1"


register_stage("report", scales=("tiny", "paper"))
