"""Factory for ONNX QDQ test models quantized by ONNX Runtime's ``quantize_static``.

Builds float ONNX models from random-init PyTorch networks (torchvision ResNet-18 and
MobileNetV2 with randomized batch-norm statistics, plus a tiny 32x32 CNN for fast tests),
quantizes them with :func:`onnxruntime.quantization.quantize_static` in the QDQ format
(``QuantizeLinear``/``DequantizeLinear`` pairs around float ops, int8 per-channel weights,
int32 biases) and runs them on ONNX Runtime's CPU execution provider, which is the ground
truth compiled models are compared against.

Nothing is cached: callers pass the directory to write into (pytest's ``tmp_path`` /
``tmp_path_factory``).  ``onnx``, ``onnxruntime``, ``torch`` and ``torchvision`` are imported
lazily so importing this module is cheap; the test extra installs them, and ``pytest.importorskip("onnx")`` before using it. ONNX Runtime itself runs through
:mod:`byoc_int8.peers`.

Typical use::

    path = build_qdq_model("tiny", tmp_path)
    x = calibration_inputs("tiny", 1, seed=4321)
    expected = byoc_int8.peers.onnxruntime_session(path, output_quantization(path)[0]).run(x)

Notes on the toolchain (torch 2.14, onnx 1.23, onnxruntime 1.32):

* ``torch.onnx.export`` defaults to the dynamo exporter, which needs the extra ``onnxscript``
  package; the legacy TorchScript exporter (``dynamo=False``, opset 17) works out of the box
  and folds eval-mode batch norms into the preceding convolutions, so it is used here.
* The float model is passed through ``onnxruntime.quantization.shape_inference.quant_pre_process``
  (symbolic shape inference + ORT's basic graph optimizations, which also drop the exporter's
  ``Identity`` nodes and folds ``Clip``'s ``Constant`` min/max inputs into initializers) before
  quantization, as ONNX Runtime's documentation recommends.
* The QDQ quantizer drops every ``Relu``/``Clip`` that follows a ``Conv``/``Add`` (the output
  ``QuantizeLinear``, zero point -128 for int8, does the clamping); ``MaxPool`` and ``Flatten``
  get a Q/DQ pair on their output with the *same* scale/zero point as their input; weights are
  symmetric int8 in [-127, 127] with zero point 0 and ``axis=0``; biases are int32 with
  scale == input scale * weight scale (exactly, in float32) and zero point 0.
* ``ORT_ENABLE_ALL`` rewrites the graph into a CPU-dependent mix of integer kernels
  (``QLinearConv``, ``QGemm``, ``QLinearGlobalAveragePool``) and float NCHWc convolutions, so its
  outputs differ from ``ORT_DISABLE_ALL`` (the literal QDQ semantics) by up to 1 output LSB;
  compare against either with a tolerance of a couple of LSB (see :func:`output_quantization`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

SEED = 1234
"""Seed for the calibration data; weights use ``torch.manual_seed(0)`` and BN stats seed 1."""

NUM_CALIBRATION = 16
"""Number of calibration samples ``build_qdq_model`` feeds to ``quantize_static``."""

OPSET = 17
"""ONNX opset of the exported float models (``QuantizeLinear``/``DequantizeLinear`` v13)."""

INPUT_NAME = "input"
OUTPUT_NAME = "output"

MODEL_INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "tiny": (1, 3, 32, 32),
    "resnet18": (1, 3, 224, 224),
    "mobilenet_v2": (1, 3, 224, 224),
}
"""NCHW input shape (batch 1) of each model ``build_qdq_model`` knows."""


# ----------------------------------------------------------------------------------------
# Float models
# ----------------------------------------------------------------------------------------


def _tiny_cnn() -> "nn.Module":
    """A small CNN at 3x32x32: conv+bn+relu, maxpool, a residual block (two 3x3 convs and an
    add), a strided conv, global average pool, flatten and a linear layer (10 classes)."""
    import torch
    from torch import nn

    class TinyCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.pool = nn.MaxPool2d(2)
            self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
            self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
            self.conv4 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            y = self.conv3(torch.relu(self.conv2(x)))
            x = torch.relu(x + y)
            x = torch.relu(self.conv4(x))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return TinyCNN()


def make_torch_model(name: str) -> "nn.Module":
    """The eval-mode PyTorch model called ``name`` (deterministic: weights seed 0, BN seed 1)."""
    import torch

    from byoc_int8.models import randomize_batch_norm

    if name not in MODEL_INPUT_SHAPES:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODEL_INPUT_SHAPES)}")
    torch.manual_seed(0)
    if name == "tiny":
        model = _tiny_cnn()
    else:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    return model.eval()


def calibration_inputs(name: str, count: int, seed: int = SEED) -> np.ndarray:
    """``count`` standard-normal float32 inputs for model ``name``, stacked on axis 0
    (feed them one at a time: the models have a fixed batch of 1)."""
    shape = MODEL_INPUT_SHAPES[name]
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count,) + tuple(shape[1:]), dtype=np.float32)


# ----------------------------------------------------------------------------------------
# Export / quantize / run
# ----------------------------------------------------------------------------------------


def export_onnx(model: "nn.Module", example_input: "torch.Tensor | np.ndarray",
                path: str | Path, opset: int = OPSET) -> Path:
    """Export ``model`` to a float ONNX file at ``path`` with a fixed input shape (that of
    ``example_input``, batch 1), input ``"input"`` and output ``"output"``.

    Uses the legacy TorchScript exporter (``dynamo=False``): the dynamo exporter, the default
    since torch 2.9, needs ``onnxscript``.  Constant folding fuses eval-mode batch norms into the
    convolutions."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(example_input, np.ndarray):
        example_input = torch.from_numpy(example_input)
    model = model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DeprecationWarning for the TorchScript exporter
        with torch.no_grad():
            torch.onnx.export(
                model,
                (example_input,),
                str(path),
                dynamo=False,
                opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                do_constant_folding=True,
            )
    return path


