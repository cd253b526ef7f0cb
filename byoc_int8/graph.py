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


@dataclass
class Node:
    """One composite: `op` reads `inputs` (value ids) and defines value `output`."""

    op: str  # conv2d | max_pool2d | add | global_avg_pool2d | reshape | dense
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


def _node_from_composite(kind: str, func: relax.Function, inputs: list[int], output: int) -> Node:
    calls = _calls(func)
    relu = "relax.nn.relu" in calls
    if kind.startswith("conv2d"):
        conv = calls["relax.nn.conv2d"]
        weight = _const(conv.args[1], "conv2d weight").astype(np.float32)
        a = conv.attrs
        pad = _ints(a.padding)  # top, left, bottom, right
        consts = {"weight": weight}
        bias = _bias_for(calls, weight.shape[0])
        if bias is not None:
            consts["bias"] = bias
        attrs = {
            "strides": _ints(a.strides),
            "padding": pad,
            "dilation": _ints(a.dilation),
            "relu": relu,
        }
        return Node("conv2d", inputs, output, attrs, consts)
    if kind == "max_pool2d":
        pool = calls["relax.nn.max_pool2d"]
        a = pool.attrs
        attrs = {
            "pool_size": _ints(a.pool_size),
            "strides": _ints(a.strides),
            "padding": _ints(a.padding),
            "dilation": _ints(a.dilation),
            "ceil_mode": bool(a.ceil_mode),
        }
        return Node("max_pool2d", inputs, output, attrs)
    if kind.startswith("add"):
        return Node("add", inputs, output, {"relu": relu})
    if kind == "global_avg_pool2d":
        return Node("global_avg_pool2d", inputs, output)
    if kind == "reshape":
        return Node("reshape", inputs, output)
    if kind.startswith("dense"):
        matmul = calls["relax.matmul"]
        weight = _const(matmul.args[1], "dense weight").astype(np.float32)  # (depth, units)
        consts = {"weight": np.ascontiguousarray(weight.T)}  # (units, depth)
        bias = _bias_for(calls, weight.shape[1])
        if bias is not None:
            consts["bias"] = bias
        return Node("dense", inputs, output, {"relu": relu}, consts)
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
                node = _node_from_composite(kind, func, [value_of[a] for a in value.args], output)
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


def run_float_node(node: Node, args: list[torch.Tensor], out_shape: tuple[int, ...]) -> torch.Tensor:
    """One node in float32 with PyTorch, on logical (NCHW) tensors."""
    a = node.attrs
    if node.op == "conv2d":
        top, left, bottom, right = a["padding"]
        x = F.pad(args[0], (left, right, top, bottom))
        bias = torch.from_numpy(node.consts["bias"]) if "bias" in node.consts else None
        y = F.conv2d(x, torch.from_numpy(node.consts["weight"]), bias, a["strides"], 0, a["dilation"])
    elif node.op == "max_pool2d":
        # Pad explicitly, bottom/right as far as the last window of out_shape reaches, so that
        # ceil_mode needs no special case: windows only ever see real values or -inf.
        top, left, bottom, right = a["padding"]
        (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
        h, w = args[0].shape[2:]
        bottom = max(bottom, (out_shape[2] - 1) * sh + (kh - 1) * dh + 1 - top - h)
        right = max(right, (out_shape[3] - 1) * sw + (kw - 1) * dw + 1 - left - w)
        x = F.pad(args[0], (left, right, top, bottom), value=float("-inf"))
        y = F.max_pool2d(x, a["pool_size"], a["strides"], 0, a["dilation"])[:, :, : out_shape[2], : out_shape[3]]
    elif node.op == "add":
        y = args[0] + args[1]
    elif node.op == "global_avg_pool2d":
        y = args[0].mean(dim=(2, 3))
    elif node.op == "reshape":
        y = args[0]
    elif node.op == "dense":
        bias = torch.from_numpy(node.consts["bias"]) if "bias" in node.consts else None
        y = F.linear(args[0], torch.from_numpy(node.consts["weight"]), bias)
    else:
        raise UnsupportedCompositeError(f"no float lowering for {node.op}")
    if a.get("relu"):
        y = torch.relu(y)
    return y.reshape((args[0].shape[0],) + tuple(out_shape[1:]))


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
