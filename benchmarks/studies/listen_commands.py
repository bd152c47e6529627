"""Command mode (issue 20): the domain test sets played as streams through ``engine.listen()``.

    python -m benchmarks.studies.listen_commands [--model base] [--threads 2] [--sets smarthome,car]
        [--limit N] [--gap 0.3] [--silence-ms 600] [--pad-ms 300] [--complete-ms 100] [--complete-p 0.9] [--half tune] [--configs greedy,tokenmap,...]
        [--peers fw-greedy,fw-default] [--json FILE]

Each set's test clips (``--limit``: that many, spread over the manifest) are joined into one
stream, ``--gap`` seconds of silence after each clip (the clips carry 0.25 s before their speech
and about 0.6 s after it), and fed in 0.1 s chunks, as fast as the listener takes them, once per
configuration. Every engine shares one model and has the set's token map (built from the set's
``train.txt``, language en), so every configuration decodes in the map's language; they differ in
what drafts:

* ``greedy``: speculation off, numerics auto (single-row: the fastest greedy loop);
* ``greedy-bi``: speculation off, batch-invariant (the exactness oracle of ``tokenmap-bi``);
* ``tokenmap``: the map drafts, numerics auto (what ``specwhisper listen --tokenmap`` runs);
* ``tokenmap-bi``: the same in batch-invariant numerics: its tokens must equal ``greedy-bi``'s
  (the script says so or fails);
* ``learn``: map and ``learn=True``, the stream played twice (``learn`` the first time, every
  command new; ``learn-replay`` the second, every command said before).

Per configuration: commands found (results matched to clips by time), WER against the references
and against offline transcription of each clip (greedy, full 30 s window, the clip file: what a
file transcriber such as faster-whisper runs by default), latency from the end of speech to the
result (median, p95: the silence the endpointer waits for plus the wall time to the result) and
the decoding alone, real-time factor (wall seconds of the whole run / audio seconds: endpointing
included), decoder seconds and calls per command, drafts accepted, and the decoder-phase speedup
against ``greedy`` (``timings.decoder_s`` summed: prefill and every decoder call). ``vs offline``:
offline's whole-call seconds per clip over the listener's decoding per command.

``--peers``: faster-whisper (in the benchmarks' peer venv, same model directory, threads and
language) transcribes the very samples the listener decoded for each command (``audio_start_s`` to
``audio_end_s`` of the first ``tokenmap`` configuration played, else the first configuration):
``fw-greedy`` is its greedy search (beam 1, temperature 0), ``fw-default`` its own defaults (beam 5,
the temperature ladder); both with its default 30 s window. Per peer: its seconds per command
(median), ours over the same commands, their ratio (sum over sum, and the median of per-command
ratios), and its WER: issue 20's "faster than faster-whisper on the same utterance".
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.tokenmap import build_token_map

from ..data import half, load_set, shared_data_root, subset, train_text
from ..metrics import wer
from ..peer_env import PeerWorker

CONFIGS = {
    "greedy": ({}, dict(speculation=False)),
    "greedy-bi": ({}, dict(speculation=False, numerics="batch-invariant")),
    "tokenmap": ({}, {}),
    "tokenmap-bi": ({}, dict(numerics="batch-invariant")),
    "learn": (dict(learn=True), {}),
}
LEAD_S = 1.0
CHUNK_S = 0.1


def build_stream(clips, gap_s: float) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The clips joined (``LEAD_S`` first, ``gap_s`` after each); each clip's span in the stream."""
    parts, spans, pos = [np.zeros(round(LEAD_S * SAMPLE_RATE), np.float32)], [], round(LEAD_S * SAMPLE_RATE)
    for clip in clips:
        audio = load_audio(clip.path)
        spans.append((pos / SAMPLE_RATE, (pos + audio.size) / SAMPLE_RATE))
        gap = np.zeros(round(gap_s * SAMPLE_RATE), np.float32)
        parts += [audio, gap]
        pos += audio.size + gap.size
    return np.concatenate(parts), spans


