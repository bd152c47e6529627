"""Batch workers on a Ray cluster: Ray Data reads the input list (a block per input) and an actor
pool holds one engine per worker (loaded once per actor). A worker that dies is replaced by Ray and
its input retried a bounded number of times; an input whose retries run out is reported failed
and the others go on (errored blocks do not end the dataset)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from ..errors import SpecWhisperError
from .inputs import BatchItem
from .worker import BatchWorker, Outcome


def ray_module():
    try:
        import ray
        import ray.data  # noqa: F401 - Ray without its data library is not enough
    except ImportError:
        raise SpecWhisperError("--ray needs Ray (with Ray Data)", where="--ray",
                               hint="pip install 'specwhisper[ray]', or leave out --ray to run on this machine "
                                    "(--workers N for a process pool)") from None
    return ray


def connect(address: str, num_cpus: int) -> bool:
    """Join the cluster at ``address`` (``auto``: the one this machine belongs to), or with
    ``local`` start one here with ``num_cpus`` CPUs. Returns whether this call started Ray (then
    ``disconnect`` ends it); a Ray already initialised in this process is used as it is."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    on_term = signal.getsignal(signal.SIGTERM)
    try:
        if address == "local":
            ray.init(num_cpus=num_cpus, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SpecWhisperError(f"cannot reach a Ray cluster: {exc}", where=f"--ray {address}",
                               hint="start one with 'ray start --head' (then --ray auto), give its address "
                                    "(ray://host:10001 or host:6379), or use --ray local") from None
    if callable(on_term) and threading.current_thread() is threading.main_thread():
        # Ray's init puts in its own SIGTERM handler (a native stack dump, exit 15): the command's
        # own one unwinds the job as Ctrl-C does (whole files kept, Ray shut down, exit 143)
        signal.signal(signal.SIGTERM, on_term)
    return True


CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str) -> None:
    """Refuse an explicit address (host:port, ray://host:port) where nothing answers on that port:
    Ray itself retries such an address for minutes, printing only its own warnings."""
    import socket

    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if address in ("auto", "local") or not host or not port.isdigit():
        return  # Ray's own lookup (auto) or its own error for a form it does not take
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise SpecWhisperError(f"cannot reach a Ray cluster at {target}: {exc.strerror or exc}", where=f"--ray {address}",
                               hint="check the address and that the head node runs ('ray start --head'), or use "
                                    "--ray local to start one here") from None


def disconnect(started: bool) -> None:
    if started:
        ray_module().shutdown()


class _RayWorker:
    """The actor class Ray Data builds ``workers`` of; a batch is one input."""

    def __init__(self, worker_args: tuple) -> None:
        self.worker = BatchWorker(*worker_args)

    def __call__(self, batch: dict) -> dict:
        item = BatchItem(**json.loads(batch["item"][0]))
        return {"outcome": [json.dumps(self.worker(item).to_dict())]}


class RayRunner:
    """``workers`` actors of ``threads`` CPUs each; ``retries``: how often an input whose worker
    died is tried again on a fresh one."""

    def __init__(self, worker_args: tuple, workers: int, threads: int, retries: int) -> None:
        self._worker_args = _shipped(worker_args)
        self._workers, self._threads, self._retries = workers, threads, retries
        self.decisions = worker_args[4]

    def run(self, items: list[BatchItem], alone: bool = False) -> Iterator[Outcome]:
        """Outcomes as inputs end (``alone`` has no use here: Ray retries a dead worker's input alone)."""
        ray = ray_module()
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # its notes on progress bars and logs
        seen: set[str] = set()
        with warnings.catch_warnings():  # Ray's own deprecation notices (its context, max_task_retries)
            warnings.simplefilter("ignore", DeprecationWarning)
            context = ray.data.DataContext.get_current()
            saved = context.max_errored_blocks, context.enable_progress_bars
            context.max_errored_blocks, context.enable_progress_bars = -1, False
            try:
                for outcome in self._execute(ray, items):
                    seen.add(outcome.name)
                    yield outcome
            finally:
                context.max_errored_blocks, context.enable_progress_bars = saved
        for item in items:  # blocks that errored: their worker died on every try
            if item.name not in seen:
                yield Outcome(item.path, item.name, "failed", retryable=False,
                              error=f"its Ray worker died on each of {self._retries + 1} tries")

    def _execute(self, ray, items: list[BatchItem]) -> Iterator[Outcome]:
        dataset = ray.data.from_items([{"item": json.dumps(asdict(item))} for item in items],
                                      override_num_blocks=len(items))
        dataset = dataset.map_batches(
            _RayWorker, fn_constructor_kwargs={"worker_args": self._worker_args}, batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=self._workers), num_cpus=self._threads,
            max_task_retries=self._retries)
        for row in dataset.iter_rows():
            outcome = Outcome(**json.loads(row["outcome"]))
            outcome.outputs = tuple(outcome.outputs)
            yield outcome

    def close(self, abort: bool = False) -> None:
        """Ray Data ends the actor pool with the dataset's execution; nothing is held here."""


def _shipped(worker_args: tuple) -> tuple:
    """The worker's arguments with the token map's bytes in them, so that actors on other machines
    read it from the object store rather than from a path they may not have."""
    settings, output_dir, formats = worker_args[:3]
    shipped = {}
    if getattr(settings, "tokenmap", None):
        try:
            shipped["tokenmap"] = Path(settings.tokenmap).read_bytes()
        except OSError as exc:
            raise SpecWhisperError(f"cannot read the token map: {exc.strerror}", where=settings.tokenmap,
                                   hint="give a token map made with 'specwhisper tokenmap build'") from None
    return settings, output_dir, formats, shipped, *worker_args[4:]
