"""What a draft model costs and where it pays: ``python -m benchmarks.studies.draft_model_probe``.

On the same ~10 real/read English clips, side by side, it decodes each window three ways
(main model alone single-row, alone batch-invariant, and batch-invariant with the draft model
drafting K tokens) and reports: the draft encoder's ms, draft and main step ms, acceptance by
position, tokens per verify call, decoder-phase time with and without the draft model, whether
the tokens are equal, and the speedup ``policy.draft_model_expected_speedup`` predicts from
those measurements next to the measured one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.data import Clip, load_set, shared_data_root
from specwhisper import WhisperEngine
from specwhisper.audio import load_audio
from specwhisper.decoder import decode_window
from specwhisper.drafters.base import NullDrafter, WindowContext
from specwhisper.drafters.draft_cost import DraftModelStats
from specwhisper.drafters.draft_model import DraftModelDrafter
from specwhisper.errors import SpecWhisperError
from specwhisper.features import content_frames, log_mel_spectrogram, window_features
from specwhisper.io_utils import atomic_write_text
from specwhisper.policy import FixedDraftLength, draft_model_expected_speedup
from specwhisper.stats import DecodeStats
from specwhisper.verifier import DecoderSession


def pick_clips(root: Path, n: int) -> list[Clip]:
    """English single-window clips: the real sentences first, then short read clips."""
    real = [c for c in load_set("real", root) if c.kind == "sentence"]
    read = [c for c in load_set("read", root) if c.language == "en" and 3.0 < c.duration_s < 20.0]
    return (real + read[::7])[:n]


def _decode(engine: WhisperEngine, encoder_output, numerics: str, drafter, k: int,
            audio: np.ndarray) -> tuple[list[int], DecodeStats, float]:
    """Tokens, stats and the drafter's ``begin`` seconds for one window of the engine's loop."""
    tok = engine.tokenizer
    prompt = tok.sot_sequence("en")
    eot = tok.special.eot
    max_new = min(224, 448 - (len(prompt) - 1))
    session = DecoderSession(engine.lm, encoder_output, prompt, numerics, row_floor=engine.row_floor or 2)
    t0 = time.perf_counter()
    drafter.begin(WindowContext(prompt=tuple(prompt), eot=eot, max_new_tokens=max_new, audio=audio))
    begin_s = time.perf_counter() - t0
    stats = DecodeStats()
    tokens = decode_window(session, drafter, FixedDraftLength(k), max_new, eot, stats, lambda _t: eot)
    drafter.end([t for t in tokens if t != eot])
    return tokens, stats, begin_s


def probe(main: str, draft: str, clips: list[Clip], k: int, threads: int, compute_type: str,
          ahead: bool = False) -> dict:
    engine = WhisperEngine(main, compute_type=compute_type, threads=threads, prompt_lookup=False)
    if engine.row_floor is None:
        raise SpecWhisperError("batch-invariance self-test failed here: nothing to compare", where=main)
    drafter = DraftModelDrafter(draft, engine.tokenizer, compute_type=compute_type, threads=threads,
                                main_model_dir=engine.model_dir, ahead=ahead)
    rows = []
    for i, clip in enumerate(clips):
        audio = load_audio(clip.path)
        mel = log_mel_spectrogram(audio, n_mels=engine.lm.n_mels)
        t0 = time.perf_counter()
        enc = engine.lm.encode(window_features(mel[:, :content_frames(mel)], 0))
        main_encoder_s = time.perf_counter() - t0
        single, s_single, _ = _decode(engine, enc, "single-row", NullDrafter(), 0, audio)
        before = _copy(drafter.stats)
        runs = {}
        order = ("plain", "draft") if i % 2 == 0 else ("draft", "plain")  # alternate against drift
        for which in order:
            d = NullDrafter() if which == "plain" else drafter
            runs[which] = _decode(engine, enc, "batch-invariant", d, k, audio)
        (plain, s_plain, _), (drafted, s_draft, draft_begin_s) = runs["plain"], runs["draft"]
        ds = _delta(drafter.stats, before)
        rows.append({
            "clip": clip.rel,
            "tokens": len(plain),
            "equal_to_oracle": drafted == plain,
            "single_row_equals_batch_invariant": single == plain,
            "main_encoder_ms": 1000 * main_encoder_s,
            "draft_encoder_ms": 1000 * ds.encoder_s,
            "draft_prefill_ms": 1000 * ds.prefill_s,
            "draft_begin_ms": 1000 * draft_begin_s,
            "main_step_ms": 1000 * s_single.steps_s / max(s_single.steps, 1),
            "draft_step_ms": ds.step_ms,
            "decoder_ms_single_row": 1000 * (s_single.prefill_s + s_single.steps_s),
            "decoder_ms_plain": 1000 * (s_plain.prefill_s + s_plain.steps_s),
            "decoder_ms_draft": 1000 * (s_draft.prefill_s + s_draft.steps_s),
            "draft_ms_inside_decoder": 1000 * ds.decode_s,
            "verify_calls_plain": s_plain.verify_calls,
            "verify_calls_draft": s_draft.verify_calls,
            "tokens_per_verify_call": len(plain) / max(s_draft.verify_calls, 1),
            "acceptance_rate": ds.accepted / ds.proposed if ds.proposed else 0.0,
            "tried_by_pos": ds.tried_by_pos,
            "hit_by_pos": ds.hit_by_pos,
        })
        print(_row_line(rows[-1]), file=sys.stderr, flush=True)
    return _summary(rows, drafter.stats, engine, k, main, draft)


def _copy(s: DraftModelStats) -> DraftModelStats:
    return DraftModelStats(**{**s.__dict__, "tried_by_pos": list(s.tried_by_pos), "hit_by_pos": list(s.hit_by_pos)})


def _delta(now: DraftModelStats, before: DraftModelStats) -> DraftModelStats:
    out = DraftModelStats()
    for name in ("windows", "encoder_s", "prefill_s", "calls", "rows", "decode_s", "rollbacks", "asked", "proposals", "proposed",
                 "accepted"):
        setattr(out, name, getattr(now, name) - getattr(before, name))
    pad = len(now.tried_by_pos)
    tb = before.tried_by_pos + [0] * (pad - len(before.tried_by_pos))
    hb = before.hit_by_pos + [0] * (pad - len(before.hit_by_pos))
    out.tried_by_pos = [a - b for a, b in zip(now.tried_by_pos, tb)]
    out.hit_by_pos = [a - b for a, b in zip(now.hit_by_pos, hb)]
    return out


def _summary(rows: list[dict], stats: DraftModelStats, engine: WhisperEngine, k: int, main: str, draft: str) -> dict:
    def total(key: str) -> float:
        return float(sum(r[key] for r in rows))

    def mean(key: str) -> float:
        return total(key) / len(rows) if rows else 0.0

    tokens = total("tokens")
    main_step, draft_step = mean("main_step_ms"), stats.step_ms
    accept = stats.accept_by_pos()
    fixed_per_token = (total("draft_encoder_ms") + total("draft_prefill_ms")) / max(tokens, 1.0)
    plain, with_draft = total("decoder_ms_plain"), total("decoder_ms_draft")
    single = total("decoder_ms_single_row")
    return {
        "main": main, "draft": draft, "k": k, "clips": len(rows), "row_floor": engine.row_floor,
        "threads": engine.lm.threads, "compute_type": engine.lm.compute_type,
        "all_equal": all(r["equal_to_oracle"] for r in rows),
        "main_encoder_ms": mean("main_encoder_ms"), "draft_encoder_ms": mean("draft_encoder_ms"),
        "main_step_ms": main_step, "draft_step_ms": draft_step,
        "step_ratio": draft_step / main_step if main_step else 0.0,
        "accept_by_pos": accept,
        "acceptance_rate": stats.accepted / stats.proposed if stats.proposed else 0.0,
        "tokens_per_verify_call": tokens / max(total("verify_calls_draft"), 1.0),
        "decoder_ms_single_row": single, "decoder_ms_plain": plain, "decoder_ms_draft": with_draft,
        "decoder_ms_draft_plus_draft_encoder": with_draft + total("draft_encoder_ms") + total("draft_prefill_ms"),
        "measured_speedup_vs_single_row": single / with_draft if with_draft else 0.0,
        "measured_speedup_vs_single_row_with_encoder": single / (with_draft + total("draft_begin_ms")),
        "predicted_speedup_no_encoder": draft_model_expected_speedup(accept, k, main_step, draft_step,
                                                                     engine.verify_cost, engine.row_floor or 2),
        "predicted_speedup_with_encoder": draft_model_expected_speedup(accept, k, main_step, draft_step,
                                                                       engine.verify_cost, engine.row_floor or 2,
                                                                       fixed_per_token),
        "rows": rows,
    }


def _row_line(r: dict) -> str:
    return (f"{r['clip'][-42:]:>42}  tok={r['tokens']:3d} eq={'yes' if r['equal_to_oracle'] else 'NO '} "
            f"enc main/draft={r['main_encoder_ms']:6.0f}/{r['draft_encoder_ms']:5.0f} ms  "
            f"step main/draft={r['main_step_ms']:5.1f}/{r['draft_step_ms']:5.1f} ms  "
            f"dec single/plain/draft={r['decoder_ms_single_row']:5.0f}/{r['decoder_ms_plain']:5.0f}/"
            f"{r['decoder_ms_draft']:5.0f} ms  tok/verify={r['tokens_per_verify_call']:.2f} acc={r['acceptance_rate']:.2f}")


def report(s: dict) -> str:
    acc = ", ".join(f"{a:.2f}" for a in s["accept_by_pos"])
    return "\n".join([
        f"draft model probe: main={s['main']} draft={s['draft']} K={s['k']} clips={s['clips']} "
        f"threads={s['threads']} {s['compute_type']} row_floor={s['row_floor']}",
        f"  tokens equal to the no-speculation oracle on every clip: {s['all_equal']}",
        f"  encoder ms per window: main {s['main_encoder_ms']:.0f}, draft {s['draft_encoder_ms']:.0f}",
        f"  step ms: main {s['main_step_ms']:.2f}, draft {s['draft_step_ms']:.2f} (ratio {s['step_ratio']:.2f})",
        f"  acceptance by position: [{acc}]  overall {s['acceptance_rate']:.2f}; "
        f"tokens per verify call {s['tokens_per_verify_call']:.2f}",
        f"  decoder phase ms (sum): single-row {s['decoder_ms_single_row']:.0f}, batch-invariant alone "
        f"{s['decoder_ms_plain']:.0f}, with draft model {s['decoder_ms_draft']:.0f} "
        f"(+ draft encoder/prefill {s['decoder_ms_draft_plus_draft_encoder'] - s['decoder_ms_draft']:.0f})",
        f"  speedup vs single-row: measured {s['measured_speedup_vs_single_row']:.2f}x decoder only, "
        f"{s['measured_speedup_vs_single_row_with_encoder']:.2f}x with the draft encoder; predicted "
        f"{s['predicted_speedup_no_encoder']:.2f}x / {s['predicted_speedup_with_encoder']:.2f}x",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.draft_model_probe", description=__doc__.split("\n")[0])
    ap.add_argument("--main", default="base", help="main model (name or CT2 directory)")
    ap.add_argument("--draft", default="tiny.en", help="draft model (name or CT2 directory)")
    ap.add_argument("--clips", type=int, default=10)
    ap.add_argument("-k", "--draft-len", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--ahead", action="store_true", help="run the draft model on its own thread, ahead of the main model")
    ap.add_argument("--data", default=None, help="shared corpus root (default ../shared/data)")
    ap.add_argument("--json", default=None, help="write the full result here (atomically)")
    args = ap.parse_args(argv)
    try:
        clips = pick_clips(shared_data_root(args.data), args.clips)
        summary = probe(args.main, args.draft, clips, args.draft_len, args.threads, args.compute_type, args.ahead)
    except SpecWhisperError as exc:
        print(exc.message(), file=sys.stderr)
        return 2
    print(report(summary))
    if args.json:
        atomic_write_text(args.json, json.dumps(summary, indent=1))
    return 0 if summary["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
