"""Factory for small full-integer ``.tflite`` test models.

Builds a handful of small, untrained Keras CNNs with deterministic random weights,
converts them with TensorFlow Lite's post-training full-integer quantization (int8
weights and activations, int32 biases, per-channel conv weights) and runs them on
TFLite's *reference* kernels (``BUILTIN_REF``), which is the bit-exact ground truth
that compiled models are compared against.

Nothing here is cached on disk: callers pass the path to write (pytest's
``tmp_path`` / ``tmp_path_factory``). :func:`build_tflite` runs TensorFlow in a child process:
TensorFlow loaded into the test process makes a later ``import triton`` (pulled in by
``torch.export`` / ``torch.onnx``) crash. The reference kernels run through
:mod:`byoc_int8.peers` (ai-edge-litert needs no TensorFlow).

Typical use::

    path = build_tflite("mobilenet", tmp_path / "mobilenet.tflite")
    expected = byoc_int8.peers.tflite_reference(path).run(x)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

SEED = 1234
"""Seed for weights and calibration data; every model is a pure function of its name."""

NUM_CALIBRATION = 64
"""Number of calibration samples fed to the converter's representative dataset."""


# ----------------------------------------------------------------------------------------
# Architectures
# ----------------------------------------------------------------------------------------


def _tf():
    import tensorflow as tf

    return tf


def _layers():
    return _tf().keras.layers


def _kernel_init(seed: int) -> Any:
    # He-normal keeps activations O(1) through relu stacks without any training.
    return _tf().keras.initializers.HeNormal(seed=seed)


def _bias_init(seed: int) -> Any:
    # Non-zero biases so that the int32 bias path is exercised.
    return _tf().keras.initializers.RandomUniform(-0.2, 0.2, seed=seed)


class _Seeds:
    """Hands out distinct, reproducible initializer seeds layer by layer."""

    def __init__(self, base: int) -> None:
        self._next = base

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _conv(seeds: _Seeds, filters: int, kernel: int | tuple[int, int], **kw: Any) -> Any:
    return _layers().Conv2D(
        filters, kernel, kernel_initializer=_kernel_init(seeds()), bias_initializer=_bias_init(seeds()), **kw
    )


def _dwconv(seeds: _Seeds, kernel: int | tuple[int, int], **kw: Any) -> Any:
    return _layers().DepthwiseConv2D(
        kernel, depthwise_initializer=_kernel_init(seeds()), bias_initializer=_bias_init(seeds()), **kw
    )


def _dense(seeds: _Seeds, units: int, **kw: Any) -> Any:
    return _layers().Dense(
        units, kernel_initializer=_kernel_init(seeds()), bias_initializer=_bias_init(seeds()), **kw
    )


def mobilenet() -> "tf.keras.Model":
    """MobileNet-v2-like block: 32x32x3 -> stride-2 'same' conv + relu6, depthwise 3x3 + relu6,
    1x1 projection, residual add, global average pool (MEAN), dense -> 10."""
    L, s = _layers(), _Seeds(100)
    x_in = L.Input((32, 32, 3), batch_size=1, name="input")
    x = _conv(s, 16, 3, strides=2, padding="same", activation="relu6")(x_in)  # 16x16x16
    y = _dwconv(s, 3, padding="same", activation="relu6")(x)
    y = _conv(s, 16, 1)(y)
    x = L.Add()([x, y])
    y = _conv(s, 32, 1, activation="relu6")(x)  # expansion
    y = _dwconv(s, 3, strides=2, padding="same", activation="relu6")(y)  # 8x8x32
    y = _conv(s, 24, 1)(y)
    x = L.GlobalAveragePooling2D()(y)
    x = _dense(s, 10)(x)
    return _tf().keras.Model(x_in, x, name="mobilenet")


