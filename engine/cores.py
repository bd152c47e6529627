"""How many cores this process may use, which is what thread defaults should follow.

``os.cpu_count()`` counts the machine's cores. A process pinned with ``taskset``, a container's
cpuset or its CPU quota may use fewer: on one usable core of a two-core machine the engine took
two threads, whose pool spun against each other in every decoder call (a 1-row step priced 2.4x
its one-thread cost, so speculation was never chosen) and a draft model ran "ahead" on a core
that was not there (a helper on a simulated one-core box, session 59).
"""

from __future__ import annotations

import math
import os

DEFAULT_THREADS = 2  # the engine's threads where the process may use at least two cores


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota) if quota else cores)


def max_threads() -> int:
    """The most threads an engine takes: twice the machine's cores (threads beyond the cores spin
    against each other in every call; far beyond them CTranslate2 stalls or crashes)."""
    return 2 * (os.cpu_count() or 1)


def default_threads(cap: int = DEFAULT_THREADS) -> int:
    """Threads for an engine whose caller gave none: ``cap``, or fewer where fewer cores are usable."""
    return max(1, min(cap, usable_cores()))


def _cgroup_quota() -> int | None:
    """Whole cores of this cgroup's CPU quota (``cpu.max``: quota and period in microseconds)."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, math.ceil(int(quota) / int(period)))
    except (ValueError, ZeroDivisionError):
        return None
