"""Whisper tokenizer: text <-> ids and the special tokens, read from a CT2 model directory.

Everything that must agree with what the model emits (the token map builder, drafters,
cross-vocabulary remapping) goes through this one class.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer

from .errors import ModelError, OptionError, option_where, warn_caller
from .model_check import check_config_ids

LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt "
    "la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af "
    "oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()

# English names in the order of LANGUAGE_CODES, and other names users type (openai-whisper's
# command line takes names, e.g. ``--language English``).
LANGUAGE_NAMES = (
    "english,chinese,german,spanish,russian,korean,french,japanese,portuguese,turkish,polish,catalan,dutch,"
    "arabic,swedish,italian,indonesian,hindi,finnish,vietnamese,hebrew,ukrainian,greek,malay,czech,romanian,"
    "danish,hungarian,tamil,norwegian,thai,urdu,croatian,bulgarian,lithuanian,latin,maori,malayalam,welsh,"
    "slovak,telugu,persian,latvian,bengali,serbian,azerbaijani,slovenian,kannada,estonian,macedonian,breton,"
    "basque,icelandic,armenian,nepali,mongolian,bosnian,kazakh,albanian,swahili,galician,marathi,punjabi,"
    "sinhala,khmer,shona,yoruba,somali,afrikaans,occitan,georgian,belarusian,tajik,sindhi,gujarati,amharic,"
    "yiddish,lao,uzbek,faroese,haitian creole,pashto,turkmen,nynorsk,maltese,sanskrit,luxembourgish,myanmar,"
    "tibetan,tagalog,malagasy,assamese,tatar,hawaiian,lingala,hausa,bashkir,javanese,sundanese,cantonese"
).split(",")
LANGUAGE_ALIASES = {"burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht", "letzeburgesch": "lb",
                    "pushto": "ps", "panjabi": "pa", "moldavian": "ro", "moldovan": "ro", "sinhalese": "si",
                    "castilian": "es", "mandarin": "zh", "farsi": "fa", "filipino": "tl", "norwegian nynorsk": "nn"}
CODE_OF_NAME = dict(zip(LANGUAGE_NAMES, LANGUAGE_CODES, strict=True)) | LANGUAGE_ALIASES


def language_code(language) -> str | None:
    """``language`` as Whisper writes it (``"EN"``, ``" en"`` and ``"English"`` as ``"en"``), or None
    for none (``"auto"`` too: detect it); a code Whisper does not know is an ``OptionError`` (a
    ValueError) on any model, checked before a model loads (the command line checks it once, not
    once per file)."""
    if language is None:
        return None
    code = " ".join(language.lower().split()) if isinstance(language, str) else None
    if code == "auto":  # whisper.cpp's and others' word for "detect it"
        return None
    code = CODE_OF_NAME.get(code, code)
    if code not in LANGUAGE_CODES:
        raise OptionError(f"unknown language {language!r}", where=option_where("language"),
                          hint="use a language code such as 'en', 'de' or 'fr', or its English name (Whisper's codes: "
                               f"{', '.join(LANGUAGE_CODES[:12])}, ...)")
    return code


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of Whisper's control tokens for one vocabulary."""

    eot: int
    sot: int
    transcribe: int
    translate: int
    no_timestamps: int
    sot_prev: int
    timestamp_begin: int
    no_speech: int | None = None  # <|nospeech|> (<|nocaptions|> in older vocabularies)


