"""The int8 stacks a model quantized elsewhere is checked against.

A ``.tflite`` model runs in TFLite's reference kernels (``ai-edge-litert``'s interpreter with the
``BUILTIN_REF`` op resolver; the default resolver runs XNNPACK, whose rounding differs), the
definition the compiled library must equal bit for bit. An ONNX QDQ model runs in ONNX Runtime,
whose QDQ semantics are float: there the report gives the distance in output LSB.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Peer:
    name: str  # "tflite" or "onnxruntime": the report's keys say "vs <name>"
    run: Callable[[np.ndarray], np.ndarray]  # one input -> the first output
    output_scale: float  # of the first output, for differences in LSB (1.0 for an int8 output)


def tflite_reference(path: str | os.PathLike) -> Peer:
    """TFLite's reference kernels on one .tflite model."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=os.fspath(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF, num_threads=1
    )
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()

    def run(x: np.ndarray) -> np.ndarray:
        interpreter.set_tensor(inp["index"], np.ascontiguousarray(x, dtype=inp["dtype"]))
        interpreter.invoke()
        return interpreter.get_tensor(out["index"]).copy()

    scale = 1.0 if out["dtype"] == np.int8 else float(out["quantization"][0] or 1.0)
    return Peer("tflite", run, scale)


def onnxruntime_session(path: str | os.PathLike, output_scale: float) -> Peer:
    """ONNX Runtime (CPU, one thread) on one ONNX model."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(x: np.ndarray) -> np.ndarray:
        return session.run(None, {name: np.ascontiguousarray(x, dtype=np.float32)})[0]

    return Peer("onnxruntime", run, output_scale)


def compare(outputs: list[np.ndarray], expected: list[np.ndarray], output_scale: float) -> dict:
    """Largest difference in output LSB and the share of equal values."""
    diffs = np.concatenate(
        [np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel() / output_scale for a, b in zip(outputs, expected)]
    )
    lsb = np.rint(diffs)
    return {"max_lsb": float(lsb.max(initial=0.0)), "equal_share": float(np.mean(lsb == 0))}
