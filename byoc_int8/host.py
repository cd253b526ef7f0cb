"""Ops that stay on the host: run through TVM itself, one compiled function per op.

Calibration and the integer reference interpret the partitioned ``main`` in Python; when a model
keeps an op outside the ``ccompiler`` regions (default mode), that op is compiled here with
TVM's own kernels, exactly as the final library runs it, and applied sample by sample (the
program is compiled for the exported batch size).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

HOST_TARGET = {"kind": "llvm"}


class HostOpRunner:
    """Compiles each host op once and runs it on numpy arrays."""

    def __init__(self) -> None:
        self._compiled: dict[int, tuple[relax.VirtualMachine, int]] = {}

    def _compile(self, call: relax.Call) -> relax.VirtualMachine:
        params: list[relax.Var] = []

        def lift(arg: relax.Expr) -> relax.Expr:
            if isinstance(arg, relax.Var):
                params.append(relax.Var(f"arg{len(params)}", arg.ty))
                return params[-1]
            if isinstance(arg, relax.Tuple):
                return relax.Tuple([lift(f) for f in arg.fields])
            return arg  # constants, shapes, prim values stay in the function

        args = [lift(a) for a in call.args]
        bb = relax.BlockBuilder()
        with bb.function("main", params):
            out = bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            bb.emit_func_output(out)
        executable = tvm.compile(bb.get(), target=tvm.target.Target(HOST_TARGET))
        return relax.VirtualMachine(executable, tvm.cpu())

    def run(self, call: relax.Call, args: list) -> np.ndarray:
        """`args` mirror the call's arguments: arrays for tensor vars, lists for tuples."""
        key = id(call)
        if key not in self._compiled:
            self._compiled[key] = (self._compile(call), call)  # keep `call` alive: ids stay unique
        vm, _ = self._compiled[key]
        tensors = _flatten(args)
        batch = tensors[0].shape[0] if tensors else 1
        outputs = []
        for b in range(batch):
            sample = [tvm.runtime.tensor(np.ascontiguousarray(t[b : b + 1])) for t in tensors]
            outputs.append(vm["main"](*sample).numpy())
        return np.concatenate(outputs)


    def run_torch(self, call: relax.Call, args: list):
        """`run` for PyTorch tensors (the float interpretation used by calibration)."""
        import torch

        def to_numpy(a):
            if isinstance(a, (list, tuple)):
                return [to_numpy(x) for x in a]
            return a.numpy() if isinstance(a, torch.Tensor) else a

        return torch.from_numpy(self.run(call, to_numpy(args)))


def _flatten(args: list) -> list[np.ndarray]:
    flat = []
    for a in args:
        if isinstance(a, (list, tuple)):
            flat += _flatten(list(a))
        elif a is not None:
            flat.append(np.asarray(a))
    return flat
