"""Every C kernel against the integer reference, bit for bit, over randomized cases, in every
kernel build and rounding (the `kernels` fixture) with and without zero points."""

import ctypes
import json
import os
import pickle
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import kernel_calls
from byoc_int8 import layout, qarith
from conftest import missing_cpu_features

SEEDS = range(40)


def assert_matches(kernels, kernel: str, case: dict) -> np.ndarray:
    """The C kernel equals the integer reference on the case; returns the reference's output."""
    problem = kernel_calls.check(kernels, kernel, case)
    assert problem is None, f"{kernels.variant}-{kernels.rounding} {kernel}: {problem}"
    return kernel_calls.expected(kernel, case, kernels.rounding)[1]


def random_requant(rng, channels, terms=1):
    """Multipliers across [2^30, 2^31) including the top end; shifts scattered around the one
    that maps a typical accumulator of `terms` int8 products to about 64, so that outputs cover
    the int8 range and saturate at both ends."""
    multiplier = rng.integers(1 << 30, 1 << 31, channels, dtype=np.int64)
    multiplier[rng.random(channels) < 0.2] = (1 << 31) - 1
    typical = 74.0 * 74.0 * np.sqrt(terms)
    shift = -np.round(np.log2(typical / 64)) + rng.integers(-2, 3, channels)
    return multiplier.astype(np.int32), np.clip(shift, -31, 30).astype(np.int32)


def random_zero_point(rng, output=False):
    """0 (symmetric activations) half the time, else anywhere in int8, the ends included; output
    zero points stay nearer the middle so that results are not all saturated."""
    if rng.random() < 0.5:
        return 0
    if output:
        return int(rng.integers(-48, 49))
    return int(rng.choice([-128, 127])) if rng.random() < 0.2 else int(rng.integers(-128, 128))


def random_act(rng, zero_point=0):
    """No clamp, or a relu (clamp at the zero point)."""
    return (zero_point, 127) if rng.random() < 0.5 else (-128, 127)


def out_size(size, pad_before, pad_after, kernel, stride, dilation):
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def random_conv_geometry(rng, tall=False):
    n, h, w = rng.integers(1, 3), rng.integers(1, 10), rng.integers(1, 10)
    kh, kw = (rng.integers(17, 19) if tall else rng.integers(1, 4)), rng.integers(1, 4)
    sh, sw = rng.integers(1, 4), rng.integers(1, 4)
    dh, dw = rng.integers(1, 3), rng.integers(1, 3)
    pad = [int(p) for p in rng.integers(0, 3, 4)]  # top, left, bottom, right
    oh = out_size(h, pad[0], pad[2], kh, sh, dh)
    ow = out_size(w, pad[1], pad[3], kw, sw, dw)
    if oh < 1 or ow < 1:
        pad[2] += dh * kh
        pad[3] += dw * kw
        oh = out_size(h, pad[0], pad[2], kh, sh, dh)
        ow = out_size(w, pad[1], pad[3], kw, sw, dw)
    return int(n), int(h), int(w), int(kh), int(kw), int(sh), int(sw), int(dh), int(dw), pad, int(oh), int(ow)


# Channel counts that fill and straddle the SIMD tiles (16 channels for AVX2, 32 for AVX-512 VNNI)
# and input channel counts that make rows of whole 4-byte steps (read in place) or not (gathered).
TILE_CHANNELS = [1, 3, 8, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 63, 64, 65, 96]
TILE_INPUTS = [1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 64]


def random_conv_case(rng, kind):
    """A convolution case for kernel_calls: plain (groups 1, channel counts around whole tiles,
    every fifth one with a kernel taller than the tile reads in place), grouped, or depthwise
    with a channel multiplier; pixel counts over several tiles, split in two shares as two
    threads run them."""
    n, h, w, kh, kw, sh, sw, dh, dw, pad, oh, ow = random_conv_geometry(rng, tall=kind == "dense" and rng.random() < 0.2)
    if kind == "dense":
        groups, group_in, group_out = 1, int(rng.choice(TILE_INPUTS)), int(rng.choice(TILE_CHANNELS))
    else:
        groups = int(rng.integers(2, 5))
        group_in = 1 if kind == "depthwise" else int(rng.integers(1, 5))
        group_out = int(rng.integers(1, 4))
    cin, cout = groups * group_in, groups * group_out
    nonnegative = bool(rng.integers(0, 2))  # as after a relu: the AVX2 path skips its sign trick
    x = rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8)
    weight = rng.integers(-127, 128, (cout, kh, kw, group_in), dtype=np.int8)  # OHWI
    if kind == "depthwise":
        weight = np.ascontiguousarray(weight.transpose(3, 1, 2, 0))  # (1, KH, KW, O)
    multiplier, shift = random_requant(rng, cout, kh * kw * group_in)
    z_out = random_zero_point(rng, output=True)
    split = int(rng.integers(0, n * oh * ow + 1))
    if rng.random() < 0.3:  # 7-bit weights, many at the ends: the AVX2 tiles' offset form
        weight = np.clip(weight, -64, 64)
    return {"x": x, "weight": weight, "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32),
            "multiplier": multiplier, "shift": shift, "groups": groups, "strides": (sh, sw), "padding": tuple(pad[:2]),
            "dilation": (dh, dw), "out_hw": (oh, ow), "pad_value": random_zero_point(rng), "output_zero_point": z_out,
            "act": random_act(rng, z_out), "nonnegative": nonnegative, "pixels": [(0, split), (split, n * oh * ow)],
            "fill": 0}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["dense", "grouped", "depthwise"])
def test_conv2d(kernels, seed, kind):
    """Plain, grouped and depthwise (with channel multiplier) convolutions."""
    case = random_conv_case(np.random.default_rng(seed), kind)
    expected = assert_matches(kernels, "depthwise_conv2d" if kind == "depthwise" else "conv2d", case)
    # Outputs must not be all saturated: the case has to exercise the arithmetic.
    assert expected.size < 64 or len(np.unique(expected)) > 3


# Every path of the SIMD convolutions (kernel_calls.conv2d_paths reads them off as conv2d_s8.c
# chooses them).
SIMD_PATHS = {"tile", "signed", "unsigned", "in place", "gathered", "row tail", "tall kernel", "read end gathered",
              "whole pixel tile", "partial pixel tile", "several pixel tiles", "whole channel tile", "partial channel tile",
              "several channel tiles", "epilogue x8", "epilogue scalar", "per tap", "several tiles per chunk", "pointwise",
              "pointwise, several tiles per chunk",
              "row of windows",
              "contiguous patch", "rows copied", "rows copied, row of windows"}
# AVX2 only: 7-bit weights shifted, or signed inputs offset (other 7-bit weights) or in the
# corrected form, alone or two blocks at a time (b8_tile_pair; a last 24 channels as 16 + 8).
AVX2_PATHS = {"shifted weights", "signed offset", "signed corrected", "corrected pair tile", "corrected pair, one pass",
              "corrected narrow pair"}
# The paths of each SIMD build's convolution beyond SIMD_PATHS: AVX-VNNI's shifted weights or
# signed inputs offset (never as they are), VNNI's shifted weights and narrow tiles; in both, the
# gathered patches of signed inputs offset as they are gathered, and a tile of one pixel.
# AVX2 and AVX-VNNI, and AVX-512 VNNI where this CPU takes it (kernel_calls.avx512_winograd): 3x3
# stride-1 convolutions by Winograd (kernel_calls._winograd_conv2d_paths; with VNNI never a filter
# made per block of tiles, nor tiles of 2 rows).
WINOGRAD_PATHS = {"winograd", "winograd tiles of 2 rows", "winograd tiles of 4 rows", "several tile blocks",
                  "spare tiles", "padded tile", "tile partly written", "filter per tile block", "four-tile group",
                  "two four-tile groups"}
# The estimate modes of the AVX2 tiles' fused epilogue and the Winograd path's (kernel_calls.estimate_mode;
# no Winograd case has sums past the bound).
ESTIMATE_PATHS = {"estimate full", "estimate bounded", "estimate clamped"}
WINOGRAD_ESTIMATE_PATHS = ESTIMATE_PATHS - {"estimate full"}
CONV2D_VARIANT_PATHS = {"avx2": AVX2_PATHS | WINOGRAD_PATHS | ESTIMATE_PATHS | {"epilogue fused x16",
                                                                                "epilogue fused clamped"},
                        # AVX2's, signed inputs always in the corrected form, a last block alone on 512 bits
                        "avx512bw": AVX2_PATHS - {"corrected pair, one pass"} | {"corrected block tile"}
                        | WINOGRAD_PATHS | ESTIMATE_PATHS | {"epilogue fused x16", "epilogue fused clamped"},
                        "avxvnni": {"shifted weights", "signed offset", "signed patch offset", "one-pixel tile",
                                    "epilogue fused x16", "epilogue fused clamped"} | WINOGRAD_ESTIMATE_PATHS
                        | WINOGRAD_PATHS - {"filter per tile block", "winograd tiles of 2 rows"},
                        "avx512vnni": {"narrow channel tile", "epilogue fused x32", "shifted weights", "signed patch offset",
                                       "one-pixel tile", "epilogue fused x16", "epilogue fused clamped"}
                        | (WINOGRAD_PATHS - {"filter per tile block", "winograd tiles of 2 rows"}
                           | WINOGRAD_ESTIMATE_PATHS if kernel_calls.avx512_winograd() else set())}
