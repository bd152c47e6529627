"""Re-encode a CTranslate2 model's weights (float16 -> int8 and back) in numpy, without torch.

Why: a model pulled as float16 is re-quantized by CTranslate2 on every load with
``compute_type="int8"``. Storing the int8 result once halves the disk, skips that work at load time
and lowers the peak memory of loading, while the numbers stay the same.

The int8 scheme is CTranslate2's own (src/cpu/kernels.cc ``quantize_s8_row``, and
``LayerSpec._quantize`` in python/ctranslate2/specs/model_spec.py): for each output row of a weight,
``scale = 127 / max|row|`` in float32 (1 for an all-zero row), ``q = round_half_even(w * scale)``
stored as int8 with a float32 ``<name>_scale`` vector. CTranslate2 applies the same function to
float16 weights at load time (after an exact widening to float32), so an int8 file written here
loads to bit-identical weights. Which variables are weights follows the runtime: names ending in
``weight``. Convolution weights stay in float: CTranslate2 builds with oneDNN keep them in float at
load time, so quantizing them here would change results on those builds (they are tiny anyway).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specwhisper.errors import ModelError
from specwhisper.model_store import is_generated

from .ct2_bin import ModelBinReader, ModelBinWriter, VariableInfo, read_index
from .model_card import CARD_NAME, file_entries, write_model_card
from .staging import staged_dir

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "float16", "float32")
_FLOATS = ("float32", "float16", "bfloat16")
_ROW_BLOCK = 4096  # rows quantized per step: bounds the float32 temporaries


@dataclass(frozen=True)
class _Plan:
    """What to do with one source variable: 'raw', 'cast', 'quantize', 'requantize', 'dequantize' or 'drop'."""

    info: VariableInfo
    action: str
    dtype: str | None = None  # target dtype for cast / dequantize


def check_quantization(quantization: str) -> str:
    if quantization not in QUANTIZATIONS:
        raise ModelError(f"unknown quantization {quantization!r}", where="quantization",
                         hint=f"use one of: {', '.join(QUANTIZATIONS)}")
    return quantization


def quantize_int8(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CTranslate2's per-row absmax int8 quantization: (int8 weight of the same shape, float32 scale per row)."""
    rows = weight.reshape(weight.shape[0], -1)
    q = np.empty(rows.shape, dtype=np.int8)
    scale = np.empty(rows.shape[0], dtype=np.float32)
    for start in range(0, rows.shape[0], _ROW_BLOCK):
        block = rows[start:start + _ROW_BLOCK].astype(np.float32)
        amax = np.max(np.abs(block), axis=1)
        if not np.all(np.isfinite(amax)):
            raise ValueError("weight contains NaN or infinity")
        s = np.ones_like(amax)
        nonzero = amax != 0
        s[nonzero] = np.float32(127.0) / amax[nonzero]
        block *= s[:, None]
        np.rint(block, out=block)
        q[start:start + _ROW_BLOCK] = block.astype(np.int8)
        scale[start:start + len(s)] = s
    return q.reshape(weight.shape), scale