def play(engine: WhisperEngine, audio: np.ndarray, silence_s: float, **options) -> tuple[list, float]:
    """Feed the stream in ``CHUNK_S`` chunks; returns the results and the wall seconds of the run."""
    listener = engine.listen(silence_s=silence_s, **options)
    step = round(CHUNK_S * SAMPLE_RATE)
    t0 = time.perf_counter()
    results = list(listener.events(audio[i:i + step] for i in range(0, audio.size, step)))
    return results, time.perf_counter() - t0


def per_clip(results, spans) -> list[str]:
    """Each clip's text: the results whose speech overlaps its span most, joined."""
    texts = [[] for _ in spans]
    for r in results:
        overlaps = [min(r.end_s, b) - max(r.start_s, a) for a, b in spans]
        best = int(np.argmax(overlaps))
        if overlaps[best] > 0:
            texts[best].append(r.text.strip())
    return [" ".join(t) for t in texts]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def summarise(name: str, results, wall: float, audio_s: float, clips, spans, offline, greedy_decoder_s) -> dict:
    texts = per_clip(results, spans)
    found = sum(1 for t in texts if t)
    lat = [r.latency_s for r in results]
    dec = [r.decode_s for r in results]
    decoder_s = sum(r.stats["decoder_s"] for r in results)
    drafted, accepted = sum(r.stats["drafted"] for r in results), sum(r.stats["accepted"] for r in results)
    n = max(1, len(results))
    return {
        "config": name, "commands": len(results), "clips_found": found, "clips": len(clips),
        "ended_complete": sum(1 for r in results if r.reason == "complete"),
        "latency_mean_s": statistics.fmean(lat) if lat else None,
        "latency_complete_median_s": statistics.median([r.latency_s for r in results if r.reason == "complete"] or [0]),
        "wer_reference": wer((t, [c.text], "en") for t, c in zip(texts, clips)),
        "wer_offline": wer((t, [o["text"]], "en") for t, o in zip(texts, offline)),
        "latency_median_s": statistics.median(lat) if lat else None, "latency_p95_s": pct(lat, 0.95),
        "decode_median_s": statistics.median(dec) if dec else None, "decode_p95_s": pct(dec, 0.95),
        "rtf": wall / audio_s, "decoder_s_per_command": decoder_s / n,
        "decoder_speedup": (greedy_decoder_s / decoder_s) if greedy_decoder_s and decoder_s else None,
        "decoder_calls_per_command": sum(r.stats["decoder_calls"] for r in results) / n,
        "tokens_per_command": sum(r.stats["tokens"] for r in results) / n,
        "accepted": accepted, "drafted": drafted,
        "vs_offline": (sum(o["total_s"] for o in offline) / sum(dec)) if dec else None,
        "numerics": sorted({r.stats["numerics"] for r in results}),
        "texts": [r.text for r in results], "tokens": [r.result.tokens for r in results],
    }


def peer_figures(worker: PeerWorker, peer: str, engine: WhisperEngine, threads: int, stream: np.ndarray,
                 summary: dict, results, clips, spans, tmp: Path) -> dict:
    """``peer`` transcribing each command's decoded samples; its times against ours on the same commands."""
    seconds, texts = [], []
    for i, r in [(-1, results[0]), *enumerate(results)]:  # the first command twice: a warm-up, not counted
        npy = tmp / f"command-{i}.npy"
        np.save(npy, stream[round(r.audio_start_s * SAMPLE_RATE):round(r.audio_end_s * SAMPLE_RATE)])
        job = {"op": "transcribe", "system": peer, "model": str(engine.model_dir),
               "compute_type": engine.lm.requested_compute_type, "threads": threads, "npy": str(npy), "language": "en"}
        (res,) = worker.run_all(job)
        npy.unlink()
        if i >= 0:
            seconds.append(res["timings"]["total_s"])
            texts.append(res["text"])
    ours = [r.decode_s for r in results]
    mapped = per_clip([replace(r, text=t) for t, r in zip(texts, results)], spans)  # the peer's text in its place
    return {"peer": peer, "config": summary["config"], "commands": len(results),
            "peer_median_s": statistics.median(seconds), "ours_median_s": statistics.median(ours),
            "ratio_sum": sum(seconds) / sum(ours),
            "ratio_median": statistics.median(p / o for p, o in zip(seconds, ours)),
            "ratio_min": min(p / o for p, o in zip(seconds, ours)),
            "peer_wer_reference": wer((t, [c.text], "en") for t, c in zip(mapped, clips)),
            "ours_wer_reference": summary["wer_reference"], "peer_seconds": seconds, "peer_texts": texts}