def resnet() -> "tf.keras.Model":
    """ResNet/Inception-like: conv+relu, residual add, max pool, 1x1 and 3x3 branches
    concatenated along channels, average pool, flatten, two dense layers."""
    L, s = _layers(), _Seeds(200)
    x_in = L.Input((32, 32, 3), batch_size=1, name="input")
    x = _conv(s, 16, 3, padding="same", activation="relu")(x_in)
    y = _conv(s, 16, 3, padding="same", activation="relu")(x)
    y = _conv(s, 16, 3, padding="same")(y)
    x = L.ReLU()(L.Add()([x, y]))
    x = L.MaxPooling2D(2)(x)  # 16x16x16
    b1 = _conv(s, 12, 1, activation="relu")(x)
    b2 = _conv(s, 20, 3, padding="same", activation="relu")(x)
    x = L.Concatenate(axis=-1)([b1, b2])  # 16x16x32
    x = L.AveragePooling2D(2)(x)  # 8x8x32
    x = _conv(s, 8, 3, strides=2, padding="same", activation="relu")(x)  # 4x4x8
    x = L.Flatten()(x)
    x = _dense(s, 48, activation="relu")(x)
    x = _dense(s, 10)(x)
    return _tf().keras.Model(x_in, x, name="resnet")


def odd_valid() -> "tf.keras.Model":
    """Odd spatial sizes with 'valid' padding everywhere: 23x17x3 -> 5x5 conv stride 2,
    depthwise 3x3 with depth multiplier 2, 3x3 conv stride 2, relu, flatten, dense."""
    L, s = _layers(), _Seeds(300)
    x_in = L.Input((23, 17, 3), batch_size=1, name="input")
    x = _conv(s, 8, 5, strides=2, padding="valid", activation="relu")(x_in)  # 10x7x8
    x = _dwconv(s, 3, depth_multiplier=2, padding="valid", activation="relu")(x)  # 8x5x16
    x = _conv(s, 24, 3, strides=2, padding="valid", activation="relu")(x)  # 3x2x24
    x = _dwconv(s, (3, 1), strides=(2, 1), padding="valid")(x)  # 1x2x24, no activation
    x = L.Flatten()(x)
    x = _dense(s, 10)(x)
    return _tf().keras.Model(x_in, x, name="odd_valid")


def odd_branchy() -> "tf.keras.Model":
    """Odd sizes and explicit padding: 19x21x4 -> asymmetric ZeroPadding2D (PAD), 5x5 conv
    with dilation 2, two branches added, max pool 3x3/2 'valid', 'same' average pool 3x3/2,
    reshape, dense without activation."""
    L, s = _layers(), _Seeds(400)
    x_in = L.Input((19, 21, 4), batch_size=1, name="input")
    x = L.ZeroPadding2D(((2, 1), (1, 1)))(x_in)  # 22x23x4
    x = _conv(s, 16, 5, dilation_rate=2, padding="valid", activation="relu")(x)  # 14x15x16
    a = _conv(s, 16, 3, padding="same", activation="relu")(x)
    b = _conv(s, 16, 1)(x)
    x = L.Add()([a, b])
    x = L.MaxPooling2D(3, strides=2, padding="valid")(x)  # 6x7x16
    x = _conv(s, 12, 5, strides=2, padding="same", activation="relu6")(x)  # 3x4x12
    x = L.AveragePooling2D(3, strides=2, padding="same")(x)  # 2x2x12
    x = L.Reshape((2 * 2 * 12,))(x)
    x = _dense(s, 10)(x)
    return _tf().keras.Model(x_in, x, name="odd_branchy")


def squeeze_excite() -> "tf.keras.Model":
    """MobileNetV3-like: conv + HARD_SWISH, squeeze-and-excitation (MEAN, 1x1 conv + relu, 1x1
    conv + LOGISTIC, broadcasting MUL), conv + TANH, LOGISTIC, MEAN, dense."""
    L, s = _layers(), _Seeds(600)
    x_in = L.Input((16, 16, 3), batch_size=1, name="input")
    x = L.Activation("hard_swish")(_conv(s, 16, 3, padding="same")(x_in))
    gate = L.GlobalAveragePooling2D(keepdims=True)(x)
    gate = _conv(s, 8, 1, activation="relu")(gate)
    gate = _conv(s, 16, 1, activation="sigmoid")(gate)
    x = L.Multiply()([x, gate])
    x = _conv(s, 12, 3, strides=2, padding="same", activation="tanh")(x)  # 8x8x12
    x = L.Activation("sigmoid")(_conv(s, 12, 1)(x))
    x = L.GlobalAveragePooling2D()(x)
    return _tf().keras.Model(x_in, _dense(s, 10)(x), name="squeeze_excite")


