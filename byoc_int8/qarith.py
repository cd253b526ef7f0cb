"""The integer arithmetic of the accelerator, defined once.

Everything that turns a real-valued scale into integers lives here, and so does the numpy
image of every integer step. The golden reference (``reference.py``) computes with these
functions and the C emitter (``codegen``) writes out the integers these functions produce, so
the two cannot drift; ``b8_requantize`` in ``runtime_c/include/byoc_int8.h`` is the C image of
:func:`requantize` and the test suite checks the two bit for bit.

Number format
-------------
* Activations: int8, symmetric, zero point 0. A calibrated range ``[-r, r]`` maps to
  ``scale = r / 127``; values beyond saturate at -128 / 127.
* Weights: int8 in ``[-127, 127]`` (never -128), symmetric, one scale per output channel:
  ``scale_w[c] = max|w[c]| / 127``.
* Bias: int32 at scale ``s_in * s_w[c]``.

Requantization
--------------
A real factor ``m`` (e.g. ``s_in * s_w[c] / s_out``) is written as ``M * 2^(shift - 31)`` with
``M`` an int32 in ``[2^30, 2^31)`` and ``shift`` in ``[-31, 30]``. An int32 accumulator ``acc`` is
requantized in one rounding step::

    requantize(acc) = (acc * M + 2^(30 - shift)) >> (31 - shift)        (64-bit product)

i.e. ``floor(acc * m + 1/2)``: round to nearest, ties toward +infinity. TFLite's reference
kernels instead round twice: ``SaturatingRoundingDoublingHighMul`` rounds the product to 32 bits
(ties away from zero), then ``RoundingDivideByPOT`` rounds the shift (ties away from zero). The
double rounding can differ from the exact result by one LSB when the first rounding pushes a value
onto a tie; single rounding is the exact ``round(acc * M / 2^(31 - shift))`` and is what TFLite's
and CMSIS-NN's newer "single rounding" option computes, except for the direction of ties on
negative values (they round ties away from zero; we round ties up, which needs no sign test).

Float to int8 at a region's entry is ``clip(rint(x * (1 / scale)), -128, 127)`` in float32
arithmetic (round half to even, as C's ``nearbyintf``); int8 to float at the exit is
``float32(q) * scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
WEIGHT_MAX = 127
# Left shift applied to both inputs of an add before rescaling (TFLite uses 20 for int8).
ADD_LEFT_SHIFT = 20


@dataclass(frozen=True)
class FixedPoint:
    """A real factor as an int32 multiplier and a power-of-two shift: M * 2^(shift - 31)."""

    multiplier: int
    shift: int

    def __float__(self) -> float:
        return self.multiplier * 2.0 ** (self.shift - 31)


def quantize_multiplier(real: float) -> FixedPoint:
    """Encode a non-negative real factor as (multiplier in [2^30, 2^31), shift in [-31, 30]).

    Factors too small to encode (below 2^-32) become 0, which is what they round to anyway for
    any accumulator the kernels can produce at that scale. Factors of 2^30 or more mean a
    calibration or scale error upstream and raise.
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantization factor must be finite and >= 0, got {real}")
    if real == 0.0:
        return FixedPoint(0, 0)
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2^exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * (1 << 31))
    if multiplier == 1 << 31:
        multiplier //= 2
        exponent += 1
    if exponent < -31:
        return FixedPoint(0, 0)
    if exponent > 30:
        raise ValueError(f"requantization factor {real} is too large (>= 2^30)")
    return FixedPoint(int(multiplier), int(exponent))


def requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """floor(acc * M * 2^(shift - 31) + 1/2), computed exactly in int64 (see module doc)."""
    acc = np.asarray(acc, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    right = 31 - np.asarray(shift, dtype=np.int64)
    return (acc * multiplier + (np.int64(1) << (right - 1))) >> right


def clamp_s8(values: np.ndarray, act_min: int = INT8_MIN, act_max: int = INT8_MAX) -> np.ndarray:
    return np.clip(values, act_min, act_max).astype(np.int8)


def activation_scale(abs_max: float) -> float:
    """Scale of a symmetric int8 activation whose calibrated range is [-abs_max, abs_max]."""
    if not math.isfinite(abs_max):
        raise ValueError(f"calibrated range is not finite: {abs_max}")
    # A tensor that is identically zero on the calibration data still needs a usable scale.
    return max(abs_max, 1e-8) / INT8_MAX


def quantize_weights_per_channel(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel (axis 0) int8 weights in [-127, 127] and their scales."""
    flat = weights.reshape(weights.shape[0], -1).astype(np.float64)
    abs_max = np.abs(flat).max(axis=1)
    scales = np.where(abs_max > 0, abs_max / WEIGHT_MAX, 1.0)
    q = np.clip(np.rint(flat / scales[:, None]), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
    return q.reshape(weights.shape), scales


def quantize_bias(bias: np.ndarray, input_scale: float, weight_scales: np.ndarray) -> np.ndarray:
    """int32 bias at scale input_scale * weight_scale[c], saturated to +-2^30.

    The bound leaves room for the dot product in the int32 accumulator (see quantize.MAX_PATCH);
    a bias that large would dwarf every product anyway.
    """
    q = np.rint(bias.astype(np.float64) / (input_scale * weight_scales))
    return np.clip(q, -(2**30), 2**30).astype(np.int32)


def per_channel_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_multiplier over a vector of factors, as (int32 multipliers, int32 shifts)."""
    encoded = [quantize_multiplier(float(r)) for r in reals]
    return (
        np.array([e.multiplier for e in encoded], dtype=np.int32),
        np.array([e.shift for e in encoded], dtype=np.int32),
    )


@dataclass(frozen=True)
class AddRescale:
    """Integer parameters of out = in1 + in2 with three different scales (zero points 0)."""

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


def clamp_bounds(clip: tuple[float, float] | None, scale: float) -> tuple[int, int]:
    """int8 bounds of a float clamp [lo, hi] at `scale` (relu: (0, inf); None: no clamp)."""
    lo, hi = clip if clip is not None else (-math.inf, math.inf)
    q_lo = INT8_MIN if lo == -math.inf else int(np.clip(round(lo / scale), INT8_MIN, INT8_MAX))
    q_hi = INT8_MAX if hi == math.inf else int(np.clip(round(hi / scale), INT8_MIN, INT8_MAX))
    return q_lo, q_hi


def quantize_tensor(x: np.ndarray, scale: float) -> np.ndarray:
    """Float32 -> int8 at a region entry (bit-identical to b8_quantize_f32)."""
    inv = np.float32(1.0 / scale)
    return np.clip(np.rint(x.astype(np.float32) * inv), INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize_tensor(q: np.ndarray, scale: float) -> np.ndarray:
    """int8 -> float32 at a region exit (bit-identical to b8_dequantize_f32)."""
    return q.astype(np.float32) * np.float32(scale)
