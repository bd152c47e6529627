"""One exception type for everything a user can fix: it says what went wrong, where, and what to do.

The CLI prints these as one clean message with a non-zero exit code; anything else is a bug.
"""

from __future__ import annotations


class SpecWhisperError(Exception):
    """A user-facing error: ``what`` happened, ``where`` (file, model, option) and ``hint`` (what to do)."""

    def __init__(self, what: str, where: str | None = None, hint: str | None = None) -> None:
        self.what = what
        self.where = where
        self.hint = hint
        super().__init__(self.message())

    def message(self) -> str:
        parts = [self.what]
        if self.where:
            parts.append(f"  where: {self.where}")
        if self.hint:
            parts.append(f"  what to do: {self.hint}")
        return "\n".join(parts)


def warn_caller(message: str) -> None:
    """A ``UserWarning`` attributed to the first line outside this package (the application's
    call, whatever the path inside: a fixed ``stacklevel`` pointed into the engine)."""
    import os
    import sys
    import warnings

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


# Options whose command-line flag is not the keyword's name: the flag that turns them off.
FLAGS = {"speculation": "--no-speculation", "prompt_lookup": "--prompt-lookup/--no-prompt-lookup",
         "previous_pass_drafts": "--no-previous-pass"}
# Keywords of the Python API with no flag on the command line (tests/test_inputs.py checks both
# lists against `specwhisper transcribe`'s parser).
PYTHON_ONLY = frozenset({
    "compression_ratio_threshold", "log_prob_threshold", "no_speech_threshold", "scores", "best_of", "patience",
    "length_penalty", "repetition_penalty", "no_repeat_ngram_size", "prompt_reset_on_temperature", "prefix",
    "draft_hint", "hotwords", "suppress_blank", "suppress_tokens", "max_initial_timestamp", "max_new_tokens",
    "clip_timestamps", "chunk_length", "multilingual", "prepend_punctuations", "append_punctuations",
    "language_detection_segments", "language_detection_threshold", "progress", "numerics_from_auto"})


def option_where(name: str) -> str:
    """Where an option's error points, for both ways to give it: the keyword of the Python API and
    the command line's flag (one check serves both, so the message names both where both exist)."""
    if name in PYTHON_ONLY:
        return f"{name} (Python API)"
    return f"{name} ({FLAGS.get(name, '--' + name.replace('_', '-'))})"


class AudioError(SpecWhisperError):
    """Audio could not be read or is unusable."""


class ModelError(SpecWhisperError):
    """A model could not be found, fetched, verified or loaded."""


class TokenMapError(SpecWhisperError):
    """A token map could not be built, read or matched to a model."""


class OutputError(SpecWhisperError):
    """An output file could not be written (a read-only or full disk, a file where a folder should be)."""


class NetworkError(ModelError):
    """A download was needed but no network (or hub) is reachable."""


class OptionError(SpecWhisperError, ValueError):
    """A bad option value: a ValueError too, as faster-whisper's callers expect."""


class UnknownModelError(ModelError, ValueError):
    """A model name that is neither a known size, a folder nor a hub repo id: a ValueError too,
    as faster-whisper's "Invalid model size" is."""


class UnknownOptionError(SpecWhisperError, TypeError):
    """A keyword no call of that name takes: a TypeError too, as Python raises for one (and
    faster-whisper's callers expect), with the names there are."""

    @classmethod
    def naming(cls, unknown: list[str], call: str, hint: str) -> UnknownOptionError:
        return cls(f"unknown option{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}", where=call, hint=hint)