# The AMX build's convolution on patches of 32 bytes or more (kernel_calls._amx_conv2d_paths):
# its own groups of pixels and blocks of channels, patches read in place, copied or gathered.
AMX_CONV2D_PATHS = {"amx", "pointwise in place", "whole pixel group", "partial pixel group", "one patch tile",
                    "several pixel groups", "rows copied", "gathered", "whole channel tile", "narrow channel tile",
                    "partial channel tile", "several channel tiles", "epilogue fused x32", "epilogue fused x16",
                    "epilogue fused clamped", "epilogue x8", "epilogue scalar"}


def conv2d_expected_paths(variant: str) -> set[str]:
    """Every path of the SIMD convolution of one build (kernel_calls.conv2d_paths names them)."""
    if variant == "amx":
        # Patches under 32 bytes run on the VNNI tiles: the cases' small ones take VNNI's paths but
        # those of larger filters (per tap, its chunks; shifted weights: blocks x patch bytes of
        # 128) or patches (rows of windows, tall kernels); and no Winograd.
        small = {"per tap", "several tiles per chunk", "shifted weights", "row of windows", "tall kernel"}
        return AMX_CONV2D_PATHS | conv2d_expected_paths("avx512vnni") - small - WINOGRAD_PATHS - ESTIMATE_PATHS
    return SIMD_PATHS - ({"signed"} if variant in ("avxvnni", "avx512bw") else set()) | CONV2D_VARIANT_PATHS[variant]


@pytest.mark.parametrize("variant", ["avx2", "avxvnni", "avx512bw", "avx512vnni", "amx"])
def test_conv2d_cases_reach_every_simd_path(variant):
    """The plain convolutions above and the epilogue cases below, together, take every path of
    each SIMD convolution; the grouped and depthwise ones have only the portable code."""
    reached = set()
    for seed in SEEDS:
        reached |= kernel_calls.conv2d_paths(random_conv_case(np.random.default_rng(seed), "dense"), variant)
        assert kernel_calls.conv2d_paths(random_conv_case(np.random.default_rng(seed), "grouped"), variant) == {"portable"}
    for seed in EPILOGUE_SEEDS:
        reached |= kernel_calls.conv2d_paths(epilogue_case(seed), variant)
    for seed in PER_TAP_SEEDS:
        reached |= kernel_calls.conv2d_paths(per_tap_case(seed), variant)
    for seed in STEM_SEEDS:
        reached |= kernel_calls.conv2d_paths(stem_case(seed), variant)
    for seed in POINTWISE_SEEDS:
        reached |= kernel_calls.conv2d_paths(pointwise_case(seed), variant)
    for seed in WINOGRAD_SEEDS:
        reached |= kernel_calls.conv2d_paths(winograd_case(seed), variant)
    expected = conv2d_expected_paths(variant)
    assert reached == expected, expected ^ reached


# Run in a fresh process (the kernels decide once per process whether AMX runs): the fuzzer's
# plain convolutions with patches of 32 bytes or more, on the AMX build in TFLite's rounding.
AMX_PROBE = """
import json, sys
import numpy as np
sys.path[:0] = [{tests!r}, {benchmarks!r}]
import fuzz_kernels, kernel_calls
lib = kernel_calls.load(kernel_calls.library_path({build!r}, "amx", "tflite"), "amx", "tflite")
cases = [case for case in (fuzz_kernels.draw("conv2d", "tflite", index, 5) for index in range(400))
         if case["groups"] == 1 and np.prod(case["weight"].shape[1:]) >= 32][:40]
exact = amx_packed = 0
for case in cases:
    exact += kernel_calls.check(lib, "conv2d", case) is None
    cout, kh, kw, cin = case["weight"].shape
    dims = kernel_calls.Dims(*case["weight"].shape)
    conv = kernel_calls.ConvParams(*case["strides"], *case["padding"], *case["dilation"], 1, case["pad_value"])
    packed = np.zeros(lib.b8_conv2d_s8_packed_size(conv, dims), np.int8)
    weight = kernel_calls.ptr(case["weight"], kernel_calls.i8)
    lib.b8_conv2d_s8_pack_filter(conv, dims, weight, kernel_calls.ptr(packed, kernel_calls.i8))
    at = -(-cout // 32) * 32 * -(-kh * kw * cin // 64) * 64  # the AMX layout's end: B8_WEIGHTS_AMX
    amx_packed += packed[at : at + 4].view(np.int32)[0] == 0x616D7831
print(json.dumps({{"cases": len(cases), "exact": exact, "amx_packed": int(amx_packed)}}))
"""


@pytest.mark.parametrize("setting", [None, "0"])
def test_amx_build_runs_the_vnni_tiles_where_amx_is_off(kernel_build, setting):
    """The AMX build packs filters for, and runs, the AMX tiles where the process may use AMX,
    and its VNNI tiles where it may not (BYOC_INT8_AMX=0 stands in for a CPU or OS without AMX):
    exact both ways."""
    missing = missing_cpu_features("amx")
    if missing:
        pytest.skip(f"the amx kernels are not tested: this CPU lacks {', '.join(sorted(missing))}")
    env = {key: value for key, value in os.environ.items() if key != "BYOC_INT8_AMX"}
    if setting is not None:
        env["BYOC_INT8_AMX"] = setting
    code = AMX_PROBE.format(tests=str(kernel_calls.ROOT / "tests"), benchmarks=str(kernel_calls.ROOT / "benchmarks"),
                            build=str(kernel_build))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cases"] >= 20 and result["exact"] == result["cases"], result
    assert result["amx_packed"] == (0 if setting == "0" else result["cases"]), result


def test_conv2d_cases_reach_the_int8_limits():
    """Across the seeds above, outputs hit both clamps (checked once, on the reference)."""
    hits = set()
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        multiplier, shift = random_requant(rng, 64, 27)
        acc = rng.integers(-128, 128, (64, 27)) @ rng.integers(-127, 128, 27)
        y = qarith.clamp_s8(qarith.requantize(acc, multiplier, shift, "single"))
        hits |= {int(y.min()), int(y.max())}
    assert {-128, 127} <= hits


def random_max_pool_case(rng):
    """Windows up to 3x3, dilated (half the cases) or not, padding within the window's span, and
    outputs now and then past the last window that reaches the input (such windows read only
    padding)."""
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = (1, 1) if rng.random() < 0.5 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    n, h, w, c = int(rng.integers(1, 3)), int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 9))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pad = [int(rng.integers(0, (kh - 1) * dh + 1)), int(rng.integers(0, (kw - 1) * dw + 1))]
    oh = max(1, out_size(h, pad[0], pad[0], kh, sh, dh)) + int(rng.integers(0, 2))
    ow = max(1, out_size(w, pad[1], pad[1], kw, sw, dw)) + int(rng.integers(0, 2))
    split = int(rng.integers(0, n * oh * ow + 1))  # two threads' shares
    return {"x": rng.integers(-128, 128, (n, h, w, c), dtype=np.int8), "kernel": (kh, kw), "strides": (sh, sw),
            "padding": tuple(pad), "dilation": (dh, dw), "out_hw": (oh, ow),
            "pixels": [(0, split), (split, n * oh * ow)], "fill": 0}


def padding_only_windows(case) -> int:
    """How many output pixels of a max pool case have no tap inside the input."""
    x = case["x"]
    inside = np.ones((1, *x.shape[1:3], 1), np.int8)
    covered = kernel_calls.expected("max_pool2d", {**case, "x": inside - 1, "pixels": None}, "single")[1]
    return int((covered == -128).sum())


@pytest.mark.parametrize("seed", SEEDS)
def test_max_pool2d(kernels, seed):
    assert_matches(kernels, "max_pool2d", random_max_pool_case(np.random.default_rng(seed)))


def test_max_pool2d_cases_have_dilation_and_padding_only_windows():
    cases = [random_max_pool_case(np.random.default_rng(seed)) for seed in SEEDS]
    assert sum(max(c["dilation"]) > 1 for c in cases) >= 10
    assert sum(padding_only_windows(c) > 0 for c in cases) >= 5