def dequantize(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float32 ``weight / scale`` per row (CTranslate2's Dequantize); a scalar scale divides everything."""
    w = weight.astype(np.float32)
    if scale.ndim == 0:
        return w / scale.astype(np.float32)
    return (w.reshape(w.shape[0], -1) / scale.astype(np.float32)[:, None]).reshape(w.shape)


def _float_target(quantization: str, source: str) -> str:
    """dtype for float variables that are not quantized weights (biases, norms, position encodings)."""
    if quantization in ("int8_float32", "float32"):
        return "float32"
    if quantization in ("int8_float16", "float16"):
        return "float16"
    return "float32" if source == "bfloat16" else source  # "int8" keeps them as they are, like CTranslate2


def _plan(variables: tuple[VariableInfo, ...], quantization: str, where: str) -> list[_Plan]:
    by_name = {v.name: v for v in variables}
    if any(n.endswith("_zero") for n in by_name):
        raise ModelError("model uses AWQ (zero-point) quantization, which cannot be re-encoded", where=where,
                         hint="convert the original float checkpoint instead")
    to_int8 = quantization.startswith("int8")
    plans: list[_Plan] = []
    replaced_scales: set[str] = set()
    for v in variables:
        is_weight = v.name.endswith("weight") and len(v.shape) >= 2
        is_conv = is_weight and len(v.shape) == 3
        if is_weight and v.dtype in _FLOATS:
            if to_int8 and not is_conv:
                plans.append(_Plan(v, "quantize"))
                replaced_scales.add(v.name + "_scale")
            else:
                target = _float_target(quantization, v.dtype) if to_int8 else quantization
                plans.append(_Plan(v, "cast" if target != v.dtype else "raw", target))
        elif is_weight and v.dtype in ("int8", "int16"):
            if v.name + "_scale" not in by_name:
                raise ModelError(f"quantized weight {v.name!r} has no scale", where=where,
                                 hint="re-download or re-convert the model")
            if to_int8 and v.dtype == "int8" and not is_conv:
                plans.append(_Plan(v, "raw"))
            elif to_int8 and not is_conv:
                plans.append(_Plan(v, "requantize"))
                replaced_scales.add(v.name + "_scale")
            else:
                target = _float_target(quantization, "float32") if to_int8 else quantization
                plans.append(_Plan(v, "dequantize", target))
                replaced_scales.add(v.name + "_scale")
        elif "_scale" in v.name or not v.shape or v.dtype not in _FLOATS:
            plans.append(_Plan(v, "raw"))  # scales, scalars, flags, integer tables: untouched
        else:
            target = _float_target(quantization, v.dtype) if to_int8 else quantization
            plans.append(_Plan(v, "cast" if target != v.dtype else "raw", target))
    return [_Plan(p.info, "drop") if p.info.name in replaced_scales else p for p in plans]


def _float_array(reader: ModelBinReader, info: VariableInfo) -> np.ndarray:
    """The payload as float16/float32 as stored; bfloat16 (the top half of a float32) is widened."""
    if info.dtype == "bfloat16":
        bits = np.frombuffer(reader.raw(info), dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(info.shape)
    return reader.array(info)


def requantize_model_bin(src: Path, dst: Path, quantization: str) -> dict[str, int]:
    """Write ``dst`` (a model.bin) re-encoded to ``quantization``; returns counts per action."""
    check_quantization(quantization)
    index = read_index(src)
    plans = _plan(index.variables, quantization, str(src))
    by_name = {v.name: v for v in index.variables}
    n_out = sum(p.action != "drop" for p in plans) + sum(p.action in ("quantize", "requantize") for p in plans)
    counts: dict[str, int] = {}
    with ModelBinReader(src) as reader, dst.open("wb") as fh:
        writer = ModelBinWriter(fh, index.spec_name, index.spec_revision, n_out)
        for p in plans:
            counts[p.action] = counts.get(p.action, 0) + 1
            v = p.info
            try:
                _emit(writer, reader, p, by_name)
            except ValueError as exc:
                raise ModelError(f"cannot re-encode variable {v.name!r}: {exc}", where=str(src),
                                 hint="the source weights look corrupt; re-download the model") from None
        writer.finish(index.aliases)
    return counts


def _emit(writer: ModelBinWriter, reader: ModelBinReader, p: _Plan, by_name: dict[str, VariableInfo]) -> None:
    v = p.info
    if p.action == "drop":
        return
    if p.action == "raw":
        writer.write_raw(v, reader.raw(v))
    elif p.action == "cast":
        writer.write(v.name, _float_array(reader, v).astype(p.dtype, copy=False))
    elif p.action == "quantize":
        q, scale = quantize_int8(_float_array(reader, v))  # widened to float32 block by block
        writer.write(v.name, q)
        writer.write(v.name + "_scale", scale)
    elif p.action == "requantize":
        q, scale = quantize_int8(dequantize(reader.array(v), reader.array(by_name[v.name + "_scale"])))
        writer.write(v.name, q)
        writer.write(v.name + "_scale", scale)
    elif p.action == "dequantize":
        w = dequantize(reader.array(v), reader.array(by_name[v.name + "_scale"]))
        writer.write(v.name, w.astype(p.dtype))
    else:  # pragma: no cover - _plan only makes the actions above
        raise AssertionError(p.action)


def _check_source(src_dir: Path) -> None:
    """Refuse a source that would not load, before anything is written: its copy would not load
    either, and the loader's advice (convert it) would send the user back here."""
    from specwhisper.model_store import check_model_dir
    from specwhisper.tokenizer import WhisperTokenizer

    try:
        check_model_dir(src_dir)
        WhisperTokenizer.from_model_dir(src_dir)
    except ModelError as exc:
        raise ModelError(f"cannot convert: {exc.what}", where=exc.where,
                         hint="the source must be a whole CTranslate2 Whisper model (model.bin, config.json, "
                              "tokenizer.json): restore the missing or damaged file from where the model "
                              "came from") from None


def quantize_ct2_model(src_dir: str | Path, dst_dir: str | Path, quantization: str = "int8", *,
                       overwrite: bool = False,
                       progress: Callable[[str], None] | None = None) -> Path:
    """Copy the CT2 model in ``src_dir`` to ``dst_dir`` with weights stored as ``quantization``.

    Every other file (config.json, tokenizer.json, vocabulary, maps) is copied unchanged, except the
    graphs generated from the source's weights (``model_store.is_generated``: built again for the
    copy's weights, up to 600 MB for base), and a ``model_card.json`` is written. ``dst_dir``
    appears whole or not at all.
    """
    src_dir = Path(src_dir).expanduser()
    check_quantization(quantization)
    if not (src_dir / "model.bin").is_file():
        raise ModelError("not a CTranslate2 model directory (no model.bin)", where=str(src_dir),
                         hint="point at a folder with model.bin, config.json and tokenizer.json")
    _check_source(src_dir)
    inputs = [p for p in src_dir.iterdir()
              if p.is_file() and p.name != CARD_NAME and not p.name.startswith(".") and not is_generated(p.name)]
    with staged_dir(dst_dir, overwrite, source=src_dir) as tmp:
        if progress:
            progress(f"re-encoding {src_dir / 'model.bin'} as {quantization}")
        counts = requantize_model_bin(src_dir / "model.bin", tmp / "model.bin", quantization)
        for p in inputs:
            if p.name != "model.bin":
                shutil.copy2(p, tmp / p.name)
        write_model_card(tmp, source={"kind": "ct2", "path": str(src_dir.absolute())},
                         inputs=file_entries(inputs, root=src_dir), quantization=quantization,
                         extra={"variables": counts})
    return Path(dst_dir).expanduser().absolute()
