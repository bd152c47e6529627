"""The shared clip sets: where the corpus lives, which manifests make up which suite, clip subsets.

The corpus is read-only and lives beside the checkout (../shared/data) or at
$SPECWHISPER_SHARED_DATA; nothing is ever copied into the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from specwhisper.errors import SpecWhisperError

REPO = Path(__file__).resolve().parents[1]

# set name -> (manifest relative to the data root, domain train text for a token map or None)
SETS: dict[str, tuple[str, str | None]] = {
    "smarthome": ("domain/smarthome/test.jsonl", "domain/smarthome/train.txt"),
    "car": ("domain/car/test.jsonl", "domain/car/train.txt"),
    "real": ("real/manifest.jsonl", None),
    "read": ("read/manifest.jsonl", None),
    "longform": ("longform/manifest.jsonl", None),
}
SUITES: dict[str, tuple[str, ...]] = {
    "domain": ("smarthome", "car"),
    "real": ("real",),
    "read": ("read",),
    "longform": ("longform",),
    "all": ("smarthome", "car", "real", "read", "longform"),
}


@dataclass(frozen=True)
class Clip:
    """One audio file with its reference, as listed in a manifest."""

    set: str
    id: str
    path: Path
    rel: str  # path relative to the data root (what results and fixtures record)
    text: str
    duration_s: float
    language: str = "en"
    kind: str = ""
    text_alt: tuple[str, ...] = ()  # accepted alternatives, e.g. the digit "7" for "seven"
    speaker: str = ""  # the voice (a speaker, an espeak voice, or the clip itself where unknown)


def shared_data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The corpus root: the argument, $SPECWHISPER_SHARED_DATA, or ../shared/data beside the checkout."""
    if explicit:  # asked for: that one, never another in its place
        root = Path(explicit)
        if (root / "README.md").is_file():
            return root
        raise SpecWhisperError("no shared test corpus there (no README.md)", where=str(root),
                               hint="pass the corpus root (the folder with README.md and the sets), or leave "
                                    "--data out for ../shared/data")
    candidates = []
    env = os.environ.get("SPECWHISPER_SHARED_DATA")
    if env:
        candidates.append(Path(env))
    candidates += [REPO.parent / "shared" / "data", REPO / "shared" / "data"]
    for c in candidates:
        if (c / "README.md").is_file():
            return c
    raise SpecWhisperError("shared test corpus not found", where=", ".join(str(c) for c in candidates),
                           hint="put it at ../shared/data beside the checkout, or pass --data / set "
                                "SPECWHISPER_SHARED_DATA")


def load_set(name: str, root: Path) -> list[Clip]:
    """All clips of one set, in manifest order."""
    if name not in SETS:
        raise SpecWhisperError(f"unknown clip set {name!r}", where="--suite", hint=f"use one of {', '.join(SETS)}")
    manifest = root / SETS[name][0]
    if not manifest.is_file():
        raise SpecWhisperError("manifest missing", where=str(manifest), hint="is the shared corpus complete?")
    clips = []
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        path = manifest.parent / row["audio"]
        clips.append(Clip(set=name, id=str(row.get("id") or Path(row["audio"]).stem or n), path=path,
                          rel=path.relative_to(root).as_posix(), text=row.get("text", ""),
                          duration_s=float(row.get("duration_s", 0.0)), language=row.get("lang") or "en",
                          kind=row.get("kind", ""), text_alt=_alts(row.get("text_alt")),
                          speaker=_speaker(row)))
    return clips


def _alts(value: object) -> tuple[str, ...]:
    if not value:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)  # type: ignore[union-attr]


def _speaker(row: dict) -> str:
    """Who speaks: the manifest's speaker or voice; LibriSpeech's speaker id, LJ Speech's one reader,
    a VCTK speaker or an FSDD speaker from the clip id; else the clip itself (a file of many voices)."""
    if row.get("speaker") or row.get("voice"):
        return str(row.get("speaker") or row.get("voice"))
    ident = str(row.get("id") or Path(row["audio"]).stem)
    for pattern in (r"^fsdd_\d+_([a-z]+)_", r"(?:^|_)(LJ)\d", r"^(p\d{3})_", r"(?:^|_)(\d+)-\d+-\d+$"):
        if m := re.search(pattern, ident):
            return m.group(1)
    return ident


HALVES = ("tune", "validate")


def half(clips: list[Clip], which: str | None) -> list[Clip]:
    """A fixed split of a set by voice, so that what is tuned on one half is reported on the other
    (gains tuned on files we look at shrank on audio nobody tuned on): voices sorted by a hash of
    their name and dealt alternately, ``tune`` the even ones. None: the whole set."""
    if which is None:
        return list(clips)
    if which not in HALVES:
        raise SpecWhisperError(f"unknown half {which!r}", where="--half", hint=f"use one of {', '.join(HALVES)}")
    voices = sorted({c.speaker or c.id for c in clips}, key=lambda v: hashlib.sha1(v.encode()).hexdigest())
    mine = set(voices[HALVES.index(which)::2])
    return [c for c in clips if (c.speaker or c.id) in mine]


def subset(clips: list[Clip], limit: int | None) -> list[Clip]:
    """``limit`` clips spread evenly over the manifest (so a subset of real keeps sentences and digits)."""
    if limit is None or limit <= 0 or limit >= len(clips):
        return list(clips)
    step = len(clips) / limit
    return [clips[int(i * step)] for i in range(limit)]


def parse_limits(values: list[str] | None) -> dict[str, int]:
    """``--limit 4 --limit longform=1`` -> {"*": 4, "longform": 1}: clips per set, "*" for the rest."""
    limits: dict[str, int] = {}
    for value in values or []:
        name, _, number = value.rpartition("=")
        name = name or "*"
        if name != "*" and name not in SETS:
            raise SpecWhisperError(f"unknown set {name!r} in --limit {value}", where="--limit",
                                   hint=f"use N or SET=N with SET one of {', '.join(SETS)}")
        try:
            n = int(number)
        except ValueError:
            raise SpecWhisperError(f"--limit {value} is not a number of clips", where="--limit",
                                   hint="use N or SET=N, e.g. --limit 4 --limit longform=1") from None
        if n < 1:
            raise SpecWhisperError(f"--limit {value} must be at least 1", where="--limit")
        limits[name] = n
    return limits


def limit_for(limits: dict[str, int], set_name: str) -> int | None:
    return limits.get(set_name, limits.get("*"))


def train_text(name: str, root: Path) -> Path | None:
    rel = SETS[name][1]
    return root / rel if rel else None
