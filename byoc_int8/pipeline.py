"""The whole flow in one call: model -> partitioned, calibrated, compiled int8 library + report.

frontend -> partition -> calibrate -> (quantize + codegen inside RunCodegen) -> build.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import tvm
from tqdm import tqdm

from . import build, peers, reference
from .calibrate import DEGENERATE_RANGE, calibrate, calibration_warnings, layer_warnings
from .codegen.emit_c import default_simd
from .errors import CalibrationDataError
from .frontend import export_model, import_onnx, import_tflite, to_relax
from .inputs import load_inputs
from .layer_errors import LayerError, layer_errors
from .host import HostOpRunner
from .partition import boundary_crossings, count_ops, offloaded_ops, partition, region_functions
from .profiles import Profile, load_profile
from .qarith import NumberFormat
from .quantize import annotate_prequantized


# Inputs over which evaluate() measures per-layer error (the reference runs them as one batch).
LAYER_ERROR_INPUTS = 16


@dataclass
class CompiledModel:
    """A compiled int8 program and what the compiler knows about it."""

    library_path: str
    module: tvm.IRModule  # partitioned, with calibrated ranges on every region
    ops_total: int
    ops_offloaded: int
    host_ops: list[dict]
    regions: int
    boundary_crossings: int
    compile_seconds: float
    kernels: str = ""  # the kernel build compiled in (emit_c.SIMD_BUILDS), or "external"
    _vm: object = field(default=None, repr=False)
    # Without an output path the library lives in a temporary directory that goes with this object.
    _scratch: tempfile.TemporaryDirectory | None = field(default=None, repr=False)
    _host: HostOpRunner = field(default_factory=HostOpRunner, repr=False)
    _qgraphs: dict | None = field(default=None, repr=False)

    @property
    def vm(self) -> tvm.relax.VirtualMachine:
        if self._vm is None:
            self._vm = build.load(self.library_path)
        return self._vm

    @property
    def input_dtype(self) -> str:
        return str(self.module["main"].params[0].ty.dtype)

    @property
    def batch(self) -> int:
        """Images per run: the batch the library was compiled for (its input's first axis)."""
        shape = self.module["main"].params[0].ty.shape.values
        return int(shape[0]) if len(shape) > 1 else 1

    def run(self, x: np.ndarray) -> np.ndarray:
        """First output of the compiled library for one input (float, or int8 for a model whose
        interface is int8)."""
        out = self.vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x, dtype=self.input_dtype)))
        while not hasattr(out, "numpy"):
            out = out[0]
        return out.numpy()

    def run_reference(self, x: np.ndarray) -> tuple[np.ndarray, float | None]:
        """First output as the integer reference computes it, and the int8 scale it was
        dequantized from (None when a host op produces it)."""
        if self._qgraphs is None:  # quantize the regions once, not per input
            self._qgraphs = reference.quantized_regions(self.module)
        out = reference.run_module(self.module, [np.asarray(x, dtype=self.input_dtype)], self._host, self._qgraphs)[0]
        return out, reference.output_scales(self.module, self._qgraphs)[0]


