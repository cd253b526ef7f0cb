"""Frontend: a PyTorch model -> a Relax IRModule ready for partitioning.

Capture goes through ``torch.export``; batch norm is folded into the preceding convolution and
constants are folded, so the partitioner sees conv2d + add(bias) chains.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard
from tvm.relax.frontend.torch import from_exported_program


class ModelImportError(RuntimeError):
    """The model could not be captured or translated."""


def export_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor]) -> torch.export.ExportedProgram:
    if isinstance(model, torch.export.ExportedProgram):
        return model
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module or ExportedProgram, got {type(model).__name__}")
    model = model.eval()
    try:
        return torch.export.export(model, tuple(example_inputs))
    except Exception as err:  # torch raises many kinds; all mean "cannot capture"
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelImportError(
            f"torch.export could not capture {type(model).__name__}: {first_line}"
        ) from err


def _fold_batch_norm_after_biased_conv(func: relax.Function) -> relax.Function:
    """conv2d -> add(bias) -> batch_norm (inference) becomes conv2d(w') -> add(b').

    TVM's FoldBatchnormToConv2D only folds a batch norm that directly follows the convolution;
    a convolution with its own bias puts an add in between.
    """
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    biased = is_op("relax.add")(conv, is_const())
    bn = is_op("relax.nn.batch_norm")(biased, is_const(), is_const(), is_const(), is_const())
    pattern = is_tuple_get_item(bn, 0)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        bn_call, conv_call, add_call = matches[bn], matches[conv], matches[biased]
        if int(bn_call.attrs.axis) != 1 or conv_call.attrs.out_layout != "NCHW":
            return expr
        gamma, beta, mean, var = (a.value.numpy().astype(np.float64) for a in bn_call.args[1:])
        scale = gamma / np.sqrt(var + float(bn_call.attrs.epsilon))
        weight = conv_call.args[1].value.numpy().astype(np.float64)
        bias_const = add_call.args[1].value.numpy().astype(np.float64)
        bias = np.broadcast_to(bias_const.reshape(-1), weight.shape[:1]) if bias_const.size in (1, weight.shape[0]) else None
        if bias is None:
            return expr
        a = conv_call.attrs
        folded = relax.op.nn.conv2d(
            conv_call.args[0],
            relax.const((weight * scale.reshape(-1, 1, 1, 1)).astype(np.float32)),
            strides=a.strides, padding=a.padding, dilation=a.dilation, groups=int(a.groups),
            data_layout=a.data_layout, kernel_layout=a.kernel_layout, out_layout=a.out_layout,
            out_dtype=a.out_dtype,
        )
        shift = ((bias - mean) * scale + beta).astype(np.float32).reshape(1, -1, 1, 1)
        return relax.op.add(folded, relax.const(shift))

    return rewrite_call(pattern, rewrite, func)


def to_relax(program: torch.export.ExportedProgram) -> tvm.IRModule:
    try:
        mod = from_exported_program(program)
    except Exception as err:
        raise ModelImportError(f"TVM's PyTorch frontend could not translate the program: {err}") from err
    mod = tvm.transform.Sequential(
        [relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant()]
    )(mod)
    mod["main"] = _fold_batch_norm_after_biased_conv(mod["main"])
    return tvm.transform.Sequential(
        [
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)


def import_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor] = ()) -> tvm.IRModule:
    """torch model (or exported program) -> Relax IRModule with batch norm and constants folded."""
    return to_relax(export_model(model, example_inputs))
