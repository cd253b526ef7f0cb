"""Partitioning: match the ``ccompiler`` composites and merge them into regions.

``FuseOpsByPattern`` wraps every match in a composite function; ``MergeCompositeFunctions`` then
groups neighbouring composites into ``Codegen="ccompiler"`` region functions, so a graph whose
every op is supported becomes a single region. Whatever is left in ``main`` runs on the host;
:func:`host_ops` says what and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from . import memory, patterns, profiles

@dataclass(frozen=True)
class HostOp:
    """An op left on the host, where it is in ``main`` and why no composite took it."""

    op: str
    var: str  # the Relax variable it defines in main
    position: int  # index among main's op calls, in program order
    type: str
    reason: str
    span: str | None = None  # source location, where TVM keeps one

    def describe(self) -> str:
        where = f"main's op #{self.position} ({self.var} = {self.op}: {self.type})"
        return f"{where}{f' at {self.span}' if self.span else ''}: {self.reason}"


class Int8OnlyError(RuntimeError):
    """Strict mode: some ops could not be placed in a ccompiler region."""

    def __init__(self, host_ops: list[HostOp]):
        self.host_ops = host_ops
        lines = "\n".join(f"  - {h.describe()}" for h in host_ops)
        super().__init__(
            f"int8_only: {len(host_ops)} op(s) cannot run in int8 on the accelerator:\n{lines}"
        )


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


# ---- Regions within an on-chip memory budget ----
# MergeCompositeFunctions merges neighbouring composites of one codegen, named by the prefix of
# their "Composite" attribute. To keep a region within a profile's memory_bytes, main's composite
# calls are cut, in program order, into runs whose arena (memory.plan_arena, the plan the
# generated C allocates) fits; each run's composites get a codegen name of their own
# ("ccompiler_part<k>") so that no region crosses a cut, and the regions are renamed back to
# ccompiler afterwards.
_PART = f"{patterns.CODEGEN_NAME}_part"


def _tensor_vars(expr: relax.Expr) -> list[relax.Var]:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for field in expr.fields for v in _tensor_vars(field)]
    if isinstance(expr, relax.TupleGetItem):
        return _tensor_vars(expr.tuple_value)
    if isinstance(expr, relax.Call):
        return [v for arg in expr.args for v in _tensor_vars(arg)]
    return []


def _nbytes(var: relax.Var) -> int:
    """int8 bytes of a tensor (or of a tuple's tensors)."""
    fields = var.ty.fields if isinstance(var.ty, tvm.ir.TupleType) else [var.ty]
    return sum(math.prod(int(d) for d in f.shape.values) for f in fields if isinstance(f, relax.TensorType))


def _scratch(func: relax.Function) -> int:
    """The arena scratch of a composite (patterns.conv_scratch_bytes of its convolution)."""
    scratch = 0

    def visit(expr):
        nonlocal scratch
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            scratch = max(scratch, patterns.conv_scratch_bytes(expr))

    relax.analysis.post_order_visit(func.body, visit)
    return scratch


def _map_bindings(func: relax.Function, new_value: Callable[[relax.Binding], relax.Expr]) -> relax.Function:
    """`func` with each binding's value replaced by new_value(binding)."""
    blocks = []
    for block in func.body.blocks:
        bindings = [relax.VarBinding(b.var, new_value(b)) for b in block.bindings]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(bindings))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
                          func.attrs, func.span)


def _memory_parts(mod: tvm.IRModule, budget: int) -> list[tuple[relax.Var, int]]:
    """main's composite calls (by the variable each defines) with the index of the run they fall
    in: runs in program order, each as long as its arena stays within `budget` bytes (the pattern
    checks have refused every call whose arena alone would exceed it)."""
    main = mod["main"]
    calls: list[tuple[relax.Var, relax.Call]] = []
    users: dict[relax.Var, set[relax.Var | None]] = {}  # value -> the bindings that read it (None: main's result)
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                if "Composite" in (mod[value.op].attrs or {}):
                    calls.append((binding.var, value))
            for v in _tensor_vars(value):
                users.setdefault(v, set()).add(binding.var)
    for v in _tensor_vars(main.body.body):
        users.setdefault(v, set()).add(None)

    def arena(run: list[tuple[relax.Var, relax.Call]]) -> int:
        made = {var for var, _ in run}
        steps = [(_tensor_vars(call), var) for var, call in run]
        inputs = list(dict.fromkeys(v for args, _ in steps for v in args if v not in made))
        outputs = [var for var in made if users.get(var, set()) - made]
        sizes = {v: _nbytes(v) for v in [*inputs, *made]}
        scratch = max(_scratch(mod[call.op]) for _, call in run)
        return memory.plan_arena(steps, sizes, inputs, outputs, scratch_bytes=scratch).size

    parts, run, index = [], [], 0
    for var, call in calls:
        if run and arena([*run, (var, call)]) > budget:
            run, index = [], index + 1
        run.append((var, call))
        parts.append((var, index))
    return parts


