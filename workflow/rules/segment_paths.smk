# Segments under a partition time limit (config `partition_limit_min`): a training run whose requested
# runtime exceeds the limit is a chain of jobs. Segment k (rule train_tiny_segment on the CPU trainer,
# train_verl_cpu_segment / train_paper_segment on the verl route: verl_segments.smk) trains up to its stop
# step (exgrpo.workflow.cluster.segment_stops), checkpoints and exits; the next resumes from the checkpoint; the last
# segment is the run's own training job, which finishes and writes run.json. Each job requests its share
# of the runtime (exgrpo.workflow.cluster.segment_runtime). Unset limit: no segment jobs, the DAG is unchanged.
# Included before train.smk (the training rules' inputs and resources use these helpers).
from exgrpo.workflow.cluster import segment_runtime, segment_stops


def partition_limit():
    value = WF.raw.get("partition_limit_min")
    return int(value) if value else None


def run_runtime_min(source, backbone):
    """Minutes the run's training job asks for when it is one job: a verl CPU-mode run of a tiny base its own
    size (VERL_CPU_RESOURCES), any other run its backbone's `resources.train.runtime_min`.
    """
    if (
        BACKBONES[backbone]["scale"] == "tiny"
        and study_of_source(source).runtime == "verl"
    ):
        return int(VERL_CPU_RESOURCES["runtime"])
    return int(BACKBONES[backbone]["resources"]["train"]["runtime_min"])


def run_segments(source, backbone, variant, seed):
    """Stop steps of the run's segments before the last ([] = one job)."""
    if partition_limit() is None:
        return []
    if (
        BACKBONES[backbone]["scale"] == "paper"
    ):  # verl's trainer.total_training_steps (hydra_config)
        steps = int(BACKBONES[backbone]["steps"])
    else:
        steps = int(WF.study_run(source, backbone, variant, int(seed)).trainer["steps"])
    return segment_stops(steps, run_runtime_min(source, backbone), partition_limit())


def segment_runtime_of(wc):
    """`runtime` of one training job of the run (a segment, or the whole run under no limit)."""
    return segment_runtime(run_runtime_min(wc.source, wc.backbone), partition_limit())


def segment_flag(source, backbone, variant, seed, k):
    return f"{ckpt_dir(source, backbone, variant, seed)}/segments/{k}.done"


def segment_output():
    """A segment job's flag file (output `done`, wrapped in touch()), as a wildcard pattern."""
    return segment_flag("{source}", "{backbone}", "{variant}", "{seed}", "{segment}")


def segment_log():
    return log_file(
        "train", "{source}", "{backbone}", "{variant}", "s{seed}.segment{segment}"
    )


def segment_benchmark():
    return bench_file(
        "{source}", "train", "{backbone}", "{variant}", "s{seed}.segment{segment}"
    )


def previous_segment(wc):
    """Segment k waits for segment k-1 (the first for nothing)."""
    k = int(wc.segment)
    return (
        []
        if k == 1
        else [segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, k - 1)]
    )


def last_segment(wc):
    """The run's training job (the last segment) waits for the segment before it; [] when the run is one job."""
    stops = run_segments(wc.source, wc.backbone, wc.variant, wc.seed)
    return (
        [segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, len(stops))]
        if stops
        else []
    )


def segment_before(wc):
    """The verl route's training rules serve the run's own job and (verl_segments.smk) its segment jobs: each
    waits for the segment before it."""
    return previous_segment(wc) if "segment" in wc.keys() else last_segment(wc)


def train_resources():
    """backbone_resources("train") with the runtime of one segment under the partition limit."""
    return {**backbone_resources("train"), "runtime": segment_runtime_of}


def verl_cpu_train_resources():
    """A verl CPU-mode training job: VERL_CPU_RESOURCES and the site's CPU settings, with the runtime of one
    segment under the partition limit."""
    return {**VERL_CPU_RESOURCES, **cpu_resources(), "runtime": segment_runtime_of}


def segment_stop_override(wc):
    """The launch script's override that ends verl segment `wc.segment` after its stop step
    (exgrpo.verl_plugin.segments), with its leading space (the run's own job passes none).
    """
    stops = run_segments(wc.source, wc.backbone, wc.variant, wc.seed)
    return f" exgrpo.stop_after={stops[int(wc.segment) - 1]}"


def verl_collect_command(wc, output):
    """The verl route's last command in the run's own job: the results contract from the attempts' metrics, and
    the final actor exported in HF format for evaluation."""
    run_dir = ckpt_dir(wc.source, wc.backbone, wc.variant, wc.seed)
    return (
        f"exgrpo verl-collect --run-dir {run_dir} --out {os.path.dirname(output.run)}"
        f" --export-hf {run_dir}/final"
    )
