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

from .patterns import prim_number


@dataclass
class Node:
    """One composite: `op` reads `inputs` (value ids) and defines value `output`."""

    # conv2d | dense | add | clip | max_pool2d | avg_pool2d | global_avg_pool2d | concat |
    # reshape | transpose | pad
    op: str
    inputs: list[int]
    output: int
    attrs: dict = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    composite: str = ""  # the ccompiler.<kind> name it came from


@dataclass
class Graph:
    """A region: values 0..len(inputs)-1 are its parameters; every node defines one value."""

    name: str
    inputs: list[int]
    outputs: list[int]
    shapes: dict[int, tuple[int, ...]]
    nodes: list[Node]

    @property
    def num_values(self) -> int:
        return len(self.shapes)


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


def _node_from_composite(kind: str, func: relax.Function, inputs: list[int], output: int, in_shape) -> Node:
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
    if kind.startswith("add"):
        return Node("add", inputs, output, {"clip": act})
    if kind in ("relu", "clip"):
        return Node("clip", inputs, output, {"clip": act})
    if kind == "global_avg_pool2d":
        return Node("global_avg_pool2d", inputs, output)
    if kind == "reshape":
        return Node("reshape", inputs, output)
    if kind == "transpose":
        return Node("transpose", inputs, output, {"axes": _ints(calls["relax.permute_dims"].attrs.axes)})
    if kind == "concat":
        return Node("concat", inputs, output, {"axis": int(calls["relax.concat"].attrs.axis)})
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


def extract_graph(name: str, region: relax.Function) -> Graph:
    """Read a ``Codegen=ccompiler`` region function into a :class:`Graph`."""
    value_of: dict[relax.Var, int] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    for param in region.params:
        value_of[param] = len(shapes)
        shapes[len(shapes)] = _shape(param)
    composites: dict[relax.Var, relax.Function] = {}
    tuples: dict[relax.Var, list[int]] = {}
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
                output = len(shapes)
                shapes[output] = _shape(binding.var)
                args = [f for a in value.args for f in (a.fields if isinstance(a, relax.Tuple) else [a])]
                inputs = [value_of[a] for a in args]
                node = _node_from_composite(kind, func, inputs, output, shapes[inputs[0]])
                node.composite = composite
                nodes.append(node)
                value_of[binding.var] = output
            elif isinstance(value, relax.Tuple):
                tuples[binding.var] = [value_of[f] for f in value.fields]
            elif isinstance(value, relax.Var) and value in value_of:
                value_of[binding.var] = value_of[value]
            else:
                raise UnsupportedCompositeError(f"unexpected binding in region {name}: {value}")
    body = region.body.body
    if isinstance(body, relax.Tuple):
        outputs = [value_of[f] for f in body.fields]
    elif body in tuples:
        outputs = tuples[body]
    else:
        outputs = [value_of[body]]
    return Graph(name, list(range(len(region.params))), outputs, shapes, nodes)


def _pad_to_windows(x: torch.Tensor, a: dict, out_hw, value: float) -> torch.Tensor:
    """Pad explicitly, bottom/right as far as the last window of out_hw reaches, so that
    ceil_mode needs no special case."""
    top, left, bottom, right = a["padding"]
    (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
    h, w = x.shape[2:]
    bottom = max(bottom, (out_hw[0] - 1) * sh + (kh - 1) * dh + 1 - top - h)
    right = max(right, (out_hw[1] - 1) * sw + (kw - 1) * dw + 1 - left - w)
    return F.pad(x, (left, right, top, bottom), value=value)


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
    elif node.op == "pad":
        flat = [p for before_after in reversed(a["pads"]) for p in before_after]
        y = F.pad(x, flat, value=a["value"])
    elif node.op == "dense":
        bias = torch.from_numpy(node.consts["bias"]) if "bias" in node.consts else None
        y = F.linear(x, torch.from_numpy(node.consts["weight"]), bias)
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