class _ArrayReader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over the rows of an array (each
    row fed as one batch-1 sample)."""

    def __init__(self, input_name: str, data: np.ndarray) -> None:
        self.input_name = input_name
        self.data = np.ascontiguousarray(data, dtype=np.float32)
        self._iter: Iterator[dict[str, np.ndarray]] | None = None
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)  # type: ignore[arg-type]

    def rewind(self) -> None:
        self._iter = iter([{self.input_name: row[None]} for row in self.data])


def quantize_qdq(float_path: str | Path, out_path: str | Path, calibration: np.ndarray,
                 per_channel: bool = True, activation_type: str = "QInt8",
                 weight_type: str = "QInt8", preprocess: bool = True) -> Path:
    """Quantize the float ONNX model at ``float_path`` with ORT's ``quantize_static`` in the QDQ
    format (MinMax calibration over the rows of ``calibration``) and write it to ``out_path``.

    ``activation_type``/``weight_type`` are ``"QInt8"`` or ``"QUInt8"`` (names of
    ``onnxruntime.quantization.QuantType``).  With ``per_channel`` the conv / gemm weights get
    one scale per output channel (``DequantizeLinear`` ``axis=0``); biases become int32 with
    scale = input scale * weight scale.  With ``preprocess`` the model is first run through
    ``quant_pre_process`` (shape inference + basic ORT graph optimization)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    float_path, out_path = Path(float_path), Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    src = float_path
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        src = out_path.with_name(out_path.stem + ".preprocessed.onnx")
        quant_pre_process(str(float_path), str(src), skip_symbolic_shape=False)

    class Reader(_ArrayReader, CalibrationDataReader):
        pass

    import onnx

    input_name = onnx.load(str(src), load_external_data=False).graph.input[0].name
    quantize_static(
        str(src),
        str(out_path),
        Reader(input_name, calibration),
        quant_format=QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=getattr(QuantType, activation_type),
        weight_type=getattr(QuantType, weight_type),
    )
    return out_path


def build_qdq_model(name: str, directory: str | Path, *, per_channel: bool = True,
                    activation_type: str = "QInt8", weight_type: str = "QInt8",
                    num_calibration: int = NUM_CALIBRATION) -> Path:
    """Build the QDQ model ``name`` ("tiny", "resnet18" or "mobilenet_v2") in ``directory``:
    export ``<name>.float.onnx``, quantize to ``<name>.qdq.onnx`` with ``num_calibration``
    samples of :func:`calibration_inputs` (seed :data:`SEED`) and return the QDQ path."""
    import torch

    directory = Path(directory)
    model = make_torch_model(name)
    example = torch.zeros(MODEL_INPUT_SHAPES[name])
    float_path = export_onnx(model, example, directory / f"{name}.float.onnx")
    return quantize_qdq(float_path, directory / f"{name}.qdq.onnx",
                        calibration_inputs(name, num_calibration), per_channel=per_channel,
                        activation_type=activation_type, weight_type=weight_type)


