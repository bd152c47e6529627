"""One worker of a batch: an engine loaded once, then one input at a time transcribed, its outputs
written atomically and recorded in the ledger. The same class runs in the driver (sequential), in
each process of a local pool and in each Ray actor, so a file gets the same text wherever it ran."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SpecWhisperError
from ..io_utils import atomic_write_bytes
from . import ledger
from .decisions import JobDecisions, settle
from .inputs import BatchItem
from .parquet import parquet_row_bytes

PARQUET_DIR = "transcripts.parquet"  # one Parquet dataset: a file per input, read as one table
PIECE_DIR = "pieces"  # under the ledger's folder: pieces' transcripts until their file is stitched


@dataclass
class Outcome:
    """What became of one input. ``status``: done, skipped (its outputs were there and verified) or
    failed (``error`` says why; ``retryable`` False for errors that a retry would repeat, such as
    audio that does not decode)."""

    path: str
    name: str
    status: str
    audio_s: float = 0.0
    wall_s: float = 0.0
    outputs: tuple[str, ...] = ()
    error: str | None = None
    retryable: bool = False
    worker: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def output_files(output_dir: str | Path, name: str, formats: tuple[str, ...]) -> list[Path]:
    """Where ``name``'s outputs go: ``DIR/<name>.<fmt>``, Parquet rows in ``DIR/transcripts.parquet/``."""
    root = Path(output_dir)
    return [root / PARQUET_DIR / f"{name}.parquet" if fmt == "parquet" else root / f"{name}.{fmt}"
            for fmt in formats]


def piece_file(output_dir: str | Path, name: str) -> Path:
    """A piece's transcript (JSON), kept beside the ledger until its file is stitched."""
    return Path(output_dir) / ledger.LEDGER_DIR / PIECE_DIR / f"{name}.piece.json"


def piece_record_name(name: str) -> str:
    return f"{PIECE_DIR}/{name}"


def write_outputs(output_dir: str, item: BatchItem, result, formats: tuple[str, ...], key: str, beam_size: int,
                  decisions: JobDecisions | None, cues, stamp: dict) -> list[Path]:
    """``item``'s outputs in every format, each atomic, then its ledger record (last: a record
    means the outputs are whole). The JSON also says the beam size and what ``auto`` settled."""
    from ..writers import render

    extra = {"beam_size": beam_size, "batch_decisions": decisions.to_dict() if decisions else None}
    paths = output_files(output_dir, item.name, formats)
    for fmt, path in zip(formats, paths):
        data = (parquet_row_bytes(item, result) if fmt == "parquet"
                else render(result, fmt, extra, cues).encode("utf-8"))
        atomic_write_bytes(path, data)
    ledger.write_record(output_dir, item.name, item.path, key, paths, _duration(result, item), stamp)
    return paths