def compile_model(
    model: torch.nn.Module | torch.export.ExportedProgram,
    calibration_data: np.ndarray | Iterable[np.ndarray],
    example_inputs: Sequence[torch.Tensor] = (),
    method: str = "max",
    output_path: str | os.PathLike | None = None,
    progress: bool = False,
    int8_only: bool = False,
    simd: str | None = None,
    number_format: NumberFormat | None = None,
    profile: str | os.PathLike | Profile | None = None,
    kernels: str = "builtin",
    link_options: Sequence[str] = (),
    **calibration_options,
) -> CompiledModel:
    """Compile a float PyTorch model into one int8 shared library.

    `calibration_data`: calibration inputs stacked on axis 0, a directory of images or a .npy
    file, or an iterable of batches or samples. `example_inputs`: needed for an ``nn.Module``
    (shapes to export with) unless the calibration data is an array, whose first sample is used.
    `method` picks the calibrator (see ``calibrate.CALIBRATORS``); `calibration_options` go to it.
    `int8_only`: refuse (``partition.Int8OnlyError``, listing them) any op that would stay on the
    host in float; by default such ops run on the host between int8 regions.
    `simd`: the kernel implementation compiled in ("amx", "avx512vnni", "avx512bw", "avxvnni", "avx2",
    "portable"; default: the fastest this machine runs).
    `number_format`: how activations are encoded and requantizations round (``qarith``; default:
    the profile's).
    `profile`: the accelerator's ops, numbers and limits (a built-in name, a TOML file or a
    ``profiles.Profile``; default ``x86-sim``, everything).
    `kernels` "external": the library calls a kernel library linked with `link_options` (its
    ``-I``, ``-L``, ``-l`` flags) instead of the built-in kernels (docs/vendor.md).
    """
    profile = load_profile(profile)
    number_format = number_format or profile.number_format
    start = time.perf_counter()
    build.start_kernels(simd, number_format.rounding, kernels)
    stages = tqdm(total=4, desc="compiling", unit="stage", disable=not progress)
    if isinstance(calibration_data, np.ndarray) and calibration_data.size == 0:
        raise CalibrationDataError(f"calibration data is empty (shape {calibration_data.shape})")
    if isinstance(calibration_data, np.ndarray) and not example_inputs:
        example_inputs = (torch.from_numpy(np.ascontiguousarray(calibration_data[:1], dtype=np.float32)),)
    mod = to_relax(export_model(model, example_inputs))
    if isinstance(calibration_data, (str, os.PathLike)):
        calibration_data = load_inputs(calibration_data, [int(d) for d in mod["main"].params[0].ty.shape.values])
    ops_total = count_ops(mod)
    stages.update()
    parted = partition(mod, int8_only=int8_only, profile=profile)
    stages.update()
    calibrated = calibrate(parted.mod, calibration_data, method=method, progress=progress,
                           number_format=number_format, **calibration_options)
    stages.update()
    compiled = _build(calibrated, parted.host_ops, ops_total, output_path, simd, start, kernels, link_options)
    stages.update()
    stages.close()
    return compiled


def _build(mod: tvm.IRModule, host_ops: list, ops_total: int, output_path, simd: str | None,
           start: float, kernels: str = "builtin", link_options: Sequence[str] = ()) -> CompiledModel:
    """Codegen, host compile and export of a partitioned module whose regions are ready to
    quantize (calibrated, or carrying a model's own encodings)."""
    executable = build.build(mod, simd=simd, kernels=kernels)
    scratch = tempfile.TemporaryDirectory(prefix="byoc_int8_") if output_path is None else None
    if scratch is not None:
        output_path = os.path.join(scratch.name, "model.so")
    build.export(executable, output_path, link_options)
    return CompiledModel(
        library_path=os.fspath(output_path),
        module=mod,
        ops_total=ops_total,
        ops_offloaded=offloaded_ops(mod),
        host_ops=[asdict(h) | {"description": h.describe()} for h in host_ops],
        regions=len(region_functions(mod)),
        boundary_crossings=boundary_crossings(mod),
        compile_seconds=time.perf_counter() - start,
        kernels="external" if kernels == "external" else simd or default_simd(),
        _scratch=scratch,
    )


# A model quantized elsewhere is compiled in the arithmetic of the stack that quantized it: a
# .tflite model in TFLite's (bit-exact with its reference kernels); an ONNX QDQ model, whose
# semantics are float, with zero points and single rounding.
PREQUANTIZED_FORMATS = {
    "tflite": NumberFormat("asymmetric", "tflite"),
    "onnx": NumberFormat("asymmetric", "single"),
}


