# The segment jobs of a verl run under a partition time limit (helpers in segment_paths.smk): the run's own
# rule with its inputs, settings and commands, except that the launch script gets `exgrpo.stop_after=S_k`
# (the trainer checkpoints step S_k and exits: exgrpo.verl_plugin.segments) and nothing is collected; the
# flag file says the segment finished. The next segment, and at last the run's own job, resume from verl's
# checkpoint (trainer.resume_mode=auto).


use rule train_verl_cpu as train_verl_cpu_segment with:
    output:
        done=touch(
            f"{ckpt_dir('{source}', '{backbone}', '{variant}', '{seed}')}/segments/{{segment}}.done"
        ),
    log:
        log_file(
            "train", "{source}", "{backbone}", "{variant}", "s{seed}.segment{segment}"
        ),
    benchmark:
        bench_file(
            "{source}", "train", "{backbone}", "{variant}", "s{seed}.segment{segment}"
        )
    wildcard_constraints:  # replaced, not merged: the rule's own, and the segment's
        source=sources_of_runtime("verl", scale="tiny"),
        segment=r"\d+",
    params:
        stop=segment_stop_override,
        finish=": segment done",


use rule train_paper as train_paper_segment with:
    output:
        done=touch(
            f"{ckpt_dir('{source}', '{backbone}', '{variant}', '{seed}')}/segments/{{segment}}.done"
        ),
    log:
        log_file(
            "train", "{source}", "{backbone}", "{variant}", "s{seed}.segment{segment}"
        ),
    benchmark:
        bench_file(
            "{source}", "train", "{backbone}", "{variant}", "s{seed}.segment{segment}"
        )
    wildcard_constraints:  # replaced, not merged: the rule's own, and the segment's
        backbone=backbones_of_scale("paper"),
        segment=r"\d+",
    params:
        stop=segment_stop_override,
        finish=": segment done",


ruleorder: train_verl_cpu_segment > train_tiny_segment
ruleorder: train_paper_segment > train_tiny_segment
