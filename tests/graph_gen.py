"""Random small CNNs for graph fuzzing: a seed -> the source of a standalone ``nn.Module``.

Shared by ``tests/test_graph_fuzz.py`` and ``benchmarks/fuzz_graphs.py``. Each graph is generated
as Python source (imports, an ``nn.Module`` class, a ``make_model()`` that seeds and initializes
its weights, ``INPUT_SHAPE``) and the module under test is built by executing exactly that
source, so the source printed for a failing graph *is* the reproduction::

    from graph_gen import generate
    graph = generate(17)
    model, shape = graph.build(), graph.input_shape
    print(graph.source)

The generator draws a chain of blocks over every op the int8 flow supports: conv2d (groups,
depthwise, dilation, padding, rectangular kernels and strides, with and without bias), batch norm
(foldable into the conv before it, and standalone after an activation), relu / relu6 / clamp /
hardtanh, the lookup-table activations, squeeze-excite gates, products of two tensors, max / avg
pooling (padding, ceil_mode, count_include_pad, dilation), adaptive and global average pooling,
residual adds, branches joined by concat, channel split (chunk / split) and shuffle, slicing,
constant padding, an H/W transpose, and heads (flatten / pooled / per-position linear). With
probability ``HOST_OP_PROBABILITY`` a graph also gets one op the int8 kernels do not cover
(multiply or add by a constant, broadcasting add, adaptive pooling with unequal windows, reflect
padding, layer norm, softmax): in default mode that op runs on the host between int8 regions.
``GraphSpec.int8`` is True when the graph has no such op, i.e. it should compile with
``int8_only=True`` into one region.

Sizes are kept small (spatial 8..32, channels 1..48) so that each compile takes seconds.
Weights are normal with std ``WEIGHT_GAIN / sqrt(fan_in)`` and batch norms get randomized
statistics, so activations stay O(1) through the graph.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

MAX_CHANNELS = 48
HOST_OP_PROBABILITY = 0.25
# Cosine vs float below which a graph without warnings is reported: on the 300 graphs of the
# campaign (3 number formats) int8 error alone stays above it once the pad encoding was fixed.
LOW_COSINE = 0.95
WEIGHT_GAIN = 1.5

LUT_ACTIVATIONS = ("sigmoid", "tanh", "hardsigmoid", "hardswish", "silu", "gelu", "gelu_tanh", "elu",
                   "leaky_relu", "mish")
CLIP_ACTIVATIONS = ("relu", "relu6", "clamp", "hardtanh")
HOST_OPS = ("mul_const", "add_const", "broadcast_add", "adaptive_unequal", "reflect_pad", "layer_norm", "softmax")

_PRELUDE = '''import torch
import torch.nn.functional as F
from torch import nn
'''

_MAKE_MODEL = '''

def make_model():
    """FuzzNet with seeded weights: normal, std {gain} / sqrt(fan_in); batch norms with random statistics."""
    torch.manual_seed({seed})
    model = FuzzNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.normal_(0.0, {gain} / m.weight[0].numel() ** 0.5)
                if m.bias is not None:
                    m.bias.uniform_(-0.2, 0.2)
            elif isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.2)
    return model.eval()


INPUT_SHAPE = {shape}
'''

_INPUTS = '''

def calibration_inputs(count=32):
    import numpy as np
    return np.random.default_rng([{seed}, 1]).standard_normal((count, *INPUT_SHAPE[1:])).astype(np.float32)


def evaluation_inputs(count=4):
    import numpy as np
    return np.random.default_rng([{seed}, 2]).standard_normal((count, *INPUT_SHAPE[1:])).astype(np.float32)
'''


@dataclass(frozen=True)
class T:
    """A tensor of the forward being written: its variable and its shape without the batch axis."""

    name: str
    shape: tuple[int, ...]


@dataclass
class GraphSpec:
    seed: int
    input_shape: tuple[int, ...]  # with the batch axis (1)
    source: str
    ops: list[str] = field(default_factory=list)  # every op, in the order written
    host_ops: list[str] = field(default_factory=list)  # ops expected to stay on the host
    output_shape: tuple[int, ...] = ()  # with the batch axis

    @property
    def int8(self) -> bool:
        """No op outside the int8 kernels: should compile with int8_only=True into one region."""
        return not self.host_ops

    def _namespace(self) -> dict:
        namespace: dict = {"__name__": f"fuzz_graph_{self.seed}"}
        exec(compile(self.source, f"<fuzz graph {self.seed}>", "exec"), namespace)
        return namespace

    def build(self):
        """A fresh model from the source (seeded weights, eval mode)."""
        return self._namespace()["make_model"]()

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(calibration inputs, evaluation inputs), standard normal, seeded by the graph's seed."""
        namespace = self._namespace()
        return namespace["calibration_inputs"](), namespace["evaluation_inputs"]()

    def summary(self) -> str:
        """The ops, counted by kind: 'conv2d*3 relu*2 concat ...'."""
        counts = Counter(op.split("(")[0] for op in self.ops)
        return " ".join(k if n == 1 else f"{k}*{n}" for k, n in counts.items())

    def repro(self, int8_only: bool = False, activations: str | None = None, rounding: str | None = None) -> str:
        """A standalone script that rebuilds this graph and checks it as the fuzzer does."""
        fmt = ""
        if activations or rounding:
            fmt = f", number_format=NumberFormat({activations or 'asymmetric'!r}, {rounding or 'tflite'!r})"
        return (
            f"# fuzz graph seed {self.seed}: {self.summary()}\n{self.source}\n\n"
            "if __name__ == '__main__':\n"
            "    import numpy as np\n"
            "    from byoc_int8.pipeline import compile_model, evaluate\n"
            "    from byoc_int8.qarith import NumberFormat\n\n"
            "    model = make_model()\n"
            "    calib, inputs = calibration_inputs(), evaluation_inputs()\n"
            f"    compiled = compile_model(model, calib, int8_only={int8_only}{fmt})\n"
            "    report = evaluate(compiled, model, inputs, latency_runs=1, layers=[])\n"
            "    print('regions', report['regions'], 'bit_exact', report['bit_exact'], 'cosine', report['cosine_vs_float'])\n"
        )


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _pool_out(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (a last window starting in the right padding is dropped)."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


class _Writer:
    """Writes one graph: module definitions, forward lines, and the ops used."""

    def __init__(self, seed: int, allow_host: bool):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.init: list[str] = []
        self.forward: list[str] = []
        self.ops: list[str] = []
        self.host_ops: list[str] = []
        self.counter = 0
        self.allow_host = allow_host

    # -- helpers ---------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def between(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    def module(self, prefix: str, ctor: str) -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.init.append(f"self.{name} = {ctor}")
        return f"self.{name}"

    def emit(self, expr: str, shape: tuple[int, ...], op: str | None = None) -> T:
        self.counter += 1
        name = f"t{self.counter}"
        self.forward.append(f"{name} = {expr}")
        if op:
            self.ops.append(op)
        return T(name, tuple(int(d) for d in shape))

    def channels(self, lo: int = 1) -> int:
        return self.between(lo, MAX_CHANNELS) if self.chance(0.3) else self.between(max(lo, 2), 24)

    # -- ops -------------------------------------------------------------------------------------
    def conv(self, x: T, out_c: int | None = None, same: bool = False, bn: bool | None = None,
             act: bool | None = None) -> T:
        """conv2d (+ batch norm) (+ activation). `same`: stride 1, output size = input size."""
        c, h, w = x.shape
        kernel = [self.pick((1, 3, 3, 3, 5)) for _ in range(2)]
        if not self.chance(0.2):
            kernel[1] = kernel[0]
        dilation = [2 if k > 1 and self.chance(0.2) else 1 for k in kernel]
        if not self.chance(0.2):
            dilation[1] = dilation[0] if kernel[1] > 1 else 1
        stride = [1, 1] if same else [self.pick((1, 1, 2)) for _ in range(2)]
        if not same and self.chance(0.7):
            stride[1] = stride[0]
        pad = []
        for k, d in zip(kernel, dilation):
            half = d * (k - 1) // 2
            pad.append(half if same or self.chance(0.6) else self.between(0, half + 1))
        for axis, size in enumerate((h, w)):  # the window must fit
            if _conv_out(size, kernel[axis], stride[axis], pad[axis], dilation[axis]) < 1:
                kernel[axis], dilation[axis], pad[axis] = 1, 1, 0
            if same and _conv_out(size, kernel[axis], 1, pad[axis], dilation[axis]) != size:
                kernel[axis], dilation[axis], pad[axis] = 1, 1, 0
        # groups: plain, depthwise (channel multiplier 1 or 2) or grouped; a given out_c is kept
        fixed = out_c is not None
        out_c = out_c if fixed else self.channels()
        groups, roll = 1, self.rng.random()
        if roll < 0.25 and c > 1 and (not fixed or out_c % c == 0):
            if not fixed:
                out_c = c * (2 if c * 2 <= MAX_CHANNELS and self.chance(0.35) else 1)
            groups = c
        elif roll < 0.4:
            divisors = [g for g in range(2, c + 1) if c % g == 0 and (not fixed or out_c % g == 0)]
            if divisors:
                groups = self.pick(divisors)
                if not fixed:
                    out_c = max(groups, out_c // groups * groups)
        kind = "conv2d" if groups == 1 else "dwconv2d" if groups == c else "gconv2d"
        bias = self.chance(0.8)
        args = [str(c), str(out_c), _pair(kernel)]
        if stride != [1, 1]:
            args.append(f"stride={_pair(stride)}")
        if pad != [0, 0]:
            args.append(f"padding={_pair(pad)}")
        if dilation != [1, 1]:
            args.append(f"dilation={_pair(dilation)}")
        if groups != 1:
            args.append(f"groups={groups}")
        if not bias:
            args.append("bias=False")
        conv = self.module("conv", f"nn.Conv2d({', '.join(args)})")
        shape = (out_c, *(_conv_out(s, k, st, p, d) for s, k, st, p, d in zip((h, w), kernel, stride, pad, dilation)))
        tag = f"{kind}(k{_tag(kernel)}s{_tag(stride)}p{_tag(pad)}d{_tag(dilation)}g{groups}{'' if bias else 'nb'})"
        y = self.emit(f"{conv}({x.name})", shape, tag)
        if bn if bn is not None else self.chance(0.3):
            y = self.batch_norm(y, "bn_folded")
        if act if act is not None else self.chance(0.7):
            y = self.activation(y)
        return y

    def batch_norm(self, x: T, tag: str = "bn") -> T:
        bn = self.module("bn", f"nn.BatchNorm2d({x.shape[0]})")
        return self.emit(f"{bn}({x.name})", x.shape, tag)

    def activation(self, x: T, lut: bool | None = None) -> T:
        if lut if lut is not None else self.chance(0.45):
            name = self.pick(LUT_ACTIVATIONS)
            expr = {
                "sigmoid": f"torch.sigmoid({x.name})",
                "tanh": f"torch.tanh({x.name})",
                "hardsigmoid": f"F.hardsigmoid({x.name})",
                "hardswish": f"F.hardswish({x.name})",
                "silu": f"F.silu({x.name})",
                "gelu": f"F.gelu({x.name})",
                "gelu_tanh": f"F.gelu({x.name}, approximate='tanh')",
                "elu": f"F.elu({x.name}, alpha={self.pick((0.5, 1.0, 1.7))})",
                "leaky_relu": f"F.leaky_relu({x.name}, {self.pick((0.01, 0.1, 0.2, 0.3))})",
                "mish": f"F.mish({x.name})",
            }[name]
            return self.emit(expr, x.shape, name)
        name = self.pick(CLIP_ACTIVATIONS)
        if name == "relu":
            expr = self.pick((f"torch.relu({x.name})", f"F.relu({x.name})"))
        elif name == "relu6":
            expr = f"F.relu6({x.name})"
        elif name == "clamp":
            lo = round(float(self.rng.uniform(-1.5, 0.5)), 2)
            hi = round(lo + float(self.rng.uniform(0.25, 3.0)), 2)
            expr = f"torch.clamp({x.name}, {lo}, {hi})" if self.chance(0.7) else f"{x.name}.clamp(min={lo})"
        else:
            expr = f"F.hardtanh({x.name}, {self.pick((-1.0, -0.5))}, {self.pick((0.5, 1.0, 2.0))})"
        return self.emit(expr, x.shape, name)

    def max_pool(self, x: T) -> T:
        c, h, w = x.shape
        k = self.pick((2, 3, 3)) if min(h, w) >= 3 else 2
        stride = self.pick((1, 2, 2, k))
        pad = self.between(0, k // 2)
        dilation = 2 if k == 2 and min(h, w) >= 4 and self.chance(0.15) else 1
        ceil_mode = self.chance(0.3)
        out = [_pool_out(s, k, stride, pad, dilation, ceil_mode) for s in (h, w)]
        if min(out) < 1:
            return x
        extra = (f", dilation={dilation}" if dilation > 1 else "") + (", ceil_mode=True" if ceil_mode else "")
        return self.emit(f"F.max_pool2d({x.name}, {k}, {stride}, {pad}{extra})", (c, *out),
                         f"max_pool2d(k{k}s{stride}p{pad}{'d2' if dilation > 1 else ''}{'c' if ceil_mode else ''})")

    def avg_pool(self, x: T) -> T:
        c, h, w = x.shape
        k = self.pick((2, 3, 3)) if min(h, w) >= 3 else 2
        stride = self.pick((1, 2, 2, k))
        pad = self.between(0, k // 2)
        ceil_mode = self.chance(0.3)
        include_pad = self.chance(0.5)
        out = [_pool_out(s, k, stride, pad, 1, ceil_mode) for s in (h, w)]
        if min(out) < 1:
            return x
        extra = (", ceil_mode=True" if ceil_mode else "") + ("" if include_pad else ", count_include_pad=False")
        return self.emit(f"F.avg_pool2d({x.name}, {k}, {stride}, {pad}{extra})", (c, *out),
                         f"avg_pool2d(k{k}s{stride}p{pad}{'c' if ceil_mode else ''}{'i' if include_pad else ''})")

    def adaptive_pool(self, x: T) -> T:
        c, h, w = x.shape
        out = [self.pick([d for d in range(1, s + 1) if s % d == 0 and d <= 8]) for s in (h, w)]
        return self.emit(f"F.adaptive_avg_pool2d({x.name}, {_pair(out)})", (c, *out), "adaptive_avg_pool2d")

    def residual(self, x: T) -> T:
        y = x
        for _ in range(self.between(1, 2)):
            y = self.conv(y, out_c=x.shape[0], same=True)
        if y.shape != x.shape:  # a depthwise multiplier or kernel fallback changed it
            return y
        if self.chance(0.1):  # one value twice
            x = y
        expr = f"{x.name} + {y.name}" if self.chance(0.5) else f"{y.name} + {x.name}"
        out = self.emit(expr, x.shape, "add")
        return self.activation(out, lut=False) if self.chance(0.5) else out

    def branches(self, x: T) -> T:
        count = self.between(2, 3)
        outs = []
        budget = MAX_CHANNELS
        for i in range(count):
            kind = self.pick(("conv", "conv", "conv2", "max_pool", "avg_pool", "identity", "again"))
            if kind == "again" and not (outs and outs[-1].shape[0] <= budget - (count - i - 1)):
                kind = "conv"
            if kind in ("max_pool", "avg_pool", "identity") and x.shape[0] > budget - (count - i - 1):
                kind = "conv"
            if kind == "again":  # the previous branch's value a second time
                y = outs[-1]
            elif kind == "identity":
                y = x
            elif kind == "max_pool":
                y = self.emit(f"F.max_pool2d({x.name}, 3, 1, 1)", x.shape, "max_pool2d(k3s1p1)")
            elif kind == "avg_pool":
                extra = "" if self.chance(0.5) else ", count_include_pad=False"
                y = self.emit(f"F.avg_pool2d({x.name}, 3, 1, 1{extra})", x.shape, "avg_pool2d(k3s1p1)")
            else:
                out_c = max(1, min(self.between(1, 16), budget - (count - i - 1)))
                y = self.conv(x, out_c=out_c, same=True)
                if kind == "conv2" and y.shape[0] <= budget - (count - i - 1):
                    y = self.conv(y, out_c=y.shape[0], same=True)
                if y.shape[1:] != x.shape[1:]:
                    y = x
            outs.append(y)
            budget -= y.shape[0]
        if budget < 0:
            return outs[0]
        channels = sum(y.shape[0] for y in outs)
        return self.emit(f"torch.cat([{', '.join(y.name for y in outs)}], {self.pick(('1', 'dim=1', '-3'))})",
                         (channels, *x.shape[1:]), f"concat{count}")

    def squeeze_excite(self, x: T) -> T:
        c, h, w = x.shape
        pooled = self.emit(self.pick((f"{x.name}.mean((2, 3), keepdim=True)", f"F.adaptive_avg_pool2d({x.name}, 1)")),
                           (c, 1, 1), "global_avg_pool")
        reduce = self.module("conv", f"nn.Conv2d({c}, {max(1, c // 4)}, 1)")
        expand = self.module("conv", f"nn.Conv2d({max(1, c // 4)}, {c}, 1)")
        hidden = self.emit(f"torch.relu({reduce}({pooled.name}))", (max(1, c // 4), 1, 1), "conv2d(k1)")
        self.ops.append("relu")
        gate_fn = self.pick(("torch.sigmoid", "F.hardsigmoid"))
        gate = self.emit(f"{gate_fn}({expand}({hidden.name}))", (c, 1, 1), "conv2d(k1)")
        self.ops.append(gate_fn.split(".")[-1])
        expr = f"{x.name} * {gate.name}" if self.chance(0.6) else f"{gate.name} * {x.name}"
        return self.emit(expr, x.shape, "mul_gate")

    def product(self, x: T) -> T:
        if self.chance(0.5):
            a = self.conv(x, same=True, act=False)
            b = self.conv(x, out_c=a.shape[0], same=True)
            if a.shape != b.shape:
                return a
        elif self.chance(0.7):
            a, b = x, self.activation(x)
        else:  # one value twice: a square
            a = b = x
        return self.emit(f"{a.name} * {b.name}", a.shape, "mul")

    def channel_split(self, x: T) -> T:
        c, h, w = x.shape
        if c < 2:
            return x
        if self.chance(0.5) and c % 2 == 0:
            parts = self.emit(f"{x.name}.chunk(2, dim=1)", (), "chunk")
            sizes = [c // 2, c // 2]
        else:
            first = self.between(1, c - 1)
            sizes = [first, c - first]
            parts = self.emit(f"torch.split({x.name}, [{first}, {c - first}], dim=1)", (), "split")
        a, b = T(f"{parts.name}[0]", (sizes[0], h, w)), T(f"{parts.name}[1]", (sizes[1], h, w))
        if self.chance(0.5):
            a, b = b, a
        b = self.conv(b, out_c=b.shape[0], same=True)
        if b.shape[1:] != (h, w):
            return b
        return self.emit(f"torch.cat([{a.name}, {b.name}], 1)", (a.shape[0] + b.shape[0], h, w), "concat2")

    def shuffle(self, x: T) -> T:
        c, h, w = x.shape
        groups = [g for g in range(2, c) if c % g == 0]
        if not groups:
            return x
        g = self.pick(groups)
        if self.chance(0.5):
            expr = (f"{x.name}.view({x.name}.shape[0], {g}, {c // g}, {h}, {w}).transpose(1, 2)"
                    f".reshape({x.name}.shape[0], {c}, {h}, {w})")
        else:
            expr = f"{x.name}.reshape(-1, {g}, {c // g}, {h}, {w}).permute(0, 2, 1, 3, 4).flatten(1, 2)"
        return self.emit(expr, x.shape, f"shuffle(g{g})")

    def slice_(self, x: T) -> T:
        c, h, w = x.shape
        index, shape = [":"], []
        for size in (c, h, w):
            if size < 2 or self.chance(0.4):
                index.append(":")
                shape.append(size)
                continue
            begin = self.between(0, size // 2)
            end = self.between(begin + 1, size)
            step = self.pick((1, 1, 2))
            if self.chance(0.2) and end < size:
                end_text = str(end - size)  # a negative end
            else:
                end_text = str(end)
            index.append(f"{begin}:{end_text}" + (f":{step}" if step > 1 else ""))
            shape.append(len(range(begin, end, step)))
        if all(i == ":" for i in index):
            return x
        return self.emit(f"{x.name}[{', '.join(index)}]", shape, "slice")

    def pad(self, x: T) -> T:
        c, h, w = x.shape
        widths = [self.between(0, 2) for _ in range(4)]
        channel_pad = [self.between(0, 2) for _ in range(2)] if self.chance(0.2) and c + 4 <= MAX_CHANNELS else []
        widths += channel_pad
        value = self.pick((0.0, 0.0, 0.5, -1.0))
        if not any(widths):
            widths[0] = 1
        shape = (c + sum(channel_pad), h + widths[2] + widths[3], w + widths[0] + widths[1])
        extra = f", value={value}" if value else ""
        return self.emit(f"F.pad({x.name}, {tuple(widths)}{extra})", shape, "pad")

    def transpose_hw(self, x: T) -> T:
        c, h, w = x.shape
        return self.emit(f"{x.name}.transpose(2, 3)" if self.chance(0.5) else f"{x.name}.permute(0, 1, 3, 2)",
                         (c, w, h), "transpose")

    def host_op(self, x: T) -> T:
        """One op the int8 kernels do not cover: in default mode it runs on the host."""
        c, h, w = x.shape
        kind = self.pick(HOST_OPS)
        if kind == "adaptive_unequal":
            sizes = [[d for d in range(2, s) if s % d] for s in (h, w)]
            if not any(sizes):
                kind = "mul_const"
            else:
                out = [self.pick(s) if s else 1 for s in sizes]
                self.host_ops.append(kind)
                return self.emit(f"F.adaptive_avg_pool2d({x.name}, {_pair(out)})", (c, *out), kind)
        if kind == "reflect_pad" and min(h, w) < 2 or kind == "layer_norm" and h * w < 16:
            kind = "mul_const"
        self.host_ops.append(kind)
        if kind == "mul_const":
            scale = self.module("scale", f"nn.Parameter(torch.linspace(0.5, 1.5, {c}).reshape(1, {c}, 1, 1), requires_grad=False)")
            return self.emit(f"{x.name} * {scale}", x.shape, kind)
        if kind == "add_const":
            return self.emit(f"{x.name} + {self.pick((0.5, -0.25))}", x.shape, kind)
        if kind == "broadcast_add":
            return self.emit(f"{x.name} + {x.name}.mean((2, 3), keepdim=True)", x.shape, kind)
        if kind == "reflect_pad":
            return self.emit(f"F.pad({x.name}, (1, 1, 1, 1), mode='reflect')", (c, h + 2, w + 2), kind)
        if kind == "layer_norm":  # over H and W: normalizing a handful of values would amplify int8 error
            return self.emit(f"F.layer_norm({x.name}, ({h}, {w}))", x.shape, kind)
        return self.emit(f"torch.softmax({x.name}, dim=1)", x.shape, kind)

    # -- heads -----------------------------------------------------------------------------------
    def head(self, x: T) -> T:
        c, h, w = x.shape
        kind = self.pick(("none", "pooled", "pooled", "flatten", "tokens"))
        if kind == "flatten" and c * h * w > 2048:
            kind = "pooled"
        if kind == "none":
            return self.conv(x, act=self.chance(0.3)) if self.chance(0.5) else x
        if kind == "tokens":  # (N, H*W, C) -> linear over C: a rank-3 dense
            tokens = self.emit(f"{x.name}.flatten(2).transpose(1, 2)", (h * w, c), "tokens")
            units = self.between(1, 32)
            fc = self.module("fc", f"nn.Linear({c}, {units})")
            y = self.emit(f"{fc}({tokens.name})", (h * w, units), "linear")
            return self.activation(y) if self.chance(0.4) else y
        if kind == "pooled":
            flat = self.emit(self.pick((f"{x.name}.mean((2, 3))",
                                        f"torch.flatten(F.adaptive_avg_pool2d({x.name}, 1), 1)",
                                        f"F.adaptive_avg_pool2d({x.name}, (1, 1)).reshape({x.name}.shape[0], -1)")),
                             (c,), "global_avg_pool")
        else:
            flat = self.emit(self.pick((f"{x.name}.flatten(1)", f"{x.name}.reshape({x.name}.shape[0], -1)")),
                             (c * h * w,), "flatten")
        y = flat
        layers = self.between(1, 2)
        for layer in range(layers):
            # at least 4 outputs: the cosine of a 1-element output is only its sign agreement
            units = self.between(1 if layer < layers - 1 else 4, 48 if layer == 0 else 16)
            fc = self.module("fc", f"nn.Linear({y.shape[0]}, {units}{'' if self.chance(0.85) else ', bias=False'})")
            y = self.emit(f"{fc}({y.name})", (units,), "linear")
            if self.chance(0.5):
                y = self.activation(y)
        return y

    # -- the graph -------------------------------------------------------------------------------
    def body_block(self, x: T) -> T:
        c, h, w = x.shape
        small = min(h, w) < 4
        blocks = {
            "conv": 5, "activation": 2, "bn_after_act": 1, "max_pool": 0 if small else 1.2,
            "avg_pool": 0 if small else 1.2, "adaptive": 0.4, "residual": 2, "branches": 1.5,
            "squeeze_excite": 1, "product": 1, "split": 1, "shuffle": 1.2, "slice": 0.8, "pad": 0.6,
            "transpose": 0.4,
        }
        names = list(blocks)
        weights = np.array([blocks[n] for n in names], dtype=np.float64)
        kind = names[int(self.rng.choice(len(names), p=weights / weights.sum()))]
        if kind == "conv":
            return self.conv(x)
        if kind == "activation":
            return self.activation(x)
        if kind == "bn_after_act":
            return self.batch_norm(x if self.ops and self.ops[-1] in CLIP_ACTIVATIONS + LUT_ACTIVATIONS
                                   else self.activation(x, lut=False))
        return {
            "max_pool": self.max_pool, "avg_pool": self.avg_pool, "adaptive": self.adaptive_pool,
            "residual": self.residual, "branches": self.branches, "squeeze_excite": self.squeeze_excite,
            "product": self.product, "split": self.channel_split, "shuffle": self.shuffle,
            "slice": self.slice_, "pad": self.pad, "transpose": self.transpose_hw,
        }[kind](x)

    def graph(self) -> tuple[tuple[int, ...], T]:
        c = self.pick((1, 3, 3, 4, 8, 16))
        h = self.between(8, 32)
        w = h if self.chance(0.6) else self.between(8, 32)
        x = T("x", (c, h, w))
        blocks = self.between(2, 7)
        host_at = self.between(0, blocks - 1) if self.allow_host and self.chance(HOST_OP_PROBABILITY) else -1
        y = self.conv(x) if self.chance(0.7) else x
        for i in range(blocks):
            if i == host_at:
                y = self.host_op(y)
            y = self.body_block(y)
            # keep the working size within bounds: no more than 48 channels, at least 2 pixels
            if y.shape[0] > MAX_CHANNELS:
                y = self.conv(y, out_c=self.channels())
        if y is x or not self.ops:  # something to compile
            y = self.conv(y)
        return (1, c, h, w), self.head(y)


def _pair(values) -> str:
    values = [int(v) for v in values]
    return str(values[0]) if values[0] == values[1] else f"({values[0]}, {values[1]})"


def _tag(values) -> str:
    return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"


def generate(seed: int, allow_host: bool = True) -> GraphSpec:
    """The graph of `seed` (reproducible): its source, input shape and ops. `allow_host=False`
    never adds an op outside the int8 kernels (the graph then differs from the default one)."""
    writer = _Writer(seed, allow_host)
    input_shape, out = writer.graph()
    init = "\n".join("        " + line for line in writer.init) or "        pass"
    forward = "\n".join("        " + line for line in writer.forward)
    source = (
        f"{_PRELUDE}\n\nclass FuzzNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n{init}\n\n"
        f"    def forward(self, x):\n{forward}\n        return {out.name}\n"
        + _MAKE_MODEL.format(seed=seed, gain=WEIGHT_GAIN, shape=input_shape)
        + _INPUTS.format(seed=seed)
    )
    return GraphSpec(seed, input_shape, source, writer.ops, writer.host_ops, (1, *out.shape))


@dataclass
class Outcome:
    """One graph compiled end to end in one mode: what the fuzzer reports and judges."""

    seed: int
    int8_only: bool
    number_format: str
    regions: int | None = None
    host_ops: list[str] = field(default_factory=list)  # "relax.op: reason", as the compiler reports them
    bit_exact: bool | None = None
    cosine: float | None = None
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # the report's (degenerate tensors, saturated biases)
    problems: list[str] = field(default_factory=list)  # empty: the graph passed
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def low_cosine(self) -> bool:
        """Far from float with no warning to explain it (a dead tensor, a saturated bias, a ~0
        float output): worth a look, though int8 error alone can cause it."""
        return self.cosine is not None and self.cosine < LOW_COSINE and not self.warnings


def check(spec: GraphSpec, int8_only: bool = False, number_format=None) -> Outcome:
    """Compile `spec` end to end and judge it: any exception is a failure, so is C != the integer
    reference, and in int8-only mode anything but one region (the graph must have no host op)."""
    import time
    import traceback

    import torch

    from byoc_int8.pipeline import compile_model, evaluate
    from byoc_int8.qarith import DEFAULT_FORMAT

    fmt = number_format or DEFAULT_FORMAT
    outcome = Outcome(spec.seed, int8_only, str(fmt))
    start = time.perf_counter()
    model = spec.build()
    calib, inputs = spec.inputs()
    with torch.no_grad():
        shape = tuple(model(torch.from_numpy(inputs[:1])).shape)
    if shape != spec.output_shape:  # the generator's own bookkeeping
        outcome.problems.append(f"generator: output shape {shape}, expected {spec.output_shape}")
        return outcome
    try:
        compiled = compile_model(model, calib, int8_only=int8_only, number_format=fmt)
        report = evaluate(compiled, model, inputs, latency_runs=1, layers=[])
    except Exception as err:  # every compiler or runtime error is a finding
        lines = [line[:300] for line in str(err).strip().splitlines()[:8]] or [""]
        outcome.problems.append(f"{type(err).__name__}: {chr(10).join(lines)}")
        outcome.traceback = traceback.format_exc()
    else:
        outcome.regions, outcome.bit_exact, outcome.cosine = report["regions"], report["bit_exact"], report["cosine_vs_float"]
        outcome.host_ops = sorted({f"{h['op']}: {h['reason']}" for h in report["host_ops"]})
        outcome.warnings = [w for w in report["warnings"] if "SQNR" not in w]  # low SQNR restates the cosine
        if not report["bit_exact"]:
            outcome.problems.append(f"C library != integer reference (max diff {report['max_lsb_diff']:.3g} LSB)")
        if int8_only and report["regions"] != 1:
            outcome.problems.append(f"int8-only graph compiled into {report['regions']} regions")
    outcome.seconds = time.perf_counter() - start
    return outcome


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="print the source of a fuzz graph")
    parser.add_argument("seed", type=int)
    parser.add_argument("--int8-only-ops", action="store_true", help="no op outside the int8 kernels")
    args = parser.parse_args()
    print(generate(args.seed, allow_host=not args.int8_only_ops).source)


if __name__ == "__main__":
    _main()
