"""The golden integer model: every int8 kernel in numpy, and a runner for whole regions.

This is the x86 simulator of the accelerator's arithmetic and the definition every C result is
checked against. Each kernel is written as the readable computation, vectorized with numpy;
the integer steps (requantization, clamps, boundary conversions) come from :mod:`qarith`.

Layout: 4-D activations are NHWC, as in the C kernels. Each QNode carries its rounding and the
zero points of its values (see :mod:`qarith` for the number formats).

Exactness: convolution and dense accumulate int8 x int8 products in float64 so that numpy can
use BLAS. Each product is at most 2^14 in magnitude and a patch holds at most 2^15 of them (the
quantizer refuses more), so every partial sum is an integer below 2^29 < 2^53 and the float64
result is the exact int32 accumulator, whatever the summation order.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import qarith
from .graph import slicing
from .host import HostOpRunner
from .layout import storage_shape, to_logical, to_storage
from .partition import region_functions, run_partitioned
from .quantize import QGraph, QNode, quantized_region


def _windows(x: np.ndarray, kernel: tuple[int, int], strides, dilation, out_hw) -> np.ndarray:
    """(N, OH, OW, KH, KW, C) view of the receptive fields of a padded NHWC tensor."""
    kh, kw = kernel
    dh, dw = dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    view = sliding_window_view(x, (span_h, span_w), axis=(1, 2))  # N, H', W', C, span_h, span_w
    view = view[:, :: strides[0], :: strides[1], :, ::dh, ::dw][:, : out_hw[0], : out_hw[1]]
    return view.transpose(0, 1, 2, 4, 5, 3)


def _pad_nhwc(x: np.ndarray, padding, out_hw, kernel, strides, dilation, value: int) -> np.ndarray:
    """Pad top/left/bottom/right, extending bottom/right as far as the last window reaches."""
    top, left, bottom, right = padding
    need_h = (out_hw[0] - 1) * strides[0] + (kernel[0] - 1) * dilation[0] + 1
    need_w = (out_hw[1] - 1) * strides[1] + (kernel[1] - 1) * dilation[1] + 1
    bottom = max(bottom, need_h - top - x.shape[1])
    right = max(right, need_w - left - x.shape[2])
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def conv2d(x: np.ndarray, q: QNode, out_shape) -> np.ndarray:
    """Grouped (or not) convolution; depthwise weights are (1, KH, KW, O), others OHWI."""
    p, a = q.params, q.node.attrs
    weight = p["weight"]
    kernel = weight.shape[1:3]
    out_hw = out_shape[2:4]
    out_c = out_shape[1]
    # Padding reads the input zero point (real 0); the bias already holds -z_in * sum(w).
    xp = _pad_nhwc(x, a["padding"], out_hw, kernel, a["strides"], a["dilation"], p["input_zero_point"])
    patches = _windows(xp, kernel, a["strides"], a["dilation"], out_hw)  # N, OH, OW, KH, KW, C
    if p["depthwise"]:
        multiplier = out_c // x.shape[3]
        taps = np.repeat(patches, multiplier, axis=-1).astype(np.int64)  # channel o reads o // m
        acc = (taps * weight[0].astype(np.int64)).sum(axis=(3, 4)).reshape(-1, out_c)
    else:
        groups = a["groups"]
        group_in, group_out = x.shape[3] // groups, out_c // groups
        acc = np.concatenate(
            [
                patches[..., g * group_in : (g + 1) * group_in].reshape(-1, weight[0].size).astype(np.float64)
                @ weight[g * group_out : (g + 1) * group_out].reshape(group_out, -1).T.astype(np.float64)
                for g in range(groups)
            ],
            axis=1,
        ).astype(np.int64)
    return _output_stage(acc, q).reshape(x.shape[0], *out_hw, out_c)


def _output_stage(acc: np.ndarray, q: QNode) -> np.ndarray:
    """Bias, requantization, output zero point and clamp: shared by conv2d and dense."""
    p = q.params
    acc = acc + p["bias"].astype(np.int64)
    if "double_requant" in p:  # TFLite's reference FULLY_CONNECTED
        mantissa, exponent = p["double_requant"]
        y = qarith.requantize_double(acc, mantissa.astype(np.float64) * np.exp2(exponent.astype(np.float64)))
    else:
        y = qarith.requantize(acc, p["multiplier"], p["shift"], q.rounding)
    return qarith.clamp_s8(y + p["output_zero_point"], p["act_min"], p["act_max"])


def max_pool2d(x: np.ndarray, q: QNode, out_shape) -> np.ndarray:
    a = q.node.attrs
    out_hw = out_shape[2:4]
    # -128 is the smallest int8, so padding with it never changes a maximum over real values.
    xp = _pad_nhwc(x, a["padding"], out_hw, a["pool_size"], a["strides"], a["dilation"], -128)
    return _windows(xp, a["pool_size"], a["strides"], a["dilation"], out_hw).max(axis=(3, 4))


def global_avg_pool2d(x: np.ndarray, q: QNode, out_shape) -> np.ndarray:
    p = q.params
    r = p["requant"]
    total = (x.astype(np.int64) - p["input_zero_point"]).sum(axis=(1, 2))
    y = qarith.requantize(total, r.multiplier, r.shift, q.rounding) + p["output_zero_point"]
    return qarith.clamp_s8(y).reshape(storage_shape(out_shape))


def add(x1: np.ndarray, x2: np.ndarray, q: QNode) -> np.ndarray:
    p = q.params
    r: qarith.AddRescale = p["rescale"]
    shifted1 = (x1.astype(np.int64) - p["input1_zero_point"]) << r.left_shift
    shifted2 = (x2.astype(np.int64) - p["input2_zero_point"]) << r.left_shift
    a = qarith.requantize(shifted1, r.input1.multiplier, r.input1.shift, q.rounding)
    b = qarith.requantize(shifted2, r.input2.multiplier, r.input2.shift, q.rounding)
    y = qarith.requantize(a + b, r.output.multiplier, r.output.shift, q.rounding) + p["output_zero_point"]
    return qarith.clamp_s8(y, p["act_min"], p["act_max"])


def dense(x: np.ndarray, q: QNode) -> np.ndarray:
    return _output_stage(x.astype(np.int64) @ q.params["weight"].astype(np.int64).T, q)


def avg_pool2d(x: np.ndarray, q: QNode, out_shape) -> np.ndarray:
    """PyTorch's average pooling: window sums divided by the count of in-bounds positions, or
    with count_include_pad by the positions inside the (symmetrically) padded input, whose padding
    holds the zero point. The output keeps the input's scale and zero point."""
    a = q.node.attrs
    pad_value = q.params["pad_value"]
    (kh, kw), (sh, sw) = a["pool_size"], a["strides"]
    pad_h, pad_w = a["padding"][:2]
    n, h, w, c = x.shape
    out = np.empty((n, out_shape[2], out_shape[3], c), np.int8)
    for oy in range(out_shape[2]):
        y0 = oy * sh - pad_h
        y1 = min(y0 + kh, h + pad_h)
        for ox in range(out_shape[3]):
            x0 = ox * sw - pad_w
            x1 = min(x0 + kw, w + pad_w)
            window = x[:, max(y0, 0) : min(y1, h), max(x0, 0) : min(x1, w)]
            inside = window.shape[1] * window.shape[2]
            count = (y1 - y0) * (x1 - x0) if a["count_include_pad"] else inside
            total = window.astype(np.int64).sum(axis=(1, 2)) + (count - inside) * pad_value
            out[:, oy, ox] = qarith.clamp_s8(qarith.rounding_divide(total, count, q.rounding))
    return out


