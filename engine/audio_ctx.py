"""Short encoder context for short audio (opt-in, lossy): ``--audio-ctx full|auto|FRAMES``.

Whisper's encoder always sees a 30 s window (3000 mel frames); a 3 s command pays for 27 s of
padding. The encoder also accepts fewer frames, which is much faster, but Whisper was trained on
30 s windows, so text can change: this trades a measured amount of accuracy for latency.

Rule for ``auto``: audio that fits one window and whose content plus ``AUTO_MARGIN_FRAMES``
fits the largest short size gets the smallest fixed size that holds it; anything longer decodes
in full 30 s windows. Sizes are fixed so that the self-test (per encoder length) stays cached.

Why a 4 s margin (``python -m benchmarks.audio_ctx_bench``, benchmarks/RESULTS_audio_ctx.md):
with too little trailing silence the decoder does not stop: it repeats the utterance up to the
token cap. At 600 frames (6 s) 15 of 60 smarthome commands of 2.5-4 s looped; with a 400-frame
margin commands of 2-6 s get 1000 frames, where 1 of 120 looped, for a 3.1-3.4x shorter
end-to-end time than the full window. Margins of 100 and 200 sent most commands to 600 frames:
more loops and no net speedup.
"""

from __future__ import annotations

from .errors import OptionError, option_where
from .features import N_FRAMES

SHORT_SIZES = (600, 1000, 1500, 2000)  # mel frames (6, 10, 15, 20 s)
AUTO_MARGIN_FRAMES = 400  # 4 s of trailing silence at least, chosen from the benchmark (see the docstring)


def parse_audio_ctx(value: str | int | None) -> str | int:
    """'full', 'auto' or a frame count (one of SHORT_SIZES or 3000)."""
    if value is None or value == "full":
        return "full"
    if value == "auto":
        return "auto"
    try:
        frames = int(value)
    except (TypeError, ValueError):
        raise OptionError(f"invalid audio context {value!r}", where=option_where("audio_ctx"),
                          hint=f"use full, auto or one of {', '.join(map(str, SHORT_SIZES))}") from None
    if frames == N_FRAMES:
        return "full"
    if frames not in SHORT_SIZES:
        raise OptionError(f"audio context {frames} frames is not a supported size", where=option_where("audio_ctx"),
                          hint=f"use one of {', '.join(map(str, SHORT_SIZES))} (mel frames, 100 per second) "
                               "or full / auto")
    return frames


def choose_frames(audio_ctx: str | int, content_frames: int) -> int:
    """Mel frames the encoder sees for audio with ``content_frames`` frames (3000 = full window)."""
    if audio_ctx == "full" or content_frames > N_FRAMES:
        return N_FRAMES
    if audio_ctx == "auto":
        need = content_frames + AUTO_MARGIN_FRAMES
        return next((s for s in SHORT_SIZES if s >= need), N_FRAMES)
    return max(int(audio_ctx), 0) if content_frames <= int(audio_ctx) else N_FRAMES
