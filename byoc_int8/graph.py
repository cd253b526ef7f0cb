"""The region graph: what one ``ccompiler`` region computes, as a small list of nodes.

A partitioned Relax region is a function whose body calls composite functions. This module
reads such a function into a :class:`Graph` (one :class:`Node` per composite, constants as
numpy arrays, shapes in PyTorch's logical NCHW order), and runs it in float with PyTorch, which
is how calibration sees the tensors at composite boundaries without TVM's untuned kernels.
Quantization, the integer reference and the C emitter all start from this graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
import tvm
from tvm import relax

from . import activations
from .patterns import prim_number, slice_bounds
from .qarith import ActivationQuant


@dataclass
class Node:
    """One composite: `op` reads `inputs` (value ids) and defines value `output`."""

    # conv2d | dense | add | clip | max_pool2d | avg_pool2d | global_avg_pool2d | concat |
    # reshape | transpose | pad | slice | lut | mul
    op: str
    inputs: list[int]
    output: int
    attrs: dict = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    composite: str = ""  # the ccompiler.<kind> name it came from


@dataclass
class Graph:
    """A region: values 0..len(inputs)-1 are its parameters; every node defines one value.

    Regions of models quantized elsewhere (QDQ composites) also carry the model's own encoding of
    every value (`quants`), the model's layout (an NHWC model's 4-D tensors are already in the
    accelerator's storage order, so its boundaries move no bytes) and the dtype of each input
    and output (int8 where the model's interface is int8; one value may be both a float input
    and an int8 output, in a region that only quantizes)."""

    name: str
    inputs: list[int]
    outputs: list[int]
    shapes: dict[int, tuple[int, ...]]
    nodes: list[Node]
    quants: dict[int, ActivationQuant] = field(default_factory=dict)
    layout: str = "NCHW"
    input_dtypes: list[str] = field(default_factory=list)  # per input; float32 if absent
    output_dtypes: list[str] = field(default_factory=list)  # per output

    @property
    def num_values(self) -> int:
        return len(self.shapes)

    @property
    def prequantized(self) -> bool:
        return bool(self.quants)

    def input_dtype(self, index: int) -> str:
        return self.input_dtypes[index] if index < len(self.input_dtypes) else "float32"

    def output_dtype(self, index: int) -> str:
        return self.output_dtypes[index] if index < len(self.output_dtypes) else "float32"


class UnsupportedCompositeError(ValueError):
    pass


def _shape(expr: relax.Expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape.values)


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _calls(func: relax.Function) -> dict[str, relax.Call]:
    """The op calls inside a composite function, by op name (each op occurs at most once)."""
    calls: dict[str, relax.Call] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                calls[binding.value.op.name] = binding.value
    return calls


def _operands(func: relax.Function, call: relax.Call, inputs: list[int]) -> list[int]:
    """The values that `call`, the op of a composite whose operands are all its parameters, reads
    in order (a concat's tuple fields). A composite has one parameter per distinct value, so an op
    that reads a value twice (``cat([a, b, a])``, ``a + a``, ``a * a``) has fewer parameters than
    operands."""
    value_of = dict(zip(func.params, inputs))
    args = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else call.args
    return [value_of[a] for a in args]


def _const(expr: relax.Expr, what: str) -> np.ndarray:
    if not isinstance(expr, tvm.ir.GenericConst):
        raise UnsupportedCompositeError(f"{what} is not a constant")
    return expr.value.numpy()


def _bias_for(calls: dict[str, relax.Call], channels: int) -> np.ndarray | None:
    """The constant operand of the composite's add (the pattern admits it on either side)."""
    add = calls.get("relax.add")
    if add is None:
        return None
    const = next((a for a in add.args if isinstance(a, tvm.ir.GenericConst)), None)
    return _const(const, "bias").astype(np.float32).reshape(channels)


def _activation(calls: dict[str, relax.Call]) -> tuple[float, float] | None:
    """The (lo, hi) clamp a composite ends with: relu is (0, inf), clip / relu6 its bounds."""
    if "relax.nn.relu" in calls:
        return (0.0, float("inf"))
    if "relax.clip" in calls:
        clip = calls["relax.clip"]
        return (prim_number(clip.args[1]), prim_number(clip.args[2]))
    return None


def _window_attrs(a) -> dict:
    return {
        "pool_size": _ints(a.pool_size),
        "strides": _ints(a.strides),
        "padding": _ints(a.padding),  # top, left, bottom, right
        "dilation": _ints(a.dilation),
        "ceil_mode": bool(a.ceil_mode),
    }


def _node_from_composite(kind: str, func: relax.Function, inputs: list[int], output: int,
                         shapes: dict[int, tuple[int, ...]]) -> Node:
    in_shape = shapes[inputs[0]]
    calls = _calls(func)
    act = _activation(calls)
    if kind.startswith("conv2d"):
        conv = calls["relax.nn.conv2d"]
        weight = _const(conv.args[1], "conv2d weight").astype(np.float32)
        a = conv.attrs
        consts = {"weight": weight}
        bias = _bias_for(calls, weight.shape[0])
        if bias is not None:
            consts["bias"] = bias
        attrs = {
            "strides": _ints(a.strides),
            "padding": _ints(a.padding),  # top, left, bottom, right
            "dilation": _ints(a.dilation),
            "groups": int(a.groups),
            "clip": act,
        }
        return Node("conv2d", inputs, output, attrs, consts)
    if kind == "max_pool2d":
        return Node("max_pool2d", inputs, output, _window_attrs(calls["relax.nn.max_pool2d"].attrs))
    if kind == "avg_pool2d":
        pool = calls["relax.nn.avg_pool2d"]
        attrs = _window_attrs(pool.attrs) | {"count_include_pad": bool(pool.attrs.count_include_pad)}
        return Node("avg_pool2d", inputs, output, attrs)
    if kind == "adaptive_avg_pool2d":
        out_h, out_w = _ints(calls["relax.nn.adaptive_avg_pool2d"].attrs.output_size)
        h, w = in_shape[2:]
        if (out_h, out_w) == (1, 1):
            return Node("global_avg_pool2d", inputs, output)
        # Equal windows (the pattern check guarantees divisibility): a plain average pool.
        kh, kw = h // out_h, w // out_w
        attrs = {"pool_size": [kh, kw], "strides": [kh, kw], "padding": [0, 0, 0, 0], "dilation": [1, 1],
                 "ceil_mode": False, "count_include_pad": False}
        return Node("avg_pool2d", inputs, output, attrs)
    if kind.startswith("mul"):  # the full tensor first, a broadcast gate second
        operands = _operands(func, calls["relax.multiply"], inputs)
        full_first = sorted(operands, key=lambda v: -int(np.prod(shapes[v])))
        return Node("mul", full_first, output, {"clip": act})
    if kind.startswith("add"):
        return Node("add", _operands(func, calls["relax.add"], inputs), output, {"clip": act})
    if kind in ("relu", "clip"):
        return Node("clip", inputs, output, {"clip": act})
    if kind == "global_avg_pool2d":
        return Node("global_avg_pool2d", inputs, output)
    if kind == "reshape":
        return Node("reshape", inputs, output)
    if kind.startswith("lut_"):
        function, alpha = kind[len("lut_"):], 0.0
        if function == "leaky_relu":
            alpha = float(calls["relax.nn.leakyrelu"].attrs.alpha)
        if function == "elu":  # -alpha * relu(1 - exp(x)) + relu(x)
            scale = next(a for a in calls["relax.multiply"].args if isinstance(a, tvm.ir.GenericConst))
            alpha = -float(scale.value.numpy().reshape(-1)[0])
        return Node("lut", inputs, output, {"function": function, "alpha": alpha})
    if kind == "transpose":
        return Node("transpose", inputs, output, {"axes": _ints(calls["relax.permute_dims"].attrs.axes)})
    if kind == "concat":
        concat = calls["relax.concat"]
        return Node("concat", _operands(func, concat, inputs), output, {"axis": int(concat.attrs.axis)})
    if kind == "slice":
        begin, end, stride = slice_bounds(calls["relax.strided_slice"])
        return Node("slice", inputs, output, {"begin": begin, "end": end, "stride": stride})
    if kind == "pad":
        pad = calls["relax.nn.pad"]
        widths = _ints(pad.attrs.pad_width)
        attrs = {"pads": [tuple(widths[i : i + 2]) for i in range(0, len(widths), 2)],
                 "value": float(pad.attrs.pad_value)}
        return Node("pad", inputs, output, attrs)
    if kind.startswith("dense"):
        matmul = calls["relax.matmul"]
        weight = _const(matmul.args[1], "dense weight").astype(np.float32)  # (depth, units)
        consts = {"weight": np.ascontiguousarray(weight.T)}  # (units, depth)
        bias = _bias_for(calls, weight.shape[1])
        if bias is not None:
            consts["bias"] = bias
        return Node("dense", inputs, output, {"clip": act}, consts)
    raise UnsupportedCompositeError(f"no int8 lowering for composite ccompiler.{kind}")


# ---- QDQ composites (models quantized elsewhere) -------------------------------------------------

# NHWC axis -> logical NCHW axis.
_LOGICAL_FROM_NHWC = (0, 2, 3, 1)


def _logical_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Shapes are kept in PyTorch's logical NCHW order; an NHWC tensor's bytes are then already
    its storage order (see layout.py)."""
    if layout == "NHWC" and len(shape) == 4:
        return (shape[0], shape[3], shape[1], shape[2])
    return shape


def _quant_of(call: relax.Call) -> ActivationQuant:
    """The per-tensor scale and zero point of a quantize / dequantize call."""
    scale = float(np.float32(call.args[1].value.numpy()).reshape(-1)[0])
    zero_point = int(call.args[2].value.numpy().reshape(-1)[0])
    return ActivationQuant(scale, zero_point)


class _Composite:
    """The bindings of one QDQ composite function, to walk from its result back to its inputs."""

    def __init__(self, func: relax.Function):
        self.bound: dict[relax.Var, relax.Call] = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                self.bound[binding.var] = binding.value
        self.params = list(func.params)
        self.result = self.call(func.body.body)

    def call(self, expr: relax.Expr) -> relax.Call | None:
        """The call an expression stands for (through variables)."""
        while isinstance(expr, relax.Var) and expr in self.bound:
            expr = self.bound[expr]
        return expr if isinstance(expr, relax.Call) else None

    def op(self, expr: relax.Expr) -> str:
        call = self.call(expr)
        return call.op.name if call is not None and isinstance(call.op, tvm.ir.Op) else ""

    def calls(self, op: str) -> list[relax.Call]:
        return [c for c in self.bound.values() if isinstance(c, relax.Call) and getattr(c.op, "name", "") == op]

    def find(self, op: str) -> relax.Call:
        return self.calls(op)[0]


def _int8_weight(comp: _Composite, expr: relax.Expr) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weight, scales along its output channels) behind a dequantize, through the reshapes
    and permutes the importers put around it, in the layout the consuming op reads."""
    steps = []
    call = comp.call(expr)
    while call.op.name in ("relax.reshape", "relax.permute_dims"):
        steps.append(call)
        call = comp.call(call.args[0])
    inner = comp.call(call.args[0])
    weight = (inner.args[0] if inner is not None else call.args[0]).value.numpy()
    if inner is not None:  # TFLite: dequantize(permute_dims(W))
        weight = weight.transpose([int(a) for a in inner.attrs.axes])
    for step in reversed(steps):
        if step.op.name == "relax.reshape":
            weight = weight.reshape(_shape(step))
        else:
            weight = weight.transpose([int(a) for a in step.attrs.axes])
    return weight.astype(np.int8), call.args[1].value.numpy().astype(np.float64).reshape(-1)


def _per_channel(scales: np.ndarray, channels: int) -> np.ndarray:
    """Per-tensor scales broadcast to every output channel."""
    return np.broadcast_to(scales, (channels,)).copy()


def _bias(comp: _Composite, matched: relax.Expr) -> np.ndarray | None:
    """The int32 bias of a composite's add (the operand that is not `matched`), if it has one."""
    adds = comp.calls("relax.add")
    if not adds:
        return None
    add = adds[0]
    other = add.args[1] if comp.call(add.args[0]) is comp.call(matched) else add.args[0]
    call = comp.call(other)
    while call.op.name == "relax.reshape":
        call = comp.call(call.args[0])
    return call.args[0].value.numpy().astype(np.int64).reshape(-1)


def _int_clip(comp: _Composite) -> tuple[int, int] | None:
    """The int8 bounds of a TFLite fused activation (a clip after the quantize)."""
    if comp.result.op.name != "relax.clip":
        return None
    return int(prim_number(comp.result.args[1])), int(prim_number(comp.result.args[2]))


def _qdq_node(kind: str, func: relax.Function, inputs: list[int], output: int, layout: str,
              quants: dict[int, ActivationQuant], shapes: dict[int, tuple[int, ...]]) -> Node:
    """One QDQ composite as a Node; records the encodings it names in `quants`."""
    comp = _Composite(func)
    # The encodings of the composite's inputs (its dequantizes) and output (its quantize).
    for call in comp.calls("relax.dequantize"):
        if call.args[0] in comp.params:
            _record(quants, inputs[comp.params.index(call.args[0])], _quant_of(call))
    for call in comp.calls("relax.quantize"):
        _record(quants, output, _quant_of(call))
    attrs: dict = {"int_clip": _int_clip(comp)}
    if kind.startswith("qdq_conv2d"):
        conv = comp.find("relax.nn.conv2d")
        a = conv.attrs
        weight, scales = _int8_weight(comp, conv.args[1])
        layout_of = str(a.kernel_layout)
        weight = weight.transpose([layout_of.index(c) for c in "OIHW"])
        consts = {"weight_q": np.ascontiguousarray(weight), "weight_scales": _per_channel(scales, weight.shape[0])}
        bias = _bias(comp, conv)
        if bias is not None:
            consts["bias_q"] = bias
        attrs |= {"strides": _ints(a.strides), "padding": _ints(a.padding), "dilation": _ints(a.dilation),
                  "groups": int(a.groups), "clip": None}
        return Node("conv2d", inputs, output, attrs, consts)
    if kind.startswith("qdq_dense"):
        matmul = comp.find("relax.matmul")
        weight, scales = _int8_weight(comp, matmul.args[1])  # (depth, units)
        weight = np.ascontiguousarray(weight.T)  # (units, depth)
        consts = {"weight_q": weight, "weight_scales": _per_channel(scales, weight.shape[0])}
        bias = _bias(comp, matmul)
        if bias is not None:
            consts["bias_q"] = bias
        return Node("dense", inputs, output, attrs | {"clip": None}, consts)
    if kind.startswith("qdq_add"):
        relu = bool(comp.calls("relax.nn.relu"))
        return Node("add", inputs, output, attrs | {"clip": (0.0, float("inf")) if relu else None})
    if kind.startswith("qdq_mul"):  # the full tensor first, a broadcast gate second
        full_first = sorted(inputs, key=lambda v: -int(np.prod(shapes[v])))
        if len(shapes[full_first[1]]) == 4 and shapes[full_first[1]] not in (shapes[full_first[0]], (*shapes[full_first[0]][:2], 1, 1)):
            raise UnsupportedCompositeError(f"multiply of {shapes[full_first[0]]} by {shapes[full_first[1]]}: the gate is not per channel")
        return Node("mul", full_first, output, attrs | {"clip": None})
    if kind.startswith("qdq_lut_"):
        return Node("lut", inputs, output, attrs | {"function": kind[len("qdq_lut_"):], "alpha": 0.0})
    if kind == "qdq_mean":
        return Node("global_avg_pool2d", inputs, output, attrs)
    if kind.startswith("qdq_concat"):
        axis = int(comp.find("relax.concat").attrs.axis)
        return Node("concat", inputs, output, attrs | {"axis": _logical_axis(axis, 4, layout)})
    if kind in ("qdq_max_pool2d", "max_pool2d_int8"):
        return Node("max_pool2d", inputs, output, attrs | _window_attrs(comp.find("relax.nn.max_pool2d").attrs))
    if kind in ("qdq_avg_pool2d", "avg_pool2d_int8"):
        pool = comp.find("relax.nn.avg_pool2d")
        return Node("avg_pool2d", inputs, output, attrs | _window_attrs(pool.attrs) | {"count_include_pad": False})
    if kind in ("qdq_reshape", "reshape_int8"):
        # An NHWC model's reshape reads its tensors in stored order: it moves no bytes.
        return Node("reshape", inputs, output, attrs | {"stored": layout == "NHWC"})
    if kind == "pad_int8":
        pad = comp.find("relax.nn.pad")
        widths = _ints(pad.attrs.pad_width)
        pairs = [tuple(widths[i : i + 2]) for i in range(0, len(widths), 2)]
        if layout == "NHWC" and len(pairs) == 4:
            pairs = [pairs[a] for a in (0, 3, 1, 2)]
        return Node("pad", inputs, output, attrs | {"pads": pairs, "value_q": int(float(pad.attrs.pad_value))})
    if kind == "clip_int8":
        return Node("clip", inputs, output, attrs | {"int_clip": (int(prim_number(comp.result.args[1])),
                                                                  int(prim_number(comp.result.args[2])))})
    raise UnsupportedCompositeError(f"no int8 lowering for composite ccompiler.{kind}")


def _logical_axis(axis: int, rank: int, layout: str) -> int:
    axis %= rank
    return _LOGICAL_FROM_NHWC[axis] if layout == "NHWC" and rank == 4 else axis


def _record(quants: dict[int, ActivationQuant], value: int, quant: ActivationQuant) -> None:
    if quants.setdefault(value, quant) != quant:
        raise UnsupportedCompositeError(
            f"value {value} is read with two encodings: {quants[value]} and {quant}"
        )


def _region_layout(region: relax.Function) -> str:
    """NHWC when the region's convolutions or pools say so (TFLite models), else NCHW."""
    layouts = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            a = expr.attrs
            for name in ("data_layout", "layout"):
                if a is not None and hasattr(a, name) and str(getattr(a, name)) in ("NCHW", "NHWC"):
                    layouts.add(str(getattr(a, name)))

    relax.analysis.post_order_visit(region, visit)
    if len(layouts) > 1:
        raise UnsupportedCompositeError(f"region mixes layouts {sorted(layouts)}")
    return layouts.pop() if layouts else "NCHW"


def extract_graph(name: str, region: relax.Function) -> Graph:
    """Read a ``Codegen=ccompiler`` region function into a :class:`Graph`."""
    layout = _region_layout(region)
    value_of: dict[relax.Var, int] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    quants: dict[int, ActivationQuant] = {}
    for param in region.params:
        value_of[param] = len(shapes)
        shapes[len(shapes)] = _logical_shape(_shape(param), layout)
    input_dtypes = [str(param.ty.dtype) for param in region.params]
    composites: dict[relax.Var, relax.Function] = {}
    tuples: dict[relax.Var, list[relax.Expr]] = {}
    float_outputs: dict[relax.Var, int] = {}  # a model's own dequantize at the region's exit
    nodes: list[Node] = []
    for block in region.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                func = composites[value.op]
                composite = str(func.attrs["Composite"])
                kind = composite.split(".", 1)[1]
                args = [f for a in value.args for f in (a.fields if isinstance(a, relax.Tuple) else [a])]
                inputs = [value_of[a] for a in args]
                if kind == "quantize":  # the model's float input, quantized on the way in
                    _record(quants, inputs[0], _quant_of(_Composite(func).result))
                    value_of[binding.var] = inputs[0]
                    continue
                if kind == "dequantize":  # the model's float output
                    _record(quants, inputs[0], _quant_of(_Composite(func).result))
                    value_of[binding.var] = inputs[0]
                    float_outputs[binding.var] = inputs[0]
                    continue
                output = len(shapes)
                shapes[output] = _logical_shape(_shape(binding.var), layout)
                if kind.startswith(("qdq_", "quantize")) or kind.endswith("_int8"):
                    node = _qdq_node(kind, func, inputs, output, layout, quants, shapes)
                else:
                    node = _node_from_composite(kind, func, inputs, output, shapes)
                node.composite = composite
                nodes.append(node)
                value_of[binding.var] = output
            elif isinstance(value, relax.Tuple):
                tuples[binding.var] = list(value.fields)
            elif isinstance(value, relax.Var) and value in value_of:
                value_of[binding.var] = value_of[value]
                if value in float_outputs:
                    float_outputs[binding.var] = float_outputs[value]
            else:
                raise UnsupportedCompositeError(f"unexpected binding in region {name}: {value}")
    body = region.body.body
    out_vars = list(body.fields) if isinstance(body, relax.Tuple) else tuples.get(body, [body])
    outputs = [value_of[f] for f in out_vars]
    output_dtypes = ["float32" if var in float_outputs else str(var.ty.dtype) for var in out_vars]
    graph = Graph(name, list(range(len(region.params))), outputs, shapes, nodes, quants, layout,
                  input_dtypes, output_dtypes)
    if quants:
        _propagate_quants(graph)
    return graph


def _propagate_quants(graph: Graph) -> None:
    """Ops that only move int8 values (TFLite's pooling, reshape, pad and clip on int8) share one
    encoding between input and output: what either side names, the other gets (a model's input
    that is padded first, for instance, has its scale only on the pad's output)."""
    movers = [n for n in graph.nodes if n.op in ("max_pool2d", "avg_pool2d", "reshape", "pad", "clip")]
    changed = True
    while changed:
        changed = False
        for node in movers:
            known = [v for v in (node.inputs[0], node.output) if v in graph.quants]
            for v in (node.inputs[0], node.output):
                if known and v not in graph.quants:
                    graph.quants[v] = graph.quants[known[0]]
                    changed = True
    missing = [v for v in range(graph.num_values) if v not in graph.quants]
    if missing:
        raise UnsupportedCompositeError(f"region {graph.name}: no scale or zero point known for values {missing}")


def _pad_to_windows(x: torch.Tensor, a: dict, out_hw, value: float) -> torch.Tensor:
    """Pad explicitly, bottom/right as far as the last window of out_hw reaches, so that
    ceil_mode needs no special case."""
    top, left, bottom, right = a["padding"]
    (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
    h, w = x.shape[2:]
    bottom = max(bottom, (out_hw[0] - 1) * sh + (kh - 1) * dh + 1 - top - h)
    right = max(right, (out_hw[1] - 1) * sw + (kw - 1) * dw + 1 - left - w)
    return F.pad(x, (left, right, top, bottom), value=value)


def slicing(attrs: dict) -> tuple[slice, ...]:
    """A slice node's index, whatever the batch (the batch axis is never sliced)."""
    return (slice(None),) + tuple(slice(b, e, s) for b, e, s in zip(attrs["begin"][1:], attrs["end"][1:], attrs["stride"][1:]))


def run_float_node(node: Node, args: list[torch.Tensor], out_shape: tuple[int, ...]) -> torch.Tensor:
    """One node in float32 with PyTorch, on logical (NCHW) tensors."""
    a = node.attrs
    x = args[0]
    if node.op == "conv2d":
        top, left, bottom, right = a["padding"]
        bias = torch.from_numpy(node.consts["bias"]) if "bias" in node.consts else None
        y = F.conv2d(F.pad(x, (left, right, top, bottom)), torch.from_numpy(node.consts["weight"]), bias,
                     a["strides"], 0, a["dilation"], a["groups"])
    elif node.op == "max_pool2d":
        padded = _pad_to_windows(x, a, out_shape[2:], float("-inf"))
        y = F.max_pool2d(padded, a["pool_size"], a["strides"], 0, a["dilation"])[:, :, : out_shape[2], : out_shape[3]]
    elif node.op == "avg_pool2d":
        top, left = a["padding"][:2]
        y = F.avg_pool2d(x, a["pool_size"], a["strides"], (top, left), a["ceil_mode"], a["count_include_pad"])
    elif node.op == "add":
        y = x + args[1]
    elif node.op == "mul":
        y = x * args[1]
    elif node.op == "clip":
        y = x
    elif node.op == "global_avg_pool2d":
        y = x.mean(dim=(2, 3))
    elif node.op == "reshape":
        y = x
    elif node.op == "transpose":
        y = x.permute(*a["axes"])
    elif node.op == "concat":
        y = torch.cat(args, dim=a["axis"])
    elif node.op == "slice":
        y = x[slicing(a)]
    elif node.op == "pad":
        flat = [p for before_after in reversed(a["pads"]) for p in before_after]
        y = F.pad(x, flat, value=a["value"])
    elif node.op == "dense":
        bias = torch.from_numpy(node.consts["bias"]) if "bias" in node.consts else None
        y = F.linear(x, torch.from_numpy(node.consts["weight"]), bias)
    elif node.op == "lut":
        y = activations.apply(a["function"], x, a["alpha"])
    else:
        raise UnsupportedCompositeError(f"no float lowering for {node.op}")
    if a.get("clip"):
        y = torch.clamp(y, *a["clip"])
    return y.reshape((x.shape[0],) + tuple(out_shape[1:]))


def run_float(graph: Graph, inputs: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """Every value of the graph in float32 for a batch of inputs (batch on axis 0).

    The graph's shapes are those of the exported batch; any batch size runs, since no composite
    mixes samples.
    """
    values: dict[int, torch.Tensor] = dict(zip(graph.inputs, inputs))
    with torch.no_grad():
        for node in graph.nodes:
            values[node.output] = run_float_node(
                node, [values[i] for i in node.inputs], graph.shapes[node.output]
            )
    return values
