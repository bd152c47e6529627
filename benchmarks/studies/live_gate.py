"""The live stream's speech gate (issue 20): clips with noise around them, streamed with and without it.

    python -m benchmarks.studies.live_gate [--model base] [--half tune] [--limit 20] [--noise-db -50] \\
        [--configs off,vad:0.8,energy:0.8]

Each English clip of the read set's half is played as a stream: white noise at ``--noise-db``
dBFS from ``--lead`` seconds before the clip to ``--tail`` seconds after it, the clip added over
it (a room before, under and after a sentence), in 1 s steps as fast as the passes run. A config is ``endpointing[:silence_s]``
(``off``: every step decoded, the stream before the gate). Per config, summed over the clips:
WER of the committed text against the clip's offline transcription (the clip alone, no noise:
what the speech says) and against the reference, words committed after the speech ended (text
written into the tail's noise, as a share of the clips), passes and pass seconds per audio
second, and the latency from the end of the speech to its last commit (stream time of the feed
that committed it plus that feed's wall time: what a listener waits with audio in real time).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio

from ..data import half, load_set, shared_data_root, subset
from ..metrics import edit_distance
from .live_stream import fed_in_steps, words


def noisy(clip: np.ndarray, lead_s: float, tail_s: float, db: float, seed: int) -> np.ndarray:
    """The clip in a room: noise from before it to after it, under the speech too (noise that
    starts or stops with the speech is a click a detector hears as speech)."""
    rng = np.random.default_rng(seed)
    lead = round(lead_s * SAMPLE_RATE)
    audio = (rng.standard_normal(lead + clip.size + round(tail_s * SAMPLE_RATE)) * 10 ** (db / 20)).astype(np.float32)
    audio[lead:lead + clip.size] += clip
    return np.clip(audio, -1.0, 1.0)


def stream_clip(engine: WhisperEngine, audio: np.ndarray, speech_end_s: float, **options) -> dict:
    stream = engine.stream("en", **options)
    step = SAMPLE_RATE
    text, after, last = [], 0, None
    for events, wall in fed_in_steps(stream, audio, step):
        for e in events:
            if e.kind == "commit" and e.text.strip():
                text.append(e.text)
                last = stream.time_s - speech_end_s + wall
                if e.start_s >= speech_end_s:
                    after += len(words(e.text))
    return {"text": "".join(text), "after_words": after, "latency_s": last, "totals": dict(stream.totals)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.live_gate")
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--half", default="tune", choices=["tune", "validate"])
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--noise-db", type=float, default=-50.0)
    ap.add_argument("--lead", type=float, default=2.0)
    ap.add_argument("--tail", type=float, default=4.0)
    ap.add_argument("--pad", type=float, default=None, help="pad_s of the gate (default: the stream's)")
    ap.add_argument("--configs", default="off,vad:0.8,energy:0.8")
    ap.add_argument("--data", default=None)
    args = ap.parse_args(argv)
    clips = [c for c in load_set("read", shared_data_root(args.data)) if c.language == "en"]
    clips = subset(half(clips, args.half), args.limit)
    engine = WhisperEngine(args.model, threads=args.threads)
    seconds = sum(c.duration_s for c in clips) + len(clips) * (args.lead + args.tail)
    print(f"read, {args.half} half: {len(clips)} clips, {seconds:.0f} s streamed; model {args.model}, "
          f"{args.threads} threads, noise {args.noise_db:g} dBFS, lead {args.lead:g} s, tail {args.tail:g} s")
    audios = {c.id: load_audio(c.path) for c in clips}
    offline = {c.id: words(engine.transcribe(audios[c.id], language="en", timestamps="on").text) for c in clips}
    refs = {c.id: words(c.text) for c in clips}
    print("| config | WER vs offline % | WER vs reference % | clips with text after the speech | words after | "
          "passes | RTF | last commit after speech end median / p95 s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for config in args.configs.split(","):
        gate, _, silence = config.partition(":")
        options = dict(endpointing=gate)
        if silence:
            options["silence_s"] = float(silence)
        if args.pad is not None:
            options["pad_s"] = args.pad
        errors_off = errors_ref = after_clips = after_words = passes = 0
        pass_s, latencies = 0.0, []
        for n, c in enumerate(clips):
            audio = noisy(audios[c.id], args.lead, args.tail, args.noise_db, seed=n)
            r = stream_clip(engine, audio, args.lead + audios[c.id].size / SAMPLE_RATE, **options)
            hyp = words(r["text"])
            errors_off += edit_distance(offline[c.id], hyp)
            errors_ref += edit_distance(refs[c.id], hyp)
            after_clips += r["after_words"] > 0
            after_words += r["after_words"]
            passes += r["totals"]["passes"]
            pass_s += r["totals"]["pass_s"]
            if r["latency_s"] is not None:
                latencies.append(r["latency_s"])
        lat = sorted(latencies) or [0.0]
        print(f"| {config} | {100 * errors_off / sum(map(len, offline.values())):.1f} | "
              f"{100 * errors_ref / sum(map(len, refs.values())):.1f} | {after_clips}/{len(clips)} | {after_words} | "
              f"{passes} | {pass_s / seconds:.3f} | {statistics.median(lat):.2f} / {lat[int(0.95 * (len(lat) - 1))]:.2f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