class BatchWorker:
    """Holds one engine for the life of the worker (the model loads once). ``settings``: the
    ``batch`` command's options (the resume key is theirs); ``shipped``: files the driver read for
    the workers (a token map), by option name, written here to local temporary files so that a
    worker on another machine needs no shared file system for them; ``decisions``: what ``auto``
    settled for the job (``batch.decisions``), None in the job's first engine, which settles it."""

    def __init__(self, settings: argparse.Namespace, output_dir: str, formats: tuple[str, ...],
                 shipped: dict[str, bytes] | None = None, decisions: JobDecisions | None = None) -> None:
        from ..file_transcriber import check_decoding_options, open_transcriber

        self.settings = argparse.Namespace(**vars(settings))
        # only where files were shipped: a pool process ends without running finalizers, and a
        # killed one cannot, so an unused folder would be left behind by each
        self._scratch = tempfile.TemporaryDirectory(prefix="specwhisper-worker-") if shipped else None
        for option, data in (shipped or {}).items():
            local = Path(self._scratch.name) / f"{option}{Path(getattr(settings, option) or '').suffix}"
            local.write_bytes(data)
            setattr(self.settings, option, str(local))
        self.output_dir = output_dir
        self.formats = formats
        self.key = ledger.settings_key(vars(settings))
        self.cues = check_decoding_options(for_checks(self.settings, formats))
        if decisions is None:  # the job's first engine (the driver's own): an earlier run's, else its own
            self.engine, self._transcribe, decisions = settle(self.settings, output_dir, settings)
        else:
            decisions.apply(self.settings)
            self.engine, self._transcribe = open_transcriber(self.settings)
        self.decisions = decisions
        self.name = f"{os.uname().nodename}:{os.getpid()}"

    def __call__(self, item: BatchItem) -> Outcome:
        """Transcribe ``item`` unless its outputs are there and verified; never raises for a bad
        file (the outcome says what went wrong), so one file cannot stop the others."""
        start = time.perf_counter()
        record, wanted = ((item.name, output_files(self.output_dir, item.name, self.formats)) if item.parent is None
                          else (piece_record_name(item.name), []))
        if ledger.is_done(self.output_dir, record, item.path, self.key, wanted):
            return Outcome(item.path, item.name, "skipped", audio_s=item.duration_s or 0.0, worker=self.name)
        try:
            stamp = ledger.input_stamp(item.path)
            with _timestamps_for(item, self.settings):
                result = self._transcribe(item.path if item.parent is None else _piece_audio(item), None)
            if ledger.input_stamp(item.path) != stamp:
                return self._failed(item, "the file changed while it was transcribed", True, start)
            written = (self._write(item, result, stamp) if item.parent is None
                       else self._write_piece(item, result, stamp))
        except SpecWhisperError as exc:  # the input's fault: a retry would say the same
            return self._failed(item, exc.message(), False, start)
        except OSError as exc:  # the input vanished, or the output folder is full or read-only
            where = exc.filename or item.path
            return self._failed(item, f"{exc.strerror or exc} ({where})", False, start)
        except Exception as exc:  # noqa: BLE001 - anything else may be passing (memory, a library's hiccup)
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return self._failed(item, detail, True, start)
        return Outcome(item.path, item.name, "done", audio_s=_duration(result, item),
                       wall_s=time.perf_counter() - start, outputs=tuple(str(p) for p in written), worker=self.name)

    def _write(self, item: BatchItem, result, stamp: dict) -> list[Path]:
        return write_outputs(self.output_dir, item, result, self.formats, self.key, self.settings.beam_size,
                             self.decisions, self.cues, stamp)

    def _write_piece(self, item: BatchItem, result, stamp: dict) -> list[Path]:
        from ..writers import render

        path = atomic_write_bytes(piece_file(self.output_dir, item.name), render(result, "json").encode("utf-8"))
        ledger.write_record(self.output_dir, piece_record_name(item.name), item.path, self.key, [path],
                            _duration(result, item), stamp)
        return [path]

    def _failed(self, item: BatchItem, error: str, retryable: bool, start: float) -> Outcome:
        return Outcome(item.path, item.name, "failed", wall_s=time.perf_counter() - start, error=error,
                       retryable=retryable, worker=self.name)

    def close(self) -> None:
        self.engine.close()
        if self._scratch is not None:
            self._scratch.cleanup()


def for_checks(settings: argparse.Namespace, formats: tuple[str, ...]) -> argparse.Namespace:
    """The options as ``transcribe``'s checks read them (one output format: a subtitle one where any)."""
    subtitle = next((fmt for fmt in formats if fmt in ("srt", "vtt")), formats[0])
    return argparse.Namespace(**(vars(settings) | {"output_format": subtitle}))


def _piece_audio(item: BatchItem):
    """A piece's samples, as the planner cut them from the whole file's: a 16 kHz file's span is
    read alone (the same samples, without decoding hours of audio for minutes), others whole."""
    import soundfile

    from ..audio import SAMPLE_RATE, load_audio

    first, stop = round((item.start_s or 0.0) * SAMPLE_RATE), round((item.end_s or 0.0) * SAMPLE_RATE)
    try:
        if soundfile.info(item.path).samplerate == SAMPLE_RATE:
            span, _ = soundfile.read(item.path, start=first, stop=stop, dtype="float32", always_2d=True)
            return load_audio(span, sample_rate=SAMPLE_RATE)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError):
        pass  # a format soundfile does not read: decoded whole below
    return load_audio(item.path)[first:stop]


def _duration(result, item: BatchItem) -> float:
    duration = getattr(result, "duration_s", None) or result.to_dict().get("duration_s")
    return float(duration if duration is not None else item.duration_s or 0.0)


@contextlib.contextmanager
def _timestamps_for(item: BatchItem, settings: argparse.Namespace):
    """A piece of a long file decodes with timestamps under ``auto`` (``BatchItem.timestamps_on``)."""
    before = settings.timestamps
    if item.timestamps_on and before == "auto":
        settings.timestamps = "on"
    try:
        yield
    finally:
        settings.timestamps = before
