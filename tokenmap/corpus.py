"""Reading transcripts: plain text (one a line) or JSONL manifests (a ``text`` field a line).

Everything a user can get wrong here (an empty file, binary junk, another encoding, a whole book on
one line, a manifest line without text) stops the build with the file and line, before anything is
written.

Which kind a file is: its extension first (``.jsonl`` / ``.ndjson`` / ``.json`` are manifests,
``.txt`` / ``.text`` is text), since a grammar's line such as ``{room} lights on`` starts with a brace
and is still text. A file with neither is sniffed: a manifest only where its first line parses as
a JSON object. Lines that still hold a grammar's slots (``Set {device} to {level}``) are built as
literal text, which no speech matches: a warning says so, once per file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from specwhisper.errors import TokenMapError, warn_caller

MAX_LINE_CHARS = 100_000  # ~1.5 h of speech; longer lines are not one utterance
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
TEXT_SUFFIXES = (".txt", ".text")
SLOT = re.compile(r"\{[^\W\d]\w*\}")  # a grammar's slot: {room}, {device_name}; not any brace


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
    if _is_manifest(Path(path), lines, where):
        numbered = _jsonl_texts(lines, where)
    else:
        numbered = [(number, ln.strip()) for number, ln in enumerate(lines, 1) if ln.strip()]
    if not numbered:
        raise TokenMapError("no transcripts in file (every text is empty)", where=where)
    _warn_of_slots(numbered, where)
    return [text for _number, text in numbered]


def _is_manifest(path: Path, lines: list[str], where: str) -> bool:
    """JSONL by extension; text by extension, unless every line of it is a manifest's (warning
    where only some are: they are read as literal JSON); else JSONL only where the first line is
    a JSON object (sniffing by a leading brace took grammar lines such as ``{room} lights on`` for
    broken JSON)."""
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return True
    number, first = next(((n, ln) for n, ln in enumerate(lines, 1) if ln.strip()), (0, ""))
    looks_like_one = _is_json_object(first)
    if suffix in TEXT_SUFFIXES:
        if looks_like_one and all(_is_json_object(ln, with_text=True) for ln in lines if ln.strip()):
            return True  # a manifest named .txt: every line says so (a grammar's line never parses as JSON)
        if looks_like_one:
            warn_caller(f"{where}: line {number} is a JSON object, but a {suffix} file is read as plain text (one "
                        "transcript a line), so the map holds the JSON as text; name a JSONL manifest .jsonl")
        return False
    return looks_like_one


def _is_json_object(line: str, with_text: bool = False) -> bool:
    """Whether ``line`` parses as a JSON object (not merely starts with a brace); ``with_text``:
    one with a 'text' string, as a manifest's lines have."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        row = json.loads(line)
    except ValueError:
        return False
    return isinstance(row, dict) and (not with_text or isinstance(row.get("text"), str))


def _warn_of_slots(numbered: list[tuple[int, str]], where: str) -> None:
    """One warning per file for transcripts with a grammar's unexpanded slots: the map would hold
    ``{device}`` as literal text, which speech never matches, so drafting gains nothing from them."""
    found = [(number, text) for number, text in numbered if SLOT.search(text)]
    if not found:
        return
    number, text = found[0]
    lines = "line has" if len(found) == 1 else "lines have"
    warn_caller(f"{where}: {len(found)} {lines} unexpanded grammar slots (first: line {number}, {text!r}); "
                "the map holds them as literal text, which speech never matches: expand the grammar's slots "
                "into example values first")


def _jsonl_texts(lines: list[str], where: str) -> list[tuple[int, str]]:
    """(line number, text) of every manifest line with a non-empty text."""
    texts: list[tuple[int, str]] = []
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
            texts.append((number, row["text"].strip()))
    return texts


# English function words: about 40 % of the words of English transcripts (commands, read speech),
# under 7 % of Spanish or Swedish ones, none of Japanese or Chinese. Terse English commands ("call
# john smith", "play jazz music") have none either, so a low share is a warning, not a refusal.
ENGLISH_FUNCTION_WORDS = frozenset(
    "the a an to of in on off and or is are was were it its for at by with my me i you your we our he she they "
    "them his her this that these those be been not no yes all can do does please what which who when where how "
    "from as up down into out over than then there here will would could should have has had just".split())
ENGLISH_MIN_SHARE = 0.15  # of the words: English transcripts measured 0.26-0.47, Spanish 0.05-0.07, Swedish 0.04
ACCENTED_MAX_SHARE = 0.05  # of the letters: English has few (Beyoncé, café); Spanish 0.02-0.03, Swedish 0.06
OTHER_SCRIPT_MAX_SHARE = 0.2  # of the letters, outside the Latin alphabets: Japanese, Chinese, Russian ...
MIN_WORDS = 20  # fewer words: the share of function words says nothing


def _words(texts: list[str]) -> list[str]:
    return [w for text in texts for w in re.findall(r"[^\W\d_]+", text.lower())]


def why_not_english(texts: list[str]) -> str | None:
    """Why ``texts`` cannot be English transcripts (most of their letters are of another script
    than Latin), or None. A map built without ``--language`` records English, and transcribing
    with it then decodes in English, which turned Japanese speech into an English translation
    without a word: such a build asks for the language instead."""
    letters = [c for w in _words(texts) for c in w]
    other = sum(ord(c) > 0x24F for c in letters)
    if letters and other / len(letters) > OTHER_SCRIPT_MAX_SHARE:
        return f"{100 * other / len(letters):.0f} % of their letters are not of the Latin alphabet"
    return None


def english_unless_plainly_not(texts: list[str], option: str = "--language") -> str:
    """The language a map records when none was given: English, after asking the transcripts
    (``option`` names the setting in the error and warning: ``--language`` or ``language``)."""
    def given(value: str) -> str:
        return f"{option} {value}" if option.startswith("--") else f"{option}={value!r}"

    if (why := why_not_english(texts)) is not None:
        raise TokenMapError(f"the transcripts are not English ({why}); a map records their language "
                            "(en unless told) and transcription with it decodes in that language",
                            where=option, hint=f"pass their language (e.g. {given('ja')}, {given('zh')}), or "
                                               f"{given('none')} to record none (transcription then detects it)")
    if (doubt := doubt_english(texts)) is not None:
        warn_caller(f"the transcripts may not be English ({doubt}): the map records en, and transcription "
                    "with it decodes in English (speech in another language comes out translated); if they are not, "
                    f"give their language ({given('es')}, or {given('none')} to record none)")
    return "en"


def doubt_english(texts: list[str]) -> str | None:
    """Why ``texts`` in a Latin alphabet may not be English (few English function words, many
    accented letters), or None: worth a warning (Spanish transcripts recorded as English made
    transcription translate), not a refusal (terse English commands look the same)."""
    words = _words(texts)
    letters = sum(map(len, words))
    accented = sum(not c.isascii() for w in words for c in w)
    if letters and accented / letters > ACCENTED_MAX_SHARE:
        return f"{100 * accented / letters:.0f} % of their letters are accented"
    common = sum(w in ENGLISH_FUNCTION_WORDS for w in words)
    if len(words) >= MIN_WORDS and common / len(words) < ENGLISH_MIN_SHARE:
        return f"only {100 * common / len(words):.0f} % of their words are common English words (English text: 25-50 %)"
    return None
