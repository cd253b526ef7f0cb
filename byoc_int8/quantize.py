"""Quantization: a float region graph plus calibrated ranges -> integer kernel parameters.

The output, :class:`QGraph`, holds for every node exactly the integers a kernel call needs
(int8 weights in kernel layout, int32 bias, multipliers and shifts, clamps). The integer
reference executes it and the C emitter prints it, so both see the same numbers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from . import activations, layout, qarith
from .graph import Graph, Node, extract_graph

# Ops whose output reuses the input's scale and zero point: they only move, select, clamp or
# average int8 values (average pooling keeps its input's encoding, as TFLite's does).
SCALE_PRESERVING = {"max_pool2d", "avg_pool2d", "reshape", "transpose", "pad", "slice", "clip"}


@dataclass
class QNode:
    node: Node
    params: dict = field(default_factory=dict)
    rounding: str = qarith.DEFAULT_FORMAT.rounding  # how its requantizations round (qarith.ROUNDINGS)

    @property
    def op(self) -> str:
        return self.node.op


@dataclass
class QGraph:
    graph: Graph
    quants: dict[int, qarith.ActivationQuant]  # value id -> scale and zero point
    nodes: list[QNode]
    format: qarith.NumberFormat = qarith.DEFAULT_FORMAT

    def nonnegative(self) -> dict[int, bool]:
        """Values that can never hold a negative int8 (behind a relu or made only of such
        values); kernels may exploit it (the AVX2 convolution skips its sign handling)."""
        known = {v: False for v in self.graph.inputs}
        for q in self.nodes:
            inputs = [known[v] for v in q.node.inputs]
            if "act_min" in q.params:  # conv2d, dense, add, mul, clip
                known[q.node.output] = q.params["act_min"] >= 0
            elif q.op == "pad":
                known[q.node.output] = inputs[0] and q.params["value"] >= 0
            elif q.op == "lut":
                known[q.node.output] = bool((q.params["table"] >= 0).all())
            else:  # pooling, concat and layout ops: averages or copies, offset by zero points
                zero_points = [self.quants[v].zero_point for v in q.node.inputs + [q.node.output]]
                known[q.node.output] = all(inputs) and all(z == 0 for z in zero_points)
        return known


def activation_quants(graph: Graph, ranges: dict[int, tuple[float, float]], fmt: qarith.NumberFormat) -> dict[int, qarith.ActivationQuant]:
    """Scale and zero point of every value: calibrated, except where an op keeps its input's."""
    # A pad keeps its input's encoding, which must then also hold the pad value (F.pad(relu(x),
    # value=-1) pads with -1 where x >= 0): widen the calibrated range of its input, and back
    # through a chain of ops that keep their input's encoding, to the value that sets it.
    extra: dict[int, list[float]] = {}
    for node in reversed(graph.nodes):
        if node.op in SCALE_PRESERVING:
            wanted = extra.get(node.output, []) + ([float(node.attrs["value"])] if "value" in node.attrs else [])
            if wanted:
                extra.setdefault(node.inputs[0], []).extend(wanted)
    ranges = {v: (min(lo, *extra.get(v, [lo])), max(hi, *extra.get(v, [hi]))) for v, (lo, hi) in ranges.items()}
    quants: dict[int, qarith.ActivationQuant] = {}
    for value in graph.inputs:
        quants[value] = qarith.activation_quant(*ranges[value], fmt.activations, fmt.scales)
    for node in graph.nodes:
        if node.op in SCALE_PRESERVING:
            quants[node.output] = quants[node.inputs[0]]
        else:
            quants[node.output] = qarith.activation_quant(*ranges[node.output], fmt.activations, fmt.scales)
    # A concatenation's input made only for it by an op that requantizes anyway takes the
    # concatenation's encoding, as TFLite's int8 specification requires: the concatenation then
    # copies its bytes instead of rescaling them (8.7% of SqueezeNet's time on one AVX-512 VNNI
    # core). The outermost concatenation goes first, so that a nested one's inputs take the
    # encoding it passes down.
    uses = Counter(v for node in graph.nodes for v in node.inputs) + Counter(graph.outputs)
    producers = {node.output: node for node in graph.nodes}
    for node in reversed(graph.nodes):
        if node.op != "concat":
            continue
        for v in node.inputs:
            producer = producers.get(v)
            if producer is not None and producer.op not in SCALE_PRESERVING and uses[v] == 1:
                quants[v] = quants[node.output]
    return quants


