import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


class Dims(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int32), ("h", ctypes.c_int32), ("w", ctypes.c_int32), ("c", ctypes.c_int32)]


class RequantParams(ctypes.Structure):
    _fields_ = [
        ("multiplier", ctypes.POINTER(ctypes.c_int32)),
        ("shift", ctypes.POINTER(ctypes.c_int32)),
        ("act_min", ctypes.c_int32),
        ("act_max", ctypes.c_int32),
        ("output_zero_point", ctypes.c_int32),
    ]


class ConvParams(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_int32)
        for n in ("stride_h", "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w", "groups", "pad_value")
    ]


class PoolParams(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_int32)
        for n in ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w")
    ]


class AddParams(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_int32)
        for n in (
            "left_shift",
            "input1_multiplier",
            "input1_shift",
            "input2_multiplier",
            "input2_shift",
            "output_multiplier",
            "output_shift",
            "act_min",
            "act_max",
            "input1_zero_point",
            "input2_zero_point",
            "output_zero_point",
        )
    ]


def ptr(array: np.ndarray, ctype):
    assert array.flags["C_CONTIGUOUS"]
    return array.ctypes.data_as(ctypes.POINTER(ctype))


class Pixels(ctypes.Structure):
    _fields_ = [("begin", ctypes.c_int32), ("end", ctypes.c_int32)]


@pytest.fixture(scope="session")
def kernel_build() -> Path:
    """The C kernel libraries built by CMake (the same build the test command runs first)."""
    build = ROOT / "build"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build)], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True)
    return build


def _runnable_variants() -> list[str]:
    """Kernel builds this CPU can execute (CMake builds all three everywhere)."""
    from byoc_int8.codegen.emit_c import cpu_flags

    flags = cpu_flags()
    variants = ["portable"]
    if "avx2" in flags:
        variants.append("avx2")
    if {"avx512_vnni", "avx512vl", "avx512bw"} <= flags:
        variants.append("avx512vnni")
    return variants


KERNEL_BUILDS = [(variant, rounding) for variant in _runnable_variants() for rounding in ("single", "tflite", "single-away")]


@pytest.fixture(scope="session", params=KERNEL_BUILDS, ids=[f"{v}-{r}" for v, r in KERNEL_BUILDS])
def kernels(request, kernel_build) -> ctypes.CDLL:
    """Each implementation of the kernels in each rounding in turn: every kernel test runs against
    each. `kernels.rounding` names the rounding it was compiled with (qarith.ROUNDINGS)."""
    variant, rounding = request.param
    lib = ctypes.CDLL(str(kernel_build / f"libbyoc_int8_kernels_{variant}_{rounding.replace('-', '_')}.so"))
    lib.rounding = rounding
    return lib


def assert_one_int8_region(model, input_shape: tuple[int, ...], min_cosine: float = 0.999) -> dict:
    """Compile `model` in strict int8 mode (it raises if any op stays in float), check one region,
    C == integer reference and the cosine with float on 4 inputs; returns the report."""
    from byoc_int8.pipeline import compile_model, evaluate

    calib = np.random.default_rng(0).standard_normal((16, *input_shape)).astype(np.float32)
    compiled = compile_model(model.eval(), calib, int8_only=True)
    assert compiled.regions == 1
    report = evaluate(compiled, model, calib[:4], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["cosine_vs_float"] > min_cosine
    return report