ARCHITECTURES: dict[str, Callable[[], "tf.keras.Model"]] = {
    "mobilenet": mobilenet,
    "resnet": resnet,
    "odd_valid": odd_valid,
    "odd_branchy": odd_branchy,
    "squeeze_excite": squeeze_excite,
}
"""Model name -> function building the (untrained, deterministically initialised) Keras model."""


def build_keras(name: str) -> "tf.keras.Model":
    """Build architecture ``name`` with reproducible weights (same weights on every call)."""
    builders = ARCHITECTURES | OTHER_ARCHITECTURES
    if name not in builders:
        raise KeyError(f"unknown architecture {name!r}; choose from {sorted(builders)}")
    _tf().keras.utils.set_random_seed(SEED)
    return builders[name]()


# ----------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------


def calibration_data(shape: tuple[int, ...], n: int = NUM_CALIBRATION, seed: int = SEED) -> np.ndarray:
    """``n`` float32 samples of ``shape`` (batch dimension included, normally 1), O(1) range.

    Uniform in [-1, 1] so the calibrated input scale is about 1/127 and every int8 input
    code is meaningful."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=(n, *shape)).astype(np.float32)


def convert_int8(model: "tf.keras.Model", calibration: np.ndarray, float_io: bool = False) -> bytes:
    """Full-integer post-training quantization of ``model`` to a ``.tflite`` flatbuffer.

    ``calibration`` has shape (num_samples, *model_input_shape) where the model input shape
    includes its batch dimension (1).  Only TFLITE_BUILTINS_INT8 kernels are allowed, so the
    conversion fails rather than leaving float ops behind.  With ``float_io`` the model keeps
    float32 input/output (TFLite inserts QUANTIZE / DEQUANTIZE ops); otherwise the input and
    output tensors are int8.
    """
    tf = _tf()
    input_shape = tuple(model.inputs[0].shape)
    if tuple(calibration.shape[1:]) != input_shape:
        raise ValueError(f"calibration samples have shape {calibration.shape[1:]}, model wants {input_shape}")

    def representative_dataset():
        for sample in calibration:
            yield [sample.astype(np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if not float_io:
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    # Keras' export prints a "Saved artifact at ..." banner to stdout on every conversion.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Statistics for quantized inputs")
        return converter.convert()


def softmax_head() -> "tf.keras.Model":
    """conv + relu, flatten, dense, softmax: SOFTMAX has no int8 composite (a host op)."""
    L, s = _layers(), _Seeds(500)
    x_in = L.Input((8, 8, 3), batch_size=1, name="input")
    x = _conv(s, 4, 3, activation="relu")(x_in)
    x = _dense(s, 5)(L.Flatten()(x))
    return _tf().keras.Model(x_in, L.Softmax()(x), name="softmax_head")


OTHER_ARCHITECTURES: dict[str, Callable[[], "tf.keras.Model"]] = {"softmax_head": softmax_head}
"""Models for other tests than bit-exactness (ops with no int8 composite)."""


def build_tflite(name: str, path: str | os.PathLike[str], float_io: bool = False) -> Path:
    """Build architecture ``name``, quantize it to full int8 and write it to ``path``, in a child
    process (see the module docstring).

    The weights are random (He-normal kernels, small uniform biases) and calibration data is
    uniform in [-1, 1], so activations stay O(1).  Deterministic: the same name gives the same
    file.  Returns ``path`` as a :class:`~pathlib.Path`."""
    return build_tflites([(name, path, float_io)])[0]


def build_tflites(cases: list[tuple[str, str | os.PathLike[str], bool]]) -> list[Path]:
    """build_tflite for each (name, path, float_io), all in one child process (TensorFlow starts
    once). Returns the paths."""
    command = [sys.executable, __file__]
    for name, path, float_io in cases:
        command += ["--model", name, str(path), "1" if float_io else "0"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {', '.join(c[0] for c in cases)} failed:\n{done.stderr[-4000:]}")
    return [Path(path) for _, path, _ in cases]


ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "hardswish": "hard_swish"}
"""TFLite's int8 activations with algorithms of their own: our name -> Keras' name."""
ACTIVATION_SPANS = (0.7, 6.0, 40.0)
"""Calibration ranges [-span, span] of the activation models' input: three input scales."""


