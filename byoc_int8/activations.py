"""Elementwise activations as 256-entry int8 lookup tables.

A function of one int8 tensor has only 256 possible inputs, so it is exactly a table, built at
compile time from the input and output encodings: entry ``q + 128`` holds
``clamp(round(f(s_in * (q - z_in)) / s_out) + z_out)``. The float function is defined once, here,
with PyTorch: calibration runs it on float tensors and the table evaluates it in float64, so the
int8 result is f rounded to the nearest output code (within half an LSB, before clamping).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

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
