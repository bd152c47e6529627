"""A batch job from inputs to outputs: what is already done is skipped without loading a model,
long files are cut into pieces, the rest goes to a runner (here, a process pool, Ray) in passes
(a failure that may pass is tried again, a bounded number of times), pieces are stitched into
their files' outputs, and every input ends with an outcome."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ..errors import SpecWhisperError
from .decisions import JobDecisions
from .folder_lock import held_by_this_job
from .inputs import BatchItem, expand_inputs
from .ledger import LEDGER_DIR, input_stamp, is_done, settings_key
from .local_runner import CRASHED
from .progress import BatchProgress
from .worker import Outcome

FORMATS = ("txt", "json", "srt", "vtt", "parquet")


@dataclass
class BatchReport:
    """Every input's outcome (the last try's), and the job's counts and throughput."""

    outcomes: list[Outcome] = field(default_factory=list)
    progress: BatchProgress | None = None
    decisions: JobDecisions | None = None  # what ``auto`` settled for the inputs decoded (None: none was)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed


def run_batch(inputs: list[str], output_dir: str, settings: argparse.Namespace, *, formats: tuple[str, ...],
              ray: str | None, workers: int, retries: int, stream: TextIO | None, on_outcome=None) -> BatchReport:
    """``transcribe_batch`` with the command line's options (``settings``); see there."""
    cues = _check(formats, workers, retries, settings, ray)
    items = expand_inputs(list(inputs))  # before the output folder is made: a bad manifest leaves none
    output_dir = _usable_output_dir(output_dir)
    with held_by_this_job(Path(output_dir) / LEDGER_DIR):
        return _run(items, output_dir, settings, cues, formats, ray, workers, retries, stream, on_outcome)


def _run(items: list[BatchItem], output_dir: str, settings: argparse.Namespace, cues, formats: tuple[str, ...],
         ray: str | None, workers: int, retries: int, stream: TextIO | None, on_outcome) -> BatchReport:
    """The job in a folder it holds: skip what is done, decode the rest, stitch the pieces."""
    durations = [item.duration_s for item in items]
    progress = BatchProgress(len(items), None if None in durations else sum(durations), stream)
    key = settings_key(vars(settings))
    outcomes: dict[str, Outcome] = {}
    pending = _not_done(items, output_dir, key, formats, progress, outcomes, on_outcome)
    if not pending:  # nothing to do: no model loads, no cluster is joined
        return BatchReport([outcomes[item.name] for item in items], progress)
    units, plans = _work_units(pending, getattr(settings, "piece_s", None))
    progress.total_files += len(units) - len(pending)
    runner, started = _runner(settings, output_dir, formats, ray, workers, retries)
    try:
        outcomes.update(_passes(runner, units, retries, progress, on_outcome))
    except BaseException:
        runner.close(abort=True)
        raise
    else:
        runner.close()
    finally:
        decisions = runner.decisions
        if ray is not None:
            from .ray_runner import disconnect

            disconnect(started)
    for parent, (item, pieces, method, stamp) in plans.items():
        outcomes[parent] = _stitched(output_dir, item, pieces, method, stamp, outcomes, formats, key, settings,
                                     cues, decisions)
        if on_outcome is not None:
            on_outcome(outcomes[parent])
    return BatchReport([outcomes[item.name] for item in items if item.name in outcomes], progress, decisions)


def _passes(runner, units: list[BatchItem], retries: int, progress: BatchProgress,
            on_outcome) -> dict[str, Outcome]:
    """Every unit through the runner; what failed and may pass goes round again, ``retries`` times at most."""
    outcomes: dict[str, Outcome] = {}
    pending = units
    for attempt in range(retries + 1):
        again = set()
        # inputs whose worker died go round one at a time: the one that kills a worker cannot take others down again
        alone = attempt > 0 and any(outcomes[unit.name].error == CRASHED for unit in pending)
        for outcome in runner.run(pending, alone=alone):
            final = outcome.status != "failed" or not outcome.retryable or attempt == retries
            progress.update(outcome, final)
            outcomes[outcome.name] = outcome
            if final and on_outcome is not None:
                on_outcome(outcome)
            if not final:
                again.add(outcome.name)
        pending = [unit for unit in units if unit.name in again]
        if not pending:
            break
    return outcomes


