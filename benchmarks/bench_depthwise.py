"""Depthwise convolution speed: the portable, AVX2 and AVX-512 VNNI kernel builds on MobileNetV2's
depthwise layers, and (with --end-to-end) the whole MobileNetV2 compiled for AVX2 and AVX-512.

    python benchmarks/bench_depthwise.py [--build-dir build] [--rounding tflite] [--samples 15]
        [--variant avx2 ...] [--compare DIR] [--end-to-end] [--e2e-runs 20] [--threads N]

Kernel part: b8_depthwise_conv2d_s8 called through ctypes (one thread, all output pixels per
call) on every distinct depthwise layer of torchvision's mobilenet_v2 at 224x224 (3x3, pad 1,
channel multiplier 1), signed int8 inputs (pad value -128, as the zero point of a relu6 output
quantized asymmetrically), per-channel multipliers with shifts <= 0. Each figure is the median
over --samples samples of back-to-back calls (each sample at least --min-ms long), the builds
interleaved within every sample round so that a slow phase of the machine hits them alike.
Before timing, every build's output is checked to equal the portable build's byte for byte.
Columns: ms per call, GMAC/s (output pixels x channels x 9 taps), speedup over the portable
build; the last row weights each layer by how many times MobileNetV2 has it. --compare DIR adds
the same builds from DIR (e.g. the libraries before a change) as columns "<build> old", checked
and interleaved alike, and prints each build's speedup over its old one.

--end-to-end: torchvision mobilenet_v2 (random init, randomized batch-norm statistics, as
benchmarks/coverage.py builds it) compiled with byoc_int8.pipeline.compile_model(simd=...) for
avx2 and avx512vnni, then CompiledModel.run on one 224x224 image: median of --e2e-runs runs after
a warm-up. The kernels compiled into the library are the runtime_c sources of this tree.
Threads: the kernel part runs on the calling thread only; the end-to-end part on TVM's pool
(TVM_NUM_THREADS; byoc_int8 defaults it to every allowed CPU, --threads sets it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import kernel_calls  # noqa: E402
from kernel_calls import ConvParams, Dims, RequantParams, i8, i32, ptr  # noqa: E402

ISA = {"portable": "portable C99 (compiler autovectorization only)", "avx2": "AVX2 (256-bit)",
       "avxvnni": "AVX-VNNI (256-bit)", "avx512bw": "AVX-512BW (512-bit vpmaddwd)",
       "avx512vnni": "AVX-512 (512-bit, +VNNI)",
       "amx": "AMX (AVX-512 VNNI depthwise)"}
# MobileNetV2's depthwise layers at 224x224: (input h = w, channels, stride, occurrences).
LAYERS = [(112, 32, 1, 1), (112, 96, 2, 1), (56, 144, 1, 1), (56, 144, 2, 1), (28, 192, 1, 2), (28, 192, 2, 1),
          (14, 384, 1, 4), (14, 576, 1, 2), (14, 576, 2, 1), (7, 960, 1, 3)]


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")


class Layer:
    """One depthwise 3x3 pad-1 call, its buffers and ctypes arguments made once."""

    def __init__(self, size: int, channels: int, stride: int, rng):
        self.size, self.channels, self.stride = size, channels, stride
        self.out = (size + 2 - 3) // stride + 1
        self.macs = self.out * self.out * channels * 9
        self.x = rng.integers(-128, 128, (1, size, size, channels), dtype=np.int8)
        self.weight = rng.integers(-127, 128, (1, 3, 3, channels), dtype=np.int8)
        self.bias = rng.integers(-(1 << 14), 1 << 14, channels).astype(np.int32)
        self.multiplier = rng.integers(1 << 30, 1 << 31, channels).astype(np.int32)
        self.shift = rng.integers(-12, -8, channels).astype(np.int32)
        self.y = np.zeros((1, self.out, self.out, channels), np.int8)
        self.conv = ConvParams(stride, stride, 1, 1, 1, 1, channels, -128)
        self.quant = RequantParams(ptr(self.multiplier, i32), ptr(self.shift, i32), -128, 127, -128)
        self.dims = (Dims(1, size, size, channels), Dims(1, 3, 3, channels), Dims(1, self.out, self.out, channels))

    def name(self) -> str:
        return f"{self.size}x{self.size}x{self.channels} s{self.stride}"

    def call(self, lib) -> int:
        in_dims, filter_dims, out_dims = self.dims
        return lib.b8_depthwise_conv2d_s8(self.conv, self.quant, in_dims, ptr(self.x, i8), filter_dims,
                                          ptr(self.weight, i8), ptr(self.bias, i32), out_dims, ptr(self.y, i8), None)

    def output(self, lib) -> np.ndarray:
        self.y[...] = 0
        assert self.call(lib) == 0
        return self.y.copy()


def time_calls(lib, layer: Layer, calls: int) -> float:
    """Seconds per call over `calls` back-to-back calls (arguments prepared outside the loop)."""
    in_dims, filter_dims, out_dims = layer.dims
    args = (layer.conv, layer.quant, in_dims, ptr(layer.x, i8), filter_dims, ptr(layer.weight, i8),
            ptr(layer.bias, i32), out_dims, ptr(layer.y, i8), None)
    f = lib.b8_depthwise_conv2d_s8
    start = time.perf_counter()
    for _ in range(calls):
        f(*args)
    return (time.perf_counter() - start) / calls


def bench_kernels(args) -> None:
    from byoc_int8.codegen.emit_c import SIMD_FLAGS, cpu_flags

    variants = [v for v in kernel_calls.VARIANTS if v in (args.variant or kernel_calls.VARIANTS)]
    if "portable" not in variants:
        variants.insert(0, "portable")  # the baseline of every speedup
    missing = {v: SIMD_FLAGS[v] - cpu_flags() for v in variants}
    for v in [v for v in variants if missing[v]]:
        print(f"{v}: not run, this CPU lacks {', '.join(sorted(missing[v]))}")
        variants.remove(v)
    libs = {v: kernel_calls.load(kernel_calls.library_path(args.build_dir, v, args.rounding), v, args.rounding)
            for v in variants}
    if args.compare:  # the same builds from another directory, as columns "<build> old"
        for v in variants[1:]:
            libs[f"{v} old"] = kernel_calls.load(kernel_calls.library_path(args.compare, v, args.rounding), v,
                                                 args.rounding)
        variants += [f"{v} old" for v in variants[1:]]
    print(f"CPU: {cpu_model()}; kernel builds from {args.build_dir} (rounding {args.rounding}); one thread")
    for v in variants:
        print(f"  {v:<11} {ISA[v.split()[0]]}{' from ' + str(args.compare) if v.endswith(' old') else ''}")
    rng = np.random.default_rng(0)
    layers = [Layer(size, channels, stride, rng) for size, channels, stride, _ in LAYERS]
    for layer in layers:  # every build computes the same bytes (the tests compare with the reference)
        want = layer.output(libs["portable"])
        for v in variants[1:]:
            assert np.array_equal(layer.output(libs[v]), want), f"{v} differs from portable on {layer.name()}"
    times = {(layer.name(), v): [] for layer in layers for v in variants}
    # Calls per sample: --min-ms of each build's calls (after a first call that warms the caches).
    calls = {(layer.name(), v): max(1, int(args.min_ms / 1000 / time_calls(libs[v], layer, 2)))
             for layer in layers for v in variants}
    for sample in range(args.samples):
        for layer in layers:
            order = variants[sample % len(variants):] + variants[: sample % len(variants)]
            for v in order:
                times[(layer.name(), v)].append(time_calls(libs[v], layer, calls[(layer.name(), v)]))
    header = f"{'layer':<18}{'MMAC':>7}" + "".join(f"{v + ' ms':>16}{'GMAC/s':>8}{'x':>6}" for v in variants)
    print(header)
    total = {v: 0.0 for v in variants}
    total_macs = 0
    for layer, (_, _, _, count) in zip(layers, LAYERS):
        base = statistics.median(times[(layer.name(), "portable")])
        row = f"{layer.name():<18}{layer.macs / 1e6:>7.2f}"
        for v in variants:
            t = statistics.median(times[(layer.name(), v)])
            total[v] += count * t
            row += f"{t * 1e3:>16.4f}{layer.macs / t / 1e9:>8.2f}{base / t:>6.2f}"
        total_macs += count * layer.macs
        print(row)
    row = f"{'MobileNetV2 (all)':<18}{total_macs / 1e6:>7.2f}"
    for v in variants:
        row += f"{total[v] * 1e3:>16.4f}{total_macs / total[v] / 1e9:>8.2f}{total['portable'] / total[v]:>6.2f}"
    print(row)
    print(f"medians of {args.samples} samples, each >= {args.min_ms} ms of back-to-back calls; "
          "x = speedup over the portable build")
    for v in [v for v in variants if f"{v} old" in libs]:
        print(f"{v} over {v} old (--compare): {total[v + ' old'] / total[v]:.3f}x on MobileNetV2's depthwise layers")


def bench_end_to_end(args) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from coverage import torchvision_model

    from byoc_int8.pipeline import compile_model

    model = torchvision_model("mobilenet_v2")
    inputs = torch.randn(9, 3, 224, 224, generator=torch.Generator().manual_seed(0)).numpy()
    calib, x = inputs[:8], inputs[8:]
    print(f"end to end: torchvision mobilenet_v2, 224x224, batch 1, TVM_NUM_THREADS="
          f"{os.environ.get('TVM_NUM_THREADS', '?')}; CompiledModel.run, median of {args.e2e_runs} after a warm-up")
    for simd in ("avx2", "avx512vnni"):
        compiled = compile_model(model, calib, simd=simd)
        for _ in range(3):
            compiled.run(x)
        runs = []
        for _ in range(args.e2e_runs):
            start = time.perf_counter()
            compiled.run(x)
            runs.append(time.perf_counter() - start)
        print(f"  simd={simd:<11} {ISA[simd]:<26} median {statistics.median(runs) * 1e3:8.2f} ms  "
              f"(min {min(runs) * 1e3:.2f}, max {max(runs) * 1e3:.2f}; {compiled.regions} region(s))", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build", help="the CMake build of the kernels")
    parser.add_argument("--rounding", default="tflite", choices=kernel_calls.ROUNDINGS)
    parser.add_argument("--variant", action="append", choices=kernel_calls.VARIANTS,
                        help="only these builds (the portable one is always timed: the baseline)")
    parser.add_argument("--samples", type=int, default=15, help="samples per layer and build (median)")
    parser.add_argument("--min-ms", type=float, default=20.0, help="length of one sample")
    parser.add_argument("--compare", type=Path,
                        help="a build directory of other kernels (e.g. before a change), timed interleaved")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel part")
    parser.add_argument("--end-to-end", action="store_true", help="time the compiled MobileNetV2 too")
    parser.add_argument("--e2e-runs", type=int, default=20)
    parser.add_argument("--threads", type=int, help="TVM_NUM_THREADS for the end-to-end part")
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["TVM_NUM_THREADS"] = str(args.threads)
    if not args.no_kernels:
        bench_kernels(args)
    if args.end_to_end:
        bench_end_to_end(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
