"""Batch workers on this machine: one in the driver's own process (``workers=1``), or a pool of
processes each holding an engine. A process that dies (killed, out of memory) costs the inputs it
held one attempt each; a fresh pool takes the rest, so one crash never ends the job."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ..errors import SpecWhisperError
from .inputs import BatchItem
from .worker import BatchWorker, Outcome

_worker: BatchWorker | None = None  # the engine of a pool process, made once by its initializer
_failed_start: str | None = None  # why it could not be made (every input then fails with it)
_busy = False  # transcribing now (SIGTERM then unwinds; idle, the process just ends)


class _Terminated(BaseException):
    """SIGTERM in a pool process: unwinds, so that an output being written leaves no temporary file,
    then the process ends (the pool sends SIGTERM to every survivor when one of its processes dies)."""


def _terminate(signum, frame):
    if not _busy:
        os._exit(128 + signum)
    raise _Terminated()


def _init_process(args: tuple) -> None:
    global _worker, _failed_start
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it ends the pool
    signal.signal(signal.SIGTERM, _terminate)
    try:
        _worker = BatchWorker(*args)
    except SpecWhisperError as exc:
        _failed_start = exc.message()


def _run_in_process(item: BatchItem) -> Outcome:
    global _busy
    if _worker is None:
        return Outcome(item.path, item.name, "failed", error=f"the worker could not start: {_failed_start}")
    _busy = True
    try:
        return _worker(item)
    except _Terminated:
        # Unwound (no temporary file left); now end. Returning to the pool's loop would leave a
        # process that the pool is joining blocked on a queue lock a killed sibling may hold.
        os._exit(128 + signal.SIGTERM)
    finally:
        _busy = False


class InProcessRunner:
    """Sequential: the engine in the driver's process (what ``transcribe`` does, plus the ledger)."""

    def __init__(self, worker_args: tuple) -> None:
        self._worker_args = worker_args
        self._worker: BatchWorker | None = None

    @property
    def decisions(self):
        """What ``auto`` settled, by this runner's own engine (None before it loads)."""
        return self._worker.decisions if self._worker is not None else None

    def run(self, items: list[BatchItem], alone: bool = False) -> Iterator[Outcome]:
        if self._worker is None:
            self._worker = BatchWorker(*self._worker_args)
        for item in items:
            yield self._worker(item)

    def close(self, abort: bool = False) -> None:
        if self._worker is not None:
            self._worker.close()


class ProcessPoolRunner:
    """``workers`` processes (spawned: no inherited threads or locks), each with its own engine;
    at most one input in flight per process, so a crash is charged to the inputs it could have hit."""

    def __init__(self, worker_args: tuple, workers: int) -> None:
        self._worker_args = worker_args
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self.decisions = worker_args[4]  # settled in the driver for every process (``decisions``)

    def _fresh_pool(self) -> ProcessPoolExecutor:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_process, initargs=(self._worker_args,))
        return self._pool

    def run(self, items: list[BatchItem], alone: bool = False) -> Iterator[Outcome]:
        """Outcomes as inputs end. ``alone``: one input at a time (inputs retried after a crash, so
        that the one that crashes a process cannot take good ones down with it again)."""
        queue = list(reversed(items))
        running: dict[Future, BatchItem] = {}
        limit = 1 if alone else self._workers
        while queue or running:
            for item in self._fill(queue, running, limit):
                yield _crashed(item)
            if not running:
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            broken = False
            for future in finished:
                item = running.pop(future)
                try:
                    yield future.result()
                except BrokenProcessPool:
                    broken = True
                    yield _crashed(item)
            if broken:  # every input still in the dead pool was charged; a new pool takes the rest
                for item in running.values():
                    yield _crashed(item)
                running.clear()
                self._fresh_pool()

    def _fill(self, queue: list[BatchItem], running: dict[Future, BatchItem], limit: int) -> list[BatchItem]:
        """Give idle processes an input each. A pool found dead here is replaced; the inputs that
        were in it are returned, to be charged an attempt (one of them may be what killed it)."""
        lost: list[BatchItem] = []
        while queue and len(running) < limit:
            pool = self._pool or self._fresh_pool()
            try:
                future = pool.submit(_run_in_process, queue[-1])
            except BrokenProcessPool:
                lost.extend(running.values())
                running.clear()
                self._fresh_pool()
                continue
            running[future] = queue.pop()
        return lost

    def close(self, abort: bool = False) -> None:
        """Wait for the processes to end; with ``abort`` (an interrupt) end them now: an input
        under way leaves nothing behind (outputs are written whole or not at all)."""
        if self._pool is None:
            return
        if abort:
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.terminate()
        self._pool.shutdown(wait=not abort, cancel_futures=True)
        self._pool = None


CRASHED = "the worker process died while transcribing it (killed, or out of memory)"


def _crashed(item: BatchItem) -> Outcome:
    return Outcome(item.path, item.name, "failed", error=CRASHED, retryable=True)
