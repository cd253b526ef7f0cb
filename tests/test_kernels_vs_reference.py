"""Every C kernel against the integer reference, bit for bit, over randomized cases."""

import ctypes

import numpy as np
import pytest

from byoc_int8 import layout, qarith, reference
from byoc_int8.graph import Node
from byoc_int8.quantize import QNode
from conftest import AddParams, ConvParams, Dims, PoolParams, RequantParams, Pixels, ptr

i8, i32 = ctypes.c_int8, ctypes.c_int32
SEEDS = range(40)


def random_requant(rng, channels, terms=1):
    """Multipliers across [2^30, 2^31) including the top end; shifts scattered around the one
    that maps a typical accumulator of `terms` int8 products to about 64, so that outputs cover
    the int8 range and saturate at both ends."""
    multiplier = rng.integers(1 << 30, 1 << 31, channels, dtype=np.int64)
    multiplier[rng.random(channels) < 0.2] = (1 << 31) - 1
    typical = 74.0 * 74.0 * np.sqrt(terms)
    shift = -np.round(np.log2(typical / 64)) + rng.integers(-2, 3, channels)
    return multiplier.astype(np.int32), np.clip(shift, -31, 30).astype(np.int32)


def random_act(rng):
    return (0, 127) if rng.random() < 0.5 else (-128, 127)


def requant_params(multiplier, shift, act):
    return RequantParams(ptr(multiplier, i32), ptr(shift, i32), *act)


def out_size(size, pad_before, pad_after, kernel, stride, dilation):
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def random_conv_geometry(rng):
    n, h, w = rng.integers(1, 3), rng.integers(1, 10), rng.integers(1, 10)
    kh, kw = rng.integers(1, 4), rng.integers(1, 4)
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
    return n, h, w, kh, kw, sh, sw, dh, dw, pad, oh, ow


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["dense", "grouped", "depthwise"])
def test_conv2d(kernels, seed, kind):
    """Plain, grouped and depthwise (with channel multiplier) convolutions."""
    rng = np.random.default_rng(seed)
    n, h, w, kh, kw, sh, sw, dh, dw, pad, oh, ow = random_conv_geometry(rng)
    groups = 1 if kind == "dense" else int(rng.integers(2, 5))
    group_in = 1 if kind == "depthwise" else int(rng.integers(1, 5))
    group_out = int(rng.integers(1, 4))
    cin, cout = groups * group_in, groups * group_out
    nonnegative = bool(rng.integers(0, 2))  # as after a relu: the AVX2 path skips its sign trick
    x = rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8)
    weight = rng.integers(-127, 128, (cout, kh, kw, group_in), dtype=np.int8)  # OHWI
    if kind == "depthwise":
        weight = np.ascontiguousarray(weight.transpose(3, 1, 2, 0))  # (1, KH, KW, O)
    bias = rng.integers(-(1 << 12), 1 << 12, cout).astype(np.int32)
    multiplier, shift = random_requant(rng, cout, kh * kw * group_in)
    act = random_act(rng)

    attrs = {"strides": [sh, sw], "padding": pad, "dilation": [dh, dw], "groups": groups}
    params = {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift,
              "act_min": act[0], "act_max": act[1], "depthwise": kind == "depthwise"}
    expected = reference.conv2d(x, QNode(Node("conv2d", [0], 1, attrs), params), (n, cout, oh, ow))

    out = np.zeros((n, oh, ow, cout), np.int8)
    conv = ConvParams(sh, sw, pad[0], pad[1], dh, dw, groups)
    head = (ctypes.byref(conv), ctypes.byref(requant_params(multiplier, shift, act)), ctypes.byref(Dims(n, h, w, cin)),
            ptr(x, i8))
    filter_dims = ctypes.byref(Dims(*weight.shape))
    tail = (ptr(bias, i32), ctypes.byref(Dims(n, oh, ow, cout)), ptr(out, i8))
    # Work split in two pixel ranges, as two threads would run it.
    split = int(rng.integers(0, n * oh * ow + 1))
    for rows in (Pixels(0, split), Pixels(split, n * oh * ow)):
        if kind == "depthwise":
            status = kernels.b8_depthwise_conv2d_s8(*head, filter_dims, ptr(weight, i8), *tail, ctypes.byref(rows))
        else:
            packed = np.zeros(kernels.b8_conv2d_s8_packed_size(filter_dims, groups), np.int8)
            kernels.b8_conv2d_s8_pack_filter(filter_dims, groups, ptr(weight, i8), ptr(packed, i8))
            scratch = np.zeros(kernels.b8_conv2d_s8_scratch_size(filter_dims), np.int8)
            status = kernels.b8_conv2d_s8(*head, int(nonnegative), filter_dims, ptr(packed, i8), *tail,
                                          ctypes.byref(rows), ptr(scratch, i8))
        assert status == 0
    np.testing.assert_array_equal(out, expected)
    # Outputs must not be all saturated: the case has to exercise the arithmetic.
    assert expected.size < 64 or len(np.unique(expected)) > 3


