"""ExGRPO vs on-policy step time on the CPU trainer, measured side by side in one run.

Both trainers start from the same base (models/tiny/tiny-math when shipped, else the test fixture)
and batch size. ExGRPO runs with replay forced on
from step 1 (collecting from step 1), so after a short warm-up every step plans, selects and
replays. Steps of the two methods alternate, so machine noise hits both alike; the ratio of median
step times is reported (goal <= 1.03), with the selection/rollout/update split, and the same ratio of
per-step CPU time (less sensitive to other jobs on the machine).

    python benchmarks/bench_step.py [--model models/tiny/tiny-math] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from exgrpo.core.data_order import DataOrder
from exgrpo.core.variants import config_for
from exgrpo.records.io import write_json
from exgrpo.records.provenance import provenance
from exgrpo.settings.trainer_settings import TrainerSettings
from exgrpo.tiny.run import load_questions
from exgrpo.tiny.trainer import CPUTrainer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
GOAL = 1.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shipped = ROOT / "models" / "tiny" / "tiny-math"
    parser.add_argument(
        "--model",
        type=Path,
        default=shipped if (shipped / "config.json").exists() else ROOT / "tests" / "fixtures" / "tiny-sft",
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "step_time.json")
    args = parser.parse_args()

    from _machine import machine
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from exgrpo.testbed import splits as tiny_splits

    load_before = os.getloadavg()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tiny_splits.write_dataset(tmp, tiny_splits.make_splits(0))
        tok = AutoTokenizer.from_pretrained(args.model)
        train = load_questions(Path(tmp), "train", tok)
    targs = TrainerSettings(batch_size=args.batch_size, val_every=0)
    runs = {}
    for method, overrides in (
        ("on_policy", {}),
        ("exgrpo", {"delayed_start": False, "collect_before_activation": True}),
    ):
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        trainer = CPUTrainer(model, tok, config_for(method, **overrides), targs, train, [], seed=0)
        runs[method] = {"trainer": trainer, "order": DataOrder([q.qid for q in train], 0), "times": []}
    for step in range(1, args.warmup + args.steps + 1):
        for run in runs.values():
            trainer = run["trainer"]
            replay = trainer.manager.plan_replay(args.batch_size)
            fresh, _ = run["order"].take(args.batch_size - len(replay))
            cpu = time.process_time()
            m = trainer.step(step, fresh, replay)
            cpu = time.process_time() - cpu
            if step > args.warmup:
                run["times"].append(
                    {
                        "cpu/step": cpu,
                        **{
                            k: m[k]
                            for k in (
                                "time/step",
                                "time/selection",
                                "time/rollout",
                                "time/update",
                                "replay/n_trajectories",
                            )
                        },
                    }
                )
    summary = {}
    for method, run in runs.items():
        t = run["times"]
        summary[method] = {k: statistics.median(x[k] for x in t) for k in t[0]}
        run["trainer"].verifier.close()
    ratio = summary["exgrpo"]["time/step"] / summary["on_policy"]["time/step"]
    ratio_cpu = summary["exgrpo"]["cpu/step"] / summary["on_policy"]["cpu/step"]
    write_json(
        args.out,
        {
            "benchmark": "CPU trainer step time, ExGRPO vs on-policy (medians)",
            "model": str(args.model.relative_to(ROOT) if args.model.is_relative_to(ROOT) else args.model),
            "batch_size": args.batch_size,
            "steps": args.steps,
            "warmup": args.warmup,
            "median": summary,
            "ratio_exgrpo_over_on_policy": round(ratio, 4),
            "ratio_cpu_time": round(ratio_cpu, 4),
            "goal": GOAL,
            "kind": "ratio (side by side in one run); seconds are absolute and machine-dependent",
            "machine": machine(load_before),
            "provenance": provenance(seed=0, threads=torch.get_num_threads()),
        },
    )
    print(
        f"ExGRPO / on-policy median step time: {ratio:.3f}, CPU time {ratio_cpu:.3f} (goal <= {GOAL}) "
        f"-> {args.out}"
    )


if __name__ == "__main__":
    main()
