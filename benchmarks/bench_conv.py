"""Standard (groups = 1) convolution speed per layer shape: b8_conv2d_s8 of the kernel builds
through ctypes, on the distinct convolution shapes of torchvision models at 224x224.

    python benchmarks/bench_conv.py [--models squeezenet1_1,resnet18,resnet50] [--variant avx512vnni]
        [--build-dir build] [--compare DIR] [--rounding tflite] [--samples 9] [--min-ms 20]

Each layer is called on one thread over all its output pixels. Inputs of the first layer are
signed (an image, pad value 0); the others are as byoc-int8's default number format makes them
(asymmetric activations: behind a relu they span [-128, 127] with zero point and pad value -128,
so the kernel takes its signed path), or with --symmetric non-negative with pad value 0 (the
unsigned path). Per-channel multipliers with shifts <= 0 (the vector epilogue).
--compare DIR: the same builds from another directory (e.g. copies of the libraries before a
change), checked to give the same bytes, timed interleaved with this tree's (A/B/A/B within every
sample round, so a slow phase of the shared machine hits both alike). Figures are the best of
--samples samples, each at least --min-ms of back-to-back calls
(the minimum over samples: other processes on a shared machine only add time). Columns: GMAC/s and the share
of the one-thread peak of the build's ISA, measured on this machine by benchmarks/int8_peak.c at the
start of the run (the portable build is compared with the AVX2 peak), and, with --compare, the speedup.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import kernel_calls  # noqa: E402
from bench_models import measure_peaks  # noqa: E402
from kernel_calls import ConvParams, Dims, RequantParams, i8, i32, ptr  # noqa: E402

# The fastest of the samples: on a shared machine other processes only ever add time.
STAT = min


def layer_shapes(model: str) -> list[tuple]:
    """(in_h, in_w, cin, cout, kh, kw, stride, pad, first) of every groups-1 conv, with counts."""
    import torch
    import torchvision

    net = getattr(torchvision.models, model)().eval()
    shapes: dict[tuple, int] = {}
    first = [True]

    def hook(module, inputs, _output):
        if module.groups != 1:
            return
        _, c, h, w = inputs[0].shape
        key = (h, w, c, module.out_channels, *module.kernel_size, module.stride[0], module.padding[0], first[0])
        first[0] = False
        shapes[key] = shapes.get(key, 0) + 1

    for m in net.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        net(torch.zeros(1, 3, 224, 224))
    return [(*k, n) for k, n in shapes.items()]


def aligned_zeros(size: int, alignment: int = 64) -> np.ndarray:
    """`size` zero bytes whose first lies on an `alignment`-byte boundary."""
    raw = np.zeros(size + alignment, np.int8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + size]


class Layer:
    def __init__(self, shape, rng, symmetric: bool, weight_max: int = 127):
        h, w, cin, cout, kh, kw, stride, pad, first, self.count = shape
        self.shape = shape
        self.oh, self.ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
        self.macs = self.oh * self.ow * cout * kh * kw * cin
        self.nonnegative = int(symmetric and not first)
        lo = 0 if self.nonnegative else -128
        zero_point = -128 if not (symmetric or first) else 0
        self.x = rng.integers(lo, 128, (1, h, w, cin), dtype=np.int8)
        self.weight = rng.integers(-weight_max, weight_max + 1, (cout, kh, kw, cin), dtype=np.int8)
        self.bias = rng.integers(-(1 << 14), 1 << 14, cout).astype(np.int32)
        self.multiplier = rng.integers(1 << 30, 1 << 31, cout).astype(np.int32)
        self.shift = rng.integers(-12, -8, cout).astype(np.int32)
        self.y = np.zeros((1, self.oh, self.ow, cout), np.int8)
        self.conv = ConvParams(stride, stride, pad, pad, 1, 1, 1, zero_point)
        self.quant = RequantParams(ptr(self.multiplier, i32), ptr(self.shift, i32), zero_point, 127, zero_point)
        self.dims = (Dims(1, h, w, cin), Dims(cout, kh, kw, cin), Dims(1, self.oh, self.ow, cout))
        self.prepared = {}

    def name(self) -> str:
        h, w, cin, cout, kh, kw, stride, _, first, count = self.shape
        return f"{h}x{w} {cin:>4}->{cout:<4} {kh}x{kw} s{stride}{' signed' if first else ''} (x{count})"

    def prepare(self, lib):
        in_dims, filter_dims, _ = self.dims
        # 64-byte aligned, as the generated model allocates it (runtime_c/tvm/tvm_adapter.c): a
        # 512-bit load of weights across two cache lines costs more.
        packed = aligned_zeros(lib.b8_conv2d_s8_packed_size(self.conv, filter_dims))
        lib.b8_conv2d_s8_pack_filter(self.conv, filter_dims, ptr(self.weight, i8), ptr(packed, i8))
        scratch = np.zeros(lib.b8_conv2d_s8_scratch_size(self.conv, filter_dims), np.int8)
        # The arguments converted once: ctypes conversions per call would cost as much as a
        # small layer.
        args = (ctypes.byref(self.conv), ctypes.byref(self.quant), ctypes.byref(in_dims), ptr(self.x, i8),
                self.nonnegative, ctypes.byref(filter_dims), ptr(packed, i8), ptr(self.bias, i32),
                ctypes.byref(self.dims[2]), ptr(self.y, i8), None, ptr(scratch, i8))
        self.prepared[id(lib)] = (packed, scratch, args)

    def call(self, lib) -> int:
        return lib.b8_conv2d_s8(*self.prepared[id(lib)][2])

    def output(self, lib) -> np.ndarray:
        self.y[...] = 0
        assert self.call(lib) == 0
        return self.y.copy()


def time_call(layer, lib, min_ms: float) -> float:
    calls, start = 0, time.perf_counter()
    while True:
        layer.call(lib)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed * 1e3 >= min_ms:
            return elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="squeezenet1_1,resnet18,resnet50")
    parser.add_argument("--variant", action="append", choices=kernel_calls.VARIANTS)
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--compare")
    parser.add_argument("--rounding", default="tflite")
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--min-ms", type=float, default=20.0)
    parser.add_argument("--symmetric", action="store_true")
    parser.add_argument("--weight-max", type=int, default=127,
                        help="weights in [-N, N]: 63 for 7-bit weights (the AVX2 kernels' offset form)")
    parser.add_argument("--filter", default="", help="only layers whose name contains this")
    args = parser.parse_args()
    if args.samples < 1 or args.min_ms <= 0:
        parser.error("--samples must be positive and --min-ms above 0")
    variants = args.variant or ["avx512vnni"]
    for variant in variants:
        for directory in [args.build_dir] + ([args.compare] if args.compare else []):
            if not kernel_calls.library_path(directory, variant, args.rounding).exists():
                parser.error(f"no {kernel_calls.library_path(directory, variant, args.rounding)}: build it "
                             f"(cmake --build) or pick --build-dir / --compare / --rounding")
    peaks, peak_error = measure_peaks([1])
    if peak_error:
        sys.exit(peak_error)
    peak = {isa: peaks.get((isa, 1)) for isa in ("amx", "avx512vnni", "avx512bw", "avxvnni", "avx2")}
    peak["portable"] = peak["avx2"]
    rng = np.random.default_rng(0)
    for model in args.models.split(","):
        layers = [Layer(s, rng, args.symmetric, args.weight_max) for s in layer_shapes(model)]
        layers = [layer for layer in layers if args.filter in layer.name()]
        for variant in variants:
            libs = {"new": kernel_calls.load(kernel_calls.library_path(args.build_dir, variant, args.rounding),
                                             variant, args.rounding)}
            if args.compare:
                libs["old"] = kernel_calls.load(kernel_calls.library_path(args.compare, variant, args.rounding),
                                                variant, args.rounding)
            print(f"\n{model}, {variant} ({args.rounding}), one thread; peak {peak[variant]:.0f} GMAC/s")
            header = f"{'layer':44} {'MMAC':>7} {'GMAC/s':>7} {'%peak':>6}"
            if args.compare:
                header += f" {'old GMAC/s':>10} {'speedup':>7}"
            print(header)
            total_new = total_old = total_macs = 0.0
            for layer in layers:
                for lib in libs.values():
                    layer.prepare(lib)
                if args.compare:
                    a, b = layer.output(libs["new"]), layer.output(libs["old"])
                    assert np.array_equal(a, b), f"{layer.name()}: outputs differ"
                times = {k: [] for k in libs}
                for _ in range(args.samples):
                    for key, lib in libs.items():
                        times[key].append(time_call(layer, lib, args.min_ms))
                new = STAT(times["new"])
                rate = layer.macs / new / 1e9
                line = f"{layer.name():44} {layer.macs / 1e6:7.1f} {rate:7.1f} {100 * rate / peak[variant]:5.0f}%"
                total_new += new * layer.count
                total_macs += layer.macs * layer.count
                if args.compare:
                    old = STAT(times["old"])
                    total_old += old * layer.count
                    line += f" {layer.macs / old / 1e9:10.1f} {old / new:6.2f}x"
                print(line, flush=True)
            line = f"{'all convs (weighted)':44} {total_macs / 1e6:7.1f} {total_macs / total_new / 1e9:7.1f} " \
                   f"{100 * total_macs / total_new / 1e9 / peak[variant]:5.0f}%"
            if args.compare:
                line += f" {total_macs / total_old / 1e9:10.1f} {total_old / total_new:6.2f}x"
            print(line + f"   ({1e3 * total_new:.2f} ms)")


if __name__ == "__main__":
    main()
