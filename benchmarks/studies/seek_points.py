"""Can the encoder of window i + 1 overlap the decoder of window i when timestamps move the seek
(issue 18, item 5)? Per window of long audio decoded with timestamps: where it started, where the
next one starts, whether that is the window's end (guessable before decoding), and how many tokens
the decoder emits after the next start becomes known (the final segment's opening timestamp):
the only stretch of decoding an exact encoder-ahead could hide the next encoder behind.

    python -m benchmarks.studies.seek_points --out results/seek-points.json [FILES...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.data import shared_data_root
from benchmarks.machine import kernel_class


def tokens_after_next_start(tokens: list[int], timestamp_begin: int) -> int:
    """Tokens decoded after the last pair of consecutive timestamps (where the next window will
    start unless the window ends on a single timestamp): nothing decoded after it can be overlapped."""
    pairs = [j for j in range(1, len(tokens)) if tokens[j] >= timestamp_begin and tokens[j - 1] >= timestamp_begin]
    return len(tokens) - pairs[-1] - 1 if pairs else len(tokens)


def study(files: list[Path], model: str, threads: int) -> dict:
    from specwhisper import WhisperEngine
    from specwhisper.audio import load_audio

    rows = []
    with WhisperEngine(model, threads=threads) as engine:
        timestamp_begin = engine.tokenizer.special.timestamp_begin
        for path in files:
            audio = load_audio(path)
            n_frames = audio.size // 160
            t0 = time.perf_counter()
            result = engine.transcribe(audio, language="en", timestamps="on")
            wall = time.perf_counter() - t0
            windows = result.windows
            for window, following in zip(windows, windows[1:]):
                end = min(window.seek + 3000, n_frames)
                steps_ms = 1000 * window.stats.get("steps_s", 0.0) / max(1, len(window.tokens))
                rows.append({"file": path.name, "seek": window.seek, "window_end": end, "next_seek": following.seek,
                             "next_is_window_end": following.seek == end,
                             "tokens": len(window.tokens),
                             "tokens_after_next_start": tokens_after_next_start(window.tokens, timestamp_begin),
                             "ms_per_token": round(steps_ms, 2)})
            rows.append({"file": path.name, "wall_s": round(wall, 2), "encoder_s": round(result.timings["encoder_s"], 2),
                         "decoder_s": round(result.timings["decoder_s"], 2), "windows": len(windows)})
    windows = [r for r in rows if "seek" in r]
    return {"machine": kernel_class(), "model": model, "threads": threads, "rows": rows,
            "windows_with_a_next": len(windows),
            "next_is_window_end": sum(r["next_is_window_end"] for r in windows),
            "median_tokens_after_next_start": statistics.median(r["tokens_after_next_start"] for r in windows)
            if windows else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--model", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files = args.files or sorted((shared_data_root() / "longform").glob("*.flac"))
    report = study(files, args.model, args.threads)
    for row in report["rows"]:
        print(row)
    print(f"{report['next_is_window_end']} of {report['windows_with_a_next']} windows: next start = window end; "
          f"median tokens decoded after the next start is known: {report['median_tokens_after_next_start']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
