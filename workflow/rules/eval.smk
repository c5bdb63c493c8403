# Evaluation stage: `exgrpo eval --model PATH --benchmarks a,b --profile P --out DIR` per trained
# model, into eval_dir(source, backbone, variant, seed) as <benchmark>.<profile>.json files.
#
# Deliberately empty until it is wired (a stage without a rule stays out of the DAG). The helpers
# are in common.smk: eval_dir, eval_targets, eval_data_for (--data-dir), benchmarks_arg (the
# study's benchmark sets, expanded), backbone_threads / backbone_resources, offline_env (paper
# scale). Wiring = one rule here plus `register_stage("eval")`.
