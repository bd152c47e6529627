"""The batch-invariance self-test: which decoder, and which call sizes, give every row the same
bits whatever call it sits in on this machine, build, model and settings (what makes speculation
exact), measured once and cached. A part of ``LoadedModel`` (``backend``) kept in a room of its own:
the model loads and decodes there; here it is only measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from .errors import ModelError
from .measure_cache import cache_get, cache_put, measuring
from .model_limits import FULL_ENCODER_FRAMES, MAX_POSITIONS
from .row_patterns import CEILINGS, cycled_calls, even_calls, invariant_rows, max_abs_diff, swept_rows

_SELFTEST_LEN = 30  # tokens decoded per self-test run
# Previous-text tokens before the sweeps to the last position: none, and a conditioned window's
# (on an H200, int8_float16 rows parted after a 153- and a 333-token prompt, not after a 3-token one)
_SWEEP_LEADS = (0, 330)
SELFTEST_TEXT = " the quick brown fox jumps over the lazy dog while seven small birds sing in the old tree"
# ``auto`` decodes every window on the invariant decoder where its 1-row step costs at most this
# share of the fork's (a margin: a busy machine or a cold cache moves a calibration by a few %).
PREFER_INVARIANT_BELOW = 0.92
# The invariant decoder's logits on speech against the same weights computed in float32 by
# CTranslate2, as max |a - b| / max |b|: invariance alone would pass a kernel that computes zeros
# or garbage the same way in every call (ONNX Runtime 1.23's 8-bit MatMulNBits computed NaN for
# blocks over 256, which the row comparisons caught, and wrong sums in a test of it). Right
# graphs, tiny.en and base, AVX-512 and oneDNN held to AVX2: 0.04-0.06 paired, 0.06-0.12 row-wise
# (CTranslate2's own int8 decoder: 0.08-0.09, and 0.44 with AVX2 kernels, which saturate: it
# cannot be the reference).
MAX_INVARIANT_DRIFT = 0.3
# The contract's clause for a machine where ``auto`` chose the invariant decoder for speed: why it
# was chosen, not what makes a run exact (a run pinned to the same decoder has the same bits).
PREFERRED_CLAUSE = "; every window, its 1-row step being faster than CTranslate2's here"


@dataclass(frozen=True)
class SelfTestResult:
    """Outcome of the batch-invariance check on this machine, build, model and settings.

    Every decoder call of ``row_floor`` to ``row_ceiling`` rows gives bitwise identical logits for
    a token whatever the call's size and the token's row; None when no floor holds (then
    speculation is off). ``single_row_matches`` tells whether CTranslate2's 1-row steps fall in
    the same class (then both numerics are one). ``decoder``: which decoder batch-invariant
    windows run on: ``ct2`` (the fork's own kernels, invariant from ``row_floor`` rows on this
    machine) or ``invariant`` (the ONNX Runtime decoder of ``invariant_graph``, invariant by
    construction and checked here from 1 row: used where the fork's kernels are not, e.g. on CPUs
    without AVX-512, and under ``auto`` where it is faster than they are). ``ct2_diffs``: the fork's own comparisons when it was not used.
    ``preferred``: the invariant decoder's 1-row step is faster than the fork's here, so every
    window decodes on it (``auto`` numerics is batch-invariant, with or without drafts).
    """

    row_floor: int | None
    row_ceiling: int | None
    single_row_matches: bool
    max_abs_diff_by_rows: dict
    seconds: float
    key: str
    decoder: str = "ct2"
    ct2_diffs: dict | None = None
    ct2_passed: bool | None = None  # whether the fork's kernels passed, where ``ct2_diffs`` are theirs
    preferred: bool = False
    wide: bool = False  # the invariant decoder's rows are the same bits on its wide (2-thread) session
    graph: str = ""  # the invariant decoder's step graph that passed (``invariant_graph.GRAPHS``)
    cache_step: int = 0  # positions its caches grow by (0: full-length caches; see ``invariant_decoder``)

    @property
    def contract(self) -> str:
        """One line for results and ``doctor``: what makes speculation exact on this machine."""
        if self.row_floor is None:
            return "none: no decoder gave bitwise invariant rows here (speculation off)"
        if self.decoder == "invariant":
            return (f"bitwise: ONNX Runtime invariant decoder, calls of {self.row_floor}..{self.row_ceiling} rows "
                    "(row-wise quantization; attention over "
                    + (f"caches grown by {self.cache_step} positions" if self.cache_step else "full-length caches")
                    + (f"; {self.graph} step graph)" if self.graph else ")")
                    + (PREFERRED_CLAUSE if self.preferred else "")
                    + ("; rows alike on its 1- and 2-thread sessions (a window alone on the CPU runs on 2)"
                       if self.wide else ""))
        return f"bitwise: CTranslate2 kernels, calls of {self.row_floor}..{self.row_ceiling} rows"


def invariant_numerics_tag() -> str:
    """onnxruntime's version and the invariant graph's (both decide its numerics)."""
    from .invariant_graph import GRAPH_VERSION
    from .onnx_build import ort_tag

    return ort_tag(f"g{GRAPH_VERSION}")


class BatchInvarianceSelfTest:
    """``LoadedModel``'s self-test (a mixin: it reads the loaded model's ``model``, ``decoder``,
    ``tokenizer``, ``device``, ``compute_type``, ``threads``, ``batch_decoder_choice`` and its
    ``_selftests`` / ``_swept`` / ``_speech_windows`` / ``_invariant`` slots, and calls its
    ``_load``, ``encode``, ``invariant_decoder``, ``call_costs`` and ``_selftest_key``)."""

    def selftest(self, *, use_cache: bool = True, encoder_frames: int = FULL_ENCODER_FRAMES) -> SelfTestResult:
        """Measure (or read from cache) which decoder and row range make batch-invariant decoding exact.

        The fork's kernels first (unless ``batch_decoder`` says otherwise, or at a short length
        where the full window's kept the invariant decoder for its price: then it is tested first,
        and the fork's kernels only where it is not kept there); where no row floor holds for
        them, the invariant decoder (needs onnxruntime; int8 or float32, on the CPU).
        Under ``auto`` the invariant decoder is also taken where the fork's kernels pass but its
        1-row step is clearly cheaper than theirs (``preferred``: every window then decodes on it).
        Kernels may be chosen by the cross-attention length too, so each encoder length (full
        window or a fixed short audio context) has its own result; the fork's sweep to the last
        position is shared (see ``_sweeps``).
        """
        if use_cache and encoder_frames in self._selftests:
            return self._selftests[encoder_frames]
        # v10: whether the invariant decoder is preferred follows its prices (cost-v5)
        key = f"v10|{self._selftest_key()}|{self.batch_decoder_choice}|{invariant_numerics_tag()}|{encoder_frames}"
        if use_cache:
            try:
                cached = SelfTestResult(**cache_get(key))
                self._use_invariant(cached)
                self._selftests[encoder_frames] = cached
                return cached
            except TypeError:  # absent, or written by another version: measure again
                pass
        result, measured = None, True

        def ct2_part() -> SelfTestResult:
            return self._selftest_part("ct2", key, encoder_frames, use_cache,
                                       lambda: self._run_selftest(key, encoder_frames, use_cache))

        invariant_first = self._invariant_preferred_at_full_length(encoder_frames)
        if self.batch_decoder_choice != "invariant" and not invariant_first:
            result = ct2_part()
        if self.batch_decoder_choice != "ct2" and (result is None or result.row_floor is None
                                                   or self._invariant_may_be_faster()):
            ct2 = result
            invariant = self._selftest_part("invariant", key, encoder_frames, use_cache,
                                            lambda: self._run_invariant_selftest(key, encoder_frames, use_cache))
            if invariant.row_floor is not None and self.batch_decoder_choice == "auto":
                faster = self._invariant_is_faster(invariant)
                measured = faster is not None  # a machine too busy to price calls decides nothing for good
                invariant = replace(invariant, preferred=bool(faster))
            if invariant_first and not invariant.preferred:  # not kept at this length: the fork's may be
                result = ct2 = ct2_part()
            if ct2 is None or ct2.row_floor is None or invariant.preferred:
                result = invariant
                if ct2 is not None:
                    result = replace(result, ct2_diffs=ct2.max_abs_diff_by_rows, ct2_passed=ct2.row_floor is not None,
                                     seconds=result.seconds + ct2.seconds)
        self._speech_windows.clear()  # needed by this measurement only (a full window is 3 MB on base)
        if measured:
            cache_put(key, asdict(result))
        self._selftests[encoder_frames] = result
        return result

    def _selftest_part(self, decoder: str, key: str, encoder_frames: int, use_cache: bool,
                       measure: Callable[[], SelfTestResult]) -> SelfTestResult:
        """One decoder's half of the self-test (``ct2``: the fork's kernels, ``invariant``: the ONNX
        Runtime decoder), cached on its own: the choices ``auto``, ``ct2`` and ``invariant`` test the
        same kernels, so a machine that runs two of them (the test suite does, for every encoder
        length) measures each half once; the invariant decoder's half also holds under any of
        CTranslate2's kernel settings (``kernel_env``), which ONNX Runtime does not read. Its ``key``
        becomes the asking choice's."""
        part_key = f"v9-part|{self._selftest_key(kernels=decoder != 'invariant')}|{decoder}|" + \
            (f"{invariant_numerics_tag()}|" if decoder == "invariant" else "") + str(encoder_frames)
        if use_cache:
            try:
                cached = SelfTestResult(**cache_get(part_key))
                self._use_invariant(cached)
                return replace(cached, key=key)
            except TypeError:  # absent, or written by another version: measure again
                pass
        measuring()
        result = measure()
        cache_put(part_key, asdict(result))
        return result

    def _use_invariant(self, result: SelfTestResult) -> None:
        """Set the invariant decoder up as ``result`` (read from the cache) found it exact here."""
        if result.decoder == "invariant" and result.graph:
            self.invariant_decoder(result.graph).cache_step = result.cache_step or MAX_POSITIONS

    def _invariant_preferred_at_full_length(self, encoder_frames: int) -> bool:
        """Whether a short encoder length's self-test may start with the invariant decoder: under
        ``auto`` where the full window's chose it for speed (its price, a property of the machine,
        not of the length), the fork's kernels decide nothing at another length unless the invariant
        decoder is not kept there (it fails, or its price there says otherwise), so they are tested
        only then (each new ``--audio-ctx`` length cost 1-6 s more on an AVX2 EPYC, where they fail
        anyway). Their comparisons (``ct2_diffs``) are then absent from that length's result."""
        full = self._selftests.get(FULL_ENCODER_FRAMES)
        return (encoder_frames != FULL_ENCODER_FRAMES and self.batch_decoder_choice == "auto"
                and full is not None and full.preferred)

    def _invariant_may_be_faster(self) -> bool:
        """Whether the invariant decoder is worth trying beside passing fork kernels (``auto``, CPU)."""
        return self.batch_decoder_choice == "auto" and self._invariant_builds()

    def _invariant_builds(self) -> bool:
        """Whether the invariant decoder exists for this device and compute type (CPU; int8 or float32)."""
        from .encoders import onnx_precision

        return self.device == "cpu" and onnx_precision(self.compute_type) is not None

    def _invariant_is_faster(self, invariant: SelfTestResult) -> bool | None:
        """The invariant decoder's 1-row step against the fork's, from its cost table (priced in the
        fork's 1-row steps; measured once and cached); None where the machine was too busy to tell.
        Measured on this project's AVX-512 EPYC, base int8: 0.81 of the fork's step, and its
        prefill 29 vs 44 ms."""
        costs = self.call_costs(result=invariant)
        return None if costs is None else costs.get(1, 1.0) <= PREFER_INVARIANT_BELOW

    def _run_invariant_selftest(self, key: str, encoder_frames: int, use_cache: bool = True) -> SelfTestResult:
        """The invariant decoder's rows compared bitwise: 1-row steps against calls of 2..17 rows at
        several offsets, on random data and on speech. Unavailable (no onnxruntime or onnx, CUDA, a
        16-bit compute type) counts as failed."""
        t0 = time.perf_counter()
        if not self._invariant_builds():
            return SelfTestResult(None, None, False, {"invariant": f"not for {self.device} {self.compute_type}"},
                                  time.perf_counter() - t0, key, decoder="invariant")
        from .invariant_decoder import CACHE_STEP
        from .invariant_graph import GRAPHS

        # The faster graph first, the row-wise one where its rows are not invariant here; a later
        # encoder length starts from the graph an earlier one kept (no rebuilding the one that failed).
        built = self._invariant.graph if self._invariant is not None else GRAPHS[0]
        result, exact = None, None
        for graph in GRAPHS[GRAPHS.index(built):]:
            try:
                model = self.invariant_decoder(graph)
            except ModelError as exc:  # e.g. an onnxruntime without 8-bit MatMulNBits
                result = SelfTestResult(None, None, False, {"invariant": exc.what}, time.perf_counter() - t0, key,
                                        decoder="invariant")
                continue
            if exact is None:  # the float32 model's speech logits, computed once for every graph tried
                float32_run, n = self._selftest_runner(encoder_frames, self._load(self.threads, "float32"),
                                                       speech=True)
                exact = float32_run([1] * n)
            model.cache_step = CACHE_STEP
            result = self._compare_invariant_rows(model, key, encoder_frames, t0, exact)
            if result.row_floor is None:
                continue
            swept = self._cache_length_sweep(model, use_cache)
            if all(d == 0.0 for d in swept.values()):
                return replace(result, cache_step=CACHE_STEP, max_abs_diff_by_rows={**result.max_abs_diff_by_rows, **swept},
                               seconds=time.perf_counter() - t0)
            model.cache_step = MAX_POSITIONS  # rows differ with the caches' length here: keep them full
            result = self._compare_invariant_rows(model, key, encoder_frames, t0, exact)
            result = replace(result, max_abs_diff_by_rows={**result.max_abs_diff_by_rows, **swept})
            if result.row_floor is not None:
                break
        return result

    def _cache_length_sweep(self, model, use_cache: bool = True) -> dict[str, float]:
        """The invariant decoder's rows on speech from the first position to the last with its
        caches grown by ``CACHE_STEP`` against full-length caches: the largest difference.

        Growing caches, each row is computed over the cache its call found (1-row steps and
        16-row calls in turn, on the narrow and on the wide session: every length from 64 to 448
        is met by both kinds of call); the reference has full-length caches, in 17-row calls.
        A prompt's prefill needs no check: the oracle and speculation prefill the same prompt in
        one call, so over the same length. Once per machine, graph and threads, at the full
        encoder length (the cross-attention's shapes do not change with the cache's length);
        about 5 s on base. Leaves the model's caches growing."""
        from .invariant_decoder import CACHE_STEP

        def measure() -> dict[str, float]:
            run, n = self._selftest_runner(FULL_ENCODER_FRAMES, model, speech=True, full=True)
            model.cache_step = MAX_POSITIONS
            reference = run(cycled_calls(n, [17], 1))
            model.cache_step = CACHE_STEP
            diffs: dict[str, float] = {}
            for label, sizes, wide in (("1- and 16-row calls", [1, 16], False),
                                       ("16- and 1-row calls, wide", [16, 1], True)):
                d = max_abs_diff(run(cycled_calls(n, sizes, 1), wide=wide), reference)
                diffs[f"caches grown by {CACHE_STEP} to position {MAX_POSITIONS - 1}, {label}"] = d
                if d != 0.0:
                    break
            return diffs

        key = f"length-sweep-v2|{self._selftest_key(kernels=False)}|{invariant_numerics_tag()}|{model.graph}"
        return self._swept_once(key, use_cache, measure)

    def _compare_invariant_rows(self, model, key: str, encoder_frames: int, t0: float,
                                exact: np.ndarray) -> SelfTestResult:
        """Bitwise equal rows in every call pattern, and 1-row logits on speech near ``exact``
        (the float32 model's on the same tokens)."""
        diffs, wide = {}, {}
        drift = float("inf")
        for speech in (False, True):
            run, n = self._selftest_runner(encoder_frames, model, speech=speech)
            reference = run([1] * n)
            if speech:
                drift = max_abs_diff(reference, exact) / max(float(np.abs(exact).max()), 1e-9)
            label = "speech " if speech else ""
            for chunks in ([17] + [1] * (n - 17), [2, 3, 4, 5, 6, 7, 3], [1, 12, 8, 9], [16, 14]):
                diffs[label + ",".join(map(str, chunks))] = max_abs_diff(run(chunks), reference)
            for chunks in ([1] * n, [3, 17, 1, 9]):
                wide[f"{label}wide {','.join(map(str, chunks))}"] = max_abs_diff(run(chunks, wide=True), reference)
        # Positions: this graph attends over its cache's whole length with a mask, so a call's shapes
        # change with the cache's length only, not with the position; ``_cache_length_sweep`` checks
        # every length to the last position once per machine.
        ok = all(d == 0.0 for d in diffs.values()) and drift <= MAX_INVARIANT_DRIFT
        diffs["speech vs float32 (relative)"] = drift
        return SelfTestResult(1 if ok else None, 17 if ok else None, False, {**diffs, **wide},
                              time.perf_counter() - t0, key, decoder="invariant",
                              wide=ok and all(d == 0.0 for d in wide.values()), graph=model.graph)

    def _speech_window(self, encoder_frames: int):
        """The encoder output of the bundled sample's first seconds (``encoder_frames`` outputs) and a
        prompt; encoded once per length (a self-test decodes it many times: base's CTranslate2
        encoder took ~1 s a window, six times a self-test)."""
        if encoder_frames not in self._speech_windows:
            from .features import bundled_sample_window

            features = bundled_sample_window(self.n_mels, n_frames=2 * encoder_frames)
            self._speech_windows[encoder_frames] = self.encode(features)
        return self._speech_windows[encoder_frames], self.tokenizer.sot_sequence("en")

    def _random_window(self, encoder_frames: int):
        """A random encoder output of the real shape (kernels depend on shapes, not data) and a prompt."""
        from .backend import _import_ct2

        ct2 = _import_ct2()
        short = self.model.encode(ct2.StorageView.from_array(np.zeros((1, self.n_mels, 200), np.float32)))
        enc = np.random.default_rng(0).standard_normal((1, encoder_frames, short.shape[2])).astype(np.float32)
        encoder_output = ct2.StorageView.from_array(enc)
        if self.device == "cuda":
            encoder_output = encoder_output.to_device(ct2.Device.cuda)
        return encoder_output, self.tokenizer.sot_sequence("en")

    def _selftest_runner(self, encoder_frames: int, model, speech: bool = False, full: bool = False,
                         lead: int = 0):
        """``run(chunks)``: one fixed token sequence decoded in calls of those sizes, all logits; and its length
        (``wide``: on the invariant decoder's wide session).

        On a random encoder output of the real shape, or (``speech``) on the bundled sample's;
        ``full``: a sequence that runs to the last decoder position; ``lead``: that many previous-text
        tokens prefilled before the prompt (as a window conditioned on earlier text has). Kernels may change with the
        attention's length: on an Intel Xeon (MKL) the fork's rows were bitwise alike in calls of
        3..17 rows up to position ~375 and up to 1.96 logits apart after it; on an H200 (cuBLAS,
        int8_float16) alike at the first and last 30 positions and 0.17 apart from position 287."""
        from .backend import to_host

        encoder_output, prompt = self._speech_window(encoder_frames) if speech else self._random_window(encoder_frames)
        words = self.tokenizer.encode(SELFTEST_TEXT) * 40
        if lead:
            prompt = [self.tokenizer.special.sot_prev] + words[:lead] + prompt
        seq = words[:MAX_POSITIONS - len(prompt) if full else _SELFTEST_LEN]

        def run(chunks: list[int], wide: bool = False) -> np.ndarray:
            state, _ = model.prefill(encoder_output, prompt, wide=lambda: True) if wide else \
                model.prefill(encoder_output, prompt)
            rows, i = [], 0
            for c in chunks:
                if c == 1:
                    rows.append(to_host(model.forward_step(state, seq[i])).astype(np.float32).reshape(1, -1))
                else:
                    rows.append(to_host(model.forward_batch(state, seq[i:i + c])).astype(np.float32)[0])
                i += c
            return np.concatenate(rows)

        return run, len(seq)

    def _sweeps(self, low: int, high: int, use_cache: bool) -> dict[str, float]:
        """The fork's kernels on speech decoded to the last position after each of ``_SWEEP_LEADS``
        previous-text tokens in calls cycling through ``low``..``high`` rows (:func:`row_patterns.swept_rows`);
        stops at the first lead whose rows part (one is enough to fail).

        Run once per machine, decoder threads and row range, at the full encoder length, and shared
        by the self-tests of every encoder length (a short audio context's first use would otherwise
        pay ~10 s on base): of a decoder layer's products only self-attention's shapes grow with the
        position, and they do not include the encoder length, while cross-attention's, which do,
        are the same at every position and are checked at each length on the first positions."""
        def measure() -> dict[str, float]:
            diffs: dict[str, float] = {}
            for lead in _SWEEP_LEADS:
                run, n = self._selftest_runner(FULL_ENCODER_FRAMES, self.decoder, speech=True, full=True, lead=lead)
                swept = swept_rows(run, n, low, high, lead, MAX_POSITIONS - 1)
                diffs.update(swept)
                if any(d != 0.0 for d in swept.values()):
                    break
            return diffs

        return self._swept_once(f"sweep-v2|{self._selftest_key()}|{low}..{high}", use_cache, measure)

    def _swept_range(self, floor: int, ceiling: int, diffs: dict[str, float], use_cache: bool,
                     narrow: bool = True) -> tuple[int | None, int | None]:
        """The widest ceiling down from ``ceiling`` whose sweep to the last position holds (the
        first positions passed up to ``ceiling``); (None, None) where none does. A row's bits can
        follow the length of the keys its call reads: on an H200, tiny.en int8_float16 rows
        parted between calls of 2 and of 12 or 17 rows after a long prompt and held in calls of
        2..3, so narrower ranges (``narrow``) are swept before speculation is given up. Each
        sweep's differences are added to ``diffs``."""
        narrower = [c for c in CEILINGS if floor < c < ceiling] + \
            ([floor + 1] if floor + 1 < min(ceiling, *CEILINGS) else [])
        for high in [ceiling] + (narrower if narrow else []):
            swept = self._sweeps(floor, high, use_cache)
            diffs.update(swept)
            if all(d == 0.0 for d in swept.values()):
                return floor, high
        return None, None

    def _swept_once(self, key: str, use_cache: bool, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
        """A sweep's differences, measured once per process and machine (kept in memory and in the
        self-test cache); ``use_cache`` False measures again."""
        cached = (self._swept.get(key) or cache_get(key)) if use_cache else None
        if isinstance(cached, dict):
            return cached
        measuring()
        diffs = measure()
        self._swept[key] = diffs
        cache_put(key, diffs)
        return diffs

    def _run_selftest(self, key: str, encoder_frames: int, use_cache: bool = True) -> SelfTestResult:
        """Decode one fixed token sequence in calls of many shapes and compare logits bitwise, on a
        random encoder output and again on speech (the bundled sample): on an AVX2-only CPU the
        fork's int8 kernels passed on random data (tiny.en: rows 4-5) and still differed on speech,
        where some kernels saturate 16-bit sums that others do not. The floor must hold on both."""
        t0 = time.perf_counter()
        run, _ = self._selftest_runner(encoder_frames, self.decoder)
        seq = range(_SELFTEST_LEN)
        floor, ceiling, diffs = invariant_rows(run, len(seq))
        if floor is not None:
            speech, _ = self._selftest_runner(encoder_frames, self.decoder, speech=True)
            s_floor, s_ceiling, s_diffs = invariant_rows(speech, len(seq), floors=(floor,))
            diffs.update({f"speech {k}": v for k, v in s_diffs.items()})
            floor, ceiling = (floor, min(ceiling, s_ceiling)) if s_floor == floor else (None, None)
        if floor is not None:  # every position a window can reach, in calls of every size
            # Where the invariant decoder can decode instead (CPU, int8 or float32), narrower ranges
            # buy nothing (on the Xeon every range of the fork parts) and would cost up to three
            # more sweeps, also under ``--batch-decoder ct2`` (the fresh-clone tests pin it).
            floor, ceiling = self._swept_range(floor, ceiling, diffs, use_cache, narrow=not self._invariant_builds())
        reference = run(even_calls(len(seq), floor or 3))
        single = run([1] * 4 + even_calls(len(seq) - 4, floor or 3))
        diffs["1-row"] = max_abs_diff(single[:4], reference[:4])
        return SelfTestResult(row_floor=floor, row_ceiling=ceiling, single_row_matches=diffs["1-row"] == 0.0,
                              max_abs_diff_by_rows=diffs, seconds=time.perf_counter() - t0, key=key)
