# Analysis stage: tables and figures.
#
# `figures` re-renders every configured source found under results/ with the analysis CLI
# (`python -m analysis render`, which writes results/<source>/{tables,figures}/ and index.md), from
# what is already there: it has no inputs, so it never pulls training or evaluation into the DAG,
# and no outputs, so it runs each time it is asked for. Its benchmark file sits with its log (it
# renders every source, so no one source's ledger is charged).


rule figures:
    log:
        "logs/figures/figures.log",
    benchmark:
        "logs/figures/figures.tsv"
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        usage=warm_usage("figures"),  # a warm job's CPU and RSS (common.smk)
        sources=figure_sources(),
        backbones=backbones_file(),
    shell:
        "{params.usage}(for source in {params.sources}; do"
        " python -m analysis render --results results --source $source --backbones {params.backbones}"
        " || exit 1;"
        " done) > {log} 2>&1"


rule render_study:
    input:
        study_inputs,
    output:
        done=touch("work/{source}/rendered.{study}.done"),
        # The study's figures and their captions (<name>.rst), copied for `snakemake --report`:
        # results/<source>/figures/ is shared by the studies of a source, a job output is not.
        figures=as_report(
            directory("work/{source}/report/{study}"),
            category="{study}",
            caption="figure.rst",
            patterns=["{name}.png"],
        ),
    log:
        "logs/render/{source}/{study}.log",
    benchmark:
        f"{RESULTS}/{{source}}/benchmarks/render/{{study}}.tsv"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        usage=warm_usage("render_study"),  # a warm job's CPU and RSS (common.smk)
        backbones=backbones_file(),
        figures=f"{RESULTS}/{{source}}/figures",
        results=RESULTS,
    shell:
        "{params.usage}(python -m analysis render --results {params.results} --source {wildcards.source}"
        " --backbones {params.backbones}"
        " && mkdir -p {output.figures}"
        " && find {params.figures} -maxdepth 1 '(' -name '*.png' -o -name '*.rst' ')'"
        " -exec cp -t {output.figures} {{}} +) > {log} 2>&1"


register_stage("report", scales=("tiny", "paper"))


# The rerun against the committed reference (analysis.reproduce): the last job of every study's
# target when results go beside results/ (config `results_dir`, default reruns/). A source with no
# committed reference gets a report that lists every run as new. For the regime map (`study`
# tiny_regimes, as in study_inputs) the report compares the regimes under the base source and their
# verdicts (analysis.reproduce_regimes).
rule reproduce_study:
    input:
        "work/{source}/rendered.{study}.done",
    output:
        report="%s/{source}/reproduction/{study}.md" % RESULTS,
        figure="%s/{source}/reproduction/{study}.png" % RESULTS,
        table="%s/{source}/reproduction/{study}.json" % RESULTS,
    log:
        "logs/reproduce/{source}/{study}.log",
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        **cpu_resources(),
    params:
        backbones=backbones_file(),
        results=lambda wc, output: results_root_of(output.report, wc.source),
        regimes=lambda wc: "--regimes " if wc.study == "tiny_regimes" else "",
    shell:
        "python -m analysis reproduce --results results --rerun {params.results}"
        " --source {wildcards.source} --name {wildcards.study} {params.regimes}"
        "--backbones {params.backbones} > {log} 2>&1"


if RESULTS != "results":
    register_stage("reproduce", scales=("tiny", "paper"))
