"""Graph fuzzing, a fixed budgeted sample: random small CNNs (tests/graph_gen.py) compiled end to
end, the C library bit-exact with the integer reference, no compiler error.

A graph made only of ops the int8 kernels cover is compiled with ``int8_only=True`` and must give
one region (its default-mode compile is the same partition: without host ops the two modes only
differ in whether a host op raises); a graph with a host op (multiply by a constant, layer norm,
softmax, ...) is compiled in default mode, where that op runs on the host between regions. The
graphs cycle through every number format. ``BYOC_INT8_FUZZ_GRAPHS=N`` raises the sample (default
16); ``benchmarks/fuzz_graphs.py`` runs the full campaign and prints a reproduction per failure.
"""

import itertools
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from byoc_int8.qarith import ACTIVATIONS, ROUNDINGS, NumberFormat
from conftest import assert_one_int8_region
from graph_gen import LOW_COSINE, check, generate

GRAPHS = int(os.environ.get("BYOC_INT8_FUZZ_GRAPHS", "16"))
FORMATS = [NumberFormat(a, r) for a, r in itertools.product(ACTIVATIONS, ROUNDINGS)]


@pytest.mark.parametrize("seed", range(GRAPHS))
def test_random_graph_compiles_bit_exact(seed):
    spec = generate(seed)
    fmt = FORMATS[seed % len(FORMATS)]
    outcome = check(spec, int8_only=spec.int8, number_format=fmt)
    repro = f"graph seed {seed} ({spec.summary()}), {fmt}:\n{spec.repro(spec.int8, fmt.activations, fmt.rounding)}"
    assert outcome.ok, f"{outcome.problems}\n{outcome.traceback or ''}\n{repro}"
    assert outcome.bit_exact
    if spec.int8:
        assert outcome.regions == 1 and outcome.host_ops == []
    else:
        assert outcome.host_ops, f"expected {spec.host_ops} on the host\n{repro}"
    assert not outcome.low_cosine, f"cosine {outcome.cosine} < {LOW_COSINE} with no warning\n{repro}"


def test_generator_is_reproducible_and_covers_every_op():
    """The same seed gives the same source; a few dozen seeds use every kind of op the fuzzer
    knows, and the model each source builds has the output shape the generator recorded."""
    assert generate(7).source == generate(7).source
    assert generate(7).source != generate(8).source
    specs = [generate(seed) for seed in range(60)]
    kinds = {op.split("(")[0] for spec in specs for op in spec.ops}
    expected = {"conv2d", "dwconv2d", "gconv2d", "bn_folded", "bn", "relu", "relu6", "clamp", "hardtanh",
                "sigmoid", "tanh", "hardsigmoid", "hardswish", "silu", "gelu", "gelu_tanh", "elu", "leaky_relu",
                "mish", "mul_gate", "mul", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "global_avg_pool",
                "flatten", "tokens", "linear", "concat2", "concat3", "add", "chunk", "split", "shuffle", "slice",
                "pad", "transpose"}
    assert expected <= kinds, expected - kinds
    assert any(not spec.int8 for spec in specs) and any(spec.int8 for spec in specs)
    with torch.no_grad():
        for spec in specs[:20]:
            assert tuple(spec.build()(torch.zeros(spec.input_shape)).shape) == spec.output_shape


# ---- The fuzzer's findings, minimised -----------------------------------------------------------


class OneValueTwice(nn.Module):
    """An op that reads one value twice: FuseOpsByPattern gives its composite one parameter for
    both operands (concat / add / mul read the wrong or a missing input before graph._operands)."""

    def __init__(self, op: str):
        super().__init__()
        self.conv, self.op = nn.Conv2d(3, 4, 3), op

    def forward(self, x):
        y = self.conv(x)
        if self.op == "concat":
            return torch.cat([y, torch.relu(y), y], 1)
        return y + y if self.op == "add" else y * y


@pytest.mark.parametrize("op", ["concat", "add", "mul"])
def test_an_op_that_reads_one_value_twice(op):
    torch.manual_seed(0)
    assert_one_int8_region(OneValueTwice(op), (3, 8, 8))


class PerPositionLinear(nn.Module):
    """A linear layer over (N, H*W, C) tokens: TVM writes it as matmul(broadcast_to(x), W[None]),
    which frontend._batched_linear_as_dense makes a rank-3 dense; its bias is per unit, on the
    last axis (patterns._check_dense)."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(2).transpose(1, 2))


def test_a_linear_layer_over_tokens_runs_in_int8():
    torch.manual_seed(0)
    assert_one_int8_region(PerPositionLinear(), (3, 8, 8))


class PadOutsideItsRange(nn.Module):
    """Padding a relu's output with -1: the pad keeps its input's encoding, which must hold -1
    (quantize.activation_quants widens it; before, the border was 0 and the cosine 0.44)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return F.pad(torch.relu(self.conv(x)).reshape(1, 4, 6, 6), (1, 1, 2, 0), value=-1.0)


def test_a_pad_value_outside_the_range_of_what_it_pads():
    torch.manual_seed(0)
    assert_one_int8_region(PadOutsideItsRange(), (3, 8, 8))