def test_conv2d_cases_reach_the_int8_limits():
    """Across the seeds above, outputs hit both clamps (checked once, on the reference)."""
    hits = set()
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        multiplier, shift = random_requant(rng, 64, 27)
        acc = rng.integers(-128, 128, (64, 27)) @ rng.integers(-127, 128, 27)
        y = qarith.clamp_s8(qarith.requantize(acc, multiplier, shift))
        hits |= {int(y.min()), int(y.max())}
    assert {-128, 127} <= hits


@pytest.mark.parametrize("seed", SEEDS)
def test_max_pool2d(kernels, seed):
    rng = np.random.default_rng(seed)
    kh, kw = rng.integers(1, 4), rng.integers(1, 4)
    n, h, w, c = rng.integers(1, 3), rng.integers(kh, 12), rng.integers(kw, 12), rng.integers(1, 9)
    sh, sw = rng.integers(1, 4), rng.integers(1, 4)
    pad = [int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))]
    pad += pad
    oh, ow = out_size(h, pad[0], pad[2], kh, sh, 1), out_size(w, pad[1], pad[3], kw, sw, 1)
    x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    node = Node("max_pool2d", [0], 1, {"pool_size": [kh, kw], "strides": [sh, sw], "padding": pad, "dilation": [1, 1]})
    expected = reference.max_pool2d(x, QNode(node), (n, c, oh, ow))
    out = np.zeros((n, oh, ow, c), np.int8)
    split = int(rng.integers(0, n * oh * ow + 1))  # two threads' shares
    for share in (Pixels(0, split), Pixels(split, n * oh * ow)):
        status = kernels.b8_max_pool2d_s8(
            ctypes.byref(PoolParams(kh, kw, sh, sw, pad[0], pad[1], 1, 1)),
            ctypes.byref(Dims(n, h, w, c)), ptr(x, i8), ctypes.byref(Dims(n, oh, ow, c)), ptr(out, i8),
            ctypes.byref(share),
        )
        assert status == 0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_add(kernels, seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    s1, s2, s_out = np.exp(rng.uniform(-4, 1, 3))
    rescale = qarith.add_rescale(s1, s2, s_out)
    act = random_act(rng)
    a = rng.integers(-128, 128, size, dtype=np.int8)
    b = rng.integers(-128, 128, size, dtype=np.int8)
    q = QNode(Node("add", [0, 1], 2), {"rescale": rescale, "act_min": act[0], "act_max": act[1]})
    expected = reference.add(a, b, q)
    params = AddParams(
        rescale.left_shift,
        rescale.input1.multiplier, rescale.input1.shift,
        rescale.input2.multiplier, rescale.input2.shift,
        rescale.output.multiplier, rescale.output.shift,
        *act,
    )
    out = np.zeros(size, np.int8)
    assert kernels.b8_add_s8(ctypes.byref(params), size, ptr(a, i8), ptr(b, i8), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)
    # And the integer add tracks the real one to within a couple of output LSBs.
    real = (a * s1 + b * s2) / s_out
    inside = (real > act[0] + 1) & (real < act[1] - 1)
    assert np.all(np.abs(out[inside] - real[inside]) <= 1.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_global_avg_pool(kernels, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c = rng.integers(1, 3), rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 17)
    requant = qarith.quantize_multiplier(float(rng.uniform(0.2, 3.0)) / (h * w))
    x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    q = QNode(Node("global_avg_pool2d", [0], 1), {"requant": requant})
    expected = reference.global_avg_pool2d(x, q, (n, c))
    out = np.zeros((n, c), np.int8)
    assert kernels.b8_global_avg_pool_s8(requant.multiplier, requant.shift, ctypes.byref(Dims(n, h, w, c)), ptr(x, i8), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense(kernels, seed):
    rng = np.random.default_rng(seed)
    batches, depth, units = rng.integers(1, 4), rng.integers(1, 70), rng.integers(1, 20)
    x = rng.integers(-128, 128, (batches, depth), dtype=np.int8)
    weight = rng.integers(-127, 128, (units, depth), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, units).astype(np.int32)
    multiplier, shift = random_requant(rng, units, depth)
    act = random_act(rng)
    q = QNode(Node("dense", [0], 1), {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift, "act_min": act[0], "act_max": act[1]})
    expected = reference.dense(x, q)
    out = np.zeros((batches, units), np.int8)
    status = kernels.b8_dense_s8(
        ctypes.byref(requant_params(multiplier, shift, act)), int(batches), int(depth), int(units),
        ptr(x, i8), ptr(weight, i8), ptr(bias, i32), ptr(out, i8),
    )
    assert status == 0
    np.testing.assert_array_equal(out, expected)


def test_requantize_matches_over_the_whole_range(kernels):
    """b8_requantize through a dense layer whose accumulators are its biases (input 0): every shift
    in [-31, 30], multipliers up to 2^31 - 1, accumulators at the int32 limits and ties."""
    rng = np.random.default_rng(7)
    accs = np.concatenate([[-(2**31), 2**31 - 1, 0, 1, -1, 3, -3], rng.integers(-(2**31), 2**31, 100)])
    # Small accumulators too, so that results land inside int8 at every shift.
    accs = np.concatenate([accs, accs >> 24, accs >> 40 - 31 + 24])
    grid = [(a, m, s) for s in range(-31, 31) for m in (1 << 30, (1 << 31) - 1, 1518500250) for a in accs]
    acc, multiplier, shift = (np.array(col, dtype=np.int32) for col in zip(*grid))
    units = len(grid)
    out = np.zeros((1, units), np.int8)
    status = kernels.b8_dense_s8(
        ctypes.byref(requant_params(multiplier, shift, (-128, 127))), 1, 1, units,
        ptr(np.zeros((1, 1), np.int8), i8), ptr(np.ones((units, 1), np.int8), i8), ptr(acc, i32), ptr(out, i8),
    )
    assert status == 0
    expected = qarith.clamp_s8(qarith.requantize(acc, multiplier, shift))
    np.testing.assert_array_equal(out[0], expected)
    assert len(np.unique(expected)) > 200  # not just saturated values


def test_requantize_rounds_ties_up():
    half = qarith.FixedPoint(1 << 30, 0)  # x0.5
    got = qarith.requantize(np.array([5, -5, 3, -3]), half.multiplier, half.shift)
    np.testing.assert_array_equal(got, [3, -2, 2, -1])


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
    n, c, h, w = rng.integers(1, 3), rng.integers(1, 5), rng.integers(1, 6), rng.integers(1, 6)
    scale = float(2.0 ** rng.integers(-6, 2))
    x = (rng.integers(-300, 300, (n, c, h, w)) / 2 * scale).astype(np.float32)  # many exact ties
    expected = layout.to_storage(qarith.quantize_tensor(x, scale))
    out = np.zeros((n, h, w, c), np.int8)
    dims = Dims(n, h, w, c)
    assert kernels.b8_quantize_f32(ctypes.c_float(np.float32(1 / scale)), ctypes.byref(dims), x.size, ptr(x, ctypes.c_float), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)
    back = np.zeros((n, c, h, w), np.float32)
    assert kernels.b8_dequantize_f32(ctypes.c_float(scale), ctypes.byref(dims), x.size, ptr(out, i8), ptr(back, ctypes.c_float)) == 0
    np.testing.assert_array_equal(back, qarith.dequantize_tensor(layout.to_logical(out), scale))
    x.ravel()[rng.integers(0, x.size)] = np.nan
    assert kernels.b8_quantize_f32(ctypes.c_float(1.0), None, x.size, ptr(x, ctypes.c_float), ptr(out, i8)) == 1


@pytest.mark.parametrize("seed", range(20))
def test_conv2d_vectorized_epilogue(kernels, seed):
    """Output channels in multiples of 8 with every shift <= 0 take the AVX2 path's vector
    requantization: extreme multipliers, shifts down to -31, large accumulators and biases."""
    rng = np.random.default_rng(1000 + seed)
    n, h, w, kh, kw, sh, sw, dh, dw, pad, oh, ow = random_conv_geometry(rng)
    cin, cout = int(rng.integers(1, 40)), 8 * int(rng.integers(1, 5))
    nonnegative = bool(rng.integers(0, 2))
    x = rng.integers(0 if nonnegative else -128, 128, (n, h, w, cin), dtype=np.int8)
    weight = rng.choice(np.array([-127, 127, 0, 1, -1], np.int8), (cout, kh, kw, cin))  # large sums
    bias = (rng.integers(-(1 << 30), 1 << 30, cout) >> rng.integers(0, 26, cout)).astype(np.int32)
    multiplier = rng.integers(1 << 30, 1 << 31, cout, dtype=np.int64)
    multiplier[::3] = (1 << 31) - 1
    multiplier = multiplier.astype(np.int32)
    shift = rng.integers(-31, 1, cout).astype(np.int32)
    typical = 127.0 * 60 * np.sqrt(kh * kw * cin)  # a typical accumulator: mid-range outputs
    shift[rng.random(cout) < 0.6] = -int(np.log2(typical / 64))
    act = random_act(rng)
    attrs = {"strides": [sh, sw], "padding": pad, "dilation": [dh, dw], "groups": 1}
    params = {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift,
              "act_min": act[0], "act_max": act[1], "depthwise": False}
    expected = reference.conv2d(x, QNode(Node("conv2d", [0], 1, attrs), params), (n, cout, oh, ow))
    filter_dims = ctypes.byref(Dims(*weight.shape))
    packed = np.zeros(kernels.b8_conv2d_s8_packed_size(filter_dims, 1), np.int8)
    kernels.b8_conv2d_s8_pack_filter(filter_dims, 1, ptr(weight, i8), ptr(packed, i8))
    scratch = np.zeros(kernels.b8_conv2d_s8_scratch_size(filter_dims), np.int8)
    out = np.zeros((n, oh, ow, cout), np.int8)
    status = kernels.b8_conv2d_s8(
        ctypes.byref(ConvParams(sh, sw, pad[0], pad[1], dh, dw, 1)), ctypes.byref(requant_params(multiplier, shift, act)),
        ctypes.byref(Dims(n, h, w, cin)), ptr(x, i8), int(nonnegative), filter_dims, ptr(packed, i8), ptr(bias, i32),
        ctypes.byref(Dims(n, oh, ow, cout)), ptr(out, i8), None, ptr(scratch, i8),
    )
    assert status == 0
    np.testing.assert_array_equal(out, expected)
    assert expected.size < 64 or len(np.unique(expected)) > 3