def test_max_pool2d_window_entirely_in_the_padding_is_the_lowest_code(kernels):
    """PyTorch's MaxPool2d(2, stride=1, padding=1, dilation=4) on 3x3: the one window's taps are
    rows and columns -1 and 3, all padding. Kernel and reference both give -128 (TFLite's rule:
    the maximum over the in-bounds taps, from the lowest code), not an error."""
    case = {"x": np.full((1, 3, 3, 2), 100, np.int8), "kernel": (2, 2), "strides": (1, 1), "padding": (1, 1),
            "dilation": (4, 4), "out_hw": (1, 1), "pixels": None, "fill": 0}
    np.testing.assert_array_equal(assert_matches(kernels, "max_pool2d", case), np.full((1, 1, 1, 2), -128))
    # Padding 0 instead: the top-left tap is inside, the other three are not.
    np.testing.assert_array_equal(assert_matches(kernels, "max_pool2d", {**case, "padding": (0, 0)}),
                                  np.full((1, 1, 1, 2), 100))


@pytest.mark.parametrize("seed", SEEDS)
def test_add(kernels, seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    s1, s2, s_out = np.exp(rng.uniform(-4, 1, 3))
    rescale = qarith.add_rescale(s1, s2, s_out)
    z1, z2, z_out = random_zero_point(rng), random_zero_point(rng), random_zero_point(rng, output=True)
    act = random_act(rng, z_out)
    a = rng.integers(-128, 128, size, dtype=np.int8)
    b = rng.integers(-128, 128, size, dtype=np.int8)
    case = {"a": a, "b": b, "left_shift": rescale.left_shift, "act": act, "zero_points": (z1, z2, z_out),
            **{k: (f.multiplier, f.shift) for k, f in (("input1", rescale.input1), ("input2", rescale.input2),
                                                       ("output", rescale.output))}}
    out = assert_matches(kernels, "add", case)
    # And the integer add tracks the real one to within a couple of output LSBs.
    real = ((a.astype(np.float64) - z1) * s1 + (b.astype(np.float64) - z2) * s2) / s_out + z_out
    inside = (real > act[0] + 1) & (real < act[1] - 1)
    assert np.all(np.abs(out[inside] - real[inside]) <= 1.01)


@pytest.mark.parametrize("left_shift", [0, 8, 9, 15, 20, 22])
def test_add_rescale_ranges(kernels, left_shift):
    """Every int8 pair of inputs (as differences from the zero points, |d| <= 255) through input
    factors from 2^-31 up to just below 1 (shifts -31 to 0, multipliers 2^30 to 2^31 - 1, the
    power-of-two form included), at left shifts inside (9-22) and outside the 32-bit form of the
    SIMD adds' input rescale; outputs scaled into the int8 range."""
    rng = np.random.default_rng(left_shift)
    a = np.repeat(np.arange(-128, 128, dtype=np.int8), 16)
    b = rng.permutation(a)
    for trial in range(24):
        shifts = [-31 + trial * 31 // 23, int(rng.integers(-31, 1))]  # the first from -31 to 0
        multipliers = [(1 << 30) if trial % 3 == 0 else (1 << 31) - 1 if trial % 3 == 1
                       else int(rng.integers(1 << 30, 1 << 31)) for _ in range(2)]
        largest = max(m * 2.0 ** (s - 31 + left_shift) for m, s in zip(multipliers, shifts))
        output = qarith.quantize_multiplier(min(0.99, 100.0 / (255 * largest)) if largest > 0 else 0.5)
        z1, z2 = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
        case = {"a": a, "b": b, "left_shift": left_shift, "act": (-128, 127), "zero_points": (z1, z2, 0),
                "input1": (multipliers[0], shifts[0]), "input2": (multipliers[1], shifts[1]),
                "output": (output.multiplier, output.shift)}
        assert_matches(kernels, "add", case)


@pytest.mark.parametrize("seed", SEEDS)
def test_global_avg_pool(kernels, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c = (int(d) for d in (rng.integers(1, 3), rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 17)))
    requant = qarith.quantize_multiplier(float(rng.uniform(0.2, 3.0)) / (h * w))
    case = {"x": rng.integers(-128, 128, (n, h, w, c), dtype=np.int8), "multiplier": requant.multiplier,
            "shift": requant.shift, "input_zero_point": random_zero_point(rng),
            "output_zero_point": random_zero_point(rng, output=True)}
    assert_matches(kernels, "global_avg_pool", case)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense(kernels, seed):
    rng = np.random.default_rng(seed)
    batches, depth, units = (int(d) for d in (rng.integers(1, 4), rng.integers(1, 70), rng.integers(1, 20)))
    multiplier, shift = random_requant(rng, units, depth)
    z_out = random_zero_point(rng, output=True)
    case = {"x": rng.integers(-128, 128, (batches, depth), dtype=np.int8),
            "weight": rng.integers(-127, 128, (units, depth), dtype=np.int8),
            "bias": rng.integers(-(1 << 16), 1 << 16, units).astype(np.int32), "multiplier": multiplier,
            "shift": shift, "output_zero_point": z_out, "act": random_act(rng, z_out)}
    assert_matches(kernels, "dense", case)


def requantize_grid():
    """(accumulator, multiplier, shift) over every shift in [-31, 30] and multipliers 2^30,
    2^31 - 1 and ~2^30.5: accumulators at the int32 limits, random ones, and for each shift the
    same scaled to land inside int8 there (|acc * M| * 2^(shift - 31) ~ 2^7 needs
    |acc| ~ 2^(38 - shift - log2 M), i.e. the random ones >> (shift + 23)), and accumulators on
    and next to the ties of every shift."""
    rng = np.random.default_rng(7)
    base = np.concatenate([[-(2**31), 2**31 - 1, 0, 1, -1, 3, -3], rng.integers(-(2**31), 2**31, 100)]).astype(np.int64)
    ties = np.concatenate([[(1 << k) + d, -(1 << k) + d] for k in range(31) for d in (-1, 0, 1)])
    ties = ties[(ties >= -(2**31)) & (ties < 2**31)]
    rows = []
    for s in range(-31, 31):
        accs = np.concatenate([base, base >> min(max(s + 23, 0), 31), ties])
        for m in (1 << 30, (1 << 31) - 1, 1518500250):
            rows.append(np.stack([accs, np.full_like(accs, m), np.full_like(accs, s)], axis=1))
    return np.concatenate(rows)


def test_requantize_matches_over_the_whole_range(kernels):
    """b8_requantize through a dense layer whose accumulators are its biases (input 0): every shift
    in [-31, 30], multipliers up to 2^31 - 1, accumulators at the int32 limits and ties."""
    grid = requantize_grid()
    acc, multiplier, shift = (np.ascontiguousarray(col, dtype=np.int32) for col in grid.T)
    case = {"acc": acc, "multiplier": multiplier, "shift": shift, "output_zero_point": 0, "act": (-128, 127)}
    expected = assert_matches(kernels, "requantize", case)
    assert len(np.unique(expected)) > 240  # not just saturated values
    # Every shift where int32 accumulators can give most int8 values gets most of them inside the
    # clamps: below -25, |acc * M| * 2^(shift - 31) < 2^6 for every int32 acc; above 3 the
    # results are multiples of about 2^(shift - 1/2), so fewer than 2^(8.5 - shift) values exist.
    for s in range(-25, 4):
        at = expected[shift == s]
        assert len(np.unique(at[(at > -128) & (at < 127)])) >= 90, s


@pytest.mark.parametrize("rounding, expected", [
    ("single", [3, -2, 2, -1, 1, -1]),
    ("single-away", [3, -3, 2, -2, 1, -1]),
    # The first rounding (to 32 bits) rounds ties up, the second (the shift) away from zero:
    # 5 x 0.58 / 2 = 1.45 becomes 2.9 -> 3, then 1.5 -> 2.
    ("tflite", [3, -2, 2, -1, 2, -2]),
])
def test_requantize_ties(rounding, expected):
    half = qarith.FixedPoint(1 << 30, 0)  # x0.5
    got = qarith.requantize(np.array([5, -5, 3, -3]), half.multiplier, half.shift, rounding)
    double = qarith.requantize(np.array([5, -5]), 1245540515, -1, rounding)  # x0.29
    np.testing.assert_array_equal(np.concatenate([got, double]), expected)


def test_tflite_rounding_is_gemmlowp_step_by_step():
    """The numpy image of TFLite's double rounding against a transcription of its two steps, one
    value at a time, on accumulators next to every tie and random ones."""

    def srdhm(a: int, b: int) -> int:  # gemmlowp: the nudged product, divided truncating toward 0
        nudged = a * b + ((1 << 30) if a * b >= 0 else 1 - (1 << 30))
        return abs(nudged) // (1 << 31) * (1 if nudged >= 0 else -1)

    def rdbpot(x: int, exponent: int) -> int:
        mask = (1 << exponent) - 1
        remainder, threshold = x & mask, (mask >> 1) + (1 if x < 0 else 0)
        return (x >> exponent) + (1 if remainder > threshold else 0)

    rng = np.random.default_rng(3)
    cases = [(int(a), int(m), int(s)) for a, m, s in zip(
        rng.integers(-(1 << 20), 1 << 20, 3000), rng.integers(1 << 30, 1 << 31, 3000), rng.integers(-20, 4, 3000))]
    cases += [(k * (1 << e) // 2 + d, 1 << 30, -e) for e in range(1, 8) for k in range(-9, 10) for d in (-1, 0, 1)]
    for acc, m, s in cases:
        x = acc << max(s, 0)
        want = rdbpot(srdhm(x, m), max(-s, 0))
        assert int(qarith.requantize(acc, m, s, "tflite")) == want, (acc, m, s)


@pytest.mark.parametrize("rounding", ["single", "tflite", "single-away"])
def test_rounding_divide(rounding):
    totals = np.arange(-50, 51)
    for count in range(1, 10):
        got = qarith.rounding_divide(totals, count, rounding)
        exact = totals / count
        assert np.all(np.abs(got - exact) <= 0.5)
        ties = np.abs(np.abs(exact - np.trunc(exact)) - 0.5) < 1e-9
        want = np.floor(exact + 0.5) if rounding == "single" else np.sign(exact) * np.floor(np.abs(exact) + 0.5)
        np.testing.assert_array_equal(got[ties], want[ties])


@pytest.mark.parametrize("real", [1e-12, 3e-10, 0.001, 0.4999999, 0.5, 0.75, 1.0, 1.9999999999, 3.0, 1234.5])
def test_quantize_multiplier_is_accurate(real):
    fp = qarith.quantize_multiplier(real)
    if real < 2.0**-32:
        assert fp.multiplier == 0
    else:
        assert (1 << 30) <= fp.multiplier < (1 << 31)
        assert -31 <= fp.shift <= 30
        assert abs(float(fp) - real) <= real * 2.0**-30


@pytest.mark.parametrize("seed", range(10))
def test_boundary_conversions(kernels, seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = (int(d) for d in (rng.integers(1, 3), rng.integers(1, 5), rng.integers(1, 6), rng.integers(1, 6)))
    quant = qarith.ActivationQuant(float(2.0 ** rng.integers(-6, 2)), random_zero_point(rng))
    x = (rng.integers(-300, 300, (n, c, h, w)) / 2 * quant.scale).astype(np.float32)  # many exact ties
    x.ravel()[::7] *= np.float32(1.0 + 2.0**-20)  # and values next to the ties
    case = {"x": x, "nchw": True, "scale": quant.scale, "zero_point": quant.zero_point}
    out = assert_matches(kernels, "quantize", case).reshape(n, h, w, c)
    np.testing.assert_array_equal(out, layout.to_storage(qarith.quantize_tensor(x, quant, kernels.rounding)))
    back = assert_matches(kernels, "dequantize", {**case, "x": out})
    np.testing.assert_array_equal(back.reshape(n, c, h, w), qarith.dequantize_tensor(layout.to_logical(out), quant))
    # Split over image rows at any row, as threads run it: the same bytes.
    split = int(rng.integers(0, n * h + 1))
    assert_matches(kernels, "quantize", {**case, "rows": [(0, split), (split, n * h)]})
    x.ravel()[rng.integers(0, x.size)] = np.nan
    assert kernel_calls.run(kernels, "quantize", {**case, "x": x, "nchw": False})[0] == 1  # refused


@pytest.mark.parametrize("scale, halves", [(0.0173, 140), (0.00931, 255), (1.5 * 2.0**126, 2)])
def test_rgb_quantize_near_ties(kernels, scale, halves):
    """RGB rows (their SIMD path in layout_s8.c) at ties and one float either side of them, for
    scales whose reciprocal is inexact (x / scale and x times 1 / scale then round apart near
    ties) or subnormal (1.5 x 2^126): bit for bit the reference's division."""
    rng = np.random.default_rng(11)
    ties = ((rng.integers(-halves, halves, (2, 3, 3, 40)) + 0.5) * scale).astype(np.float32)
    x = np.stack([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))], 1)
    x = np.ascontiguousarray(x.reshape(6, 3, 3, 40))
    case = {"x": x, "nchw": True, "scale": scale, "zero_point": int(rng.integers(-20, 20))}
    out = assert_matches(kernels, "quantize", case)
    assert len(np.unique(out)) > 3  # codes across the range, not one clamp


@pytest.mark.parametrize("seed", range(8))
def test_rgb_boundary_conversion(kernels, seed):
    """Images of 3 channels, which the SIMD builds convert 16 pixels at a time in registers: rows
    of 16 to 70 pixels (the last w % 16 through the general path), ties and the floats next to
    them, values past the clamp at both ends, scales that divide inexactly, split rows, and a NaN
    or an infinity in any channel at any place refused."""
    rng = np.random.default_rng(100 + seed)
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(16, 71))
    scale = float(np.float32(2.0 ** rng.integers(-6, 2) * (1.0 if seed % 2 else rng.uniform(0.5, 1.0))))
    quant = qarith.ActivationQuant(scale, random_zero_point(rng))
    x = (rng.integers(-600, 600, (n, 3, h, w)) / 2 * quant.scale).astype(np.float32)
    x.ravel()[::5] = np.nextafter(x.ravel()[::5], np.float32(np.inf))
    x.ravel()[1::5] = np.nextafter(x.ravel()[1::5], np.float32(-np.inf))
    case = {"x": x, "nchw": True, "scale": quant.scale, "zero_point": quant.zero_point}
    out = assert_matches(kernels, "quantize", case).reshape(n, h, w, 3)
    np.testing.assert_array_equal(out, layout.to_storage(qarith.quantize_tensor(x, quant, kernels.rounding)))
    assert {-128, 127} <= set(out.ravel().tolist())  # both clamps reached
    split = int(rng.integers(0, n * h + 1))
    assert_matches(kernels, "quantize", {**case, "rows": [(0, split), (split, n * h)]})
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[int(rng.integers(0, n)), int(rng.integers(0, 3)), int(rng.integers(0, h)), int(rng.integers(0, w))] = bad
        assert kernel_calls.run(kernels, "quantize", {**case, "x": y})[0] == 1  # refused


def test_concat_of_copies_and_of_one_rescaled_input(kernels):
    """A concat whose inputs all have the output's scale and zero point copies them, in a loop of
    its own; with one input rescaled, every input takes the general path."""
    rng = np.random.default_rng(7)
    xs = [rng.integers(-128, 128, (7, inner)).astype(np.int8) for inner in (5, 64, 3)]
    case = {"inputs": xs, "outer": 7, "multiplier": np.full(3, 1 << 30, np.int32), "shift": np.ones(3, np.int32),
            "zero_points": np.full(3, -9, np.int32), "output_zero_point": -9}
    np.testing.assert_array_equal(assert_matches(kernels, "concat", case).reshape(7, 72), np.concatenate(xs, 1))
    rescaled = {**case, "multiplier": np.array([1 << 30, 1518500250, 1 << 30], np.int32),
                "shift": np.array([1, 0, 1], np.int32)}
    out = assert_matches(kernels, "concat", rescaled).reshape(7, 72)
    np.testing.assert_array_equal(out[:, :5], xs[0])
    assert not np.array_equal(out[:, 5:69], xs[1])
    shifted = {**case, "zero_points": np.array([-9, -10, -9], np.int32)}  # one zero point off by one
    out = assert_matches(kernels, "concat", shifted).reshape(7, 72)
    np.testing.assert_array_equal(out[:, 5:69], np.clip(xs[1].astype(np.int32) + 1, -128, 127))


def test_quantize_rows_writes_only_its_rows(kernels):
    """A range of image rows reads and writes those rows alone: a NaN elsewhere goes unseen."""
    n, c, h, w = 2, 3, 4, 70
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    x[1, 2, 3, 5] = np.nan  # image 1, row 3: row 7 of 8
    out = np.full(x.size, 0x55, np.int8)

    def convert(begin: int, end: int) -> int:
        return kernels.b8_quantize_f32_rows(0.05, 3, kernel_calls.Dims(n, h, w, c),
                                            ctypes.byref(kernel_calls.Pixels(begin, end)),
                                            kernel_calls.ptr(x, kernel_calls.f32), kernel_calls.ptr(out, kernel_calls.i8))

    assert convert(2, 6) == 0
    rows = out.reshape(n * h, w * c)
    whole = layout.to_storage(qarith.quantize_tensor(np.nan_to_num(x), qarith.ActivationQuant(0.05, 3), kernels.rounding))
    np.testing.assert_array_equal(rows[2:6], whole.reshape(n * h, w * c)[2:6])
    assert np.all(rows[:2] == 0x55) and np.all(rows[6:] == 0x55)
    assert convert(6, 8) == 1  # the NaN's row


EPILOGUE_SEEDS = range(20)


def epilogue_case(seed):
    """Output channels in multiples of 8, up to 96 (three VNNI tiles of 32, the last one partial
    for 40 or 72), shifts <= 0 for the SIMD paths' vector requantization, or, every fourth seed,
    one channel shifted left (which sends the whole layer to the scalar epilogue); extreme
    multipliers, shifts down to -31, large accumulators and biases; every fourth seed from 1, one
    channel whose sums are INT32_MAX at a scale of 1 - 2^-31 (in float, 2^31: the estimate's cap,
    B8_ESTIMATE_FULL, keeps it from converting to INT32_MIN)."""
    rng = np.random.default_rng(1000 + seed)
    n, h, w, kh, kw, sh, sw, dh, dw, pad, oh, ow = random_conv_geometry(rng)
    cin, cout = int(rng.integers(1, 40)), 8 * int(rng.integers(1, 13))
    nonnegative = bool(rng.integers(0, 2))
    weight = rng.choice(np.array([-127, 127, 0, 1, -1], np.int8), (cout, kh, kw, cin))  # large sums
    bias = (rng.integers(-(1 << 30), 1 << 30, cout) >> rng.integers(0, 26, cout)).astype(np.int32)
    multiplier = rng.integers(1 << 30, 1 << 31, cout, dtype=np.int64)
    multiplier[::3] = (1 << 31) - 1
    shift = rng.integers(-31, 1, cout).astype(np.int32)
    typical = 127.0 * 60 * np.sqrt(kh * kw * cin)  # a typical accumulator: mid-range outputs
    shift[rng.random(cout) < 0.6] = -int(np.log2(typical / 64))
    if seed % 4 == 3:
        shift[int(rng.integers(0, cout))] = int(rng.integers(1, 4))
    if seed % 4 == 1:  # one channel's sums at INT32_MAX at a scale of about 1: the estimate's cap
        top = int(rng.integers(0, cout))
        weight[top], bias[top], multiplier[top], shift[top] = 0, (1 << 31) - 1, (1 << 31) - 1, 0
    # The clamps are exercised above; here every output shows the arithmetic.
    return {"x": rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8), "weight": weight,
            "bias": bias, "multiplier": multiplier.astype(np.int32), "shift": shift, "groups": 1, "strides": (sh, sw),
            "padding": tuple(pad[:2]), "dilation": (dh, dw), "out_hw": (oh, ow), "pad_value": random_zero_point(rng),
            "output_zero_point": random_zero_point(rng, output=True), "act": (-128, 127), "nonnegative": nonnegative,
            "pixels": None, "fill": 0}


@pytest.mark.parametrize("seed", EPILOGUE_SEEDS)
def test_conv2d_vectorized_epilogue(kernels, seed):
    expected = assert_matches(kernels, "conv2d", epilogue_case(seed))
    assert expected.size < 64 or len(np.unique(expected)) > 3


# Input channel counts that fill and straddle the SIMD depthwise blocks (8 int32 lanes for AVX2, 16
# for AVX-512; fewer than 8 channels run portable in the AVX2 build); seeds past the list draw any
# count up to 70.
DEPTHWISE_CHANNELS = [1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 40, 47, 48, 63, 64, 65, 70]
DEPTHWISE_SEEDS = range(92)
WIDE_SEEDS = range(80, 92)  # MobileNet's geometry with 64-200 channels: the AVX-512 VNNI wide blocks


def depthwise_case(seed):
    """A depthwise convolution for the SIMD blocks: input channels from DEPTHWISE_CHANNELS (twice),
    then random up to 70; channel multiplier 1 (MobileNet's, the SIMD path) in about three cases of
    four, else 2 (portable); 3x3 kernels mostly, else 1x1 up to 5x5; strides and dilations 1 or 2; padding 0-2
    per side (windows partly or, with outputs past the input, entirely in the padding); the input
    zero point (pad value) and the output zero point at the ends of int8 half the time; shifts <= 0
    (the vector epilogue) or, every fifth seed, one channel shifted left (the scalar epilogue of
    its block); no bias every seventh seed, one channel's sums at INT32_MAX every eleventh (the
    estimate's cap, see epilogue_case); the output pixels in one call or in shares that start and
    end mid-row. WIDE_SEEDS take MobileNet's geometry (3x3, multiplier 1, stride 1 or 2 in turn,
    no dilation across) with 64 to 200 channels."""
    rng = np.random.default_rng(2000 + seed)
    listed = len(DEPTHWISE_CHANNELS)
    cin = DEPTHWISE_CHANNELS[seed % listed] if seed < 2 * listed else int(rng.integers(1, 71))
    # The list once with multiplier 1, once with 1 and 2 alternating; then 2 every third seed.
    cout = cin * (2 if (seed >= listed and seed % (2 if seed < 2 * listed else 3) == 0) else 1)
    kh, kw = (3, 3) if rng.random() < 0.6 else (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 3, 4))
    if seed in WIDE_SEEDS:
        cin = cout = int(rng.choice([64, 65, 96, 127, 128, 200]))
        kh = kw = 3
        sw, dw = 1 + seed % 2, 1
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 13)), int(rng.integers(1, 13))
    pad = [int(p) for p in rng.integers(0, 3, 4)]  # top, left, bottom, right
    oh = max(1, out_size(h, pad[0], pad[2], kh, sh, dh)) + int(rng.random() < 0.15)
    ow = max(1, out_size(w, pad[1], pad[3], kw, sw, dw)) + int(rng.random() < 0.15)
    x = rng.integers(-128, 128, (n, h, w, cin), dtype=np.int8)
    x[rng.random(x.shape) < 0.1] = rng.choice(np.array([-128, 127], np.int8))
    weight = rng.integers(-127, 128, (1, kh, kw, cout), dtype=np.int8)
    multiplier, shift = random_requant(rng, cout, kh * kw)
    if seed % 5 == 4 and cout > 1:  # (that channel's outputs saturate)
        shift[int(rng.integers(0, cout))] = int(rng.integers(1, 4))
    bias = None if seed % 7 == 6 else rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32)
    if seed % 11 == 10 and bias is not None:  # one channel's sums at INT32_MAX, as in epilogue_case
        top = int(rng.integers(0, cout))
        weight[..., top], bias[top], multiplier[top], shift[top] = 0, (1 << 31) - 1, (1 << 31) - 1, 0
    ends = [-128, 127]
    pad_value = int(rng.choice(ends)) if rng.random() < 0.5 else random_zero_point(rng)
    z_out = int(rng.choice(ends)) if rng.random() < 0.3 else random_zero_point(rng, output=True)
    total = n * oh * ow
    cuts = sorted(int(c) for c in rng.integers(0, total + 1, int(rng.integers(1, 4))))
    pixels = None if seed % 4 == 0 else list(zip([0, *cuts], [*cuts, total]))
    return {"x": x, "weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift,
            "groups": cin, "strides": (sh, sw), "padding": tuple(pad[:2]), "dilation": (dh, dw), "out_hw": (oh, ow),
            "pad_value": pad_value, "output_zero_point": z_out,
            "act": random_act(rng, z_out) if abs(z_out) < 100 else (-128, 127), "nonnegative": False,
            "pixels": pixels, "fill": int(rng.integers(-128, 128))}


