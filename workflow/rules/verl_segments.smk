# The segment jobs of a verl run under a partition time limit (helpers in exgrpo.workflow.segments): the run's own
# rule with its inputs, settings and commands, except that the launch script gets `exgrpo.stop_after=S_k`
# (the trainer checkpoints step S_k and exits: exgrpo.verl_plugin.segments) and nothing is collected; the
# flag file says the segment finished. The next segment, and at last the run's own job, resume from verl's
# checkpoint (trainer.resume_mode=auto).


use rule train_verl_cpu as train_verl_cpu_segment with:
    output:
        done=touch(segment_output()),
    log:
        segment_log(),
    benchmark:
        segment_benchmark()
    wildcard_constraints:  # replaced, not merged: the rule's own, and the segment's
        source=sources_of_runtime("verl", scale="tiny"),
        segment=r"\d+",
    params:
        stop=segment_stop_override,
        finish=": segment done",


use rule train_paper as train_paper_segment with:
    output:
        done=touch(segment_output()),
    log:
        segment_log(),
    benchmark:
        segment_benchmark()
    wildcard_constraints:  # replaced, not merged: the rule's own, and the segment's
        backbone=backbones_of_scale("paper"),
        segment=r"\d+",
    params:
        stop=segment_stop_override,
        finish=": segment done",


ruleorder: train_verl_cpu_segment > train_tiny_segment
ruleorder: train_paper_segment > train_tiny_segment
