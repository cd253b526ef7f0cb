"""Constant folding in numpy for the elementwise and layout ops that batch-norm folding and the
frontend's rewrites leave on constants.

TVM's ``FoldConstant`` evaluates every constant subexpression by building it (legalize, TIR
pipeline, LLVM) and running it: for ResNet-18 that is 161 builds and about 4 s of a compile.
The ops here are exact in numpy in the same dtype (float32 arithmetic, one IEEE operation each),
so the result is the same; ``FoldConstant`` still runs afterwards for anything left.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.ir.prim.expr import FloatImm, IntImm


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _reshape(call: relax.Call, args: list) -> np.ndarray | None:
    shape = call.args[1]
    if not isinstance(shape, relax.ShapeExpr):
        return None
    return args[0].reshape(_ints(shape.values))


def _permute(call: relax.Call, args: list) -> np.ndarray:
    axes = call.attrs.axes
    return np.ascontiguousarray(np.transpose(args[0], None if axes is None else _ints(axes)))


def _same_dtype(f: Callable[..., np.ndarray]) -> Callable[[relax.Call, list], np.ndarray | None]:
    """A binary or unary elementwise op of tensors of one dtype, evaluated in that dtype."""

    def run(call: relax.Call, args: list) -> np.ndarray | None:
        if len({a.dtype for a in args}) != 1:
            return None
        with np.errstate(all="ignore"):
            return np.asarray(f(*args), dtype=args[0].dtype)

    return run


def _sqrt(x: np.ndarray) -> np.ndarray:
    return np.sqrt(x) if np.issubdtype(x.dtype, np.floating) else None


EVALUATORS: dict[str, Callable[[relax.Call, list], np.ndarray | None]] = {
    "relax.add": _same_dtype(np.add),
    "relax.subtract": _same_dtype(np.subtract),
    "relax.multiply": _same_dtype(np.multiply),
    "relax.divide": _same_dtype(lambda a, b: np.divide(a, b) if np.issubdtype(a.dtype, np.floating) else None),
    "relax.negative": _same_dtype(np.negative),
    "relax.sqrt": _same_dtype(_sqrt),
    "relax.reshape": _reshape,
    "relax.permute_dims": _permute,
    "relax.expand_dims": lambda call, args: np.expand_dims(args[0], tuple(_ints(call.attrs.axis))),
    "relax.squeeze": lambda call, args: np.squeeze(args[0], None if call.attrs.axis is None else tuple(_ints(call.attrs.axis))),
}


def _constant(expr: relax.Expr) -> np.ndarray | None:
    """A tensor constant's value, or a scalar immediate's (``x + 1e-5``) in its own dtype."""
    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    if isinstance(expr, (FloatImm, IntImm)):
        return np.array(expr.value, dtype=str(expr.ty))
    return None


@relax.expr_functor.mutator
class _Folder(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        ty = call.ty  # the rebuilt call is typed only once normalized
        call = super().visit_call_(call)
        evaluate = EVALUATORS.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        if evaluate is None:
            return call
        args = []
        for arg in call.args:
            if isinstance(arg, relax.Var):
                bound = self.lookup_binding(arg)
                arg = bound if bound is not None else arg
            if isinstance(arg, relax.ShapeExpr) and call.op.name == "relax.reshape":
                continue
            value = _constant(arg)
            if value is None:
                return call
            args.append(value)
        result = evaluate(call, args)
        if result is None or not isinstance(ty, relax.TensorType) or str(result.dtype) != str(ty.dtype):
            return call
        expected = [int(d) for d in ty.shape.values] if ty.shape is not None else None
        if expected is not None and list(result.shape) != expected:
            return call
        return relax.const(np.ascontiguousarray(result), str(result.dtype))


def fold_constants(func: relax.Function) -> relax.Function:
    """`func` with every constant subexpression of the ops in :data:`EVALUATORS` computed."""
    return _Folder().visit_expr(func)
