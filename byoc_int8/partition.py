"""Partitioning: match the ``ccompiler`` composites and merge them into regions.

``FuseOpsByPattern`` wraps every match in a composite function; ``MergeCompositeFunctions`` then
groups neighbouring composites into ``Codegen="ccompiler"`` region functions, so a graph whose
every op is supported becomes a single region. Whatever is left in ``main`` runs on the host;
:func:`host_ops` says what and why.
"""

from __future__ import annotations

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
    """Ops inside ccompiler regions of a partitioned module."""
    total = 0
    for region in region_functions(mod).values():
        def visit(expr):
            nonlocal total
            if isinstance(expr, relax.Function) and expr.attrs is not None and "Composite" in expr.attrs:
                total += len(_op_calls(expr))

        relax.analysis.post_order_visit(region.body, visit)
    return total


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
    mod = relax.transform.DeadCodeElimination()(mod)
    reasons_by_text = {str(call): reason for call, reason in refusals.items()}
    host = []
    for call in _op_calls(mod["main"]):
        reason = reasons_by_text.get(str(call), f"no {patterns.CODEGEN_NAME} pattern for {call.op.name}")
        host.append(HostOp(call.op.name, str(call.ty), reason))
    return Partitioned(mod, host)
