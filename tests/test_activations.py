"""Lookup-table activations: every function, kernel vs reference over all 256 inputs, table vs the
float function, and each as torch.export decomposes it, end to end in strict int8 mode."""

import ctypes

import numpy as np
import pytest
import torch

from byoc_int8 import activations, qarith, reference
from byoc_int8.graph import Node
from byoc_int8.pipeline import compile_model
from byoc_int8.quantize import QNode
from conftest import assert_one_int8_region, ptr

CODES = np.arange(-128, 128, dtype=np.int8)
# (input range, output range) pairs: narrow and wide inputs, symmetric and one-sided outputs.
RANGES = [((-8.0, 8.0), (-1.0, 1.0)), ((-0.5, 3.0), (-0.3, 3.0)), ((-20.0, 20.0), (-20.0, 20.0)), ((0.0, 6.0), (0.0, 6.0))]
ALPHA = {"elu": 0.7, "leaky_relu": 0.1}


@pytest.mark.parametrize("function", sorted(activations.FUNCTIONS))
@pytest.mark.parametrize("ranges", RANGES, ids=["narrow", "skewed", "wide", "one-sided"])
@pytest.mark.parametrize("activations_kind", ["symmetric", "asymmetric"])
def test_table_is_the_function_rounded_and_the_kernel_is_the_table(kernels, function, ranges, activations_kind):
    q_in = qarith.activation_quant(*ranges[0], activations_kind)
    q_out = qarith.activation_quant(*ranges[1], activations_kind)
    alpha = ALPHA.get(function, 0.0)
    table = activations.lookup_table(function, alpha, q_in, q_out)
    # Against the float function: within half an output LSB wherever the result is not clamped.
    real_in = torch.from_numpy(q_in.scale * (CODES.astype(np.float64) - q_in.zero_point))
    exact = activations.apply(function, real_in, alpha).numpy() / q_out.scale + q_out.zero_point
    inside = (exact >= -128) & (exact <= 127)
    assert np.all(np.abs(table[inside] - exact[inside]) <= 0.5 + 1e-9)
    assert np.all(table[exact < -128] == -128) and np.all(table[exact > 127] == 127)
    # The kernel over every input code equals the reference, which indexes the same table.
    expected = reference.lut(CODES, QNode(Node("lut", [0], 1, {"function": function, "alpha": alpha}), {"table": table}))
    out = np.zeros(256, np.int8)
    assert kernels.b8_lut_s8(256, ptr(table, ctypes.c_int8), ptr(CODES, ctypes.c_int8), ptr(out, ctypes.c_int8)) == 0
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out, table)


class Hardswish(torch.nn.Module):  # as written by hand: x * relu6(x + 3) / 6
    def forward(self, x):
        return x * torch.nn.functional.relu6(x + 3) / 6


class Swish(torch.nn.Module):  # x * sigmoid(x), either order
    def forward(self, x):
        return torch.sigmoid(x) * x


MODULES = {
    "sigmoid": torch.nn.Sigmoid(), "tanh": torch.nn.Tanh(), "hardsigmoid": torch.nn.Hardsigmoid(),
    "hardswish": torch.nn.Hardswish(), "hardswish_by_hand": Hardswish(), "silu": torch.nn.SiLU(),
    "swish_by_hand": Swish(), "gelu": torch.nn.GELU(), "gelu_tanh": torch.nn.GELU(approximate="tanh"),
    "elu": torch.nn.ELU(0.7), "leaky_relu": torch.nn.LeakyReLU(0.1), "mish": torch.nn.Mish(),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_activation_runs_in_int8_between_convolutions(name):
    torch.manual_seed(0)  # the weights, whatever ran before
    assert_one_int8_region(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), MODULES[name], torch.nn.Conv2d(8, 4, 1)), (3, 8, 8))


def test_a_lookalike_with_other_constants_is_not_taken_for_the_activation():
    class NotHardswish(torch.nn.Module):  # x * relu6(x + 2) / 6
        def forward(self, x):
            return x * torch.nn.functional.relu6(x + 2) / 6

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), NotHardswish()).eval()
    calib = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    compiled = compile_model(model, calib)
    # Not a hardswish: its x + 2 stays in float on the host (the product and the division are
    # ordinary ops around it).
    reasons = {h["op"]: h["reason"] for h in compiled.host_ops}
    assert reasons.get("relax.add") == "add of a constant that is not a fused bias"
