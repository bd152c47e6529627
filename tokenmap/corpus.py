"""Reading transcripts: plain text (one a line) or JSONL manifests (a ``text`` field a line).

Everything a user can get wrong here (an empty file, binary junk, another encoding, a whole book on
one line, a manifest line without text) stops the build with the file and line, before anything is
written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specwhisper.errors import TokenMapError

MAX_LINE_CHARS = 100_000  # ~1.5 h of speech; longer lines are not one utterance
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


def read_transcripts(paths: list[str | os.PathLike[str]]) -> list[str]:
    """All transcripts of all files, in order."""
    if not paths:
        raise TokenMapError("no transcript files given", where="TRANSCRIPTS",
                            hint="pass text files (one transcript a line) or JSONL manifests")
    out: list[str] = []
    for path in paths:
        out.extend(read_file(path))
    return out


def read_file(path: str | os.PathLike[str]) -> list[str]:
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TokenMapError("transcript file not found", where=where) from None
    except IsADirectoryError:
        raise TokenMapError("expected a transcript file, got a directory", where=where,
                            hint="pass the files inside it, e.g. DIR/*.txt") from None
    except OSError as exc:
        raise TokenMapError(f"cannot read transcript file: {exc.strerror or exc}", where=where) from None
    if not data.strip():
        raise TokenMapError("transcript file is empty", where=where,
                            hint="put one transcript per line (or a JSONL manifest with a 'text' field)")
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise TokenMapError(f"transcript file looks binary (NUL byte on line {line})", where=where,
                            hint="pass UTF-8 text files or JSONL manifests, not audio or archives")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TokenMapError(f"transcript file is not UTF-8 (byte {exc.start}, line {line})", where=where,
                            hint="convert it, e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise TokenMapError(f"line {number} is {len(line)} characters long (at most {MAX_LINE_CHARS}): "
                                "not one transcript", where=where,
                                hint="put one utterance per line; split long transcripts into sentences")
    first = next((ln.lstrip() for ln in lines if ln.strip()), "")
    if Path(path).suffix.lower() in JSONL_SUFFIXES or first.startswith("{"):
        texts = _jsonl_texts(lines, where)
    else:
        texts = [ln.strip() for ln in lines if ln.strip()]
    if not texts:
        raise TokenMapError("no transcripts in file (every text is empty)", where=where)
    return texts


def _jsonl_texts(lines: list[str], where: str) -> list[str]:
    texts: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TokenMapError(f"line {number} is not valid JSON: {exc}", where=where,
                                hint="a manifest has one JSON object per line with a 'text' field") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise TokenMapError(f"line {number} has no 'text' string field", where=where,
                                hint="a manifest has one JSON object per line with a 'text' field")
        if row["text"].strip():
            texts.append(row["text"].strip())
    return texts
