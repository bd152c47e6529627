"""Is a file named ``.mp3`` MPEG audio? Asked before libsndfile's MP3 decoder (mpg123) is given it.

mpg123 resyncs on anything: a program binary named ``x.mp3`` "decoded" to a few frames of noise
(exit 0, an empty transcript) while mpg123 printed a dozen errors of its own on stderr, and a text
file named ``.mp3`` failed with libsndfile's "File does not exist or is not a regular file". An
MP3 starts with an ID3v2 tag or with MPEG audio frames; two frame headers in a row, the second
where the first frame's length puts it, is the test decoders use to find the stream
(a lone frame that fills the rest of the file counts too).
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import BinaryIO

SEARCHED = 64 * 1024  # bytes after the ID3 tag where the first frame must start
CHAIN = 4  # frames in a row that make a stream
MAX_FRAME = 2881  # bytes: the longest frame (MPEG-2.5 layer II, 160 kbit/s at 8 kHz)
SOUNDFILE_MAGIC = (b"RIFF", b"RF64", b"fLaC", b"OggS", b"FORM")  # libsndfile reads these whatever the name
_MAGIC = {b"\x7fELF": "a Linux program", b"PK\x03\x04": "a zip archive", b"%PDF": "a PDF document",
          b"<": "markup (HTML or XML)"}

# kbit/s by bitrate index: MPEG-1 layers I, II, III; MPEG-2/2.5 layer I; MPEG-2/2.5 layers II and III
_BITRATES = {
    (1, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (1, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (1, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (2, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (2, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {1: (44100, 48000, 32000), 2: (22050, 24000, 16000), 25: (11025, 12000, 8000)}


def frame_length(header: bytes) -> int | None:
    """Bytes of the MPEG audio frame whose 4-byte header this is, or None if it is not one
    (free-format frames, whose length the header does not give, count as not one)."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version = {0: 25, 2: 2, 3: 1}.get((header[1] >> 3) & 3)
    layer = {1: 3, 2: 2, 3: 1}.get((header[1] >> 1) & 3)
    bitrate_index, rate_index, padding = header[2] >> 4, (header[2] >> 2) & 3, (header[2] >> 1) & 1
    if version is None or layer is None or bitrate_index in (0, 15) or rate_index == 3:
        return None
    table = (1, layer) if version == 1 else (2, 1 if layer == 1 else 2)
    bitrate, rate = _BITRATES[table][bitrate_index] * 1000, _RATES[version][rate_index]
    if layer == 1:
        return (12 * bitrate // rate + padding) * 4
    return (144 if version == 1 or layer == 2 else 72) * bitrate // rate + padding


def id3_size(data: bytes) -> int:
    """Bytes of the ID3v2 tag at the start of ``data`` (0 if none): 10 of header, a syncsafe size."""
    if len(data) < 10 or data[:3] != b"ID3" or any(b & 0x80 for b in data[6:10]):
        return 0
    size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
    return 10 + size + (10 if data[5] & 0x10 else 0)  # a footer follows where the flag says so


def after_tags(f: BinaryIO) -> int:
    """The offset after the ID3v2 tags at the start of ``f`` (read from its start; tags one after
    another: a tagger's, then another's), where ``f`` is left."""
    start = 0
    f.seek(0)
    while tag := id3_size(f.read(10)):
        start += tag
        f.seek(start)
    f.seek(start)
    return start


def states_its_length(f: BinaryIO) -> bool:
    """Whether an MP3's first frame is a Xing, Info or VBRI frame, which gives the stream's length
    (without one, decoders guess it from the first frame's bitrate: wrong for variable bitrates)."""
    after_tags(f)
    head = f.read(2048)
    return any(marker in head for marker in (b"Xing", b"Info", b"VBRI"))


def has_mpeg_audio(path: Path) -> bool:
    """Whether MPEG audio frames start within ``SEARCHED`` bytes after the file's ID3 tag (or
    where a tag-less file starts): ``CHAIN`` frames in a row of one version, layer and rate, or
    fewer that end the file, as decoders look for a stream (two in a row turned up in a program
    binary)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        start = after_tags(f)
        data = f.read(SEARCHED + CHAIN * MAX_FRAME + 4)
    return any(_chain_at(data, offset, size - start) for offset in range(min(len(data) - 3, SEARCHED))
               if data[offset] == 0xFF)


def _chain_at(data: bytes, offset: int, size: int) -> bool:
    first = data[offset:offset + 4]
    for _ in range(CHAIN):
        header = data[offset:offset + 4]
        length = frame_length(header)
        if length is None or header[1] != first[1] or (header[2] ^ first[2]) & 0x0C:
            return False
        offset += length
        if offset == size:
            return True
    return True


def not_audio(head: bytes) -> bool:
    """Whether a file's first bytes say it is something else than audio (a program, an archive,
    a document): such files hold byte patterns that pass for a few MPEG frames."""
    return any(head.startswith(prefix) for prefix in _MAGIC) or head[4:8] == b"ftyp"


def what_it_is(path: Path) -> str:
    """A few words on what a file that holds no MPEG audio is instead."""
    with open(path, "rb") as f:
        data = f.read(4096)
    for prefix, kind in _MAGIC.items():
        if data.startswith(prefix):
            return f"it starts as {kind} does"
    if data[4:8] == b"ftyp":
        return "it starts as MP4/M4A does (pip install 'specwhisper[av]' decodes those)"
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data)  # a character cut at the end is left out
    except UnicodeDecodeError:
        return "it holds no MPEG audio frames"
    return "it is text" if text.strip() and all(c.isprintable() or c.isspace() for c in text) else \
        "it holds no MPEG audio frames"
