"""The ops of today's edge CNNs beyond ResNets: squeeze-and-excitation (a product of a tensor and a
per-channel gate), products of two tensors, and batch norm that no convolution precedes."""

import ctypes

import numpy as np
import pytest
import torch

from byoc_int8 import qarith, reference
from byoc_int8.graph import Node
from byoc_int8.pipeline import compile_model, evaluate
from byoc_int8.quantize import QNode
from conftest import assert_one_int8_region, ptr

i8 = ctypes.c_int8


class MulParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("multiplier", "shift", "input1_zero_point", "input2_zero_point",
                                               "output_zero_point", "act_min", "act_max")]


@pytest.mark.parametrize("seed", range(30))
def test_mul_kernel_matches_the_reference(kernels, seed):
    rng = np.random.default_rng(seed)
    n, h, w, c = (int(d) for d in rng.integers(1, 6, 4))
    broadcast = bool(rng.integers(0, 2))
    x1 = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    x2 = rng.integers(-128, 128, (n, 1, 1, c) if broadcast else (n, h, w, c), dtype=np.int8)
    s1, s2, s_out = np.exp(rng.uniform(-4, 0, 3))
    z1, z2 = (int(z) for z in rng.integers(-128, 128, 2))
    z_out = int(rng.integers(-40, 41))
    act = (z_out, 127) if rng.random() < 0.3 else (-128, 127)
    requant = qarith.quantize_multiplier(s1 * s2 / s_out)
    q = QNode(Node("mul", [0, 1], 2), {"requant": requant, "input1_zero_point": z1, "input2_zero_point": z2,
                                       "output_zero_point": z_out, "act_min": act[0], "act_max": act[1]}, kernels.rounding)
    expected = reference.mul(x1, x2, q)
    out = np.zeros_like(x1)
    params = MulParams(requant.multiplier, requant.shift, z1, z2, z_out, *act)
    assert kernels.b8_mul_s8(ctypes.byref(params), n, h * w, c, int(broadcast), ptr(x1, i8), ptr(np.ascontiguousarray(x2), i8),
                             ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, expected)
    # And it is the product of the real values, to within an output LSB where not clamped.
    real = (x1.astype(np.float64) - z1) * s1 * (x2.astype(np.float64) - z2) * s2 / s_out + z_out
    inside = (real > act[0] + 1) & (real < act[1] - 1)
    assert np.all(np.abs(out[inside] - real[inside]) <= 1.0)


class SqueezeExcite(torch.nn.Module):
    """MobileNetV3 / EfficientNet's block: global pool -> 1x1 conv -> relu -> 1x1 conv -> gate."""

    def __init__(self, gate: torch.nn.Module, gate_first: bool = False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.reduce, self.expand, self.gate = torch.nn.Conv2d(16, 4, 1), torch.nn.Conv2d(4, 16, 1), gate
        self.gate_first = gate_first  # torchvision's SqueezeExcitation writes scale * input

    def forward(self, x):
        x = torch.nn.functional.hardswish(self.conv(x))
        scale = self.gate(self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))))
        return scale * x if self.gate_first else x * scale


class BatchNormAfterRelu(torch.nn.Module):
    """DenseNet's BN -> ReLU -> conv order: the batch norm follows a relu, not a convolution."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.out = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Conv2d(8, 4, 1)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.rand(8, generator=generator) * 2 - 1)
            self.bn.running_var.copy_(torch.rand(8, generator=generator) + 0.5)
            self.bn.weight.copy_(torch.rand(8, generator=generator) + 0.5)

    def forward(self, x):
        return self.out(torch.relu(self.bn(torch.relu(self.conv(x)))))


class Product(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.a(x) * self.b(x)


BLOCKS = {
    "se-sigmoid": lambda: SqueezeExcite(torch.nn.Sigmoid()),
    "se-hardsigmoid-gate-first": lambda: SqueezeExcite(torch.nn.Hardsigmoid(), gate_first=True),
    "bn-after-relu": BatchNormAfterRelu,
    "product": Product,
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("seed", range(3))
def test_block_runs_in_one_int8_region(name, seed):
    torch.manual_seed(seed)  # the weights, whatever ran before
    assert_one_int8_region(BLOCKS[name](), (3, 12, 12))


def test_multiply_by_a_constant_is_refused_with_a_reason():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x) * torch.linspace(0.5, 2.0, 4).reshape(1, 4, 1, 1)

    calib = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    compiled = compile_model(Scaled().eval(), calib)
    reasons = {h["op"]: h["reason"] for h in compiled.host_ops}
    assert reasons["relax.multiply"] == "multiply by a constant (only products of two tensors)"


@pytest.mark.parametrize("seed", range(30))
def test_slice_kernel_matches_the_reference(kernels, seed):
    from byoc_int8 import layout
    from byoc_int8.graph import Graph
    from byoc_int8.quantize import quantize_node

    rng = np.random.default_rng(seed)
    rank = int(rng.choice([2, 3, 4]))
    shape = (1, *(int(d) for d in rng.integers(1, 9, rank - 1)))
    begin = [0] + [int(rng.integers(0, d)) for d in shape[1:]]
    stride = [1] + [int(rng.integers(1, 4)) for _ in shape[1:]]
    end = [1] + [int(rng.integers(b + 1, d + 1)) for b, d in zip(begin[1:], shape[1:])]
    out_shape = tuple(len(range(b, e, s)) for b, e, s in zip(begin, end, stride))
    node = Node("slice", [0], 1, {"begin": begin, "end": end, "stride": stride})
    quant = qarith.ActivationQuant(0.1, 3)
    q = quantize_node(node, Graph("t", [0], [1], {0: shape, 1: out_shape}, [node]), {0: quant, 1: quant}, "tflite")
    x = rng.integers(-128, 128, layout.storage_shape(shape), dtype=np.int8)
    out = np.zeros(int(np.prod(out_shape)), np.int8)
    p = q.params
    ints = [np.ascontiguousarray(p[k], dtype=np.int32) for k in ("shape", "begin", "stride", "out_shape")]
    assert kernels.b8_slice_s8(rank, *[ptr(a, ctypes.c_int32) for a in ints], ptr(x, i8), ptr(out, i8)) == 0
    np.testing.assert_array_equal(out, reference.slice_(x, q).ravel())


class ChannelSplitShuffle(torch.nn.Module):
    """ShuffleNetV2's unit: chunk the channels, transform one half, concat, shuffle; plus a
    strided slice and an uneven split."""

    def __init__(self):
        super().__init__()
        self.conv, self.branch = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        x = self.conv(x)
        a, b = x.chunk(2, dim=1)
        y = torch.cat([a, torch.relu(self.branch(b))], 1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return y, x[:, :, 1:7:2, :], torch.split(x, [3, 5], dim=1)[1]


def test_channel_split_shuffle_and_slices_run_in_int8():
    assert_one_int8_region(ChannelSplitShuffle(), (3, 10, 10))


def test_degenerate_tensors_and_outputs_are_warned_about():
    """A branch that is 0 on every calibration input (a relu of a negative constant shift) and a
    model whose float output is ~0: the report says so instead of a bare cosine."""

    class DeadBranch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            with torch.no_grad():
                self.conv.weight.zero_()
                self.conv.bias.fill_(-1.0)

        def forward(self, x):
            return torch.relu(self.conv(x))

    calib = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    model = DeadBranch().eval()
    report = evaluate(compile_model(model, calib), model, calib[:2], latency_runs=1, layers=[])
    assert report["bit_exact"]
    assert any("is 0 on every calibration input" in w for w in report["warnings"])
    assert any("float model's output is ~0" in w for w in report["warnings"])
