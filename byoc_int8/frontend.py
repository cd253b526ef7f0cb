"""Frontend: a model -> a Relax IRModule ready for partitioning.

PyTorch models are captured with ``torch.export``; batch norm is folded into the preceding
convolution and constants are folded, so the partitioner sees conv2d + add(bias) chains.
Models quantized elsewhere (full-integer ``.tflite``, ONNX QDQ) go through TVM's own importers,
which keep them as dequantize -> op -> quantize chains over int8 constants; nothing is folded
there, so that the int8 weights and the model's scales stay visible to the QDQ composites.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard
from tvm.relax.frontend.torch import from_exported_program

from .errors import ModelFileError, ModelImportError, shown
from .fold import fold_constants


# ---- validation of what a model file declares (a model file is input from outside) ----

# The most elements one tensor may have: far beyond any CNN's (ResNet-18's largest activation
# has 0.8 M), and small enough that every size and index the int32 kernels compute fits.
MAX_TENSOR_ELEMENTS = 1 << 28


def check_shape(shape: Iterable[int], what: str) -> None:
    """Refuse (:class:`ModelFileError`, naming `what`) a negative dimension or more than
    MAX_TENSOR_ELEMENTS elements. Works on the declared shape only: nothing is allocated."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ModelFileError(f"{what} has a negative dimension: shape {tuple(dims)}")
    if math.prod(dims) > MAX_TENSOR_ELEMENTS:
        raise ModelFileError(f"{what} is too large: shape {tuple(dims)} has {math.prod(dims):,} elements, "
                             f"more than the {MAX_TENSOR_ELEMENTS:,} byoc-int8 accepts")


def _static_shape(expr) -> tuple[int, ...] | None:
    """The static shape of a tensor-typed expression; None for other types and symbolic shapes."""
    values = getattr(getattr(getattr(expr, "ty", None), "shape", None), "values", None)
    if values is None:
        return None
    try:
        return tuple(int(d) for d in values)
    except TypeError:  # a symbolic dimension
        return None


def check_module_sizes(mod: tvm.IRModule) -> tvm.IRModule:
    """Every tensor of an imported module (main's inputs, every bound value, every constant) has
    non-negative dimensions and at most MAX_TENSOR_ELEMENTS elements, and main's inputs have
    static, non-empty shapes; returns `mod`."""
    for param in mod["main"].params:
        shape = _static_shape(param)
        if shape is None:
            raise ModelFileError(f"the model's input {shown(param.name)} has no static shape ({param.ty}): "
                                 "export the model with a fixed input shape")
        check_shape(shape, f"the model's input {shown(param.name)}")
        if 0 in shape:
            raise ModelFileError(f"the model's input {shown(param.name)} is empty: shape {shape}")

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.GenericConst):
            check_shape(expr.value.shape, "a constant of the model")
        elif isinstance(expr, relax.Var):
            shape = _static_shape(expr)
            if shape is not None:
                check_shape(shape, f"tensor {shown(expr.name)}")

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for param in func.params:
                visit(param)
            relax.analysis.post_order_visit(func.body, visit)
    return mod


