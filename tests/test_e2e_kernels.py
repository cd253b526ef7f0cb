"""The SIMD paths of the kernels that end-to-end speed work added (issue 11), bit for bit against
the integer reference in every kernel build: long rows, every vector width with its tails, and
each regime of the requantization (identity copy, shifts right, left shifts) that picks a path.
The fuzzer's sample (tests/test_kernel_fuzz.py) covers them too, on smaller shapes."""

import numpy as np
import pytest

import kernel_calls


def assert_matches(kernels, kernel: str, case: dict) -> None:
    problem = kernel_calls.check(kernels, kernel, case)
    assert problem is None, f"{kernels.variant}-{kernels.rounding} {kernel}: {problem}"


def multipliers(rng, count: int) -> np.ndarray:
    return rng.integers(1 << 30, 1 << 31, count).astype(np.int32)


# (shift regime, zero points equal to the output's) per concat input.
CONCAT_REGIMES = ["identity", "identity-offset", "right", "far-right", "left", "far-left", "wrap"]


@pytest.mark.parametrize("regime", CONCAT_REGIMES)
@pytest.mark.parametrize("inner", [1, 7, 8, 15, 16, 17, 64, 100])
def test_concat_rows(kernels, regime, inner):
    rng = np.random.default_rng([inner, CONCAT_REGIMES.index(regime)])
    count, outer = 3, 5
    output_zero_point = int(rng.integers(-128, 128))
    multiplier = multipliers(rng, count)
    shift = rng.integers(-3, 1, count).astype(np.int32)
    zero_points = rng.integers(-128, 128, count).astype(np.int32)
    if regime.startswith("identity"):
        multiplier[1], shift[1] = 1 << 30, 1
        zero_points[1] = output_zero_point if regime == "identity" else output_zero_point - 3
    elif regime == "far-right":
        shift[:] = rng.integers(-31, -20, count)
    elif regime == "left":
        shift[:] = rng.integers(1, 4, count)
    elif regime == "far-left":
        shift[:] = [22, 23, 30]
    elif regime == "wrap":  # TFLite's left shift wraps in int32: results near +-2^31, then the zero point
        multiplier[:], shift[:], zero_points[:] = 2**31 - 1, [29, 30, 24], 0
        output_zero_point = [-128, 127, -47][inner % 3]
    inputs = [rng.integers(-128, 128, (outer, inner + k), dtype=np.int8) for k in range(count)]
    assert_matches(kernels, "concat", {"inputs": inputs, "outer": outer, "multiplier": multiplier, "shift": shift,
                                       "zero_points": zero_points, "output_zero_point": output_zero_point})


@pytest.mark.parametrize("channels", [1, 31, 32, 33, 63, 64, 65, 130])
@pytest.mark.parametrize("dilation", [1, 2])
def test_max_pool_channel_blocks(kernels, channels, dilation):
    """3x3 stride 2 windows in ceil mode (the last ones hang over the edge, as SqueezeNet's), with
    padding, split in thread shares; channels around the 32 / 64-byte blocks."""
    rng = np.random.default_rng([channels, dilation])
    h, w = 11, 12
    oh, ow = (h + 1 - 1) // 2 + 1, (w + 1 - 1) // 2 + 1  # pad 1 on top / left, ceil mode
    case = {"kernel": (3, 3), "strides": (2, 2), "dilation": (dilation, dilation), "padding": (1, 1),
            "out_hw": (oh, ow), "x": rng.integers(-128, 128, (2, h, w, channels), dtype=np.int8),
            "pixels": [(0, 7), (7, 2 * oh * ow)], "fill": 5}
    assert_matches(kernels, "max_pool2d", case)


@pytest.mark.parametrize("channels", [1, 31, 32, 33, 64, 100, 1000])
def test_global_avg_pool_channel_blocks(kernels, channels):
    rng = np.random.default_rng(channels)
    for shift in (-12, -5, 2):
        case = {"x": rng.integers(-128, 128, (2, 7, 5, channels), dtype=np.int8),
                "multiplier": int(rng.integers(1 << 30, 1 << 31)), "shift": shift,
                "input_zero_point": int(rng.integers(-128, 128)), "output_zero_point": int(rng.integers(-128, 128))}
        assert_matches(kernels, "global_avg_pool", case)


