"""The verifier drill of benchmarks/fuzz_verifier.py at CI size: adversarial answers from 2 threads and
2 processes give 0 crashes, no batch past its timeout budget, and every timeout counted."""

import sys
from pathlib import Path

# Importable by name, so that spawned worker processes can unpickle its functions (spawn copies sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fuzz_verifier as fuzz  # noqa: E402


def test_adversarial_answers_from_threads_and_processes():
    timeout = 2.0
    report = fuzz.run_drill(n=240, timeout_s=timeout)
    for mode in ("threads", "processes"):
        for part in report[mode]["parts"]:
            assert part["crashes"] == 0, (mode, part)
            assert sum(part["statuses"].values()) == 120, (mode, part)
            assert part["counted_timeouts"] == part["statuses"].get("timeout", 0), (mode, part)
            # a batch of 50 may restart the pool once per timeout (~a few s each), never hang
            budget = fuzz.BATCH * (timeout + 5.0)
            assert part["worst_batch_s"] < budget, (mode, part)


def test_generator_is_deterministic_and_varied():
    a, b = fuzz.adversarial_answers(60, seed=1), fuzz.adversarial_answers(60, seed=1)
    assert a == b and len({r for r, _, _ in a}) > 40
