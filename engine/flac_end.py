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


def ends_on_a_whole_frame(source: Path | io.BytesIO) -> bool:
    """True where the stream's last bytes are a whole frame: a frame sync code (14 bits of
    11111111111110, then a reserved 0) from which the bytes up to the last two have the CRC-16
    those two give. The nearest sync code to the end that closes is the last frame's; False where
    none does (a cut stream, or a last frame larger than ``TAIL_BYTES``)."""
    if isinstance(source, io.BytesIO):
        tail = bytes(source.getbuffer()[-TAIL_BYTES:])
    else:
        with open(source, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            tail = f.read()
    if len(tail) < 8:
        return False
    expected = int.from_bytes(tail[-2:], "big")
    start = tail.rfind(b"\xff", 0, len(tail) - 7)
    while start >= 0:
        if tail[start + 1] in (0xF8, 0xF9) and _crc16(tail[start:-2]) == expected:
            return True
        start = tail.rfind(b"\xff", 0, start)
    return False