def check_pt2_archive(path: str | os.PathLike) -> None:
    """Refuse a ``.pt2`` file before ``torch.export.load`` reads it if loading or using it would
    run code the file carries, or if it declares absurd tensors.

    torch 2.14's loader unpickles with ``weights_only=False`` the payloads an archive marks as
    pickled and example inputs that the restricted unpickler refuses (so any Python code), loads
    custom and opaque objects, evaluates symbolic shape expressions with ``sympy.sympify`` (which
    evaluates Python), loads the shared objects of an AOTInductor package, and
    ``ExportedProgram.module()`` compiles and runs the archive's guard code with ``exec`` and
    writes parameter and buffer names unescaped into the Python code it generates and runs. Only
    archives without any of these are accepted: static shapes, plain tensors, example inputs the
    ``weights_only`` unpickler reads, names of ``[A-Za-z0-9_.]``. The declared size of every
    tensor is checked (:func:`check_shape`): the loader allocates a declared shape for an empty
    record."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"no such file: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            # torch's reader drops the archive's top-level folder
            entries = {name.split("/", 1)[1]: name for name in archive.namelist() if "/" in name}
            _check_pt2_entries(path, entries, lambda name: archive.read(entries[name]))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, KeyError, RuntimeError) as err:
        if isinstance(err, ModelFileError):
            raise
        raise ModelFileError(f"cannot read {path} as a torch.export archive (a .pt2 file from "
                             f"torch.export.save): {err}") from None


def _check_pt2_entries(path: Path, entries: dict, read) -> None:
    from torch.export.pt2_archive import constants as pt2

    def refuse(what: str) -> ModelFileError:
        return ModelFileError(f"{path}: {what}; byoc-int8 loads only .pt2 files that run no code when loaded")

    if pt2.ARCHIVE_FORMAT_PATH not in entries or read(pt2.ARCHIVE_FORMAT_PATH).decode(errors="replace").strip() != pt2.ARCHIVE_FORMAT_VALUE:
        raise ModelFileError(f"{path} is not a torch.export archive: save the program with torch.export.save")
    if any(name.startswith(pt2.AOTINDUCTOR_DIR) for name in entries):
        raise refuse("it holds AOTInductor compiled code, which torch.export.load loads as a shared library")
    models = [name for name in entries if name.startswith(pt2.MODELS_DIR) and name.endswith(".json")]
    if not models:
        raise ModelFileError(f"{path} holds no exported program (no {pt2.MODELS_DIR}*.json)")
    for name in models:
        program = json.loads(read(name))
        if program.get("guards_code"):
            raise refuse("it carries guard code (Python that ExportedProgram.module() executes)")
        for key, value in _json_items(program):
            if key == "as_expr":
                raise refuse(f"it has symbolic shapes (expressions torch evaluates with sympy, e.g. "
                             f"{shown(value.get('expr_str') if isinstance(value, dict) else value)}): export with static shapes")
            if (key in _PT2_NAME_KEYS or key.endswith("_name")) and not _plain_names(value):
                raise refuse(f"its {key} {shown(value)} is not a plain name (torch writes names into the "
                             "Python code it generates for the program)")
        tensors = program.get("graph_module", {}).get("graph", {}).get("tensor_values", {})
        for tensor_name, meta in tensors.items():
            check_shape(_pt2_sizes(meta), f"tensor {shown(tensor_name)} of {path.name}")
        model = name[len(pt2.MODELS_DIR) : -len(".json")]
        for config_name in (pt2.WEIGHTS_CONFIG_FILENAME_FORMAT.format(model), pt2.CONSTANTS_CONFIG_FILENAME_FORMAT.format(model)):
            if config_name not in entries:
                continue
            for fqn, payload in json.loads(read(config_name)).get("config", {}).items():
                path_name = str(payload.get("path_name", ""))
                if not _plain_names(fqn):
                    raise refuse(f"its tensor name {shown(fqn)} is not a plain name (torch writes names into the "
                                 "Python code it generates for the program)")
                if payload.get("use_pickle"):
                    raise refuse(f"its tensor {shown(fqn)} is pickled (torch.export.load unpickles it with weights_only=False)")
                if path_name.startswith((pt2.CUSTOM_OBJ_FILENAME_PREFIX, pt2.OPAQUE_OBJ_FILENAME_PREFIX)):
                    raise refuse(f"its constant {shown(fqn)} is a pickled Python object")
                if payload.get("tensor_meta") is not None:
                    check_shape(_pt2_sizes(payload["tensor_meta"]), f"tensor {shown(fqn)} of {path.name}")
        inputs = pt2.SAMPLE_INPUTS_FILENAME_FORMAT.format(model)
        if inputs in entries:
            try:
                torch.load(io.BytesIO(read(inputs)), weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, ValueError, TypeError, EOFError, AttributeError) as err:
                reason = next((line.strip() for line in str(err).splitlines() if "Unsupported global" in line),
                              type(err).__name__)
                raise refuse(f"its example inputs are not plain tensors (torch.export.load would unpickle them "
                             f"with weights_only=False; {shown(reason, 120)})") from None


# Keys of a serialized program whose values are names: tensor and node names, operator targets,
# module paths, argument names (and every key ending in "_name": parameter_name, buffer_name ...).
_PT2_NAME_KEYS = frozenset({"name", "target", "fqn", "forward_arg_names"})
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.]*")


def _plain_names(value) -> bool:
    """A name (or a list of names) of letters, digits, ``_`` and ``.`` only: what torch itself
    writes, and all that can appear in Python code torch generates without escaping."""
    values = value if isinstance(value, list) else [value]
    return all(isinstance(v, str) and _PLAIN_NAME.fullmatch(v) for v in values)


def _json_items(value):
    """Every (key, value) pair in a parsed JSON document."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                yield key, child
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


def _pt2_sizes(meta: dict) -> list[int]:
    """The sizes of a serialized tensor meta (symbolic sizes are refused before this is read)."""
    sizes = meta.get("sizes", []) if isinstance(meta, dict) else []
    return [int(size["as_int"]) if isinstance(size, dict) and "as_int" in size else 0 for size in sizes]


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


def _batched_linear_as_dense(func: relax.Function) -> relax.Function:
    """TVM's frontend writes a linear layer over a rank-3 input (a per-position linear on
    ``(N, L, C)``) as ``matmul(broadcast_to(x, x's own shape), W)`` with the weight broadcast to
    ``(1, C, units)``: the broadcast moves nothing and the weight is one matrix, so it becomes
    ``matmul(x, W[0])``, the dense layer (and bias add) that the dense composites take."""
    data, weight = wildcard(), is_const()
    broadcast = is_op("relax.broadcast_to")(data, wildcard())
    pattern = is_op("relax.matmul")(broadcast, weight)

    def rewrite(expr: relax.Expr, matches: dict) -> relax.Expr:
        w = matches[weight].value.numpy()
        shapes = [getattr(matches[p].ty, "shape", None) for p in (data, broadcast)]
        if not all(isinstance(s, relax.ShapeExpr) for s in shapes):
            return expr
        same = [str(d) for d in shapes[0].values] == [str(d) for d in shapes[1].values]
        if w.ndim <= 2 or any(d != 1 for d in w.shape[:-2]) or not same:
            return expr
        return relax.op.matmul(matches[data], relax.const(w.reshape(w.shape[-2:])), out_dtype=expr.attrs.out_dtype)

    return rewrite_call(pattern, rewrite, func)


