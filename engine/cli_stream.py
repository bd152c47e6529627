"""``specwhisper stream FILE|-|mic``: live transcription on the command line (see ``live``).

A file is played as fast as the passes run, or at real time with ``--realtime``; ``-`` reads
16 kHz mono 16-bit little-endian PCM from stdin (``ffmpeg -i x -f s16le -ac 1 -ar 16000 -``);
``mic`` records through the optional ``sounddevice`` package (``pip install 'specwhisper[mic]'``).
Committed text is printed as it comes, one line per segment; on a terminal the tentative tail
follows it, dimmed, and is rewritten by each pass. ``--output-format json`` writes every event
as a JSON line (``type`` commit or tentative, ``text``, ``start_s``, ``end_s``, ``segment_end``).
"""

from __future__ import annotations

import json
import queue
import sys
import time
from collections.abc import Iterator

import numpy as np

from .audio import SAMPLE_RATE, load_audio
from .errors import SpecWhisperError

CHUNK_S = 0.1  # what a source hands the stream at a time (a pass runs every --step of audio)


def add_stream_parser(sub, add_model_args) -> None:
    s = sub.add_parser("stream", help="live transcription of a file, stdin or the microphone",
                       description="Live transcription: every --step seconds of new audio the uncommitted buffer is "
                                   "decoded again, text two passes agree on is committed (LocalAgreement-2), and "
                                   "each pass is drafted by the pass before (lossless).")
    s.add_argument("source", help="audio file, '-' for 16 kHz mono s16le PCM on stdin, or 'mic'")
    add_model_args(s)
    s.add_argument("--language", default=None, help="language code (default: detect on the first words)")
    s.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    s.add_argument("--step", type=float, default=1.0, help="seconds of new audio between passes (default 1)")
    s.add_argument("--realtime", action="store_true", help="play a file or stdin at real time (default: "
                                                           "as fast as the passes run)")
    s.add_argument("--output-format", default="txt", choices=["txt", "json"],
                   help="txt: committed text as it comes; json: every event as a JSON line")
    s.add_argument("--no-speculation", action="store_true", help="plain greedy passes (the exactness oracle)")
    s.add_argument("--no-previous-pass", action="store_true", help="do not draft a pass from the one before")
    s.add_argument("--numerics", default="auto", choices=["auto", "batch-invariant", "single-row"])
    s.add_argument("--audio-ctx", default="auto", help="encoder context of a pass: auto (fitted to the buffer, "
                                                       "default) or full")
    s.add_argument("--stats", action="store_true", help="print pass counts, decoder calls and acceptance at the end")


def run_stream(args) -> int:
    from .transcriber import WhisperEngine

    chunks = _source(args.source, args.realtime)  # a missing microphone package fails before the model loads
    engine = WhisperEngine(args.model, device=args.device, compute_type=args.compute_type, threads=args.threads,
                           decoder_threads=args.decoder_threads, batch_decoder=args.batch_decoder,
                           encoder=args.encoder)
    stream = engine.stream(args.language, args.task, args.step, speculation=not args.no_speculation,
                           numerics=args.numerics, audio_ctx=args.audio_ctx,
                           previous_pass_drafts=not args.no_previous_pass)
    show = _json_printer() if args.output_format == "json" else _text_printer(sys.stdout.isatty())
    t0 = time.perf_counter()
    try:
        for event in stream.events(chunks):
            show(event)
    finally:
        show(None)
    if args.stats:
        t, wall = stream.totals, time.perf_counter() - t0
        ratio = t["hint_accepted"] / t["hint_drafted"] if t["hint_drafted"] else 0.0
        print(f"[stream] {stream.time_s:.1f} s of audio, {t['passes']} passes in {wall:.1f} s "
              f"(RTF {wall / max(stream.time_s, 1e-9):.2f}), decoder calls {t['decoder_calls']} for {t['tokens']} "
              f"tokens, previous-pass drafts {t['hint_accepted']}/{t['hint_drafted']} accepted ({ratio:.2f}), "
              f"encoder {t['encoder_s']:.1f} s, decoder {t['decoder_s']:.1f} s", file=sys.stderr)
    return 0


def _source(source: str, realtime: bool) -> Iterator:
    if source == "mic":
        return _microphone()
    if source == "-":
        return _paced(_stdin_chunks(), realtime)
    audio = load_audio(source)
    step = round(CHUNK_S * SAMPLE_RATE)
    return _paced((audio[i:i + step] for i in range(0, audio.size, step)), realtime)


def _stdin_chunks() -> Iterator[bytes]:
    size = round(CHUNK_S * SAMPLE_RATE) * 2
    while True:
        data = sys.stdin.buffer.read(size)
        if not data:
            return
        yield data


def _paced(chunks, realtime: bool) -> Iterator:
    """The chunks, each no earlier than the audio before it would have taken to play."""
    t0, played = time.perf_counter(), 0.0
    for chunk in chunks:
        if realtime:
            time.sleep(max(0.0, t0 + played - time.perf_counter()))
            played += (len(chunk) // 2 if isinstance(chunk, bytes) else len(chunk)) / SAMPLE_RATE
        yield chunk


def _microphone() -> Iterator[np.ndarray]:
    try:
        import sounddevice
    except ImportError:
        raise SpecWhisperError("microphone input needs the sounddevice package, which is not installed",
                               where="specwhisper stream mic",
                               hint="pip install 'specwhisper[mic]' (or pass a file, or '-' for PCM on stdin)") from None
    blocks: queue.Queue = queue.Queue()

    def gen() -> Iterator[np.ndarray]:
        try:
            with sounddevice.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                         blocksize=round(CHUNK_S * SAMPLE_RATE),
                                         callback=lambda data, frames, t, status: blocks.put(data[:, 0].copy())):
                print("listening (Ctrl-C to stop)", file=sys.stderr)
                while True:
                    yield blocks.get()
        except sounddevice.PortAudioError as exc:
            raise SpecWhisperError(f"cannot open the microphone: {exc}", where="specwhisper stream mic",
                                   hint="check that an input device exists and is not in use") from None

    return gen()


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
