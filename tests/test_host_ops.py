"""Ops left on the host (default mode) run through TVM whatever they are: ops that return tuples
(split, batch_norm -> TupleGetItem), tuple-valued arguments, tuples of prim values (strided_slice),
shapes that bake in the exported batch (ConvNeXt's reshapes to (H*W, C)), scalars per sample, and
calibration batches of any size, whatever the exported batch."""

import json

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax

from byoc_int8.calibrate import calibrate
from byoc_int8.frontend import import_model
from byoc_int8.host import HostOpRunner
from byoc_int8.partition import partition, region_functions, run_partitioned
from byoc_int8.pipeline import compile_model, evaluate
from byoc_int8.quantize import RANGES_ATTR


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def _no_regions(name, args):
    raise AssertionError(f"no region expected, got {name}")


def _per_export_batch(mod: tvm.IRModule, x: np.ndarray) -> list[np.ndarray]:
    """What the interpreter must give for a batch: the compiled main, run on one exported batch
    after another (the last one completed by repeating its samples), each output stacked on
    axis 0 (scalars: one per exported batch)."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    b0 = int(mod["main"].params[0].ty.shape.values[0])
    outs = []
    for start in range(0, len(x), b0):
        group = x[start : start + b0]
        keep = len(group)
        group = group[np.arange(b0) % keep]
        result = vm["main"](tvm.runtime.tensor(group))
        outs.append([r.numpy()[:keep] if r.numpy().ndim else r.numpy() for r in result])
    return [np.concatenate(o) if o[0].ndim else np.stack(o) for o in zip(*outs)]


def _main(params, body) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb))
        bb.emit_func_output(out)
    return bb.get()


def _check_interpreter(mod: tvm.IRModule, x: np.ndarray):
    host = HostOpRunner()
    got = run_partitioned(mod, _no_regions, [x], host.run)
    got_torch = run_partitioned(mod, _no_regions, [torch.from_numpy(x)], host.run_torch)
    expected = _per_export_batch(mod, x)
    assert len(got) == len(expected)
    for g, t, e in zip(got, got_torch, expected):
        np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(t.numpy(), e)


def test_host_ops_that_return_tuples_or_take_them():
    """split and batch_norm return tuples (read through TupleGetItem); concat takes a tuple-valued
    variable; strided_slice takes tuples of prim values. Calibration crashed on the first
    ('Array' object has no attribute 'numpy', ShuffleNet, DenseNet)."""
    x = relax.Var("x", relax.TensorType([1, 8, 4, 4], "float32"))
    rng = np.random.default_rng(0)
    gamma, beta, mean = (relax.const(rng.standard_normal(8).astype(np.float32)) for _ in range(3))
    var = relax.const(rng.uniform(0.5, 2, 8).astype(np.float32))

    def body(bb):
        parts = bb.emit(relax.op.split(x, 2, axis=1))
        a, b = bb.emit(relax.TupleGetItem(parts, 0)), bb.emit(relax.TupleGetItem(parts, 1))
        pair = bb.emit(relax.Tuple([b, a]))
        shuffled = bb.emit(relax.op.concat(pair, axis=1))
        normed = bb.emit(relax.op.nn.batch_norm(shuffled, gamma, beta, mean, var, axis=1))
        rows = bb.emit(relax.op.strided_slice(relax.TupleGetItem(normed, 0), axes=[2], begin=[0], end=[4], strides=[2]))
        return relax.Tuple([rows, relax.TupleGetItem(parts, 1)])

    mod = _main([x], body)
    _check_interpreter(mod, rng.standard_normal((5, 8, 4, 4)).astype(np.float32))


def test_host_ops_whose_shapes_bake_in_the_exported_batch():
    """A reshape to (B*H*W, C) and back (ConvNeXt's linear layers), a scalar over the whole
    exported batch, and a value of constants alone, interpreted for 7 samples with the program
    exported for 2: 'match_cast error, shape[0] mismatch' before."""
    x = relax.Var("x", relax.TensorType([2, 4, 4, 8], "float32"))
    scale = relax.const(np.linspace(0.5, 2, 8, dtype=np.float32))
    ones = relax.const(np.ones((2, 4, 4, 8), np.float32))

    def body(bb):
        rows = bb.emit(relax.op.reshape(x, (32, 8)))
        rows = bb.emit(relax.op.multiply(rows, scale))
        back = bb.emit(relax.op.reshape(rows, (2, 4, 4, 8)))
        peak = bb.emit(relax.op.max(relax.op.abs(back)))
        peak = bb.emit(relax.op.add(peak, relax.const(1.0)))
        offset = bb.emit(relax.op.multiply(ones, relax.const(0.25)))  # constants alone: not stacked
        y = bb.emit(relax.op.add(relax.op.divide(back, peak), offset))
        return relax.Tuple([y, peak])

    mod = _main([x], body)
    x_value = np.random.default_rng(1).standard_normal((7, 4, 4, 8)).astype(np.float32)
    _check_interpreter(mod, x_value)
    _check_interpreter(mod, x_value[:2])  # exactly the exported batch
    _check_interpreter(mod, x_value[:1])  # less than one exported batch


# Small models, one per crash the torchvision networks showed, calibrated with a batch size that
# is not the exported batch (1): calibrate() takes 16 samples at a time.


def _compile_and_evaluate(model: nn.Module, shape=(3, 16, 16), calib_count=20, min_cosine=0.999):
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((calib_count, *shape)).astype(np.float32)
    compiled = compile_model(model.eval(), calib)
    report = evaluate(compiled, model, rng.standard_normal((3, *shape)).astype(np.float32), latency_runs=1)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= min_cosine
    return report


class ChunkShuffle(nn.Module):
    """ShuffleNet's unit: channel split (torch.chunk), a branch, concat, channel shuffle."""

    def __init__(self):
        super().__init__()
        self.stem, self.branch = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 4, 1)
        self.split_h = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        a, b = torch.chunk(torch.relu(self.stem(x)), 2, dim=1)
        y = torch.cat([a, torch.relu(self.branch(b))], 1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        top, bottom = torch.split(self.split_h(y), [6, 10], dim=2)  # uneven, along H
        return torch.cat([bottom, top], 2)


def test_chunk_split_concat_and_channel_shuffle():
    _compile_and_evaluate(ChunkShuffle())


class BatchNormAfterRelu(nn.Module):
    """DenseNet's BN -> ReLU -> conv (2-D), and a BatchNorm1d over flattened pixels, which stays
    a tuple-returning batch_norm on the host."""

    def __init__(self):
        super().__init__()
        self.conv, self.out = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
        self.bn2d, self.bn1d = nn.BatchNorm2d(8), nn.BatchNorm1d(8)
        with torch.no_grad():
            for bn in (self.bn2d, self.bn1d):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        y = torch.relu(self.bn2d(torch.relu(self.conv(x))))
        n, c, h, w = y.shape
        return self.out(self.bn1d(y.flatten(2)).reshape(n, c, h, w))


def test_batch_norm_after_relu():
    _compile_and_evaluate(BatchNormAfterRelu())


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7, permute to NHWC, layer norm over channels, linear - GELU -
    linear (reshapes to (H*W, C) that bake in the batch), layer scale, permute back, residual."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, stride=2)
        self.dw = nn.Conv2d(8, 8, 7, padding=3, groups=8)
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(8), nn.Linear(8, 32), nn.Linear(32, 8)
        self.gamma = nn.Parameter(torch.full((8,), 0.5))

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def test_convnext_block_layer_norm_and_batch_folding_reshapes():
    _compile_and_evaluate(ConvNeXtBlock())


class GlobalScale(nn.Module):
    """A scalar computed from each sample (the whole exported batch) divides the activations."""

    def __init__(self):
        super().__init__()
        self.conv, self.out = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(6, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return self.out(y / (y.abs().max() + 1.0))


def test_scalar_per_sample_on_the_host():
    _compile_and_evaluate(GlobalScale())


def _ranges(mod):
    regions = region_functions(mod)
    return {name: json.loads(str(f.attrs[RANGES_ATTR])) for name, f in regions.items()}


@pytest.mark.parametrize("export_batch", [1, 2])
def test_calibration_does_not_depend_on_the_batch_size(export_batch):
    """Calibrating 7 samples one exported batch at a time or 16 samples at a time sees the same
    values at every region boundary, host ops in between."""
    calib = np.random.default_rng(0).standard_normal((7, 3, 16, 16)).astype(np.float32)
    model = ConvNeXtBlock().eval()
    mod = partition(import_model(model, (torch.from_numpy(calib[:export_batch]),))).mod
    by_export_batch = _ranges(calibrate(mod, calib, batch_size=export_batch))
    by_16 = _ranges(calibrate(mod, calib, batch_size=16))
    assert by_export_batch.keys() == by_16.keys()
    for name in by_16:
        np.testing.assert_allclose(by_16[name], by_export_batch[name], rtol=1e-6, atol=1e-7)
