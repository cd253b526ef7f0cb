"""Composite patterns offered to the ``ccompiler`` codegen, with the checks that guard them.

Each pattern is a ``ccompiler.<kind>`` composite. Its check answers "can the int8 kernels run
this instance?" and, when the answer is no, records a reason a person can read; the partitioner
reports those reasons for every op that stays on the host.

Priority: TVM tries patterns registered later first, so :data:`PATTERN_TABLE` lists the most
specific (longest) patterns last.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.dpl import DFPattern, is_const, is_op, is_tuple, wildcard
from tvm.relax.transform import PatternCheckContext

from . import profiles
from .qarith import MAX_DOT_TERMS

# Largest tensor rank of the layout kernels (B8_MAX_RANK in byoc_int8.h).
MAX_RANK = 6

CODEGEN_NAME = "ccompiler"

# Reasons given by checks during the current partitioning, keyed by the refused root's variable; one
# record per thread (TVM runs the checks on the thread that runs FuseOpsByPattern), so that two
# partitions in two threads cannot mix their reasons.
_local = threading.local()


def _refusals() -> dict[relax.Var | str, str]:
    if not hasattr(_local, "refusals"):
        _local.refusals = {}
    return _local.refusals


def take_refusals() -> dict[relax.Var | str, str]:
    """Return and forget the reasons this thread's pattern checks recorded since the last call,
    keyed by the variable the refused call defines (the Var itself: imported programs can hold
    two variables of one name)."""
    refusals = dict(_refusals())
    _refusals().clear()
    return refusals


def prim_number(expr: relax.Expr) -> float:
    """The number held by a PrimValue argument (clip bounds arrive as int or float PrimValues)."""
    value = expr.value
    return float(value.value if hasattr(value, "value") else value)


def _static_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):
        return None


def _dtype(expr: relax.Expr) -> str | None:
    return expr.ty.dtype if isinstance(expr.ty, relax.TensorType) else None


def _tensor_problem(expr: relax.Expr, what: str, rank: int | None = None) -> str | None:
    shape = _static_shape(expr)
    if shape is None:
        return f"{what} has no static shape"
    if _dtype(expr) != "float32":
        return f"{what} is {_dtype(expr)}, only float32 graphs are quantized"
    if rank is not None and len(shape) != rank:
        return f"{what} has rank {len(shape)}, expected {rank}"
    return None


def _channel_bias_problem(bias: relax.Expr, channels: int, rank: int, channel_axis: int = 1) -> str | None:
    """A bias must hold one value per channel, on the channel axis of the op's output (1 for a
    conv2d, the last for a dense layer)."""
    shape = _static_shape(bias)
    if shape is None or len(shape) > rank:
        return f"bias of shape {shape} does not broadcast over a rank-{rank} output"
    padded = (1,) * (rank - len(shape)) + shape
    if padded != tuple(channels if axis == channel_axis % rank else 1 for axis in range(rank)):
        return f"bias of shape {shape} is not one value per output channel ({channels})"
    return None


def _check_conv2d(ctx: PatternCheckContext) -> str | None:
    conv = ctx.annotated_expr["conv"]
    attrs = conv.attrs
    problem = _tensor_problem(conv.args[0], "conv2d input", 4) or _tensor_problem(
        conv.args[1], "conv2d weight", 4
    )
    if problem:
        return problem
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" or attrs.out_layout != "NCHW":
        return f"conv2d layout {attrs.data_layout}/{attrs.kernel_layout} (NCHW/OIHW only)"
    groups, in_c = int(attrs.groups), _static_shape(conv.args[0])[1]
    out_c, group_in = _static_shape(conv.args[1])[:2]
    if in_c % groups or out_c % groups or group_in * groups != in_c:
        return f"conv2d groups={groups} do not divide {in_c} input / {out_c} output channels"
    patch = math.prod(_static_shape(conv.args[1])[1:])
    if patch > MAX_DOT_TERMS:
        return f"conv2d dot products of {patch} terms (more than {MAX_DOT_TERMS} could overflow the int32 accumulator)"
    if "bias" in ctx.annotated_expr:
        return _channel_bias_problem(ctx.annotated_expr["bias"], out_c, 4) or _activation_problem(ctx)
    return _activation_problem(ctx)


def _activation_problem(ctx: PatternCheckContext) -> str | None:
    """A fused or standalone clip needs constant bounds lo <= hi."""
    clip = ctx.annotated_expr.get("clip")
    if clip is None:
        return None
    try:
        lo, hi = prim_number(clip.args[1]), prim_number(clip.args[2])
    except (AttributeError, TypeError, ValueError):
        return "clip bounds are not constants"
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        return f"clip bounds ({lo}, {hi}) do not form a range"
    return None


def _pool_problem(pool: relax.Call, name: str) -> str | None:
    if pool.attrs.layout != "NCHW" or pool.attrs.out_layout != "NCHW":
        return f"{name} layout {pool.attrs.layout} (NCHW only)"
    return _tensor_problem(pool.args[0], f"{name} input", 4)


def _check_max_pool2d(ctx: PatternCheckContext) -> str | None:
    return _pool_problem(ctx.annotated_expr["root"], "max_pool2d")


def _check_avg_pool2d(ctx: PatternCheckContext) -> str | None:
    pool = ctx.annotated_expr["root"]
    problem = _pool_problem(pool, "avg_pool2d")
    if problem:
        return problem
    top, left, bottom, right = (int(p) for p in pool.attrs.padding)
    if (top, left) != (bottom, right):
        return f"avg_pool2d with asymmetric padding {[top, left, bottom, right]}"
    if any(int(d) != 1 for d in pool.attrs.dilation):
        return "avg_pool2d with dilation"
    return None


def _check_adaptive_avg_pool2d(ctx: PatternCheckContext) -> str | None:
    pool = ctx.annotated_expr["root"]
    problem = _pool_problem(pool, "adaptive_avg_pool2d")
    if problem:
        return problem
    h, w = _static_shape(pool.args[0])[2:]
    out_h, out_w = (int(d) for d in pool.attrs.output_size) if pool.attrs.output_size else (h, w)
    if (out_h, out_w) != (1, 1) and (h % out_h or w % out_w):
        return f"adaptive_avg_pool2d {h}x{w} -> {out_h}x{out_w} has unequal windows"
    return None


def _operands_problem(call: relax.Call, what: str, constant_reason: str) -> str | None:
    """Both operands of an elementwise op are float tensors (not constants) with static shapes."""
    for operand in call.args:
        if isinstance(operand, tvm.ir.GenericConst):
            return constant_reason
        problem = _tensor_problem(operand, f"{what} operand")
        if problem:
            return problem
    return None


def _check_add(ctx: PatternCheckContext) -> str | None:
    add = ctx.annotated_expr["add"]
    lhs, rhs = add.args
    problem = _operands_problem(add, "add", "add of a constant that is not a fused bias")
    if problem:
        return problem
    if _static_shape(lhs) != _static_shape(rhs):
        return f"broadcasting add {_static_shape(lhs)} + {_static_shape(rhs)}"
    return _activation_problem(ctx)


def _check_mul(ctx: PatternCheckContext) -> str | None:
    """Elementwise product of two tensors, the second the same shape or one value per (sample,
    channel) broadcast over H and W (squeeze-and-excitation's gate)."""
    mul = ctx.annotated_expr["mul"]
    lhs, rhs = mul.args
    problem = _operands_problem(mul, "multiply", "multiply by a constant (only products of two tensors)")
    if problem:
        return problem
    a, b = _static_shape(lhs), _static_shape(rhs)
    gate = len(a) == len(b) == 4 and (b == (a[0], a[1], 1, 1) or a == (b[0], b[1], 1, 1))
    if a != b and not gate:
        return f"broadcasting multiply {a} * {b} (same shapes, or (N, C, 1, 1) over (N, C, H, W))"
    return _activation_problem(ctx)


def _check_clip(ctx: PatternCheckContext) -> str | None:
    return _tensor_problem(ctx.annotated_expr["root"].args[0], "clip input") or _activation_problem(ctx)


def _check_mean(ctx: PatternCheckContext) -> str | None:
    mean = ctx.annotated_expr["root"]
    problem = _tensor_problem(mean.args[0], "mean input", 4)
    if problem:
        return problem
    axes = sorted(int(a) % 4 for a in (mean.attrs.axis or []))
    if axes != [2, 3]:
        return f"mean over axes {axes} (only global average pooling over H, W)"
    return None


def _layout_problem(op: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...] | None) -> str | None:
    """Layout ops run on any tensor up to the kernels' rank, but must keep the batch axis first:
    calibration runs many samples as one batch."""
    if out_shape is None:
        return f"{op} to a dynamic shape"
    if max(len(in_shape), len(out_shape)) > MAX_RANK:
        return f"{op} of rank {max(len(in_shape), len(out_shape))} (at most {MAX_RANK})"
    if not in_shape or not out_shape or in_shape[0] != out_shape[0]:
        return f"{op} {in_shape} -> {out_shape} changes the batch axis"
    return None