@pytest.mark.parametrize("seed", DEPTHWISE_SEEDS)
def test_depthwise_conv2d_simd_blocks(kernels, seed):
    case = depthwise_case(seed)
    expected = assert_matches(kernels, "depthwise_conv2d", case)
    # Not all saturated: the outputs show the arithmetic.
    assert expected.size < 32 or len(np.unique(expected)) > 3


# Every path of the SIMD depthwise convolution (kernel_calls.depthwise_paths reads them off as
# conv2d_s8.c chooses them).
DEPTHWISE_PATHS = {"portable", "simd", "3x3", "other kernel", "several channel blocks", "whole channel block",
                   "epilogue scalar", "part of a row", "several rows", "interior", "interior x4", "padded rows",
                   "padded columns", "window rows all padded"}
WIDE_PATHS = {"wide block", "wide block stopped by a shift", "wide stride 1", "wide stride 2", "wide padded columns"}
DEPTHWISE_VARIANT_PATHS = {"avx2": {"overlapping channel block", "epilogue x8"} | WIDE_PATHS | ESTIMATE_PATHS,
                           "avxvnni": {"overlapping channel block", "epilogue x8"} | WIDE_PATHS | ESTIMATE_PATHS,
                           "avx512bw": {"overlapping channel block", "epilogue x8", "wide block x32"} | WIDE_PATHS
                           | ESTIMATE_PATHS,
                           "avx512vnni": {"masked channel block", "epilogue x16", "masked wide block"} | WIDE_PATHS}


