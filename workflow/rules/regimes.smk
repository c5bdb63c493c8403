# The regime map (docs/regimes.md; config `regimes:`, exgrpo.regimes): target tiny_regimes.
#
# Each regime is a study of its own (source <base>/regimes/<name>) whose runs go through the usual
# rules (resolve_run, train_tiny, eval_tiny); its regime.json (what the analysis reads) is written
# from the config, so a changed regime rewrites it. Arms that are runs of the base study are read
# from the base tree (`reused` in regime.json) and come into the DAG through the base study's rules.


def regime_base_source():
    return STUDIES[WF.raw["regimes"]["base_study"]].source


def regime_spec_file(name):
    return f"results/{regime_base_source()}/regimes/{name}/regime.json"


def regime_spec_json(wc):
    """regime.json's content (params: a config change rewrites it); reused arms point at the base tree."""
    regime = WF.regimes[wc.regime]
    reused = {arm: "../.." for arm in WF.regime_reuse[wc.regime]}
    return json.dumps(regime.spec(reused), sort_keys=True)


def regime_reused_targets(name):
    """The base study's train and eval outputs that a regime reads for its reused arms."""
    regime, base = WF.regimes[name], STUDIES[WF.raw["regimes"]["base_study"]]
    seeds = WF.regime_studies[name].seeds
    return [
        path
        for arm in WF.regime_reuse[name]
        for seed in seeds
        for path in [f"{train_dir(base.source, regime.backbone, arm, seed)}/run.json"]
        + [
            f"{eval_dir(base.source, regime.backbone, arm, seed)}/{bench}.{profile}.json"
            for bench in base.benchmarks
            for profile in base.profiles
        ]
    ]


def regime_inputs(wildcards=None):
    """Everything the regime map's rendering reads: every regime's spec, runs and evaluations."""
    out = []
    for name, study in WF.regime_studies.items():
        out += [regime_spec_file(name)] + regime_reused_targets(name)
        out += train_targets(study) + eval_targets(study)
    return out


def regime_targets():
    """Target tiny_regimes: the regime map's inputs, its data, and the rendered base source."""
    if not WF.regimes:
        return []
    data = [t for study in WF.regime_studies.values() for t in data_targets(study)]
    return (
        data
        + regime_inputs()
        + [f"work/{regime_base_source()}/rendered.tiny_regimes.done"]
    )


rule regime_spec:
    output:
        "results/{source}/regimes/{regime}/regime.json",
    log:
        "logs/regime_spec/{source}/{regime}.log",
    benchmark:
        "logs/regime_spec/{source}/{regime}.benchmark.tsv"
    wildcard_constraints:
        source=r"[a-z0-9][a-z0-9-]*",
        regime="|".join(WF.regimes) or "(?!)",
    localrule: True
    params:
        spec=regime_spec_json,
    shell:  # as resolve_run: a shell write, no Snakemake process per job
        "printf '%s\\n' {params.spec:q} > {output}.tmp && mv {output}.tmp {output}"
        " && echo {wildcards.regime}: {output} > {log}"
