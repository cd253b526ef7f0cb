"""A fixed sample of the kernel fuzzer (benchmarks/fuzz_kernels.py): every kernel of byoc_int8.h
on its first configurations, in every kernel build, bit for bit against the integer reference;
and checks that the fuzzer draws what it claims to and reports what it finds.

BYOC_INT8_FUZZ_CONFIGS sets how many configurations per kernel and build the sample runs (default
300, half a minute for the module on two idle cores); the full run is
``python benchmarks/fuzz_kernels.py`` (1000 by default). Regressions the fuzzer finds go at the
end of this module, as it prints them.
"""

import io
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import kernel_calls
from kernel_calls import packed  # noqa: F401  (the fuzzer's regression tests use it)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fuzz_kernels  # noqa: E402

CONFIGS = int(os.environ.get("BYOC_INT8_FUZZ_CONFIGS", "300"))
SEED = 0


def assert_kernel_matches(kernels, kernel: str, case: dict) -> None:
    problem = kernel_calls.check(kernels, kernel, case)
    assert problem is None, f"{kernels.variant}-{kernels.rounding} {kernel}: {problem}"


@pytest.mark.parametrize("kernel", sorted(fuzz_kernels.GENERATORS))
def test_fuzz_sample(kernels, kernel):
    failures = []
    for index in range(CONFIGS):
        case = fuzz_kernels.draw(kernel, kernels.rounding, index, SEED)
        problem = kernel_calls.check(kernels, kernel, case)
        if problem:
            failures.append(f"--only {kernel}:{kernels.rounding}:{index}: {problem}")
    assert not failures, "\n".join(failures)


class Recording:
    """A kernel library that records which of its functions are called."""

    def __init__(self, lib):
        self.lib, self.called = lib, set()
        self.variant, self.rounding = lib.variant, lib.rounding

    def __getattr__(self, name):
        self.called.add(name)
        return getattr(self.lib, name)


def test_every_exported_kernel_is_fuzzed(kernel_build):
    """Each function of byoc_int8.h is called by the fuzzer's kernels in their first ten draws
    (conv2d also packs filters, sizes scratch and checks its row and channel blocks, and calls
    b8_conv2d_s8 or, in channel shares, b8_conv2d_s8_channels; requantize and requantize_double
    reach the inline helpers)."""
    header = (kernel_calls.ROOT / "runtime_c" / "include" / "byoc_int8.h").read_text()
    exported = {line.split("(")[0].split()[-1] for line in header.splitlines() if line.startswith("B8_API")}
    assert exported == set(kernel_calls.SIGNATURES)
    lib = Recording(kernel_calls.load(kernel_calls.library_path(kernel_build, "portable", "tflite"), "portable", "tflite"))
    for kernel in fuzz_kernels.GENERATORS:
        for index in range(10):
            assert kernel_calls.check(lib, kernel, fuzz_kernels.draw(kernel, "tflite", index, SEED)) is None
    assert lib.called == exported


