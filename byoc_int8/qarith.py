"""The integer arithmetic of the accelerator, defined once.

Everything that turns a real-valued scale into integers lives here, and so does the numpy
image of every integer step. The golden reference (``reference.py``) computes with these
functions and the C emitter (``codegen``) writes out the integers these functions produce, so
the two cannot drift; ``b8_requantize`` in ``runtime_c/include/byoc_int8.h`` is the C image of
:func:`requantize` and the test suite checks the two bit for bit, in every rounding.

Number formats (:class:`NumberFormat`, one per compiled model)
---------------------------------------------------------------
* Activations ``symmetric``: int8 with zero point 0; a calibrated range ``[lo, hi]`` maps to
  ``scale = max(|lo|, |hi|) / 127``.
* Activations ``asymmetric`` (the TFLite int8 specification): the range, widened to include 0,
  maps onto [-128, 127]: ``scale = (hi - lo) / 255`` and the zero point ``-128 - lo / scale``
  rounded into [-128, 127] (so that real 0 is exactly representable).
  ``real = scale * (q - zero_point)``.
* Weights (both): int8 in ``[-127, 127]``, symmetric, one scale per output channel:
  ``scale_w[c] = max|w[c]| / 127``; or with ``weight_bits`` 7 in ``[-63, 63]``, ``/ 63`` (one bit
  of weight precision traded for speed where there is no VNNI: the AVX2 kernels then multiply
  ``a + 128`` by the weights in int16 pairs without overflow, ONNX Runtime's ``reduce_range``).
  Bias: int32 at scale ``s_in * s_w[c]``, zero point 0.
  The input zero point of a convolution or dense layer is folded into its bias at compile time
  (``bias - z_in * sum(w[c])``) and padded positions read ``z_in``, which is exactly TFLite's
  ``sum((x - z_in) * w) + bias`` over the in-bounds taps.

Requantization
--------------
A real factor ``m`` (e.g. ``s_in * s_w[c] / s_out``) is written as ``M * 2^(shift - 31)`` with
``M`` an int32 in ``[2^30, 2^31)`` and ``shift`` in ``[-31, 30]`` (:func:`quantize_multiplier`,
TFLite's ``QuantizeMultiplier``: the mantissa rounded half away from zero). An int32 accumulator
``acc`` becomes ``acc * m`` rounded in one of three ways (:data:`ROUNDINGS`):

``single``
    ``(acc * M + 2^(30 - shift)) >> (31 - shift)`` in 64 bits: one rounding, ties toward
    +infinity. This is exactly TFLite's and CMSIS-NN's ``TFLITE_SINGLE_ROUNDING`` build.
``tflite``
    TFLite's default reference arithmetic (gemmlowp's), two roundings:
    ``x = acc << max(shift, 0)`` in int32 (wrapping, as TFLite computes it), then
    ``SaturatingRoundingDoublingHighMul(x, M) = floor((x * M + 2^30) / 2^31)`` (ties toward
    +infinity; its one saturating case needs ``M = -2^31`` and cannot occur), then
    ``RoundingDivideByPOT(., max(-shift, 0))``, a right shift rounding ties away from zero.
    The double rounding differs from the exact product by one LSB when the first rounding lands
    a value on a tie.
``single-away``
    One rounding, ties away from zero: ``sign(p) * ((|p| + 2^(30 - shift)) >> (31 - shift))``
    with ``p = acc * M``.

Average pooling divides a window sum by its count with the same tie rule
(:func:`rounding_divide`): ties up for ``single``, away from zero for the other two, which for
``tflite`` is TFLite's ``(sum +- count / 2) / count``.

Boundary conversions, in float32 arithmetic: float to int8 at a region's entry is
``clip(round(x / scale) + zero_point, -128, 127)``, computed as ``rint(x * (1 / scale))`` (half
to even, C's ``nearbyintf``) for ``single`` and as TFLite's QUANTIZE, a division rounded half
away from zero, for the other two; int8 to float at the exit is ``float32(q - zero_point) * scale``
(TFLite's DEQUANTIZE gives the same float: the product is exact before its one rounding).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
# Largest dot-product length: with |int8 x int8| <= 2^14 and a bias below 2^30, 2^15 terms keep
# the int32 accumulator clear of overflow, also for the AVX-512 VNNI kernels, which accumulate
# (a + 128) x w for signed activations (at most 255 x 127 x 2^15 < 2^31).
MAX_DOT_TERMS = 1 << 15

# Left shift applied to both inputs of an add before rescaling (TFLite uses 20 for int8).
ADD_LEFT_SHIFT = 20

ACTIVATIONS = ("symmetric", "asymmetric")
ROUNDINGS = ("single", "tflite", "single-away")
WEIGHTS = ("per-channel", "per-tensor")
SCALES = ("any", "power-of-two")
WEIGHT_BITS = (8, 7)


@dataclass(frozen=True)
class NumberFormat:
    """How a compiled model represents numbers and rounds: read by every stage.

    `weights`: one scale per output channel or one per tensor. `scales`: ``power-of-two`` rounds
    every activation and weight scale up to a power of two, so that every requantization factor
    is a power of two and requantizing is a rounding shift (the multiplier is 2^30).
    `weight_bits`: 8 (weights in [-127, 127]) or 7 ([-63, 63]: faster AVX2 kernels)."""

    activations: str = "asymmetric"
    rounding: str = "tflite"
    weights: str = "per-channel"
    scales: str = "any"
    weight_bits: int = 8

    @property
    def weight_max(self) -> int:
        """The largest weight magnitude: 127, or 63 for 7-bit weights."""
        return (1 << (self.weight_bits - 1)) - 1

    def __post_init__(self) -> None:
        for field, value, choices in (("activations", self.activations, ACTIVATIONS), ("rounding", self.rounding, ROUNDINGS),
                                      ("weights", self.weights, WEIGHTS), ("scales", self.scales, SCALES),
                                      ("weight_bits", self.weight_bits, WEIGHT_BITS)):
            if value not in choices:
                raise ValueError(f"unknown {field} {value!r}; choose from {', '.join(map(str, choices))}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "NumberFormat":
        return cls(**json.loads(text))

    def __str__(self) -> str:
        extras = [v for v, default in ((self.weights, "per-channel"), (self.scales, "any"),
                                       (f"{self.weight_bits}-bit weights", "8-bit weights")) if v != default]
        return "/".join([self.activations, self.rounding, *extras])


# The default (NumberFormat's field defaults): asymmetric activations measure best
# (benchmarks/accuracy.py: ResNet-18 logits cosine 0.99983 vs 0.99978, per-layer SQNR +2 dB, digits
# unchanged at 99.44%), and TFLite's rounding is the int8 standard, at no cost in accuracy.
DEFAULT_FORMAT = NumberFormat()


@dataclass(frozen=True)
class FixedPoint:
    """A real factor as an int32 multiplier and a power-of-two shift: M * 2^(shift - 31)."""

    multiplier: int
    shift: int

    def __float__(self) -> float:
        return self.multiplier * 2.0 ** (self.shift - 31)


def round_half_away(value: float) -> int:
    """C's round() / TFLite's TfLiteRound: to nearest, ties away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def quantize_multiplier(real: float) -> FixedPoint:
    """TFLite's QuantizeMultiplier: (multiplier in [2^30, 2^31), shift in [-31, 30]).

    Factors too small to encode (below 2^-32) become 0, which is what they round to anyway for
    any accumulator the kernels can produce at that scale. Factors of 2^30 or more mean a
    calibration or scale error upstream and raise.
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantization factor must be finite and >= 0, got {real}")
    if real == 0.0:
        return FixedPoint(0, 0)
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2^exponent, mantissa in [0.5, 1)
    multiplier = round_half_away(mantissa * (1 << 31))
    if multiplier == 1 << 31:
        multiplier //= 2
        exponent += 1
    if exponent < -31:
        return FixedPoint(0, 0)
    if exponent > 30:
        raise ValueError(f"requantization factor {real} is too large (>= 2^30)")
    return FixedPoint(int(multiplier), int(exponent))


def _wrap_int32(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def requantize(
    acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int, rounding: str
) -> np.ndarray:
    """acc * M * 2^(shift - 31) rounded as `rounding` says (see the module doc), exactly, in int64."""
    acc = np.asarray(acc, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if rounding == "single":
        right = 31 - shift
        return (acc * multiplier + (np.int64(1) << (right - 1))) >> right
    if rounding == "single-away":
        right = 31 - shift
        magnitude = (np.abs(acc) * multiplier + (np.int64(1) << (right - 1))) >> right
        return np.where(acc < 0, -magnitude, magnitude)
    if rounding == "tflite":
        x = _wrap_int32(acc << np.maximum(shift, 0))
        high = (x * multiplier + (np.int64(1) << 30)) >> 31  # SaturatingRoundingDoublingHighMul
        return rounding_divide_by_pot(high, np.maximum(-shift, 0))
    raise ValueError(f"unknown rounding {rounding!r}")


POW2_MULTIPLIER = 1 << 30  # a power-of-two factor 2^e in multiplier form: (2^30, e + 1)


def requantize_pow2(acc: np.ndarray, exponent: np.ndarray | int, rounding: str) -> np.ndarray:
    """acc * 2^exponent rounded as `rounding` says, by shifts alone: requantization with
    power-of-two scales, where the engine has no multiplier. The same integer function as
    ``requantize(acc, POW2_MULTIPLIER, exponent + 1, rounding)`` (TFLite's form of a power-of-two
    factor) for exponents in [-32, 29]; ``b8_requantize_pow2`` is its C image."""
    acc = np.asarray(acc, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    if rounding == "tflite":  # the multiplier form's two roundings: halve (ties up), then RDBPOT
        high = (_wrap_int32(acc << np.maximum(exponent + 1, 0)) + 1) >> 1
        return rounding_divide_by_pot(high, np.maximum(-(exponent + 1), 0))
    if rounding not in ("single", "single-away"):
        raise ValueError(f"unknown rounding {rounding!r}")
    right = np.maximum(-exponent, 0)
    half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 0)
    magnitude = np.abs(acc) if rounding == "single-away" else acc
    scaled = np.where(exponent >= 0, magnitude << np.maximum(exponent, 0), (magnitude + half) >> right)
    return np.where(acc < 0, -scaled, scaled) if rounding == "single-away" else scaled


def pow2_exponents(multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray | None:
    """The exponents of factors that are all powers of two (every multiplier 2^30), for
    :func:`requantize_pow2`; None if any is not."""
    multiplier, shift = np.asarray(multiplier), np.asarray(shift)
    if multiplier.size == 0 or not (multiplier == POW2_MULTIPLIER).all():
        return None
    return shift.astype(np.int64) - 1


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2^exponent, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


# ---- TFLite's 16-bit fixed point (its int8 HARD_SWISH) -------------------------------------------
# Q0.15 values in int16: a * b / 2^15 with gemmlowp's rounding (ties away from zero, computed as a
# nudge and C's truncating division) or truncated toward zero (ARM's SQDMULH); both saturate the
# one overflowing case, -1 * -1.

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MAX = (1 << 31) - 1


def _c_divide(numerator: np.ndarray, denominator: int) -> np.ndarray:
    """C's integer division (truncation toward zero)."""
    magnitude = np.abs(numerator) // denominator
    return np.where(numerator < 0, -magnitude, magnitude)


