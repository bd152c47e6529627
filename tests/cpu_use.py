"""What threads other than the caller burn while a computation runs and just after it."""

from __future__ import annotations

import time
from collections.abc import Callable


def cpu_of_others(compute: Callable[[], object], after_s: float = 0.25) -> tuple[float, float]:
    """CPU seconds the process spends beside ``compute`` while it runs and in the ``after_s``
    seconds after it (the calling thread's own CPU left out): what worker threads burn, spinning
    included."""
    time.sleep(0.3)  # let threads woken earlier go back to sleep
    process, own = time.process_time(), time.thread_time()
    compute()
    during = time.process_time() - process - (time.thread_time() - own)
    process, own = time.process_time(), time.thread_time()
    time.sleep(after_s)
    return during, time.process_time() - process - (time.thread_time() - own)