def _act_range(node: Node, q_out: qarith.ActivationQuant) -> tuple[int, int]:
    """The int8 clamp of a node's fused relu / clip (lo, hi) at its output encoding, narrowed by
    the int8 bounds a model quantized elsewhere gives (TFLite's fused activations)."""
    lo, hi = qarith.clamp_bounds(node.attrs.get("clip"), q_out)
    int_lo, int_hi = node.attrs.get("int_clip") or (qarith.INT8_MIN, qarith.INT8_MAX)
    return max(lo, int_lo), min(hi, int_hi)


MAX_PATCH = qarith.MAX_DOT_TERMS


def _weighted(node: Node, q_in: qarith.ActivationQuant, q_out: qarith.ActivationQuant,
              fmt: qarith.NumberFormat, double_requant: bool = False) -> dict:
    """Shared by conv2d and dense: per-channel weights, bias (input zero point folded in) and
    requantization. Float weights are quantized here; a model quantized elsewhere brings its
    int8 weights, their scales and its int32 bias (``weight_q``, ``weight_scales``, ``bias_q``).
    `double_requant`: the factors as doubles, as TFLite's reference FULLY_CONNECTED uses them."""
    if "weight_q" in node.consts:
        weight_q, weight_scales = node.consts["weight_q"], node.consts["weight_scales"].astype(np.float64)
        bias = node.consts.get("bias_q", np.zeros(weight_q.shape[0], np.int64))
    else:
        weight_q, weight_scales = qarith.quantize_weights(node.consts["weight"], fmt)
        bias = node.consts.get("bias", np.zeros(weight_q.shape[0], np.float32))
        bias = qarith.quantize_bias(bias, q_in.scale, weight_scales)
    patch = weight_q[0].size
    if patch > MAX_PATCH:
        raise ValueError(f"{node.composite}: dot products of {patch} terms could overflow int32")
    # TFLite's expression: (double)s_in * (double)s_w[c] / (double)s_out.
    factors = q_in.scale * weight_scales / q_out.scale
    multiplier, shift = qarith.per_channel_multipliers(factors)
    act_min, act_max = _act_range(node, q_out)
    params = {
        "weight": weight_q,
        "bias": qarith.fold_input_zero_point(np.asarray(bias), weight_q, q_in.zero_point),
        "multiplier": multiplier,
        "shift": shift,
        "input_zero_point": q_in.zero_point,
        "output_zero_point": q_out.zero_point,
        "act_min": act_min,
        "act_max": act_max,
    }
    if double_requant:
        parts = [qarith.double_parts(float(f)) for f in factors]
        params["double_requant"] = (np.array([m for m, _ in parts], np.int64), np.array([e for _, e in parts], np.int32))
    return params


