"""ONNX Runtime sessions on the CPU, made one way for every graph the engine runs (encoder,
invariant decoder, VAD).

Why one place: how the intra-op pool's threads wait decides a good part of the time on 2 cores.
By default they spin after a call, and a spinning thread takes a core from whatever runs next
(the decoder after the encoder, the encoder ahead beside the decoder, the next 1-thread call):
commands decoded 1.4x slower through it (benchmarks/RESULTS_fw_api.md). So they sleep. Spinning
only while a call runs (``session.force_spinning_stop``) was measured against this on the
shared sets (2026-11-26, AMD EPYC Zen 4, base int8): no difference end to end, so not used.
"""

from __future__ import annotations


def cpu_session_options(ort, threads: int, *, sequential: bool = False, quiet: bool = False):
    """Session options for a CPU session of ``threads`` intra-op threads (one inter-op thread);
    ``quiet``: no ONNX Runtime warnings (files with unused initialisers)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if sequential:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if quiet:
        options.log_severity_level = 4
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options
