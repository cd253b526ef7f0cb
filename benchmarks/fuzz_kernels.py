"""Kernel fuzzer: seeded random configurations of every kernel of runtime_c/include/byoc_int8.h,
each run on every kernel build (portable, avx2, avxvnni, avx512bw, avx512vnni, amx x the three
roundings) and compared bit for bit with the integer reference (byoc_int8.reference / qarith).

    python benchmarks/fuzz_kernels.py                      # 1000 configurations per kernel and build
    python benchmarks/fuzz_kernels.py --configs 50 --kernel conv2d --kernel add
    python benchmarks/fuzz_kernels.py --only conv2d:tflite:417   # one configuration, as a test
    python benchmarks/fuzz_kernels.py --sanitized          # against ASan + UBSan builds of the kernels

Configuration i of kernel K for rounding R is drawn by numpy's generator seeded with
(seed, crc32(K), R, i): runs are reproducible and any configuration can be drawn alone. The
configurations span shapes from 1 to large (odd sizes, channel counts around whole SIMD tiles),
every padding, stride, dilation and group count, extreme multipliers and shifts, saturating data
and zero points at both ends of int8, with symmetric (zero point 0) and asymmetric activations.
Each mismatch is printed as a ready-to-paste regression test for tests/test_kernel_fuzz.py.

--sanitized builds the kernel libraries with -fsanitize=address,undefined,float-cast-overflow
(every error fatal) in a temporary directory, computes the expected results here and replays
the calls in a child process that preloads the ASan runtime (tests/kernel_calls.py replay; TVM
cannot load under ASan, the child needs only numpy and ctypes). A sanitizer report is printed
with the configuration that caused it, as a regression test, and the rest is replayed.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import kernel_calls  # noqa: E402
from kernel_calls import MAX_PATCH, ROUNDINGS, VARIANTS  # noqa: E402

# ---- drawing values ---------------------------------------------------------------------------


def chance(rng, p: float) -> bool:
    return bool(rng.random() < p)


def extent(rng, small: int = 8, large: int = 40) -> int:
    """A spatial size: 1, small, or now and then large."""
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.92:
        return int(rng.integers(1, small + 1))
    return int(rng.integers(small + 1, large + 1))


def channels(rng) -> int:
    """A channel count: a few, or around whole SIMD tiles and half tiles (multiples of 8, 16 and
    32, +-1), or odd and larger."""
    r = rng.random()
    if r < 0.3:
        return int(rng.integers(1, 9))
    if r < 0.85:
        return max(1, int(rng.choice([8, 16, 32])) * int(rng.integers(1, 4)) + int(rng.integers(-1, 2)))
    return int(rng.integers(9, 130))


def zero_point(rng) -> int:
    """0 (symmetric activations), an end of int8, or anything in between."""
    r = rng.random()
    if r < 0.4:
        return 0
    if r < 0.6:
        return int(rng.choice([-128, 127]))
    return int(rng.integers(-128, 128))


def int8_data(rng, shape, nonnegative: bool = False) -> np.ndarray:
    """int8 activations: uniform, saturating (only the two ends), constant, small, or uniform with
    many extremes."""
    lo = 0 if nonnegative else -128
    r = rng.random()
    if r < 0.5:
        x = rng.integers(lo, 128, shape)
    elif r < 0.65:
        x = rng.choice(np.array([lo, 127]), shape)
    elif r < 0.75:
        x = np.full(shape, int(rng.integers(lo, 128)))
    elif r < 0.87:
        x = rng.integers(max(lo, -3), 4, shape)
    else:
        x = rng.integers(lo, 128, shape)
        x[rng.random(shape) < 0.3] = 127
        x[rng.random(shape) < 0.3] = lo
    return np.ascontiguousarray(x, dtype=np.int8)


def weights(rng, shape) -> np.ndarray:
    """Symmetric int8 weights in [-127, 127]: uniform, 7-bit (within [-64, 64], many at the ends,
    as the AVX2 tiles' shifted form takes them), all +-127, sparse, or small."""
    r = rng.random()
    if r < 0.4:
        w = rng.integers(-127, 128, shape)
    elif r < 0.5:
        w = np.clip(rng.integers(-80, 81, shape), -64, 64)
    elif r < 0.65:
        w = rng.choice(np.array([-127, 127]), shape)
    elif r < 0.85:
        w = rng.choice(np.array([0, 0, 0, 0, 1, -1, 127, -127]), shape)
    else:
        w = rng.integers(-3, 4, shape)
    return np.ascontiguousarray(w, dtype=np.int8)


def multipliers(rng, count: int) -> np.ndarray:
    """Q0.31 multipliers in [2^30, 2^31) with both ends, and now and then 0."""
    m = rng.integers(1 << 30, 1 << 31, count, dtype=np.int64)
    m[rng.random(count) < 0.15] = (1 << 31) - 1
    m[rng.random(count) < 0.1] = 1 << 30
    m[rng.random(count) < 0.02] = 0
    return m.astype(np.int32)


def requant(rng, count: int, terms: int, max_shift: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (multiplier, shift): shifts around the one that maps a typical accumulator of
    `terms` products to mid-int8, or anywhere in [-31, max_shift], or at the ends, or typical with
    one channel shifted left (which turns the SIMD epilogues off)."""
    typical = -round(math.log2(74.0 * 74.0 * math.sqrt(max(terms, 1)) / 64))
    r = rng.random()
    if r < 0.6:
        shift = typical + rng.integers(-3, 4, count)
    elif r < 0.75:
        shift = rng.integers(-31, max_shift + 1, count)
    elif r < 0.85:
        shift = rng.choice(np.array([-31, -30, max_shift - 1, max_shift]), count)
    else:
        shift = typical + rng.integers(-3, 4, count)
        shift[int(rng.integers(0, count))] = int(rng.integers(1, max_shift + 1)) if max_shift > 0 else 0
    return multipliers(rng, count), np.clip(shift, -31, max_shift).astype(np.int32)


def activation(rng, output_zero_point: int) -> tuple[int, int]:
    """No clamp, a relu (clamp at the output zero point), or any range lo <= hi."""
    r = rng.random()
    if r < 0.5:
        return -128, 127
    if r < 0.75:
        return output_zero_point, 127
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    return lo, hi


def biases(rng, count: int) -> np.ndarray | None:
    """None, or int32 biases of every magnitude up to +-2^30 (the quantizer's bound)."""
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.7:
        b = rng.integers(-(1 << 12), 1 << 12, count)
    elif r < 0.9:
        b = rng.integers(-(1 << 30), 1 << 30, count) >> rng.integers(0, 31, count)
    else:
        b = rng.choice(np.array([-(1 << 30), 1 << 30, 0]), count)
    return b.astype(np.int32)


def pixel_ranges(rng, total: int) -> list[tuple[int, int]] | None:
    """How a call's output pixels are split: all at once (None), in 2-4 consecutive shares
    covering them (as threads split them; the outer ends may lie beyond), in whole 8-pixel tiles
    (as the generated code splits them), or one share only (the other pixels stay unwritten)."""
    r = rng.random()
    if r < 0.4:
        return None
    if r < 0.75:
        cuts = sorted(int(c) for c in rng.integers(0, total + 1, int(rng.integers(1, 4))))
        bounds = [-int(rng.integers(0, 3))] + cuts + [total + int(rng.integers(0, 3))]
        return list(zip(bounds[:-1], bounds[1:]))
    if r < 0.85:
        share = 8 * int(rng.integers(1, 4))
        return [(b, min(b + share, total)) for b in range(0, total, share)]
    begin = int(rng.integers(0, total + 1))
    return [(begin, int(rng.integers(begin, total + 1)))]


def out_size(size: int, before: int, after: int, kernel: int, stride: int, dilation: int) -> int:
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def window(rng, size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """(padding before, output size) along one axis: padding 0, up to the window's span, or past
    it; the output as far as some padding after allows, or a few windows further (those read
    only padding)."""
    span = dilation * (kernel - 1) + 1
    r = rng.random()
    before = 0 if r < 0.4 else int(rng.integers(1, span + 1)) if r < 0.9 else int(rng.integers(span, span + 3))
    out = out_size(size, before, int(rng.integers(0, span + 1)), kernel, stride, dilation)
    if chance(rng, 0.1):
        out += int(rng.integers(1, 4))
    return before, max(out, 1)


# ---- one generator per kernel -----------------------------------------------------------------


def _conv_geometry(rng, case: dict, group_in: int, out_c: int, depthwise: bool = False) -> dict:
    """Kernel, strides, dilation, padding, input and output sizes; the work stays bounded.
    Half the depthwise configurations are MobileNet's: 3x3, stride 1 or 2, no dilation,
    inputs up to 16 wide (mostly), which gives the SIMD kernel runs of interior pixels."""
    r = rng.random()
    kh = int(rng.integers(1, 4)) if r < 0.75 else int(rng.integers(4, 8)) if r < 0.96 else int(rng.integers(17, 21))
    kw = int(rng.integers(1, 4)) if chance(rng, 0.8) else int(rng.integers(4, 8))
    mobilenet = depthwise and chance(rng, 0.5)
    sh, sw = (int(rng.choice([1, 1, 2, 3, 4])) for _ in range(2))
    dh, dw = ((1 if chance(rng, 0.65) else int(rng.integers(2, 5))) for _ in range(2))
    if mobilenet:
        kh = kw = 3
        sh = sw = int(rng.choice([1, 2]))
        dh = dw = 1
    n = 1 if chance(rng, 0.8) else int(rng.integers(2, 4))
    # At most 4M MACs, or one output pixel per image where that alone is more (a tall kernel on many
    # channels), which the draws below reach in time (a bound of 4M there looped forever).
    budget = max(4_000_000, n * out_c * kh * kw * group_in)
    while True:
        h, w = (extent(rng, 16), extent(rng, 16)) if mobilenet else (extent(rng), extent(rng))
        top, oh = window(rng, h, kh, sh, dh)
        left, ow = window(rng, w, kw, sw, dw)
        macs = n * oh * ow * out_c * kh * kw * group_in
        if macs <= budget:
            break
    return {**case, "n": n, "hw": (h, w), "kernel": (kh, kw), "strides": (sh, sw), "padding": (top, left),
            "dilation": (dh, dw), "out_hw": (oh, ow)}


def _conv_rest(rng, case: dict, in_c: int, weight: np.ndarray, out_c: int, terms: int, depthwise: bool = False) -> dict:
    n, (h, w) = case.pop("n"), case.pop("hw")
    case.pop("kernel")
    nonnegative = chance(rng, 0.4)  # as after a relu: the AVX2 tile may skip its sign handling
    multiplier, shift = requant(rng, out_c, terms)
    z_out = zero_point(rng)
    oh, ow = case["out_hw"]
    case = {**case, "x": int8_data(rng, (n, h, w, in_c), nonnegative), "weight": weight,
            "bias": biases(rng, out_c), "multiplier": multiplier, "shift": shift, "pad_value": zero_point(rng),
            "output_zero_point": z_out, "act": activation(rng, z_out), "nonnegative": nonnegative,
            "pixels": pixel_ranges(rng, n * oh * ow), "fill": int(rng.integers(-128, 128))}
    if not depthwise:  # a quarter of the calls in 2-4 shares of whole channel blocks (b8_conv2d_s8_channels)
        case["channel_shares"] = int(rng.integers(2, 5)) if chance(rng, 0.25) else None
    return case


def gen_conv2d(rng) -> dict:
    """Plain (groups 1, channel counts around whole tiles), stems (3x3 or 7x7 on 3 channels over
    rows wide enough for whole tiles of windows: patches gathered whole), pointwise (1x1, stride
    1, on a multiple of 4 channels: the input's pixels as patches, in chunks of tiles), 3x3
    stride-1 on 16-128 channels (now and then 896, the most the Winograd path takes, or 912),
    grouped,
    depthwise-shaped grouped, and now and then a patch at the longest the VNNI tile takes signed
    (2^15 bytes)."""
    r = rng.random()
    if r < 0.05:
        kernel = int(rng.choice([3, 7]))
        stride, out_c = int(rng.integers(1, 3)), channels(rng)
        h, w = int(rng.integers(kernel, 24)), int(rng.integers(16, 48))
        case = {"groups": 1, "n": 1, "hw": (h, w), "kernel": (kernel, kernel), "strides": (stride, stride),
                "padding": (kernel // 2, kernel // 2), "dilation": (1, 1),
                "out_hw": (out_size(h, kernel // 2, kernel // 2, kernel, stride, 1),
                           out_size(w, kernel // 2, kernel // 2, kernel, stride, 1))}
        weight = weights(rng, (out_c, kernel, kernel, 3))
        return _conv_rest(rng, case, 3, weight, out_c, kernel * kernel * 3)
    if r < 0.15:
        in_c, out_c = 4 * int(rng.integers(1, 17)), channels(rng)
        n, h, w = int(rng.integers(1, 4)), extent(rng, 12, 30), extent(rng, 12, 30)
        case = {"groups": 1, "n": n, "hw": (h, w), "kernel": (1, 1), "strides": (1, 1), "padding": (0, 0),
                "dilation": (1, 1), "out_hw": (h, w)}
        return _conv_rest(rng, case, in_c, weights(rng, (out_c, 1, 1, in_c)), out_c, in_c)
    if 0.6 <= r < 0.65:  # 3x3 stride 1 on a multiple of 16 channels (the Winograd path)
        in_c = 16 * int(rng.integers(1, 9)) if chance(rng, 0.95) else int(rng.choice([896, 912]))
        out_c = channels(rng) if in_c <= 128 else int(rng.integers(1, 33))  # a pixel's MACs stay in bounds
        n = 1 if chance(rng, 0.7) else int(rng.integers(2, 4))
        while True:
            h, w = extent(rng, 20), extent(rng, 20)
            (top, oh), (left, ow) = window(rng, h, 3, 1, 1), window(rng, w, 3, 1, 1)
            if n * oh * ow * out_c * 9 * in_c <= 4_000_000:
                break
        case = {"groups": 1, "n": n, "hw": (h, w), "kernel": (3, 3), "strides": (1, 1), "padding": (top, left),
                "dilation": (1, 1), "out_hw": (oh, ow)}
        return _conv_rest(rng, case, in_c, weights(rng, (out_c, 3, 3, in_c)), out_c, 9 * in_c)
    if r < 0.6:
        groups, group_in, group_out = 1, channels(rng), channels(rng)
    elif r < 0.8:
        groups, group_in, group_out = int(rng.integers(2, 9)), int(rng.integers(1, 17)), int(rng.integers(1, 17))
    elif r < 0.98:
        groups, group_in, group_out = channels(rng), 1, int(rng.integers(1, 3))
    else:  # the longest patch: 2^15 bytes, or just under
        groups, group_out = 1, int(rng.integers(1, 40))
        kernel = int(rng.choice([1, 2, 4]))
        group_in = MAX_PATCH // (kernel * kernel) - int(rng.choice([0, 1, 3]))
        case = {"groups": 1, "n": 1, "hw": (kernel + int(rng.integers(0, 3)), kernel + int(rng.integers(0, 3))),
                "kernel": (kernel, kernel), "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
        case["out_hw"] = (case["hw"][0] - kernel + 1, case["hw"][1] - kernel + 1)
        weight = weights(rng, (group_out, kernel, kernel, group_in))
        return _conv_rest(rng, case, group_in, weight, group_out, kernel * kernel * group_in)
    out_c = groups * group_out
    case = _conv_geometry(rng, {"groups": groups}, group_in, out_c)
    kh, kw = case["kernel"]
    while kh * kw * group_in > MAX_PATCH:
        group_in = max(1, group_in // 2)
    weight = weights(rng, (out_c, kh, kw, group_in))
    return _conv_rest(rng, case, groups * group_in, weight, out_c, kh * kw * group_in)


def gen_depthwise_conv2d(rng) -> dict:
    """Channel counts around whole SIMD depthwise blocks (multiples of 8 and 16, +-1, as
    `channels` draws them) or any, or one in five 33-200 (the AVX-512 VNNI wide blocks of 64
    channels); channel multiplier 1 (the SIMD path) or 2-4 (portable); kernels up to 20 rows (more
    than 64 taps run portable)."""
    in_c = channels(rng) if chance(rng, 0.8) else int(rng.integers(33, 201))
    out_c = in_c * (1 if chance(rng, 0.6) else int(rng.integers(2, 5)))
    case = _conv_geometry(rng, {}, 1, out_c, depthwise=True)
    kh, kw = case["kernel"]
    return _conv_rest(rng, case, in_c, weights(rng, (1, kh, kw, out_c)), out_c, kh * kw, depthwise=True)


def _pool_geometry(rng, max_kernel: int = 4, dilated: bool = True) -> dict:
    kh, kw = (int(rng.integers(1, max_kernel + 1)) if chance(rng, 0.9) else int(rng.integers(5, 9)) for _ in range(2))
    sh, sw = (int(rng.integers(1, 4)) for _ in range(2))
    dh, dw = ((1 if not dilated or chance(rng, 0.6) else int(rng.integers(2, 5))) for _ in range(2))
    return {"kernel": (kh, kw), "strides": (sh, sw), "dilation": (dh, dw)}


def gen_max_pool2d(rng) -> dict:
    """Any window, dilated too; padding up to and past the window's span, and outputs whose last
    windows lie entirely in the padding (those give -128)."""
    case = _pool_geometry(rng)
    (kh, kw), (sh, sw), (dh, dw) = case["kernel"], case["strides"], case["dilation"]
    n, h, w, c = (1 if chance(rng, 0.8) else int(rng.integers(2, 4))), extent(rng, 12), extent(rng, 12), channels(rng)
    top, oh = window(rng, h, kh, sh, dh)
    left, ow = window(rng, w, kw, sw, dw)
    return {**case, "padding": (top, left), "out_hw": (oh, ow), "x": int8_data(rng, (n, h, w, c)),
            "pixels": pixel_ranges(rng, n * oh * ow), "fill": int(rng.integers(-128, 128))}


def gen_avg_pool2d(rng) -> dict:
    """PyTorch's average pooling: padding up to half the window, floor or ceil mode (the last
    window starting inside the input or its left padding), with and without counting padding."""
    case = _pool_geometry(rng, dilated=False)
    (kh, kw), (sh, sw) = case["kernel"], case["strides"]
    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    n, c = (1 if chance(rng, 0.8) else 2), channels(rng)
    h, w = max(kh - 2 * ph, extent(rng, 12)), max(kw - 2 * pw, extent(rng, 12))
    ceil_mode = chance(rng, 0.5)

    def size(x, k, s, p):
        span = x + 2 * p - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        return out - 1 if ceil_mode and (out - 1) * s >= x + p else out

    return {**case, "padding": (ph, pw), "out_hw": (size(h, kh, sh, ph), size(w, kw, sw, pw)),
            "count_include_pad": chance(rng, 0.5), "pad_value": zero_point(rng), "x": int8_data(rng, (n, h, w, c))}


def gen_global_avg_pool(rng) -> dict:
    from byoc_int8 import qarith

    n, h, w, c = (1 if chance(rng, 0.8) else 2), extent(rng, 10, 48), extent(rng, 10, 48), channels(rng)
    if chance(rng, 0.5):  # as the quantizer builds it (TFLite's MEAN)
        fp = qarith.mean_multiplier(float(np.exp(rng.uniform(-3, 3))), float(np.exp(rng.uniform(-3, 3))), h * w)
        multiplier, shift = fp.multiplier, fp.shift
    else:
        m, s = requant(rng, 1, h * w)
        multiplier, shift = int(m[0]), int(s[0])
    return {"x": int8_data(rng, (n, h, w, c)), "multiplier": multiplier, "shift": shift,
            "input_zero_point": zero_point(rng), "output_zero_point": zero_point(rng)}


def elementwise_size(rng) -> int:
    """0 to a few, around the loops of 8, 16, 32 and 64 values (k * 8 +- 1), up to a few hundred, or large."""
    r = rng.random()
    if r < 0.1:
        return int(rng.integers(0, 4))
    if r < 0.5:
        return max(0, 8 * int(rng.integers(1, 9)) + int(rng.integers(-1, 2)))
    if r < 0.9:
        return int(rng.integers(1, 300))
    return int(rng.integers(300, 5000))


def gen_add(rng) -> dict:
    """TFLite's rescaling from random scales, or raw parameters at the edges of the kernel's
    contract (left shift <= 22, input factors below 1: shifts <= 0); the output factor anything."""
    from byoc_int8 import qarith

    size = elementwise_size(rng)
    if chance(rng, 0.6):
        r = qarith.add_rescale(*(float(s) for s in np.exp(rng.uniform(-10, 3, 3))))
        left_shift = r.left_shift
        fixed = [(f.multiplier, f.shift) for f in (r.input1, r.input2, r.output)]
    else:
        left_shift = int(rng.integers(0, 23))
        m, s = requant(rng, 2, 1, max_shift=0)
        mo, so = requant(rng, 1, 1 << (2 * left_shift))
        fixed = [(int(m[0]), int(s[0])), (int(m[1]), int(s[1])), (int(mo[0]), int(so[0]))]
    z_out = zero_point(rng)
    return {"a": int8_data(rng, size), "b": int8_data(rng, size), "left_shift": left_shift, "input1": fixed[0],
            "input2": fixed[1], "output": fixed[2], "act": activation(rng, z_out),
            "zero_points": (zero_point(rng), zero_point(rng), z_out)}


def gen_mul(rng) -> dict:
    from byoc_int8 import qarith

    batches = int(rng.integers(0, 4)) if chance(rng, 0.1) else int(rng.integers(1, 3))
    pixels, c = extent(rng, 30, 200) - int(chance(rng, 0.05)), channels(rng)
    broadcast = chance(rng, 0.5)
    if chance(rng, 0.5):
        fp = qarith.quantize_multiplier(float(np.prod(np.exp(rng.uniform(-5, 1, 2))) / np.exp(rng.uniform(-5, 1))))
        multiplier, shift = fp.multiplier, fp.shift
    else:
        m, s = requant(rng, 1, 1)
        multiplier, shift = int(m[0]), int(s[0])
    z_out = zero_point(rng)
    return {"x1": int8_data(rng, (batches, pixels, c)), "x2": int8_data(rng, (batches, c) if broadcast else (batches, pixels, c)),
            "broadcast": broadcast, "multiplier": multiplier, "shift": shift,
            "zero_points": (zero_point(rng), zero_point(rng), z_out), "act": activation(rng, z_out)}


def _dense_shape(rng) -> tuple[int, int, int]:
    batches = int(rng.integers(1, 5)) if chance(rng, 0.95) else 0
    r = rng.random()
    if r < 0.5:
        depth = int(rng.integers(1, 300))
    elif r < 0.93:
        depth = max(1, int(rng.choice([16, 32, 64])) * int(rng.integers(1, 9)) + int(rng.integers(-1, 2)))
    else:
        depth = int(rng.integers(1000, MAX_PATCH + 1))
    units = channels(rng) if chance(rng, 0.9) else int(rng.integers(130, 300))
    if depth > 4096:
        units = min(units, 16)
    return batches, depth, units


def gen_dense(rng) -> dict:
    batches, depth, units = _dense_shape(rng)
    multiplier, shift = requant(rng, units, depth)
    z_out = zero_point(rng)
    return {"x": int8_data(rng, (batches, depth)), "weight": weights(rng, (units, depth)), "bias": biases(rng, units),
            "multiplier": multiplier, "shift": shift, "output_zero_point": z_out, "act": activation(rng, z_out)}


def double_reals(rng, count: int) -> np.ndarray:
    """Positive doubles with all 53 bits in use: typical factors, tiny ones (the product rounds to
    0) and large ones (it saturates), up to 2^20."""
    reals = np.exp(rng.uniform(np.log(1e-9), np.log(4.0), count))
    reals[rng.random(count) < 0.05] = np.exp(rng.uniform(np.log(1e-300), np.log(1e-12)))
    reals[rng.random(count) < 0.05] = np.exp(rng.uniform(np.log(4.0), np.log(2.0**20)))
    return reals


def _double_parts(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from byoc_int8 import qarith

    parts = [qarith.double_parts(float(r)) for r in reals]
    return np.array([m for m, _ in parts], np.int64), np.array([e for _, e in parts], np.int32)


def gen_dense_double(rng) -> dict:
    batches, depth, units = _dense_shape(rng)
    typical = 64.0 / (74.0 * 74.0 * math.sqrt(depth))  # maps a typical accumulator to mid-int8
    reals = typical * np.exp(rng.uniform(-2, 2, units)) if chance(rng, 0.7) else double_reals(rng, units)
    mantissa, exponent = _double_parts(reals)
    z_out = zero_point(rng)
    return {"x": int8_data(rng, (batches, depth)), "weight": weights(rng, (units, depth)), "bias": biases(rng, units),
            "mantissa": mantissa, "exponent": exponent, "output_zero_point": z_out, "act": activation(rng, z_out)}


def accumulators(rng, count: int) -> np.ndarray:
    """int32 accumulators: the limits, 0 and +-1, uniform, and every magnitude."""
    acc = rng.integers(-(1 << 31), 1 << 31, count) >> rng.integers(0, 32, count)
    ends = rng.random(count) < 0.1
    acc[ends] = rng.choice(np.array([-(1 << 31), (1 << 31) - 1, 0, 1, -1]), int(ends.sum()))
    return acc.astype(np.int32)


def gen_requantize(rng) -> dict:
    """b8_requantize on its own: every multiplier and shift, and accumulators on and next to the
    ties of each (odd multiples of 2^(-shift) for the multiplier 2^30)."""
    units = int(rng.integers(1, 200))
    multiplier, shift = multipliers(rng, units), rng.integers(-31, 31, units).astype(np.int32)
    acc = accumulators(rng, units)
    ties = rng.random(units) < 0.3
    multiplier[ties] = 1 << 30
    shift[ties] = rng.integers(-20, 1, int(ties.sum()))
    odd = 2 * rng.integers(-500, 500, int(ties.sum())) + 1  # |odd| << 20 stays below 2^30
    acc[ties] = (odd << -shift[ties].astype(np.int64)) + rng.integers(-1, 2, int(ties.sum()))
    z_out = zero_point(rng)
    return {"acc": acc, "multiplier": multiplier, "shift": shift, "output_zero_point": z_out,
            "act": activation(rng, z_out)}


def gen_requantize_double(rng) -> dict:
    """b8_requantize_f64 on its own, with products built to sit on and next to the ties."""
    units = int(rng.integers(1, 200))
    acc = accumulators(rng, units)
    reals = double_reals(rng, units)
    ties = rng.random(units) < 0.4
    k = rng.integers(-100, 100, int(ties.sum()))
    a = rng.integers(1, 1 << 12, int(ties.sum())) * rng.choice([-1, 1], int(ties.sum()))
    acc[ties] = a
    real = np.abs((2 * k + 1) / (2.0 * a))
    nudge = rng.integers(-1, 2, int(ties.sum()))
    reals[ties] = np.where(nudge < 0, np.nextafter(real, 0), np.where(nudge > 0, np.nextafter(real, 1), real))
    mantissa, exponent = _double_parts(reals)
    z_out = zero_point(rng)
    return {"acc": acc, "mantissa": mantissa, "exponent": exponent, "output_zero_point": z_out,
            "act": activation(rng, z_out)}


def gen_clip(rng) -> dict:
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    return {"x": int8_data(rng, elementwise_size(rng)), "act": (lo, hi) if chance(rng, 0.8) else (lo, lo)}


def gen_lut(rng) -> dict:
    return {"x": int8_data(rng, elementwise_size(rng)), "table": rng.integers(-128, 128, 256, dtype=np.int8)}


def gen_pair_lut(rng) -> dict:
    """Any table (its 3 padding bytes too: the SIMD gathers read them and must drop them)."""
    size = elementwise_size(rng)
    return {"a": int8_data(rng, size), "b": int8_data(rng, size),
            "table": rng.integers(-128, 128, 65536 + 3, dtype=np.int8)}


def gen_concat(rng) -> dict:
    count = int(rng.integers(1, 7))
    outer = int(rng.integers(1, 9)) if chance(rng, 0.95) else 0
    inners = [int(rng.integers(1, 40)) if chance(rng, 0.9) else 0 for _ in range(count)]
    multiplier, shift = requant(rng, count, 1)
    same = rng.random(count) < 0.3  # the identity factor: inputs at the output's scale
    multiplier[same], shift[same] = 1 << 30, 1
    zero_points, output_zero_point = np.array([zero_point(rng) for _ in range(count)], np.int32), zero_point(rng)
    if chance(rng, 0.3):  # every input at the output's scale and zero point: copies, the usual concat
        multiplier[:], shift[:], zero_points[:] = 1 << 30, 1, output_zero_point
    return {"inputs": [int8_data(rng, (outer, k)) for k in inners], "outer": outer, "multiplier": multiplier,
            "shift": shift, "zero_points": zero_points, "output_zero_point": output_zero_point}


def _shape(rng, rank: int, high: int, limit: int = 6000, zero: float = 0.03) -> tuple[int, ...]:
    while True:
        shape = tuple(0 if chance(rng, zero) else int(rng.integers(1, high + 1)) for _ in range(rank))
        if math.prod(shape) <= limit:
            return shape


def gen_transpose(rng) -> dict:
    rank = int(rng.integers(1, 7))
    shape = _shape(rng, rank, 6)
    return {"x": int8_data(rng, shape), "perm": [int(a) for a in rng.permutation(rank)]}


def gen_slice(rng) -> dict:
    rank = int(rng.integers(1, 7))
    shape = _shape(rng, rank, 7, zero=0.0)
    begin = [int(rng.integers(0, d)) for d in shape]
    stride = [int(rng.integers(1, 4)) if chance(rng, 0.9) else int(rng.integers(4, 9)) for _ in shape]
    out_shape = [int(rng.integers(0, len(range(b, d, s)) + 1)) if chance(rng, 0.3) else len(range(b, d, s))
                 for b, d, s in zip(begin, shape, stride)]
    return {"x": int8_data(rng, shape), "begin": begin, "stride": stride, "out_shape": out_shape}


def gen_pad(rng) -> dict:
    rank = int(rng.integers(1, 7))
    shape = _shape(rng, rank, 5, limit=2000)
    pads = [(int(rng.integers(0, 4)), int(rng.integers(0, 4))) if chance(rng, 0.7) else (0, 0) for _ in shape]
    return {"x": int8_data(rng, shape), "pads": pads, "value": int(rng.integers(-128, 128))}


def _image_shape(rng) -> tuple[int, int, int, int]:
    """An NCHW shape; RGB images (3 channels) a third of the time, in rows of up to 70 pixels,
    which the SIMD builds convert 16 pixels at a time."""
    n = 1 if chance(rng, 0.8) else 2
    if chance(rng, 0.33):
        return n, 3, extent(rng), int(rng.integers(1, 71))
    return n, channels(rng), extent(rng), extent(rng)


def _boundary_shape(rng) -> tuple[bool, tuple[int, ...]]:
    if chance(rng, 0.5):
        return True, _image_shape(rng)
    return False, (elementwise_size(rng),)


def _quantize_case(rng, nchw: bool, shape: tuple[int, ...]) -> dict:
    """Float32 inputs at every scale: ties of the rounding, their neighbours, values far beyond
    the int8 range, zeros of both signs, subnormals; now and then a NaN or an infinity (refused)."""
    scale = np.float32(2.0 ** rng.uniform(-30, 10))
    size = math.prod(shape)
    x = (rng.standard_normal(size) * 64 * scale).astype(np.float32)
    ties = (rng.integers(-300, 300, size) / 2 * scale).astype(np.float32)
    pick = rng.random(size)
    x = np.where(pick < 0.4, ties, x)
    towards = np.where(rng.random(size) < 0.5, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
    x = np.where((pick >= 0.4) & (pick < 0.5), np.nextafter(ties, towards), x)
    extremes = np.array([0.0, -0.0, 1e-45, -1e-45, 1e38, -1e38, 3.4028235e38], np.float32)
    x = np.where(pick > 0.97, rng.choice(extremes, size), x).astype(np.float32)
    if size and chance(rng, 0.05):
        x[int(rng.integers(0, size))] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32))
    if chance(rng, 0.03):  # refused: not positive, not finite, or 1 / scale overflows
        scale = rng.choice(np.array([0.0, -1.0, np.inf, np.nan, 1e-45, 2.0**-130, 2.0**-127], np.float32))
    return {"x": x.reshape(shape), "nchw": nchw, "scale": float(scale), "zero_point": zero_point(rng)}


def gen_quantize(rng) -> dict:
    return _quantize_case(rng, *_boundary_shape(rng))


def gen_quantize_rows(rng) -> dict:
    """b8_quantize_f32_rows: an NCHW input in two ranges of image rows split anywhere, as two
    threads convert it."""
    shape = _image_shape(rng)
    case = _quantize_case(rng, True, shape)
    rows = shape[0] * shape[2]
    split = int(rng.integers(0, rows + 1))
    return {**case, "rows": [(0, split), (split, rows)]}


def gen_dequantize(rng) -> dict:
    nchw, shape = _boundary_shape(rng)
    if nchw:
        shape = (shape[0], shape[2], shape[3], shape[1])  # stored NHWC
    return {"x": int8_data(rng, shape), "nchw": nchw, "scale": float(np.float32(2.0 ** rng.uniform(-30, 10))),
            "zero_point": zero_point(rng)}


GENERATORS = {name: globals()[f"gen_{name}"] for name in kernel_calls.CALLS}


def draw(kernel: str, rounding: str, index: int, seed: int = 0) -> dict:
    """Configuration `index` of `kernel` for `rounding` (independent of every other)."""
    rng = np.random.default_rng([seed, zlib.crc32(kernel.encode()), ROUNDINGS.index(rounding), index])
    return GENERATORS[kernel](rng)


# ---- running ----------------------------------------------------------------------------------


def regression_test(kernel: str, rounding: str, index: int, seed: int, build: str, problem: str, case: dict) -> str:
    """A failing configuration as a test for tests/test_kernel_fuzz.py (runs on every build)."""
    body = kernel_calls.case_source(case).replace("\n", "\n    ")
    return (f"def test_fuzz_{kernel}_{rounding.replace('-', '_')}_{seed}_{index}(kernels):\n"
            f'    """benchmarks/fuzz_kernels.py --seed {seed} --only {kernel}:{rounding}:{index}: on {build},\n'
            f'    {problem}."""\n'
            f"    case = {body}\n"
            f'    assert_kernel_matches(kernels, "{kernel}", case)\n')


def runnable_builds(build_dir: Path, variants=VARIANTS, load: bool = True) -> tuple[dict, list[str]]:
    """{rounding: [library]} for the builds this CPU runs, and a note for each it cannot. With
    load=False the libraries are only named (path, variant, rounding): sanitized ones must not be
    loaded into this process."""
    from types import SimpleNamespace

    from byoc_int8.codegen.emit_c import SIMD_FLAGS, cpu_flags

    libs, notes = {r: [] for r in ROUNDINGS}, []
    for variant in variants:
        missing = SIMD_FLAGS[variant] - cpu_flags()
        if missing:
            notes.append(f"{variant}: not run, this CPU lacks {', '.join(sorted(missing))}")
            continue
        for rounding in ROUNDINGS:
            path = kernel_calls.library_path(build_dir, variant, rounding)
            lib = SimpleNamespace(path=str(path), variant=variant, rounding=rounding)
            libs[rounding].append(kernel_calls.load(path, variant, rounding) if load else lib)
    return libs, notes


# The kernels whose code paths the fuzzer counts (kernel_calls reads them off as the C chooses them).
PATHS = {"conv2d": kernel_calls.conv2d_paths, "depthwise_conv2d": kernel_calls.depthwise_paths}


def fuzz(kernel: str, libs: dict, configs: int, seed: int = 0, out=sys.stdout, paths: Counter | None = None) -> dict:
    """`configs` configurations of a kernel per rounding, each on every library of that rounding;
    returns the counts and prints each mismatch as a regression test."""
    runs, failures = Counter(), []
    for rounding, builds in libs.items():
        for index in range(configs):
            case = draw(kernel, rounding, index, seed)
            want = kernel_calls.expected(kernel, case, rounding)
            for lib in builds:
                problem = kernel_calls.compare(kernel_calls.run(lib, kernel, case), want)
                runs[f"{lib.variant}-{rounding}"] += 1
                if paths is not None and kernel in PATHS:
                    paths.update(f"{kernel} {lib.variant}: {p}" for p in PATHS[kernel](case, lib.variant))
                if problem:
                    build = f"{lib.variant}-{rounding}"
                    failures.append((build, index, problem))
                    print(f"\nMISMATCH {kernel} {build} #{index}: {problem}\n", file=out)
                    print(regression_test(kernel, rounding, index, seed, build, problem, case), file=out)
    return {"runs": runs, "failures": failures}


def build_sanitized(directory: Path) -> None:
    flags = "-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(directory), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCMAKE_C_FLAGS={flags}", "-DBYOC_INT8_SANITIZERS=OFF"], check=True, capture_output=True)
    targets = [f"byoc_int8_kernels_{v}_{r.replace('-', '_')}" for v in VARIANTS for r in ROUNDINGS]
    subprocess.run(["cmake", "--build", str(directory), "-j", "2", "--target", *targets], check=True, capture_output=True)


def fuzz_sanitized(kernel: str, libs: dict, configs: int, seed: int, scratch: Path, out=sys.stdout) -> dict:
    """As `fuzz`, with the C calls replayed in a child process under ASan + UBSan: a sanitizer
    report ends the child; it is printed with the configuration, and the rest replayed."""
    runs, failures = Counter(), []
    env = {**os.environ, "LD_PRELOAD": subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                                       text=True, check=True).stdout.strip(),
           "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    for rounding, builds in libs.items():
        specs = [f"{lib.path}:{lib.variant}:{rounding}" for lib in builds]
        pending = list(range(configs))
        cases = {i: draw(kernel, rounding, i, seed) for i in pending}
        while pending:
            with open(scratch / "cases.pkl", "wb") as f:
                pickle.dump({rounding: [(kernel, cases[i], kernel_calls.expected(kernel, cases[i], rounding))
                                        for i in pending]}, f)
            with open(scratch / "stderr.txt", "w") as err:
                child = subprocess.run([sys.executable, str(ROOT / "tests" / "kernel_calls.py"), "replay",
                                        str(scratch / "cases.pkl"), str(scratch / "results.pkl"), *specs],
                                       env=env, stderr=err)
            if child.returncode == 0:
                with open(scratch / "results.pkl", "rb") as f:
                    result = pickle.load(f)
                for kernel_name, position, build, problem in result["failures"]:
                    failures.append((build, pending[position], problem))
                    print(f"\nMISMATCH {kernel} {build} #{pending[position]} (sanitized): {problem}", file=out)
                for lib in builds:
                    runs[f"{lib.variant}-{rounding}"] += len(pending)
                break
            lines = (scratch / "stderr.txt").read_text(errors="replace").splitlines()
            announced = [line for line in lines if line.startswith("replay: ")]
            if not announced:  # the child failed before its first call
                raise RuntimeError("the sanitized replay failed to start:\n" + "\n".join(lines[-20:]))
            last = announced[-1].split()
            position, build = int(last[2][1:]), last[4]
            index = pending[position]
            report = [line for line in lines if not line.startswith("replay: ")]
            first = next((i for i, line in enumerate(report) if "ERROR" in line or "runtime error" in line), 0)
            problem = report[first] if report else f"exit {child.returncode}"
            failures.append((build, index, problem))
            print(f"\nSANITIZER {kernel} {build} #{index}:\n" + "\n".join(report[first : first + 12]), file=out)
            print(regression_test(kernel, rounding, index, seed, build, problem, cases[index]), file=out)
            for lib in builds:
                runs[f"{lib.variant}-{rounding}"] += position + (lib.variant == build.split("-")[0])
            pending = pending[position + 1 :]
    return {"runs": runs, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=1000, help="configurations per kernel and build (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernel", action="append", choices=sorted(GENERATORS), help="only these kernels (repeatable)")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="only these implementations")
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--only", metavar="KERNEL:ROUNDING:INDEX", help="print one configuration as a test, and check it")
    parser.add_argument("--sanitized", action="store_true", help="run against ASan + UBSan builds of the kernels")
    args = parser.parse_args(argv)
    if args.only:
        kernel, rounding, index = args.only.split(":")
        case = draw(kernel, rounding, int(index), args.seed)
        libs, _ = runnable_builds(args.build_dir, args.variant or VARIANTS)
        problems = {f"{lib.variant}-{rounding}": kernel_calls.check(lib, kernel, case) for lib in libs[rounding]}
        found = "; ".join(f"{build}: {problem or 'equal to the reference'}" for build, problem in problems.items())
        print(regression_test(kernel, rounding, int(index), args.seed, "every build", found, case))
        return int(any(problems.values()))

    kernels = args.kernel or list(GENERATORS)
    with tempfile.TemporaryDirectory(prefix="byoc_int8_fuzz_") as scratch:
        build_dir = args.build_dir
        if args.sanitized:
            build_dir = Path(scratch) / "build"
            build_sanitized(build_dir)
        else:
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir)], check=True, capture_output=True)
            subprocess.run(["cmake", "--build", str(build_dir), "-j", "2"], check=True, capture_output=True)
        libs, notes = runnable_builds(build_dir, args.variant or VARIANTS, load=not args.sanitized)
        for note in notes:
            print(note)
        print(f"{args.configs} configurations per kernel and build, seed {args.seed}"
              f"{', sanitized (ASan + UBSan)' if args.sanitized else ''}")
        print(f"{'kernel':<20}{'builds':>7}{'configs/build':>15}{'runs':>9}{'failures':>10}{'seconds':>9}")
        total_runs, total_failures, paths = 0, 0, Counter()
        for kernel in kernels:
            start = time.perf_counter()
            if args.sanitized:
                result = fuzz_sanitized(kernel, libs, args.configs, args.seed, Path(scratch))
            else:
                result = fuzz(kernel, libs, args.configs, args.seed, paths=paths)
            runs = result["runs"]
            per_build = min(runs.values()) if runs else 0
            print(f"{kernel:<20}{len(runs):>7}{per_build:>15}{sum(runs.values()):>9}{len(result['failures']):>10}"
                  f"{time.perf_counter() - start:>9.1f}", flush=True)
            total_runs += sum(runs.values())
            total_failures += len(result["failures"])
        if paths:
            print("paths reached (runs):")
            for path, count in sorted(paths.items()):
                print(f"  {path:<56}{count:>8}")
        print(f"total: {total_runs} kernel runs, {total_failures} mismatches")
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