def _check_reshape(ctx: PatternCheckContext) -> str | None:
    reshape = ctx.annotated_expr["root"]
    return _tensor_problem(reshape.args[0], "reshape input") or _layout_problem(
        "reshape", _static_shape(reshape.args[0]), _static_shape(reshape)
    )


def _check_transpose(ctx: PatternCheckContext) -> str | None:
    transpose = ctx.annotated_expr["root"]
    problem = _tensor_problem(transpose.args[0], "permute_dims input")
    if problem:
        return problem
    axes = [int(a) for a in transpose.attrs.axes] if transpose.attrs.axes is not None else None
    if axes is not None and axes[0] != 0:
        return f"permute_dims {axes} moves the batch axis"
    return _layout_problem("permute_dims", _static_shape(transpose.args[0]), _static_shape(transpose))


def slice_bounds(call: relax.Call) -> tuple[list[int], list[int], list[int]] | None:
    """(begin, end, stride) on every axis of a strided_slice with constant, in-range arguments
    and positive strides; None otherwise."""
    shape = _static_shape(call.args[0])
    try:
        axes, begin, end, strides = ([int(v.value) for v in arg.fields] for arg in call.args[1:5])
    except (AttributeError, TypeError, ValueError):
        return None
    full_begin, full_end, full_stride = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, b, e, step in zip(axes, begin, end, strides):
        axis %= len(shape)
        if step < 1:
            return None
        b, e = (b + shape[axis] if b < 0 else b), (e + shape[axis] if e < 0 else e)
        full_begin[axis], full_end[axis], full_stride[axis] = max(0, min(b, shape[axis])), max(0, min(e, shape[axis])), step
    return full_begin, full_end, full_stride


