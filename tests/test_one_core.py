"""What a helper met on a simulated one-core edge box (session 59): thread defaults counted the
machine's cores, not the process's (two threads spinning on one core, speculation never chosen,
a draft model "ahead" on a core that was not there); out of memory ended in a traceback; the first
load's self-test compared logits in 0.5 GB of float64 at once."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from specwhisper.row_patterns import max_abs_diff

ONE_CORE = """
import os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from specwhisper.cores import usable_cores, default_threads
from specwhisper.cli import build_parser
parser = build_parser().command_parsers
print(usable_cores(), default_threads(), parser["transcribe"].get_default("threads"),
      parser["listen"].get_default("threads"))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_thread_defaults_follow_the_cores_the_process_may_use():
    out = subprocess.run([sys.executable, "-c", ONE_CORE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1", "1", "1"]


def test_out_of_memory_is_said_not_a_traceback(monkeypatch, capsys):
    from specwhisper import cli

    def dispatch(args):
        raise MemoryError

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    assert cli.main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: out of memory") and "--model tiny.en" in err and "Traceback" not in err


def test_logits_are_compared_a_few_rows_at_a_time_with_the_same_answer():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(45, 1000)).astype(np.float32)
    b = a.copy()
    assert max_abs_diff(a, b) == 0.0
    b[37, 5] += 0.25  # a difference in a later block is found
    assert max_abs_diff(a, b) == pytest.approx(0.25, abs=1e-6)
    a[3, 1] = b[3, 1] = -np.inf  # equal infinities are equal
    assert max_abs_diff(a, b) == pytest.approx(0.25, abs=1e-6)
    b[20, 0] = np.nan  # a NaN is infinitely far
    assert max_abs_diff(a, b) == np.inf
    assert max_abs_diff(a[0], a[0]) == 0.0 and max_abs_diff(a[:0], a[:0]) == 0.0
