"""Composite patterns offered to the ``ccompiler`` codegen, with the checks that guard them.

Each pattern is a ``ccompiler.<kind>`` composite. Its check answers "can the int8 kernels run
this instance?" and, when the answer is no, records a reason a person can read; the partitioner
reports those reasons for every op that stays on the host.

Priority: TVM tries patterns registered later first, so :data:`PATTERN_TABLE` lists the most
specific (longest) patterns last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.dpl import DFPattern, is_const, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

CODEGEN_NAME = "ccompiler"

# Reasons given by checks during the current partitioning, keyed by the refused root call.
_refusals: dict[relax.Call, str] = {}


def take_refusals() -> dict[relax.Call, str]:
    """Return and forget the reasons recorded by pattern checks since the last call."""
    refusals = dict(_refusals)
    _refusals.clear()
    return refusals


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


def _channel_bias_problem(bias: relax.Expr, channels: int, rank: int) -> str | None:
    """A bias must hold one value per channel, the channel axis being 1 of the op's output."""
    shape = _static_shape(bias)
    if shape is None or len(shape) > rank:
        return f"bias of shape {shape} does not broadcast over a rank-{rank} output"
    padded = (1,) * (rank - len(shape)) + shape
    if padded != tuple(channels if axis == 1 else 1 for axis in range(rank)):
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
    if int(attrs.groups) != 1:
        return f"grouped conv2d (groups={int(attrs.groups)}) has no int8 kernel yet"
    if "bias" in ctx.annotated_expr:
        channels = _static_shape(conv.args[1])[0]
        return _channel_bias_problem(ctx.annotated_expr["bias"], channels, 4)
    return None


def _check_max_pool2d(ctx: PatternCheckContext) -> str | None:
    pool = ctx.annotated_expr["root"]
    if pool.attrs.layout != "NCHW" or pool.attrs.out_layout != "NCHW":
        return f"max_pool2d layout {pool.attrs.layout} (NCHW only)"
    return _tensor_problem(pool.args[0], "max_pool2d input", 4)


def _check_add(ctx: PatternCheckContext) -> str | None:
    add = ctx.annotated_expr["add"]
    lhs, rhs = add.args
    for operand in (lhs, rhs):
        if isinstance(operand, tvm.ir.GenericConst):
            return "add of a constant that is not a fused bias"
        problem = _tensor_problem(operand, "add operand")
        if problem:
            return problem
    if _static_shape(lhs) != _static_shape(rhs):
        return f"broadcasting add {_static_shape(lhs)} + {_static_shape(rhs)}"
    return None


def _check_mean(ctx: PatternCheckContext) -> str | None:
    mean = ctx.annotated_expr["root"]
    problem = _tensor_problem(mean.args[0], "mean input", 4)
    if problem:
        return problem
    axes = sorted(int(a) % 4 for a in (mean.attrs.axis or []))
    if axes != [2, 3]:
        return f"mean over axes {axes} (only global average pooling over H, W)"
    return None


def _check_reshape(ctx: PatternCheckContext) -> str | None:
    reshape = ctx.annotated_expr["root"]
    problem = _tensor_problem(reshape.args[0], "reshape input")
    if problem:
        return problem
    out = _static_shape(reshape)
    if out is None:
        return "reshape to a dynamic shape"
    if len(out) == 4 and out[2] * out[3] != 1:
        return f"reshape to the 4-D image shape {out} (only flattening reshapes run in int8)"
    return None


def _check_dense(ctx: PatternCheckContext) -> str | None:
    matmul = ctx.annotated_expr["matmul"]
    problem = _tensor_problem(matmul.args[0], "dense input", 2) or _tensor_problem(
        matmul.args[1], "dense weight", 2
    )
    if problem:
        return problem
    if "bias" in ctx.annotated_expr:
        units = _static_shape(matmul.args[1])[1]
        return _channel_bias_problem(ctx.annotated_expr["bias"], units, 2)
    return None


def _recorded(check: Callable[[PatternCheckContext], str | None]) -> Callable[[PatternCheckContext], bool]:
    def run(ctx: PatternCheckContext) -> bool:
        reason = check(ctx)
        if reason is not None:
            _refusals[ctx.annotated_expr["root"]] = reason
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


def _conv2d(bias: bool, relu: bool) -> CompositeSpec:
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    ann = {"conv": conv}
    root = conv
    if bias:
        root = ann["bias_add"] = is_op("relax.add")(conv, ann.setdefault("bias", is_const()))
    if relu:
        root = is_op("relax.nn.relu")(root)
    ann["root"] = root
    kind = "conv2d" + ("_bias" if bias else "") + ("_relu" if relu else "")
    return CompositeSpec(kind, root, ann, _check_conv2d)


def _dense(bias: bool, relu: bool) -> CompositeSpec:
    matmul = is_op("relax.matmul")(wildcard(), is_const())
    ann = {"matmul": matmul}
    root = matmul
    if bias:
        b = ann["bias"] = is_const()
        root = is_op("relax.add")(matmul, b) | is_op("relax.add")(b, matmul)
    if relu:
        root = is_op("relax.nn.relu")(root)
    ann["root"] = root
    kind = "dense" + ("_bias" if bias else "") + ("_relu" if relu else "")
    return CompositeSpec(kind, root, ann, _check_dense)


def _add(relu: bool) -> CompositeSpec:
    add = is_op("relax.add")(wildcard(), wildcard())
    root = is_op("relax.nn.relu")(add) if relu else add
    return CompositeSpec("add_relu" if relu else "add", root, {"add": add, "root": root}, _check_add)


def _single(kind: str, op: str, arity: int, check: Callable[[PatternCheckContext], str | None]) -> CompositeSpec:
    root = is_op(op)(*[wildcard() for _ in range(arity)])
    return CompositeSpec(kind, root, {"root": root}, check)


# Lowest priority first (TVM tries the last entry first).
PATTERN_TABLE: list[CompositeSpec] = [
    _single("reshape", "relax.reshape", 2, _check_reshape),
    _single("global_avg_pool2d", "relax.mean", 1, _check_mean),
    _single("max_pool2d", "relax.nn.max_pool2d", 1, _check_max_pool2d),
    _add(relu=False),
    _add(relu=True),
    _dense(bias=False, relu=False),
    _dense(bias=True, relu=False),
    _dense(bias=True, relu=True),
    _conv2d(bias=False, relu=False),
    _conv2d(bias=False, relu=True),
    _conv2d(bias=True, relu=False),
    _conv2d(bias=True, relu=True),
]


def register() -> None:
    """Register every pattern with TVM's registry (idempotent)."""
    registered = {p.name for p in get_patterns_with_prefix(CODEGEN_NAME)}
    missing = [s for s in PATTERN_TABLE if s.name not in registered]
    if missing:
        register_patterns([(s.name, s.pattern, s.annotations, _recorded(s.check)) for s in missing])


def fusion_patterns() -> list[relax.transform.FusionPattern]:
    """The registered ``ccompiler`` patterns, highest priority first."""
    register()
    return list(get_patterns_with_prefix(CODEGEN_NAME))
