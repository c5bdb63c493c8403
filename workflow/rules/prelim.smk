# Preliminary study (paper §3.2, Table 9, Fig. 1): difficulty-masked GRPO runs (the `prelim`
# variants, trained by the train stage on a study's ablation_backbones, see Study.runs) and their
# trajectory entropy / CoT-validity analysis into prelim_dir(source, backbone, variant, seed).
#
# Deliberately empty until it is wired (a stage without a rule stays out of the DAG).
# Wiring = its rule(s) here plus register_stage("prelim") with a target function in common.smk.