def to_relax(program: torch.export.ExportedProgram) -> tvm.IRModule:
    try:
        mod = from_exported_program(program)
    except Exception as err:
        raise ModelImportError(f"TVM's PyTorch frontend could not translate the program: {_reason(err)}") from err
    # Constants are folded in numpy first (fold.py: the same bytes, without TVM building each
    # constant expression); FoldConstant takes whatever is left.
    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    mod["main"] = fold_constants(mod["main"])
    mod = relax.transform.FoldConstant()(mod)
    mod["main"] = fold_constants(_batched_linear_as_dense(
        _split_as_slices(_batch_norm_as_depthwise_conv(_fold_batch_norm_after_biased_conv(mod["main"])))
    ))
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
    return check_module_sizes(mod)


def import_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor] = ()) -> tvm.IRModule:
    """torch model (or exported program) -> Relax IRModule with batch norm and constants folded."""
    return to_relax(export_model(model, example_inputs))


def _reason(err: Exception) -> str:
    """An importer's exception in a few words: its type, and its message without traceback lines."""
    lines = [line.strip() for line in str(err).splitlines()
             if line.strip() and not line.startswith((" ", "\t", "Traceback", "File "))]
    return f"{type(err).__name__}: {' '.join(lines)}" if lines else type(err).__name__


def _load_bytes(path: str | os.PathLike, kind: str) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"no such {kind} file: {path}")
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
    if not tflite.Model.ModelBufferHasIdentifier(buffer, 0):
        raise ModelFileError(f"{path} is not a TFLite model (no 'TFL3' flatbuffer identifier)")
    model = tflite.Model.GetRootAsModel(buffer, 0)
    _check_tflite(model, Path(path))
    try:
        mod = from_tflite(model, op_converter=Converter)
    except Exception as err:  # the flatbuffer reader and the converter raise many kinds
        raise ModelImportError(f"TVM's TFLite frontend could not translate {path}: {_reason(err)}") from err
    return check_module_sizes(_own_dequantizes(mod))


def _check_tflite(model, path: Path) -> None:
    """The declared shape of every tensor of every subgraph (:func:`check_shape`), read before
    TVM's importer builds anything."""
    try:
        for s in range(model.SubgraphsLength()):
            subgraph = model.Subgraphs(s)
            for t in range(subgraph.TensorsLength()):
                tensor = subgraph.Tensors(t)
                shape = tensor.ShapeAsNumpy() if tensor.ShapeLength() else []
                name = (tensor.Name() or b"").decode("utf-8", errors="replace")
                check_shape([int(d) for d in shape], f"tensor {shown(name)} of {path.name}")
    except ModelFileError:
        raise
    except Exception as err:  # a corrupt flatbuffer: offsets out of range
        raise ModelFileError(f"cannot read {path} as a TFLite model: {err}") from None


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
        model = onnx.load_from_string(buffer)
    except Exception as err:  # protobuf's DecodeError and others
        raise ModelFileError(f"cannot read {path} as an ONNX model: {err}") from None
    _check_onnx(model.graph, Path(path))
    try:
        mod = from_onnx(model, keep_params_in_input=False)
    except Exception as err:
        raise ModelImportError(f"TVM's ONNX frontend could not translate {path}: {_reason(err)}") from err
    return check_module_sizes(_own_dequantizes(mod))


def _check_onnx(graph, path: Path) -> None:
    """Before TVM's importer converts anything: every initializer and constant holds its own data
    (external data would make the importer read other files, by a path the model names) and
    every declared shape passes :func:`check_shape`; subgraphs too."""
    import onnx

    def check_tensor(tensor, what: str) -> None:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            raise ModelFileError(f"{path}: {what} {shown(tensor.name)} keeps its data in an external file; "
                                 "byoc-int8 reads only self-contained .onnx files")
        check_shape(tensor.dims, f"{what} {shown(tensor.name)} of {path.name}")

    for tensor in graph.initializer:
        check_tensor(tensor, "initializer")
    for sparse in graph.sparse_initializer:
        check_tensor(sparse.values, "sparse initializer")
        check_shape(sparse.dims, f"sparse initializer {shown(sparse.values.name)} of {path.name}")
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim]
            check_shape(dims, f"tensor {shown(value.name)} of {path.name}")
    for node in graph.node:
        for attribute in node.attribute:
            for tensor in (*([attribute.t] if attribute.HasField("t") else []), *attribute.tensors):
                check_tensor(tensor, f"constant of node {shown(node.name or node.op_type)}")
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                _check_onnx(subgraph, path)


def _own_dequantizes(mod: tvm.IRModule) -> tvm.IRModule:
    mod["main"] = _DequantizePerConsumer().visit_expr(mod["main"])
    return relax.transform.DeadCodeElimination()(mod)
