"""Transcribe many files: on this machine (sequentially or with a process pool) or on a Ray
cluster, with the same outputs either way, resumable, with failures retried a bounded number of
times and reported without losing the other files' outputs.

    from specwhisper.batch import transcribe_batch
    report = transcribe_batch(["archive/"], "out/", formats=("json",), workers=2, threads_per_worker=1)
    report = transcribe_batch(["calls.jsonl"], "out/", ray="auto", workers=16, threads_per_worker=4)
"""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..errors import SpecWhisperError, UnknownOptionError
from .inputs import BatchItem
from .job import BatchReport, run_batch
from .worker import Outcome

__all__ = ["BatchReport", "batch_settings", "run_batch", "transcribe_batch", "BatchItem", "Outcome"]


def batch_settings(**options) -> argparse.Namespace:
    """The ``batch`` command's options with these changed (``model="tiny.en"``, ``language="en"``,
    ...): the defaults are the command line's, so the API and the CLI decode alike."""
    from ..cli import build_parser
    from ..transcribe_options import switch

    settings = build_parser().parse_args(["batch", "-", "--output-dir", "-"])
    unknown = sorted(key for key in options if not hasattr(settings, key))
    if unknown:
        valid = sorted({*vars(settings), "formats", "threads_per_worker"} - set(_NOT_OPTIONS))
        raise UnknownOptionError.naming(unknown, "transcribe_batch", f"options are: {', '.join(valid)}")
    for key, value in options.items():
        # an on/off flag's string ("false") is refused here, once, not run as on (or failed file by file)
        setattr(settings, key, switch(value, key) if isinstance(getattr(settings, key), bool) else value)
    return settings


# The command line's names that transcribe_batch takes otherwise (its own arguments) or not at all.
_NOT_OPTIONS = ("command", "inputs", "output_dir", "threads", "output_format")


def transcribe_batch(inputs: list[str], output_dir: str, *, formats: tuple[str, ...] = ("json",),
                     ray: str | None = None, workers: int = 1, threads_per_worker: int = 2, retries: int = 2,
                     piece_s: float | None = None, stream: TextIO | None = None, on_outcome=None,
                     **options) -> BatchReport:
    """Transcribe every input into ``output_dir`` (``<name>.<fmt>`` per input; Parquet rows in
    ``transcripts.parquet/``). ``ray``: None runs here (``workers`` > 1: a process pool), else a
    cluster address, ``auto`` or ``local``. Inputs whose outputs are there and verified are
    skipped. ``piece_s``: files over 1.5x this many seconds are cut at silences into pieces that
    workers decode independently, then stitched (``batch.pieces``). ``on_outcome(outcome)`` is called as each input ends; ``stream`` gets progress lines.
    ``options``: the ``transcribe`` command's (``model``, ``language``, ``numerics``, ...)."""
    _check_not_importing_main(workers, ray)
    if isinstance(inputs, (str, os.PathLike)):  # one folder, file or manifest (a string was read letter by letter)
        inputs = [str(inputs)]
    if isinstance(formats, str):  # "json,srt" as the command line takes it
        formats = tuple(fmt.strip() for fmt in formats.split(","))
    formats = tuple(fmt.lower() for fmt in formats)
    misplaced = sorted(set(options) & {*_NOT_OPTIONS, "threads_per_worker"})
    if misplaced:
        raise UnknownOptionError(f"{', '.join(misplaced)}: not an option of transcribe_batch",
                                 where="transcribe_batch", hint="use threads_per_worker= and formats=")
    settings = batch_settings(**options)
    settings.threads = threads_per_worker
    settings.piece_s = piece_s
    return run_batch(inputs, output_dir, settings, formats=formats, ray=ray, workers=workers, retries=retries,
                     stream=stream, on_outcome=on_outcome)


def _check_not_importing_main(workers: int, ray: str | None) -> None:
    """A script that calls ``transcribe_batch(workers > 1)`` at its top level, without an ``if
    __name__ == "__main__":`` guard, runs the call again in every pool process as it imports the
    script (the processes are spawned): each failed, and the job reported every input's worker as
    dead. Said here, in the process that imports, in words."""
    import multiprocessing

    if workers > 1 and ray is None and getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SpecWhisperError("transcribe_batch(workers > 1) was called again by a pool process importing your "
                               "script", where="transcribe_batch",
                               hint='put the call under `if __name__ == "__main__":` (pool processes are spawned: '
                                    "they import the main script)")
