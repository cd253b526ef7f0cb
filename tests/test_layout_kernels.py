"""Average pooling, clip and the layout kernels (transpose, reshape, pad, concat) against the
integer reference, bit for bit. Parameters come from quantize_node, as the C emitter gets them."""

import math

import numpy as np
import pytest

import kernel_calls
from byoc_int8 import layout, qarith, reference
from byoc_int8.graph import Graph, Node
from byoc_int8.quantize import quantize_node

SEEDS = range(30)


def quantized(op, in_shapes, out_shape, attrs, quants, rounding="single"):
    """A QNode for one op whose inputs are values 0..k-1 and output value k; `quants` are their
    ActivationQuants (or plain scales, zero point 0)."""
    k = len(in_shapes)
    shapes = {**dict(enumerate(in_shapes)), k: out_shape}
    node = Node(op, list(range(k)), k, attrs, composite=f"ccompiler.{op}")
    quants = [q if isinstance(q, qarith.ActivationQuant) else qarith.ActivationQuant(q) for q in quants]
    return quantize_node(node, Graph("test", list(range(k)), [k], shapes, [node]), dict(enumerate(quants)), rounding)


def random_quant(rng) -> qarith.ActivationQuant:
    """A scale in [e^-3, 1] and a zero point: 0 half the time (symmetric), else anywhere in int8."""
    zero_point = 0 if rng.random() < 0.5 else int(rng.integers(-128, 128))
    return qarith.ActivationQuant(float(np.exp(rng.uniform(-3, 0))), zero_point)


def random_int8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def in_c(kernels, kernel, case):
    """The C kernel's output on a kernel_calls case (it must accept the case)."""
    status, out = kernel_calls.run(kernels, kernel, case)
    assert status == 0
    return out


def transpose_in_c(kernels, x, step):
    shape, perm = step
    return in_c(kernels, "transpose", {"x": np.ascontiguousarray(x).reshape(shape), "perm": list(perm)})


@pytest.mark.parametrize("seed", SEEDS)
def test_avg_pool2d(kernels, seed):
    rng = np.random.default_rng(seed)
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    n, c, h, w = 1, int(rng.integers(1, 6)), int(rng.integers(kh, 10)), int(rng.integers(kw, 10))
    ceil_mode, include_pad = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))

    def size(x, k, s, p):
        span = x + 2 * p - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        return out - 1 if ceil_mode and (out - 1) * s >= x + p else out  # PyTorch's last-window rule

    oh, ow = size(h, kh, sh, ph), size(w, kw, sw, pw)
    attrs = {"pool_size": [kh, kw], "strides": [sh, sw], "padding": [ph, pw, ph, pw], "dilation": [1, 1],
             "ceil_mode": ceil_mode, "count_include_pad": include_pad}
    quant = random_quant(rng)  # the output keeps it
    q = quantized("avg_pool2d", [(n, c, h, w)], (n, c, oh, ow), attrs, [quant, quant], kernels.rounding)
    x = random_int8(rng, (n, h, w, c))
    expected = reference.avg_pool2d(x, q, (n, c, oh, ow))
    out = in_c(kernels, "avg_pool2d", {"x": x, "kernel": (kh, kw), "strides": (sh, sw), "padding": (ph, pw),
                                       "out_hw": (oh, ow), "count_include_pad": include_pad,
                                       "pad_value": q.params["pad_value"]})
    np.testing.assert_array_equal(out, expected)
    # And it is an average of the real values (padding is real 0): within half an LSB.
    import torch

    exact = torch.nn.functional.avg_pool2d(
        torch.from_numpy(layout.to_logical(x).astype(np.float64) - quant.zero_point), (kh, kw), (sh, sw), (ph, pw),
        ceil_mode, include_pad,
    ).numpy() + quant.zero_point
    inside = np.abs(exact) < 126
    assert np.all(np.abs(layout.to_logical(out)[inside] - exact[inside]) <= 0.5 + 1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_clip(kernels, seed):
    rng = np.random.default_rng(seed)
    scale = float(np.exp(rng.uniform(-4, 0)))
    lo, hi = sorted(rng.uniform(-130, 130, 2) * scale)
    q = quantized("clip", [(1, 50)], (1, 50), {"clip": (lo, hi)}, [scale, scale])
    x = random_int8(rng, (1, 50))
    out = in_c(kernels, "clip", {"x": x, "act": (q.params["act_min"], q.params["act_max"])})
    np.testing.assert_array_equal(out, reference.clip(x, q))
    # The int8 bounds are the float bounds on the int8 grid.
    assert abs(q.params["act_min"] * scale - max(lo, -128 * scale)) <= scale / 2 + 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_transpose(kernels, seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 6))
    shape = tuple(int(d) for d in rng.integers(1, 5, rank))
    axes = (0, *[int(a) + 1 for a in rng.permutation(rank - 1)])
    out_shape = tuple(shape[a] for a in axes)
    q = quantized("transpose", [shape], out_shape, {"axes": list(axes)}, [1.0, 1.0])
    x = random_int8(rng, layout.storage_shape(shape))
    expected = reference.transpose(x, q)
    step = q.params["transpose"]
    got = x.ravel() if step is None else transpose_in_c(kernels, x, step)  # None: the same bytes
    np.testing.assert_array_equal(got, expected.ravel())