def _separate_by_memory(mod: tvm.IRModule, budget: int) -> tvm.IRModule:
    """Give each run of _memory_parts its own codegen name, so that no merged region crosses runs."""
    parts = dict(_memory_parts(mod, budget))
    if not parts or max(parts.values()) == 0:
        return mod
    copies: dict[tuple[str, int], relax.GlobalVar] = {}  # (composite function, run) -> its copy

    def callee(binding: relax.Binding) -> relax.Expr:
        call = binding.value
        if binding.var not in parts:
            return call
        key = (call.op.name_hint, parts[binding.var])
        if key not in copies:
            func = mod[call.op]
            gv = relax.GlobalVar(f"{call.op.name_hint}_part{key[1]}")
            relax.expr._update_type(gv, call.op.ty)
            kind = str(func.attrs["Composite"]).split(".", 1)[1]
            mod[gv] = func.with_attr("Composite", f"{_PART}{key[1]}.{kind}")
            copies[key] = gv
        return relax.Call(copies[key], call.args, call.attrs, call.ty_args, call.span)

    mod["main"] = _map_bindings(mod["main"], callee)
    return relax.transform.DeadCodeElimination()(mod)


def _one_codegen_name(mod: tvm.IRModule) -> tvm.IRModule:
    """Regions and their composites named ccompiler again, after _separate_by_memory."""
    def restored(name: str) -> str:
        prefix, kind = name.split(".", 1)
        return f"{patterns.CODEGEN_NAME}.{kind}" if prefix.startswith(_PART) else name

    def composite(binding: relax.Binding) -> relax.Expr:
        value = binding.value
        if isinstance(value, relax.Function) and "Composite" in (value.attrs or {}):
            return value.with_attr("Composite", restored(str(value.attrs["Composite"])))
        return value

    for name, func in region_functions(mod).items():
        mod[mod.get_global_var(name)] = _map_bindings(func, composite).with_attr("Codegen", patterns.CODEGEN_NAME)
    return mod


@dataclass
class Partitioned:
    mod: tvm.IRModule
    host_ops: list[HostOp]


def partition(mod: tvm.IRModule, int8_only: bool = False, prequantized: bool = False,
              profile: profiles.Profile = profiles.DEFAULT_PROFILE) -> Partitioned:
    """Offload every supported op to ``ccompiler`` regions; report the rest.

    With `int8_only`, any op left outside the regions is an error (:class:`Int8OnlyError`)
    that lists all of them, with where they are and why. `prequantized`: the model was
    quantized elsewhere (QDQ composites only). `profile`: what the accelerator has (its ops and
    limits; ``profiles.py``).
    """
    fusion = patterns.fusion_patterns(prequantized)
    patterns.take_refusals()
    with patterns.using_profile(profile):
        mod = relax.transform.FuseOpsByPattern(fusion, bind_constants=True, annotate_codegen=False)(mod)
    reasons = patterns.take_refusals()  # by the variable a refused call defines, which host ops keep
    budget = profile.limits.get("memory_bytes")
    if budget:
        mod = _separate_by_memory(mod, budget)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    if budget:
        mod = _one_codegen_name(mod)
    mod = _rename_regions(relax.transform.DeadCodeElimination()(mod))
    host = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op):
                reason = reasons.get(binding.var, f"no {patterns.CODEGEN_NAME} pattern for {call.op.name}")
                span = str(call.span) if call.span is not None else None
                host.append(HostOp(call.op.name, binding.var.name, len(host), str(call.ty), reason, span))
    if int8_only and host:
        raise Int8OnlyError(host)
    return Partitioned(mod, host)


def boundary_crossings(mod: tvm.IRModule) -> int:
    """Float <-> int8 conversions per inference: every region input is quantized on the way in
    and every region output dequantized on the way out."""
    total = 0
    regions = region_functions(mod)

    def visit(expr):
        nonlocal total
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and expr.op.name_hint in regions:
            ty = expr.ty
            total += len(expr.args) + (len(ty.fields) if isinstance(ty, tvm.ir.TupleType) else 1)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return total


class HostOpError(NotImplementedError):
    """An op outside the ccompiler regions that the Python-side interpreter cannot run."""


def run_partitioned(
    mod: tvm.IRModule,
    run_region: Callable[[str, list], list],
    inputs: list,
    run_host: Callable[[relax.Call, list], object] | None = None,
) -> list:
    """Interpret a partitioned ``main``: each region call goes to ``run_region(name, args)``,
    which returns the region's outputs as a list; every other op call to
    ``run_host(call, args)`` (args: values of tensor arguments, lists for tuples, None for
    constants); tuples are handled structurally.

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
            tup = value(expr.tuple_value)
            return None if tup is None else tup[expr.index]  # None: a run_host that computes nothing
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and expr.op.name_hint in regions:
            outs = run_region(expr.op.name_hint, [value(a) for a in expr.args])
            return outs if isinstance(expr.ty, tvm.ir.TupleType) else outs[0]
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and run_host is not None:
            return run_host(expr, [host_arg(a) for a in expr.args])
        name = expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else type(expr).__name__
        raise HostOpError(f"cannot interpret {name} outside the ccompiler regions")

    def host_arg(expr):
        if isinstance(expr, relax.Tuple):  # its fields may be constants or prim values too
            return [host_arg(f) for f in expr.fields]
        if isinstance(expr, (relax.Var, relax.TupleGetItem)):
            return value(expr)
        return None  # constants and attributes are compiled into the host function

    for block in main.body.blocks:
        for binding in block.bindings:
            env[binding.var] = value(binding.value)
    result = value(main.body.body)
    return result if isinstance(result, list) else [result]
