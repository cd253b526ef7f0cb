"""Every op a CNN needs, in int8: small models per op family, the two host-op modes, and the
real networks of the coverage table."""

import numpy as np
import pytest
import torch
from torch import nn

from byoc_int8 import cli, reference
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.partition import Int8OnlyError
from byoc_int8.pipeline import compile_model, evaluate


def check_all_int8(model, input_shape, calib_count=16, eval_count=3, min_cosine=0.999):
    """Compiled for input_shape's batch, every op int8 in one region, bit-exact with the golden
    reference and close to float."""
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((calib_count, *input_shape[1:])).astype(np.float32)
    compiled = compile_model(model.eval(), calib, example_inputs=(torch.from_numpy(calib[: input_shape[0]]),))
    report = evaluate(compiled, model, rng.standard_normal((eval_count, *input_shape[1:])).astype(np.float32), latency_runs=1)
    assert report["host_ops"] == [], report["host_ops"]
    assert report["ops_offloaded"] == report["ops_total"] and report["regions"] == 1
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= min_cosine
    return report


class Branches(nn.Module):
    """concat of two branches whose ranges differ 4x, permute, pad, reshape, dense in the middle."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 6, 1)
        self.b = nn.Conv2d(4, 3, 3, padding=1)
        self.fc1 = nn.Linear(9 * 7 * 8, 32)
        self.fc2 = nn.Linear(32, 5)
        with torch.no_grad():
            self.b.weight.mul_(4.0)  # the two branches meet with very different ranges

    def forward(self, x):
        y = torch.cat([torch.relu(self.a(x)), self.b(x)], dim=1)
        y = nn.functional.pad(y, (1, 2, 0, 1))  # W: 1 left, 2 right; H: 1 bottom
        y = y.permute(0, 2, 3, 1)  # NHWC
        y = torch.relu(self.fc1(y.reshape(y.shape[0], -1)))
        return self.fc2(y)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def test_grouped_and_depthwise_conv_with_relu6_hardtanh_clamp():
    model = nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1, groups=2), nn.ReLU6(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8), nn.Hardtanh(-1.0, 2.0),  # depthwise x2
        nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16, bias=False),
    )

    class Clamped(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return torch.clamp(self.body(x), min=-0.5)

    check_all_int8(Clamped(), (1, 4, 11, 9))


def test_average_pools():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(),
        nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        nn.AvgPool2d(2, stride=1, count_include_pad=True),
        nn.AdaptiveAvgPool2d((2, 2)), nn.Conv2d(8, 4, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )
    check_all_int8(model, (1, 3, 15, 15))  # 13 -> 7 (ceil) -> 6 -> 2x2 windows of 3x3


def test_concat_layout_changes_and_dense_in_the_middle():
    # One scale for both branches costs the small one about two bits: a looser bound.
    report = check_all_int8(Branches(), (1, 4, 6, 5), min_cosine=0.995)
    assert report["ops_total"] >= 10


class ConcatInputs(nn.Module):
    """A concatenation's inputs of every kind: convolutions made only for it (one through a
    nested concatenation), a convolution's output that another convolution also reads, and a
    max pool, which keeps its input's encoding."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Conv2d(4, 6, k, padding=k // 2) for k in (1, 3, 1, 1))
        self.e = nn.Conv2d(6, 6, 1)
        with torch.no_grad():
            self.a.weight.mul_(4.0)  # the widest input: the concatenation's range is about a's
            self.b.weight.mul_(0.25)

    def forward(self, x):
        b = self.b(x)
        inner = torch.cat([torch.relu(self.a(x)), self.c(x)], dim=1)
        pooled = nn.functional.max_pool2d(self.d(x), 3, stride=1, padding=1)
        return torch.cat([inner, b, pooled, self.e(torch.relu(b))], dim=1)


def test_a_concatenation_s_own_inputs_take_its_encoding():
    """Inputs made only for a concatenation by a requantizing op take its scale and zero point
    (TFLite's int8 rule), so it copies them; the others keep theirs and are rescaled."""
    model = ConcatInputs().eval()
    calib = np.random.default_rng(0).standard_normal((16, 4, 7, 6)).astype(np.float32)
    compiled = compile_model(model, calib)
    (qgraph,) = reference.quantized_regions(compiled.module).values()
    concats = [q for q in qgraph.nodes if q.op == "concat"]
    assert len(concats) == 2
    inner, outer = concats
    out = qgraph.quants[outer.node.output]
    assert outer.node.inputs[0] == inner.node.output
    assert [qgraph.quants[v] == out for v in inner.node.inputs + outer.node.inputs] == [True, True, True, False, False, True]
    assert qgraph.quants[outer.node.inputs[1]].scale < out.scale / 1.5  # b, also read by e: its own, finer
    pool = next(q for q in qgraph.nodes if q.op == "max_pool2d")
    assert qgraph.quants[outer.node.inputs[2]] == qgraph.quants[pool.node.inputs[0]]  # the pool keeps d's
    report = evaluate(compiled, model, calib[:3], latency_runs=1)
    assert report["bit_exact"] and report["regions"] == 1 and report["cosine_vs_float"] >= 0.999


