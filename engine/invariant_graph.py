"""ONNX graphs of a Whisper decoder whose rows are computed alike whatever the call's size.

Built from a CTranslate2 ``model.bin`` (int8 weights with per-row scales, as the model store
keeps them), for ONNX Runtime. Why: on CPUs without AVX-512 the fork's own kernels give a
token's logits that depend on the row it sits in and on the call's size (int8 jumps of half a
logit or more, through rounding flips in the activations' quantization), so no call size makes
speculation exact there. Each operation here computes a row from that row alone, in an order
that does not depend on how many rows the call has:

* int8 linears quantize activations per row and multiply in integers (exact sums): in the step
  graph as ONNX Runtime ``MatMulNBits`` nodes over row pairs (``GraphBuilder.paired_qlinear``),
  in the once-a-window cross-attention keys and values as the MatMulInteger chain (``GraphBuilder.qlinear``);
* self-attention writes the call's keys and values into a cache at their absolute positions and
  attends over its whole length with a mask, so a position's scores sit at the same places in a
  1-row step and in a 17-row call; the cache's length does not depend on the call (the caller
  grows it in steps of 64 positions: a masked position adds exact zeros, checked per machine);
* layer norms, softmaxes and activations work per row.

The runtime self-test (``backend``) checks the result bitwise on each machine before it is used.
Two graphs: ``window`` (a window's first call: encoder output and prompt -> every layer's
cross-attention keys and values, the prompt's keys and values and logits) and ``step`` (tokens at
positions -> logits, plus the new rows' keys and values).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .errors import ModelError
from .onnx_build import GraphBuilder, float_weight, int8_linear, read_weights, serialize

GRAPH_VERSION = 10  # part of the self-test's cache key: a changed graph is a changed numerics (6: caches grow; 7: window graph; 8: caches written in place; 9: the pairing padding once a layer, rows quantized once; 10: cross-attention weight scales inside the product)


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    heads: int
    d_model: int
    vocab: int
    max_positions: int


def _shape(w: dict) -> DecoderShape:
    layers = 1 + max(int(m.group(1)) for k in w if (m := re.match(r"decoder/layer_(\d+)/", k)))
    vocab, d = w["decoder/embeddings/weight"].shape
    return DecoderShape(layers, int(w["decoder/num_heads"]), int(d), int(vocab),
                        int(w["decoder/position_encodings/encodings"].shape[0]))


PRECISIONS = ("int8", "float32")


GRAPHS = ("paired", "rowwise")  # the step graph's int8 linears: MatMulNBits over row pairs, or the MatMulInteger chain


def build_graphs(model_dir: Path, precision: str = "int8", graph: str = "paired") -> tuple[bytes, bytes, DecoderShape]:
    """The serialized ``window`` and ``step`` graphs of the decoder in ``model_dir``, and its shape.

    ``precision``: int8 (weights as stored or quantized per row; activations per row) or float32.
    ``graph``: how the step graph's int8 linears run (``GRAPHS``): ``paired`` is about 20 % faster
    a step; ``rowwise`` is the fallback where the self-test finds ``paired`` rows not invariant."""
    if precision not in PRECISIONS:
        raise ModelError(f"no invariant decoder in {precision}", where="compute type",
                         hint="use an int8 or float32 compute type")
    w = read_weights(model_dir, "decoder/")
    if int(w.get("decoder/pre_norm", 1)) != 1 or int(w.get("decoder/activation", 3)) != 3:
        raise ModelError("unsupported decoder (not pre-norm with GELU)", where=str(model_dir),
                         hint="use a Whisper model converted by CTranslate2")
    shape = _shape(w)
    dh = shape.d_model // shape.heads
    paired = graph == "paired"
    return _window_graph(w, shape, dh, precision, paired), _step_graph(w, shape, dh, precision, paired), shape


def graph_files(model_dir: Path, precision: str = "int8", graph: str = "paired") -> tuple[Path, Path, Path]:
    """Where ``built_graphs`` keeps the window graph, the step graph and the decoder's shape."""
    from .model_store import generated_file

    stem = f"decoder-{precision}-{graph}-g{GRAPH_VERSION}"
    return tuple(generated_file(model_dir, f"{stem}-{part}") for part in ("window.onnx", "step.onnx", "shape.json"))


