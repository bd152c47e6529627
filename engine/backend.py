"""The loaded CT2 Whisper model: load, capabilities, encoder, language detection, decoder choice
and call prices; its batch-invariance self-test is ``selftest``'s. Only this module, ``selftest``
(which measures the decoder's rows), ``encoders`` (CTranslate2's encoder beside the ONNX one),
``verifier`` (the main model's decoder) and the draft-model drafter (its own small model) touch
CTranslate2 objects.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from .call_timing import TimingInput, call_seconds, interleaved_call_seconds, monotone_costs
from .ct2_import import import_ct2
from .encoders import choose_encoder
from .errors import ModelError, OptionError, SpecWhisperError, option_where
from .measure_cache import cache_get, cache_put, kernel_env, measuring
from .model_check import check_against_weights
from .model_limits import FULL_ENCODER_FRAMES
from .model_store import check_model_dir
from .selftest import SELFTEST_TEXT, BatchInvarianceSelfTest, SelfTestResult, invariant_numerics_tag
from .tokenizer import WhisperTokenizer

_LOADED_IN_PID: int | None = None  # the process that loaded a model: a fork of it hangs loading another


def _import_ct2():
    kernel_env()  # snapshot the kernel settings before CTranslate2 first reads them
    try:
        return import_ct2()
    except ImportError:
        raise ModelError("CTranslate2 is not installed", where="python environment",
                         hint="pip install specwhisper (it pulls ctranslate2-crisperwhisper on Linux x86_64)") from None


def check_not_forked() -> None:
    """Raise where this process was forked from one that had loaded a model: CTranslate2 hangs for
    good loading one here (and the parent's locks may be held by threads the fork did not copy)."""
    if _LOADED_IN_PID not in (None, os.getpid()):
        raise SpecWhisperError("this process was forked from one that had loaded a model, and CTranslate2 "
                               "hangs for good loading one in it", where="a model loaded in a forked process",
                               hint="start worker processes with the 'spawn' or 'forkserver' method "
                                    "(multiprocessing.get_context('spawn')), or load models only in the workers")


def step_api_available() -> bool:
    """True when the installed CTranslate2 is the fork with prefill/forward_step/forward_batch."""
    ct2 = _import_ct2()
    w = ct2.models.Whisper
    return all(hasattr(w, n) for n in ("prefill", "forward_step_greedy", "forward_batch_greedy")) and hasattr(
        ct2.models, "WhisperDecoderState"
    )


BATCH_DECODERS = ("auto", "ct2", "invariant")
def model_fingerprint(model_dir: Path) -> str:
    """Which weights a model folder holds, wherever it lies: model.bin's size and a hash of its
    first and last MiB (its header and layer names, its first and last weights): what keys the
    machine measurements. The folder's path did: a cache measured in advance and mounted at
    another path measured again at every start where it could not be written (a helper deploying
    read-only caches to a fleet)."""
    import hashlib

    path = model_dir / "model.bin"
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        digest.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        digest.update(fh.read(1 << 20))
    return f"{size}:{digest.hexdigest()[:16]}"


class LoadedModel(BatchInvarianceSelfTest):
    """A CT2 Whisper model plus what the decoding loop needs to know about it."""

    def __init__(self, model_dir: Path, device: str = "cpu", compute_type: str = "int8", threads: int = 2,
                 device_index: int = 0, decoder_threads: int | None = None, batch_decoder: str = "auto",
                 encoder: str = "auto") -> None:
        """``decoder_threads``: threads of the decoder's calls; None chooses by measurement (see
        ``_choose_decoder_threads``). The encoder always uses ``threads``. ``batch_decoder``: what
        batch-invariant windows decode on: ``auto`` (the fork's kernels where its self-test passes,
        unless the invariant decoder is faster (``SelfTestResult.preferred``), else the invariant
        decoder), ``ct2`` or ``invariant`` (see ``SelfTestResult.decoder``).
        ``encoder``: ``auto`` (the faster of CTranslate2's and the ONNX Runtime graph, measured once;
        see ``encoders``), ``ct2`` or ``onnx``."""
        from .transcribe_options import check_engine_options  # (it imports this module)

        check_engine_options(device=device, compute_type=compute_type, threads=threads,
                             decoder_threads=decoder_threads, encoder=encoder, batch_decoder=batch_decoder)
        self.batch_decoder_choice = batch_decoder
        self._invariant = None
        ct2 = _import_ct2()
        check_model_dir(model_dir)
        self.model_dir = model_dir
        self.device = device
        self.device_index = device_index
        self.threads = threads
        self.tokenizer = WhisperTokenizer.from_model_dir(model_dir)  # checks the ids in config.json
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        check_against_weights(model_dir, self.tokenizer.vocab_size, config.get("alignment_heads", []))
        self.suppress = sorted({int(i) for i in config.get("suppress_ids", [])})
        self.suppress_begin = sorted({int(i) for i in config.get("suppress_ids_begin", [])})
        if device == "cuda" and ct2.get_cuda_device_count() == 0:
            raise ModelError("--device cuda asked for, but CTranslate2 sees no CUDA device", where=option_where("device"),
                             hint="use --device cpu, or install a CUDA build of CTranslate2 and the NVIDIA driver")
        t0 = time.perf_counter()
        self._requested_compute_type = compute_type
        self.model = self._load(threads)
        self.compute_type = self.model.compute_type
        self.n_mels = int(getattr(self.model, "n_mels", 80))
        self.has_step_api = step_api_available()
        self.vocab_size = self.tokenizer.vocab_size
        self._lock = threading.Lock()  # one window at a time per model: CT2 decoder states are not shared
        self._selftests: dict[int, SelfTestResult] = {}
        self._swept: dict[str, dict[str, float]] = {}  # late-position sweeps by key (see ``_sweeps``)
        self._speech_windows: dict[int, object] = {}  # encoded speech, by length, while a self-test runs
        # The encoder's large GEMMs scale with threads; the decoder's small calls may not (on this
        # project's 2-core Xeon a 3-row int8 call takes 20 ms on 2 threads and 11.5 ms on 1, a
        # 1-row step 11 vs 9.5 ms, logits bitwise equal). So the decoder may get its own instance.
        self.decoder = self.model
        self.decoder_threads = threads
        if self.has_step_api:
            self.decoder_threads, measured = self._choose_decoder_threads(decoder_threads)
            if self.decoder_threads != threads:
                self.decoder = measured or self._load(self.decoder_threads)
        self.encoder, self.encoder_choice = choose_encoder(
            encoder, model=self.model, model_dir=model_dir, device=device, compute_type=self.compute_type,
            threads=threads, n_mels=self.n_mels, cache_key=f"{self._selftest_key(threads=False)}|{threads}")
        self.load_seconds = time.perf_counter() - t0

    @property
    def requested_compute_type(self) -> str:
        """The compute type asked for (``compute_type`` is what CTranslate2 chose for this machine)."""
        return self._requested_compute_type

    def _load(self, threads: int, compute_type: str | None = None):
        global _LOADED_IN_PID
        ct2 = _import_ct2()
        check_not_forked()
        try:
            model = ct2.models.Whisper(str(self.model_dir), device=self.device, device_index=self.device_index,
                                       compute_type=compute_type or self._requested_compute_type,
                                       intra_threads=threads, inter_threads=1)
            _LOADED_IN_PID = os.getpid()
            return model
        except (RuntimeError, ValueError) as exc:
            asked = compute_type or self._requested_compute_type
            if "compute type" in str(exc) and "do not support" in str(exc):  # the machine, not the model
                supported = sorted(ct2.get_supported_compute_types(self.device, self.device_index))
                raise OptionError(f"this {self.device.upper()} cannot compute in {asked}: {exc}",
                                  where=option_where("compute_type"),
                                  hint=f"use one of {', '.join(supported)} here (specwhisper doctor lists them)") from None
            raise ModelError(f"CTranslate2 cannot load the model: {exc}", where=str(self.model_dir),
                             hint="the model may be corrupt, of another kind, or need another compute type") from None

    def _choose_decoder_threads(self, requested: int | None) -> tuple[int, object | None]:
        """Threads for the decoder: as asked, or 1 unless ``threads`` is clearly faster, measured once
        per machine, build, model and compute type (cached beside the self-test). Also returns the
        1-thread instance when this call loaded it to measure and chose it, so it is not loaded twice."""
        if requested is not None:  # a whole number >= 1 (check_engine_options)
            return requested, None
        if self.device != "cpu" or self.threads <= 1:
            return self.threads, None
        key = f"dthreads-v3|{self._selftest_key(threads=False)}|{self.threads}"
        cached = cache_get(key)
        if isinstance(cached, int) and cached >= 1:
            return cached, None
        measuring()
        single = self._load(1)
        # A 1-row step (single-row windows) and a 3-row call (batch-invariant rounds), both
        # instances timed in turn (a freshly loaded instance timed alone first came out up to 20 %
        # slow). A decoder instance of its own wins unless it is clearly slower: it lets the next
        # window encode while one decodes and leaves a core to a draft model, and on both CPUs
        # measured here multi-row calls were cheaper on 1 thread (AMD EPYC: 2-row calls 10 vs
        # 12-13 ms, 1-row steps 8.1-8.7 ms on both), where a "5 % faster" rule flipped between runs.
        cost_single, cost_many = (sum(t.values()) for t in interleaved_call_seconds((single, self.model), self._timing_input(),
                                                                                    sizes=(3,)))
        chosen = 1 if cost_single <= 1.05 * cost_many else self.threads
        cache_put(key, chosen)
        return chosen, single if chosen == 1 else None

    # --- encoder and language --------------------------------------------------------------
    def encode(self, mel_window: np.ndarray):
        """Encoder output for one window [n_mels, frames] from the chosen encoder (``encoder_choice``)."""
        return self.encoder.encode(mel_window)

    def detect_language(self, encoder_output) -> tuple[str, float]:
        return self.language_probs(encoder_output)[0]

    def language_probs(self, encoder_output) -> list[tuple[str, float]]:
        """Every language the model knows with its probability for this window, likeliest first."""
        if not self.tokenizer.multilingual:
            return [("en", 1.0)]
        return [(token[2:-2], float(prob)) for token, prob in self.model.detect_language(encoder_output)[0]]

    @property
    def lock(self) -> threading.Lock:
        return self._lock

    def batch_decoder(self, result: SelfTestResult | None):
        """The decoder object that batch-invariant windows run on under ``result``."""
        if result is not None and result.decoder == "invariant" and result.row_floor is not None:
            return self.invariant_decoder()
        return self.decoder

    def decoder_for(self, numerics: str, encoder_frames: int):
        """The decoder a window in ``numerics`` runs on: the invariant decoder for batch-invariant
        windows where this encoder length's self-test (already run) chose it, else ``decoder``."""
        if numerics != "batch-invariant":
            return self.decoder
        return self.batch_decoder(self._selftests.get(encoder_frames))

    def invariant_decoder(self, graph: str | None = None):
        """The ONNX Runtime decoder of this model (built on first use; see ``invariant_graph``);
        ``graph``: the step graph wanted (default: the one built, else ``paired``), built anew if
        another one was. The self-test decides it once per machine: both graphs are exact
        within themselves, so the choice must not change between windows (it is a kernel property,
        the same for every encoder length)."""
        if self._invariant is None or (graph is not None and self._invariant.graph != graph):
            from .invariant_decoder import InvariantDecoder

            precision = "int8" if self.compute_type.startswith("int8") else "float32"
            self._invariant = InvariantDecoder(self.model_dir, threads=self.decoder_threads, precision=precision,
                                               cross_threads=self.threads, graph=graph or "paired")
        return self._invariant

    def call_costs(self, *, use_cache: bool = True, result: SelfTestResult | None = None) -> dict[int, float] | None:
        """Relative cost of one decoder call by rows (1 row = 1.0), measured once and cached.

        Measured as the decoding loop pays it: a run of calls that each advance the state by one
        token and roll the rest back with ``truncate_to_step`` (so cache growth and truncation
        count), against a run of 1-row steps over the same positions. Sizes are timed in turn
        within each trial, so that a burst of load from elsewhere hits them alike, and the
        fastest trial counts; a size never counts as dearer than a larger one. On the CPU, a
        curve in which a 17-row call costs no more than a 1-row step says the machine was too busy
        to measure: it is neither used nor cached (None: the caller falls back to its default
        curve). On a GPU that flat curve is the device's own (a call is bound by its launches, not
        its rows, far beyond 17 rows: seen on an H200), so it is kept.
        """
        invariant = result is not None and result.decoder == "invariant"
        wide = invariant and result.wide
        # v4: the invariant decoder's pool threads no longer spin between calls (prices moved);
        # v5: they spin within its wide calls (prices moved again)
        key = f"cost-v5|{self._selftest_key()}" + (f"|invariant|{invariant_numerics_tag()}" if invariant else "") + \
            ("|wide" if wide else "")
        cached = cache_get(key) if use_cache else None
        if isinstance(cached, dict) and cached:
            return {int(k): float(v) for k, v in cached.items()}
        measuring()
        table = self._measure_invariant_costs(wide) if invariant else self._measure_call_costs()
        if self.device == "cpu" and table[max(table)] < 1.05:
            warnings.warn("decoder call costs could not be measured (the machine was busy): using the default "
                          "cost curve for this run", stacklevel=2)
            return None
        cache_put(key, {str(k): v for k, v in table.items()})
        return table

    def _measure_call_costs(self, sizes: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 17)) -> dict[int, float]:
        best = call_seconds(self.decoder, self._timing_input(), sizes)
        return monotone_costs(best, best[1], at_least=1.0)

    def _measure_invariant_costs(self, wide: bool, sizes: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 17)) -> dict[int, float]:
        """The invariant decoder's calls priced in the fork's 1-row steps (what single-row windows
        cost), both timed in turn (the fork's 1-row steps only: they are the unit); its own 1-row
        step is entry 1 and may be above or below 1.0.
        ``wide``: timed on its wide session, where most of its calls run (windows that nothing
        else runs beside: single-window audio, timestamped long-form without a draft model)."""
        invariant = self.invariant_decoder()
        ct2, inv = interleaved_call_seconds((self.decoder, invariant.widened() if wide else invariant), self._timing_input(),
                                             sizes=sizes, rounds=3, unit_only=(True, False))
        return monotone_costs(inv, ct2[1])

    def _timing_input(self) -> TimingInput:
        """What call timings decode: a random full window, its prompt and the self-test's text."""
        encoder_output, prompt = self._random_window(FULL_ENCODER_FRAMES)
        return TimingInput(encoder_output, prompt, self.tokenizer.encode(SELFTEST_TEXT), self.suppress)

    def _selftest_key(self, threads: bool = True, kernels: bool = True) -> str:
        """Machine, build, device, compute type, threads (unless not ``threads``), model file and
        CTranslate2's kernel settings (unless not ``kernels``: ONNX Runtime's own kernels read none
        of them, so the invariant decoder's checks leave them out): what a measurement depends on."""
        import ctranslate2

        from .cpu_identity import cpu_identity

        cpu = cpu_identity()  # the model name and the extensions kernels dispatch on
        thread_part = f"{self.threads}/{self.decoder_threads}" if threads else "-"
        return "|".join(str(p) for p in (ctranslate2.__version__, cpu, self.device, self.compute_type, thread_part,
                                         self._model_fingerprint, kernel_env() if kernels else "-"))

    @functools.cached_property
    def _model_fingerprint(self) -> str:
        return model_fingerprint(self.model_dir)

def to_host(view) -> np.ndarray:
    """A CT2 StorageView (or an array) as a numpy array; CUDA storage is copied to the host first
    (``np.asarray`` does not fail on it: it returns an object array)."""
    if isinstance(view, np.ndarray):
        return view
    if str(getattr(view, "device", "cpu")) != "cpu":
        view = view.to_device(_import_ct2().Device.cpu)
    return np.asarray(view)
