import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kernel_calls
# The ctypes side of the kernels lives in kernel_calls (shared with benchmarks/fuzz_kernels.py);
# the names are re-exported here for the tests that import them from conftest.
from kernel_calls import (  # noqa: F401
    AddParams, ConvParams, Dims, DoubleRequantParams, MulParams, Pixels, PoolParams, RequantParams, ptr,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def kernel_object_cache(tmp_path_factory) -> Path:
    """The compiled kernels' disk cache (byoc_int8.codegen.objects.kernel_cache_dir) of this run, in
    its temporary folder rather than the user's cache, unless BYOC_INT8_CACHE_DIR chooses one."""
    if "BYOC_INT8_CACHE_DIR" not in os.environ:
        os.environ["BYOC_INT8_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel_cache"))
    return Path(os.environ["BYOC_INT8_CACHE_DIR"])


@pytest.fixture(scope="session")
def kernel_build() -> Path:
    """The C kernel libraries built by CMake (the same build the test command runs first)."""
    build = ROOT / "build"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build)], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True)
    return build


def missing_cpu_features(variant: str) -> set[str]:
    """The CPU features (as /proc/cpuinfo spells them) a kernel build needs and this CPU lacks."""
    from byoc_int8.codegen.emit_c import SIMD_FLAGS, cpu_flags

    return SIMD_FLAGS[variant] - cpu_flags()


# Every kernel build CMake makes, runnable here or not: one this CPU cannot run is reported as a
# skipped test that names the missing instructions, so a green run says what it did not test.
KERNEL_BUILDS = [(variant, rounding) for variant in kernel_calls.VARIANTS for rounding in kernel_calls.ROUNDINGS]


@pytest.fixture(scope="session", params=KERNEL_BUILDS, ids=[f"{v}-{r}" for v, r in KERNEL_BUILDS])
def kernels(request, kernel_build) -> ctypes.CDLL:
    """Each implementation of the kernels in each rounding in turn: every kernel test runs against
    each. `kernels.rounding` names the rounding it was compiled with (qarith.ROUNDINGS),
    `kernels.variant` the implementation (portable, avx2, avxvnni, avx512vnni, amx)."""
    variant, rounding = request.param
    missing = missing_cpu_features(variant)
    if missing:
        pytest.skip(f"the {variant} kernels are not tested: this CPU lacks {', '.join(sorted(missing))}")
    return kernel_calls.load(kernel_calls.library_path(kernel_build, variant, rounding), variant, rounding)


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