@pytest.mark.parametrize("variant", ["avx2", "avxvnni", "avx512bw", "avx512vnni"])
def test_depthwise_cases_reach_every_simd_path(variant):
    """The cases above take every path of each SIMD depthwise build, with channel counts of 8, 15,
    16, 17, 31, 32, 33 and 64 among them on the SIMD path, multipliers 1 and 2, strides and
    dilations 2, and both ends of int8 as input and output zero points."""
    cases = [depthwise_case(seed) for seed in DEPTHWISE_SEEDS]
    reached, simd_channels = set(), set()
    for case in cases:
        paths = kernel_calls.depthwise_paths(case, variant)
        reached |= paths
        if "simd" in paths:
            simd_channels.add(case["x"].shape[3])
    expected = DEPTHWISE_PATHS | DEPTHWISE_VARIANT_PATHS[variant]
    assert reached == expected, expected ^ reached
    assert {8, 15, 16, 17, 31, 32, 33, 64} <= simd_channels
    assert {c["weight"].shape[3] // c["x"].shape[3] for c in cases} == {1, 2}
    assert any(c["strides"] == (2, 2) for c in cases) and any(c["dilation"] == (2, 2) for c in cases)
    for key in ("pad_value", "output_zero_point"):
        assert {-128, 127} <= {c[key] for c in cases}, key


@pytest.mark.parametrize("variant", ["avx2", "avxvnni", "avx512bw", "avx512vnni"])
def test_fuzzer_depthwise_draws_reach_every_simd_path(variant):
    """benchmarks/fuzz_kernels.py's depthwise configurations (the first 300 per rounding: the sample
    tests/test_kernel_fuzz.py runs) take every path of each SIMD depthwise build, each many times."""
    benchmarks = str(kernel_calls.ROOT / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    import fuzz_kernels

    reached = Counter()
    for rounding in kernel_calls.ROUNDINGS:
        for index in range(300):
            reached.update(kernel_calls.depthwise_paths(fuzz_kernels.draw("depthwise_conv2d", rounding, index, 0),
                                                        variant))
    assert set(reached) == DEPTHWISE_PATHS | DEPTHWISE_VARIANT_PATHS[variant], set(reached)
    # The estimate's modes are one per call (of its layer's bias and clamp), not one per block.
    assert min(n for path, n in reached.items() if path not in ESTIMATE_PATHS) >= 25, reached
    assert min((reached[path] for path in ESTIMATE_PATHS & set(reached)), default=10) >= 10, reached


@pytest.mark.parametrize("size, channels, stride", [(28, 192, 1), (14, 576, 2), (7, 960, 1), (9, 40, 1)])
def test_depthwise_conv2d_mobilenet_layers(kernels, size, channels, stride):
    """MobileNetV2-shaped layers (3x3, padding 1) with signed inputs, the input zero point -128 and
    the pixels in the thread shares of the TVM adapter (whole 8-pixel tiles over two tasks)."""
    rng = np.random.default_rng(size * channels + stride)
    out = (size - 1) // stride + 1
    multiplier, shift = random_requant(rng, channels, 9)
    share = ((out * out + 1) // 2 + 7) // 8 * 8
    case = {"x": rng.integers(-128, 128, (1, size, size, channels), dtype=np.int8),
            "weight": rng.integers(-127, 128, (1, 3, 3, channels), dtype=np.int8),
            "bias": rng.integers(-(1 << 14), 1 << 14, channels).astype(np.int32), "multiplier": multiplier,
            "shift": shift, "groups": channels, "strides": (stride, stride), "padding": (1, 1), "dilation": (1, 1),
            "out_hw": (out, out), "pad_value": -128, "output_zero_point": -5, "act": (-5, 127), "nonnegative": False,
            "pixels": [(0, share), (share, out * out)], "fill": 0}
    expected = assert_matches(kernels, "depthwise_conv2d", case)
    assert len(np.unique(expected)) > 100


def test_double_requantization_is_computed_exactly_in_integers(kernels):
    """b8_requantize_f64 (through a dense layer whose accumulators are its biases) against numpy's
    own double product and C's round(): factors of every magnitude with all 53 bits in use,
    accumulators at the int32 limits, and products built to sit on and next to the ties."""
    rng = np.random.default_rng(11)
    reals = np.exp(rng.uniform(np.log(1e-6), np.log(4.0), 400))
    accs = np.concatenate([[-(2**31), 2**31 - 1, 0, 1, -1], rng.integers(-(2**31), 2**31, 200),
                           rng.integers(-(2**20), 2**20, 200)])
    grid_acc = rng.choice(accs, 4000)
    grid_real = rng.choice(reals, 4000)
    # Ties: acc * real = k + 1/2 exactly (real = (2k + 1) / (2 acc)), and one ulp either side.
    k, acc = rng.integers(-100, 100, 1000), rng.integers(1, 1 << 12, 1000) * rng.choice([-1, 1], 1000)
    tie_real = np.abs((2 * k + 1) / (2.0 * acc))
    tie_real = np.concatenate([tie_real, np.nextafter(tie_real, 0), np.nextafter(tie_real, 1)])
    grid_acc = np.concatenate([grid_acc, np.tile(acc, 3)]).astype(np.int32)
    grid_real = np.concatenate([grid_real, tie_real])
    parts = [qarith.double_parts(float(r)) for r in grid_real]
    mantissa = np.array([m for m, _ in parts], np.int64)
    exponent = np.array([e for _, e in parts], np.int32)
    case = {"acc": grid_acc, "mantissa": mantissa, "exponent": exponent, "output_zero_point": 3, "act": (-128, 127)}
    expected = qarith.clamp_s8(qarith.requantize_double(grid_acc, grid_real) + 3)
    np.testing.assert_array_equal(assert_matches(kernels, "requantize_double", case), expected)
    assert len(np.unique(expected)) > 200
    # C's round() on the double product, for the record: numpy's image is that.
    v = grid_acc.astype(np.float64) * grid_real
    np.testing.assert_array_equal(qarith.requantize_double(grid_acc, grid_real), np.vectorize(_c_round)(v))


def _c_round(v: float) -> int:
    """C's round(): half away from zero, computed exactly with fractions."""
    from fractions import Fraction

    f = Fraction(v)
    magnitude = int(abs(f) + Fraction(1, 2))
    return magnitude if f >= 0 else -magnitude


PER_TAP_SEEDS = range(6)


def per_tap_case(seed):
    """Filters over the size (B8_CHUNK_WEIGHT_BYTES) above which the SIMD paths read every tap in
    place and run each channel block over chunks of tiles, fetching the next block's weights
    ahead: 3x3 on 64 or 128 channels or 1x1 on 512, out to 496 (a last VNNI block of 16), 512 or
    520 (of 8) channels; padded, strided or dilated windows; up to 2 x 9 x 9 output pixels (several
    chunks), split at any pixel into two shares."""
    rng = np.random.default_rng(1000 + seed)
    one_by_one = seed % 3 == 2
    cin, kernel = (512, 1) if one_by_one else (int(rng.choice([64, 128])), 3)
    cout = [496, 512, 520][seed % 3]
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(3, 10)), int(rng.integers(3, 10))
    stride, dilation = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pad = 0 if one_by_one else dilation
    oh, ow = out_size(h, pad, pad, kernel, stride, dilation), out_size(w, pad, pad, kernel, stride, dilation)
    nonnegative = seed % 2 == 0
    multiplier, shift = random_requant(rng, cout, kernel * kernel * cin)
    shift = np.minimum(shift, 0)  # the vector epilogues
    z_out = random_zero_point(rng, output=True)
    split = int(rng.integers(0, n * oh * ow + 1))
    return {"x": rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8),
            "weight": rng.integers(-127, 128, (cout, kernel, kernel, cin), dtype=np.int8),
            "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32), "multiplier": multiplier, "shift": shift,
            "groups": 1, "strides": (stride, stride), "padding": (pad, pad), "dilation": (dilation, dilation),
            "out_hw": (oh, ow), "pad_value": 0 if nonnegative else random_zero_point(rng), "output_zero_point": z_out,
            "act": random_act(rng, z_out), "nonnegative": nonnegative, "pixels": [(0, split), (split, n * oh * ow)],
            "fill": 0}


STEM_SEEDS = range(6)


def stem_case(seed):
    """Stems: 7x7 or 3x3 filters on 3 channels (their patches' rows back to back, gathered
    whole) over images wide enough for whole tiles of windows inside, padded, stride 1 or 2,
    16 to 64 output channels, split at any pixel into two shares."""
    rng = np.random.default_rng(2000 + seed)
    kernel, stride = (7, 2) if seed % 2 == 0 else (3, int(rng.integers(1, 3)))
    cout = [64, 32, 24, 16, 48, 64][seed]
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(12, 30)), int(rng.integers(20, 40))
    pad = kernel // 2
    oh, ow = out_size(h, pad, pad, kernel, stride, 1), out_size(w, pad, pad, kernel, stride, 1)
    nonnegative = seed % 3 == 0
    multiplier, shift = random_requant(rng, cout, kernel * kernel * 3)
    z_out = random_zero_point(rng, output=True)
    split = int(rng.integers(0, n * oh * ow + 1))
    weight = rng.integers(-127, 128, (cout, kernel, kernel, 3), dtype=np.int8)
    return {"x": rng.integers(0 if nonnegative else -128, 128, (n, h, w, 3), dtype=np.int8),
            "weight": np.clip(weight, -64, 64) if seed % 4 == 1 else weight,
            "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32), "multiplier": multiplier,
            "shift": np.minimum(shift, 0) if seed < 4 else shift, "groups": 1, "strides": (stride, stride),
            "padding": (pad, pad), "dilation": (1, 1), "out_hw": (oh, ow), "pad_value": 0 if nonnegative else -128,
            "output_zero_point": z_out, "act": random_act(rng, z_out), "nonnegative": nonnegative,
            "pixels": [(0, split), (split, n * oh * ow)], "fill": 0}


