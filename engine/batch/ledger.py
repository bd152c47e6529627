"""What makes a batch resumable: beside the outputs, a record per input of what was transcribed
(the input's size and modification time, the options that decide the text) and the sha256 of every
output written. A rerun skips an input only where its record matches and every output it asks
for still has the bytes recorded: an output edited, cut short or deleted, an input replaced, or
an option that changes the text makes it run again. Drafters, thread counts and workers are left out of the key:
they change speed, never text, once ``auto`` has settled (see ``decisions``): what it settled for a key is
recorded here too, and a rerun decodes in it whatever its workers and threads (a resume with other
workers settled afresh and mixed two numerics in one folder). So are the output formats: a rerun
that asks for fewer of them finds them recorded and redoes nothing; one that asks for a format not
recorded runs the input again."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ..io_utils import atomic_write_text, sha256_file

LEDGER_DIR = ".specwhisper-batch"
# The options that decide a transcript's text, times and output files.
TEXT_OPTIONS = ("model", "compute_type", "device", "language", "task", "numerics", "no_speculation",
                "initial_prompt", "condition_on_previous_text", "audio_ctx", "temperature", "seed", "timestamps",
                "beam_size", "word_timestamps", "vad", "vad_threshold", "vad_min_silence_ms", "batch_size",
                "max_line_width", "max_words_per_line", "hallucination_silence_threshold", "encoder", "batch_decoder",
                "piece_s", "no_speech_threshold", "log_prob_threshold")


# The options that change speed only (drafting, threads, where it runs) or say what to do with the
# inputs: left out of the key, so changing them redoes nothing. Every option of ``batch`` is in one
# of the two lists (a test says so), so a new option cannot be forgotten.
SPEED_OPTIONS = ("tokenmap", "draft_len", "prompt_lookup", "draft_model", "learn", "threads", "decoder_threads",
                 "threads_per_worker", "workers", "ray", "retries", "inputs", "output_dir", "output_format",
                 "command")


# Raised where a version changes a default that changes the text (as 0.2.0's temperature ladder
# did): records made under the old defaults then run again.
TEXT_DEFAULTS_VERSION = 1


def settings_key(settings: dict) -> str:
    """A digest of the text-deciding options that differ from ``batch``'s defaults (a missing one
    counts as its default), and of ``TEXT_DEFAULTS_VERSION``. Options left at their defaults stay
    out of it, so that a version that adds an option (its default keeping the text as it was) finds
    the records of the version before: with every option in the key, an upgrade redid a whole
    archive without a word."""
    defaults = _batch_defaults()
    chosen = {name: value for name in TEXT_OPTIONS if (value := settings.get(name, defaults.get(name)))
              != defaults.get(name)}
    chosen["text defaults"] = TEXT_DEFAULTS_VERSION
    return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _batch_defaults() -> dict:
    from . import batch_settings

    return vars(batch_settings())


# Not ``.json``: an input's record is ``<name>.json`` for any name an input may have.
DECISIONS_FILE = "decisions.job"


def recorded_decisions(output_dir: str | Path, key: str) -> dict | None:
    """What ``auto`` settled for these options in an earlier run into ``output_dir``, or None."""
    try:
        decided = json.loads((Path(output_dir) / LEDGER_DIR / DECISIONS_FILE).read_text(encoding="utf-8"))[key]
        return decided if isinstance(decided, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_decisions(output_dir: str | Path, key: str, decided: dict) -> None:
    """Keep what ``auto`` settled for these options (``key``), before any output is written."""
    path = Path(output_dir) / LEDGER_DIR / DECISIONS_FILE
    try:
        every = json.loads(path.read_text(encoding="utf-8"))
        every = every if isinstance(every, dict) else {}
    except (OSError, ValueError):
        every = {}
    every[key] = decided
    atomic_write_text(path, json.dumps(every, indent=1, sort_keys=True) + "\n")


def record_path(output_dir: str | Path, name: str) -> Path:
    return Path(output_dir) / LEDGER_DIR / f"{name}.json"


def input_stamp(path: str) -> dict:
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def write_record(output_dir: str | Path, name: str, audio_path: str, key: str, outputs: list[Path],
                 duration_s: float, stamp: dict) -> Path:
    """Record a finished input; written last, after its outputs, so a record means they are whole.
    ``stamp``: the input's size and time taken before it was read, so that a file still being
    written while it was transcribed is not recorded as done with the bytes it has now."""
    written = {str(p.relative_to(output_dir)): sha256_file(p) for p in outputs}
    # an earlier record's outputs that still have its bytes stay recorded: a run in other formats
    # keeps them (json, then txt, then json again decoded everything three times)
    try:
        earlier = _record_for(output_dir, name, audio_path, key, stamp) or {"outputs": {}}
        kept = {rel: digest for rel, digest in earlier["outputs"].items()
                if rel not in written and sha256_file(Path(output_dir) / rel) == digest}
    except (OSError, ValueError, KeyError, TypeError):
        kept = {}
    record = {"input": os.path.abspath(audio_path), **stamp, "settings": key,
              "duration_s": round(duration_s, 3), "outputs": kept | written}
    return atomic_write_text(record_path(output_dir, name), json.dumps(record, indent=1) + "\n")


def _record_for(output_dir: str | Path, name: str, audio_path: str, key: str, stamp: dict) -> dict | None:
    """``name``'s record where it is of this input file (path, size, time) and these options,
    else None; an absent or damaged record raises (OSError, ValueError, KeyError, TypeError)."""
    record = json.loads(record_path(output_dir, name).read_text(encoding="utf-8"))
    if (record["settings"] != key or record["size"] != stamp["size"] or record["mtime_ns"] != stamp["mtime_ns"]
            or record["input"] != os.path.abspath(audio_path)):
        return None
    return record


def is_done(output_dir: str | Path, name: str, audio_path: str, key: str, wanted: Sequence[Path] = ()) -> bool:
    """True where ``name``'s outputs are there with the recorded bytes, for this input and these
    options, and every file of ``wanted`` (the outputs this run asks for) is among them; with
    ``wanted``, only those are read (an output of a format not asked for may have been edited)."""
    try:
        record = _record_for(output_dir, name, audio_path, key, input_stamp(audio_path))
        if record is None:
            return False
        asked = {str(Path(p).relative_to(output_dir)) for p in wanted} or record["outputs"].keys()
        if not asked <= record["outputs"].keys():
            return False
        return all(sha256_file(Path(output_dir) / rel) == record["outputs"][rel] for rel in asked)
    except (OSError, ValueError, KeyError, TypeError):  # no record, a damaged one, an output gone: do it again
        return False
