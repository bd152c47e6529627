"""What a batch job transcribes: files, folders, globs and manifests, expanded into items with the
name their outputs get. Checked whole before any model loads, so a typo in the 9,000th line of a
manifest costs nothing."""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecWhisperError

# What a folder is searched for (mp3/m4a/video decode with the [av] extra).
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac", ".webm",
                            ".mp4", ".mkv", ".mov", ".aiff", ".aif"})
MANIFEST_SUFFIXES = (".jsonl", ".csv")
RESERVED = (".specwhisper-batch", "transcripts.parquet")  # the output folder's own entries


@dataclass(frozen=True)
class BatchItem:
    """One input file. ``name``: its outputs' path under the output directory without the format's
    suffix (``a/b`` -> ``DIR/a/b.json``): the stem for a file, the path below the folder for a
    folder's files (so ``disc1/track01`` and ``disc2/track01`` do not collide), a manifest's ``name``
    column where given (``origin``: that manifest line). ``duration_s``: read from the file's header
    where cheap, else None. A piece of a long file (``batch.pieces``) has its file's name as
    ``parent`` and its span in seconds."""

    path: str
    name: str
    duration_s: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    parent: str | None = None
    origin: str | None = None  # where a manifest named it (``file:line``), for errors
    # a piece of a file longer than one window: timestamps on under ``--timestamps auto``, as the
    # whole file would have them (a piece under 30 s decoded as a short clip of its own lost them)
    timestamps_on: bool = False


def expand_inputs(inputs: list[str]) -> list[BatchItem]:
    """Every input as items, in the order given (a folder's and a glob's files sorted); a name
    that two inputs would share, or an input that names nothing, is an error here."""
    items: list[BatchItem] = []
    for spec in inputs:
        items.extend(_expand_one(spec))
    if not items:
        raise SpecWhisperError("no audio files found in the inputs", where=" ".join(inputs)[:200],
                               hint=f"give files, folders holding {', '.join(sorted(AUDIO_SUFFIXES)[:4])}..., "
                                    "globs or a .jsonl/.csv manifest")
    # absolute paths: workers (Ray actors, on other machines too) do not share the driver's folder
    return [BatchItem(os.path.abspath(item.path), item.name, _duration(item.path)) for item in unique_names(items)]


def _expand_one(spec: str) -> list[BatchItem]:
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in _walk(path) if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        return [BatchItem(str(p), str(p.relative_to(path).with_suffix("")).replace("\\", "/")) for p in files]
    if path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
        return read_manifest(path)
    if path.is_file():
        return [BatchItem(str(path), path.stem)]
    if glob.has_magic(spec):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True)
                       if Path(p).is_file() and Path(p).suffix.lower() in AUDIO_SUFFIXES)
        if not files:
            raise SpecWhisperError("the pattern matches no audio file", where=spec, hint="check the pattern (quote "
                                   "it so that the shell does not expand it first); audio files end in "
                                   f"{', '.join(sorted(AUDIO_SUFFIXES)[:5])}, ...")
        return [BatchItem(str(p), p.stem) for p in files]
    raise SpecWhisperError("no such file or folder", where=spec, hint="give audio files, folders, globs or a "
                           ".jsonl/.csv manifest")


def read_manifest(path: Path) -> list[BatchItem]:
    """A JSONL manifest (one object a line with ``path``, optional ``name``) or a CSV one (a header
    with a ``path`` column, optional ``name``). Relative paths are taken from the manifest's folder,
    so a manifest travels with its audio."""
    rows = _jsonl_rows(path) if path.suffix.lower() == ".jsonl" else _csv_rows(path)
    items = []
    for line, row in rows:
        where = f"{path}:{line}"
        audio = row.get("path")
        if not isinstance(audio, str) or not audio:
            raise SpecWhisperError("a manifest row without a path", where=where,
                                   hint='every row needs "path" (the audio file), optionally "name"')
        audio_path = Path(audio) if Path(audio).is_absolute() else path.parent / audio
        if not audio_path.is_file():
            raise SpecWhisperError(f"the manifest names a file that is not there: {audio}", where=where,
                                   hint="fix the path (relative paths are taken from the manifest's folder)")
        name = _normal_name(row.get("name") or audio_path.stem)
        if (name is None or name.startswith(("/", "..")) or ".." in Path(name).parts
                or Path(name).parts[0] in RESERVED or "@" in name):
            name = row.get("name")
            raise SpecWhisperError(f"a name must be a relative path inside the output folder, not {name!r}",
                                   where=where, hint="use names such as call-0001 or 2026/call-0001 (without "
                                   f"@, not under {' or '.join(RESERVED)})")
        items.append(BatchItem(str(audio_path), name, origin=where))
    return items