def _check_slice(ctx: PatternCheckContext) -> str | None:
    call = ctx.annotated_expr["root"]
    problem = _tensor_problem(call.args[0], "strided_slice input")
    if problem:
        return problem
    if len(call.args) < 5 or slice_bounds(call) is None:
        return "strided_slice with dynamic bounds or negative strides"
    if slice_bounds(call)[0][0] != 0 or slice_bounds(call)[1][0] != _static_shape(call.args[0])[0]:
        return "strided_slice along the batch axis"
    return _layout_problem("strided_slice", _static_shape(call.args[0]), _static_shape(call))


def _check_concat(ctx: PatternCheckContext) -> str | None:
    concat = ctx.annotated_expr["root"]
    fields = concat.args[0].fields if isinstance(concat.args[0], relax.Tuple) else None
    if fields is None:
        return "concat of a tuple that is not built in place"
    for field in fields:
        problem = _tensor_problem(field, "concat input")
        if problem:
            return problem
    rank = len(_static_shape(fields[0]))
    if int(concat.attrs.axis) % rank == 0:
        return "concat along the batch axis"
    return _layout_problem("concat", _static_shape(fields[0]), _static_shape(concat))


def _check_pad(ctx: PatternCheckContext) -> str | None:
    pad = ctx.annotated_expr["root"]
    problem = _tensor_problem(pad.args[0], "pad input")
    if problem:
        return problem
    if pad.attrs.pad_mode != "constant":
        return f"pad mode {pad.attrs.pad_mode!r} (constant only)"
    widths = [int(w) for w in pad.attrs.pad_width]
    if widths[0] or widths[1]:
        return "pad along the batch axis"
    if min(widths) < 0 or not math.isfinite(float(pad.attrs.pad_value)):
        return "negative padding or a non-finite pad value"
    return _layout_problem("pad", _static_shape(pad.args[0]), _static_shape(pad))


def _check_dense(ctx: PatternCheckContext) -> str | None:
    matmul = ctx.annotated_expr["matmul"]
    problem = _tensor_problem(matmul.args[1], "dense weight", 2) or _tensor_problem(matmul.args[0], "dense input")
    if problem:
        return problem
    if len(_static_shape(matmul.args[0])) not in (2, 3):
        return f"dense over a rank-{len(_static_shape(matmul.args[0]))} input (2 or 3 only)"
    depth = _static_shape(matmul.args[1])[0]
    if depth > MAX_DOT_TERMS:
        return f"dense dot products of {depth} terms (more than {MAX_DOT_TERMS} could overflow the int32 accumulator)"
    if "bias" in ctx.annotated_expr:
        units = _static_shape(matmul.args[1])[1]
        problem = _channel_bias_problem(ctx.annotated_expr["bias"], units, len(_static_shape(matmul.args[0])), -1)
    return problem or _activation_problem(ctx)


def _leak_problem(ctx: PatternCheckContext) -> str | None:
    """A composite has one result: a value inside it that is also used outside (a residual that
    reads the conv output before its relu, an ELU's relu(x) next to its exp(x)) cannot be fused."""
    root = ctx.value_to_bound_var.get(ctx.matched_expr)
    inside = set(ctx.matched_bindings.keys())
    for var in inside:
        if var.same_as(root):
            continue
        if any(user not in inside for user in ctx.var_usages.get(var, [])):
            return f"an intermediate value ({var.name}) is also used outside the pattern"
    return None


@contextlib.contextmanager
def using_profile(profile: profiles.Profile) -> Iterator[None]:
    """Pattern checks on this thread refuse what `profile` rules out (see profiles.py)."""
    previous = getattr(_local, "profile", profiles.DEFAULT_PROFILE)
    _local.profile = profile
    try:
        yield
    finally:
        _local.profile = previous


def _geometry(ctx: PatternCheckContext) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
    """(channels, kernel, strides) of a composite's convolution, dense layer or pool."""
    ann = ctx.annotated_expr
    if "conv" in ann:
        conv = ann["conv"]
        weight, layout = _static_shape(conv.args[1]), str(conv.attrs.kernel_layout)
        data, data_layout = _static_shape(conv.args[0]), str(conv.attrs.data_layout)
        channels = max(weight[layout.index("O")], data[data_layout.index("C")])
        return channels, (weight[layout.index("H")], weight[layout.index("W")]), tuple(int(v) for v in conv.attrs.strides)
    if "matmul" in ann:
        matmul = ann["matmul"]
        return max(_static_shape(matmul)[-1], _static_shape(matmul.args[0])[-1]), (1, 1), (1, 1)
    root = ann.get("root_op", ann["root"])
    if isinstance(root, relax.Call) and root.op.name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        data = _static_shape(root.args[0])
        return (data[str(root.attrs.layout).index("C")], tuple(int(v) for v in root.attrs.pool_size),
                tuple(int(v) for v in root.attrs.strides))
    return None


