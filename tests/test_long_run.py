"""An hour of audio (issue 21): through the API and the CLI it completes, every part of the input
is covered by a window in order, segment times never go back, and memory stays flat while it
runs (peak RSS at 5, 30 and 60 minutes of audio, printed). Full-corpus check: ``-m full``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio import SAMPLE_RATE, load_audio

HOUR_S = 3600
MARKS_S = (300, 1800, 3600)
GROWTH = 1.10  # RSS at the hour against RSS at 5 minutes, at most (plus 32 MB of allocator slack)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@pytest.fixture(scope="module")
def hour_of_audio(shared_data, tmp_path_factory) -> Path:
    """The read set, then the long-form files, again and again, 0.5 s of silence between clips."""
    paths = sorted((shared_data / "read").rglob("*.flac")) + sorted((shared_data / "longform").glob("*.flac"))
    gap, parts, total = np.zeros(SAMPLE_RATE // 2, np.float32), [], 0
    while total < HOUR_S * SAMPLE_RATE:
        for path in paths:
            audio = load_audio(path)
            parts += [audio, gap]
            total += audio.size + gap.size
            if total >= HOUR_S * SAMPLE_RATE:
                break
    out = tmp_path_factory.mktemp("hour") / "hour.flac"
    sf.write(out, np.concatenate(parts)[:HOUR_S * SAMPLE_RATE], SAMPLE_RATE, subtype="PCM_16")
    return out


def _check_order(windows_or_segments: list[tuple[float, float]]) -> None:
    for (s0, e0), (s1, e1) in zip(windows_or_segments, windows_or_segments[1:]):
        assert s0 <= e0 and s1 <= e1 and s1 >= s0, ((s0, e0), (s1, e1))


@pytest.mark.full
def test_an_hour_through_the_api(base_model_dir, hour_of_audio):
    from specwhisper import WhisperEngine

    engine = WhisperEngine(base_model_dir, threads=2)
    transcription = engine.transcription(hour_of_audio, language="en")
    rss, marks, windows = {}, list(MARKS_S), []
    for window in transcription:
        windows.append(window)
        while marks and window.end_s >= marks[0] - 30:
            rss[marks.pop(0)] = _rss_mb()
    result = transcription.result()
    print(f"\n[long] API: {len(windows)} windows, {len(result.segments)} segments, {len(result.tokens)} tokens, "
          f"{result.timings['total_s']:.0f} s; RSS MB at 5/30/60 min: {[round(rss[m]) for m in MARKS_S]}")
    assert windows[0].start_s == 0 and windows[-1].end_s >= HOUR_S - 30
    for a, b in zip(windows, windows[1:]):  # each window starts where the previous one's kept text ends
        assert a.start_s < b.start_s <= a.end_s + 1e-6
    _check_order([(s.start_s, s.end_s) for s in result.segments])
    assert result.segments[-1].end_s >= HOUR_S - 60 and len(result.text.split()) > 5000
    assert rss[3600] <= GROWTH * rss[300] + 32, rss


@pytest.mark.full
def test_an_hour_through_the_cli(base_model_dir, hour_of_audio, tmp_path):
    script = ("import resource, sys; from specwhisper.cli import main; rc = main(sys.argv[1:]); "
              "print('PEAK_MB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", script, "transcribe", str(hour_of_audio), "--model",
                           str(base_model_dir), "--language", "en", "--output-format", "json", "--output-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((tmp_path / "hour.json").read_text())
    segments = [(s["start_s"], s["end_s"]) for s in data["segments"]]
    peak = next(line for line in done.stderr.splitlines() if line.startswith("PEAK_MB"))
    print(f"\n[long] CLI: {len(segments)} segments, {len(data['tokens'])} tokens, {data['timings']['total_s']:.0f} s, "
          f"peak RSS {float(peak.split()[1]):.0f} MB")
    _check_order(segments)
    assert segments[-1][1] >= HOUR_S - 60 and data["duration_s"] == pytest.approx(HOUR_S, abs=1)
