# Segments under a partition time limit (config `partition_limit_min`): a CPU-trainer run whose requested
# runtime exceeds the limit is a chain of jobs. Segment k (rule train_tiny_segment) trains up to its stop
# step (exgrpo.cluster.segment_stops), checkpoints and exits; the next resumes from the checkpoint; the last
# segment is the run's train_tiny job itself, which finishes and writes run.json. Each job requests its share
# of the runtime (exgrpo.cluster.segment_runtime). Unset limit: no segment jobs, the DAG is unchanged.
# Included before train.smk (train_tiny's inputs and resources use these helpers).
from exgrpo.cluster import segment_runtime, segment_stops


def partition_limit():
    value = WF.raw.get("partition_limit_min")
    return int(value) if value else None


def run_segments(source, backbone, variant, seed):
    """Stop steps of the run's segments before the last ([] = one job)."""
    spec = WF.study_run(source, backbone, variant, int(seed))
    runtime = int(BACKBONES[backbone]["resources"]["train"]["runtime_min"])
    return segment_stops(int(spec.trainer["steps"]), runtime, partition_limit())


def segment_flag(source, backbone, variant, seed, k):
    return f"{ckpt_dir(source, backbone, variant, seed)}/segments/{k}.done"


def previous_segment(wc):
    """Segment k waits for segment k-1 (the first for nothing)."""
    k = int(wc.segment)
    return (
        []
        if k == 1
        else [segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, k - 1)]
    )


def last_segment(wc):
    """train_tiny (the last segment) waits for the segment before it; [] when the run is one job."""
    if BACKBONES[wc.backbone]["scale"] != "tiny":
        return []
    stops = run_segments(wc.source, wc.backbone, wc.variant, wc.seed)
    return (
        [segment_flag(wc.source, wc.backbone, wc.variant, wc.seed, len(stops))]
        if stops
        else []
    )


def train_resources():
    """backbone_resources("train") with the runtime of one segment under the partition limit."""
    res = dict(backbone_resources("train"))

    def runtime(wc):
        return segment_runtime(
            int(BACKBONES[wc.backbone]["resources"]["train"]["runtime_min"]),
            partition_limit(),
        )

    res["runtime"] = runtime
    return res