def conv_scratch_bytes(conv: relax.Call) -> int:
    """Arena scratch of a convolution (codegen.emit_c.scratch_bytes): the gathered patch,
    in_channels / groups x kernel_h x kernel_w bytes, none for a depthwise one."""
    weight, layout = _static_shape(conv.args[1]), str(conv.attrs.kernel_layout)
    data, data_layout = _static_shape(conv.args[0]), str(conv.attrs.data_layout)
    groups = int(conv.attrs.groups)
    if groups > 1 and groups == data[data_layout.index("C")]:
        return 0
    return weight[layout.index("I")] * weight[layout.index("H")] * weight[layout.index("W")]


def _profile_problem(kind: str, ctx: PatternCheckContext) -> str | None:
    profile = getattr(_local, "profile", profiles.DEFAULT_PROFILE)
    if profile is profiles.DEFAULT_PROFILE:
        return None
    ann = ctx.annotated_expr
    main = next((ann[k] for k in ("conv", "matmul", "add", "mul", "root_op") if k in ann), ann["root"])
    tensors = [a for a in getattr(main, "args", []) if isinstance(a, (relax.Var, relax.Call))]
    shapes = [s for s in (_static_shape(t) for t in [*tensors, ann["root"]]) if s is not None]
    try:
        geometry = _geometry(ctx)
        scratch = conv_scratch_bytes(ann["conv"]) if "conv" in ann else 0
    except (TypeError, ValueError, IndexError):
        geometry, scratch = None, 0
    return profiles.composite_problem(profile, kind, geometry, profiles.arena_bytes(shapes, scratch))


def _recorded(spec: "CompositeSpec") -> Callable[[PatternCheckContext], bool]:
    def run(ctx: PatternCheckContext) -> bool:
        reason = _profile_problem(spec.kind, ctx) or _leak_problem(ctx) or spec.check(ctx)
        if reason is not None:
            root = ctx.annotated_expr["root"]
            var = ctx.value_to_bound_var.get(root)
            _refusals()[var if var is not None else str(root)] = reason
        return reason is None

    return run


@dataclass(frozen=True)
class CompositeSpec:
    """One ``ccompiler.<kind>`` composite: its pattern, named sub-expressions and check."""

    kind: str
    pattern: DFPattern
    annotations: dict[str, DFPattern]
    check: Callable[[PatternCheckContext], str | None]

    @property
    def name(self) -> str:
        return f"{CODEGEN_NAME}.{self.kind}"


def _with_activation(root: DFPattern, ann: dict, activation: str) -> DFPattern:
    """root, root -> relu, or root -> clip (relu6, hardtanh, clamp)."""
    if activation == "relu":
        return is_op("relax.nn.relu")(root)
    if activation == "clip":
        ann["clip"] = is_op("relax.clip")(root, wildcard(), wildcard())
        return ann["clip"]
    return root


def _conv2d(bias: bool, activation: str) -> CompositeSpec:
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    ann = {"conv": conv}
    root = conv
    if bias:
        root = is_op("relax.add")(conv, ann.setdefault("bias", is_const()))
    root = ann["root"] = _with_activation(root, ann, activation)
    kind = "conv2d" + ("_bias" if bias else "") + (f"_{activation}" if activation else "")
    return CompositeSpec(kind, root, ann, _check_conv2d)


def _dense(bias: bool, activation: str) -> CompositeSpec:
    matmul = is_op("relax.matmul")(wildcard(), is_const())
    ann = {"matmul": matmul}
    root = matmul
    if bias:
        b = ann["bias"] = is_const()
        root = is_op("relax.add")(matmul, b) | is_op("relax.add")(b, matmul)
    root = ann["root"] = _with_activation(root, ann, activation)
    kind = "dense" + ("_bias" if bias else "") + (f"_{activation}" if activation else "")
    return CompositeSpec(kind, root, ann, _check_dense)


def _add(activation: str) -> CompositeSpec:
    add = is_op("relax.add")(wildcard(), wildcard())
    ann = {"add": add}
    root = ann["root"] = _with_activation(add, ann, activation)
    return CompositeSpec("add" + (f"_{activation}" if activation else ""), root, ann, _check_add)


def _mul(activation: str) -> CompositeSpec:
    mul = is_op("relax.multiply")(wildcard(), wildcard())
    ann = {"mul": mul}
    root = ann["root"] = _with_activation(mul, ann, activation)
    return CompositeSpec("mul" + (f"_{activation}" if activation else ""), root, ann, _check_mul)


def _single(kind: str, op: str, arity: int, check: Callable[[PatternCheckContext], str | None]) -> CompositeSpec:
    root = is_op(op)(*[wildcard() for _ in range(arity)])
    return CompositeSpec(kind, root, {"root": root}, check)


def _clip() -> CompositeSpec:
    root = is_op("relax.clip")(wildcard(), wildcard(), wildcard())
    return CompositeSpec("clip", root, {"root": root, "clip": root}, _check_clip)


ACTIVATIONS = ("", "relu", "clip")


# ---- Lookup-table activations: a function of one tensor, as torch.export decomposes it ---------


def _const_value(expr: relax.Expr) -> float | None:
    if isinstance(expr, tvm.ir.GenericConst) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(-1)[0])
    return None


