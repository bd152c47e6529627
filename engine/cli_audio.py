"""Audio sources of the live commands (``specwhisper stream``, ``specwhisper listen``).

``SOURCE`` is a file (played as fast as the listener takes it, or at real time with
``realtime``), ``-`` for stdin, or ``mic`` for the microphone through the optional
``sounddevice`` package (``pip install 'specwhisper[mic]'``). Stdin is a WAV stream (any rate and
channel count, 16/24/32-bit or float PCM, its length unknown: ``arecord -f S16_LE -r 16000``,
``ffmpeg -i x -f wav -``), mixed down and resampled to 16 kHz mono, or else raw 16 kHz mono 16-bit
little-endian PCM (``ffmpeg -i x -f s16le -ac 1 -ar 16000 -``); other containers are refused
(``pipe_audio``). Every source hands out chunks of ``CHUNK_S`` seconds, as a microphone callback
would.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Iterator

import numpy as np

from .audio import SAMPLE_RATE, load_audio
from .errors import SpecWhisperError
from .pipe_audio import pipe_chunks

CHUNK_S = 0.1  # what a source hands the stream or listener at a time


def audio_source(source: str, realtime: bool, command: str) -> Iterator:
    """The chunks of ``source`` (see module docstring); ``command`` names the caller in errors.
    A file is read and a missing microphone package reported now, before any model loads."""
    if source == "mic":
        return _microphone(command)
    if source == "-":
        return _paced(_stdin_chunks(), realtime)
    audio = load_audio(source)
    step = round(CHUNK_S * SAMPLE_RATE)
    return _paced((audio[i:i + step] for i in range(0, audio.size, step)), realtime)


def _stdin_chunks() -> Iterator[bytes | np.ndarray]:
    """Stdin's audio: raw PCM bytes, or float32 16 kHz mono samples of a WAV stream. Its first
    bytes (and a WAV header) are read now, so a wrong format fails before the model loads."""
    return pipe_chunks(sys.stdin.buffer, CHUNK_S)


def _paced(chunks, realtime: bool) -> Iterator:
    """The chunks, each no earlier than the audio before it would have taken to play."""
    t0, played = time.perf_counter(), 0.0
    for chunk in chunks:
        if realtime:
            time.sleep(max(0.0, t0 + played - time.perf_counter()))
            played += (len(chunk) // 2 if isinstance(chunk, bytes) else len(chunk)) / SAMPLE_RATE
        yield chunk


def _microphone(command: str) -> Iterator[np.ndarray]:
    try:
        import sounddevice
    except ImportError:
        raise SpecWhisperError("microphone input needs the sounddevice package, which is not installed",
                               where=f"{command} mic",
                               hint="pip install 'specwhisper[mic]' (or pass a file, or '-' for PCM on stdin)") from None
    except OSError as exc:  # sounddevice loads the system's PortAudio as it is imported
        raise SpecWhisperError(f"microphone input needs the PortAudio library, which sounddevice cannot load ({exc})",
                               where=f"{command} mic",
                               hint="install it with the system's packages (Debian/Ubuntu: apt install libportaudio2; "
                                    "Fedora: dnf install portaudio), or pass a file, or '-' for PCM on stdin") from None
    blocks: queue.Queue = queue.Queue()

    def gen() -> Iterator[np.ndarray]:
        try:
            with sounddevice.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                         blocksize=round(CHUNK_S * SAMPLE_RATE),
                                         callback=lambda data, frames, t, status: blocks.put(data[:, 0].copy())):
                print("listening (Ctrl-C to stop)", file=sys.stderr)
                while True:
                    yield blocks.get()
        except sounddevice.PortAudioError as exc:
            raise SpecWhisperError(f"cannot open the microphone: {exc}", where=f"{command} mic",
                                   hint="check that an input device exists and is not in use") from None

    return gen()