def clip(x: np.ndarray, q: QNode) -> np.ndarray:
    return qarith.clamp_s8(x, q.params["act_min"], q.params["act_max"])


# Layout ops are defined on the logical tensor; the C kernels work on the stored order.
def reshape(x: np.ndarray, q: QNode, out_shape) -> np.ndarray:
    if q.node.attrs.get("stored"):  # an NHWC model's reshape, of the stored order
        return x.reshape(storage_shape(out_shape))
    return to_storage(to_logical(x).reshape(out_shape))


def transpose(x: np.ndarray, q: QNode) -> np.ndarray:
    return to_storage(to_logical(x).transpose(q.node.attrs["axes"]))


def slice_(x: np.ndarray, q: QNode) -> np.ndarray:
    return to_storage(to_logical(x)[slicing(q.node.attrs)])


def pad(x: np.ndarray, q: QNode) -> np.ndarray:
    return to_storage(np.pad(to_logical(x), q.node.attrs["pads"], constant_values=q.params["value"]))


def concat(xs: list[np.ndarray], q: QNode) -> np.ndarray:
    p = q.params
    parts = [
        qarith.clamp_s8(qarith.requantize(to_logical(x).astype(np.int64) - z, m, s, q.rounding) + p["output_zero_point"])
        for x, m, s, z in zip(xs, p["multiplier"], p["shift"], p["zero_points"])
    ]
    return to_storage(np.concatenate(parts, axis=q.node.attrs["axis"]))


def mul(x1: np.ndarray, x2: np.ndarray, q: QNode) -> np.ndarray:
    """Elementwise product; a (N, C) gate stored (N, 1, 1, C) broadcasts over the pixels of a
    stored (N, H, W, C) tensor as numpy broadcasts it."""
    p = q.params
    r = p["requant"]
    product = (x1.astype(np.int64) - p["input1_zero_point"]) * (x2.astype(np.int64) - p["input2_zero_point"])
    y = qarith.requantize(product, r.multiplier, r.shift, q.rounding) + p["output_zero_point"]
    return qarith.clamp_s8(y, p["act_min"], p["act_max"])