def _check_lut(ctx: PatternCheckContext) -> str | None:
    """The input is a float tensor, and every constant of the decomposition has the value that
    makes it the named function (hardswish's 3 and 6, ELU's 1, mish's softplus threshold 20)."""
    problem = _tensor_problem(ctx.annotated_expr["input"], "activation input")
    if problem:
        return problem
    for name, call in ctx.annotated_expr.items():
        if name.startswith("const_"):
            want = float(name.split("_", 1)[1].replace("m", "-"))
            if _const_value(call) != want:
                return f"constant {_const_value(call)} where the activation has {want}"
        if name.startswith("clip_"):
            lo, hi = prim_number(call.args[1]), prim_number(call.args[2])
            want = {"clip_lower": (0.0, math.inf), "clip_upper": (-math.inf, 6.0), "clip_single": (0.0, 6.0)}[name]
            if (lo, hi) != want:
                return f"clip bounds ({lo}, {hi}) where relu6(x + 3) has {want}"
    if "elu_scale" in ctx.annotated_expr and (_const_value(ctx.annotated_expr["elu_scale"]) or 0.0) >= 0:
        return "ELU with a non-positive alpha"
    return None


def _relu6_of_x_plus_3(x: DFPattern, ann: dict) -> DFPattern:
    """relu6(x + 3) as torch.export writes it: clip(x + 3, 0, 6) (F.relu6), or
    clip(clip(x + 3, 0, inf), -inf, 6) (hardsigmoid, hardswish)."""
    shifted = is_op("relax.add")(x, ann.setdefault("const_3", is_const()))
    lower = ann["clip_lower"] = is_op("relax.clip")(shifted, wildcard(), wildcard())
    upper = ann["clip_upper"] = is_op("relax.clip")(lower, wildcard(), wildcard())
    single = ann["clip_single"] = is_op("relax.clip")(shifted, wildcard(), wildcard())
    return upper | single


def _lut_body(function: str, x: Callable[[], DFPattern], ann: dict) -> DFPattern:
    """The float graph of `function` as torch.export (or TVM's importers) write it; `x()` is the
    pattern of one use of its input."""
    if function in ("sigmoid", "tanh"):
        root = is_op(f"relax.{function}")(x())
    elif function in ("gelu", "gelu_tanh"):
        root = is_op(f"relax.nn.{function}")(x())
    elif function == "leaky_relu":
        root = is_op("relax.nn.leakyrelu")(x())
    elif function == "silu":
        sig = is_op("relax.sigmoid")(x())
        root = is_op("relax.multiply")(x(), sig) | is_op("relax.multiply")(sig, x())
    elif function == "hardsigmoid":
        root = is_op("relax.divide")(_relu6_of_x_plus_3(x(), ann), ann.setdefault("const_6", is_const()))
    elif function == "hardswish":
        product = is_op("relax.multiply")(x(), _relu6_of_x_plus_3(x(), ann))
        root = is_op("relax.divide")(product, ann.setdefault("const_6", is_const()))
    elif function == "elu":  # -alpha * relu(1 - exp(x)) + relu(x)
        negative = is_op("relax.nn.relu")(is_op("relax.subtract")(ann.setdefault("const_1", is_const()), is_op("relax.exp")(x())))
        root = is_op("relax.add")(is_op("relax.multiply")(ann.setdefault("elu_scale", is_const()), negative),
                                  is_op("relax.nn.relu")(x()))
    elif function == "mish":  # x * tanh(softplus(x)), softplus with PyTorch's threshold 20
        softplus = is_op("relax.log")(is_op("relax.add")(is_op("relax.exp")(x()), ann.setdefault("const_1", is_const())))
        large = is_op("relax.greater")(x(), ann.setdefault("const_20", is_const()))
        root = is_op("relax.multiply")(x(), is_op("relax.tanh")(is_op("relax.where")(large, x(), softplus)))
    else:
        raise ValueError(f"no pattern for activation {function!r}")
    return root


def _lut(function: str) -> CompositeSpec:
    x = wildcard()
    ann: dict = {"input": x}
    root = ann["root"] = _lut_body(function, lambda: x, ann)
    return CompositeSpec(f"lut_{function}", root, ann, _check_lut)


LUT_FUNCTIONS = ("sigmoid", "tanh", "gelu", "gelu_tanh", "leaky_relu", "silu", "hardsigmoid", "hardswish", "elu", "mish")


# ---- QDQ composites: models quantized elsewhere (.tflite, ONNX QDQ) ----------------------------
# TVM's importers give dequantize -> float op -> quantize chains (int8 weights behind dequantize,
# scales and zero points as constants), NHWC for TFLite and NCHW for ONNX; TFLite's fused
# activations follow as a clip on the int8 result, and its pooling, reshape and pad run on int8
# directly. Each chain becomes one composite whose integers come from the model itself.

QDQ_LAYOUTS = ("NCHW", "NHWC")


def _dequantize(value: DFPattern) -> DFPattern:
    return is_op("relax.dequantize")(value, is_const(), is_const())


def _quantize(value: DFPattern) -> DFPattern:
    return is_op("relax.quantize")(value, is_const(), is_const())


def _scalar_quant_problem(call: relax.Call, what: str) -> str | None:
    """Activations are quantized per tensor: one scale and one zero point."""
    for arg, name in ((call.args[1], "scale"), (call.args[2], "zero point")):
        if not isinstance(arg, tvm.ir.GenericConst) or arg.value.numpy().size != 1:
            return f"{what} has a {name} per channel (activations are quantized per tensor)"
    return None


def _int8_problem(expr: relax.Expr, what: str) -> str | None:
    if _static_shape(expr) is None:
        return f"{what} has no static shape"
    if _dtype(expr) != "int8":
        return f"{what} is {_dtype(expr)}, not int8"
    return None


