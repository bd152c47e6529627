"""Fuzzed input (issue 21): whatever bytes, arrays or token-map files arrive, the answer is a
waveform or a clear error of the project's own type (what, where, what to do), never another
exception. Hypothesis draws the cases (derandomized: the same cases on every run); CI runs a
hundred or a few per target, ``-m full`` thousands, and each test prints how many ran."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio import load_audio
from specwhisper.errors import AudioError, SpecWhisperError, TokenMapError

hypothesis = pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis (in the test extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

SIZES = [pytest.param(200, id="ci"), pytest.param(3000, id="full", marks=pytest.mark.full)]
# building a token map from 50,000-character lines takes a tenth of a second: fewer in CI
CORPUS_SIZES = [pytest.param(40, id="ci"), pytest.param(3000, id="full", marks=pytest.mark.full)]


def _run(examples: int, strategy, check: Callable) -> dict[str, int]:
    """``check`` on ``examples`` drawn cases; returns how many ended how."""
    outcomes: dict[str, int] = {}

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def prop(case):
        outcome = check(case)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    prop()
    print(f"\n[fuzz] {sum(outcomes.values())} cases: {outcomes}")
    return outcomes


def _audio_or_clear_error(call: Callable[[], np.ndarray]) -> str:
    try:
        audio = call()
    except AudioError as exc:
        assert exc.what and exc.where and exc.hint, exc.message()
        return "refused"
    assert audio.dtype == np.float32 and audio.ndim == 1 and audio.size > 0 and np.isfinite(audio).all()
    return "decoded"


def _encoded(fmt: str, subtype: str | None = None, rate: int = 22050) -> bytes:
    t = np.arange(rate // 4) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([tone, tone[::-1]], axis=1), rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


@pytest.mark.parametrize("examples", SIZES)
def test_random_bytes(examples):
    outcomes = _run(examples, st.binary(min_size=0, max_size=4096),
                    lambda data: _audio_or_clear_error(lambda: load_audio(data)))
    assert outcomes.get("refused", 0) > 0


@pytest.mark.parametrize("examples", SIZES)
@pytest.mark.parametrize("fmt, subtype", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("WAV", "FLOAT")])
def test_damaged_files(fmt, subtype, examples):
    """Real files cut short, or with bytes overwritten anywhere (headers first)."""
    good = _encoded(fmt, subtype)
    assert load_audio(good).size > 0

    def damaged(case) -> str:
        cut, edits = case
        data = bytearray(good[:cut])
        for position, value in edits:
            if data:
                data[position % min(len(data), 256 if position % 2 else len(data))] = value
        return _audio_or_clear_error(lambda: load_audio(bytes(data)))

    edits = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4)
    outcomes = _run(examples, st.tuples(st.integers(0, len(good)), edits), damaged)
    assert outcomes.get("refused", 0) > 0


@pytest.mark.parametrize("examples", SIZES)
def test_arrays_of_any_dtype_shape_and_value(examples):
    dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int16, np.int32, np.int8, np.uint8,
                              np.int64, np.complex64, np.bool_])
    arrays = hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40))
    rates = st.one_of(st.none(), st.sampled_from([8000, 16000, 44100, 1, 0, -5]))
    outcomes = _run(examples, st.tuples(arrays, rates),
                    lambda case: _audio_or_clear_error(lambda: load_audio(case[0], sample_rate=case[1])))
    assert outcomes.get("refused", 0) > 0 and outcomes.get("decoded", 0) > 0


@pytest.fixture(scope="module")
def token_map_bytes(base_model_dir, shared_data, tmp_path_factory):
    from specwhisper.tokenizer import WhisperTokenizer
    from specwhisper.tokenmap import build_token_map

    tok = WhisperTokenizer.from_model_dir(base_model_dir)
    lines = (shared_data / "domain/car/train.txt").read_text(encoding="utf-8").splitlines()[:300]
    path = build_token_map(lines, tok).save(tmp_path_factory.mktemp("fuzz") / "car.tmap")
    return tok, path.read_bytes()


@pytest.mark.parametrize("examples", SIZES)
def test_damaged_token_maps_are_refused(token_map_bytes, tmp_path, examples):
    """Any cut, overwritten byte (header first) or trailing junk: refused with TokenMapError (the
    header is checked field by field and the body by its checksum), never loaded half-right."""
    from specwhisper.tokenmap import load_token_map

    tok, good = token_map_bytes
    path = tmp_path / "fuzzed.tmap"

    def damaged(case) -> str:
        cut, edits, tail = case
        data = bytearray(good[:cut])
        for position, value in edits:
            if data:
                data[position % min(len(data), 192 if position % 2 else len(data))] ^= value
        data += tail
        if bytes(data) == good:
            return "unchanged"
        path.write_bytes(bytes(data))
        with pytest.raises(TokenMapError) as info:
            load_token_map(path, tok)
        assert info.value.what and info.value.where
        return "refused"

    edits = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), max_size=3)
    outcomes = _run(examples, st.tuples(st.integers(0, len(good)), edits, st.binary(max_size=8)), damaged)
    assert outcomes.get("refused", 0) > examples // 2


FEW = [pytest.param(16, id="ci"), pytest.param(300, id="full", marks=pytest.mark.full)]  # each loads a model
MODEL_TEXT_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def _clear(exc: SpecWhisperError) -> str:
    assert exc.what and exc.where, exc.message()
    return "refused"


@pytest.mark.parametrize("examples", FEW)
def test_damaged_model_directories(tiny_model_dir, tmp_path, examples):
    """tiny.en's directory with a text file cut, overwritten (start first) or missing: the engine
    loads (a harmless change) or refuses with a clear error, never another exception."""
    import json as _json
    import shutil

    from specwhisper import WhisperEngine

    originals = {name: (tiny_model_dir / name).read_bytes() for name in MODEL_TEXT_FILES}
    counter = iter(range(1 << 30))

    def damaged(case) -> str:
        name, cut, edits, missing, config_value = case
        folder = tmp_path / f"m{next(counter)}"
        folder.mkdir()
        (folder / "model.bin").symlink_to(tiny_model_dir / "model.bin")
        for other, data in originals.items():
            (folder / other).write_bytes(data)
        data = bytearray(originals[name][:cut])
        for position, value in edits:
            if data:
                data[position % min(len(data), 64 if position % 2 else len(data))] = value
        (folder / name).write_bytes(bytes(data))
        if config_value is not None:  # a field of the config with a value of the wrong kind
            config = _json.loads(originals["config.json"])
            config[sorted(config)[config_value[0] % len(config)]] = config_value[1]
            (folder / "config.json").write_text(_json.dumps(config))
        if missing:
            (folder / missing).unlink()
        try:
            engine = WhisperEngine(str(folder), threads=1, encoder="ct2", batch_decoder="ct2")
        except SpecWhisperError as exc:
            return _clear(exc)
        engine.close()
        shutil.rmtree(folder)
        return "loaded"

    json_values = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))
    strategy = st.tuples(st.sampled_from(MODEL_TEXT_FILES), st.one_of(st.integers(0, 4096), st.just(1 << 30)),
                         st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3),
                         st.sampled_from([None, None, None, "config.json", "tokenizer.json", "vocabulary.txt"]),
                         st.one_of(st.none(), st.tuples(st.integers(0, 64), json_values)))
    outcomes = _run(examples, strategy, damaged)
    assert outcomes.get("refused", 0) > 0


@pytest.mark.parametrize("examples", CORPUS_SIZES)
def test_transcript_corpora(token_map_bytes, examples):
    """Any lines, binary junk, huge or empty ones, build a token map or a clear error."""
    from specwhisper.tokenmap import build_token_map

    tok, _ = token_map_bytes

    def build(lines) -> str:
        try:
            tmap = build_token_map(lines, tok)
        except SpecWhisperError as exc:
            return _clear(exc)
        assert tmap is not None
        return "built"

    line = st.one_of(st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
                     st.just("x" * 50_000), st.just(""), st.just("\x00\ufeff\u202e"))
    outcomes = _run(examples, st.lists(line, max_size=8), build)
    assert outcomes.get("built", 0) > 0


CLI_FLAGS = [["--output-format", "json"], ["--output-format", "srt"], ["--timestamps", "on"], ["--timestamps", "no"],
             ["--numerics", "batch-invariant"], ["--numerics", "fast"], ["--no-speculation"], ["--draft-len", "4"],
             ["--draft-len", "-1"], ["--audio-ctx", "auto"], ["--audio-ctx", "7"], ["--temperature", "0,0.4"],
             ["--temperature", "hot"], ["--seed", "3"], ["--seed", "-2"], ["--beam-size", "2"], ["--beam-size", "0"],
             ["--word-timestamps"], ["--max-words-per-line", "3"], ["--max-line-width", "0"], ["--vad"],
             ["--vad-threshold", "1.5"], ["--batch-size", "2"], ["--hallucination-silence-threshold", "1"],
             ["--language", "en"], ["--language", "xx"], ["--task", "translate"], ["--threads", "0"],
             ["--learn"], ["--learn-save", "LEARNED"], ["--skip-existing"], ["--initial-prompt", "hello"],
             ["--condition-on-previous-text"], ["--encoder", "onnx"], ["--tokenmap", "MISSING.tmap"]]


@pytest.mark.parametrize("examples", FEW)
def test_cli_argument_combinations(tiny_model_dir, shared_data, tmp_path, capsys, examples):
    """Random combinations of transcribe's flags (good and bad values) on a short clip: exit 0
    (done), 1 (a file failed) or 2 (a clear error, or argparse's usage), never a traceback."""
    from specwhisper.cli import main

    clip = str(shared_data / "real" / "audio" / "fsdd_0_george_28.flac")

    def run(picks) -> str:
        args = [a.replace("LEARNED", str(tmp_path / "learned.tmap")) for flag in picks for a in CLI_FLAGS[flag]]
        try:
            code = main(["transcribe", clip, "--model", str(tiny_model_dir), "--output-dir", str(tmp_path / "o"),
                         *args])
        except SystemExit as exc:  # argparse: an unknown choice or a malformed number
            code = exc.code
        err = capsys.readouterr().err
        assert "Traceback" not in err and code in (0, 1, 2), (args, code, err[-800:])
        if code == 2 and "usage:" not in err:
            assert "error:" in err and ("where:" in err or "what to do:" in err), (args, err[-800:])
        return {0: "done", 1: "failed", 2: "refused"}[code]

    outcomes = _run(examples, st.lists(st.integers(0, len(CLI_FLAGS) - 1), max_size=5, unique=True), run)
    assert outcomes.get("refused", 0) > 0 and outcomes.get("done", 0) > 0


def test_errors_are_the_projects_own_type():
    assert issubclass(AudioError, SpecWhisperError) and issubclass(TokenMapError, SpecWhisperError)