def _plain_transpose(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple | None:
    """(shape, perm) of an array transpose, or None when it leaves every byte in place."""
    return None if layout.is_noop_permutation(shape, perm) else (tuple(shape), tuple(perm))


def _transpose_params(in_shape: tuple[int, ...], axes: tuple[int, ...]) -> dict:
    """A logical transpose as a transpose of the stored array (None when the bytes stay put)."""
    return {"transpose": _plain_transpose(layout.storage_shape(in_shape), layout.storage_transpose(in_shape, axes))}


def quantize_node(
    node: Node, graph: Graph, quants: dict[int, qarith.ActivationQuant], rounding: str = qarith.DEFAULT_FORMAT.rounding,
    source: str = "", fmt: qarith.NumberFormat = qarith.DEFAULT_FORMAT,
) -> QNode:
    """The integer parameters of one node. `source` names where a model quantized elsewhere came
    from ("tflite", "onnx"): a .tflite model's dense layers requantize as TFLite's reference
    FULLY_CONNECTED does, in double precision, and its LOGISTIC, TANH and HARD_SWISH take TFLite's
    own tables. `fmt` says how float weights are quantized."""
    q_in, q_out = quants[node.inputs[0]], quants[node.output]
    in_shape = graph.shapes[node.inputs[0]]
    out_shape = graph.shapes[node.output]
    a = node.attrs

    def made(params: dict | None = None) -> QNode:
        return QNode(node, params or {}, rounding)

    if node.op == "conv2d":
        params = _weighted(node, q_in, q_out, fmt)
        weight = params["weight"]  # OIHW
        # Depthwise: every group reads one input channel. Its kernel wants (1, KH, KW, O).
        params["depthwise"] = a["groups"] > 1 and a["groups"] == in_shape[1] and weight.shape[1] == 1
        params["weight"] = np.ascontiguousarray(weight.transpose((1, 2, 3, 0) if params["depthwise"] else (0, 2, 3, 1)))
        return made(params)
    if node.op == "dense":
        return made(_weighted(node, q_in, q_out, fmt, double_requant=source == "tflite"))
    if node.op == "add":
        act_min, act_max = _act_range(node, q_out)
        q_in2 = quants[node.inputs[1]]
        return made({
            "rescale": qarith.add_rescale(q_in.scale, q_in2.scale, q_out.scale),
            "input1_zero_point": q_in.zero_point,
            "input2_zero_point": q_in2.zero_point,
            "output_zero_point": q_out.zero_point,
            "act_min": act_min,
            "act_max": act_max,
        })
    if node.op == "mul":
        act_min, act_max = _act_range(node, q_out)
        q_in2 = quants[node.inputs[1]]
        # TFLite's MUL: (x1 - z1) * (x2 - z2), requantized by s1 * s2 / s_out.
        return made({
            "requant": qarith.quantize_multiplier(q_in.scale * q_in2.scale / q_out.scale),
            "input1_zero_point": q_in.zero_point,
            "input2_zero_point": q_in2.zero_point,
            "output_zero_point": q_out.zero_point,
            "broadcast": tuple(graph.shapes[node.inputs[1]]) != tuple(in_shape),
            "act_min": act_min,
            "act_max": act_max,
        })
    if node.op == "clip":
        act_min, act_max = _act_range(node, q_out)
        return made({"act_min": act_min, "act_max": act_max})
    if node.op == "global_avg_pool2d":
        plane = in_shape[2] * in_shape[3]
        return made({
            "requant": qarith.mean_multiplier(q_in.scale, q_out.scale, plane),
            "input_zero_point": q_in.zero_point,
            "output_zero_point": q_out.zero_point,
        })
    if node.op == "avg_pool2d":
        # Window sums over the input padded with its zero point (real 0), divided by the count.
        return made({"pad_value": q_in.zero_point})
    if node.op == "max_pool2d":
        return made()
    if node.op == "lut":
        if source == "tflite":  # TFLite's own int8 algorithm for the op
            return made({"table": activations.tflite_table(a["function"], q_in, q_out)})
        return made({"table": activations.lookup_table(a["function"], a["alpha"], q_in, q_out)})
    if node.op == "concat":
        factors = np.array([quants[v].scale / q_out.scale for v in node.inputs])
        multiplier, shift = qarith.per_channel_multipliers(factors)
        axis = layout.storage_axis(a["axis"], len(out_shape))
        stored = [layout.storage_shape(graph.shapes[v]) for v in node.inputs]
        return made({
            "multiplier": multiplier,
            "shift": shift,
            "zero_points": np.array([quants[v].zero_point for v in node.inputs], np.int32),
            "output_zero_point": q_out.zero_point,
            "outer": math.prod(stored[0][:axis]),
            "inner": [math.prod(shape[axis:]) for shape in stored],
        })
    if node.op == "transpose":
        return made(_transpose_params(in_shape, tuple(a["axes"])))
    if node.op == "slice":  # the same slice of the stored order
        perm = layout.storage_perm(len(in_shape))
        return made({"shape": layout.storage_shape(in_shape), "begin": [a["begin"][i] for i in perm],
                     "stride": [a["stride"][i] for i in perm], "out_shape": layout.storage_shape(out_shape)})
    if node.op == "pad":
        value = a["value_q"] if "value_q" in a else qarith.quantize_value(a["value"], q_out)
        return made({"pads": layout.storage_pads(a["pads"]), "value": value, "shape": layout.storage_shape(in_shape)})
    if node.op == "reshape" and a.get("stored"):
        return made({"to_logical": None, "to_stored": None})  # reads and writes the stored order
    if node.op == "reshape":
        # Stored order -> logical order -> reshape (free) -> stored order of the new shape.
        # Each step is a plain transpose (shape, perm) of an array, or None when it moves no byte.
        to_logical = tuple(int(a) for a in np.argsort(layout.storage_perm(len(in_shape))))
        return made({
            "to_logical": _plain_transpose(layout.storage_shape(in_shape), to_logical),
            "to_stored": _plain_transpose(out_shape, layout.storage_perm(len(out_shape))),
        })
    raise ValueError(f"no quantization rule for op {node.op}")


def quantize_graph(
    graph: Graph, ranges: dict[int, tuple[float, float]] | None, fmt: qarith.NumberFormat = qarith.DEFAULT_FORMAT,
    source: str = "",
) -> QGraph:
    """Integer parameters for every node: from calibrated `ranges`, or, for a model quantized
    elsewhere, from the scales and zero points it carries (``graph.quants``)."""
    quants = graph.quants if graph.prequantized else activation_quants(graph, ranges, fmt)
    return QGraph(graph, quants, [quantize_node(n, graph, quants, fmt.rounding, source, fmt) for n in graph.nodes], fmt)


# Calibrated ranges travel with the IR: each region function carries, under this attribute, the
# JSON list of the [lo, hi] range of every graph value (float64, exact), and under FORMAT_ATTR the
# number format it is to be quantized in. Whoever quantizes a region (the codegen, the integer
# reference) reads them back from the function itself.
RANGES_ATTR = "byoc_int8.ranges"
FORMAT_ATTR = "byoc_int8.format"
# Regions of a model quantized elsewhere carry no ranges but where the model came from.
SOURCE_ATTR = "byoc_int8.source"


def annotate_region(func, ranges: dict[int, tuple[float, float]], fmt: qarith.NumberFormat = qarith.DEFAULT_FORMAT):
    """The region function with its calibrated ranges and number format attached."""
    listed = [[float(ranges[v][0]), float(ranges[v][1])] for v in range(len(ranges))]
    return func.with_attr(RANGES_ATTR, json.dumps(listed)).with_attr(FORMAT_ATTR, fmt.to_json())


def region_format(func) -> qarith.NumberFormat:
    if func.attrs is None or FORMAT_ATTR not in func.attrs:
        return qarith.DEFAULT_FORMAT
    return qarith.NumberFormat.from_json(str(func.attrs[FORMAT_ATTR]))


def annotate_prequantized(func, source: str, fmt: qarith.NumberFormat):
    """A region of a model quantized elsewhere, marked with its source and number format."""
    return func.with_attr(SOURCE_ATTR, source).with_attr(FORMAT_ATTR, fmt.to_json())


def quantized_region(name: str, func) -> QGraph:
    """Extract and quantize a calibrated (or prequantized) region function."""
    graph = extract_graph(name, func)
    if graph.prequantized:
        source = str(func.attrs[SOURCE_ATTR]) if func.attrs is not None and SOURCE_ATTR in func.attrs else ""
        return quantize_graph(graph, None, region_format(func), source)
    if func.attrs is None or RANGES_ATTR not in func.attrs:
        raise ValueError(f"region {name} has not been calibrated (no {RANGES_ATTR} attribute)")
    ranges = json.loads(str(func.attrs[RANGES_ATTR]))
    if len(ranges) != graph.num_values:
        raise ValueError(f"region {name}: {len(ranges)} calibrated ranges for {graph.num_values} values")
    return quantize_graph(graph, {v: tuple(r) for v, r in enumerate(ranges)}, region_format(func))