class WhisperTokenizer:
    """Wraps ``tokenizer.json`` of a CT2 Whisper model directory."""

    def __init__(self, tokenizer: Tokenizer, multilingual: bool, vocab_size: int, source: str) -> None:
        self._tok = tokenizer
        self.multilingual = multilingual
        self.vocab_size = vocab_size
        self.source = source
        ids = {
            name: tokenizer.token_to_id(tok)
            for name, tok in (
                ("eot", "<|endoftext|>"),
                ("sot", "<|startoftranscript|>"),
                ("transcribe", "<|transcribe|>"),
                ("translate", "<|translate|>"),
                ("no_timestamps", "<|notimestamps|>"),
                ("sot_prev", "<|startofprev|>"),
            )
        }
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            raise ModelError(
                f"tokenizer has no Whisper control tokens {missing}",
                where=source,
                hint="use a Whisper model directory (tokenizer.json from a Whisper checkpoint)",
            )
        no_speech = tokenizer.token_to_id("<|nospeech|>")
        if no_speech is None:
            no_speech = tokenizer.token_to_id("<|nocaptions|>")
        self.special = SpecialTokens(timestamp_begin=ids["no_timestamps"] + 1, no_speech=no_speech, **ids)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> WhisperTokenizer:
        """The tokenizer of ``model_dir``, shared with whatever in this process holds it already
        and read again only where its files changed: parsing tokenizer.json took 0.13-0.16 s, paid
        again by every engine, draft model and token map of one model (an app opening several
        engines; 210 times, 34 s, in the test suite). A tokenizer is read-only once made."""
        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelError(
                "model directory has no tokenizer.json",
                where=str(model_dir),
                hint="copy the checkpoint's tokenizer.json next to model.bin, or re-convert the model",
            )
        key = _files_state(model_dir)
        with _LOADED_LOCK:
            tokenizer = _LOADED.get(key)
        if tokenizer is None:
            tokenizer = cls._read(model_dir, path)
            with _LOADED_LOCK:
                _LOADED[key] = tokenizer
        return tokenizer

    @classmethod
    def _read(cls, model_dir: Path, path: Path) -> WhisperTokenizer:
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on a broken file
            raise ModelError(f"tokenizer.json cannot be read: {exc}", where=str(path),
                             hint="re-download or re-convert the model") from None
        config = _read_json(model_dir / "config.json")
        vocab_size = _vocabulary_size(model_dir, tok)
        # English-only Whisper vocabularies have 51864 entries, multilingual ones 51865 (51866 for v3).
        multilingual = bool(config.get("lang_ids")) and vocab_size >= 51865
        tokenizer = cls(tok, multilingual, vocab_size, str(path))
        check_config_ids(model_dir, config, vocab_size, tokenizer.special.timestamp_begin)
        return tokenizer

    # --- text <-> ids -------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` exactly as BPE splits it (no special tokens added)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids below EOT (control tokens and timestamps are dropped)."""
        eot = self.special.eot
        return self._tok.decode([i for i in ids if i < eot], skip_special_tokens=False)

    def token_text(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    # --- control sequences --------------------------------------------------------------------
    def language_token(self, language: str) -> int:
        tid = self._tok.token_to_id(f"<|{language}|>")
        if tid is None or not self.multilingual:
            raise OptionError(
                f"unknown or unsupported language {language!r} for this model ({self.source})",
                where=option_where("language"),
                hint="use a language code this model knows, such as 'en', 'de' or 'fr'",
            )
        return tid

    def checked_language(self, language: str | None) -> str | None:
        """``language`` as this model decodes it: a code Whisper does not know is an error on any
        model; an English-only model decodes any other code as English, with a warning (as
        faster-whisper does), where it used to take it without a word."""
        language = language_code(language)
        if language is None:
            return None
        if not self.multilingual:
            if language != "en":
                warn_caller(f"the model is English-only: language {language!r} is decoded as English")
            return "en"
        self.language_token(language)
        return language

    def checked_task(self, task: str) -> str:
        """``task`` as this model decodes it: an English-only model has no task token and only
        transcribes, said in a warning (it was dropped without a word, the output a transcript)."""
        if task == "translate" and not self.multilingual:
            warn_caller("the model is English-only: task 'translate' is decoded as 'transcribe' (English speech "
                        "gives the same text; other speech needs a multilingual model such as base)")
            return "transcribe"
        return task

    @cached_property
    def language_tokens(self) -> dict[int, str]:
        """Language token id -> code, for detection results."""
        out: dict[int, str] = {}
        for code in LANGUAGE_CODES:
            tid = self._tok.token_to_id(f"<|{code}|>")
            if tid is not None:
                out[tid] = code
        return out

    def sot_sequence(self, language: str | None, task: str = "transcribe", timestamps: bool = False) -> list[int]:
        """The decoder prompt that starts a window: SOT [language task] [notimestamps]."""
        seq = [self.special.sot]
        if self.multilingual:
            seq.append(self.language_token(language or "en"))
            seq.append(self.special.translate if task == "translate" else self.special.transcribe)
        if not timestamps:
            seq.append(self.special.no_timestamps)
        return seq

    @cached_property
    def _fingerprint(self) -> str:
        vocab = self._tok.get_vocab(with_added_tokens=True)
        h = hashlib.sha256()
        for token, tid in sorted(vocab.items(), key=lambda kv: kv[1]):
            h.update(f"{tid}\t{token}\n".encode())
        return h.hexdigest()[:16]

    def fingerprint(self) -> str:
        """A short stable hash of the vocabulary: token maps and remap tables are bound to it."""
        return self._fingerprint


# Tokenizers read in this process, by their files' state (``from_model_dir``), while something holds
# them: one holds ~20 MB, which an app that closes its last engine of a model gets back.
_LOADED: weakref.WeakValueDictionary[tuple, WhisperTokenizer] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.Lock()


def _files_state(model_dir: Path) -> tuple:
    """What a tokenizer read from ``model_dir`` depends on: the files it reads, each by identity,
    size and modification time (a file replaced or rewritten in place is read again)."""
    state: list = [str(model_dir)]
    for name in ("tokenizer.json", "config.json", "vocabulary.json", "vocabulary.txt"):
        try:
            st = (model_dir / name).stat()
            state.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            state.append((name, None))
    return tuple(state)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"config.json is not valid JSON: {exc}", where=str(path),
                         hint="re-download or re-convert the model") from None


def _vocabulary_size(model_dir: Path, tok: Tokenizer) -> int:
    """Size of the model's output layer (CT2 keeps it in vocabulary.json or vocabulary.txt)."""
    vj, vt = model_dir / "vocabulary.json", model_dir / "vocabulary.txt"
    try:
        if vj.is_file():
            return len(json.loads(vj.read_text(encoding="utf-8")))
        if vt.is_file():
            with vt.open(encoding="utf-8") as fh:
                return sum(1 for _ in fh)
    except (OSError, ValueError):
        pass
    return tok.get_vocab_size(with_added_tokens=True)
