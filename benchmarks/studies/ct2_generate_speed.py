"""CTranslate2's own encoder and greedy ``generate`` per token, in whichever venv runs it (the fork's
or faster-whisper's upstream build), on the same features: what the per-token gap between our
single-row decoding and faster-whisper's comes from (RESULTS_e2e.md, session 43).

    python benchmarks/studies/ct2_generate_speed.py features /tmp/read12.npy      # our venv (features)
    python benchmarks/studies/ct2_generate_speed.py time MODEL_DIR /tmp/read12.npy  # either venv

The ``time`` step needs only ctranslate2 and numpy (faster-whisper's venv has no specwhisper).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

PROMPT = [50258, 50259, 50359, 50363]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>


def save_features(out: str, count: int = 12) -> None:
    """The first ``count`` clips of the read set's validation half, windowed as the engine does."""
    import json

    from specwhisper.audio import load_audio
    from specwhisper.features import content_frames, log_mel_spectrogram, window_features

    root = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "read"
    rows = [json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines() if line.strip()]
    windows = []
    for row in rows[1::2][:count]:
        mel = log_mel_spectrogram(load_audio(root / row["audio"]), n_mels=80)
        windows.append(window_features(mel[:, :content_frames(mel)], 0))
    np.save(out, np.stack(windows))


def time_generate(model_dir: str, features: str, threads: int = 2) -> str:
    """Each window encoded and decoded three times, the last two timed (the first warms up)."""
    import ctranslate2

    model = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type="int8", intra_threads=threads)
    encoder_s = decoder_s = 0.0
    tokens = 0
    windows = np.load(features)
    for window in windows:
        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(window[None]))
        for attempt in range(3):
            t0 = time.perf_counter()
            encoded = model.encode(view, to_cpu=True)
            t1 = time.perf_counter()
            result = model.generate(encoded, [PROMPT], beam_size=1, max_length=448)[0]
            t2 = time.perf_counter()
            if attempt:
                encoder_s, decoder_s = encoder_s + t1 - t0, decoder_s + t2 - t1
                tokens += len(result.sequences_ids[0])
    return (f"ctranslate2 {ctranslate2.__version__}, {threads} threads: encoder "
            f"{1000 * encoder_s / (2 * len(windows)):.0f} ms a window, generate {1000 * decoder_s / tokens:.2f} ms a token")


if __name__ == "__main__":
    if sys.argv[1:2] == ["features"]:
        save_features(sys.argv[2])
    elif sys.argv[1:2] == ["time"]:
        print(time_generate(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
