"""Elementwise activations as 256-entry int8 lookup tables.

A function of one int8 tensor has only 256 possible inputs, so it is exactly a table, built at
compile time from the input and output encodings: entry ``q + 128`` holds
``clamp(round(f(s_in * (q - z_in)) / s_out) + z_out)``. The float function is defined once, here,
with PyTorch: calibration runs it on float tensors and the table evaluates it in float64, so the
int8 result is f rounded to the nearest output code (within half an LSB, before clamping).

A model quantized by TFLite keeps TFLite's own int8 algorithms (:func:`tflite_table`), so that it
stays bit-exact with TFLite's reference kernels: the same table gather runs either way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from . import qarith
from .qarith import INT8_MAX, INT8_MIN, ActivationQuant

# name -> f(x, alpha); alpha is the parameter of leaky relu and ELU (unused by the others).
FUNCTIONS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "sigmoid": lambda x, alpha: torch.sigmoid(x),
    "tanh": lambda x, alpha: torch.tanh(x),
    "hardsigmoid": lambda x, alpha: F.hardsigmoid(x),
    "hardswish": lambda x, alpha: F.hardswish(x),
    "silu": lambda x, alpha: F.silu(x),
    "gelu": lambda x, alpha: F.gelu(x),
    "gelu_tanh": lambda x, alpha: F.gelu(x, approximate="tanh"),
    "elu": lambda x, alpha: F.elu(x, alpha),
    "leaky_relu": lambda x, alpha: F.leaky_relu(x, alpha),
    "mish": lambda x, alpha: F.mish(x),
}


def apply(name: str, x: torch.Tensor, alpha: float = 0.0) -> torch.Tensor:
    if name not in FUNCTIONS:
        raise ValueError(f"no lookup-table activation {name!r}; known: {', '.join(FUNCTIONS)}")
    return FUNCTIONS[name](x, alpha)


def lookup_table(name: str, alpha: float, q_in: ActivationQuant, q_out: ActivationQuant) -> np.ndarray:
    """The int8 table of f from the input to the output encoding (index: input code + 128)."""
    codes = np.arange(INT8_MIN, INT8_MAX + 1)
    reals = torch.from_numpy(q_in.scale * (codes - q_in.zero_point).astype(np.float64))
    y = apply(name, reals, alpha).numpy() / q_out.scale
    rounded = np.trunc(y) + np.where(np.abs(y - np.trunc(y)) >= 0.5, np.sign(y), 0)  # ties away
    return np.clip(rounded + q_out.zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


# ---- TFLite's int8 activations -------------------------------------------------------------------

TFLITE_FUNCTIONS = ("sigmoid", "tanh", "hardswish")


def _round_half_away(x: np.ndarray) -> np.ndarray:
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0)


def _tflite_float_table(name: str, q_in: ActivationQuant, q_out: ActivationQuant) -> np.ndarray:
    """LOGISTIC and TANH: TFLite fills a table in float32 arithmetic (``PopulateLookupTable``):
    dequantize, f, multiply by ``1 / s_out``, ``std::round``, add the zero point, clamp. Each
    float32 step is reproduced here; exp and tanh are evaluated in float64 and rounded once to
    float32, which is what a correctly rounded libm returns."""
    codes = np.arange(INT8_MIN, INT8_MAX + 1)
    x = np.float32(q_in.scale) * (codes - q_in.zero_point).astype(np.float32)
    if name == "sigmoid":
        y = np.float32(1) / (np.float32(1) + np.exp(-x.astype(np.float64)).astype(np.float32))
    else:
        y = np.tanh(x.astype(np.float64)).astype(np.float32)
    scaled = y * (np.float32(1) / np.float32(q_out.scale))
    return np.clip(_round_half_away(scaled.astype(np.float64)) + q_out.zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


def _tflite_hard_swish_table(q_in: ActivationQuant, q_out: ActivationQuant) -> np.ndarray:
    """HARD_SWISH: TFLite's reference int8 kernel, in 16-bit fixed point, on every input code.

    The input moves to a 7-bit finer scale; ``x * relu6(x + 3) / 6`` is then ``x`` on the output
    scale times a "reluish" factor in [0, 1]: ``x / 3`` saturated to [-1, 1] in Q0.15 and mapped
    to [0, 1]. The multipliers come from float32 scale ratios, as TFLite's Prepare computes them."""
    hires_scale = np.float32(1.0 / 128.0) * np.float32(q_in.scale)
    out_multiplier, out_exponent = qarith.int16_multiplier(float(hires_scale / np.float32(q_out.scale)))
    relu_multiplier, relu_exponent = qarith.int16_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    if out_exponent > 0:
        raise ValueError(f"HARD_SWISH output scale {q_out.scale} is too small for input scale {q_in.scale} (TFLite refuses it too)")

    codes = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    hires = (codes - q_in.zero_point) * 128
    on_output_scale = qarith.saturating_rounding_doubling_high_mul16(hires, out_multiplier)
    reluish = hires
    if relu_exponent > 0:  # left shifts saturate, the last bit after the multiply
        reluish = qarith.saturating_left_shift16(reluish, relu_exponent - 1)
    reluish = qarith.saturating_rounding_doubling_high_mul16(reluish, relu_multiplier)
    if relu_exponent > 0:
        reluish = qarith.saturating_left_shift16(reluish, 1)
    if relu_exponent < 0:
        reluish = qarith.rounding_divide_by_pot(reluish, -relu_exponent)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
    product = qarith.saturating_doubling_high_mul16(reluish, on_output_scale)
    out = qarith.rounding_divide_by_pot(product, -out_exponent) + q_out.zero_point
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


def tflite_table(name: str, q_in: ActivationQuant, q_out: ActivationQuant) -> np.ndarray:
    """The int8 table of TFLite's own kernel for LOGISTIC, TANH or HARD_SWISH (its reference
    kernels and its optimized ones agree on these), index: input code + 128."""
    if name in ("sigmoid", "tanh"):
        return _tflite_float_table(name, q_in, q_out)
    if name == "hardswish":
        return _tflite_hard_swish_table(q_in, q_out)
    raise ValueError(f"TFLite has no int8 kernel of its own for {name!r}; known: {', '.join(TFLITE_FUNCTIONS)}")