def kept_graphs(model_dir: Path, precision: str = "int8",
                graph: str = "paired") -> tuple[Path, Path, DecoderShape] | None:
    """The graphs ``built_graphs`` kept for the model (every engine load after the first reads two
    files instead of generating them again: 0.4 s for base), None where they are not all there or
    were written by another version. The shape file is written last, so its presence says both
    graphs are whole (each file is written atomically)."""
    window_path, step_path, shape_path = graph_files(model_dir, precision, graph)
    try:
        shape = DecoderShape(**json.loads(shape_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):  # absent, or written by another version
        return None
    return (window_path, step_path, shape) if window_path.is_file() and step_path.is_file() else None


def built_graphs(model_dir: Path, precision: str = "int8",
                 graph: str = "paired") -> tuple[Path | bytes, Path | bytes, DecoderShape]:
    """``build_graphs``, generated now and kept on disk beside the encoder's graphs (see
    ``kept_graphs``). Where the files cannot be written (a read-only store, a full disk), the
    graphs are returned as bytes."""
    from .io_utils import atomic_write_bytes, atomic_write_text

    window_path, step_path, shape_path = graph_files(model_dir, precision, graph)
    window, step, shape = build_graphs(model_dir, precision, graph)
    try:
        shape_path.unlink(missing_ok=True)
        atomic_write_bytes(window_path, window)
        atomic_write_bytes(step_path, step)
        atomic_write_text(shape_path, json.dumps(asdict(shape)))
    except OSError:
        return window, step, shape
    return window_path, step_path, shape


def _window_graph(w: dict, s: DecoderShape, dh: int, precision: str, paired: bool) -> bytes:
    """A window's first call: its encoder output and prompt -> every layer's cross-attention keys
    ``cross_k_i`` [H, T, dh] and transposed values ``cross_v_i`` [H, dh, T], the prompt's keys
    ``new_k_i`` [H, R, dh] and transposed values ``new_v_i`` [H, dh, R], and the logits of
    ``logit_rows``.

    Why a graph of its own: the step graph computes each row's attention as its own matrix-vector
    products (that is what makes its rows alike in any call), so a prompt of R rows read the
    cross-attention's keys and values R times: a 160-row prefill took 164 ms on an Intel Xeon,
    107 of them in those products. Here the prompt's rows attend as one matrix. Its bits differ
    from the step graph's, and need not match them: the oracle and speculation prefill the same
    prompt in this same call, and every row after the prompt comes from the step graph. The
    prompt's int8 linears are the step graph's (``paired``: ``MatMulNBits``, whose activations are
    quantized in blocks of up to 256): as the MatMulInteger chain, with one scale a row, they
    multiplied 224 rows about 15 % faster, but put the first token's logits further from the
    float32 model's (median largest difference 1.41 against 0.96 over 29 read clips) and
    decoded 9 of 173 read clips worse and 2 better. The encoder output's keys and values (every
    frame, once a window) are rows quantized one scale a row, their weight scales applied inside
    the integer product (``MatMulIntegerToFloat``: 34 -> 31 ms a 30 s window's call on the Xeon),
    keys and values as two products of the fused layer's rows instead of one product split (the
    same bits; the Split and the keys' bias of zeros cost 3.3 ms of 27)."""
    b = GraphBuilder(w, precision)
    tp, helper = b.tp, b.helper
    heads_first = b.const(np.array([-1, s.heads, dh], np.int64))
    x = _embedded(b, w, "tokens", "positions")
    if paired:
        b.pair_rows(x)
    prompt_rows = b.paired
    outputs = []
    for i in range(s.layers):
        p = f"decoder/layer_{i}"
        b.paired = None  # every frame's keys and values: rows quantized one scale a row (``qlinear``)
        k, v = (b.linear("encoder_output", f"{p}/attention/linear_1", scale_in_product=True, outputs=part)
                for part in (slice(0, s.d_model), slice(s.d_model, 2 * s.d_model)))  # no Split of [T, 2d]
        b.paired = prompt_rows
        cross_k, cross_v = f"cross_k_{i}", f"cross_v_{i}"
        b.nodes.append(helper.make_node("Transpose", [b.op("Reshape", [k, heads_first])], [cross_k], perm=[1, 0, 2]))
        b.nodes.append(helper.make_node("Transpose", [b.op("Reshape", [v, heads_first])], [cross_v], perm=[1, 2, 0]))
        h = b.layer_norm(x, w[f"{p}/self_attention/layer_norm/gamma"], w[f"{p}/self_attention/layer_norm/beta"])
        qkv = b.linear(h, f"{p}/self_attention/linear_0", out_scale=np.concatenate(
            [np.full(s.d_model, dh ** -0.5), np.ones(2 * s.d_model)]).astype(np.float32))
        q, k, v = (b.op("Transpose", [b.op("Reshape", [t, heads_first])], perm=[1, 0, 2])
                   for t in b.op("Split", [qkv, b.const(np.array([s.d_model] * 3, np.int64))], n_out=3, axis=-1))
        b.nodes.append(helper.make_node("Identity", [k], [f"new_k_{i}"]))
        b.nodes.append(helper.make_node("Transpose", [v], [f"new_v_{i}"], perm=[0, 2, 1]))
        att = b.attend_all(q, k, v, "mask", s.d_model, transposed_values=False)
        x = b.op("Add", [x, b.linear(att, f"{p}/self_attention/linear_1")])
        h = b.layer_norm(x, w[f"{p}/attention/layer_norm/gamma"], w[f"{p}/attention/layer_norm/beta"])
        q = b.linear(h, f"{p}/attention/linear_0", out_scale=np.full(s.d_model, dh ** -0.5, np.float32))
        q = b.op("Transpose", [b.op("Reshape", [q, heads_first])], perm=[1, 0, 2])
        att = b.attend_all(q, cross_k, cross_v, None, s.d_model, transposed_values=True)
        x = b.op("Add", [x, b.linear(att, f"{p}/attention/linear_2")])
        h = b.layer_norm(x, w[f"{p}/ffn/layer_norm/gamma"], w[f"{p}/ffn/layer_norm/beta"])
        h = b.op("Gelu", [b.linear(h, f"{p}/ffn/linear_0")], domain="com.microsoft")
        x = b.op("Add", [x, b.linear(h, f"{p}/ffn/linear_1")])
        outputs += [helper.make_tensor_value_info(cross_k, tp.FLOAT, [s.heads, "T", dh]),
                    helper.make_tensor_value_info(cross_v, tp.FLOAT, [s.heads, dh, "T"]),
                    helper.make_tensor_value_info(f"new_k_{i}", tp.FLOAT, [s.heads, "R", dh]),
                    helper.make_tensor_value_info(f"new_v_{i}", tp.FLOAT, [s.heads, dh, "R"])]
    outputs.insert(0, helper.make_tensor_value_info("logits", tp.FLOAT, ["N", s.vocab]))
    _logits(b, w, x)
    inputs = [helper.make_tensor_value_info("encoder_output", tp.FLOAT, ["T", s.d_model]),
              helper.make_tensor_value_info("tokens", tp.INT64, ["R"]),
              helper.make_tensor_value_info("positions", tp.INT64, ["R"]),
              helper.make_tensor_value_info("mask", tp.FLOAT, ["R", "R"]),
              helper.make_tensor_value_info("logit_rows", tp.INT64, ["N"])]
    return serialize(b, helper.make_graph(b.nodes, "whisper_window", inputs, outputs, b.inits))


def _embedded(b: GraphBuilder, w: dict, tokens: str, positions: str) -> str:
    """Token embeddings plus position encodings, one row per token (any shape, flattened)."""
    flat = b.const(np.array([-1], np.int64))
    ids = b.op("Reshape", [tokens, flat])
    if b.precision == "int8":
        emb, emb_scale, _ = int8_linear(w, "decoder/embeddings")
        rows = b.op("Cast", [b.op("Gather", [b.const(emb, "emb"), ids], axis=0)], to=b.tp.FLOAT)
        scale = b.op("Gather", [b.const((1.0 / emb_scale.astype(np.float64)).astype(np.float32), "es"), ids],
                     axis=0)
        x = b.op("Mul", [rows, b.op("Unsqueeze", [scale, b.const(np.array([1], np.int64))])])
    else:
        x = b.op("Gather", [b.const(float_weight(w, "decoder/embeddings"), "emb"), ids], axis=0)
    pos_table = b.const(w["decoder/position_encodings/encodings"].astype(np.float32), "pos")
    return b.op("Add", [x, b.op("Gather", [pos_table, b.op("Reshape", [positions, flat])], axis=0)])


def _logits(b: GraphBuilder, w: dict, x: str) -> None:
    """``logits`` of the rows ``logit_rows`` picks from ``x`` (the final layer norm, then the
    output projection: the largest matmul of a row, so only for the rows wanted). Rows are
    computed alike, so picking them changes no bits."""
    x = b.op("Gather", [x, "logit_rows"], axis=0)
    if b.paired is not None:
        b.pair_rows(x)  # the output projection sees the N picked rows
    h = b.layer_norm(x, w["decoder/layer_norm/gamma"], w["decoder/layer_norm/beta"])
    b.nodes.append(b.helper.make_node("Identity", [b.linear(h, "decoder/embeddings", bias=False)], ["logits"]))


def _step_graph(w: dict, s: DecoderShape, dh: int, precision: str, paired: bool) -> bytes:
    """A call on B sequences at once, R rows each (a sequence with fewer rows repeats its last row:
    the same token at the same position gives the same key and value bits, so the scatter of
    duplicate positions writes one value, and the real rows see nothing else).

    Inputs: tokens and positions [B, R], mask [B, R, P] (0 where a row may look, -inf elsewhere),
    ``logit_rows`` [N] (indices into the B*R rows, sequence by sequence: the rows whose logits are
    wanted; a prompt's prefill needs SOT's and its last row only, and the output projection is the
    largest matmul of a row), per layer each sequence's cache keys ``past_k_i`` [B, H, P, dh] and
    transposed values ``past_v_i`` [B, H, dh, P] (positions not yet decoded hold anything: they are
    masked), and its cross-attention ``cross_k_i`` [B, H, T, dh] and ``cross_v_i`` [B, H, dh, T].
    Outputs: ``logits`` [N, vocab] and the caches with the call's keys and values written at its
    positions, ``cache_k_i`` and ``cache_v_i`` (the inputs' shapes). The caller binds each to its
    input's memory: ONNX Runtime's ScatterElements then writes the rows in place instead of
    copying the whole cache first (a copy a layer and a step, 10 % of a 1-row step at 256
    positions). Every per-row operation (embedding, linears, layer norms, activations) sees the
    B*R rows as one matrix of rows."""
    b = GraphBuilder(w, precision)
    tp, helper = b.tp, b.helper
    x = _embedded(b, w, "tokens", "positions")
    if paired:
        b.pair_rows(x)  # every layer's linears see the call's B*R rows
    x = b.pad_rows(x)  # the residual stream carries the pairing's padding row (see pad_rows)
    batch_rows = b.op("Shape", ["tokens"])  # [B, R]
    b_dim = b.op("Slice", [batch_rows, b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))])
    r_dim = b.op("Slice", [batch_rows, b.const(np.array([1], np.int64)), b.const(np.array([2], np.int64))])
    heads, d_head = b.const(np.array([s.heads], np.int64)), b.const(np.array([dh], np.int64))
    k_index = b.op("Expand", [b.op("Unsqueeze", ["positions", b.const(np.array([1, 3], np.int64))]),
                              b.op("Concat", [b_dim, heads, r_dim, d_head], axis=0)])  # [B, H, R, dh]
    v_index = b.op("Expand", [b.op("Unsqueeze", ["positions", b.const(np.array([1, 2], np.int64))]),
                              b.op("Concat", [b_dim, heads, d_head, r_dim], axis=0)])  # [B, H, dh, R]
    split_heads = b.op("Concat", [b_dim, r_dim, heads, d_head], axis=0)  # [B, R, H, dh]
    rows_shape = b.op("Concat", [b_dim, b.const(np.array([-1, s.heads, dh, 1], np.int64))], axis=0)
    mask = b.op("Unsqueeze", ["mask", b.const(np.array([2], np.int64))])  # [B, R, 1, P]
    inputs = [helper.make_tensor_value_info("tokens", tp.INT64, ["B", "R"]),
              helper.make_tensor_value_info("positions", tp.INT64, ["B", "R"]),
              helper.make_tensor_value_info("mask", tp.FLOAT, ["B", "R", "P"]),
              helper.make_tensor_value_info("logit_rows", tp.INT64, ["N"])]
    outputs = []
    for i in range(s.layers):
        p = f"decoder/layer_{i}"
        # self-attention over the whole cache with this call's rows written at their positions
        h = b.layer_norm(x, w[f"{p}/self_attention/layer_norm/gamma"], w[f"{p}/self_attention/layer_norm/beta"])
        qkv = b.cut_rows(b.linear(h, f"{p}/self_attention/linear_0", out_scale=np.concatenate(
            [np.full(s.d_model, dh ** -0.5), np.ones(2 * s.d_model)]).astype(np.float32)))
        q, k, v = b.op("Split", [qkv, b.const(np.array([s.d_model] * 3, np.int64))], n_out=3, axis=-1)
        new_k = b.op("Transpose", [b.op("Reshape", [k, split_heads])], perm=[0, 2, 1, 3])
        new_v = b.op("Transpose", [b.op("Reshape", [v, split_heads])], perm=[0, 2, 3, 1])
        b.nodes.append(helper.make_node("ScatterElements", [f"past_k_{i}", k_index, new_k], [f"cache_k_{i}"], axis=2))
        b.nodes.append(helper.make_node("ScatterElements", [f"past_v_{i}", v_index, new_v], [f"cache_v_{i}"], axis=3))
        att = b.attend(q, f"cache_k_{i}", f"cache_v_{i}", mask, rows_shape, s.d_model)
        x = b.op("Add", [x, b.linear(b.pad_rows(att), f"{p}/self_attention/linear_1")])
        # cross-attention over the window's encoder output (keys and values computed once a window)
        h = b.layer_norm(x, w[f"{p}/attention/layer_norm/gamma"], w[f"{p}/attention/layer_norm/beta"])
        q = b.cut_rows(b.linear(h, f"{p}/attention/linear_0", out_scale=np.full(s.d_model, dh ** -0.5, np.float32)))
        att = b.attend(q, f"cross_k_{i}", f"cross_v_{i}", None, rows_shape, s.d_model)
        x = b.op("Add", [x, b.linear(b.pad_rows(att), f"{p}/attention/linear_2")])
        # feed-forward
        h = b.layer_norm(x, w[f"{p}/ffn/layer_norm/gamma"], w[f"{p}/ffn/layer_norm/beta"])
        h = b.op("Gelu", [b.linear(h, f"{p}/ffn/linear_0")], domain="com.microsoft")
        x = b.op("Add", [x, b.linear(h, f"{p}/ffn/linear_1")])
        inputs += [helper.make_tensor_value_info(f"past_k_{i}", tp.FLOAT, ["B", s.heads, "P", dh]),
                   helper.make_tensor_value_info(f"past_v_{i}", tp.FLOAT, ["B", s.heads, dh, "P"]),
                   helper.make_tensor_value_info(f"cross_k_{i}", tp.FLOAT, ["B", s.heads, "T", dh]),
                   helper.make_tensor_value_info(f"cross_v_{i}", tp.FLOAT, ["B", s.heads, dh, "T"])]
        outputs += [helper.make_tensor_value_info(f"cache_k_{i}", tp.FLOAT, ["B", s.heads, "P", dh]),
                    helper.make_tensor_value_info(f"cache_v_{i}", tp.FLOAT, ["B", s.heads, dh, "P"])]
    x = b.cut_rows(x)
    b.padded = False  # the picked rows are paired on their own (``_logits``)
    _logits(b, w, x)
    outputs.insert(0, helper.make_tensor_value_info("logits", tp.FLOAT, ["N", s.vocab]))
    return serialize(b, helper.make_graph(b.nodes, "whisper_step", inputs, outputs, b.inits))