def build_activation_tflites(directory: str | os.PathLike[str]) -> dict[tuple[str, float], Path]:
    """For each activation and span, a model that is that one int8 op on a 16x16x1 input
    calibrated on [-span, span] (256 elements: every input code fits in one run). One child
    process builds them all. Returns (activation, span) -> path."""
    directory = Path(directory)
    done = subprocess.run([sys.executable, __file__, "--activations", str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the activation models failed:\n{done.stderr[-4000:]}")
    return {(name, span): directory / f"{name}_{span}.tflite" for name in ACTIVATIONS for span in ACTIVATION_SPANS}


def _write_activation_tflites(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, keras_name in ACTIVATIONS.items():
        x_in = _layers().Input((16, 16, 1), batch_size=1, name="input")
        model = _tf().keras.Model(x_in, _layers().Activation(keras_name)(x_in))
        for span in ACTIVATION_SPANS:
            calibration = span * calibration_data(tuple(model.inputs[0].shape))
            (directory / f"{name}_{span}.tflite").write_bytes(convert_int8(model, calibration))


def patch_tensors(source: str | os.PathLike[str], target: str | os.PathLike[str],
                  names: Callable[[int, str], str] | None = None,
                  shapes: dict[int, tuple[int, ...]] | None = None) -> Path:
    """Copy the .tflite file `source` to `target` with tensor names and shapes overwritten in
    place, without TensorFlow: ``names(index, old name)`` gives each tensor's new name (encoded as
    UTF-8, cut or padded with ``_`` to the old name's length), `shapes` maps a tensor index to a
    new shape of the same rank. A flatbuffer string or vector keeps its size, so the copy is a
    valid model of the same structure: how tests craft model files that hold odd names (quotes,
    newlines, ``*/``, ``#include``) or absurd shapes."""
    import tflite

    data = bytearray(Path(source).read_bytes())
    model = tflite.Model.GetRootAsModel(bytes(data), 0)
    subgraph = model.Subgraphs(0)
    for index in range(subgraph.TensorsLength()):
        table = subgraph.Tensors(index)._tab
        if names is not None and table.Offset(10):
            at = table.Offset(10) + table.Pos
            at += int.from_bytes(data[at : at + 4], "little")  # the string: length, then bytes
            length = int.from_bytes(data[at : at + 4], "little")
            old = bytes(data[at + 4 : at + 4 + length]).decode()
            new = names(index, old).encode()[:length].ljust(length, b"_")
            data[at + 4 : at + 4 + length] = new
        if shapes is not None and index in shapes:
            vector = table.Vector(table.Offset(4))
            rank = table.VectorLen(table.Offset(4))
            if len(shapes[index]) != rank:
                raise ValueError(f"tensor {index} has rank {rank}, not {len(shapes[index])}")
            for j, dim in enumerate(shapes[index]):
                data[vector + 4 * j : vector + 4 * j + 4] = int(dim).to_bytes(4, "little", signed=True)
    target = Path(target)
    target.write_bytes(bytes(data))
    return target


def _write_tflite(name: str, path: Path, float_io: bool) -> None:
    model = build_keras(name)
    calibration = calibration_data(tuple(model.inputs[0].shape))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(convert_int8(model, calibration, float_io=float_io))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--activations"]:
        _write_activation_tflites(Path(sys.argv[2]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description="write test .tflite models")
    parser.add_argument("--model", nargs=3, action="append", required=True, metavar=("NAME", "PATH", "FLOAT_IO"),
                        help="one model: its architecture, the file to write, 1 for float input and output")
    for name, path, float_io in parser.parse_args().model:
        _write_tflite(name, Path(path), float_io == "1")
