"""Every C kernel against the integer reference, bit for bit, over randomized cases, in every
kernel build and rounding (the `kernels` fixture) with and without zero points."""

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


def requant_params(multiplier, shift, act, zero_point=0):
    return RequantParams(ptr(multiplier, i32), ptr(shift, i32), *act, zero_point)


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
    z_in, z_out = random_zero_point(rng), random_zero_point(rng, output=True)
    act = random_act(rng, z_out)

    attrs = {"strides": [sh, sw], "padding": pad, "dilation": [dh, dw], "groups": groups}
    params = {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift, "input_zero_point": z_in,
              "output_zero_point": z_out, "act_min": act[0], "act_max": act[1], "depthwise": kind == "depthwise"}
    expected = reference.conv2d(x, QNode(Node("conv2d", [0], 1, attrs), params, kernels.rounding), (n, cout, oh, ow))

    out = np.zeros((n, oh, ow, cout), np.int8)
    conv = ConvParams(sh, sw, pad[0], pad[1], dh, dw, groups, z_in)
    head = (ctypes.byref(conv), ctypes.byref(requant_params(multiplier, shift, act, z_out)),
            ctypes.byref(Dims(n, h, w, cin)), ptr(x, i8))
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
        y = qarith.clamp_s8(qarith.requantize(acc, multiplier, shift, "single"))
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
    z1, z2, z_out = random_zero_point(rng), random_zero_point(rng), random_zero_point(rng, output=True)
    act = random_act(rng, z_out)
    a = rng.integers(-128, 128, size, dtype=np.int8)
    b = rng.integers(-128, 128, size, dtype=np.int8)
    q = QNode(Node("add", [0, 1], 2), {"rescale": rescale, "act_min": act[0], "act_max": act[1],
                                       "input1_zero_point": z1, "input2_zero_point": z2, "output_zero_point": z_out},
              kernels.rounding)
    expected = reference.add(a, b, q)
    params = AddParams(
        rescale.left_shift,
        rescale.input1.multiplier, rescale.input1.shift,
        rescale.input2.multiplier, rescale.input2.shift,
        rescale.output.multiplier, rescale.output.shift,
        *act, z1, z2, z_out,
    )
    out = np.zeros(size, np.int8)
    assert kernels.b8_add_s8(ctypes.byref(params), size, ptr(a, i8), ptr(b, i8), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)
    # And the integer add tracks the real one to within a couple of output LSBs.
    real = ((a.astype(np.float64) - z1) * s1 + (b.astype(np.float64) - z2) * s2) / s_out + z_out
    inside = (real > act[0] + 1) & (real < act[1] - 1)
    assert np.all(np.abs(out[inside] - real[inside]) <= 1.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_global_avg_pool(kernels, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c = rng.integers(1, 3), rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 17)
    requant = qarith.quantize_multiplier(float(rng.uniform(0.2, 3.0)) / (h * w))
    z_in, z_out = random_zero_point(rng), random_zero_point(rng, output=True)
    x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    q = QNode(Node("global_avg_pool2d", [0], 1), {"requant": requant, "input_zero_point": z_in,
                                                   "output_zero_point": z_out}, kernels.rounding)
    expected = reference.global_avg_pool2d(x, q, (n, c))
    out = np.zeros((n, c), np.int8)
    assert kernels.b8_global_avg_pool_s8(requant.multiplier, requant.shift, z_in, z_out, ctypes.byref(Dims(n, h, w, c)),
                                         ptr(x, i8), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense(kernels, seed):
    rng = np.random.default_rng(seed)
    batches, depth, units = rng.integers(1, 4), rng.integers(1, 70), rng.integers(1, 20)
    x = rng.integers(-128, 128, (batches, depth), dtype=np.int8)
    weight = rng.integers(-127, 128, (units, depth), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, units).astype(np.int32)
    multiplier, shift = random_requant(rng, units, depth)
    z_out = random_zero_point(rng, output=True)
    act = random_act(rng, z_out)
    q = QNode(Node("dense", [0], 1), {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift,
                                      "output_zero_point": z_out, "act_min": act[0], "act_max": act[1]}, kernels.rounding)
    expected = reference.dense(x, q)
    out = np.zeros((batches, units), np.int8)
    status = kernels.b8_dense_s8(
        ctypes.byref(requant_params(multiplier, shift, act, z_out)), int(batches), int(depth), int(units),
        ptr(x, i8), ptr(weight, i8), ptr(bias, i32), ptr(out, i8),
    )
    assert status == 0
    np.testing.assert_array_equal(out, expected)


def test_requantize_matches_over_the_whole_range(kernels):
    """b8_requantize through a dense layer whose accumulators are its biases (input 0): every shift
    in [-31, 30], multipliers up to 2^31 - 1, accumulators at the int32 limits and ties."""
    rng = np.random.default_rng(7)
    accs = np.concatenate([[-(2**31), 2**31 - 1, 0, 1, -1, 3, -3], rng.integers(-(2**31), 2**31, 100)])
    # Small accumulators too, so that results land inside int8 at every shift, and odd ones next
    # to the ties of every shift.
    ties = np.concatenate([[(1 << k) + d, -(1 << k) + d] for k in range(31) for d in (-1, 0, 1)])
    accs = np.concatenate([accs, accs >> 24, accs >> 30, ties]).astype(np.int64)
    accs = accs[(accs >= -(2**31)) & (accs < 2**31)]
    grid = [(a, m, s) for s in range(-31, 31) for m in (1 << 30, (1 << 31) - 1, 1518500250) for a in accs]
    acc, multiplier, shift = (np.array(col, dtype=np.int32) for col in zip(*grid))
    units = len(grid)
    out = np.zeros((1, units), np.int8)
    status = kernels.b8_dense_s8(
        ctypes.byref(requant_params(multiplier, shift, (-128, 127))), 1, 1, units,
        ptr(np.zeros((1, 1), np.int8), i8), ptr(np.ones((units, 1), np.int8), i8), ptr(acc, i32), ptr(out, i8),
    )
    assert status == 0
    expected = qarith.clamp_s8(qarith.requantize(acc, multiplier, shift, kernels.rounding))
    np.testing.assert_array_equal(out[0], expected)
    assert len(np.unique(expected)) > 200  # not just saturated values


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
    n, c, h, w = rng.integers(1, 3), rng.integers(1, 5), rng.integers(1, 6), rng.integers(1, 6)
    quant = qarith.ActivationQuant(float(2.0 ** rng.integers(-6, 2)), random_zero_point(rng))
    x = (rng.integers(-300, 300, (n, c, h, w)) / 2 * quant.scale).astype(np.float32)  # many exact ties
    x.ravel()[::7] *= np.float32(1.0 + 2.0**-20)  # and values next to the ties
    expected = layout.to_storage(qarith.quantize_tensor(x, quant, kernels.rounding))
    out = np.zeros((n, h, w, c), np.int8)
    dims = Dims(n, h, w, c)
    scale = ctypes.c_float(quant.scale)
    assert kernels.b8_quantize_f32(scale, quant.zero_point, ctypes.byref(dims), x.size, ptr(x, ctypes.c_float), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)
    back = np.zeros((n, c, h, w), np.float32)
    assert kernels.b8_dequantize_f32(ctypes.c_float(quant.scale), quant.zero_point, ctypes.byref(dims), x.size,
                                     ptr(out, i8), ptr(back, ctypes.c_float)) == 0
    np.testing.assert_array_equal(back, qarith.dequantize_tensor(layout.to_logical(out), quant))
    x.ravel()[rng.integers(0, x.size)] = np.nan
    assert kernels.b8_quantize_f32(ctypes.c_float(1.0), 0, None, x.size, ptr(x, ctypes.c_float), ptr(out, i8)) == 1


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
    z_in, z_out = random_zero_point(rng), random_zero_point(rng, output=True)
    act = (-128, 127)  # the clamps are exercised above; here every output shows the arithmetic
    attrs = {"strides": [sh, sw], "padding": pad, "dilation": [dh, dw], "groups": 1}
    params = {"weight": weight, "bias": bias, "multiplier": multiplier, "shift": shift, "input_zero_point": z_in,
              "output_zero_point": z_out, "act_min": act[0], "act_max": act[1], "depthwise": False}
    expected = reference.conv2d(x, QNode(Node("conv2d", [0], 1, attrs), params, kernels.rounding), (n, cout, oh, ow))
    filter_dims = ctypes.byref(Dims(*weight.shape))
    packed = np.zeros(kernels.b8_conv2d_s8_packed_size(filter_dims, 1), np.int8)
    kernels.b8_conv2d_s8_pack_filter(filter_dims, 1, ptr(weight, i8), ptr(packed, i8))
    scratch = np.zeros(kernels.b8_conv2d_s8_scratch_size(filter_dims), np.int8)
    out = np.zeros((n, oh, ow, cout), np.int8)
    status = kernels.b8_conv2d_s8(
        ctypes.byref(ConvParams(sh, sw, pad[0], pad[1], dh, dw, 1, z_in)),
        ctypes.byref(requant_params(multiplier, shift, act, z_out)),
        ctypes.byref(Dims(n, h, w, cin)), ptr(x, i8), int(nonnegative), filter_dims, ptr(packed, i8), ptr(bias, i32),
        ctypes.byref(Dims(n, oh, ow, cout)), ptr(out, i8), None, ptr(scratch, i8),
    )
    assert status == 0
    np.testing.assert_array_equal(out, expected)
    assert expected.size < 64 or len(np.unique(expected)) > 3


class DoubleRequantParams(ctypes.Structure):
    _fields_ = [
        ("mantissa", ctypes.POINTER(ctypes.c_int64)),
        ("exponent", ctypes.POINTER(ctypes.c_int32)),
        ("act_min", ctypes.c_int32),
        ("act_max", ctypes.c_int32),
        ("output_zero_point", ctypes.c_int32),
    ]


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
    units = len(grid_acc)
    out = np.zeros((1, units), np.int8)
    params = DoubleRequantParams(ptr(mantissa, ctypes.c_int64), ptr(exponent, i32), -128, 127, 3)
    status = kernels.b8_dense_s8_double_requant(
        ctypes.byref(params), 1, 1, units, ptr(np.zeros((1, 1), np.int8), i8),
        ptr(np.ones((units, 1), np.int8), i8), ptr(grid_acc, i32), ptr(out, i8),
    )
    assert status == 0
    expected = qarith.clamp_s8(qarith.requantize_double(grid_acc, grid_real) + 3)
    np.testing.assert_array_equal(out[0], expected)
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