def saturating_rounding_doubling_high_mul16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    product = a * b
    nudge = np.where(product >= 0, 1 << 14, 1 - (1 << 14))
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, _c_divide(product + nudge, 1 << 15))


def saturating_doubling_high_mul16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, _c_divide(a * b, 1 << 15))


def saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.int64) << amount, INT16_MIN, INT16_MAX)


def int16_multiplier(real: float) -> tuple[int, int]:
    """TFLite's 16-bit multiplier of `real`: :func:`quantize_multiplier`'s 32-bit one rounded to
    its high half (saturating at 2^15 - 1), and the same exponent."""
    fixed = quantize_multiplier(real)
    if fixed.multiplier >= INT32_MAX - (1 << 15):
        return INT16_MAX, fixed.shift
    return (fixed.multiplier + (1 << 15)) >> 16, fixed.shift


def requantize_double(acc: np.ndarray, real: np.ndarray | float) -> np.ndarray:
    """acc * real rounded as TFLite's reference FULLY_CONNECTED does it: the product in double
    precision (one IEEE rounding), then C's round() (ties away from zero). The kernels compute
    the same in integers from :func:`double_parts` (``b8_requantize_f64``)."""
    v = np.asarray(acc, dtype=np.int64).astype(np.float64) * np.asarray(real, dtype=np.float64)
    v = np.clip(v, -(2.0**62), 2.0**62)  # far beyond int8 either way; keeps the int64 conversion defined
    whole = np.trunc(v)
    return (whole + np.where(np.abs(v - whole) >= 0.5, np.sign(v), 0)).astype(np.int64)


