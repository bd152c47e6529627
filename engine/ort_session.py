"""ONNX Runtime sessions on the CPU, made one way for every graph the engine runs (encoder,
invariant decoder, VAD).

Why one place: how the intra-op pool's threads wait decides a good part of the time on 2 cores.
By default they spin after a call, and a spinning thread takes a core from whatever runs next
(the decoder after the encoder, the encoder ahead beside the decoder, the next 1-thread call):
commands decoded 1.4x slower through it (benchmarks/RESULTS_fw_api.md). So between calls they
sleep. Within a call it depends on the call: the invariant decoder's steps are ~290 small
operators, and a pool thread put to sleep after each one has to be woken for the next; on a KVM
guest (Intel Xeon, 2 vCPUs, 2026-11-27) a 1-row step took 5.6 ms that way and 3.6 ms with its threads
spinning while the call runs (``spin_in_calls``: ``session.force_spinning_stop`` ends the spinning
when the call returns, so nothing runs beside a spinning thread after it). The encoder's few
large operators gain little from it (30 s window 280 -> 276 ms) and it runs beside the decoder
(the encoder ahead), where a spinning thread would take the decoder's core: not used there.
"""

from __future__ import annotations


def cpu_session_options(ort, threads: int, *, sequential: bool = False, quiet: bool = False,
                        spin_in_calls: bool = False):
    """Session options for a CPU session of ``threads`` intra-op threads (one inter-op thread);
    ``quiet``: no ONNX Runtime warnings (files with unused initialisers); ``spin_in_calls``: the
    pool's threads spin between the operators of a call and sleep once it returns (see above)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if sequential:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if quiet:
        options.log_severity_level = 4
    spin = spin_in_calls and threads > 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options