POINTWISE_SEEDS = range(8)


def pointwise_case(seed):
    """1x1 convolutions at stride 1 on 16-64 channels (MobileNet's expansions and projections),
    their pixels read in place in chunks of tiles: 8, 16, 32, 80 or 96 output channels (a partial
    or narrow block, corrected AVX2 pairs, a single block after them), 8-bit or 7-bit weights
    (the AVX2 offset and shifted forms), signed or non-negative inputs, up to 3 x 9 x 13 pixels
    (several chunks), split at any pixel into two shares, so that shares and chunks start inside
    a tile; one seed's last channel has a positive shift (the scalar epilogue)."""
    rng = np.random.default_rng(3000 + seed)
    cin = [16, 32, 24, 64, 16, 64, 24, 64][seed]
    cout = [96, 16, 96, 32, 8, 96, 16, 80][seed]
    n, h, w = int(rng.integers(1, 4)), int(rng.integers(2, 10)), int(rng.integers(3, 14))
    nonnegative = seed % 3 == 0
    multiplier, shift = random_requant(rng, cout, cin)
    z_out = random_zero_point(rng, output=True)
    split = int(rng.integers(0, n * h * w + 1))
    weight = rng.integers(-127, 128, (cout, 1, 1, cin), dtype=np.int8)
    shift = np.minimum(shift, 0)  # the vector epilogues; one seed's last channel has a factor >= 1
    if seed == 6:
        shift[-1] = 1
    return {"x": rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8),
            "weight": np.clip(weight, -64, 64) if seed % 4 == 1 else weight,
            "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32), "multiplier": multiplier,
            "shift": shift, "groups": 1, "strides": (1, 1),
            "padding": (0, 0), "dilation": (1, 1), "out_hw": (h, w), "pad_value": 0 if nonnegative else -128,
            "output_zero_point": z_out, "act": random_act(rng, z_out), "nonnegative": nonnegative,
            "pixels": [(0, split), (split, n * h * w)], "fill": 0}