def output_quantization(path: str | Path) -> tuple[float, int]:
    """(scale, zero point) of the ``QuantizeLinear``/``DequantizeLinear`` pair that produces the
    QDQ model's (first, float) output, to express output differences in quantization steps."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    if node.op_type != "DequantizeLinear":
        raise ValueError(f"output {out!r} is produced by {node.op_type}, not DequantizeLinear")
    zero_point = int(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else 0
    return float(inits[node.input[1]]), zero_point


# ----------------------------------------------------------------------------------------
# Hand-built QDQ graphs (no exporter, no quantizer): every name and shape chosen by the caller
# ----------------------------------------------------------------------------------------


def build_qdq_conv(path: str | Path, name=lambda n: n, input_shape: tuple[int, ...] = (1, 3, 8, 8),
                   channels: int = 4, softmax: bool = False, seed: int = 0) -> Path:
    """Write a small QDQ model built node by node with ``onnx.helper`` and return its path:
    float input -> QuantizeLinear -> DequantizeLinear -> 3x3 Conv (per-channel int8 weights and
    an int32 bias, each through a DequantizeLinear) -> QuantizeLinear -> DequantizeLinear ->
    float output, then a float Softmax over the channels when `softmax` (an op with no int8
    composite). Every tensor, node and graph name is ``name(<plain name>)``, so a test can give
    the model names that hold anything (quotes, newlines, ``*/``, ``#include``). Weights, bias
    and scales are a pure function of `seed`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    c_in = input_shape[1]
    weight = rng.integers(-127, 128, (channels, c_in, 3, 3)).astype(np.int8)
    weight_scale = (rng.uniform(0.5, 1.5, channels) / (127 * 3 * c_in)).astype(np.float32)
    x_scale, y_scale = np.float32(4.0 / 255), np.float32(3.0 / 255)
    bias = rng.integers(-300, 300, channels).astype(np.int32)
    constants = {
        "x_scale": np.array(x_scale), "x_zero_point": np.array(0, np.int8),
        "w": weight, "w_scale": weight_scale, "w_zero_point": np.zeros(channels, np.int8),
        "b": bias, "b_scale": (x_scale * weight_scale).astype(np.float32), "b_zero_point": np.zeros(channels, np.int32),
        "y_scale": np.array(y_scale), "y_zero_point": np.array(-20, np.int8),
    }
    initializers = [numpy_helper.from_array(value, name(key)) for key, value in constants.items()]
    n = name
    nodes = [
        helper.make_node("QuantizeLinear", [n("input"), n("x_scale"), n("x_zero_point")], [n("x_q")], name=n("quantize_input")),
        helper.make_node("DequantizeLinear", [n("x_q"), n("x_scale"), n("x_zero_point")], [n("x_dq")], name=n("dequantize_input")),
        helper.make_node("DequantizeLinear", [n("w"), n("w_scale"), n("w_zero_point")], [n("w_dq")], name=n("dequantize_weight"), axis=0),
        helper.make_node("DequantizeLinear", [n("b"), n("b_scale"), n("b_zero_point")], [n("b_dq")], name=n("dequantize_bias"), axis=0),
        helper.make_node("Conv", [n("x_dq"), n("w_dq"), n("b_dq")], [n("conv")], name=n("conv"), pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", [n("conv"), n("y_scale"), n("y_zero_point")], [n("y_q")], name=n("quantize_output")),
        helper.make_node("DequantizeLinear", [n("y_q"), n("y_scale"), n("y_zero_point")], [n("y")], name=n("dequantize_output")),
    ]
    out_shape = (input_shape[0], channels, *input_shape[2:])
    output = n("y")
    if softmax:
        nodes.append(helper.make_node("Softmax", [n("y")], [n("probabilities")], name=n("softmax"), axis=1))
        output = n("probabilities")
    graph = helper.make_graph(
        nodes, n("graph"),
        [helper.make_tensor_value_info(n("input"), TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=n("producer"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path
