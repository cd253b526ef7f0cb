"""Partitioning: match the ``ccompiler`` composites and merge them into regions.

``FuseOpsByPattern`` wraps every match in a composite function; ``MergeCompositeFunctions`` then
groups neighbouring composites into ``Codegen="ccompiler"`` region functions, so a graph whose
every op is supported becomes a single region. Whatever is left in ``main`` runs on the host;
:func:`host_ops` says what and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from . import patterns

@dataclass(frozen=True)
class HostOp:
    op: str
    shape: str
    reason: str


def _op_calls(func: relax.Function) -> list[relax.Call]:
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return calls


def region_functions(mod: tvm.IRModule) -> dict[str, relax.Function]:
    return {
        gv.name_hint: f
        for gv, f in mod.functions.items()
        if isinstance(f, relax.Function) and f.attrs is not None and "Codegen" in f.attrs
    }


def count_ops(mod: tvm.IRModule) -> int:
    """Compute ops of a (not yet partitioned) module's main function."""
    return len(_op_calls(mod["main"]))


def offloaded_ops(mod: tvm.IRModule) -> int:
    """Ops inside ccompiler regions of a partitioned module (counted per composite call)."""
    total = 0
    for region in region_functions(mod).values():
        composites: dict[relax.Var, relax.Function] = {}
        for block in region.body.blocks:
            for binding in block.bindings:
                if isinstance(binding.value, relax.Function):
                    composites[binding.var] = binding.value
                elif isinstance(binding.value, relax.Call) and binding.value.op in composites:
                    total += len(_op_calls(composites[binding.value.op]))
    return total


REGION_PREFIX = "byoc_int8_region"


@relax.expr_functor.mutator
class _CalleeRenamer(relax.PyExprMutator):
    def __init__(self, renamed: dict[str, relax.GlobalVar]):
        super().__init__()
        self.renamed = renamed

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and call.op.name_hint in self.renamed:
            return relax.Call(self.renamed[call.op.name_hint], call.args, call.attrs, call.ty_args, call.span)
        return call


def _rename_regions(mod: tvm.IRModule) -> tvm.IRModule:
    """Give regions short names in call order (byoc_int8_region0, ...) instead of the fused-op
    names MergeCompositeFunctions builds, which run to hundreds of characters; the name becomes
    the library's symbol and appears in every error message."""
    regions = region_functions(mod)
    order: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar):
            if expr.op.name_hint in regions and expr.op.name_hint not in order:
                order.append(expr.op.name_hint)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    renamed: dict[str, relax.GlobalVar] = {}
    result = tvm.IRModule(attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if gv.name_hint in regions:
            new_gv = relax.GlobalVar(f"{REGION_PREFIX}{order.index(gv.name_hint)}")
            relax.expr._update_type(new_gv, gv.ty)  # a call's callee must carry its type
            renamed[gv.name_hint] = new_gv
            result[new_gv] = func.with_attr("global_symbol", new_gv.name_hint)
    for gv, func in mod.functions.items():
        if gv.name_hint not in regions:
            result[gv] = _CalleeRenamer(renamed).visit_expr(func) if isinstance(func, relax.Function) else func
    return result


@dataclass
class Partitioned:
    mod: tvm.IRModule
    host_ops: list[HostOp]


def partition(mod: tvm.IRModule) -> Partitioned:
    """Offload every supported op to ``ccompiler`` regions; report the rest."""
    fusion = patterns.fusion_patterns()
    patterns.take_refusals()
    mod = relax.transform.FuseOpsByPattern(fusion, bind_constants=True, annotate_codegen=False)(mod)
    refusals = patterns.take_refusals()
    mod = relax.transform.MergeCompositeFunctions()(mod)
    mod = _rename_regions(relax.transform.DeadCodeElimination()(mod))
    reasons_by_text = {str(call): reason for call, reason in refusals.items()}
    host = []
    for call in _op_calls(mod["main"]):
        reason = reasons_by_text.get(str(call), f"no {patterns.CODEGEN_NAME} pattern for {call.op.name}")
        host.append(HostOp(call.op.name, str(call.ty), reason))
    return Partitioned(mod, host)


class HostOpError(NotImplementedError):
    """An op outside the ccompiler regions that the Python-side interpreter cannot run."""


def run_partitioned(mod: tvm.IRModule, run_region: Callable[[str, list], list], inputs: list) -> list:
    """Interpret a partitioned ``main``: each region call goes to ``run_region(name, args)``,
    which returns the region's outputs as a list; tuples are handled structurally.

    This is how calibration (float) and the integer reference see a whole model.
    """
    main = mod["main"]
    regions = region_functions(mod)
    env: dict[relax.Var, object] = dict(zip(main.params, inputs))

    def value(expr):
        if isinstance(expr, relax.Var):
            return env[expr]
        if isinstance(expr, relax.Tuple):
            return [value(f) for f in expr.fields]
        if isinstance(expr, relax.TupleGetItem):
            return value(expr.tuple_value)[expr.index]
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and expr.op.name_hint in regions:
            outs = run_region(expr.op.name_hint, [value(a) for a in expr.args])
            return outs if isinstance(expr.ty, tvm.ir.TupleType) else outs[0]
        name = expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else type(expr).__name__
        raise HostOpError(f"cannot interpret host op {name} outside the ccompiler regions")

    for block in main.body.blocks:
        for binding in block.bindings:
            env[binding.var] = value(binding.value)
    result = value(main.body.body)
    return result if isinstance(result, list) else [result]