def peer_row(set_name: str, p: dict) -> str:
    return (f"| {set_name} | {p['peer']} vs {p['config']} | {p['commands']} | {1000 * p['peer_median_s']:.0f} | "
            f"{1000 * p['ours_median_s']:.0f} | **{p['ratio_sum']:.2f}x** | {p['ratio_median']:.2f}x | "
            f"{p['ratio_min']:.2f}x | {100 * p['peer_wer_reference']:.1f} / {100 * p['ours_wer_reference']:.1f} |")


def row(set_name: str, s: dict) -> str:
    def f(value, fmt):
        return "-" if value is None else format(value, fmt)

    return (f"| {set_name} | {s['config']} | {'/'.join(s['numerics'])} | {s['clips_found']}/{s['clips']} "
            f"({s['commands']}) | {f(100 * s['wer_reference'], '.1f')} | {f(100 * s['wer_offline'], '.1f')} | "
            f"{f(1000 * s['latency_median_s'], '.0f')} / {f(1000 * s['latency_p95_s'], '.0f')} | "
            f"{f(1000 * s['decode_median_s'], '.0f')} / {f(1000 * s['decode_p95_s'], '.0f')} | {s['rtf']:.3f} | "
            f"{1000 * s['decoder_s_per_command']:.0f} | {f(s['decoder_speedup'], '.2f')} | "
            f"{s['decoder_calls_per_command']:.1f} / {s['tokens_per_command']:.1f} | "
            f"{s['accepted']}/{s['drafted']} | {f(s['vs_offline'], '.2f')} | {s['ended_complete']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.listen_commands")
    ap.add_argument("--model", default="base")
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default="smarthome,car")
    ap.add_argument("--limit", type=int, default=None, help="clips per set, spread over the manifest (default all)")
    ap.add_argument("--gap", type=float, default=0.3, help="silence added after each clip (s)")
    ap.add_argument("--silence-ms", type=int, default=600)
    ap.add_argument("--pad-ms", type=int, default=300, help="audio decoded each side of the speech (ms)")
    ap.add_argument("--complete-ms", type=int, default=None,
                    help="silence that ends a whole command (ms; default: the listener's; 0: off)")
    ap.add_argument("--complete-p", type=float, default=None, help="the listener's complete_p (default its own)")
    ap.add_argument("--half", choices=["tune", "validate"], default=None, help="one half of each set (by voice)")
    ap.add_argument("--endpointing", default="auto", choices=["auto", "vad", "energy"])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--data", default=None)
    ap.add_argument("--peers", default="", help="faster-whisper systems timed on the same commands "
                    "(fw-greedy, fw-default; comma-separated; in the peer venv, made on first use)")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    worker = PeerWorker(env_threads=args.threads) if peers else None
    root = shared_data_root(args.data)
    base = WhisperEngine(args.model, compute_type=args.compute_type, threads=args.threads)
    silence_s = args.silence_ms / 1000
    complete = {} if args.complete_ms is None else {"complete_s": args.complete_ms / 1000 or None}
    if args.complete_p is not None:
        complete["complete_p"] = args.complete_p
    print(f"model {args.model} {args.compute_type}, {args.threads} threads, silence {args.silence_ms} ms, "
          f"pad {args.pad_ms} ms, complete {args.complete_ms if args.complete_ms is not None else 'default'} ms, "
          f"half {args.half or 'all'}, "
          f"gap {args.gap} s, chunks {CHUNK_S} s fed as fast as taken")
    print("| set | config | numerics | clips found (results) | WER ref % | WER vs offline % | latency median / p95 ms | "
          "decode median / p95 ms | RTF | decoder ms/cmd | decoder speedup | calls / tokens per cmd | "
          "accepted/drafted | vs offline | ended on a whole command |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for set_name in args.sets.split(","):
            clips = subset(half(load_set(set_name, root), args.half), args.limit)
            lines = [ln for ln in train_text(set_name, root).read_text(encoding="utf-8").splitlines() if ln.strip()]
            tmap = build_token_map(lines, base.tokenizer, language="en").save(Path(tmp) / f"{set_name}.tmap")
            audio, spans = build_stream(clips, args.gap)
            audio_s = audio.size / SAMPLE_RATE
            reference = WhisperEngine(loaded=base.lm, tokenmap=tmap)
            play(reference, audio[:round((spans[min(2, len(spans) - 1)][1] + 1) * SAMPLE_RATE)], silence_s,
                 endpointing=args.endpointing)  # warm-up: VAD, self-tests per encoder length
            offline = []
            for clip in clips:
                r = reference.transcribe(clip.path, speculation=False)  # full window, the map's language
                offline.append({"text": r.text, "total_s": r.timings["total_s"]})
            summaries, played, greedy_decoder_s = [], {}, None
            for name in args.configs.split(","):
                engine_options, listen_options = CONFIGS[name]
                engine = WhisperEngine(loaded=base.lm, tokenmap=tmap, **engine_options)
                for replay in range(2 if engine_options.get("learn") else 1):
                    results, wall = play(engine, audio, silence_s, endpointing=args.endpointing,
                                         pad_s=args.pad_ms / 1000, **complete, **listen_options)
                    label = name + ("-replay" if replay else "")
                    played[label] = results
                    s = summarise(label, results, wall, audio_s, clips, spans, offline, greedy_decoder_s)
                    if name == "greedy":
                        greedy_decoder_s = sum(r.stats["decoder_s"] for r in results)
                        s["decoder_speedup"] = 1.0
                    summaries.append(s)
                    print(row(set_name, s), flush=True)
            by_name = {s["config"]: s for s in summaries}
            if "greedy-bi" in by_name and "tokenmap-bi" in by_name:
                same = by_name["greedy-bi"]["tokens"] == by_name["tokenmap-bi"]["tokens"]
                print(f"{set_name}: tokenmap-bi {'equals' if same else 'DIFFERS FROM'} greedy-bi token for token "
                      f"({len(by_name['greedy-bi']['tokens'])} commands)")
                if not same:
                    raise SystemExit("speculation changed the text")
            timed = next((s for s in summaries if s["config"] == "tokenmap"), summaries[0])
            peer_results = [peer_figures(worker, peer, base, args.threads, audio, timed, played[timed["config"]],
                                         clips, spans, Path(tmp)) for peer in peers]
            if peer_results:
                print("| set | peer vs ours | commands | peer s/cmd median ms | ours decode median ms | peer / ours "
                      "(sums) | median ratio | lowest ratio | WER ref % peer / ours |\n|---|---|---:|---:|---:|---:|"
                      "---:|---:|---:|")
            for p in peer_results:
                print(peer_row(set_name, p), flush=True)
            out[set_name] = {"clips": [c.rel for c in clips], "offline": offline, "audio_s": audio_s,
                             "configs": summaries, "peers": peer_results}
    if worker is not None:
        worker.close()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