WINOGRAD_SEEDS = range(12)


def winograd_case(seed):
    """3x3 stride-1 convolutions on 16-512 input channels (the Winograd path of the AVX2 and
    AVX-VNNI builds, and of AVX-512 VNNI where it takes it: tiles of 4 rows up to 224 channels, of 2
    beyond): outputs of any size up to 18 x 18 (tiles past the last row or column, several
    blocks of tiles, a last group of fewer than 6), padding of 0-2 on each side (tiles reading
    padding), batches of up to 3 split into three shares at any pixel, 8-96 output channels (partial
    and several blocks of 16; 13: the scalar epilogue; one seed's last channel a positive shift;
    512 -> 56: a filter transformed per block of tiles), signed or non-negative inputs, and one
    seed's values all at the int8 ends. The last two are whole images of 8 tiles, whose GEMM takes
    two groups of 4 (7 x 16 on 64 channels, tiles of 4 rows; ResNet's 7 x 7 on 512, of 2 rows, its
    filter transformed per block)."""
    rng = np.random.default_rng(4000 + seed)
    cin = [16, 32, 48, 64, 16, 224, 32, 512, 16, 64, 64, 512][seed]
    cout = [16, 24, 8, 64, 40, 13, 32, 56, 48, 96, 32, 64][seed]
    size = 18 if cin <= 32 or cin == 224 else 9  # 224: several blocks of tiles of 4 rows
    n, h, w = int(rng.integers(1, 4)), int(rng.integers(1, size + 1)), int(rng.integers(1, size + 1))
    pad = [int(p) for p in rng.integers(0, 3, 4)]  # top, left, bottom, right
    if seed >= 10:
        n, h, w, pad = 1, 7, 16 if seed == 10 else 7, [1, 1, 1, 1]
    oh, ow = out_size(h, pad[0], pad[2], 3, 1, 1), out_size(w, pad[1], pad[3], 3, 1, 1)
    if oh < 1 or ow < 1:
        pad[2], pad[3] = pad[2] + 2, pad[3] + 2
        oh, ow = out_size(h, pad[0], pad[2], 3, 1, 1), out_size(w, pad[1], pad[3], 3, 1, 1)
    nonnegative = seed % 3 == 0
    x = rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8)
    weight = rng.integers(-127, 128, (cout, 3, 3, cin), dtype=np.int8)
    if seed == 8:
        x = np.where(rng.random(x.shape) < 0.5, -128, 127).astype(np.int8)
        weight = np.where(rng.random(weight.shape) < 0.5, -127, 127).astype(np.int8)
    multiplier, shift = random_requant(rng, cout, 9 * cin)
    shift = np.minimum(shift, 0)
    if seed == 4:
        shift[-1] = 1
    z_out = random_zero_point(rng, output=True)
    total = n * oh * ow
    splits = sorted(int(v) for v in rng.integers(0, total + 1, 2)) if seed < 10 else [total, total]
    return {"x": x, "weight": weight, "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32),
            "multiplier": multiplier, "shift": shift, "groups": 1, "strides": (1, 1), "padding": tuple(pad[:2]),
            "dilation": (1, 1), "out_hw": (oh, ow), "pad_value": 0 if nonnegative else random_zero_point(rng),
            "output_zero_point": z_out, "act": random_act(rng, z_out), "nonnegative": nonnegative,
            "pixels": [(0, splits[0]), (splits[0], splits[1]), (splits[1], total)], "fill": 0}


@pytest.mark.parametrize("seed", WINOGRAD_SEEDS)
def test_conv2d_winograd(kernels, seed):
    case = winograd_case(seed)
    assert "winograd" in kernel_calls.conv2d_paths(case, "avx2")
    expected = assert_matches(kernels, "conv2d", case)
    assert len(np.unique(expected)) > 3


@pytest.mark.parametrize("setting", ["1", "0"])
def test_avx512_winograd_follows_the_setting(kernel_build, tmp_path, monkeypatch, setting):
    """The AVX-512 VNNI build convolves the Winograd cases by Winograd's F(4x4, 3x3) where
    BYOC_INT8_WINOGRAD=1 (what it does unasked on AMD's Zen 4; on Zen 5 from 64 input channels) and on
    its direct tiles where it is 0 (what it does unasked on Intel's cores), deciding once per process
    (so in a fresh one here): exact both ways in every rounding, with the row blocks the path model
    expects of the setting (kernel_calls.call_conv2d checks b8_conv2d_s8_row_block). The cases
    include one in shares of whole channel blocks (32 channels each in this build: its GEMM takes
    them as pairs of its blocks of 16, from a share's first channel)."""
    missing = missing_cpu_features("avx512vnni")
    if missing:
        pytest.skip(f"the avx512vnni kernels are not tested: this CPU lacks {', '.join(sorted(missing))}")
    monkeypatch.setenv("BYOC_INT8_WINOGRAD", setting)  # for the path model here and the fresh process
    cases = [winograd_case(seed) for seed in WINOGRAD_SEEDS] + [channel_share_case(2)]
    winograd = [case for case in cases if "winograd" in kernel_calls.conv2d_paths(case, "avx512vnni")]
    # 512 channels: tiles of 2 rows, never with VNNI
    four_rows = [case for case in cases if case["weight"].shape[3] <= 224]
    assert len(four_rows) == 11 and len(winograd) == (len(four_rows) if setting == "1" else 0)
    assert "channel shares" in kernel_calls.conv2d_paths(cases[-1], "avx512vnni")
    batches = {rounding: [("conv2d", case, kernel_calls.expected("conv2d", case, rounding)) for case in cases]
               for rounding in kernel_calls.ROUNDINGS}
    (tmp_path / "cases.pkl").write_bytes(pickle.dumps(batches))
    libraries = [f"{kernel_calls.library_path(kernel_build, 'avx512vnni', rounding)}:avx512vnni:{rounding}"
                 for rounding in kernel_calls.ROUNDINGS]
    subprocess.run([sys.executable, str(kernel_calls.ROOT / "tests" / "kernel_calls.py"), "replay",
                    str(tmp_path / "cases.pkl"), str(tmp_path / "results.pkl"), *libraries],
                   check=True, capture_output=True)
    results = pickle.loads((tmp_path / "results.pkl").read_bytes())
    assert results == {"runs": 3 * len(cases), "failures": []}