def _qdq_problem(ctx: PatternCheckContext) -> str | None:
    """Every activation dequantize / quantize of a QDQ composite: int8, one scale per tensor."""
    for name, call in ctx.annotated_expr.items():
        if name.startswith("dq") or name == "q":
            tensor = call.args[0] if name.startswith("dq") else call
            problem = _int8_problem(tensor, f"{call.op.name} of {name}") or _scalar_quant_problem(call, call.op.name)
            if problem:
                return problem
    return None


def _weight_problem(weight: relax.Call, what: str) -> str | None:
    if _dtype(weight.args[0]) != "int8":
        return f"{what} is {_dtype(weight.args[0])}, not int8"
    zero_point = weight.args[2].value.numpy()
    if np.any(zero_point != 0):
        return f"{what} has a nonzero zero point (weights are symmetric)"
    return None


def _check_qdq_conv2d(ctx: PatternCheckContext) -> str | None:
    conv = ctx.annotated_expr["conv"]
    a = conv.attrs
    layouts = {("NCHW", "OIHW"), ("NHWC", "HWIO"), ("NHWC", "HWOI")}
    if (a.data_layout, a.kernel_layout) not in layouts or a.out_layout != a.data_layout:
        return f"conv2d layout {a.data_layout}/{a.kernel_layout}"
    return _qdq_problem(ctx) or _weight_problem(ctx.annotated_expr["weight"], "conv2d weight") or _activation_problem(ctx)


def _check_qdq_dense(ctx: PatternCheckContext) -> str | None:
    matmul = ctx.annotated_expr["matmul"]
    if len(_static_shape(matmul.args[0]) or ()) != 2:
        return "dense over an input that is not (batch, features)"
    weight = next(ctx.annotated_expr[k] for k in ("weight_tflite", "weight_onnx") if k in ctx.annotated_expr)
    return _qdq_problem(ctx) or _weight_problem(weight, "dense weight") or _activation_problem(ctx)


def _check_qdq_add(ctx: PatternCheckContext) -> str | None:
    add = ctx.annotated_expr["add"]
    if _static_shape(add.args[0]) != _static_shape(add.args[1]):
        return f"broadcasting add {_static_shape(add.args[0])} + {_static_shape(add.args[1])}"
    return _qdq_problem(ctx) or _activation_problem(ctx)


def _check_qdq_mean(ctx: PatternCheckContext) -> str | None:
    mean = ctx.annotated_expr["root_op"]
    shape = _static_shape(mean.args[0])
    axes = sorted(int(a) % 4 for a in (mean.attrs.axis or [])) if shape and len(shape) == 4 else None
    if axes not in ([1, 2], [2, 3]):
        return f"mean over axes {axes} of a {shape} tensor (only global average pooling over H, W)"
    return _qdq_problem(ctx)


def _same_quant(a: relax.Call, b: relax.Call) -> bool:
    return all(float(x.value.numpy()) == float(y.value.numpy()) for x, y in zip(a.args[1:], b.args[1:]))


def _check_qdq_same_encoding(ctx: PatternCheckContext) -> str | None:
    """Pooling, reshape and concat between Q/DQ pairs only move values: input and output must
    share scale and zero point (TFLite and ONNX Runtime keep them equal)."""
    problem = _qdq_problem(ctx)
    if problem:
        return problem
    q = ctx.annotated_expr["q"]
    for name, call in ctx.annotated_expr.items():
        if name.startswith("dq") and not _same_quant(call, q):
            return f"{ctx.annotated_expr['root_op'].op.name} changes the scale or zero point"
    if "pool" in ctx.annotated_expr["root_op"].op.name and ctx.annotated_expr["root_op"].attrs.layout not in QDQ_LAYOUTS:
        return "pooling layout"
    return None


def _check_int8_op(ctx: PatternCheckContext) -> str | None:
    """An op TFLite runs on int8 directly (pooling, reshape, pad, clip of a fused activation)."""
    root = ctx.annotated_expr["root_op"]
    problem = _int8_problem(root.args[0], f"{root.op.name} input")
    if problem:
        return problem
    if root.op.name.startswith("relax.nn.") and "pool" in root.op.name and root.attrs.layout not in QDQ_LAYOUTS:
        return f"{root.op.name} layout {root.attrs.layout}"
    if root.op.name == "relax.nn.pad" and root.attrs.pad_mode != "constant":
        return f"pad mode {root.attrs.pad_mode!r} (constant only)"
    return None


def _check_boundary(ctx: PatternCheckContext) -> str | None:
    """A model's own float <-> int8 conversion at its input or output."""
    call = ctx.annotated_expr["root_op"]
    codes = call if call.op.name == "relax.quantize" else call.args[0]
    if _dtype(codes) != "int8":
        return f"{call.op.name} to or from {_dtype(codes)} (int8 activations only)"
    if _dtype(call.args[0] if call.op.name == "relax.quantize" else call) != "float32" or _static_shape(call) is None:
        return f"{call.op.name} of a tensor that is not float32 with a static shape"
    return _scalar_quant_problem(call, call.op.name)


