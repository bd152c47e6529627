"""Live streaming (issue 20): a long-form file played as a stream, with and without previous-pass drafts.

    python -m benchmarks.studies.live_stream [--model base] [--threads 2] [--seconds 150] [--file longform.flac]

Plays the file in 1 s chunks (as fast as the passes run) through ``engine.stream()`` once per
configuration, on one engine:

* ``greedy``: speculation off, numerics auto (single-row: the fastest greedy loop);
* ``drafts``: speculation on, the engine's drafters only (prompt lookup), numerics auto;
* ``prev-pass``: speculation on, the previous pass drafting first (suffix alignment), numerics auto;
* ``prev-pass-ungated``: the same without the speech gate (``endpointing="off"``: every step decoded);
* ``prev-pass-position``: the same with token ``i`` drafted by the previous pass's token ``i``;
* ``greedy-bi``, ``prev-pass-bi``: both in batch-invariant numerics (the same tokens: checked);
* ``redecode-*``: ``force_committed=False``, passes decode the committed text in their buffer
  again (whisper_streaming's way), drafted by the previous pass or not at all.

Per configuration: passes, passes per second of pass time, decoder calls and decoder seconds per
pass, previous-pass acceptance, real-time factor (pass seconds / audio seconds), the latency
from a segment's end to its commit (stream time at the pass that committed it, plus that pass's
time), and the WER of the committed text against offline transcription (same model, timestamps,
full windows) and against the reference (words as ``words`` reads them). The batch-invariant streams must give the same
committed text (a drafter changes speed only); the script says so or fails.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Iterator

from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.drafters.previous_pass import PreviousPassDrafter

from ..data import shared_data_root
from ..metrics import edit_distance

CONFIGS = {
    "greedy": dict(speculation=False),
    "drafts": dict(previous_pass_drafts=False),
    "prev-pass": dict(),
    "prev-pass-ungated": dict(endpointing="off"),
    "prev-pass-position": dict(align="position"),
    "greedy-bi": dict(speculation=False, numerics="batch-invariant"),
    "prev-pass-bi": dict(numerics="batch-invariant"),
    "prev-pass-bi-ungated": dict(numerics="batch-invariant", endpointing="off"),
    "redecode-greedy": dict(speculation=False, force_committed=False),
    "redecode-prev-pass": dict(force_committed=False),
}


DIGITS = {w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())}


def words(text: str) -> list[str]:
    """Lowercase words without punctuation, digit words as digits: Whisper's normaliser joins a
    spelled digit list into one number ("two, eight, five" -> 285) but not "2, 8, 5", and these
    files hold 16-digit lists written either way."""
    return [DIGITS.get(w, w) for w in re.sub(r"[^\w\s']", " ", text.lower()).split()]


def fed_in_steps(stream, audio, step: int) -> Iterator[tuple[list, float]]:
    """Feed ``audio`` to ``stream`` a step at a time, then finish it; yields each call's events and
    its wall time. (The loop before went over ``range(0, audio.size + 1, step)`` and called
    ``finish()`` only where the audio's length was a whole number of steps: on longform.flac
    (150.2 s) the last pass never ran and its last words were never committed.)"""
    for i in range(0, audio.size, step):
        t0 = time.perf_counter()
        events = stream.feed(audio[i:i + step])
        yield events, time.perf_counter() - t0
    t0 = time.perf_counter()
    events = stream.finish()
    yield events, time.perf_counter() - t0


def stream_file(engine: WhisperEngine, audio, step_s: float = 1.0, align: str = "suffix", **options) -> dict:
    PreviousPassDrafter.align = align
    passes = []
    stream = engine.stream("en", step_s=step_s, on_pass=lambda r: passes.append(
        (r.stats.get("decoder_calls", 0), r.seconds, r.numerics)), **options)
    step = round(step_s * SAMPLE_RATE)
    latencies, text = [], []
    t0 = time.perf_counter()
    for events, _ in fed_in_steps(stream, audio, step):
        for e in events:
            if e.kind == "commit":
                text.append(e.text)
                if e.segment_end:
                    latencies.append(stream.time_s - e.end_s + (passes[-1][1] if passes else 0.0))
    wall = time.perf_counter() - t0
    PreviousPassDrafter.align = "suffix"
    t = stream.totals
    return {"text": "".join(text), "wall_s": wall, "totals": t, "pass_calls": [p[0] for p in passes],
            "numerics": sorted({p[2] for p in passes}), "latencies": latencies}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.live_stream")
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--file", default="longform.flac")
    ap.add_argument("--seconds", type=float, default=None, help="stream only the first SECONDS of the file")
    ap.add_argument("--step", type=float, default=1.0)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    root = shared_data_root(args.data) / "longform"
    manifest = {json.loads(line)["audio"]: json.loads(line) for line in
                (root / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}
    audio = load_audio(root / args.file)
    reference = manifest[args.file]["text"]
    if args.seconds:  # up to the end of the last segment that ends by then (segments.json: longform.flac)
        timed = json.loads((root / "segments.json").read_text(encoding="utf-8"))
        if timed["audio"] != args.file:
            raise SystemExit(f"--seconds needs segment times: segments.json has {timed['audio']} only")
        kept = [seg for seg in timed["segments"] if seg["end"] <= args.seconds]
        audio = audio[:round((kept[-1]["end"] + 0.25) * SAMPLE_RATE)]
        reference = " ".join(seg["text"] for seg in kept)
    engine = WhisperEngine(args.model, threads=args.threads)
    offline = engine.transcribe(audio, language="en", timestamps="on")
    ref_words, off_words = words(reference), words(offline.text)
    print(f"{args.file}: {audio.size / SAMPLE_RATE:.1f} s, model {args.model}, {args.threads} threads, "
          f"step {args.step} s; offline {offline.timings['total_s']:.1f} s, WER vs reference "
          f"{100 * edit_distance(ref_words, off_words) / len(ref_words):.1f} %")
    print("| config | numerics | decodings | passes/s | decoder calls/pass | decoder ms/pass | encoder ms/pass | "
          "prev-pass Ar | RTF | commit latency median / p95 s | WER vs offline % | WER vs reference % |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    stream_file(engine, audio[:20 * SAMPLE_RATE], args.step)  # warm-up: self-tests per encoder length, caches
    out, texts = {}, {}
    for name in args.configs.split(","):
        options = dict(CONFIGS[name])
        r = stream_file(engine, audio, args.step, options.pop("align", "suffix"), **options)
        t, n = r["totals"], max(1, r["totals"]["passes"])
        hyp = words(r["text"])
        vs_offline = 100 * edit_distance(off_words, hyp) / len(off_words)
        vs_reference = 100 * edit_distance(ref_words, hyp) / len(ref_words)
        lat = sorted(r["latencies"]) or [0.0]
        ar = t["hint_accepted"] / t["hint_drafted"] if t["hint_drafted"] else 0.0
        print(f"| {name} | {'/'.join(r['numerics'])} | {t['passes']} | {t['passes'] / max(t['pass_s'], 1e-9):.2f} | "
              f"{t['decoder_calls'] / n:.1f} | {1000 * t['decoder_s'] / n:.0f} | {1000 * t['encoder_s'] / n:.0f} | "
              f"{ar:.2f} | "
              f"{t['pass_s'] / (audio.size / SAMPLE_RATE):.2f} | {statistics.median(lat):.2f} / "
              f"{lat[int(0.95 * (len(lat) - 1))]:.2f} | {vs_offline:.1f} | {vs_reference:.1f} |", flush=True)
        out[name] = {k: v for k, v in r.items()}
        texts[name] = r["text"]
    for gate in ("auto", "off"):  # speculation changes no token: batch-invariant streams of one gate agree
        invariant = {name: texts[name] for name in texts if CONFIGS[name].get("numerics") == "batch-invariant"
                     and CONFIGS[name].get("endpointing", "auto") == gate}
        if len(set(invariant.values())) > 1:
            raise SystemExit(f"batch-invariant streams differ: {sorted(invariant)}")
        if len(invariant) > 1:
            print(f"batch-invariant streams ({', '.join(invariant)}): the same committed text")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"offline": offline.text, "configs": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