def test_a_draw_whose_one_output_pixel_passes_the_work_bound_ends():
    """Configuration 6036 of seed 78 (tflite rounding): an 18 x 7 kernel, dilated, on enough channels
    that a single output pixel per image passes the 4M MACs the geometry keeps to. The draw looped
    forever there (the whole fuzzer hung on it); it now ends on one output pixel. SIGALRM turns an
    endless loop into a failure, not a hung suite."""
    import signal

    def hung(signum, frame):
        raise AssertionError("the draw did not end in 20 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        case = fuzz_kernels.draw("conv2d", "tflite", 6036, 78)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    (kh, kw), (n, oh, ow) = case["weight"].shape[1:3], (case["x"].shape[0], *case["out_hw"])
    macs = n * oh * ow * case["weight"].shape[0] * kh * kw * case["weight"].shape[3]
    assert (kh, kw, oh, ow) == (18, 7, 1, 1) and macs > 4_000_000


def test_draws_are_reproducible_and_independent():
    a = fuzz_kernels.draw("conv2d", "tflite", 17, SEED)
    b = fuzz_kernels.draw("conv2d", "tflite", 17, SEED)
    assert kernel_calls.case_source(a) == kernel_calls.case_source(b)
    assert kernel_calls.case_source(a) != kernel_calls.case_source(fuzz_kernels.draw("conv2d", "tflite", 18, SEED))
    assert kernel_calls.case_source(a) != kernel_calls.case_source(fuzz_kernels.draw("conv2d", "single", 17, SEED))


# The paths of b8_conv2d_s8 (runtime_c/src/conv2d_s8.c) that the sample must take in each build.
SIMD_PATHS = {"tile", "signed", "unsigned", "in place", "gathered", "row tail", "read end gathered", "whole pixel tile",
              "partial pixel tile", "several pixel tiles", "whole channel tile", "partial channel tile",
              "several channel tiles", "epilogue x8", "epilogue scalar", "portable", "row of windows",
              "contiguous patch", "rows copied", "rows copied, row of windows"}
# AVX2 only: 7-bit weights shifted, or signed inputs offset (other 7-bit weights) or in the
# corrected form, alone or two blocks at a time (b8_tile_pair; a last 24 channels as 16 + 8).
AVX2_PATHS = {"shifted weights", "signed offset", "signed corrected", "corrected pair tile", "corrected pair, one pass",
              "corrected narrow pair"}


# Per build: AVX2's and AVX-VNNI's 3x3 stride-1 layers by Winograd (kernel_calls._winograd_conv2d_paths,
# AVX-VNNI's only tiles of 4 rows with the filter made once per call; AVX-512 VNNI's as AVX-VNNI's where
# this CPU takes them, kernel_calls.avx512_winograd); AVX-VNNI
# shifts the weights or offsets signed inputs (never takes them as they are), VNNI also has narrow
# tiles and 32-channel epilogues; both offset gathered patches of signed inputs as they gather them
# and have a tile of one pixel.
WINOGRAD_PATHS = {"winograd", "winograd tiles of 2 rows", "winograd tiles of 4 rows", "several tile blocks",
                  "spare tiles", "padded tile", "tile partly written", "four-tile group", "two four-tile groups"}
VARIANT_PATHS = {"avx2": AVX2_PATHS | WINOGRAD_PATHS | {"filter per tile block"},
                 # AVX2's, signed inputs always in the corrected form, a last block alone on 512 bits
                 "avx512bw": AVX2_PATHS - {"corrected pair, one pass"} | {"corrected block tile"} | WINOGRAD_PATHS
                             | {"filter per tile block"},
                 "avxvnni": {"shifted weights", "signed offset", "signed patch offset", "one-pixel tile"}
                            | WINOGRAD_PATHS - {"winograd tiles of 2 rows"},
                 "avx512vnni": {"narrow channel tile", "epilogue fused x32", "shifted weights", "signed patch offset",
                                "one-pixel tile"}
                               | (WINOGRAD_PATHS - {"winograd tiles of 2 rows"}
                                  if kernel_calls.avx512_winograd() else set())}
# The AMX build's own convolution (kernel_calls._amx_conv2d_paths: patches of 32 bytes or more),
# and the VNNI tiles of its shorter patches.
AMX_PATHS = {"amx", "pointwise in place", "whole pixel group", "partial pixel group", "one patch tile",
             "several pixel groups", "rows copied", "gathered", "whole channel tile", "narrow channel tile",
             "partial channel tile", "several channel tiles", "epilogue fused x32", "epilogue fused x16",
             "epilogue fused clamped", "epilogue x8", "epilogue scalar", "portable", "tile", "shifted weights",
             "pointwise", "in place", "contiguous patch"}


@pytest.mark.parametrize("variant", ["avx2", "avxvnni", "avx512bw", "avx512vnni", "amx"])
def test_sample_reaches_every_conv2d_path(variant):
    reached = Counter()
    for rounding in kernel_calls.ROUNDINGS:
        for index in range(CONFIGS):
            reached.update(kernel_calls.conv2d_paths(fuzz_kernels.draw("conv2d", rounding, index, SEED), variant))
    fused = {"epilogue fused x16", "epilogue fused clamped"}
    if variant == "amx":
        expected = AMX_PATHS
    else:
        never = {"signed"} if variant in ("avxvnni", "avx512bw") else set()  # signed inputs in other forms
        expected = SIMD_PATHS - never | fused | VARIANT_PATHS[variant]
    assert expected <= set(reached), expected - set(reached)


def test_sample_spans_the_parameter_space():
    """What the fuzzer promises, counted over the sample: every padding, stride, dilation and
    group count, channel counts around whole tiles, both ends of the zero points, multipliers and
    shifts, saturating data, windows entirely in the padding, sizes 1 and large."""
    seen = Counter()
    for rounding in kernel_calls.ROUNDINGS:
        for index in range(CONFIGS):
            conv = fuzz_kernels.draw("conv2d", rounding, index, SEED)
            cout, kh, kw, _ = conv["weight"].shape
            seen["grouped"] += conv["groups"] > 1
            seen["depthwise-shaped"] += conv["groups"] > 1 and conv["weight"].shape[3] == 1
            seen["stride > 1"] += max(conv["strides"]) > 1
            seen["dilation > 1"] += max(conv["dilation"]) > 1
            seen["padding > 0"] += max(conv["padding"]) > 0
            seen["padding >= window"] += conv["padding"][0] >= (kh - 1) * conv["dilation"][0] + 1
            seen["channels 16k +- 1"] += cout % 16 in (1, 15)
            seen["channels 32k"] += cout % 32 == 0
            seen["1x1 input"] += conv["x"].shape[1:3] == (1, 1)
            seen["input side > 20"] += max(conv["x"].shape[1:3]) > 20
            seen["multiplier 2^31 - 1"] += bool(np.any(conv["multiplier"] == (1 << 31) - 1))
            seen["multiplier 0"] += bool(np.any(conv["multiplier"] == 0))
            seen["shift -31"] += bool(np.any(conv["shift"] == -31))
            seen["shift 30"] += bool(np.any(conv["shift"] == 30))
            seen["pad value -128"] += conv["pad_value"] == -128
            seen["pad value 127"] += conv["pad_value"] == 127
            seen["output zero point -128"] += conv["output_zero_point"] == -128
            seen["output zero point 127"] += conv["output_zero_point"] == 127
            seen["symmetric (zero points 0)"] += conv["pad_value"] == 0 and conv["output_zero_point"] == 0
            seen["saturating input"] += set(np.unique(conv["x"])) <= {-128, 0, 127} and conv["x"].size > 4
            seen["split over pixel ranges"] += conv["pixels"] is not None
            pool = fuzz_kernels.draw("max_pool2d", rounding, index, SEED)
            empty = kernel_calls.expected("max_pool2d", {**pool, "x": np.zeros_like(pool["x"]), "pixels": None}, rounding)
            seen["max pool window in the padding only"] += bool(np.any(empty[1] == -128))
            seen["max pool dilated"] += max(pool["dilation"]) > 1
            add = fuzz_kernels.draw("add", rounding, index, SEED)
            seen["add size 8k +- 1"] += add["a"].size % 8 in (1, 7)
            seen["add output shift > 0"] += add["output"][1] > 0
    assert min(seen.values()) >= 2 and len(seen) == 25, seen


class WrongClip:
    """A stand-in for a kernel library whose clip is off by one at the top."""

    variant, rounding = "broken", "single"

    def b8_clip_s8(self, size, lo, hi, x, out):
        values = np.ctypeslib.as_array(x, (size,)) if size else np.zeros(0, np.int8)
        target = np.ctypeslib.as_array(out, (size,)) if size else np.zeros(0, np.int8)
        target[:] = np.clip(values, lo, max(lo, hi - 1))
        return 0


def test_a_mismatch_prints_a_regression_test_that_reproduces_it(kernel_build):
    report = io.StringIO()
    result = fuzz_kernels.fuzz("clip", {"single": [WrongClip()]}, 20, SEED, out=report)
    assert result["failures"] and sum(result["runs"].values()) == 20
    text = report.getvalue()
    source = text[text.index("def test_fuzz_clip_single_0_"):].split("\n\n")[0]
    namespace = {"np": np, "packed": packed, "assert_kernel_matches": assert_kernel_matches}
    exec(source, namespace)
    test = next(v for k, v in namespace.items() if k.startswith("test_fuzz_clip_single_0_"))
    with pytest.raises(AssertionError, match="outputs differ"):
        test(WrongClip())
    real = kernel_calls.load(kernel_calls.library_path(kernel_build, "portable", "single"), "portable", "single")
    test(real)  # the real kernel passes it


def test_large_arrays_are_written_compactly_and_read_back_exactly():
    rng = np.random.default_rng(0)
    for a in (rng.integers(-128, 128, (3, 5, 7, 11), dtype=np.int8), rng.standard_normal(100).astype(np.float32),
              np.array([np.nan, -0.0, np.inf], np.float32), np.zeros((0, 4), np.int8)):
        source = kernel_calls.array_source(a)
        back = eval(source, {"np": np, "packed": packed})
        assert back.dtype == a.dtype and back.shape == a.shape
        assert back.tobytes() == a.tobytes()


def test_pixel_ranges_cover_or_leave_pixels_unwritten():
    """Outputs split over pixel ranges: the unwritten pixels keep what was there (the fill), and a
    kernel that wrote them would differ."""
    case = fuzz_kernels.draw("max_pool2d", "single", 0, SEED)
    x = np.arange(2 * 3 * 3 * 2, dtype=np.int8).reshape(2, 3, 3, 2)
    case = {**case, "x": x, "kernel": (1, 1), "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1),
            "out_hw": (3, 3), "pixels": [(-2, 4), (11, 40)], "fill": -7}
    status, want = kernel_calls.expected("max_pool2d", case, "single")
    flat = want.reshape(-1, 2)
    assert status == 0 and np.all(flat[4:11] == -7) and np.array_equal(flat[:4], x.reshape(-1, 2)[:4])
    assert np.array_equal(flat[11:], x.reshape(-1, 2)[11:])


# ---- regressions found by the fuzzer (paste new ones below) ---------------------------------


@pytest.mark.parametrize("scale", [1e-45, 2.0**-130, float("inf"), 0.0, -1.0])
def test_quantize_refuses_a_scale_without_a_finite_reciprocal(kernels, scale):
    """The fuzzer's sanitized run (--sanitized, e.g. quantize:single:612) found a NaN input
    reaching the float -> int conversion, which is undefined (fixed; the sanitized C unit tests
    check it). Without any NaN in the input, a scale below 2^-128 made one too in the single
    rounding (0 * (1 / scale)), and the kernel returned that as codes with status 0. Such scales
    are refused now, in every rounding."""
    case = {"x": np.zeros((2, 3), np.float32), "nchw": False, "scale": scale, "zero_point": -128}
    assert kernel_calls.run(kernels, "quantize", case)[0] == 1
    assert kernel_calls.expected("quantize", case, kernels.rounding) == (1, None)
    assert kernel_calls.run(kernels, "quantize", {**case, "scale": 2.0**-126})[0] == 0


def test_fuzz_concat_tflite_7_200(kernels):
    """benchmarks/fuzz_kernels.py --seed 7 --only concat:tflite:200: on avx2-tflite and
    avx512vnni-tflite, 1 of 25 outputs differed; first at (0, 3): np.int8(127), expected
    np.int8(-128) (the vector concat added the output zero point to a result near -2^31 in int32)."""
    case = {
        'inputs': [np.array([[-120, 77, 38, -28, 114, 122, -98, -58, -95, 18, -98, -5, -62, 48, -42, -64, -66, -120, 22, 127, 22, -19, 23, -115, -93]], np.int8).reshape((1, 25))],
        'outer': 1,
        'multiplier': np.array([2147483647], np.int32).reshape((1,)),
        'shift': np.array([29], np.int32).reshape((1,)),
        'zero_points': np.array([0], np.int32).reshape((1,)),
        'output_zero_point': -47,
    }
    assert_kernel_matches(kernels, "concat", case)
