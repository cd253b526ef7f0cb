"""Ops that stay on the host: run through TVM itself, one compiled function per op.

Calibration and the integer reference interpret the partitioned ``main`` in Python; when a model
keeps an op outside the ``ccompiler`` regions (default mode), that op is compiled here with
TVM's own kernels, exactly as the final library runs it.

Each op is compiled for the shapes it has in ``main``, i.e. for the exported batch size, because
its attributes and shape arguments may bake that batch in (a ``reshape`` to ``(H*W, C)``, a
channel shuffle's ``(1, g, C/g, H, W)``). The interpreter runs batches of any size, so every value
it holds is the values of the exported program for successive groups of samples, stacked on
axis 0: a tensor of exported shape ``(d0, ...)`` is held as ``(k * d0, ...)`` for ``k`` exported
batches (``k`` a fraction when the batch is not a multiple of the exported one). A host op is
run on each group in turn and its outputs are stacked the same way; arguments that hold their
exported shape while others are stacked (values computed from constants alone) go whole to every
group. A scalar (0-d) value is held as a vector, one entry per group. Ops that return tuples (``split``, ``batch_norm``, ...) give lists, which
``run_partitioned`` indexes for ``TupleGetItem``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from .partition import HostOpError

HOST_TARGET = {"kind": "llvm"}


def _static_shape(ty) -> tuple[int, ...] | None:
    """The static shape of a tensor type; None when it is not a tensor of known shape."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = ty.shape.values
    if not all(isinstance(getattr(d, "value", None), int) for d in dims):  # IntImm, not a symbol
        return None
    return tuple(int(d.value) for d in dims)


# Compiled host functions, shared by every runner: calibration, the reference and the per-layer
# errors all run the same ops, each of which would otherwise be compiled once per runner.
_COMPILED: dict[tvm_ffi.StructuralKey, relax.VirtualMachine] = {}
_COMPILED_LIMIT = 1024


def _compile(mod: tvm.IRModule) -> relax.VirtualMachine:
    key = tvm_ffi.StructuralKey(mod)  # structural: op, attributes, types and constants' contents
    if key not in _COMPILED:
        if len(_COMPILED) >= _COMPILED_LIMIT:
            del _COMPILED[next(iter(_COMPILED))]
        executable = tvm.compile(mod, target=tvm.target.Target(HOST_TARGET))
        _COMPILED[key] = relax.VirtualMachine(executable, tvm.cpu())
    return _COMPILED[key]


class _Leaf:
    """One parameter of a compiled host function: a tensor, shape or prim value of `main`."""

    def __init__(self, ty) -> None:
        self.ty = ty
        self.shape = _static_shape(ty)
        self.dtype = str(ty.dtype) if isinstance(ty, relax.TensorType) else None


