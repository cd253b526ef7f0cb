"""Quantization: a float region graph plus calibrated ranges -> integer kernel parameters.

The output, :class:`QGraph`, holds for every node exactly the integers a kernel call needs
(int8 weights in kernel layout, int32 bias, multipliers and shifts, clamps). The integer
reference executes it and the C emitter prints it, so both see the same numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from . import layout, qarith
from .graph import Graph, Node, extract_graph

# Ops whose output reuses the input's scale: they only move, select or clamp int8 values.
SCALE_PRESERVING = {"max_pool2d", "reshape", "transpose", "pad", "clip"}


@dataclass
class QNode:
    node: Node
    params: dict = field(default_factory=dict)

    @property
    def op(self) -> str:
        return self.node.op


@dataclass
class QGraph:
    graph: Graph
    scales: dict[int, float]  # value id -> activation scale
    nodes: list[QNode]

    def nonnegative(self) -> dict[int, bool]:
        """Values that can never hold a negative int8 (behind a relu or made only of such
        values); kernels may exploit it (the AVX2 convolution skips its sign handling)."""
        known = {v: False for v in self.graph.inputs}
        for q in self.nodes:
            inputs = [known[v] for v in q.node.inputs]
            if "act_min" in q.params:  # conv2d, dense, add, clip
                known[q.node.output] = q.params["act_min"] >= 0
            elif q.op == "pad":
                known[q.node.output] = inputs[0] and q.params["value"] >= 0
            else:  # pooling, concat and layout ops keep or average their inputs' values
                known[q.node.output] = all(inputs)
        return known


def activation_scales(graph: Graph, abs_max: dict[int, float]) -> dict[int, float]:
    """Scale of every value: calibrated, except where an op must keep its input's scale."""
    scales: dict[int, float] = {}
    for value in graph.inputs:
        scales[value] = qarith.activation_scale(abs_max[value])
    for node in graph.nodes:
        if node.op in SCALE_PRESERVING:
            scales[node.output] = scales[node.inputs[0]]
        else:
            scales[node.output] = qarith.activation_scale(abs_max[node.output])
    return scales


def _act_range(node: Node, scale: float) -> tuple[int, int]:
    """The int8 clamp of a node's fused relu / clip (lo, hi) at its output scale."""
    return qarith.clamp_bounds(node.attrs.get("clip"), scale)


# Largest dot-product length: with |int8 x int8| <= 2^14 and a bias below 2^30, 2^15 terms keep
# the int32 accumulator clear of overflow, also for the AVX-512 VNNI kernels, which accumulate
# (a + 128) x w for signed activations (at most 255 x 127 x 2^15 < 2^31).
MAX_PATCH = 1 << 15


def _weighted(node: Node, s_in: float, s_out: float) -> dict:
    """Shared by conv2d and dense: per-channel weights, bias and requantization."""
    patch = node.consts["weight"][0].size
    if patch > MAX_PATCH:
        raise ValueError(f"{node.composite}: dot products of {patch} terms could overflow int32")
    weight_q, weight_scales = qarith.quantize_weights_per_channel(node.consts["weight"])
    units = weight_q.shape[0]
    bias = node.consts.get("bias", np.zeros(units, np.float32))
    multiplier, shift = qarith.per_channel_multipliers(s_in * weight_scales / s_out)
    act_min, act_max = _act_range(node, s_out)
    return {
        "weight": weight_q,
        "bias": qarith.quantize_bias(bias, s_in, weight_scales),
        "multiplier": multiplier,
        "shift": shift,
        "act_min": act_min,
        "act_max": act_max,
    }


