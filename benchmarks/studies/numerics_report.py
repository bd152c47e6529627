"""How often single-row and batch-invariant greedy differ, where (top-1/top-2 margin), and the WER of each.

    python -m benchmarks.studies.numerics_report --compute-types int8 float32 --out results/numerics

Both numerics are greedy; they differ only where the two best logits are nearly tied. For every
clip of the chosen sets this decodes both ways (speculation off, same encoder output), records
whether the tokens differ, the single-row top-1 minus top-2 logit at the first differing
position, and scores each against the reference. Multi-window clips go through the engine's
``transcribe`` (both numerics), single-window clips share one encoder pass.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.data import load_set, shared_data_root, subset
from benchmarks.metrics import wer
from specwhisper import WhisperEngine
from specwhisper.audio import load_audio
from specwhisper.decoder import decode_window
from specwhisper.drafters.base import NullDrafter
from specwhisper.features import N_FRAMES, content_frames, log_mel_spectrogram, window_features
from specwhisper.io_utils import atomic_write_text
from specwhisper.policy import FixedDraftLength
from specwhisper.stats import DecodeStats
from specwhisper.verifier import DecoderSession


def _decode(engine: WhisperEngine, encoder_output, prompt: list[int], numerics: str) -> list[int]:
    eot = engine.tokenizer.special.eot
    session = DecoderSession(engine.lm, encoder_output, prompt, numerics, row_floor=engine.row_floor or 2,
                             row_ceiling=engine.row_ceiling)
    tokens = decode_window(session, NullDrafter(), FixedDraftLength(0), min(224, 449 - len(prompt)), eot,
                           DecodeStats(), lambda _t: eot)
    return [t for t in tokens if t != eot]


def _margin(engine: WhisperEngine, encoder_output, prompt: list[int], tokens: list[int], position: int) -> float:
    """Single-row top-1 minus top-2 logit where the two numerics first part."""
    model = engine.lm.decoder
    state, logits = model.prefill(encoder_output, prompt)
    for t in tokens[:position]:
        logits = model.forward_step(state, t)
    top = np.sort(np.asarray(logits).reshape(-1))[-2:]
    return float(top[1] - top[0])


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run_clip(engine: WhisperEngine, clip, language: str) -> dict:
    audio = load_audio(clip.path)
    mel = log_mel_spectrogram(audio, n_mels=engine.lm.n_mels)
    n = content_frames(mel)
    if n > N_FRAMES:  # multi-window: through the public API
        sr = engine.transcribe(audio, language=language, numerics="single-row", speculation=False)
        bi = engine.transcribe(audio, language=language, numerics="batch-invariant", speculation=False)
        return {"tokens_sr": sr.tokens, "tokens_bi": bi.tokens, "text_sr": sr.text, "text_bi": bi.text,
                "margin": None, "first_diff": _first_difference(sr.tokens, bi.tokens)}
    enc = engine.lm.encode(window_features(mel[:, :n], 0))
    prompt = engine.tokenizer.sot_sequence(language)
    sr, bi = _decode(engine, enc, prompt, "single-row"), _decode(engine, enc, prompt, "batch-invariant")
    first = _first_difference(sr, bi)
    margin = _margin(engine, enc, prompt, sr, first) if sr != bi else None
    return {"tokens_sr": sr, "tokens_bi": bi, "text_sr": engine.tokenizer.decode(sr).strip(),
            "text_bi": engine.tokenizer.decode(bi).strip(), "margin": margin, "first_diff": first}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.numerics_report", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base")
    p.add_argument("--compute-types", nargs="+", default=["int8", "float32"])
    p.add_argument("--sets", nargs="+", default=["real", "read", "smarthome", "car", "longform"])
    p.add_argument("--limit", type=int, default=None, help="clips per set (spread evenly)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="results/numerics")
    args = p.parse_args(argv)
    root = shared_data_root()
    out = Path(args.out)
    report: dict = {"model": args.model, "threads": args.threads, "command": " ".join(sys.argv), "results": {}}
    for compute_type in args.compute_types:
        engine = WhisperEngine(args.model, compute_type=compute_type, threads=args.threads, prompt_lookup=False)
        rows = []
        for set_name in args.sets:
            for clip in subset(load_set(set_name, root), args.limit):
                t0 = time.perf_counter()
                lang = clip.language if engine.tokenizer.multilingual else "en"
                try:
                    row = run_clip(engine, clip, lang)
                except Exception as exc:  # one bad clip must not end the report
                    print(f"{clip.rel}: failed: {exc}", file=sys.stderr)
                    continue
                row.update(set=set_name, clip=clip.rel, language=lang, refs=[clip.text, *clip.text_alt])
                rows.append(row)
                mark = "=" if row["tokens_sr"] == row["tokens_bi"] else "DIFF"
                print(f"[{compute_type}] {clip.rel} {mark} {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        report["results"][compute_type] = {"row_floor": engine.row_floor, "clips": rows,
                                           "summary": summarise(rows)}
        atomic_write_text(out / "numerics.json", json.dumps(report, indent=1))
    atomic_write_text(out / "numerics.md", to_markdown(report))
    print(to_markdown(report))
    return 0


def summarise(rows: list[dict]) -> dict:
    by_set: dict = {}
    for set_name in sorted({r["set"] for r in rows}) + ["all"]:
        sel = [r for r in rows if set_name == "all" or r["set"] == set_name]
        diffs = [r for r in sel if r["tokens_sr"] != r["tokens_bi"]]
        margins = [r["margin"] for r in diffs if r["margin"] is not None]
        by_set[set_name] = {
            "clips": len(sel),
            "differ": len(diffs),
            "text_differs": sum(r["text_sr"] != r["text_bi"] for r in sel),
            "median_margin": float(np.median(margins)) if margins else None,
            "max_margin": max(margins) if margins else None,
            "wer_single_row": wer((r["text_sr"], r["refs"], r["language"]) for r in sel),
            "wer_batch_invariant": wer((r["text_bi"], r["refs"], r["language"]) for r in sel),
        }
    return by_set


def to_markdown(report: dict) -> str:
    lines = [f"# Single-row vs batch-invariant greedy ({report['model']}, {report['threads']} threads)", "",
             f"Command: `{report['command']}`", "",
             "| compute | set | clips | tokens differ | text differs | median / max top-1 - top-2 margin | "
             "WER single-row | WER batch-invariant |", "|---|---|---|---|---|---|---|---|"]
    for ct, res in report["results"].items():
        for set_name, s in res["summary"].items():
            m = (f"{s['median_margin']:.3f} / {s['max_margin']:.3f}" if s["median_margin"] is not None else "-")
            w1 = f"{100 * s['wer_single_row']:.2f}%" if s["wer_single_row"] is not None else "-"
            w2 = f"{100 * s['wer_batch_invariant']:.2f}%" if s["wer_batch_invariant"] is not None else "-"
            lines.append(f"| {ct} (floor {res['row_floor']}) | {set_name} | {s['clips']} | {s['differ']} | "
                         f"{s['text_differs']} | {m} | {w1} | {w2} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
