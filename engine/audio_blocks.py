"""Reading a file libsndfile knows block by block: what decodes before a break is kept.

One read of a whole file raised at a break and kept nothing (a FLAC cut short in a copy or a
download failed whole, though most of it decodes), while a cut WAV or MP3 was read as far as it
goes with no word that its end was missing. Here every format breaks off the same way: the
audio before the break, and one warning (``warn_if_cut_short``) worded alike for every decoder.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .errors import warn_caller
from .flac_end import whole_stream_frames


class NothingDecodes(Exception):
    """libsndfile opened the audio (its header is one it knows) and not one frame of it decodes."""


# Frames per libsndfile read. A failing read's frames are kept where libsndfile's position says
# how many it decoded (a cut FLAC: "lost sync"); where the position is lost too ("psf_fseek()
# failed": a FLAC streamed without its length, near its end) that block is read again in small reads.
BLOCK_FRAMES, SMALL_BLOCK_FRAMES = 1 << 16, 1 << 10


def read_soundfile(source: Path | io.BytesIO, where: str) -> tuple[np.ndarray, int]:
    """(samples, channels) float32 and the rate of a file libsndfile reads, read block by block.

    One read of the whole file raised at a break and kept nothing: a FLAC cut to 700 KB failed
    with "flac decoder lost sync" though 67 s of it decode (and a streamed FLAC, whose header gives
    no length, asked for an array of 2**63 frames). Blocks keep what decodes; a file that breaks
    off or ends before its header's length is transcribed as far as it goes, with a warning
    (``warn_if_cut_short``). Nothing decoded at all raises the decoder's error.
    """
    import soundfile as sf

    from .mp3_sniff import states_its_length

    with (open(source, "rb") if isinstance(source, Path) else _rewound(source)) as raw:
        guessed_length = not states_its_length(raw)  # only an MP3 without a Xing/Info/VBRI frame uses it
    with sf.SoundFile(_opened_by_name(source)) as f:
        rate, channels, frames = f.samplerate, f.channels, f.frames
        if f.format == "MP3" and guessed_length:  # mpg123 guessed it from the first frame's bitrate: a
            frames = 0                            # whole VBR file "ended early"; a break still says so
        streamed_flac = f.format == "FLAC" and not 0 < frames < 1 << 62
        room = _room_for(source, frames, channels)
        blocks, error, lost = _read_blocks(f, BLOCK_FRAMES, room)
    if lost:
        more, error = _read_again_in_small_blocks(source, sum(map(len, blocks)), error)
        blocks += more
    if error is not None and streamed_flac and (whole := whole_stream_frames(source)) is not None:
        # libsndfile fails on the last block of a FLAC without its length, whole or cut; a whole
        # one gives all but its last sample read a frame at a time, and is not called damaged
        # unless fewer came (a break inside it: its last frame's header gives the length)
        more, again = _read_again_in_small_blocks(source, sum(map(len, blocks)), error, size=1)
        blocks += more
        error = None if sum(map(len, blocks)) >= whole - 1 else again
    data = _joined(blocks, room, channels)
    if error is not None and not len(data):
        raise NothingDecodes(_decoder_says(error))
    got_s = len(data) / rate
    promised_s = _promised_seconds(source, frames / rate if 0 < frames < 1 << 62 else None, got_s)
    warn_if_cut_short(where, got_s, promised_s, _decoder_says(error) if error else None)
    return data, rate


def _opened_by_name(source: Path | io.BytesIO) -> bytes | io.BytesIO:
    """What libsndfile opens: a path as the bytes the file system holds (soundfile encoded names
    as UTF-8 strictly, and a name in Latin-1 bytes, ``lat\\xe9.flac``, was "cannot decode audio ...
    surrogates not allowed": the file called damaged for its name)."""
    return os.fsencode(source) if isinstance(source, Path) else source


def _promised_seconds(source: Path | io.BytesIO, header_s: float | None, got_s: float) -> float | None:
    """The length the file's header gives: libsndfile's (``header_s``; None where the header has
    none, as a streamed FLAC's 2**63 - 1 frames), but a WAV's from its data chunk, since libsndfile
    counts a cut WAV's frames from the file's size (assuming the bytes and ``got_s`` in proportion)."""
    wav = _wav_data_sizes(source)
    if wav is None or wav[0] <= wav[1]:
        return header_s
    return got_s * wav[0] / wav[1] if wav[1] else None


def _decoder_says(error: Exception) -> str:
    """libsndfile's message without its "Error : " and final stop, to quote inside a sentence."""
    text = str(getattr(error, "error_string", None) or error).strip()
    return text.removeprefix("Error : ").removeprefix("Error: ").rstrip(".")


# A header's length is believed (the samples read into one array it sizes) up to this many bytes
# of float32 samples per byte of the file: low-bitrate MP3 or Vorbis expand 16-32 times, so a
# header claiming more (a hostile or broken one) gets blocks joined at the end instead.
MAX_EXPANSION = 64


def _room_for(source: Path | io.BytesIO, frames: int, channels: int) -> np.ndarray | None:
    """An array for the ``frames`` the header gives, or None where it gives none or more than
    the file could hold. Blocks joined at the end took the audio's size twice at the peak (an
    hour at 16 kHz: 460 MB for 230); an array's pages are taken only as samples are written."""
    size = source.getbuffer().nbytes if isinstance(source, io.BytesIO) else source.stat().st_size
    if not 0 < frames < 1 << 62 or frames * channels * 4 > MAX_EXPANSION * max(size, 1 << 20):
        return None
    return np.empty((frames, channels), np.float32)


def _joined(blocks: list[np.ndarray], room: np.ndarray | None, channels: int) -> np.ndarray:
    """The blocks as one array: the front of ``room`` where every block was read into it in turn."""
    total = sum(map(len, blocks))
    if room is not None and total <= len(room) and all(
            np.shares_memory(block, room) for block in blocks):
        return room[:total]
    return np.concatenate(blocks) if blocks else np.zeros((0, channels), np.float32)


def _read_blocks(f, size: int, room: np.ndarray | None = None) -> tuple[list[np.ndarray], Exception | None, bool]:
    """(blocks, error, lost) of ``f`` (a ``soundfile.SoundFile``) read ``size`` frames at a time
    up to its end or a decoding error, which is returned, not raised, into ``room`` while it has
    space. The frames the failing read decoded are kept where its position says how many (a break
    can fall late in a block); ``lost``: the position was lost too, and with it the frames of that read."""
    import soundfile as sf

    blocks: list[np.ndarray] = []
    done = 0
    while True:
        fits = room is not None and done < len(room)
        out = room[done:done + size] if fits else np.zeros((size, f.channels), np.float32)
        try:
            n = len(f.read(out=out))
        except (sf.LibsndfileError, RuntimeError) as exc:
            try:
                partial = f.tell() - done
            except (sf.LibsndfileError, RuntimeError):
                partial = -1
            if 0 < partial <= len(out):
                blocks.append(out[:partial])
            return blocks, exc, not 0 < partial <= len(out)  # mpg123 gives up with its position unmoved
        if n:
            blocks.append(out[:n])
            done += n
        if n < len(out):
            return blocks, None, False


def _read_again_in_small_blocks(source: Path | io.BytesIO, start: int, error: Exception,
                                size: int = SMALL_BLOCK_FRAMES) -> tuple[list[np.ndarray], Exception]:
    """The frames from ``start`` to the break read again ``size`` at a time, and the error
    there (``error`` where the file cannot be opened and sought again)."""
    import soundfile as sf

    if isinstance(source, io.BytesIO):
        source.seek(0)
    try:
        with sf.SoundFile(_opened_by_name(source)) as f:
            f.seek(start)
            blocks, again, _ = _read_blocks(f, size)
    except (sf.LibsndfileError, RuntimeError):
        return [], error
    return blocks, again or error


# A WAV data chunk's size that promises nothing: writers that stream to a pipe leave 0 or a
# placeholder near 2 GiB or 4 GiB there (sox 0x7FFFF000, arecord 0x7FFFFF00, others 0xFFFFFFFF);
# such a file's length is its size.
OPEN_WAV_SIZE_FROM = 0x7F000000


def _wav_data_sizes(source: Path | io.BytesIO) -> tuple[int, int] | None:
    """(bytes a RIFF WAVE file's data chunk header promises, bytes the file holds after that
    header), or None for another format or an open length. libsndfile sizes a cut WAV from the
    file, so its header is the only place the missing part shows."""
    with (open(source, "rb") if isinstance(source, Path) else _rewound(source)) as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        position = 12
        while position + 8 <= size:
            f.seek(position)
            chunk, length = struct.unpack("<4sI", f.read(8))
            if chunk == b"data":
                return None if length == 0 or length >= OPEN_WAV_SIZE_FROM else (length, size - position - 8)
            position += 8 + length + (length & 1)
    return None


@contextlib.contextmanager
def _rewound(buffer: io.BytesIO) -> Iterator[io.BytesIO]:
    """``buffer`` in a ``with``, left at its start afterwards (and open, where a file's ``with``
    closes it): a decoder tried after soundfile reads it from the start."""
    try:
        yield buffer
    finally:
        buffer.seek(0)


def warn_if_cut_short(where: str, got_s: float, promised_s: float | None, error: str | None) -> None:
    """One warning, worded the same for every format and decoder, for audio that breaks off
    (``error``: the decoder's words) or ends over 0.1 s before the length its header gives (an
    MP3's Xing header, a WAV's data chunk): the transcript covers only what decodes, and without a
    word the missing end looked like silence."""
    if error is None and (promised_s is None or promised_s - got_s <= 0.1):
        return
    of = f" of the {promised_s:.1f} s its header gives" if promised_s is not None else ""
    warn_caller(f"{where}: the audio is cut short or damaged after {got_s:.1f} s{of} "
                f"({error or 'the file ends early'}): transcribing the {got_s:.1f} s that decode")