def test_strict_mode_lists_every_op_and_default_mode_runs_a_host_island():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Softmax(dim=1), nn.Conv2d(8, 4, 1), nn.Flatten(),
        nn.Linear(4 * 6 * 6, 5), nn.LayerNorm(5),
    ).eval()
    calib = np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32)
    with pytest.raises(Int8OnlyError) as err:
        compile_model(model, calib, int8_only=True)
    message = str(err.value)
    assert "2 op(s) cannot run in int8" in message
    assert "relax.nn.softmax" in message and "relax.nn.layer_norm" in message
    assert "no ccompiler pattern for relax.nn.softmax" in message
    assert [h.op for h in err.value.host_ops] == ["relax.nn.softmax", "relax.nn.layer_norm"]

    compiled = compile_model(model, calib)
    report = evaluate(compiled, model, calib[:4], latency_runs=1)
    assert [h["op"] for h in report["host_ops"]] == ["relax.nn.softmax", "relax.nn.layer_norm"]
    assert report["regions"] == 2 and report["boundary_crossings"] == 4
    assert report["ops_offloaded"] == report["ops_total"] - 2
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] > 0.999
    assert {layer["layer"].split("/")[0] for layer in report["layers"]} == {"0", "1"}


def test_cli_int8_only_refuses(tmp_path, capsys):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Softmax(dim=1)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 8, 8),)), tmp_path / "m.pt2")
    np.save(tmp_path / "c.npy", np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32))
    args = ["compile", "--model", str(tmp_path / "m.pt2"), "--calib", str(tmp_path / "c.npy"), "-o", str(tmp_path / "m.so")]
    assert cli.main(args + ["--int8-only", "--quiet"]) == 2
    assert "relax.nn.softmax" in capsys.readouterr().err
    assert not (tmp_path / "m.so").exists()
    assert cli.main(args + ["--quiet"]) == 0 and (tmp_path / "m.so").exists()


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "squeezenet1_1", "vgg11_bn", "seed002"])
def test_real_networks_run_all_int8(name):
    spec = BUILTIN_MODELS[name]
    model = spec.make()
    compiled = compile_model(model, spec.calibration_inputs(16), int8_only=True)
    report = evaluate(compiled, model, spec.evaluation_set(3)[0], latency_runs=1, layers=[])
    assert report["ops_offloaded"] == report["ops_total"] and report["regions"] == 1
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= 0.999


class OddAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 3, 3), nn.Conv2d(3, 3, 3)

    def forward(self, x):
        # 3 x 1 x 43 = 129 values: 2 x 64 + 1, the case a chunk rounding can drop; one row.
        return torch.relu(self.a(x) + self.b(x))


class WideDense(nn.Module):
    """A fully connected layer of 520 x 260 = 135200 MACs per image, past the size from which the
    adapter splits one (B8_DENSE_SPLIT_MACS): over its units for one image, over the images of a
    batch where the region runs them together (its pad is not an image-by-image op)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(520, 260)

    def forward(self, x):
        return self.fc(nn.functional.pad(x, (0, 4)))


def test_work_split_over_threads_covers_odd_sizes():
    """Adds, convolutions and fully connected layers whose sizes do not divide among the pool's
    threads stay bit-exact: no element is skipped or written twice. Run in a fresh process with
    TVM_NUM_THREADS=2, whatever the test command's environment says (TVM sizes its pool once per
    process; left to itself it may pick one thread), and that process checks that TVM's pool has
    two threads, so that every parallel launch of the generated code (num_task 0: one task per
    pool thread) ran two tasks."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import torch, tvm, test_coverage\n"
        "torch.manual_seed(0)  # the weights the seeded fixture gives in-process\n"
        "test_coverage.check_all_int8(test_coverage.OddAdd(), (1, 3, 3, 45))\n"
        "test_coverage.check_all_int8(test_coverage.WideDense(), (1, 516))  # units 130 + 130\n"
        "test_coverage.check_all_int8(test_coverage.WideDense(), (3, 516))  # images 2 + 1\n"
        "threads = tvm.get_global_func('runtime.NumThreads')()\n"
        "assert threads == 2, f'TVM runs {threads} thread(s)'\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent, check=True,
                   env={**os.environ, "TVM_NUM_THREADS": "2"})