class _HostFunction:
    """One host op compiled on its own: `template` mirrors the call's arguments (None for what
    is compiled in, a _Leaf per parameter, lists for tuples)."""

    def __init__(self, call: relax.Call) -> None:
        self.call = call  # keep it alive: the runner's cache is keyed by id
        params: list[relax.Var] = []

        def leaves(ty) -> tuple[relax.Expr, object]:
            if isinstance(ty, tvm.ir.TupleType):  # a tuple-valued variable: one parameter per field
                fields = [leaves(f) for f in ty.fields]
                return relax.Tuple([e for e, _ in fields]), [t for _, t in fields]
            params.append(relax.Var(f"arg{len(params)}", ty))
            return params[-1], _Leaf(ty)

        def lift(arg: relax.Expr) -> tuple[relax.Expr, object]:
            # The values run_partitioned hands over: variables, tuple items and tuples of them.
            if isinstance(arg, relax.Tuple):
                fields = [lift(f) for f in arg.fields]
                if all(t is None for _, t in fields):
                    return arg, None  # nothing but constants and prim values: compiled in whole
                return relax.Tuple([e for e, _ in fields]), [t for _, t in fields]
            if isinstance(arg, (relax.Var, relax.TupleGetItem)):
                return leaves(arg.ty)
            return arg, None  # constants, shapes, prim values, data types stay in the function

        lifted = [lift(a) for a in call.args]
        self.template = [t for _, t in lifted]
        bb = relax.BlockBuilder()
        with bb.function("main", params):
            out = bb.emit(relax.Call(call.op, [e for e, _ in lifted], call.attrs, call.ty_args))
            bb.emit_func_output(out)
        self.vm = _compile(bb.get())

    def flatten(self, args: list) -> list[tuple[_Leaf, object]]:
        """(parameter, value) pairs, in parameter order, for `args` that mirror the call's."""
        pairs: list[tuple[_Leaf, object]] = []

        def walk(template, value) -> None:
            if template is None:
                return
            if isinstance(template, _Leaf):
                pairs.append((template, value))
                return
            if not isinstance(value, (list, tuple)) or len(value) != len(template):
                raise HostOpError(f"{self.call.op.name}: a tuple argument of {len(template)} fields got {value!r:.80}")
            for t, v in zip(template, value):
                walk(t, v)

        if len(args) != len(self.template):
            raise HostOpError(f"{self.call.op.name}: {len(self.template)} arguments expected, got {len(args)}")
        for t, a in zip(self.template, args):
            walk(t, a)
        return pairs

    def __call__(self, args: list):
        pairs = self.flatten(args)
        groups = self._groups(pairs)
        if groups is None:  # nothing is stacked: one call on the values as they are
            return _from_vm(self.vm["main"](*[_to_vm(leaf, v) for leaf, v in pairs]))
        count = math.ceil(groups)
        outputs = []
        for g in range(count):
            sample = [_to_vm(leaf, _group(leaf, v, g) if self._stacked(leaf, v) else v) for leaf, v in pairs]
            outputs.append(_from_vm(self.vm["main"](*sample)))
        return self._stack(outputs, groups - (count - 1))

    @staticmethod
    def _stacked(leaf: _Leaf, value) -> bool:
        return isinstance(value, np.ndarray) and leaf.shape is not None and value.shape != leaf.shape

    def _groups(self, pairs) -> Fraction | None:
        """How many exported batches the stacked arguments hold (None: no argument is stacked)."""
        counts, scalar_counts = set(), set()
        for leaf, value in pairs:
            if not self._stacked(leaf, value):
                continue
            if leaf.shape == () and value.ndim == 1:  # a scalar per group
                scalar_counts.add(value.shape[0])
                continue
            if value.ndim != len(leaf.shape) or value.shape[1:] != leaf.shape[1:] or leaf.shape[0] == 0:
                raise HostOpError(
                    f"{self.call.op.name}: an argument of shape {value.shape} where main has {leaf.shape} "
                    "(only axis 0, the stacked batches, may differ)"
                )
            counts.add(Fraction(value.shape[0], leaf.shape[0]))
        if not counts and len(scalar_counts) == 1:
            counts.add(Fraction(scalar_counts.pop()))
        if len(counts) > 1 or any(c != math.ceil(f) for c in scalar_counts for f in counts):
            raise HostOpError(f"{self.call.op.name}: arguments hold different numbers of batches")
        return counts.pop() if counts else None

    def _stack(self, outputs: list, last: Fraction):
        """Stack each output over the groups, keeping `last` of the last group (padding)."""
        first = outputs[0]
        if isinstance(first, list):
            return [self._stack([o[i] for o in outputs], last) for i in range(len(first))]
        if not isinstance(first, np.ndarray):
            return first  # shapes and prim values are those of the exported program, in every group
        if first.ndim == 0:
            return np.stack(outputs)  # a scalar per group, the last one included
        rows = first.shape[0] * last
        if rows.denominator != 1:
            raise HostOpError(f"{self.call.op.name}: a partial batch does not map onto whole output rows")
        parts = outputs[:-1] + [outputs[-1][: int(rows)]]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _group(leaf: _Leaf, value: np.ndarray, g: int) -> np.ndarray:
    """Rows of exported batch `g` of a stacked value; a last, partial batch is completed by
    repeating its own rows (whole samples, discarded again from the outputs)."""
    if leaf.shape == ():
        return value[g]
    d0 = leaf.shape[0]
    part = value[g * d0 : (g + 1) * d0]
    if len(part) < d0:
        part = part[np.arange(d0) % len(part)]
    return part


def _to_vm(leaf: _Leaf, value):
    if isinstance(value, np.ndarray) or (leaf.dtype is not None and np.isscalar(value)):
        array = np.asarray(value)
        if leaf.dtype is not None and array.dtype != np.dtype(leaf.dtype):
            array = array.astype(leaf.dtype)
        return tvm.runtime.tensor(np.require(array, requirements="C"))  # keeps 0-d arrays 0-d
    if isinstance(leaf.ty, relax.ShapeType) and isinstance(value, (list, tuple)):
        return tvm_ffi.Shape([int(d) for d in value])
    return value


def _from_vm(out):
    """A VM result as numpy arrays, lists for tuples; shapes and prim values as they come."""
    if hasattr(out, "numpy"):
        return out.numpy()
    if isinstance(out, tvm_ffi.Shape):
        return out
    if isinstance(out, tvm_ffi.Array):
        return [_from_vm(o) for o in out]
    return out


class HostOpRunner:
    """Compiles each host op once and runs it on numpy arrays."""

    def __init__(self) -> None:
        self._compiled: dict[int, _HostFunction] = {}

    def _function(self, call: relax.Call) -> _HostFunction:
        key = id(call)
        if key not in self._compiled:
            self._compiled[key] = _HostFunction(call)
        return self._compiled[key]

    def run(self, call: relax.Call, args: list):
        """`args` mirror the call's arguments: arrays for tensor vars, lists for tuples, None for
        what is compiled in. Returns an array, or a list for an op that returns a tuple."""
        return self._function(call)(args)

    def run_torch(self, call: relax.Call, args: list):
        """`run` for PyTorch tensors (the float interpretation used by calibration)."""
        import torch

        def to_numpy(a):
            if isinstance(a, list):
                return [to_numpy(x) for x in a]
            return a.numpy() if isinstance(a, torch.Tensor) else a

        def to_torch(a):
            if isinstance(a, list):
                return [to_torch(x) for x in a]
            return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

        return to_torch(self.run(call, to_numpy(args)))