def compile_prequantized(
    path: str | os.PathLike,
    output_path: str | os.PathLike | None = None,
    int8_only: bool = False,
    simd: str | None = None,
    number_format: NumberFormat | None = None,
) -> CompiledModel:
    """Compile a model quantized elsewhere (a full-integer ``.tflite`` or an ONNX QDQ ``.onnx``)
    into one int8 shared library, with the model's own weights, scales and zero points: no
    calibration. The library keeps the model's interface (int8 or float tensors, its layout)."""
    start = time.perf_counter()
    suffix = os.fspath(path).rsplit(".", 1)[-1].lower()
    if suffix not in PREQUANTIZED_FORMATS:
        raise ValueError(f"{path}: expected a .tflite or .onnx model")
    fmt = number_format or PREQUANTIZED_FORMATS[suffix]
    build.start_kernels(simd, fmt.rounding)
    mod = import_tflite(path) if suffix == "tflite" else import_onnx(path)
    ops_total = count_ops(mod)
    parted = partition(mod, int8_only=int8_only, prequantized=True)
    annotated = tvm.IRModule(dict(parted.mod.functions), attrs=parted.mod.attrs)
    for gv in list(annotated.functions.keys()):
        if gv.name_hint in region_functions(parted.mod):
            annotated[gv] = annotate_prequantized(annotated[gv], suffix, fmt)
    return _build(annotated, parted.host_ops, ops_total, output_path, simd, start)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def evaluate(
    compiled: CompiledModel,
    float_model: torch.nn.Module,
    inputs: np.ndarray,
    latency_runs: int = 20,
    labels: np.ndarray | None = None,
    layers: list[LayerError] | None = None,
) -> dict:
    """The report: offload counts, C vs integer reference, int8 vs float, accuracy on `labels`
    when given, per-layer quantization error (`layers`, else computed on the first
    LAYER_ERROR_INPUTS inputs), latency."""
    max_lsb, bit_exact, cosines, agree, float_peak = 0.0, True, [], 0, 0.0
    correct_int8 = correct_float = 0
    for start, x in whole_batches(inputs, compiled.batch):
        c_batch = compiled.run(x)
        ref_batch, scale = compiled.run_reference(x)
        with torch.no_grad():
            f_batch = float_model(torch.from_numpy(x))
        f_batch = (f_batch[0] if isinstance(f_batch, (tuple, list)) else f_batch).numpy()
        bit_exact &= bool(np.array_equal(c_batch, ref_batch))
        # In units of the output's int8 step; in plain float units for a host op's output.
        max_lsb = max(max_lsb, float(np.abs(c_batch.astype(np.float64) - ref_batch).max() / (scale or 1.0)))
        for i in range(start, min(start + compiled.batch, len(inputs))):  # per image, padding left out
            c_out, f_out = c_batch[i - start : i - start + 1], f_batch[i - start : i - start + 1]
            float_peak = max(float_peak, float(np.abs(f_out).max()))
            cosines.append(cosine(c_out, f_out))
            agree += int(c_out.argmax() == f_out.argmax())
            if labels is not None:
                correct_int8 += int(c_out.argmax() == labels[i])
                correct_float += int(f_out.argmax() == labels[i])
    accuracy = {}
    if labels is not None:
        accuracy = {"float_accuracy": correct_float / len(inputs), "int8_accuracy": correct_int8 / len(inputs)}
    if layers is None:
        layers = layer_errors(compiled.module, next(whole_batches(inputs[:LAYER_ERROR_INPUTS], compiled.batch))[1])
    warnings = calibration_warnings(compiled.module) + layer_warnings(layers)
    if float_peak < DEGENERATE_RANGE:
        warnings.append(f"the float model's output is ~0 (max |y| = {float_peak:.3g}): its cosine with int8 means nothing")
    return {
        **_offload_report(compiled),
        "eval_inputs": len(inputs),
        "bit_exact": bit_exact,
        "max_lsb_diff": max_lsb,
        "cosine_vs_float": min(cosines),
        "cosine_vs_float_mean": float(np.mean(cosines)),
        "top1_agreement_vs_float": agree / len(inputs),
        **accuracy,
        "compile_seconds": round(compiled.compile_seconds, 2),
        **_speed(compiled, inputs, latency_runs),
        "library": compiled.library_path,
        "layers": [e.to_dict() for e in layers],
        "warnings": warnings,
    }


