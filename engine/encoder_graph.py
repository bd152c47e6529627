"""An ONNX graph of a Whisper encoder, generated from the CTranslate2 model's own weights.

Why: on CPU the encoder is 40-50 % of a transcription, and ONNX Runtime runs the same layers
about twice as fast as the fork's CTranslate2 on a 30 s window (fused attention, layer norms and
GELU; attention then runs at the cores' float32 peak, see benchmarks/RESULTS_e2e.md). The weights are the ones CTranslate2
loads (int8 rows with their scales in an int8 model, quantized here the same way from float
weights otherwise), so no torch and no second download are needed; ``encoders`` caches the graph
beside the model and checks it against CTranslate2's encoder before use.

Input ``features`` [1, n_mels, frames] (frames even, at most 3000: short windows of
``--audio-ctx`` work as in CTranslate2, with the position table cut to the output length);
output ``encoder_output`` [1, frames / 2, d_model], which the fork's ``prefill`` accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .errors import ModelError
from .onnx_build import GraphBuilder, float_weight, int8_linear, read_weights, serialize

ENCODER_GRAPH_VERSION = 2  # part of the cached file's name: a changed graph is built again
PRECISIONS = ("int8", "int8-tensor", "int8-weights", "float32")


def _linear(b: GraphBuilder, x: str, prefix: str, with_bias: bool = True) -> str:
    """x [T, K] -> x @ W^T (+ bias unless ``with_bias`` is False: the attention adds it).

    ``int8`` and ``float32``: the builder's linear (CTranslate2's int8 weight rows and scales with
    activations quantized per row as CTranslate2 does, so the output stays as close to its encoder
    as its own int8 is: mean |difference| 0.02 on base, where its int8 and float32 differ by 0.06;
    or a float MatMul); the weight scales applied inside the integer product (``qlinear``'s
    ``scale_in_product``). ``int8-tensor``: ONNX Runtime's ``DynamicQuantizeMatMul`` (one
    activation scale per call: 10 % faster, 0.14 off; measured, not used by the engine).
    ``int8-weights``: CTranslate2's int8 weight rows cast and scaled in the graph, activations left
    in float: the pattern OpenVINO keeps as compressed weights and multiplies in its own precision
    (bfloat16 where the CPU has it; ``OpenVinoEncoder``)."""
    if b.precision in ("int8", "float32"):
        return b.linear(x, prefix, bias=with_bias, scale_in_product=True)
    weight, scale, bias = int8_linear(b.w, prefix)
    bias = bias if with_bias else None
    if b.precision == "int8-weights":
        rows = b.op("Mul", [b.op("Cast", [b.const(np.ascontiguousarray(weight.astype(np.int8)), "wq")], to=b.tp.FLOAT),
                            b.const((1.0 / scale.astype(np.float64)).astype(np.float32)[:, None], "ws")])
        y = b.op("MatMul", [x, b.op("Transpose", [rows], perm=[1, 0])])
        return b.op("Add", [y, b.const(bias.astype(np.float32), "b")]) if bias is not None else y
    inputs = [x, b.const(np.ascontiguousarray(weight.T.astype(np.int8)), "w"),
              b.const((1.0 / scale.astype(np.float64)).astype(np.float32), "ws"),
              b.const(np.zeros(weight.shape[0], np.int8), "wz")]
    if bias is not None:
        inputs.append(b.const(bias.astype(np.float32), "b"))
    return b.op("DynamicQuantizeMatMul", inputs, domain="com.microsoft")


def _attention(b: GraphBuilder, h: str, prefix: str, heads: int, d_model: int) -> str:
    """Self-attention of the rows ``h`` [T, d]: the fused QKV linear, then ONNX Runtime's
    ``MultiHeadAttention``, which also adds the QKV bias as it splits the heads (one pass over
    [T, 3d] fewer: about 2 % of base's 30 s window)."""
    bias = b.w.get(f"{prefix}/linear_0/bias")
    qkv = _linear(b, h, f"{prefix}/linear_0", with_bias=False)
    q, k, v = b.op("Split", [qkv, b.const(np.array([d_model] * 3, np.int64))], n_out=3, axis=-1)
    batch = b.const(np.array([0], np.int64))
    inputs = [b.op("Unsqueeze", [t, batch]) for t in (q, k, v)]
    if bias is not None:
        inputs.append(b.const(bias.astype(np.float32), "qkvb"))
    att = b.op("MultiHeadAttention", inputs, domain="com.microsoft", num_heads=heads)
    return _linear(b, b.op("Squeeze", [att, batch]), f"{prefix}/linear_1")


def _conv(b: GraphBuilder, x: str, prefix: str, stride: int) -> str:
    """A 1-D convolution (kernel 3, padding 1) in float32 followed by GELU, as Whisper's stem."""
    y = b.op("Conv", [x, b.const(float_weight(b.w, prefix).astype(np.float32), "cw"),
                      b.const(b.w[f"{prefix}/bias"].astype(np.float32), "cb")],
             kernel_shape=[3], pads=[1, 1], strides=[stride])
    return b.op("Gelu", [y], domain="com.microsoft")


def build_encoder_graph(model_dir: Path, precision: str = "int8") -> bytes:
    """The serialized encoder graph of the model in ``model_dir`` (``precision``: see ``_linear``)."""
    if precision not in PRECISIONS:
        raise ModelError(f"no ONNX encoder in {precision}", where="compute type",
                         hint="use an int8 or float32 compute type, or --encoder ct2")
    w = read_weights(model_dir, "encoder/")
    if "encoder/conv1/weight" not in w or int(w.get("encoder/pre_norm", 1)) != 1:
        raise ModelError("not a Whisper encoder (no conv stem, or not pre-norm)", where=str(model_dir),
                         hint="use a Whisper model converted by CTranslate2, or --encoder ct2")
    b = GraphBuilder(w, precision)
    tp, helper = b.tp, b.helper
    layers = 1 + max(int(m.group(1)) for k in w if (m := re.match(r"encoder/layer_(\d+)/", k)))
    heads = int(w["encoder/num_heads"])
    n_mels = int(w["encoder/conv1/weight"].shape[1])
    d_model = int(w["encoder/conv1/weight"].shape[0])

    x = _conv(b, _conv(b, "features", "encoder/conv1", 1), "encoder/conv2", 2)  # [1, d, T]
    x = b.op("Transpose", [b.op("Squeeze", [x, b.const(np.array([0], np.int64))])], perm=[1, 0])  # [T, d]
    length = b.op("Slice", [b.op("Shape", [x]), b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))])
    positions = b.op("Slice", [b.const(w["encoder/position_encodings/encodings"].astype(np.float32), "pos"),
                               b.const(np.array([0], np.int64)), length, b.const(np.array([0], np.int64))])
    x = b.op("Add", [x, positions])
    for i in range(layers):
        p = f"encoder/layer_{i}"
        h = b.layer_norm(x, w[f"{p}/self_attention/layer_norm/gamma"], w[f"{p}/self_attention/layer_norm/beta"])
        x = b.op("Add", [x, _attention(b, h, f"{p}/self_attention", heads, d_model)])
        h = b.layer_norm(x, w[f"{p}/ffn/layer_norm/gamma"], w[f"{p}/ffn/layer_norm/beta"])
        h = b.op("Gelu", [_linear(b, h, f"{p}/ffn/linear_0")], domain="com.microsoft")
        x = b.op("Add", [x, _linear(b, h, f"{p}/ffn/linear_1")])
    x = b.layer_norm(x, w["encoder/layer_norm/gamma"], w["encoder/layer_norm/beta"])
    b.nodes.append(helper.make_node("Unsqueeze", [x, b.const(np.array([0], np.int64))], ["encoder_output"]))
    graph = helper.make_graph(b.nodes, "whisper_encoder",
                              [helper.make_tensor_value_info("features", tp.FLOAT, [1, n_mels, "F"])],
                              [helper.make_tensor_value_info("encoder_output", tp.FLOAT, [1, "T", d_model])], b.inits)
    return serialize(b, graph)