def _work_units(items: list[BatchItem], piece_s: float | None
                ) -> tuple[list[BatchItem], dict[str, tuple[BatchItem, list[BatchItem], str, dict]]]:
    """The items as units of work: a long file (over 1.5 x ``piece_s``) as its pieces. Returns the
    units and, for each file cut, the file, its pieces, how the cuts were found and the file's
    size and time when it was cut."""
    if piece_s is None:
        return items, {}
    from ..audio import load_audio
    from .pieces import plan_pieces

    units, plans = [], {}
    for item in items:
        if item.duration_s is not None and item.duration_s <= 1.5 * piece_s:
            units.append(item)
            continue
        try:
            stamp = input_stamp(item.path)
            waveform = load_audio(item.path)
        except (SpecWhisperError, OSError):  # the worker reports it, as for any file that does not decode
            units.append(item)
            continue
        pieces, method = plan_pieces(item, waveform, piece_s)
        units.extend(pieces)
        if pieces[0].parent is not None:
            plans[item.name] = (item, pieces, method, stamp)
    return units, plans


def _stitched(output_dir: str, item: BatchItem, pieces: list[BatchItem], method: str, stamp: dict,
              outcomes: dict[str, Outcome], formats: tuple[str, ...], key: str, settings: argparse.Namespace,
              cues, decisions: JobDecisions | None) -> Outcome:
    """A cut file's outcome: its outputs from its pieces' transcripts where all are there."""
    import json

    from .ledger import record_path
    from .pieces import stitch
    from .worker import piece_file, piece_record_name, write_outputs

    failed = [outcomes.get(p.name) or Outcome(p.path, p.name, "failed", error="never decoded (interrupted)")
              for p in pieces if outcomes.get(p.name) is None or outcomes[p.name].status == "failed"]
    if not failed and input_stamp(item.path) != stamp:
        failed = [Outcome(item.path, item.name, "failed", error="the file changed while its pieces were decoded")]
    if failed:
        return Outcome(item.path, item.name, "failed", error=f"{len(failed)} of its {len(pieces)} pieces failed: "
                       f"{failed[0].error}", retryable=False, worker="driver")
    try:
        transcripts = [(p, json.loads(piece_file(output_dir, p.name).read_text(encoding="utf-8"))) for p in pieces]
        written = write_outputs(output_dir, item, stitch(transcripts, method), formats, key, settings.beam_size,
                                decisions, cues, stamp)
    except (OSError, ValueError, SpecWhisperError) as exc:
        return Outcome(item.path, item.name, "failed", error=f"stitching its pieces: {exc}", worker="driver")
    for piece in pieces:  # the file's record verifies from now on; its pieces' transcripts are spent
        piece_file(output_dir, piece.name).unlink(missing_ok=True)
        record_path(output_dir, piece_record_name(piece.name)).unlink(missing_ok=True)
    return Outcome(item.path, item.name, "done", audio_s=item.duration_s or sum(p.duration_s or 0 for p in pieces),
                   wall_s=sum(outcomes[p.name].wall_s for p in pieces), outputs=tuple(map(str, written)),
                   worker="driver")