def _walk(folder: Path) -> list[Path]:
    """Every file below ``folder``, through linked subfolders too (an archive often links its
    older years in: ``rglob`` skipped them without a word), each real folder once (a link loop
    ends)."""
    seen, found = set(), []
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        found += [Path(root) / name for name in files]
    return found


def _normal_name(name) -> str | None:
    """A manifest name as the output path it writes: ``a/./b`` and ``a//b`` are ``a/b`` (told
    apart as strings, three calls wrote one file and the job said all three were done); None for
    a name that names no file (``.``, ``a/``, not a string)."""
    if not isinstance(name, str) or not name.strip() or name.endswith(("/", "\\")):
        return None
    normal = posixpath.normpath(name.replace("\\", "/"))
    return None if normal in (".", "") or normal.endswith("/.") else normal


def _jsonl_rows(path: Path) -> list[tuple[int, dict]]:
    rows = []
    for line, text in enumerate(_read_text(path).splitlines(), 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecWhisperError(f"not JSON: {exc.msg}", where=f"{path}:{line}",
                                   hint='write one object a line, e.g. {"path": "a.flac"}') from None
        if not isinstance(row, dict):
            raise SpecWhisperError("a manifest line must be a JSON object", where=f"{path}:{line}",
                                   hint='e.g. {"path": "a.flac", "name": "a"}')
        rows.append((line, row))
    return rows


def _csv_rows(path: Path) -> list[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    try:
        if reader.fieldnames is None or "path" not in reader.fieldnames:
            raise SpecWhisperError("a CSV manifest needs a header with a path column", where=str(path),
                                   hint="first line e.g.: path,name")
        rows = []
        for row in reader:
            if None in row:  # DictReader's key for the fields past the header's
                raise SpecWhisperError(f"a row with {len(reader.fieldnames) + len(row[None])} fields under a header of "
                                       f"{len(reader.fieldnames)}", where=f"{path}:{reader.line_num}",
                                       hint="quote a path or name that holds a comma, e.g. \"a,b.flac\"")
            rows.append((reader.line_num, row))
        return rows
    except csv.Error as exc:
        raise SpecWhisperError(f"not CSV: {exc}", where=f"{path}:{reader.line_num}",
                               hint="write a header line (path,name) and one row a file") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte-order mark (as spreadsheets write) is no text
    except UnicodeDecodeError:
        raise SpecWhisperError("the manifest is not UTF-8 text", where=str(path),
                               hint="give a .jsonl or .csv file of paths") from None
    except OSError as exc:
        raise SpecWhisperError(f"cannot read the manifest: {exc.strerror}", where=str(path),
                               hint="check the path and its permissions") from None


BATCH_NAMES_HINT = "give one of them a name in a manifest, or pass their common folder so that the names keep their subfolders"


def unique_names(items: list[BatchItem], hint: str = BATCH_NAMES_HINT) -> list[BatchItem]:
    """The items without repeats (a file given twice is done once); two files for one name are an
    error (names compared without case: on macOS and Windows Call.wav and call.flac share outputs)."""
    seen: dict[str, str] = {}
    unique = []
    for item in items:
        real = os.path.realpath(item.path)
        other = seen.setdefault(item.name.casefold(), real)
        if other == real and len(seen) > len(unique):
            unique.append(item)
        elif other != real:
            same_folder = os.path.dirname(other) == os.path.dirname(real)  # call.wav and call.flac
            raise SpecWhisperError(f"two inputs would write the same outputs ({item.name}.*): {other} and {item.path}",
                                   where=item.origin or item.path,
                                   hint="give each manifest row its own name" if item.origin else
                                   "rename one of them, or give them names of their own in a manifest" if same_folder
                                   else hint)
    return unique


def _duration(path: str) -> float | None:
    """Seconds of audio from the header (for progress and ETA); None where the header does not say."""
    import soundfile

    try:
        info = soundfile.info(path)
    except Exception:  # compressed formats decoded through the [av] extra; damaged files fail later, clearly
        return None
    return info.frames / info.samplerate if info.samplerate > 0 else None
