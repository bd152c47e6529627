"""Audio piped on stdin (``specwhisper stream -``, ``listen -``): a WAV stream or raw 16 kHz PCM.

``-`` was raw 16 kHz mono 16-bit little-endian PCM only, but the commands people pipe from write
WAV by default (``arecord``, ``sox -t wav -``, ``ffmpeg -f wav -``): its header was decoded as
samples and, at any other rate or channel count, the stream transcribed noise with exit 0. So the
first bytes decide. A RIFF/WAVE stream is parsed here, by hand, because a pipe cannot seek and
its writer does not know the length (soundfile wants a seekable file or the whole stream in
memory): the ``data`` chunk's size may be 0 or a placeholder, and the samples run to EOF. Its
frames are mixed down to mono and resampled to 16 kHz as they arrive. Another container's magic
(FLAC, Ogg, MP3 with an ID3 tag, AIFF, CAF, ...), or two MP3 or AAC frames one after the other,
is refused with its name, rather than heard as noise; so are an empty stdin and text (its first
64 bytes printable ASCII). Anything else is raw PCM, passed on as bytes, its first bytes included.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from .audio import MAX_RATE, MIN_RATE, SAMPLE_RATE
from .errors import AudioError

WHERE = "stdin"
CONVERT = "ffmpeg -i IN -f s16le -ac 1 -ar 16000 - (raw 16 kHz mono PCM)"

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
# WAVE_FORMAT_EXTENSIBLE's subformat is a GUID: the format tag, then this fixed tail (KSDATAFORMAT_SUBTYPE_*).
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
_TAG_NAMES = {2: "Microsoft ADPCM", 6: "A-law", 7: "mu-law", 0x11: "IMA ADPCM", 0x31: "GSM 6.10", 0x55: "MP3"}
# A data size a writer that cannot seek back puts in its header: 0, or one near 2 or 4 GiB
# (ffmpeg 0xFFFFFFFF, arecord 0x7FFFFF00, sox 0x7FFFF000). The samples then run to EOF; any
# other size is the real one (chunks after the data, e.g. a LIST, must not be heard as samples).
_UNKNOWN_SIZE_FROM = 0x7FFF0000
_MAX_FMT_SIZE = 4096  # a fmt chunk is 16 to 40 bytes; a bigger one is a broken header, not a chunk to buffer
_SKIP_BLOCK = 1 << 16


def pipe_chunks(stream: BinaryIO, chunk_s: float = 0.1) -> Iterator[bytes | np.ndarray]:
    """The audio of ``stream`` (stdin's binary buffer) in chunks of about ``chunk_s`` seconds:
    float32 16 kHz mono numpy arrays for a WAV stream, PCM bytes as read for raw PCM.

    The first bytes and a WAV header are read now, so that a wrong format fails before a model
    loads; the samples are read as the chunks are taken. Raises ``AudioError`` (where: stdin) for
    nothing at all, text, another container, a broken WAV header or a WAV encoding other than
    16/24/32-bit integer or 32/64-bit float PCM.
    """
    head = _read_exact(stream, 12)
    if not head:  # an empty pipe said nothing and exited 0
        raise AudioError("nothing came on stdin", where=WHERE,
                         hint=f"pipe audio in: a WAV stream (ffmpeg -i IN -f wav -) or raw PCM ({CONVERT})")
    if head[:4] in (b"RIFF", b"RF64", b"BW64"):  # RF64/BW64: RIFF past 4 GiB; the data size is then a placeholder
        if len(head) < 12:
            raise _broken("the stream ends inside its 12-byte RIFF header")
        if head[8:12] != b"WAVE":
            raise _refuse(f"a RIFF file of type {head[8:12].decode('latin-1').strip()!r}, not WAVE audio")
        return _wav_chunks(stream, chunk_s)
    seen = _container(head)
    ended = len(head) < 12
    if not seen and head[:1] == b"\xff":  # a frame sync: bare MP3 or AAC, or PCM that starts so
        first = _frame_size(head)
        if first is not None:
            head += _read_exact(stream, first + _FRAME_HEADER - len(head))
            ended = len(head) < first + _FRAME_HEADER
            seen = _frames_of(head)
    if seen:
        raise _refuse(seen)
    if not ended and len(head) < _TEXT_SNIFF:
        head += _read_exact(stream, _TEXT_SNIFF - len(head))
        ended = len(head) < _TEXT_SNIFF
    if _is_text(head):
        raise AudioError("stdin holds text, not audio: '-' takes a WAV stream or raw 16 kHz mono 16-bit PCM",
                         where=WHERE, hint="check what is piped in (the command before |), e.g. "
                                           "arecord -f S16_LE -r 16000 | specwhisper stream -")
    return _raw_chunks(stream, head, ended, chunk_s)


# Bytes looked at before raw PCM is taken: text piped by mistake (``seq 1 20000 |``, a log) was heard
# as samples ("BEEP"). 16-bit samples are all printable ASCII this long with odds of about 1e-27
# for loud noise, and never for quiet audio (its high bytes are 0x00 or 0xFF).
_TEXT_SNIFF = 64


def _is_text(head: bytes) -> bool:
    return len(head) >= 8 and all(32 <= b < 127 or b in (9, 10, 13) for b in head)


# MPEG audio Layer III (MP3) frame headers: kbit/s by bitrate index for MPEG-1, and for MPEG-2 and
# 2.5; sample rates by version (0: 2.5, 2: MPEG-2, 3: MPEG-1); AAC's ADTS header is 7 bytes.
_MP3_KBPS = {3: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
             2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_FRAME_HEADER = 7


def _mp3_frame_size(h: bytes) -> int | None:
    """The length of the MP3 frame whose header ``h`` starts with, or None if it is not one."""
    if len(h) < 4 or h[0] != 0xFF or h[1] & 0xE0 != 0xE0:
        return None
    version, layer, bitrate, rate = (h[1] >> 3) & 3, (h[1] >> 1) & 3, h[2] >> 4, (h[2] >> 2) & 3
    if version == 1 or layer != 1 or bitrate in (0, 15) or rate == 3:
        return None
    kbps = _MP3_KBPS[3 if version == 3 else 2][bitrate]
    return (144 if version == 3 else 72) * kbps * 1000 // _MP3_RATES[version][rate] + ((h[2] >> 1) & 1)


def _adts_frame_size(h: bytes) -> int | None:
    """The length of the AAC ADTS frame whose header ``h`` starts with, or None if it is not one."""
    if len(h) < 7 or h[0] != 0xFF or h[1] & 0xF6 != 0xF0:
        return None
    size = ((h[3] & 3) << 11) | (h[4] << 3) | (h[5] >> 5)
    return size if size > 7 else None


def _frame_size(h: bytes) -> int | None:
    return _mp3_frame_size(h) or _adts_frame_size(h)


def _frames_of(head: bytes) -> str | None:
    """The codec of ``head`` where it holds a frame and the next frame's header right after it:
    one header-like pattern is a chance in raw PCM, two at the right distance are not."""
    for name, size_of in (("MP3 audio (MPEG frames, no ID3 tag)", _mp3_frame_size),
                          ("AAC audio (ADTS frames)", _adts_frame_size)):
        first = size_of(head)
        if first is not None and size_of(head[first:first + _FRAME_HEADER]) is not None:
            return name
    return None


def _container(head: bytes) -> str | None:
    """The name of the (non-WAV) audio container ``head`` starts with, if any. MP3 or AAC
    without a tag starts with a frame sync that raw PCM can start with too: ``_frames_of``."""
    if head.startswith(b"fLaC"):
        return "FLAC audio"
    if head.startswith(b"OggS"):
        return "Ogg audio (Vorbis, Opus or FLAC)"
    if head.startswith(b"ID3"):
        return "MP3 audio (an ID3 tag)"
    if head.startswith(b"caff"):
        return "CAF audio"
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return "AIFF audio"
    if head.startswith(b"RIFX"):
        return "big-endian WAV audio (RIFX)"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "Matroska/WebM media"
    if head[4:8] == b"ftyp":
        return "MP4/M4A media"
    return None


def _raw_chunks(stream: BinaryIO, head: bytes, ended: bool, chunk_s: float) -> Iterator[bytes]:
    """Raw 16-bit PCM as read: the sniffed bytes are its first samples (``ended``: the stream
    ended within them). An odd byte at a chunk's end is not cut here: the stream's ChunkQueue
    keeps it for the next chunk."""
    if not head:
        return
    size = round(chunk_s * SAMPLE_RATE) * 2
    yield head if ended else head + stream.read(max(0, size - len(head)))
    while data := stream.read(size):
        yield data


class _Format:
    """What the ``fmt `` chunk says: the sample encoding (numpy dtype of a container, or 24-bit),
    the channels, the rate and the bytes per frame."""

    def __init__(self, payload: bytes) -> None:
        if len(payload) < 16:
            raise _broken(f"its fmt chunk has {len(payload)} bytes, fewer than 16")
        tag, self.channels, self.rate, _, self.block_align, bits = struct.unpack("<HHIIHH", payload[:16])
        extensible = tag == _EXTENSIBLE
        if extensible:
            if len(payload) < 40 or payload[26:40] != _GUID_TAIL:
                raise _broken("its WAVE_FORMAT_EXTENSIBLE fmt chunk has no audio subformat")
            tag = struct.unpack("<H", payload[24:26])[0]
        if self.channels == 0 or self.block_align == 0 or self.block_align % self.channels:
            raise _broken(f"its fmt chunk says {self.channels} channels in {self.block_align}-byte frames")
        if not MIN_RATE <= self.rate <= MAX_RATE:
            raise _broken(f"its fmt chunk says a sample rate of {self.rate} Hz")
        width = self.block_align // self.channels  # bytes a sample takes; the bits may be fewer
        self.low_24 = False  # 24 bits in the low bytes of 4 (arecord's S24_LE); extensible puts them high
        if tag == _PCM and width in (2, 3, 4) and 8 < bits <= 8 * width:
            self.dtype = {2: "<i2", 3: "int24", 4: "<i4"}[width]
            self.low_24 = width == 4 and bits == 24 and not extensible
        elif tag == _FLOAT and width in (4, 8) and bits == 8 * width:
            self.dtype = {4: "<f4", 8: "<f8"}[width]
        else:
            what = (f"{bits}-bit integer PCM" if tag == _PCM else f"{bits}-bit float" if tag == _FLOAT
                    else _TAG_NAMES.get(tag, f"format tag 0x{tag:04X}"))
            raise AudioError(f"the WAV stream on stdin is {what}: '-' takes 16, 24 or 32-bit integer or "
                             f"32/64-bit float PCM", where=WHERE, hint=f"convert it, e.g. {CONVERT}")

    def decode(self, data: bytes) -> np.ndarray:
        """Whole frames of ``data`` as float32 mono samples in [-1, 1] (channels averaged)."""
        raw = np.frombuffer(data, dtype=np.uint8)
        if self.dtype == "int24" or self.low_24:
            triples = raw.reshape(-1, 4)[:, :3] if self.low_24 else raw.reshape(-1, 3)
            padded = np.zeros((triples.shape[0], 4), dtype=np.uint8)
            padded[:, 1:] = triples  # the 24 bits in the top of an int32 keep their sign
            samples = padded.view("<i4")[:, 0].astype(np.float32) / 2.0 ** 31
        elif self.dtype in ("<i2", "<i4"):
            full_scale = float(np.iinfo(self.dtype).max) + 1.0
            samples = np.frombuffer(data, dtype=self.dtype).astype(np.float32) / full_scale
        else:
            samples = np.frombuffer(data, dtype=self.dtype).astype(np.float32)
        if self.channels > 1:
            samples = samples.reshape(-1, self.channels).mean(axis=1, dtype=np.float32)
        return samples.astype(np.float32, copy=False)


def _wav_chunks(stream: BinaryIO, chunk_s: float) -> Iterator[np.ndarray]:
    """Parse the chunks after the RIFF header up to ``data`` (now), then return the samples'
    generator. ``fmt `` must come before ``data``; every other chunk is skipped."""
    fmt: _Format | None = None
    while True:
        header = _read_exact(stream, 8)
        if len(header) < 8:
            raise _broken("the stream ends before its data chunk")
        chunk_id, size = header[:4], struct.unpack("<I", header[4:])[0]
        if chunk_id == b"data":
            if fmt is None:
                raise _broken("its data chunk comes before the fmt chunk")
            known = None if size == 0 or size >= _UNKNOWN_SIZE_FROM else size
            return _wav_samples(stream, fmt, known, chunk_s)
        if chunk_id == b"fmt ":
            if size > _MAX_FMT_SIZE:
                raise _broken(f"its fmt chunk says {size} bytes")
            payload = _read_exact(stream, size + size % 2)
            if len(payload) < size:
                raise _broken("the stream ends inside its fmt chunk")
            fmt = _Format(payload[:size])
        elif not _skip(stream, size + size % 2):  # chunks are padded to an even size
            raise _broken(f"the stream ends inside its {chunk_id!r} chunk, before the data chunk")


def _wav_samples(stream: BinaryIO, fmt: _Format, size: int | None, chunk_s: float) -> Iterator[np.ndarray]:
    """The data chunk's frames (``size`` bytes, or to EOF when None) as float32 16 kHz mono
    chunks of about ``chunk_s`` s. A read may end inside a frame: its bytes wait for the next
    read, so channels and bytes never shift. A partial frame at EOF is dropped."""
    import soxr

    step = max(1, round(chunk_s * fmt.rate)) * fmt.block_align
    resampler = soxr.ResampleStream(fmt.rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ") \
        if fmt.rate != SAMPLE_RATE else None
    carry, left = b"", size
    while True:
        want = step - len(carry) if left is None else min(step - len(carry), left)
        data = _read_exact(stream, want) if want > 0 else b""
        if left is not None:
            left -= len(data)
        data = carry + data
        whole = len(data) // fmt.block_align * fmt.block_align
        carry = data[whole:]
        last = len(data) < step  # EOF, or the data chunk's end
        samples = fmt.decode(data[:whole])
        if resampler is not None:
            samples = resampler.resample_chunk(samples, last=last)
        if samples.size:
            yield samples
        if last:
            return


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    """``n`` bytes of ``stream``, fewer only at EOF: a pipe's read may return less than asked."""
    parts, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _skip(stream: BinaryIO, n: int) -> bool:
    """Read past ``n`` bytes (a pipe cannot seek); False when the stream ends first."""
    while n > 0:
        data = stream.read(min(n, _SKIP_BLOCK))
        if not data:
            return False
        n -= len(data)
    return True


def _broken(what: str) -> AudioError:
    return AudioError(f"the WAV stream on stdin has a broken header: {what}", where=WHERE,
                      hint=f"check the program writing it, or convert the audio, e.g. {CONVERT}")


def _refuse(seen: str) -> AudioError:
    return AudioError(f"stdin holds {seen}: '-' takes a WAV stream or raw 16 kHz mono 16-bit "
                      f"little-endian PCM", where=WHERE,
                      hint=f"give the file as a path instead of on stdin, or convert it, e.g. {CONVERT}")