@pytest.mark.parametrize("cin, rows", [(896, 2), (224, 4)])
def test_conv2d_winograd_wraps_exactly(kernels, cin, rows):
    """The most input channels each Winograd tile takes (896 for tiles of 2 rows, whose sums are 48
    x sum(x * w); 224 for tiles of 4 rows, 576 x), every value at the int8 ends: the sums leave
    int32 on the way (they wrap), and the division modulo 2^32 still gives the exact sums; 16
    channels more take the next path (tiles of 2 rows, or the direct one)."""
    rng = np.random.default_rng(5)
    cout = 16
    x = np.where(rng.random((1, 4, 5, cin)) < (0.9 if rows == 2 else 0.99), -128, 127).astype(np.int8)
    low = -127 if rows == 2 else -128  # 9 x 224 x 128 x 128 is still under 2^25
    weight = np.where(rng.random((cout, 3, 3, cin)) < 0.9, low, 127).astype(np.int8)
    weight[1::2] = low  # every product 128 x |low| where x is -128
    bias = np.zeros(cout, np.int32)
    case = {"x": x, "weight": weight, "bias": bias, "multiplier": np.full(cout, 1 << 30, np.int32),
            "shift": np.full(cout, -22 if rows == 2 else -18, np.int32), "groups": 1, "strides": (1, 1),
            "padding": (1, 1),
            "dilation": (1, 1), "out_hw": (4, 5), "pad_value": -128, "output_zero_point": 0, "act": (-128, 127),
            "nonnegative": False, "pixels": None, "fill": 0}
    assert f"winograd tiles of {rows} rows" in kernel_calls.conv2d_paths(case, "avx2")
    sums = np.einsum("nhwc,ohwc->o", np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-128)[:, :3, :3]
                     .astype(np.int64), weight.astype(np.int64))
    scale = 48 if rows == 2 else 576
    assert scale * np.abs(sums).max() > 1 << 32  # Winograd's sums pass 2^32
    if rows == 4:
        assert np.abs(sums).max() > 0.95 * (1 << 25)  # near the bound of the tiles of 4 rows
    expected = assert_matches(kernels, "conv2d", case)
    assert len(np.unique(expected)) > 3
    wider = {**case, "x": np.concatenate([x, x[..., :16]], axis=3),
             "weight": np.concatenate([weight, weight[..., :16]], axis=3)}
    wider_paths = kernel_calls.conv2d_paths(wider, "avx2")
    assert ("winograd" not in wider_paths) if rows == 2 else ("winograd tiles of 2 rows" in wider_paths)
    assert_matches(kernels, "conv2d", wider)


# (kernel h = w, stride, input channels, output channels, groups, channel shares, pixel shares, inputs >= 0):
# the direct tiles (AVX2's corrected pairs on 5 blocks; a 7x7 output), a 1x1 layer with a last
# narrow block of 16 (AVX-512), Winograd with U whole and per piece, AMX (3 blocks of 32 in 4
# shares: one empty), a grouped convolution cut inside its groups (portable), a stem, one partial
# block in two shares (the second empty on the SIMD builds).
CHANNEL_SHARE_CASES = [(3, 2, 24, 80, 1, 3, False, False), (1, 1, 64, 48, 1, 2, True, True),
                       (3, 1, 32, 64, 1, 3, True, False), (3, 1, 512, 56, 1, 2, False, False),
                       (3, 1, 16, 96, 1, 4, False, True), (3, 1, 16, 24, 4, 3, True, False),
                       (7, 2, 3, 64, 1, 2, False, False), (1, 1, 8, 13, 1, 2, False, True)]


def channel_share_case(seed):
    """A convolution computed in shares of whole channel blocks (b8_conv2d_s8_channels), as the TVM
    adapter splits layers of few pixels over threads; some also in pixel shares."""
    k, stride, cin, cout, groups, shares, pixel_shares, nonnegative = CHANNEL_SHARE_CASES[seed]
    rng = np.random.default_rng(700 + seed)
    size = 20 if k == 7 else 7 if cin >= 256 else 9
    pad = k // 2
    oh = ow = out_size(size, pad, pad, k, stride, 1)
    x = rng.integers(0 if nonnegative else -128, 128, (1, size, size, cin), dtype=np.int8)
    weight = rng.integers(-127, 128, (cout, k, k, cin // groups), dtype=np.int8)
    multiplier, shift = random_requant(rng, cout, k * k * cin // groups)
    shift = np.minimum(shift, 0)
    z_out = random_zero_point(rng, output=True)
    total = oh * ow
    return {"x": x, "weight": weight, "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32),
            "multiplier": multiplier, "shift": shift, "groups": groups, "strides": (stride, stride),
            "padding": (pad, pad), "dilation": (1, 1), "out_hw": (oh, ow),
            "pad_value": 0 if nonnegative else random_zero_point(rng), "output_zero_point": z_out,
            "act": random_act(rng, z_out), "nonnegative": nonnegative,
            "pixels": [(0, total // 3), (total // 3, total)] if pixel_shares else None, "fill": 0,
            "channel_shares": shares}


@pytest.mark.parametrize("seed", range(len(CHANNEL_SHARE_CASES)))
def test_conv2d_channel_shares(kernels, seed):
    case = channel_share_case(seed)
    paths = kernel_calls.conv2d_paths(case, kernels.variant)
    assert "channel shares" in paths
    expected = assert_matches(kernels, "conv2d", case)
    assert len(np.unique(expected)) > 3


def test_conv2d_channel_shares_reach():
    """The cases take the paths they are there for, in the builds that have them."""
    paths = {variant: [kernel_calls.conv2d_paths(channel_share_case(seed), variant)
                       for seed in range(len(CHANNEL_SHARE_CASES))]
             for variant in ("portable", "avx2", "avxvnni", "avx512vnni", "amx")}
    assert "corrected pair tile" in paths["avx2"][0]
    assert "narrow channel tile" in paths["avx512vnni"][1]
    assert "winograd" in paths["avx2"][2] and "winograd" in paths["avxvnni"][2]
    assert "filter per tile block" in paths["avx2"][3]
    assert "amx" in paths["amx"][4] and "empty channel share" in paths["amx"][4]
    assert paths["avx2"][5] == {"portable", "channel shares"}
    assert "empty channel share" in paths["avx2"][7] and "empty channel share" not in paths["portable"][7]


@pytest.mark.parametrize("seed", POINTWISE_SEEDS)
def test_conv2d_pointwise(kernels, seed):
    case = pointwise_case(seed)
    assert "pointwise" in kernel_calls.conv2d_paths(case, "avx2")
    expected = assert_matches(kernels, "conv2d", case)
    assert len(np.unique(expected)) > 3


@pytest.mark.parametrize("seed", STEM_SEEDS)
def test_conv2d_stem(kernels, seed):
    expected = assert_matches(kernels, "conv2d", stem_case(seed))
    assert len(np.unique(expected)) > 3


@pytest.mark.parametrize("seed", PER_TAP_SEEDS)
def test_conv2d_per_tap(kernels, seed):
    expected = assert_matches(kernels, "conv2d", per_tap_case(seed))
    assert len(np.unique(expected)) > 3


@pytest.mark.parametrize("bound", [64, 65])
@pytest.mark.parametrize("cout", [16, 64])
@pytest.mark.parametrize("signed", [True, False])
def test_conv2d_weight_range_edge(kernels, bound, cout, signed):
    """The AVX2 tiles' 7-bit forms are exact only while every weight lies in [-64, 64]: the
    shifted form (4 or more channel blocks, any inputs) multiplies w + 64 (up to 128) by a, the
    offset form (fewer blocks, signed inputs) a + 128 (up to 255) by w, in int16 pairs. Filters
    at that bound take them; one past it must not (pairs of 129 x -128 or 255 x 65 would
    saturate). Inputs are mostly at their ends, where the pairs are largest. (24 input channels:
    on multiples of 16 a 3x3 stride-1 layer runs by Winograd in that build.)"""
    rng = np.random.default_rng(7000 + bound + cout + 2 * signed)
    cin, kernel, n, h, w = 24, 3, 1, 6, 7
    low = -128 if signed else 0
    x = rng.integers(low, 128, (n, h, w, cin), dtype=np.int8)
    ends = rng.random(x.shape)
    x[ends < 0.35] = low
    x[(ends >= 0.35) & (ends < 0.7)] = 127
    weight = rng.integers(-bound, bound + 1, (cout, kernel, kernel, cin))
    ends = rng.random(weight.shape) < 0.5
    weight[ends] = np.where(rng.random(int(ends.sum())) < 0.5, -bound, bound)
    multiplier, shift = random_requant(rng, cout, kernel * kernel * cin)
    case = {"x": x, "weight": weight.astype(np.int8), "bias": rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32),
            "multiplier": multiplier, "shift": np.minimum(shift, 0), "groups": 1, "strides": (1, 1),
            "padding": (1, 1), "dilation": (1, 1), "out_hw": (h, w), "pad_value": low, "output_zero_point": 0,
            "act": (-128, 127), "nonnegative": not signed, "pixels": None, "fill": 0}
    seven_bit = {"shifted weights", "signed offset"} & kernel_calls.conv2d_paths(case, "avx2")
    if bound == 65:
        assert not seven_bit
    else:
        assert seven_bit == ({"shifted weights"} if cout > 48 else {"signed offset"} if signed else set())
    expected = assert_matches(kernels, "conv2d", case)
    assert len(np.unique(expected)) > 3
