# Regime-map helpers (docs/regimes.md; exgrpo.workflow.regimes): spec files, inputs and the tiny_regimes target.
# Included by common.smk; the rule is in regimes.smk.
def regime_base_source():
    return STUDIES[WF.raw["regimes"]["base_study"]].source


def regime_spec_file(name):
    return f"{RESULTS}/{regime_base_source()}/regimes/{name}/regime.json"


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
    """Target tiny_regimes: the regime map's inputs, its data, the rendered base source and, when
    results go beside results/ (the reproduce stage is wired), the regime map's reproduction report.
    """
    if not WF.regimes:
        return []
    data = [t for study in WF.regime_studies.values() for t in data_targets(study)]
    reproduction = (
        [f"{RESULTS}/{regime_base_source()}/reproduction/tiny_regimes.md"]
        if "reproduce" in REGISTERED_STAGES
        else []
    )
    return (
        data
        + regime_inputs()
        + [f"work/{regime_base_source()}/rendered.tiny_regimes.done"]
        + reproduction
    )
