"""What every benchmark JSON records about the machine it ran on: CPUs, platform and the load average.

Absolute times move with the machine and with whatever else it runs; ratios measured side by side in
one run move much less. The load average (1, 5, 15 min) before and after a measurement says how busy
the machine was: on a 2-core box a 1-minute load above ~2 means other jobs shared the cores.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from exgrpo.testbed.models import cpu_model


def machine(load_before: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """CPU count and model, platform, and the load average now (plus `load_before`, if given)."""
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "load_avg_before": list(load_before) if load_before else None,
        "load_avg_after": list(os.getloadavg()),
    }