@pytest.mark.parametrize("depth", [1, 15, 16, 17, 31, 32, 33, 48, 1280, 1 << 15])
def test_dense_depths(kernels, depth):
    """Depths around the 16 / 32-value blocks, and the longest (extreme values: no overflow)."""
    rng = np.random.default_rng(depth)
    units = 19
    x = rng.integers(-128, 128, (3, depth), dtype=np.int8)
    weight = rng.integers(-127, 128, (units, depth), dtype=np.int8)
    if depth == 1 << 15:
        x[0], weight[0] = -128, -127
    case = {"x": x, "weight": weight, "bias": rng.integers(-(1 << 20), 1 << 20, units).astype(np.int32),
            "multiplier": multipliers(rng, units), "shift": rng.integers(-24, -8, units).astype(np.int32),
            "output_zero_point": 3, "act": (-128, 127)}
    assert_matches(kernels, "dense", case)


@pytest.mark.parametrize("shape", [(1, 3, 5, 70), (2, 3, 4, 16), (1, 3, 2, 130), (1, 1, 3, 65), (1, 17, 3, 33),
                                   (1, 40, 2, 3)])
def test_quantize_nchw_blocks(kernels, shape):
    """NCHW -> NHWC quantization through its column / channel blocks and the RGB shuffles, with
    ties of the rounding and values beyond the int8 range."""
    rng = np.random.default_rng(list(shape))
    scale = np.float32(0.037)
    x = (rng.integers(-400, 400, shape) / 2 * scale).astype(np.float32)
    x.ravel()[::7] = (rng.standard_normal(x.size)[::7] * 50 * scale).astype(np.float32)
    for zero_point in (0, -17):
        assert_matches(kernels, "quantize", {"x": x, "scale": float(scale), "zero_point": zero_point, "nchw": True})


@pytest.mark.parametrize("channels", [1, 15, 16, 17, 40])
@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (1, 2), (2, 1), (1, 3)])
@pytest.mark.parametrize("dilation", [(1, 1), (2, 1), (1, 2)])
def test_depthwise_3x3_columns(kernels, channels, strides, dilation):
    """3x3 depthwise through the AVX-512 column path (stride 1 or 2 across, any row dilation,
    every row inside) and around it: interior runs that start and stop inside a thread's share,
    rows with padding, extreme inputs and weights (the +128 offset and its correction), one
    channel shifted left (the lane-by-lane output stage)."""
    rng = np.random.default_rng([channels, *strides, *dilation])
    (sh, sw), (dh, dw) = strides, dilation
    h, w = 9, 23
    for pad in (0, 1, 2):
        oh = (h + 2 * pad - 2 * dh - 1) // sh + 1
        ow = (w + 2 * pad - 2 * dw - 1) // sw + 1
        x = rng.integers(-128, 128, (2, h, w, channels), dtype=np.int8)
        x[0, :2] = -128
        x[1, :, :3] = 127
        weight = rng.integers(-127, 128, (1, 3, 3, channels), dtype=np.int8)
        weight[..., 0] = 127 if channels > 1 else weight[..., 0]
        shift = rng.integers(-14, -6, channels).astype(np.int32)
        if channels > 2:
            shift[2] = 1
        total = 2 * oh * ow
        cuts = sorted({0, total, int(rng.integers(1, total)), int(rng.integers(1, total)), ow + 3})
        case = {"kernel": (3, 3), "strides": strides, "dilation": dilation, "padding": (pad, pad),
                "out_hw": (oh, ow), "x": x, "weight": weight,
                "bias": rng.integers(-(1 << 20), 1 << 20, channels).astype(np.int32),
                "multiplier": multipliers(rng, channels), "shift": shift, "output_zero_point": -5,
                "act": (-128, 127), "pad_value": int(rng.integers(-128, 128)),
                "pixels": [(a, b) for a, b in zip(cuts[:-1], cuts[1:])], "fill": 7}
        assert_matches(kernels, "depthwise_conv2d", case)
