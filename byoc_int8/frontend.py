"""Frontend: a model -> a Relax IRModule ready for partitioning.

PyTorch models are captured with ``torch.export``; batch norm is folded into the preceding
convolution and constants are folded, so the partitioner sees conv2d + add(bias) chains.
Models quantized elsewhere (full-integer ``.tflite``, ONNX QDQ) go through TVM's own importers,
which keep them as dequantize -> op -> quantize chains over int8 constants; nothing is folded
there, so that the int8 weights and the model's scales stay visible to the QDQ composites.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard
from tvm.relax.frontend.torch import from_exported_program

from .fold import fold_constants


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


def _batch_norm_as_depthwise_conv(func: relax.Function) -> relax.Function:
    """An inference batch norm that no convolution precedes (DenseNet's BN -> ReLU -> conv,
    pre-activation ResNets) is a per-channel affine: a depthwise 1x1 convolution plus a bias,
    which the conv2d composites take."""
    bn = is_op("relax.nn.batch_norm")(wildcard(), is_const(), is_const(), is_const(), is_const())
    pattern = is_tuple_get_item(bn, 0)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        call = matches[bn]
        shape = call.args[0].ty.shape
        if int(call.attrs.axis) != 1 or shape is None or len(shape.values) != 4:
            return expr
        gamma, beta, mean, var = (a.value.numpy().astype(np.float64) for a in call.args[1:])
        scale = gamma / np.sqrt(var + float(call.attrs.epsilon))
        conv = relax.op.nn.conv2d(call.args[0], relax.const(scale.astype(np.float32).reshape(-1, 1, 1, 1)),
                                  groups=len(scale))
        return relax.op.add(conv, relax.const((beta - mean * scale).astype(np.float32).reshape(1, -1, 1, 1)))

    return rewrite_call(pattern, rewrite, func)


def _split_as_slices(func: relax.Function) -> relax.Function:
    """split(x)[i] (torch.chunk / torch.split, ShuffleNet's channel split) becomes the strided
    slice it reads, so that each part is an ordinary single-output op."""
    split = is_op("relax.split")(wildcard())
    pattern = is_tuple_get_item(split, None)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        call = matches[split]
        shape = call.args[0].ty.shape
        if shape is None:
            return expr
        dims = [int(d) for d in shape.values]
        axis = int(call.attrs.axis) % len(dims)
        sections = call.attrs.indices_or_sections
        if hasattr(sections, "__len__"):  # split points
            bounds = [0, *[int(i) for i in sections], dims[axis]]
        else:  # a number of equal parts
            bounds = list(range(0, dims[axis] + 1, dims[axis] // int(sections)))
        begin, end = bounds[expr.index], bounds[expr.index + 1]
        return relax.op.strided_slice(call.args[0], axes=[axis], begin=[begin], end=[end], strides=[1])

    return rewrite_call(pattern, rewrite, func)


def to_relax(program: torch.export.ExportedProgram) -> tvm.IRModule:
    try:
        mod = from_exported_program(program)
    except Exception as err:
        raise ModelImportError(f"TVM's PyTorch frontend could not translate the program: {err}") from err
    # Constants are folded in numpy first (fold.py: the same bytes, without TVM building each
    # constant expression); FoldConstant takes whatever is left.
    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    mod["main"] = fold_constants(mod["main"])
    mod = relax.transform.FoldConstant()(mod)
    mod["main"] = fold_constants(
        _split_as_slices(_batch_norm_as_depthwise_conv(_fold_batch_norm_after_biased_conv(mod["main"])))
    )
    mod = tvm.transform.Sequential(
        [
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)
    # DeadCodeElimination keeps unused tuples (max_pool's (values, indices) pair, once its getter
    # is canonicalized away); left in, they would make a region export the values they hold.
    mod["main"] = relax.analysis.remove_all_unused(mod["main"])
    return mod


def import_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor] = ()) -> tvm.IRModule:
    """torch model (or exported program) -> Relax IRModule with batch norm and constants folded."""
    return to_relax(export_model(model, example_inputs))


def _load_bytes(path: str | os.PathLike, kind: str) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise ModelImportError(f"no such {kind} file: {path}")
    return path.read_bytes()


def import_tflite(path: str | os.PathLike) -> tvm.IRModule:
    """A full-integer .tflite model -> Relax (NHWC, dequantize -> op -> quantize chains)."""
    try:
        import tflite
        from tvm.relax.frontend.tflite import from_tflite
        from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter
    except ImportError as err:
        raise ModelImportError(f"reading .tflite models needs the 'tflite' package ({err})") from err

    class Converter(OperatorConverter):
        # TVM 0.27 converts a quantized PAD correctly but leaves it off its list of quantized ops.
        _SUPPORTED_QUANTIZED_OPS = OperatorConverter._SUPPORTED_QUANTIZED_OPS | {"PAD", "PADV2"}

    buffer = _load_bytes(path, ".tflite")
    try:
        model = tflite.Model.GetRootAsModel(buffer, 0)
        mod = from_tflite(model, op_converter=Converter)
    except Exception as err:  # the flatbuffer reader and the converter raise many kinds
        raise ModelImportError(f"TVM's TFLite frontend could not translate {path}: {err}") from err
    return _own_dequantizes(mod)


@relax.expr_functor.mutator
class _DequantizePerConsumer(relax.PyExprMutator):
    """Gives every consumer of a dequantized activation its own dequantize, as TFLite's importer
    does, so that each QDQ composite owns its inputs' dequantizes (a shared one would leak out of
    the first composite that takes it as a float intermediate)."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        args = []
        for arg in call.args:
            bound = self.lookup_binding(arg) if isinstance(arg, relax.Var) else None
            if isinstance(bound, relax.Call) and bound.op == tvm.ir.Op.get("relax.dequantize") and not isinstance(bound.args[0], tvm.ir.GenericConst):
                arg = self.builder_.emit(relax.Call(bound.op, bound.args, bound.attrs))
            args.append(arg)
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)


def import_onnx(path: str | os.PathLike) -> tvm.IRModule:
    """An ONNX model (QDQ-quantized by ONNX Runtime, or float) -> Relax (NCHW)."""
    try:
        import onnx
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError as err:
        raise ModelImportError(f"reading .onnx models needs the 'onnx' package ({err})") from err
    buffer = _load_bytes(path, ".onnx")
    try:
        mod = from_onnx(onnx.load_from_string(buffer), keep_params_in_input=False)
    except Exception as err:
        raise ModelImportError(f"TVM's ONNX frontend could not translate {path}: {err}") from err
    return _own_dequantizes(mod)


def _own_dequantizes(mod: tvm.IRModule) -> tvm.IRModule:
    mod["main"] = _DequantizePerConsumer().visit_expr(mod["main"])
    return relax.transform.DeadCodeElimination()(mod)