def _not_done(items: list[BatchItem], output_dir: str, key: str, formats: tuple[str, ...], progress: BatchProgress,
              outcomes: dict[str, Outcome], on_outcome) -> list[BatchItem]:
    """The items still to do; those whose outputs (in ``formats``) are there and verified are reported skipped."""
    from .worker import output_files

    pending = []
    for item in items:
        if not is_done(output_dir, item.name, item.path, key, output_files(output_dir, item.name, formats)):
            pending.append(item)
            continue
        outcome = Outcome(item.path, item.name, "skipped", audio_s=item.duration_s or 0.0, worker="driver")
        outcomes[item.name] = outcome
        progress.update(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return pending


def _check(formats: tuple[str, ...], workers: int, retries: int, settings: argparse.Namespace, ray: str | None):
    """What can be checked before the workers start (the models are found, pulled where needed,
    once, here); returns how srt/vtt cues are cut."""
    from ..file_transcriber import check_decoding_options
    from ..tokenizer import language_code
    from .worker import for_checks

    bad = [fmt for fmt in formats if fmt not in FORMATS]
    if bad or not formats:
        raise SpecWhisperError(f"unknown output format {', '.join(bad) or '(none)'}", where="--output-format",
                               hint=f"one or more of {', '.join(FORMATS)}, comma-separated")
    for name, value, least in (("--workers", workers, 1), ("--retries", retries, 0),
                               ("--threads-per-worker", settings.threads, 1)):
        if value < least:
            raise SpecWhisperError(f"{name} must be at least {least}, got {value}", where=name,
                                   hint="use e.g. 2")
    if "parquet" in formats:
        from .parquet import check_parquet_available

        check_parquet_available()
    piece_s = getattr(settings, "piece_s", None)
    if piece_s is not None and not piece_s >= 10:
        raise SpecWhisperError(f"--piece-s must be at least 10 seconds, got {piece_s}", where="--piece-s",
                               hint="use e.g. 600 (ten-minute pieces)")
    cues = check_decoding_options(for_checks(settings, formats))
    settings.language = language_code(settings.language)  # "FR" as "fr": one resume key for both
    if ray is not None:
        from .ray_runner import check_reachable, ray_module

        ray_module()
        check_reachable(ray)
    _check_models(settings)
    return cues


def _check_models(settings: argparse.Namespace) -> None:
    """The model, draft model and token map, found (a model directory made absolute: workers on
    other machines or folders read it too) and the token map read, so that a typo is one clear
    error here rather than every input failing in every worker."""
    from ..model_store import resolve_model

    for option in ("model", "draft_model"):
        name = getattr(settings, option, None)
        if option == "model" or name is not None:
            resolve_model(name)
            if name is not None and Path(name).is_dir():
                setattr(settings, option, str(Path(name).resolve()))
    if getattr(settings, "tokenmap", None):
        from ..tokenmap import load_token_map

        load_token_map(settings.tokenmap)
        settings.tokenmap = str(Path(settings.tokenmap).resolve())


def _usable_output_dir(output_dir: str) -> str:
    """The output folder, made (absolute: workers do not share the driver's folder) and written
    to once, so that a read-only or impossible folder is a clear error before any work."""
    from ..io_utils import check_writable_folder

    path = Path(output_dir).resolve()
    check_writable_folder(path)
    return str(path)


def _runner(settings: argparse.Namespace, output_dir: str, formats: tuple[str, ...], ray: str | None,
            workers: int, retries: int):
    worker_args = (settings, str(output_dir), tuple(formats))
    if ray is not None:
        from .ray_runner import RayRunner, connect

        decided = _decided(worker_args)  # before joining a cluster: a model that fails to load ends the job here
        return RayRunner(decided, workers, settings.threads, retries), connect(ray, workers * settings.threads)
    from .local_runner import InProcessRunner, ProcessPoolRunner

    if workers == 1:
        return InProcessRunner(worker_args), False
    return ProcessPoolRunner(_decided(worker_args), workers), False


def _decided(worker_args: tuple) -> tuple:
    """Workers in other processes get what ``auto`` settles (or settled in an earlier run into the
    same folder), decided here once (``decisions``)."""
    from .decisions import settle_for_job

    return (*worker_args, None, settle_for_job(worker_args[0], worker_args[1]))