def double_parts(real: float) -> tuple[int, int]:
    """A positive double as (mantissa in [2^52, 2^53), exponent): real = mantissa * 2^exponent."""
    if not (math.isfinite(real) and real > 0):
        raise ValueError(f"requantization factor must be finite and > 0, got {real}")
    fraction, exponent = math.frexp(real)
    return int(fraction * (1 << 53)), exponent - 53


def rounding_divide(total: np.ndarray, count: np.ndarray | int, rounding: str) -> np.ndarray:
    """total / count (count >= 1) to the nearest integer, ties as `rounding` rounds them."""
    total = np.asarray(total, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    if rounding == "single":
        return (2 * total + count) // (2 * count)
    magnitude = (np.abs(total) + count // 2) // count
    return np.where(total < 0, -magnitude, magnitude)


def clamp_s8(values: np.ndarray, act_min: int = INT8_MIN, act_max: int = INT8_MAX) -> np.ndarray:
    return np.clip(values, act_min, act_max).astype(np.int8)


@dataclass(frozen=True)
class ActivationQuant:
    """The int8 encoding of one activation tensor: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int = 0


# A range narrower than this is a tensor that is (about) 0 on the calibration data. It gets the
# unit range [0, 1] instead: 0 stays exact, and a scale near MIN_RANGE would saturate the next
# layer's int32 bias (at s_in * s_w) or make requantization factors of 2^30 and more.
MIN_RANGE = 1e-8


def power_of_two_above(scale: float) -> float:
    """The smallest power of two >= scale (so that the range it encodes still fits)."""
    mantissa, exponent = math.frexp(scale)
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def activation_quant(lo: float, hi: float, activations: str = "symmetric", scales: str = "any") -> ActivationQuant:
    """Scale and zero point of an activation whose calibrated range is [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"calibrated range is not finite: [{lo}, {hi}]")
    pow2 = power_of_two_above if scales == "power-of-two" else (lambda s: s)
    if max(abs(lo), abs(hi)) < MIN_RANGE:
        lo, hi = 0.0, 1.0
    if activations == "symmetric":
        return ActivationQuant(pow2(max(abs(lo), abs(hi)) / INT8_MAX), 0)
    if activations != "asymmetric":
        raise ValueError(f"unknown activations {activations!r}")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = pow2(max(hi - lo, MIN_RANGE) / (INT8_MAX - INT8_MIN))
    zero_point = int(np.clip(round_half_away(INT8_MIN - lo / scale), INT8_MIN, INT8_MAX))
    return ActivationQuant(scale, zero_point)


def weight_scales(weights: np.ndarray, fmt: NumberFormat = DEFAULT_FORMAT) -> np.ndarray:
    """One symmetric int8 scale per output channel (axis 0): each channel's own, or with
    per-tensor weights the tensor's, repeated; powers of two if the format says so."""
    # abs and max are exact in the weights' own type: no float64 copy of the whole tensor.
    abs_max = np.abs(weights.reshape(weights.shape[0], -1)).max(axis=1).astype(np.float64)
    if fmt.weights == "per-tensor":
        abs_max = np.full_like(abs_max, abs_max.max(initial=0.0))
    scales = np.where(abs_max > 0, abs_max / fmt.weight_max, 1.0)
    if fmt.scales == "power-of-two":
        scales = np.array([power_of_two_above(s) for s in scales])
    return scales


def quantize_weights(weights: np.ndarray, fmt: NumberFormat = DEFAULT_FORMAT) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights in [-127, 127] (or [-63, 63] with 7-bit weights) and their scales
    (weight_scales)."""
    scales = weight_scales(weights, fmt)
    q = weights.reshape(weights.shape[0], -1).astype(np.float64)
    q /= scales[:, None]
    np.rint(q, out=q)
    np.clip(q, -fmt.weight_max, fmt.weight_max, out=q)
    return q.astype(np.int8).reshape(weights.shape), scales


def quantize_bias(bias: np.ndarray, input_scale: float, weight_scales: np.ndarray) -> np.ndarray:
    """int32 bias at scale input_scale * weight_scale[c], saturated to +-2^30.

    The bound leaves room for the dot product in the int32 accumulator (see MAX_DOT_TERMS);
    a bias that large would dwarf every product anyway.
    """
    q = np.rint(bias.astype(np.float64) / (input_scale * weight_scales))
    return np.clip(q, -(2**30), 2**30).astype(np.int32)


def fold_input_zero_point(bias: np.ndarray, weights: np.ndarray, input_zero_point: int) -> np.ndarray:
    """bias[c] - z_in * sum(w[c]): the accumulator over a z_in-padded input then equals
    sum((x - z_in) * w) + bias exactly (weights: output channel on axis 0)."""
    sums = weights.reshape(weights.shape[0], -1).astype(np.int64).sum(axis=1)
    folded = bias.astype(np.int64) - int(input_zero_point) * sums
    if np.abs(folded).max(initial=0) >= 2**31:
        raise ValueError("bias with the input zero point folded in does not fit in int32")
    return folded.astype(np.int32)


def per_channel_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_multiplier over a vector of factors, as (int32 multipliers, int32 shifts)."""
    encoded = [quantize_multiplier(float(r)) for r in reals]
    return (
        np.array([e.multiplier for e in encoded], dtype=np.int32),
        np.array([e.shift for e in encoded], dtype=np.int32),
    )


def mean_multiplier(input_scale: float, output_scale: float, count: int) -> FixedPoint:
    """The factor of a mean over `count` values, s_in / (s_out * count), as TFLite's MEAN builds
    it: QuantizeMultiplier(s_in / s_out), then the multiplier shifted left by
    k = min(floor(log2(count)), 32, 31 + shift) bits and divided by the count (truncating)."""
    ratio = quantize_multiplier(input_scale / output_scale)
    k = min(count.bit_length() - 1, 32, 31 + ratio.shift)
    return FixedPoint((ratio.multiplier << k) // count, ratio.shift - k)


@dataclass(frozen=True)
class AddRescale:
    """Integer parameters of out = in1 + in2 with three different scales."""

    left_shift: int
    input1: FixedPoint
    input2: FixedPoint
    output: FixedPoint


def add_rescale(scale1: float, scale2: float, scale_out: float) -> AddRescale:
    """TFLite's scheme: both inputs go to the common scale 2 * max(s1, s2) / 2^left_shift.

    Each input factor is at most 1/2, so the rescaled inputs, and their sum, stay within int32.
    """
    twice_max = 2.0 * max(scale1, scale2)
    return AddRescale(
        left_shift=ADD_LEFT_SHIFT,
        input1=quantize_multiplier(scale1 / twice_max),
        input2=quantize_multiplier(scale2 / twice_max),
        output=quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * scale_out)),
    )


def quantize_value(value: float, q: ActivationQuant) -> int:
    """One real value as int8 (TFLite's rule for clamp bounds and pad values: ties away)."""
    if value == math.inf:
        return INT8_MAX
    if value == -math.inf:
        return INT8_MIN
    return int(np.clip(round_half_away(value / q.scale) + q.zero_point, INT8_MIN, INT8_MAX))


def clamp_bounds(clip: tuple[float, float] | None, q: ActivationQuant) -> tuple[int, int]:
    """int8 bounds of a float clamp [lo, hi] (relu: (0, inf); None: no clamp)."""
    lo, hi = clip if clip is not None else (-math.inf, math.inf)
    return quantize_value(lo, q), quantize_value(hi, q)


def quantize_tensor(x: np.ndarray, q: ActivationQuant, rounding: str) -> np.ndarray:
    """Float32 -> int8 at a region entry (bit-identical to b8_quantize_f32), all in float32:
    ``single`` rounds x * (1 / scale) half to even; the others divide and round half away from
    zero, as TFLite's QUANTIZE does."""
    x = x.astype(np.float32)
    scale = np.float32(q.scale)
    if rounding == "single":
        rounded = np.rint(x * (np.float32(1.0) / scale))
    else:
        v = x / scale
        rounded = np.trunc(v) + np.where(np.abs(v - np.trunc(v)) >= 0.5, np.sign(v), 0)
    return np.clip(rounded + q.zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize_tensor(values: np.ndarray, q: ActivationQuant) -> np.ndarray:
    """int8 -> float32 at a region exit (bit-identical to b8_dequantize_f32 and to TFLite's
    DEQUANTIZE: the product is exact before its one rounding)."""
    return (values.astype(np.int32) - q.zero_point).astype(np.float32) * np.float32(q.scale)