def _qdq_chain(kind: str, body: DFPattern, ann: dict, check, clip: bool) -> CompositeSpec:
    """quantize(body), optionally followed by TFLite's int8 clip of a fused activation."""
    root = ann["q"] = _quantize(body)
    if clip:
        root = ann["clip"] = is_op("relax.clip")(root, wildcard(), wildcard())
    ann["root"] = root
    return CompositeSpec(kind + ("_clip" if clip else ""), root, ann, check)


def _qdq_conv2d(bias: bool, clip: bool) -> CompositeSpec:
    ann = {"dq": _dequantize(wildcard())}
    weight = ann["weight"] = _dequantize(is_const())
    conv = ann["conv"] = is_op("relax.nn.conv2d")(ann["dq"], weight | is_op("relax.reshape")(weight, wildcard()))
    body = conv
    if bias:
        b = ann["bias"] = _dequantize(is_const())
        body = is_op("relax.add")(conv, b | is_op("relax.reshape")(b, wildcard()))
    return _qdq_chain("qdq_conv2d" + ("_bias" if bias else ""), body, ann, _check_qdq_conv2d, clip)


def _qdq_dense(bias: bool, clip: bool) -> CompositeSpec:
    ann = {"dq": _dequantize(wildcard())}
    # TFLite: dequantize(permute_dims(W)); ONNX Gemm: permute_dims(dequantize(W)).
    tflite_weight = ann["weight_tflite"] = _dequantize(is_op("relax.permute_dims")(is_const()))
    onnx_weight = ann["weight_onnx"] = _dequantize(is_const())
    matmul = ann["matmul"] = is_op("relax.matmul")(
        ann["dq"], tflite_weight | is_op("relax.permute_dims")(onnx_weight) | onnx_weight
    )
    body = matmul
    if bias:
        ann["bias"] = _dequantize(is_const())
        body = is_op("relax.add")(matmul, ann["bias"])
    return _qdq_chain("qdq_dense" + ("_bias" if bias else ""), body, ann, _check_qdq_dense, clip)


def _qdq_add(relu: bool, clip: bool) -> CompositeSpec:
    ann = {"dq0": _dequantize(wildcard()), "dq1": _dequantize(wildcard())}
    body = ann["add"] = is_op("relax.add")(ann["dq0"], ann["dq1"])
    if relu:
        body = is_op("relax.nn.relu")(body)
    return _qdq_chain("qdq_add" + ("_relu" if relu else ""), body, ann, _check_qdq_add, clip)


def _qdq_single(kind: str, op: str, check, arity: int = 1) -> CompositeSpec:
    ann = {"dq": _dequantize(wildcard())}
    body = ann["root_op"] = is_op(op)(ann["dq"], *[wildcard() for _ in range(arity - 1)])
    return _qdq_chain(kind, body, ann, check, clip=False)


def _qdq_concat(count: int) -> CompositeSpec:
    ann = {f"dq{i}": _dequantize(wildcard()) for i in range(count)}
    body = ann["root_op"] = is_op("relax.concat")(is_tuple([ann[f"dq{i}"] for i in range(count)]))
    return _qdq_chain(f"qdq_concat{count}", body, ann, _check_qdq_same_encoding, clip=False)


def _qdq_lut(function: str) -> CompositeSpec:
    """TFLite's LOGISTIC, TANH and HARD_SWISH (and ONNX's Sigmoid, Tanh, HardSwish) between a
    dequantize and a quantize."""
    source, uses, ann = wildcard(), [], {}

    def use() -> DFPattern:  # TVM's importers dequantize once per use
        uses.append(_dequantize(source))
        ann[f"dq{len(uses) - 1}"] = uses[-1]
        ann.setdefault("input", uses[-1])
        return uses[-1]

    body = ann["root_op"] = _lut_body(function, use, ann)
    return _qdq_chain(f"qdq_lut_{function}", body, ann, lambda ctx: _qdq_problem(ctx) or _check_lut(ctx), clip=False)


def _check_qdq_mul(ctx: PatternCheckContext) -> str | None:
    a, b = (_static_shape(arg) for arg in ctx.annotated_expr["root_op"].args)
    gate = a is not None and b is not None and len(a) == len(b) == 4 and (
        b in ((a[0], a[1], 1, 1), (a[0], 1, 1, a[3])) or a in ((b[0], b[1], 1, 1), (b[0], 1, 1, b[3])))
    if a != b and not gate:
        return f"broadcasting multiply {a} * {b} (same shapes, or one value per sample and channel)"
    return _qdq_problem(ctx) or _activation_problem(ctx)


def _qdq_mul(clip: bool) -> CompositeSpec:
    """TFLite's MUL of two int8 tensors (squeeze-and-excitation's gate)."""
    ann = {"dq0": _dequantize(wildcard()), "dq1": _dequantize(wildcard())}
    body = ann["root_op"] = is_op("relax.multiply")(ann["dq0"], ann["dq1"])
    return _qdq_chain("qdq_mul", body, ann, _check_qdq_mul, clip)


QDQ_LUT_FUNCTIONS = ("sigmoid", "tanh", "hardswish")


def _int8_op(kind: str, op: str, arity: int = 1) -> CompositeSpec:
    root = is_op(op)(*[wildcard() for _ in range(arity)])
    return CompositeSpec(kind, root, {"root": root, "root_op": root}, _check_int8_op)


