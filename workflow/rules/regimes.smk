# The regime map (docs/regimes.md; config `regimes:`, exgrpo.workflow.regimes): target tiny_regimes.
#
# Each regime is a study of its own (source <base>/regimes/<name>) whose runs go through the usual
# rules (resolve_run, train_tiny, eval_tiny); its regime.json (what the analysis reads) is written
# from the config, so a changed regime rewrites it. Arms that are runs of the base study are read
# from the base tree (`reused` in regime.json) and come into the DAG through the base study's rules.


rule regime_spec:
    output:
        f"{RESULTS}/{{source}}/regimes/{{regime}}/regime.json",
    log:
        "logs/regime_spec/{source}/{regime}.log",
    benchmark:
        "logs/regime_spec/{source}/{regime}.benchmark.tsv"
    wildcard_constraints:
        source=r"[a-z0-9][a-z0-9-]*",
        regime="|".join(WF.regimes) or "(?!)",
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        spec=regime_spec_json,
    shell:  # as resolve_run: a shell write, no Snakemake process per job
        "printf '%s\\n' {params.spec:q} > {output}.tmp && mv {output}.tmp {output}"
        " && echo {wildcards.regime}: {output} > {log}"