def lut(x: np.ndarray, q: QNode) -> np.ndarray:
    """An elementwise activation as its 256-entry table, indexed by the input code + 128."""
    return q.params["table"][x.astype(np.int16) + 128]


def run_node(q: QNode, args: list[np.ndarray], out_shape) -> np.ndarray:
    if q.op == "conv2d":
        return conv2d(args[0], q, out_shape)
    if q.op == "max_pool2d":
        return max_pool2d(args[0], q, out_shape)
    if q.op == "global_avg_pool2d":
        return global_avg_pool2d(args[0], q, out_shape)
    if q.op == "add":
        return add(args[0], args[1], q)
    if q.op == "dense":
        return dense(args[0], q)
    if q.op == "reshape":
        return reshape(args[0], q, out_shape)
    if q.op == "avg_pool2d":
        return avg_pool2d(args[0], q, out_shape)
    if q.op == "clip":
        return clip(args[0], q)
    if q.op == "transpose":
        return transpose(args[0], q)
    if q.op == "pad":
        return pad(args[0], q)
    if q.op == "slice":
        return slice_(args[0], q)
    if q.op == "concat":
        return concat(args, q)
    if q.op == "lut":
        return lut(args[0], q)
    if q.op == "mul":
        return mul(args[0], args[1], q)
    raise ValueError(f"no reference kernel for {q.op}")


def _stored(qgraph: QGraph, x: np.ndarray) -> np.ndarray:
    """A boundary tensor in storage order: an NHWC model's tensors already are."""
    return x if qgraph.graph.layout == "NHWC" else to_storage(x)


def _unstored(qgraph: QGraph, x: np.ndarray) -> np.ndarray:
    return x if qgraph.graph.layout == "NHWC" else to_logical(x)


def run_quantized_values(qgraph: QGraph, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every int8 value of a region (storage order) for its inputs (float, or int8 where the
    region's interface is int8)."""
    g = qgraph.graph
    values = {}
    for i, (v, x) in enumerate(zip(g.inputs, inputs)):
        if g.input_dtype(i) == "int8":
            values[v] = _stored(qgraph, np.asarray(x, np.int8))
        else:
            values[v] = _stored(qgraph, qarith.quantize_tensor(x, qgraph.quants[v], qgraph.format.rounding))
    for q in qgraph.nodes:
        shape = (values[q.node.inputs[0]].shape[0],) + g.shapes[q.node.output][1:]
        values[q.node.output] = run_node(q, [values[i] for i in q.node.inputs], shape)
    return values


def run_quantized(qgraph: QGraph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """int8 outputs (the model's layout) of a region, as the accelerator computes them."""
    values = run_quantized_values(qgraph, inputs)
    return [_unstored(qgraph, values[v]) for v in qgraph.graph.outputs]


def run_region_float(qgraph: QGraph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """A region's outputs as its interface gives them: dequantized at the exit, or int8 where the
    region's output is int8."""
    g = qgraph.graph
    return [
        y if g.output_dtype(i) == "int8" else qarith.dequantize_tensor(y, qgraph.quants[v])
        for i, (y, v) in enumerate(zip(run_quantized(qgraph, inputs), g.outputs))
    ]


def quantized_regions(mod) -> dict[str, QGraph]:
    """Every region of a calibrated, partitioned module, quantized (once; callers may keep it)."""
    return {name: quantized_region(name, f) for name, f in region_functions(mod).items()}


def run_module(
    mod, inputs: list[np.ndarray], host: HostOpRunner | None = None, qgraphs: dict[str, QGraph] | None = None
) -> list[np.ndarray]:
    """Every output of a calibrated, partitioned module as the accelerator (regions) and the
    host (everything else, through TVM) compute it."""
    qgraphs = qgraphs or quantized_regions(mod)
    host = host or HostOpRunner()
    return run_partitioned(mod, lambda name, args: run_region_float(qgraphs[name], args), inputs, host.run)


def output_scales(mod, qgraphs: dict[str, QGraph] | None = None) -> list[float | None]:
    """For each output of main: the int8 scale it was dequantized from, when a region produces
    it directly; None when a host op does."""
    qgraphs = qgraphs or quantized_regions(mod)

    def region_scales(name: str, args: list) -> list[float]:
        q = qgraphs[name]
        return [q.quants[v].scale for v in q.graph.outputs]

    return run_partitioned(mod, region_scales, [None] * len(mod["main"].params), lambda call, args: None)
