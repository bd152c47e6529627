"""``specwhisper stream FILE|-|mic``: live transcription on the command line (see ``live``).

A file is played as fast as the passes run, or at real time with ``--realtime``; ``-`` reads
16 kHz mono 16-bit little-endian PCM from stdin; ``mic`` records through the optional
``sounddevice`` package (sources: ``cli_audio``).
Committed text is printed as it comes, one line per segment; on a terminal the tentative tail
follows it, dimmed, and is rewritten by each pass. ``--output-format json`` writes every event
as a JSON line (``type`` commit or tentative, ``text``, ``start_s``, ``end_s``, ``segment_end``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cli_audio import audio_source
from .live import MAX_STEP_S, MIN_STEP_S, SILENCE_S, check_gate_options
from .live_gate import GATES
from .sigterm import Terminated


def add_stream_parser(sub, add_model_args) -> None:
    s = sub.add_parser("stream", help="live transcription of a file, stdin or the microphone",
                       description="Live transcription: every --step seconds of new audio the uncommitted buffer is "
                                   "decoded again, text two passes agree on is committed (LocalAgreement-2), and "
                                   "each pass is drafted by the pass before (lossless).")
    s.add_argument("source", help="audio file, '-' for stdin (a WAV stream, or raw 16 kHz mono s16le PCM), or 'mic'")
    add_model_args(s)
    s.add_argument("--language", default=None, help="language code (default: the token map's, else detected once "
                                                    "a pass is sure of 3 s of speech)")
    s.add_argument("--tokenmap", default=None, help="a token map (specwhisper tokenmap build): it drafts too, and "
                                                    "sets the language unless --language is given")
    s.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    s.add_argument("--step", type=step_seconds, default=1.0, help="seconds of new audio between passes (default 1; "
                                                                  f"{MIN_STEP_S:g} to {MAX_STEP_S:g})")
    s.add_argument("--realtime", action="store_true", help="play a file or stdin at real time (default: "
                                                           "as fast as the passes run)")
    s.add_argument("-f", "--output-format", default="txt", choices=["txt", "json"],
                   help="txt: committed text as it comes; json: every event as a JSON line")
    s.add_argument("--no-speculation", action="store_true", help="plain greedy passes (the exactness oracle)")
    s.add_argument("--no-previous-pass", action="store_true", help="do not draft a pass from the one before")
    s.add_argument("--numerics", default="auto", choices=["auto", "batch-invariant", "single-row"])
    s.add_argument("--draft-len", type=int, default=None, help="fixed draft length K (default: cost model)")
    s.add_argument("--audio-ctx", default="auto", help="encoder context of a pass: auto (fitted to the buffer, "
                                                       "default), full, or mel frames 600|1000|1500|2000")
    s.add_argument("--endpointing", default="auto", choices=GATES,
                   help="what finds speech: auto (Silero VAD where the [vad] extra is installed, else frame energy), "
                        "vad, energy, or off. Audio without speech is not decoded (Whisper writes text into noise), "
                        "and an utterance is committed once --silence-ms of non-speech follows it")
    s.add_argument("--silence-ms", type=int, default=round(SILENCE_S * 1000),
                   help=f"non-speech that ends an utterance (default {round(SILENCE_S * 1000)})")
    s.add_argument("--stats", action="store_true", help="print pass counts, decoder calls and acceptance at the end")


def step_seconds(value: str) -> float:
    """An argparse type: a pass's step in seconds, in the range the stream takes (argparse names --step)."""
    try:
        step = float(value)
    except ValueError:
        step = float("nan")
    if not MIN_STEP_S <= step <= MAX_STEP_S:
        raise argparse.ArgumentTypeError(f"must be seconds from {MIN_STEP_S:g} to {MAX_STEP_S:g}, got {value!r}")
    return step


def run_stream(args) -> int:
    from .transcribe_options import TranscribeOptions
    from .transcriber import WhisperEngine

    check_gate_options(args.endpointing, args.silence_ms / 1000)
    TranscribeOptions(draft_len=args.draft_len)  # a bad K fails before the model loads
    chunks = audio_source(args.source, args.realtime, "specwhisper stream")  # fails before the model loads
    engine = WhisperEngine(args.model, device=args.device, compute_type=args.compute_type, threads=args.threads,
                           decoder_threads=args.decoder_threads, batch_decoder=args.batch_decoder,
                           encoder=args.encoder, tokenmap=args.tokenmap)
    stream = engine.stream(args.language, args.task, args.step, speculation=not args.no_speculation,
                           numerics=args.numerics, audio_ctx=args.audio_ctx, draft_len=args.draft_len,
                           previous_pass_drafts=not args.no_previous_pass, endpointing=args.endpointing,
                           silence_s=args.silence_ms / 1000)
    show = _json_printer() if args.output_format == "json" else _text_printer(sys.stdout.isatty())
    t0 = time.perf_counter()
    try:
        try:
            for event in stream.events(chunks):
                show(event)
        except (KeyboardInterrupt, Terminated):  # how a session ends (Ctrl-C, a service's stop): what was heard is still decoded
            if stream.finished:  # interrupted in the last pass itself: stop ("interrupted", 130)
                raise
            for event in stream.finish():
                show(event)
    finally:
        show(None)
    if args.stats:
        t, wall = stream.totals, time.perf_counter() - t0
        ratio = t["hint_accepted"] / t["hint_drafted"] if t["hint_drafted"] else 0.0
        print(f"[stream] {stream.time_s:.1f} s of audio, {t['passes']} passes in {wall:.1f} s "
              f"(RTF {wall / max(stream.time_s, 1e-9):.2f}), decoder calls {t['decoder_calls']} for {t['tokens']} "
              f"tokens, previous-pass drafts {t['hint_accepted']}/{t['hint_drafted']} accepted ({ratio:.2f}), "
              f"encoder {t['encoder_s']:.1f} s, decoder {t['decoder_s']:.1f} s; endpointing {stream.endpointing}: "
              f"{t['gated_s']:.1f} s without speech not decoded, {t['utterance_ends']} utterance ends",
              file=sys.stderr)
    return 0


def _json_printer():
    def show(event) -> None:
        if event is not None:
            print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)

    return show


def _text_printer(tty: bool):
    """Committed text as it comes, a line per segment; on a terminal the tentative tail, dimmed."""
    state = {"line": "", "tail": ""}

    def redraw() -> None:
        tail = f"\x1b[2m{state['tail']}\x1b[0m" if state["tail"] else ""
        print("\r\x1b[K" + state["line"] + tail, end="", flush=True)

    def show(event) -> None:
        if event is None:  # the end: no tail left, the cursor on a fresh line
            state["tail"] = ""
            if tty:
                redraw()
            if state["line"] or tty:
                print(flush=True)
            return
        if event.kind == "tentative":
            state["tail"] = event.text if state["line"] else event.text.lstrip()
        else:
            text = event.text if state["line"] else event.text.lstrip()
            state["line"] += text
            if not tty:
                print(text, end="", flush=True)
        if tty:
            redraw()
        if event.kind == "commit" and event.segment_end and state["line"]:
            print(flush=True)
            state["line"] = ""

    return show
