# Training stage: SFT of tiny backbones (`exgrpo sft`), then RL (`exgrpo train`) per
# backbone x variant x seed (Study.runs: methods on every backbone, ablations and prelim variants
# on the ablation backbones).
#
# Deliberately empty until it is wired (a stage without a rule stays out of the DAG). Wiring is
# one rule each plus `register_stage("train")`; the helpers are in common.smk:
#   output  f"{train_dir(source, backbone, variant, seed)}/run.json" (train_targets lists them)
#   log     log_file("train", source, backbone, variant, f"s{seed}")
#   bench   bench_file(source, "train", backbone, variant, f"s{seed}")
#   params  data_for(source), init_for(backbone) / sft_dir / sft_init, ckpt_dir(...),
#           budget_args(source), set_args(variant), config["backbones_file"] for --backbones
#   sizing  threads: backbone_threads; resources: **backbone_resources()
# A retried job (profile `retries`) resumes from its last checkpoint because it is handed the same
# --ckpt folder again. Paper-scale rules prefix the command with offline_env().
