"""Building ONNX graphs from a CTranslate2 ``model.bin``: the model's own weights, as ONNX Runtime nodes.

Shared by the invariant decoder (``invariant_graph``) and the ONNX Runtime encoder
(``encoder_graph``): a node collector, CTranslate2's int8 weight layout (rows q with float =
q / scale) and the serialization both use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import ModelError

OPSET = 17


def ort_tag(graph: str) -> str:
    """onnxruntime's version and a graph's (``graph``, e.g. ``g1``): together they decide what a
    graph computes and how fast, so cached self-tests and timings are keyed by both."""
    try:
        import onnxruntime
    except ImportError:
        return "no-ort"
    return f"{onnxruntime.__version__}/{graph}"


def onnx_modules():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ModelError("ONNX graphs need onnx and onnxruntime", where="python environment",
                         hint="pip install onnxruntime onnx (dependencies of specwhisper on Linux x86_64)") from None
    return onnx, TensorProto, helper, numpy_helper


class GraphBuilder:
    """Collects nodes and initializers; names are made unique with a counter."""

    def __init__(self, weights: dict[str, np.ndarray], precision: str) -> None:
        self.onnx, self.tp, self.helper, self.nph = onnx_modules()
        self.w = weights
        self.precision = precision
        self.nodes: list = []
        self.inits: list = []
        self._n = 0
        # Set by a graph whose int8 linears run as row pairs (``pair_rows``): (pads, rows) of the
        # rows the next linears see; None: the per-row MatMulInteger chain (``qlinear``).
        self.paired: tuple[str, str] | None = None
        # Set by ``pad_rows``: the tensors the int8 linears see carry the pairing's padding row
        # already, and their outputs keep it (one pad and one cut where rows must be the call's own).
        self.padded = False
        self._quantized: dict[str, tuple[str, str]] = {}  # see ``quantized_rows``

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
    def linear(self, x: str, prefix: str, bias: bool = True, out_scale: np.ndarray | None = None, *,
               scale_in_product: bool = False, outputs: slice | None = None) -> str:
        """The linear layer ``prefix`` of the model: int8 (``qlinear``) or float32 (MLAS's float
        GEMM, whose rows were bitwise alike for 1..17 rows). ``out_scale``: a factor per output
        column folded into the weights (the attention's 1/sqrt(dh) on queries: as a separate Mul,
        ORT fused it into FusedMatMul nodes; folded, a 1-row call's attention products took about
        1 ms less in a profile). ``scale_in_product``: see ``qlinear`` (int8 rows not paired).
        ``outputs``: only these output columns of a fused layer (each column's value is the same
        as in the whole layer's product: its own weight row, its own scale). A bias of zeros is
        not added (a cross-attention's keys have none)."""
        cut = slice(None) if outputs is None else outputs
        out_scale = None if out_scale is None else out_scale[cut]
        b = self.w.get(f"{prefix}/bias") if bias else None
        if b is not None:
            b = b[cut].astype(np.float32) * (1.0 if out_scale is None else out_scale) if b[cut].any() else None
        if self.precision == "int8":
            weight, scale, _ = int8_linear(self.w, prefix)
            weight, scale = weight[cut], scale[cut]
            if out_scale is not None:
                scale = scale / out_scale
            if self.paired is not None:
                return self.paired_qlinear(x, weight, scale, b)
            return self.qlinear(x, weight, scale, b, scale_in_product=scale_in_product)
        weight = float_weight(self.w, prefix)[cut]
        if out_scale is not None:
            weight = weight * out_scale[:, None]
        y = self.op("MatMul", [x, self.const(np.ascontiguousarray(weight.T.astype(np.float32)), "w")])
        return self.op("Add", [y, self.const(b, "b")]) if b is not None else y

    def qlinear(self, x: str, weight: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, *,
                scale_in_product: bool = False) -> str:
        """x [R, K] float -> x @ (weight / scale)^T + bias, activations quantized per row to int8.

        CTranslate2 stores int8 weight rows q with float = q / scale. The activations are
        quantized as uint8 around 128 with their row's scale (max |x| / 127; a max is exact in any
        order), the products summed in int32 (exact), then rescaled element by element.
        ``scale_in_product``: the weight's scales are applied by ONNX Runtime's
        ``MatMulIntegerToFloat`` as it writes the products (one node and one pass over the output
        instead of MatMulInteger, Cast and Mul: base's encoder on a 30 s window about 6 % faster);
        its rounding differs in the last bit, so the decoder's graphs, whose rows the self-test
        measured, keep the three nodes."""
        q, row_scale = self.quantized_rows(x)
        w = self.const(np.ascontiguousarray(weight.T.astype(np.int8)), "w")
        weight_scale = self.const((1.0 / scale.astype(np.float64)).astype(np.float32), "ws")
        zero = self.const(np.array(128, np.uint8), "zp")
        if scale_in_product:
            y = self.op("MatMulIntegerToFloat", [q, w, self.const(np.array(1.0, np.float32), "one"), weight_scale, zero],
                        domain="com.microsoft")
            y = self.op("Mul", [y, row_scale])
        else:
            acc = self.op("MatMulInteger", [q, w, zero])
            y = self.op("Mul", [self.op("Mul", [self.op("Cast", [acc], to=self.tp.FLOAT), row_scale]), weight_scale])
        if bias is not None:
            y = self.op("Add", [y, self.const(bias.astype(np.float32), "b")])
        return y

    def quantized_rows(self, x: str) -> tuple[str, str]:
        """``x``'s rows as uint8 around 128 and their scales [R, 1], made once per tensor: the
        window graph's six cross-attention linears all read the encoder output (six
        quantizations of 1500 rows took about 4 ms of its call on the Xeon). A row's max |x| is
        the larger of its max and minus its min, the same value as ReduceMax of Abs without
        writing |x| out first (base's encoder 259 -> 255 ms a 30 s window, the same bits)."""
        if x not in self._quantized:
            amax = self.op("Max", [self.op("ReduceMax", [x], axes=[-1], keepdims=0),
                                   self.op("Neg", [self.op("ReduceMin", [x], axes=[-1], keepdims=0)])])
            row_scale = self.op("Div", [self.op("Max", [amax, self.const(np.array(1e-12, np.float32))]),
                                        self.const(np.array(127.0, np.float32))])
            zero = self.op("Expand", [self.const(np.array([128], np.uint8), "zp"), self.op("Shape", [row_scale])])
            q = self.op("QuantizeLinear", [x, row_scale, zero], axis=0)
            self._quantized[x] = (q, self.op("Unsqueeze", [row_scale, self.const(np.array([1], np.int64))]))
        return self._quantized[x]

    def pair_rows(self, x: str) -> None:
        """Make the next int8 linears (until called again) take ``x``'s rows as row pairs: the
        padding that makes an odd row count even, and the row count to cut back to, computed once."""
        rows = self.op("Shape", [x], start=0, end=1)
        odd = self.op("Mod", [rows, self.const(np.array([2], np.int64))])
        zeros = self.const(np.array([0, 0], np.int64))
        pads = self.op("Concat", [zeros, odd, self.const(np.array([0], np.int64))], axis=0)
        self.paired = (pads, rows)

    def pad_rows(self, x: str) -> str:
        """``x`` (the rows ``pair_rows`` was given) with the pairing's padding row, for the int8
        linears of a stretch of per-row operations (layer norms, activations, residual sums: each
        row on its own, the padding row's values never reach a real row); ``cut_rows`` gives the
        call's own rows back where rows meet (attention, the logits). Four such nodes a layer
        instead of a pad and a cut around each of its six linears. Identity where the linears are
        not paired."""
        if self.paired is None or self.precision != "int8":
            return x
        self.padded = True
        return self.op("Pad", [x, self.paired[0]])

    def cut_rows(self, x: str) -> str:
        """The call's own rows of a padded ``x`` (see ``pad_rows``)."""
        if not self.padded:
            return x
        return self.op("Slice", [x, self.const(np.array([0], np.int64)), self.paired[1],
                                 self.const(np.array([0], np.int64))])

    def paired_qlinear(self, x: str, weight: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> str:
        """x [R, K] float -> x @ (weight / scale)^T + bias in one ONNX Runtime ``MatMulNBits`` node
        (8-bit weights with CTranslate2's per-row scales repeated over blocks of up to 256, where
        K is not a power of two blocks of the largest power of two dividing it, e.g. 128 for
        tiny's 384; activations quantized to int8, integer sums): one node instead of
        ``qlinear``'s thirteen, which made a 1-row decoder step about 20 % faster. Its kernels take
        rows in pairs and compute a lone last row another way, so an odd row count is padded with
        a zero row and cut back: then a row's bits do not depend on the call's other rows, its
        place or the thread count (checked for 2..16 rows with AVX-512 and, under qemu, AVX2
        kernels; the self-test checks it on every machine)."""
        n, k = weight.shape
        block = _block_size(k)
        if block is None:
            return self.qlinear(x, weight, scale, bias)
        pads, rows = self.paired
        blocks = (weight.astype(np.int16) + 128).astype(np.uint8).reshape(n, k // block, block)  # zero point 128
        row_scales = np.repeat((1.0 / scale.astype(np.float64)).astype(np.float32), k // block)
        inputs = [x if self.padded else self.op("Pad", [x, pads]), self.const(blocks, "wq"),
                  self.const(row_scales, "ws")]
        if bias is not None:
            inputs += ["", "", self.const(bias.astype(np.float32), "b")]
        y = self.op("MatMulNBits", inputs, domain="com.microsoft", K=k, N=n, bits=8, block_size=block,
                    accuracy_level=4)
        if self.padded:
            return y
        return self.op("Slice", [y, self.const(np.array([0], np.int64)), rows, self.const(np.array([0], np.int64))])

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray) -> str:
        return self.op("LayerNormalization", [x, self.const(gamma.astype(np.float32), "g"),
                                               self.const(beta.astype(np.float32), "be")], axis=-1, epsilon=1e-5)

    def attend(self, q: str, keys: str, values_t: str, mask: str | None, rows_shape: str, d_model: int) -> str:
        """q [B*R, d] (scaled by dh^-0.5), per sequence keys [B, H, T, dh] and transposed values
        [B, H, dh, T], mask [B, R, 1, T] or None -> [B*R, d]. ``rows_shape``: [B, -1, H, dh, 1],
        the call's, made once per graph (as the mask's extra axis), not once per attention.

        Every row is its own batch entry of matrix-vector products (its sequence's keys [T, dh]
        times the row's [dh, 1], the keys broadcast over the sequence's rows, never copied): a
        batched MatMul with the rows as one matrix gave rows that differ with R (1e-5), and one row
        as the left matrix made MLAS pack the keys again for every row. So a row's products are
        the same GEMMs whatever the number of rows and sequences in the call."""
        q = self.op("Reshape", [q, rows_shape])  # [B, R, H, dh, 1], scaled already
        axis1, axis4 = self.const(np.array([1], np.int64)), self.const(np.array([4], np.int64))
        scores = self.op("Squeeze", [self.op("MatMul", [self.op("Unsqueeze", [keys, axis1]), q]), axis4])  # [B,R,H,T]
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Unsqueeze", [self.op("Softmax", [scores], axis=-1), axis4])  # [B, R, H, T, 1]
        out = self.op("MatMul", [self.op("Unsqueeze", [values_t, axis1]), probs])  # [B, R, H, dh, 1]
        return self.op("Reshape", [out, self.const(np.array([-1, d_model], np.int64))])

    def attend_all(self, q: str, keys: str, values: str, mask: str | None, d_model: int,
                   transposed_values: bool) -> str:
        """q [H, R, dh] (scaled by dh^-0.5), keys [H, T, dh], values [H, T, dh] (or transposed,
        [H, dh, T]), mask [R, T] or None -> [R, H * dh]: the rows as one matrix, two GEMMs a head
        (a prompt's call; ``attend`` is the step graph's row by row)."""
        scores = self.op("FusedMatMul", [q, keys], domain="com.microsoft", transB=1)
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Softmax", [scores], axis=-1)
        out = self.op("FusedMatMul", [probs, values], domain="com.microsoft", transB=int(transposed_values))
        return self.op("Reshape", [self.op("Transpose", [out], perm=[1, 0, 2]),
                                   self.const(np.array([-1, d_model], np.int64))])


def read_weights(model_dir: Path, scope: str) -> dict[str, np.ndarray]:
    """Every variable of ``model.bin`` under ``scope`` (``encoder/`` or ``decoder/``), aliases resolved.

    CTranslate2 stores identical arrays once for the whole model, as aliases: an encoder's zero
    bias or unit layer-norm gain may name a decoder variable, so a target is read wherever it lies
    (reading only the scope's variables lost those aliases: a KeyError building the graph). As
    CTranslate2's loader does, an aliased weight's ``_scale`` follows it."""
    from specwhisper.converters.ct2_bin import ModelBinReader

    with ModelBinReader(model_dir / "model.bin") as reader:
        infos = {info.name: info for info in reader.index.variables}
        sources = {name: name for name in infos if name.startswith(scope)}
        sources.update(_scope_aliases(reader.index.aliases, infos, scope))
        loaded = {target: reader.array(infos[target]) for target in set(sources.values())}
    return {name: loaded[target] for name, target in sources.items()}


def _scope_aliases(aliases: tuple[tuple[str, str], ...], variables: dict, scope: str) -> dict[str, str]:
    """Alias name under ``scope`` -> the stored variable it names (through chains of aliases),
    plus ``alias_scale`` -> ``target_scale`` where the target has a scale; aliases whose target is
    not stored are left out, as CTranslate2's loader skips them."""
    table = dict(aliases)
    resolved: dict[str, str] = {}
    for alias in table:
        if not alias.startswith(scope):
            continue
        target, hops = table[alias], 0
        while target not in variables and target in table and hops < len(table):
            target, hops = table[target], hops + 1
        if target not in variables:
            continue
        resolved[alias] = target
        if target + "_scale" in variables and alias + "_scale" not in variables:
            resolved[alias + "_scale"] = target + "_scale"
    return resolved


MAX_BLOCK = 256  # MLAS's 8-bit blocks are 16..256 long (see ``_block_size``)


def _block_size(k: int) -> int | None:
    """The largest power of two dividing ``k`` from 16 to 256, the block lengths ``MatMulNBits``
    has kernels for; None if none. Why not one block per row (512 for base, 2048 for its feed-
    forward): ONNX Runtime 1.23 (the last with CPython 3.10 wheels) computes NaN for 8-bit blocks
    over 256, 17x slower, and 1.30 refuses them, so there the self-test fell back to the slower
    row-wise graph; 1.32 computes them right, with the same bits as blocks of 256. The row's scale
    is repeated for each of its blocks, so the weights are the same."""
    block = min(k & -k, MAX_BLOCK)
    return block if block >= 16 else None


def int8_linear(w: dict, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """int8 weight rows and their scales (float = q / scale), quantized here as CTranslate2 does
    (per output row, max |w| -> 127) where the model stores floats; and the bias."""
    weight = w[f"{prefix}/weight"]
    if weight.dtype == np.int8:
        return weight, w[f"{prefix}/weight_scale"], w.get(f"{prefix}/bias")
    weight = weight.astype(np.float32)
    scale = 127.0 / np.maximum(np.abs(weight).max(axis=1), 1e-12)
    q = np.clip(np.rint(weight * scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32), w.get(f"{prefix}/bias")


def float_weight(w: dict, prefix: str) -> np.ndarray:
    weight = w[f"{prefix}/weight"]
    if weight.dtype == np.int8:  # one scale per output channel, also for a conv kernel [out, in, width]
        scale = w[f"{prefix}/weight_scale"].reshape(-1, *([1] * (weight.ndim - 1)))
        return (weight.astype(np.float32) / scale).astype(np.float32)
    return weight.astype(np.float32)


def serialize(b: GraphBuilder, graph) -> bytes:
    model = b.helper.make_model(graph, opset_imports=[b.helper.make_opsetid("", OPSET),
                                                     b.helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()