@pytest.mark.parametrize("seed", SEEDS)
def test_reshape(kernels, seed):
    """Between any ranks, 4-D (NHWC-stored) included, as at least one transpose or none."""
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(1, 5, 4)]
    in_shape = (1, *dims[:3]) if rng.random() < 0.3 else (1, *dims)
    total = math.prod(in_shape)
    out_shape = [(1, total), (1, total // dims[0], dims[0]), (1, dims[0], 1, total // dims[0]),
                 (1, total // dims[1], dims[1], 1)][int(rng.integers(0, 4))]
    if math.prod(out_shape) != total:
        out_shape = (1, total)
    q = quantized("reshape", [in_shape], out_shape, {}, [1.0, 1.0])
    x = random_int8(rng, layout.storage_shape(in_shape))
    got = x.ravel()
    for step in (q.params["to_logical"], q.params["to_stored"]):
        if step is not None:
            got = transpose_in_c(kernels, got, step)
    np.testing.assert_array_equal(got, reference.reshape(x, q, out_shape).ravel())


@pytest.mark.parametrize("seed", SEEDS)
def test_pad(kernels, seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    shape = tuple(int(d) for d in rng.integers(1, 5, rank))
    pads = [(0, 0)] + [tuple(int(p) for p in rng.integers(0, 3, 2)) for _ in range(rank - 1)]
    out_shape = tuple(d + a + b for d, (a, b) in zip(shape, pads))
    quant = qarith.ActivationQuant(0.05, 0 if rng.random() < 0.5 else int(rng.integers(-128, 128)))
    q = quantized("pad", [shape], out_shape, {"pads": pads, "value": float(rng.uniform(-8, 8))}, [quant, quant])
    x = random_int8(rng, layout.storage_shape(shape))
    pads = [(int(a), int(b)) for a, b in np.reshape(q.params["pads"], (-1, 2))]  # stored order
    case = {"x": x.reshape(q.params["shape"]), "pads": pads, "value": q.params["value"]}
    np.testing.assert_array_equal(in_c(kernels, "pad", case), reference.pad(x, q).ravel())


@pytest.mark.parametrize("seed", SEEDS)
def test_concat(kernels, seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.choice([2, 4]))
    axis = int(rng.integers(1, rank))
    base = [int(d) for d in rng.integers(1, 5, rank)]
    base[0] = 1
    k = int(rng.integers(2, 4))
    shapes = []
    for _ in range(k):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 5))
        shapes.append(tuple(shape))
    out_shape = list(base)
    out_shape[axis] = sum(s[axis] for s in shapes)
    q = quantized("concat", shapes, tuple(out_shape), {"axis": axis}, [random_quant(rng) for _ in range(k + 1)],
                  kernels.rounding)
    xs = [random_int8(rng, layout.storage_shape(s)) for s in shapes]
    p = q.params
    case = {"inputs": [x.reshape(p["outer"], inner) for x, inner in zip(xs, p["inner"])], "outer": p["outer"],
            "multiplier": p["multiplier"], "shift": p["shift"], "zero_points": p["zero_points"],
            "output_zero_point": p["output_zero_point"]}
    np.testing.assert_array_equal(in_c(kernels, "concat", case).ravel(), reference.concat(xs, q).ravel())
