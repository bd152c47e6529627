"""Whether a FLAC stream ends on a whole frame: libsndfile cannot tell a cut FLAC from a whole one
when the header gives no length.

A FLAC written to a pipe (``ffmpeg -f flac -``, ``sox ... -t flac -``) cannot go back to write its
length into STREAMINFO, and libsndfile then fails on the last block of such a stream, whole or cut,
with the same "psf_fseek() failed". Every FLAC frame ends with a CRC-16 of the frame, so a stream
whose last bytes close a frame whose CRC holds ends whole; one cut inside a frame does not.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache
from pathlib import Path

# The last frame is looked for in the stream's last bytes: a stereo frame of 24-bit samples at
# the block sizes encoders use (4096-4608) is at most 28 KB; a CRC in Python over a longer tail,
# from each false sync code in it, took seconds.
TAIL_BYTES = 1 << 16


@lru_cache(maxsize=1)
def _crc16_table() -> tuple[int, ...]:
    """FLAC's CRC-16 (polynomial x^16 + x^15 + x^2 + 1, initial 0, not reflected), a byte at a time."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        table.append(crc)
    return tuple(table)


def _crc16(data: bytes) -> int:
    table, crc = _crc16_table(), 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ byte]
    return crc


def whole_stream_frames(source: Path | io.BytesIO) -> int | None:
    """The samples (per channel) of a FLAC stream that ends on a whole frame: its last frame's first
    sample and block size, read from that frame's header; None where the stream does not end on a
    whole frame (cut) or the header cannot be read. The last frame is the one nearest the end
    from whose sync code (14 bits of 11111111111110, a reserved 0) the bytes up to the last two
    have the CRC-16 those two give."""
    if isinstance(source, io.BytesIO):
        data = source.getbuffer()
        head, tail = bytes(data[:42]), bytes(data[-TAIL_BYTES:])
    else:
        with open(source, "rb") as f:
            head = f.read(42)
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            tail = f.read()
    if len(tail) < 8 or len(head) < 42 or head[:4] != b"fLaC":
        return None
    expected = int.from_bytes(tail[-2:], "big")
    start = tail.rfind(b"\xff", 0, len(tail) - 7)
    while start >= 0:
        if tail[start + 1] in (0xF8, 0xF9) and _crc16(tail[start:-2]) == expected:
            return _frame_end(tail[start:], fixed_block=int.from_bytes(head[8:10], "big"))
        start = tail.rfind(b"\xff", 0, start)
    return None


def _frame_end(frame: bytes, fixed_block: int) -> int | None:
    """The sample after a frame's last: its first sample (a frame number times ``fixed_block``, the
    STREAMINFO block size, where the stream's blocks are fixed) plus its block size."""
    first = frame[4]
    ones = next((n for n in range(8) if not first & (0x80 >> n)), 8)  # coded as UTF-8: leading ones = bytes
    if ones == 1 or ones > 7:
        return None
    length = max(ones, 1)
    number = first & (0xFF >> (ones + 1))
    for byte in frame[5:4 + length]:
        if byte & 0xC0 != 0x80:
            return None
        number = number << 6 | byte & 0x3F
    code, at = frame[2] >> 4, 4 + length
    if code == 1:
        block = 192
    elif 2 <= code <= 5:
        block = 576 << (code - 2)
    elif code == 6:
        block = frame[at] + 1
    elif code == 7:
        block = int.from_bytes(frame[at:at + 2], "big") + 1
    elif code >= 8:
        block = 256 << (code - 8)
    else:
        return None
    variable = frame[1] & 1
    return (number if variable else number * fixed_block) + block