def _int8_avg_pool2d() -> CompositeSpec:
    """TFLite's AVERAGE_POOL_2D: astype(int32) -> avg_pool2d -> astype(int8)."""
    widen = is_op("relax.astype")(wildcard())
    pool = is_op("relax.nn.avg_pool2d")(widen)
    root = is_op("relax.astype")(pool)
    return CompositeSpec("avg_pool2d_int8", root, {"root": root, "root_op": pool, "widen": widen}, _check_int8_avg_pool)


def _check_int8_avg_pool(ctx: PatternCheckContext) -> str | None:
    pool = ctx.annotated_expr["root_op"]
    source = ctx.annotated_expr["widen"].args[0]
    if _dtype(source) != "int8" or _dtype(ctx.annotated_expr["root"]) != "int8":
        return "average pool that is not int8 -> int8"
    if pool.attrs.count_include_pad or any(int(d) != 1 for d in pool.attrs.dilation):
        return "average pool counting padding, or dilated"
    if pool.attrs.layout not in QDQ_LAYOUTS:
        return f"avg_pool2d layout {pool.attrs.layout}"
    return None


def _boundary(kind: str, op: str) -> CompositeSpec:
    root = is_op(op)(wildcard(), is_const(), is_const())
    return CompositeSpec(kind, root, {"root": root, "root_op": root}, _check_boundary)


QDQ_PATTERNS: list[CompositeSpec] = [
    _boundary("quantize", "relax.quantize"),
    _boundary("dequantize", "relax.dequantize"),
    _int8_op("clip_int8", "relax.clip", 3),
    _int8_op("reshape_int8", "relax.reshape", 2),
    _int8_op("pad_int8", "relax.nn.pad"),
    _int8_op("max_pool2d_int8", "relax.nn.max_pool2d"),
    _int8_avg_pool2d(),
    _qdq_single("qdq_reshape", "relax.reshape", _check_qdq_same_encoding, arity=2),
    _qdq_single("qdq_max_pool2d", "relax.nn.max_pool2d", _check_qdq_same_encoding),
    _qdq_single("qdq_avg_pool2d", "relax.nn.avg_pool2d", _check_qdq_same_encoding),
    _qdq_single("qdq_mean", "relax.mean", _check_qdq_mean),
    *[_qdq_concat(count) for count in range(2, 9)],
    *[_qdq_lut(function) for function in QDQ_LUT_FUNCTIONS],
    *[_qdq_mul(clip) for clip in (False, True)],
    *[_qdq_add(relu, clip) for relu in (False, True) for clip in (False, True)],
    *[_qdq_dense(bias, clip) for bias in (False, True) for clip in (False, True)],
    *[_qdq_conv2d(bias, clip) for bias in (False, True) for clip in (False, True)],
]

# Lowest priority first (TVM tries the last entry first): single ops, then the fused chains,
# longest last, so that a conv takes its bias and activation with it.
PATTERN_TABLE: list[CompositeSpec] = [
    # No integer kernel: listed so that the report says why, rather than "no pattern".
    _single("layer_norm", "relax.nn.layer_norm", 3,
            lambda ctx: "layer norm has no integer kernel yet (benchmarks/layer_norm_int8.py measures what an "
                        "integer one would cost); it runs in float on the host"),
    _single("relu", "relax.nn.relu", 1, lambda ctx: _tensor_problem(ctx.annotated_expr["root"].args[0], "relu input")),
    _clip(),
    _single("reshape", "relax.reshape", 2, _check_reshape),
    _single("transpose", "relax.permute_dims", 1, _check_transpose),
    _single("pad", "relax.nn.pad", 1, _check_pad),
    _single("slice", "relax.strided_slice", 5, _check_slice),
    _single("concat", "relax.concat", 1, _check_concat),
    _single("global_avg_pool2d", "relax.mean", 1, _check_mean),
    _single("adaptive_avg_pool2d", "relax.nn.adaptive_avg_pool2d", 1, _check_adaptive_avg_pool2d),
    _single("avg_pool2d", "relax.nn.avg_pool2d", 1, _check_avg_pool2d),
    _single("max_pool2d", "relax.nn.max_pool2d", 1, _check_max_pool2d),
    *[_add(act) for act in ACTIVATIONS],
    *[_mul(act) for act in ACTIVATIONS],
    *[_lut(function) for function in LUT_FUNCTIONS],
    *[_dense(bias, act) for bias in (False, True) for act in ACTIVATIONS],
    *[_conv2d(bias, act) for bias in (False, True) for act in ACTIVATIONS],
    *QDQ_PATTERNS,
]


def register() -> None:
    """Register every pattern with TVM's registry (idempotent)."""
    registered = {p.name for p in get_patterns_with_prefix(CODEGEN_NAME)}
    missing = [s for s in PATTERN_TABLE if s.name not in registered]
    if missing:
        register_patterns([(s.name, s.pattern, s.annotations, _recorded(s)) for s in missing])


def fusion_patterns(prequantized: bool = False) -> list[relax.transform.FusionPattern]:
    """The registered ``ccompiler`` patterns, highest priority first: the QDQ composites for a
    model quantized elsewhere (its float ops have no calibrated ranges), the others for a float
    model."""
    register()
    qdq = {spec.name for spec in QDQ_PATTERNS}
    return [p for p in get_patterns_with_prefix(CODEGEN_NAME) if (p.name in qdq) == prequantized]


# Importing this module makes the composites visible through TVM's registry
# (get_patterns_with_prefix("ccompiler")), as TVM's own BYOC backends do.
register()
