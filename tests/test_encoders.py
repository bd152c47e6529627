"""Encoder backends: the graphs built from the model's weights (on ONNX Runtime, and on OpenVINO
where the optional package is installed) against CTranslate2's encoder, the choice between them,
and exactness of speculation whichever encoder runs.

The graph is the model's own weights in fused operators: in float32 it must be CTranslate2's
float32 encoder up to summation order (1e-3); on ONNX Runtime in int8 (activations quantized per
row, as CTranslate2 does) closer to CTranslate2's int8 than CTranslate2's own float32 is; on
OpenVINO in int8 (int8 weights, activations in bfloat16 or float32) closer to CTranslate2's float32
than CTranslate2's own int8 is.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from adversarial import check_exact_under_adversaries
from clips import representative
from decoding import encode_clip

pytest.importorskip("onnxruntime", reason="the ONNX encoder needs onnxruntime (a core dependency on Linux x86_64)")

SAMPLE = Path(__file__).resolve().parents[1] / "engine" / "samples" / "morning.flac"


def _features(n_mels: int = 80, frames: int = 3000) -> np.ndarray:
    from specwhisper.features import bundled_sample_window

    return bundled_sample_window(n_mels, n_frames=frames)


def _ct2(model_dir: Path, compute_type: str):
    import ctranslate2

    return ctranslate2.models.Whisper(str(model_dir), compute_type=compute_type, intra_threads=2)


def _host(view) -> np.ndarray:
    from specwhisper.backend import to_host

    return np.asarray(to_host(view), dtype=np.float32)


def _graph_encoder(backend: str, model_dir: Path, precision: str, threads: int = 2):
    from specwhisper.encoders import OnnxEncoder, OpenVinoEncoder

    if backend == "openvino":
        pytest.importorskip("openvino", reason="the OpenVINO encoder needs the openvino extra")
        return OpenVinoEncoder(model_dir, precision, threads)
    return OnnxEncoder(model_dir, precision, threads)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
@pytest.mark.parametrize("frames", [3000, 400])
def test_float32_graph_is_ct2s_float32_encoder(base_model_dir, frames, backend):
    """Same weights, same operations: only the summation order differs (also on a short window
    of ``--audio-ctx``, where the position table is cut to the output length)."""
    from specwhisper.encoders import CT2Encoder

    features = _features(frames=frames)
    reference = _host(CT2Encoder(_ct2(base_model_dir, "float32")).encode(features))
    output = _host(_graph_encoder(backend, base_model_dir, "float32").encode(features))
    assert output.shape == reference.shape == (1, frames // 2, 512)
    assert np.abs(output - reference).max() < 2e-3


def test_openvino_int8_is_nearer_float32_than_ct2s_int8_is(base_model_dir):
    """int8 weights with activations in bfloat16 (or float32 where the CPU has no bfloat16): its
    output lies nearer CTranslate2's float32 encoder than CTranslate2's own int8 does (measured on
    base: 0.049 against 0.082 relative), and it is the same bits call after call, whatever was
    encoded between (the lossless contract needs one output per window)."""
    from specwhisper.encoders import CT2Encoder

    features = _features()
    ct2_int8 = _host(CT2Encoder(_ct2(base_model_dir, "int8")).encode(features))
    ct2_float = _host(CT2Encoder(_ct2(base_model_dir, "float32")).encode(features))
    encoder = _graph_encoder("openvino", base_model_dir, "int8")
    first = _host(encoder.encode(features))
    encoder.encode(_features(frames=600))
    again = _host(encoder.encode(features))
    assert first.shape == ct2_int8.shape and np.array_equal(first, again)
    assert np.abs(first - ct2_float).mean() < np.abs(ct2_int8 - ct2_float).mean()
    assert _host(_graph_encoder("openvino", base_model_dir, "int8", threads=1).encode(features)).shape == first.shape


def test_int8_graph_rounds_like_ct2s_int8(base_model_dir):
    """Per-row activation quantization with CTranslate2's weight rows: nearer to its int8 encoder
    than its float32 encoder is, and far nearer than one activation scale per call."""
    from specwhisper.encoders import CT2Encoder, OnnxEncoder

    features = _features()
    ct2_int8 = _host(CT2Encoder(_ct2(base_model_dir, "int8")).encode(features))
    ct2_float = _host(CT2Encoder(_ct2(base_model_dir, "float32")).encode(features))
    onnx_int8 = _host(OnnxEncoder(base_model_dir, "int8", threads=2).encode(features))
    onnx_tensor = _host(OnnxEncoder(base_model_dir, "int8-tensor", threads=2).encode(features))
    own_spread = np.abs(ct2_float - ct2_int8).mean()
    assert np.abs(onnx_int8 - ct2_int8).mean() < 0.6 * own_spread
    assert np.abs(onnx_int8 - ct2_int8).mean() < 0.5 * np.abs(onnx_tensor - ct2_int8).mean()


def test_int8_conv_kernels_dequantize_per_output_channel():
    """CTranslate2's own converter may store the conv stem in int8 ([out, in, width], a scale per
    output channel): each channel is divided by its own scale."""
    from specwhisper.onnx_build import float_weight

    q = np.random.default_rng(0).integers(-127, 128, size=(4, 3, 3)).astype(np.int8)
    scale = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    out = float_weight({"conv/weight": q, "conv/weight_scale": scale}, "conv")
    assert out.shape == (4, 3, 3) and np.allclose(out, q.astype(np.float32) / scale[:, None, None])


def _choose(model_dir: Path, choice: str, compute_type: str = "int8", device: str = "cpu", use_cache: bool = False):
    from specwhisper.encoders import choose_encoder

    model = _ct2(model_dir, "int8" if compute_type.startswith("int8") else "float32")
    return choose_encoder(choice, model=model, model_dir=model_dir, device=device, compute_type=compute_type,
                          threads=2, n_mels=80, cache_key=f"test|{model_dir}", use_cache=use_cache)


def test_auto_keeps_the_fastest_encoder_and_records_why(tiny_model_dir):
    from specwhisper.encoders import _installed

    encoder, record = _choose(tiny_model_dir, "auto")
    graphs = ["onnx", *(["openvino"] if _installed("openvino") else [])]
    assert set(record.ms) == {"ct2", *graphs} and min(record.ms.values()) > 0
    assert set(record.relative_diff) == set(graphs) and max(record.relative_diff.values()) < 0.15
    assert encoder.name == record.name == min(record.ms, key=record.ms.get)
    assert _choose(tiny_model_dir, "ct2")[0].name == "ct2"
    assert _choose(tiny_model_dir, "onnx")[0].name == "onnx"


def test_without_openvino_auto_passes_it_over_and_asking_for_it_says_how(tiny_model_dir, monkeypatch):
    """The optional package missing: ``auto`` chooses among the others without a word (nothing
    was asked for); ``--encoder openvino`` says what to install."""
    import sys

    from specwhisper import encoders
    from specwhisper.errors import ModelError

    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    monkeypatch.setattr(encoders, "_installed", lambda name: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder, record = _choose(tiny_model_dir, "auto")
    assert "openvino" not in record.ms and encoder.name in ("ct2", "onnx")
    with pytest.raises(ModelError, match="needs openvino") as caught:
        _choose(tiny_model_dir, "openvino")
    assert "specwhisper[openvino]" in caught.value.hint


def test_no_graph_where_none_applies(tiny_model_dir):
    from specwhisper.errors import ModelError, OptionError

    encoder, record = _choose(tiny_model_dir, "auto", compute_type="float16")
    assert encoder.name == "ct2" and "no ONNX encoder" in record.reason
    for explicit in ("onnx", "openvino"):
        with pytest.raises(ModelError, match="no ONNX encoder"):
            _choose(tiny_model_dir, explicit, compute_type="float16")
    with pytest.raises(OptionError, match="unknown encoder"):
        _choose(tiny_model_dir, "fastest")


def test_a_damaged_cached_graph_falls_back_then_is_rebuilt(tiny_model_dir, tmp_path, monkeypatch):
    """A truncated graph file in the cache: ``auto`` says why and runs another encoder, the file
    is removed, and the next load builds it again."""
    from specwhisper.encoders import graph_path

    monkeypatch.setenv("SPECWHISPER_NO_SELFTEST_CACHE", "1")
    path = graph_path(tiny_model_dir, "int8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x08\x07not a graph")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder, record = _choose(tiny_model_dir, "auto")
    assert encoder.name != "onnx" and "onnx" not in record.ms and "ONNX encoder unavailable" in record.reason
    assert any("ONNX encoder unavailable" in str(w.message) for w in caught)
    assert not path.exists()
    assert _choose(tiny_model_dir, "onnx")[0].name == "onnx" and path.stat().st_size > 1_000_000


# OpenVINO's run from memory with -m full (its compile cost CI 9 s; the code path is the same)
@pytest.mark.parametrize("backend", ["onnx", pytest.param("openvino", marks=pytest.mark.full)])
def test_a_graph_that_cannot_be_written_runs_from_memory(backend, tiny_model_dir, tmp_path, monkeypatch):
    """A read-only store and cache (or a full disk): the graph encoder is built and run from memory,
    as the decoder's graphs are, instead of being passed over: the same output as from its file,
    nothing written, and ``auto`` still weighs it."""
    import errno

    from specwhisper import io_utils
    from specwhisper.encoders import graph_path

    def refuse(*_args, **_kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))  # the model is outside this store: the cache keeps its graphs
    path = graph_path(tiny_model_dir, "int8-weights" if backend == "openvino" else "int8")
    assert not path.exists()
    with monkeypatch.context() as read_only:
        read_only.setattr(io_utils, "atomic_write_bytes", refuse)
        in_memory = _graph_encoder(backend, tiny_model_dir, "int8")
        assert in_memory.path is None and not path.exists()
        _, record = _choose(tiny_model_dir, "auto")
        assert backend in record.ms and not path.exists()
    from_file = _graph_encoder(backend, tiny_model_dir, "int8")
    assert from_file.path == path and path.is_file()
    features = _features()
    assert np.array_equal(_host(in_memory.encode(features)), _host(from_file.encode(features)))


@pytest.fixture(scope="module", params=["onnx", "openvino"])
def graph_engine(request, base_model_dir):
    from specwhisper import WhisperEngine

    if request.param == "onnx":  # the shared engine is this one
        return request.getfixturevalue("base_engine")
    pytest.importorskip("openvino", reason="the OpenVINO encoder needs the openvino extra")
    return WhisperEngine(base_model_dir, compute_type="int8", threads=2, prompt_lookup=False, encoder=request.param)


def test_results_record_the_encoder(graph_engine):
    name = graph_engine.lm.encoder_choice.name
    result = graph_engine.transcribe(str(SAMPLE))
    assert name in ("onnx", "openvino") and result.encoder == name and result.to_dict()["encoder"] == name
    assert "kitchen light" in result.text


# OpenVINO's only: ONNX Runtime's is the shared engines' encoder, under every adversary of test_lossless.py
@pytest.mark.parametrize("graph_engine", ["openvino"], indirect=True)
def test_speculation_is_exact_on_each_graph_encoder(graph_engine, shared_data):
    """Lossless holds per encoder: on the graph's encoder output, adversarial drafters change no
    token against speculation off, and right drafts are accepted."""
    for seed, clip in enumerate(representative(shared_data)[:6:2]):  # sentences
        encoder_output, _ = encode_clip(graph_engine, clip["path"])
        check_exact_under_adversaries(graph_engine, encoder_output, seed, clip["audio"])