def _plain_transpose(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple | None:
    """(shape, perm) of an array transpose, or None when it leaves every byte in place."""
    return None if layout.is_noop_permutation(shape, perm) else (tuple(shape), tuple(perm))


def _transpose_params(in_shape: tuple[int, ...], axes: tuple[int, ...]) -> dict:
    """A logical transpose as a transpose of the stored array (None when the bytes stay put)."""
    return {"transpose": _plain_transpose(layout.storage_shape(in_shape), layout.storage_transpose(in_shape, axes))}


def quantize_node(node: Node, graph: Graph, scales: dict[int, float]) -> QNode:
    s_in = scales[node.inputs[0]]
    s_out = scales[node.output]
    in_shape = graph.shapes[node.inputs[0]]
    out_shape = graph.shapes[node.output]
    a = node.attrs
    if node.op == "conv2d":
        params = _weighted(node, s_in, s_out)
        weight = params["weight"]  # OIHW
        # Depthwise: every group reads one input channel. Its kernel wants (1, KH, KW, O).
        params["depthwise"] = a["groups"] > 1 and a["groups"] == in_shape[1] and weight.shape[1] == 1
        params["weight"] = np.ascontiguousarray(weight.transpose((1, 2, 3, 0) if params["depthwise"] else (0, 2, 3, 1)))
        return QNode(node, params)
    if node.op == "dense":
        return QNode(node, _weighted(node, s_in, s_out))
    if node.op == "add":
        act_min, act_max = _act_range(node, s_out)
        rescale = qarith.add_rescale(s_in, scales[node.inputs[1]], s_out)
        return QNode(node, {"rescale": rescale, "act_min": act_min, "act_max": act_max})
    if node.op == "clip":
        act_min, act_max = _act_range(node, s_out)
        return QNode(node, {"act_min": act_min, "act_max": act_max})
    if node.op == "global_avg_pool2d":
        plane = in_shape[2] * in_shape[3]
        return QNode(node, {"requant": qarith.quantize_multiplier(s_in / (s_out * plane))})
    if node.op == "avg_pool2d":
        counts = np.arange(1, a["pool_size"][0] * a["pool_size"][1] + 1)
        multiplier, shift = qarith.per_channel_multipliers(s_in / (s_out * counts))
        # Index by divisor: entry 0 is never used.
        return QNode(node, {"multiplier": np.concatenate([[0], multiplier]).astype(np.int32),
                            "shift": np.concatenate([[0], shift]).astype(np.int32)})
    if node.op == "max_pool2d":
        return QNode(node)
    if node.op == "concat":
        factors = np.array([scales[v] / s_out for v in node.inputs])
        multiplier, shift = qarith.per_channel_multipliers(factors)
        axis = layout.storage_axis(a["axis"], len(out_shape))
        stored = [layout.storage_shape(graph.shapes[v]) for v in node.inputs]
        return QNode(node, {
            "multiplier": multiplier,
            "shift": shift,
            "outer": math.prod(stored[0][:axis]),
            "inner": [math.prod(shape[axis:]) for shape in stored],
        })
    if node.op == "transpose":
        return QNode(node, _transpose_params(in_shape, tuple(a["axes"])))
    if node.op == "pad":
        value = qarith.clamp_bounds((a["value"], a["value"]), s_out)[0]
        return QNode(node, {"pads": layout.storage_pads(a["pads"]), "value": value,
                            "shape": layout.storage_shape(in_shape)})
    if node.op == "reshape":
        # Stored order -> logical order -> reshape (free) -> stored order of the new shape.
        # Each step is a plain transpose (shape, perm) of an array, or None when it moves no byte.
        to_logical = tuple(int(a) for a in np.argsort(layout.storage_perm(len(in_shape))))
        return QNode(node, {
            "to_logical": _plain_transpose(layout.storage_shape(in_shape), to_logical),
            "to_stored": _plain_transpose(out_shape, layout.storage_perm(len(out_shape))),
        })
    raise ValueError(f"no quantization rule for op {node.op}")


def quantize_graph(graph: Graph, abs_max: dict[int, float]) -> QGraph:
    scales = activation_scales(graph, abs_max)
    return QGraph(graph, scales, [quantize_node(n, graph, scales) for n in graph.nodes])


# Calibrated ranges travel with the IR: each region function carries, under this attribute, the
# JSON list of the absolute-max range of every graph value (float64, exact). Whoever quantizes a
# region (the codegen, the integer reference) reads them back from the function itself.
RANGES_ATTR = "byoc_int8.abs_max"


def annotate_region(func, abs_max: dict[int, float]):
    """The region function with its calibrated ranges attached."""
    ranges = [float(abs_max[v]) for v in range(len(abs_max))]
    return func.with_attr(RANGES_ATTR, json.dumps(ranges))


def quantized_region(name: str, func) -> QGraph:
    """Extract and quantize a calibrated region function."""
    graph = extract_graph(name, func)
    if func.attrs is None or RANGES_ATTR not in func.attrs:
        raise ValueError(f"region {name} has not been calibrated (no {RANGES_ATTR} attribute)")
    ranges = json.loads(str(func.attrs[RANGES_ATTR]))
    if len(ranges) != graph.num_values:
        raise ValueError(f"region {name}: {len(ranges)} calibrated ranges for {graph.num_values} values")
    return quantize_graph(graph, dict(enumerate(ranges)))
