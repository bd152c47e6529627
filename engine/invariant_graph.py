"""ONNX graphs of a Whisper decoder whose rows are computed alike whatever the call's size.

Built from a CTranslate2 ``model.bin`` (int8 weights with per-row scales, as the model store
keeps them), for ONNX Runtime. Why: on CPUs without AVX-512 the fork's own kernels give a
token's logits that depend on the row it sits in and on the call's size (int8 jumps of half a
logit or more, through rounding flips in the activations' quantization), so no call size makes
speculation exact there. Each operation here computes a row from that row alone, in an order
that does not depend on how many rows the call has:

* int8 linears quantize activations per row (scale = the row's max |x| / 127; a max is exact in
  any order) and multiply in integers (exact sums), then rescale per element;
* self-attention writes the call's keys and values into a cache of fixed length at their
  absolute positions and attends over that whole length with a mask, so a position's scores sit
  at the same places and are reduced over the same length in a 1-row step and in a 17-row call;
* layer norms, softmaxes and activations work per row.

The runtime self-test (``backend``) checks the result bitwise on each machine before it is used.
Two graphs: ``cross`` (encoder output -> every layer's cross-attention keys and values, once per
window) and ``step`` (tokens at positions -> logits, plus the new rows' keys and values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ModelError

OPSET = 17
GRAPH_VERSION = 1  # part of the self-test's cache key: a changed graph is a changed numerics


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    heads: int
    d_model: int
    vocab: int
    max_positions: int


def _onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ModelError("the invariant decoder needs onnx and onnxruntime", where="python environment",
                         hint="pip install onnxruntime onnx (dependencies of specwhisper on Linux x86_64)") from None
    return onnx, TensorProto, helper, numpy_helper


class _Builder:
    """Collects nodes and initializers; names are made unique with a counter."""

    def __init__(self, weights: dict[str, np.ndarray], precision: str) -> None:
        self.onnx, self.tp, self.helper, self.nph = _onnx()
        self.w = weights
        self.precision = precision
        self.nodes: list = []
        self.inits: list = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, array: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(self.nph.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1, domain: str = "",
           **attrs) -> str | list[str]:
        outs = [self.name(hint or op_type) for _ in range(n_out)]
        self.nodes.append(self.helper.make_node(op_type, inputs, outs, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    # --- building blocks -------------------------------------------------------------------
    def linear(self, x: str, prefix: str, bias: bool = True, out_scale: np.ndarray | None = None) -> str:
        """The linear layer ``prefix`` of the model: int8 (``qlinear``) or float32 (MLAS's float
        GEMM, whose rows were bitwise alike for 1..17 rows). ``out_scale``: a factor per output
        column folded into the weights (the attention's 1/sqrt(dh) on queries: as a separate Mul,
        ORT fused it into FusedMatMul nodes; folded, a 1-row call's attention products took about
        1 ms less in a profile)."""
        b = self.w.get(f"{prefix}/bias") if bias else None
        b = None if b is None else b.astype(np.float32) * (1.0 if out_scale is None else out_scale)
        if self.precision == "int8":
            weight, scale, _ = _linear(self.w, prefix)
            if out_scale is not None:
                scale = scale / out_scale
            return self.qlinear(x, weight, scale, b)
        weight = _float_weight(self.w, prefix)
        if out_scale is not None:
            weight = weight * out_scale[:, None]
        y = self.op("MatMul", [x, self.const(np.ascontiguousarray(weight.T.astype(np.float32)), "w")])
        return self.op("Add", [y, self.const(b, "b")]) if b is not None else y

    def qlinear(self, x: str, weight: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> str:
        """x [R, K] float -> x @ (weight / scale)^T + bias, activations quantized per row to int8.

        CTranslate2 stores int8 weight rows q with float = q / scale. The activations are
        quantized as uint8 around 128 with their row's scale (max |x| / 127; a max is exact in any
        order), the products summed in int32 (exact), then rescaled element by element."""
        amax = self.op("ReduceMax", [self.op("Abs", [x])], axes=[-1], keepdims=0)
        row_scale = self.op("Div", [self.op("Max", [amax, self.const(np.array(1e-12, np.float32))]),
                                    self.const(np.array(127.0, np.float32))])
        zero = self.op("Expand", [self.const(np.array([128], np.uint8), "zp"), self.op("Shape", [row_scale])])
        q = self.op("QuantizeLinear", [x, row_scale, zero], axis=0)
        w = self.const(np.ascontiguousarray(weight.T.astype(np.int8)), "w")
        acc = self.op("MatMulInteger", [q, w, self.const(np.array(128, np.uint8), "zp")])
        y = self.op("Mul", [self.op("Cast", [acc], to=self.tp.FLOAT),
                            self.op("Unsqueeze", [row_scale, self.const(np.array([1], np.int64))])])
        y = self.op("Mul", [y, self.const((1.0 / scale.astype(np.float64)).astype(np.float32), "ws")])
        if bias is not None:
            y = self.op("Add", [y, self.const(bias.astype(np.float32), "b")])
        return y

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray) -> str:
        return self.op("LayerNormalization", [x, self.const(gamma.astype(np.float32), "g"),
                                               self.const(beta.astype(np.float32), "be")], axis=-1, epsilon=1e-5)

    def attend(self, q: str, keys: str, values_t: str, mask: str | None, n_heads: int, d_head: int) -> str:
        """q [R, d] (scaled by dh^-0.5), keys [H, T, dh], transposed values [H, dh, T] -> [R, d].

        Every row is its own batch entry of matrix-vector products (keys [H, T, dh] times the
        row's [H, dh, 1]): a batched MatMul with the rows as one matrix gave rows that differ with
        R (1e-5), and one row as the left matrix made MLAS pack the keys again for every row."""
        q = self.op("Reshape", [q, self.const(np.array([-1, n_heads, d_head, 1], np.int64))])  # scaled already
        axis3 = self.const(np.array([3], np.int64))
        scores = self.op("Squeeze", [self.op("MatMul", [keys, q]), axis3])  # [R, H, T]
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Unsqueeze", [self.op("Softmax", [scores], axis=-1), axis3])  # [R, H, T, 1]
        out = self.op("MatMul", [values_t, probs])  # [R, H, dh, 1]
        return self.op("Reshape", [out, self.const(np.array([-1, n_heads * d_head], np.int64))])


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    from specwhisper.converters.ct2_bin import ModelBinReader

    with ModelBinReader(model_dir / "model.bin") as reader:
        arrays = {info.name: reader.array(info) for info in reader.index.variables if info.name.startswith("decoder/")}
        aliases = dict(reader.index.aliases)
    for alias, target in aliases.items():
        if target in arrays:
            arrays[alias] = arrays[target]
    return arrays


def _linear(w: dict, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """int8 weight rows and their scales (float = q / scale), quantized here as CTranslate2 does
    (per output row, max |w| -> 127) where the model stores floats; and the bias."""
    weight = w[f"{prefix}/weight"]
    if weight.dtype == np.int8:
        return weight, w[f"{prefix}/weight_scale"], w.get(f"{prefix}/bias")
    weight = weight.astype(np.float32)
    scale = 127.0 / np.maximum(np.abs(weight).max(axis=1), 1e-12)
    q = np.clip(np.rint(weight * scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32), w.get(f"{prefix}/bias")


def _shape(w: dict) -> DecoderShape:
    layers = 1 + max(int(m.group(1)) for k in w if (m := re.match(r"decoder/layer_(\d+)/", k)))
    vocab, d = w["decoder/embeddings/weight"].shape
    return DecoderShape(layers, int(w["decoder/num_heads"]), int(d), int(vocab),
                        int(w["decoder/position_encodings/encodings"].shape[0]))


def _float_weight(w: dict, prefix: str) -> np.ndarray:
    weight = w[f"{prefix}/weight"]
    if weight.dtype == np.int8:
        return (weight.astype(np.float32) / w[f"{prefix}/weight_scale"][:, None]).astype(np.float32)
    return weight.astype(np.float32)


PRECISIONS = ("int8", "float32")


def build_graphs(model_dir: Path, precision: str = "int8") -> tuple[bytes, bytes, DecoderShape]:
    """The serialized ``cross`` and ``step`` graphs of the decoder in ``model_dir``, and its shape.

    ``precision``: int8 (weights as stored or quantized per row; activations per row) or float32."""
    if precision not in PRECISIONS:
        raise ModelError(f"no invariant decoder in {precision}", where="compute type",
                         hint="use an int8 or float32 compute type")
    w = _weights(model_dir)
    if int(w.get("decoder/pre_norm", 1)) != 1 or int(w.get("decoder/activation", 3)) != 3:
        raise ModelError("unsupported decoder (not pre-norm with GELU)", where=str(model_dir),
                         hint="use a Whisper model converted by CTranslate2")
    shape = _shape(w)
    dh = shape.d_model // shape.heads
    return _cross_graph(w, shape, dh, precision), _step_graph(w, shape, dh, precision), shape


def _cross_graph(w: dict, s: DecoderShape, dh: int, precision: str) -> bytes:
    """encoder_output [T, d] -> per layer ``cross_k_i`` [H, T, dh] and ``cross_v_i`` [H, dh, T]."""
    b = _Builder(w, precision)
    tp, helper = b.tp, b.helper
    outputs = []
    for i in range(s.layers):
        kv = b.linear("encoder_output", f"decoder/layer_{i}/attention/linear_1")
        k, v = b.op("Split", [kv, b.const(np.array([s.d_model, s.d_model], np.int64))], n_out=2, axis=-1)
        for name, x, perm, dims in ((f"cross_k_{i}", k, [1, 0, 2], [s.heads, "T", dh]),
                                    (f"cross_v_{i}", v, [1, 2, 0], [s.heads, dh, "T"])):
            r = b.op("Reshape", [x, b.const(np.array([-1, s.heads, dh], np.int64))])
            b.nodes.append(helper.make_node("Transpose", [r], [name], perm=perm))
            outputs.append(helper.make_tensor_value_info(name, tp.FLOAT, dims))
    graph = helper.make_graph(b.nodes, "whisper_cross",
                              [helper.make_tensor_value_info("encoder_output", tp.FLOAT, ["T", s.d_model])],
                              outputs, b.inits)
    return _serialize(b, graph)


def _step_graph(w: dict, s: DecoderShape, dh: int, precision: str) -> bytes:
    """Inputs: tokens and positions [R], mask [R, P] (0 where a row may look, -inf elsewhere), per layer
    the cache's keys ``past_k_i`` [H, P, dh] and transposed values ``past_v_i`` [H, dh, P] (positions
    not yet decoded hold anything: they are masked), and the cross-attention ``cross_k_i`` [H, T, dh]
    and ``cross_v_i`` [H, dh, T]. Outputs: ``logits`` [R, vocab] and the call's keys ``new_k_i``
    [H, R, dh] and values ``new_v_i`` [H, dh, R], which the caller writes into its cache."""
    b = _Builder(w, precision)
    tp, helper = b.tp, b.helper
    if precision == "int8":
        emb, emb_scale, _ = _linear(w, "decoder/embeddings")
        rows = b.op("Cast", [b.op("Gather", [b.const(emb, "emb"), "tokens"], axis=0)], to=tp.FLOAT)
        scale = b.op("Gather", [b.const((1.0 / emb_scale.astype(np.float64)).astype(np.float32), "es"), "tokens"],
                     axis=0)
        x = b.op("Mul", [rows, b.op("Unsqueeze", [scale, b.const(np.array([1], np.int64))])])
    else:
        x = b.op("Gather", [b.const(_float_weight(w, "decoder/embeddings"), "emb"), "tokens"], axis=0)
    pos_table = b.const(w["decoder/position_encodings/encodings"].astype(np.float32), "pos")
    x = b.op("Add", [x, b.op("Gather", [pos_table, "positions"], axis=0)])
    mask = b.op("Unsqueeze", ["mask", b.const(np.array([1], np.int64))])  # [R, 1, P]
    n_rows = b.op("Shape", ["tokens"])
    k_index = b.op("Expand", [b.op("Reshape", ["positions", b.const(np.array([1, -1, 1], np.int64))]),
                              b.op("Concat", [b.const(np.array([s.heads], np.int64)), n_rows,
                                              b.const(np.array([dh], np.int64))], axis=0)])
    v_index = b.op("Expand", [b.op("Reshape", ["positions", b.const(np.array([1, 1, -1], np.int64))]),
                              b.op("Concat", [b.const(np.array([s.heads, dh], np.int64)), n_rows], axis=0)])
    inputs = [helper.make_tensor_value_info("tokens", tp.INT64, ["R"]),
              helper.make_tensor_value_info("positions", tp.INT64, ["R"]),
              helper.make_tensor_value_info("mask", tp.FLOAT, ["R", "P"])]
    outputs = []
    for i in range(s.layers):
        p = f"decoder/layer_{i}"
        # self-attention over the fixed-length cache with this call's rows written at their positions
        h = b.layer_norm(x, w[f"{p}/self_attention/layer_norm/gamma"], w[f"{p}/self_attention/layer_norm/beta"])
        qkv = b.linear(h, f"{p}/self_attention/linear_0", out_scale=np.concatenate(
            [np.full(s.d_model, dh ** -0.5), np.ones(2 * s.d_model)]).astype(np.float32))
        q, k, v = b.op("Split", [qkv, b.const(np.array([s.d_model] * 3, np.int64))], n_out=3, axis=-1)
        b.nodes.append(helper.make_node("Transpose", [b.op("Reshape", [k, b.const(np.array([-1, s.heads, dh], np.int64))])],
                                        [f"new_k_{i}"], perm=[1, 0, 2]))
        b.nodes.append(helper.make_node("Transpose", [b.op("Reshape", [v, b.const(np.array([-1, s.heads, dh], np.int64))])],
                                        [f"new_v_{i}"], perm=[1, 2, 0]))
        k_all = b.op("ScatterElements", [f"past_k_{i}", k_index, f"new_k_{i}"], axis=1)
        v_all = b.op("ScatterElements", [f"past_v_{i}", v_index, f"new_v_{i}"], axis=2)
        att = b.attend(q, k_all, v_all, mask, s.heads, dh)
        x = b.op("Add", [x, b.linear(att, f"{p}/self_attention/linear_1")])
        # cross-attention over the window's encoder output (keys and values computed once a window)
        h = b.layer_norm(x, w[f"{p}/attention/layer_norm/gamma"], w[f"{p}/attention/layer_norm/beta"])
        q = b.linear(h, f"{p}/attention/linear_0", out_scale=np.full(s.d_model, dh ** -0.5, np.float32))
        att = b.attend(q, f"cross_k_{i}", f"cross_v_{i}", None, s.heads, dh)
        x = b.op("Add", [x, b.linear(att, f"{p}/attention/linear_2")])
        # feed-forward
        h = b.layer_norm(x, w[f"{p}/ffn/layer_norm/gamma"], w[f"{p}/ffn/layer_norm/beta"])
        h = b.op("Gelu", [b.linear(h, f"{p}/ffn/linear_0")], domain="com.microsoft")
        x = b.op("Add", [x, b.linear(h, f"{p}/ffn/linear_1")])
        inputs += [helper.make_tensor_value_info(f"past_k_{i}", tp.FLOAT, [s.heads, "P", dh]),
                   helper.make_tensor_value_info(f"past_v_{i}", tp.FLOAT, [s.heads, dh, "P"]),
                   helper.make_tensor_value_info(f"cross_k_{i}", tp.FLOAT, [s.heads, "T", dh]),
                   helper.make_tensor_value_info(f"cross_v_{i}", tp.FLOAT, [s.heads, dh, "T"])]
        outputs += [helper.make_tensor_value_info(f"new_k_{i}", tp.FLOAT, [s.heads, "R", dh]),
                    helper.make_tensor_value_info(f"new_v_{i}", tp.FLOAT, [s.heads, dh, "R"])]
    h = b.layer_norm(x, w["decoder/layer_norm/gamma"], w["decoder/layer_norm/beta"])
    b.nodes.append(helper.make_node("Identity", [b.linear(h, "decoder/embeddings", bias=False)], ["logits"]))
    outputs.insert(0, helper.make_tensor_value_info("logits", tp.FLOAT, ["R", s.vocab]))
    return _serialize(b, helper.make_graph(b.nodes, "whisper_step", inputs, outputs, b.inits))


def _serialize(b: _Builder, graph) -> bytes:
    model = b.helper.make_model(graph, opset_imports=[b.helper.make_opsetid("", OPSET),
                                                     b.helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()