def _offload_report(compiled: CompiledModel) -> dict:
    return {
        "ops_total": compiled.ops_total,
        "ops_offloaded": compiled.ops_offloaded,
        "regions": compiled.regions,
        "host_ops": compiled.host_ops,
        "boundary_crossings": compiled.boundary_crossings,
    }


def whole_batches(inputs: np.ndarray, batch: int) -> Iterator[tuple[int, np.ndarray]]:
    """(index of the first input, `batch` inputs) over `inputs`: a library compiled for a batch
    runs whole batches, so the last is padded with copies of the last input."""
    for start in range(0, len(inputs), batch):
        x = inputs[start : start + batch]
        yield start, np.concatenate([x, np.repeat(x[-1:], batch - len(x), axis=0)]) if len(x) < batch else x


def _speed(compiled: CompiledModel, inputs: np.ndarray, runs: int) -> dict:
    latency = _latency_ms(compiled, next(whole_batches(inputs, compiled.batch))[1], runs)
    return {
        "batch": compiled.batch,
        "latency_ms_median": latency,  # one run: the whole batch
        "images_per_second": round(compiled.batch * 1e3 / latency, 1),
        "threads": tvm.get_global_func("runtime.NumThreads")(),  # TVM's pool, as sized by byoc_int8/__init__.py
        "kernels": compiled.kernels,  # the ISA the figures above ran on
    }


def _latency_ms(compiled: CompiledModel, x: np.ndarray, runs: int) -> float:
    """Median wall time of one run of the library, after a warm-up run."""
    compiled.run(x)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        compiled.run(x)
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3)


def sample_inputs(compiled: CompiledModel, count: int, seed: int = 0) -> np.ndarray:
    """Random inputs for a model quantized elsewhere, stacked on axis 0: int8 codes for an int8
    interface, else values spread over the range its input encoding covers."""
    shape = [int(d) for d in compiled.module["main"].params[0].ty.shape.values]
    rng = np.random.default_rng(seed)
    codes = rng.integers(-128, 128, (count, *shape[1:]), dtype=np.int8)
    if compiled.input_dtype == "int8":
        return codes
    regions = list(reference.quantized_regions(compiled.module).values())
    if not regions:  # nothing offloaded: any float values do
        return rng.standard_normal((count, *shape[1:])).astype(np.float32)
    quant = regions[0].quants[regions[0].graph.inputs[0]]
    return ((codes.astype(np.float32) - quant.zero_point) * np.float32(quant.scale)).astype(np.float32)


def evaluate_prequantized(
    compiled: CompiledModel, peer: peers.Peer | None, inputs: np.ndarray, latency_runs: int = 20
) -> dict:
    """The report for a model quantized elsewhere: offload counts, C vs integer reference, and
    the distance to the peer stack in output LSB (0 is bit-exact; None without the peer)."""
    outputs, bit_exact, max_lsb = [], True, 0.0
    for i in range(len(inputs)):
        x = inputs[i : i + 1]
        out, (ref, scale) = compiled.run(x), compiled.run_reference(x)
        bit_exact &= bool(np.array_equal(out, ref))
        scale = 1.0 if out.dtype == np.int8 else (scale or 1.0)
        max_lsb = max(max_lsb, float(np.abs(out.astype(np.float64) - ref).max() / scale))
        outputs.append(out)
    report = {**_offload_report(compiled), "eval_inputs": len(inputs), "bit_exact": bit_exact, "max_lsb_diff": max_lsb}
    if peer is not None:
        versus = peers.compare(outputs, [peer.run(inputs[i : i + 1]) for i in range(len(inputs))], peer.output_scale)
        report |= {f"max_lsb_diff_vs_{peer.name}": versus["max_lsb"], f"equal_share_vs_{peer.name}": versus["equal_share"]}
    return report | {
        "compile_seconds": round(compiled.compile_seconds, 2),
        "latency_ms_median": _latency_ms(compiled, inputs[:1], latency_runs),
        "library": compiled.library_path,
    }
