"""ResNet-18 batch 1, int8 and fp32, side by side in one process.

    pip install -e '.[bench]'      # onnxruntime, onnx (optional: their rows are skipped without)
    python benchmarks/bench_resnet18.py [--runs 30] [--threads 1 2]

Systems, measured one after another with the same input: byoc-int8 (the generated C library in
TVM's VM), ONNX Runtime static QDQ int8 (per-channel weights; uint8 and int8 activations) and
fp32, PyTorch FX int8 (x86 backend) and eager fp32. For each: median latency over --runs runs
after warm-up, its ratio to byoc-int8 at the same thread count, the share of the compute limit
that the AVX2 int8 peak puts on ResNet-18 (1.81 GMAC at ~97 GMAC/s per core), and logits cosine
vs the float model. Only ratios from one run mean anything: medians move between runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("TVM_NUM_THREADS", "2")  # TVM's pool sizes itself once; threads are set per run below

import argparse  # noqa: E402
import gc  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402

from byoc_int8.codegen.emit_c import default_simd  # noqa: E402
from byoc_int8.models import BUILTIN_MODELS  # noqa: E402
from byoc_int8.pipeline import compile_model, cosine  # noqa: E402

GMAC = 1.814
AVX2_PEAK_GMAC_PER_CORE = 97.0


def median_ms(run: Callable[[], object], runs: int) -> float:
    """Median wall time after warm-up, with Python's garbage collector paused (as timeit does),
    so that no system pays for collections the others triggered."""
    for _ in range(5):
        run()
    times = []
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return 1e3 * statistics.median(times)


def cpu_isa() -> str:
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni"]
    return f"{model}; {' '.join(f for f in wanted if f in flags)}; {os.cpu_count()} cores"


def byoc_int8(model, spec, x, simd=None):
    compiled = compile_model(model, spec.calibration_inputs(32), simd=simd)
    main = compiled.vm["main"]
    tensor = tvm.runtime.tensor(x)
    configure = tvm_ffi.get_global_func("runtime.config_threadpool")

    def make(threads: int):
        def run():
            return main(tensor)[0].numpy()

        configure(1, threads)
        return run

    return make, compiled


def onnx_runtime(model, spec, x, workdir: str):
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:
        print("onnxruntime is not installed (pip install -e '.[bench]'): its rows are skipped")
        return {}
    fp32 = os.path.join(workdir, "resnet18.onnx")
    torch.onnx.export(model, (torch.from_numpy(x),), fp32, input_names=["input"], dynamo=False, opset_version=17)
    prepared = os.path.join(workdir, "resnet18_pre.onnx")
    quant_pre_process(fp32, prepared)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter({"input": s[None]} for s in spec.calibration_inputs(32))

        def get_next(self):
            return next(self.samples, None)

    paths = {"onnxruntime fp32": fp32}
    for name, activation in (("onnxruntime int8 (u8 act)", QuantType.QUInt8), ("onnxruntime int8 (s8 act)", QuantType.QInt8)):
        path = os.path.join(workdir, f"resnet18_{activation.name}.onnx")
        quantize_static(prepared, path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=activation, weight_type=QuantType.QInt8)
        paths[name] = path

    def factory(path):
        def make(threads: int):
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            return lambda: session.run(None, {"input": x})[0]

        return make

    return {name: factory(path) for name, path in paths.items()}


def pytorch(model, spec, x):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.backends.quantized.engine = "x86"
    prepared = prepare_fx(model, get_default_qconfig_mapping("x86"), (torch.from_numpy(x),))
    with torch.no_grad():
        for sample in spec.calibration_inputs(32):
            prepared(torch.from_numpy(sample[None]))
    quantized = convert_fx(prepared)
    tensor = torch.from_numpy(x)

    def factory(net):
        def make(threads: int):
            torch.set_num_threads(threads)

            def run():
                with torch.no_grad():
                    return net(tensor).numpy()

            return run

        return make

    return {"pytorch fx int8 (x86)": factory(quantized), "pytorch eager fp32": factory(model)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    spec = BUILTIN_MODELS["resnet18"]
    model = spec.make()
    x = spec.evaluation_set(1)[0]
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    print(f"CPU: {cpu_isa()}; byoc-int8 kernels: {default_simd()}")

    byoc_make, compiled = byoc_int8(model, spec, x)
    print(f"byoc-int8 compile: {compiled.compile_seconds:.1f} s (import, calibration on 32 inputs, codegen, C compile)")
    systems = {"byoc-int8": byoc_make}
    if default_simd() == "avx512vnni":  # also the kernels an AVX2-only machine gets
        systems["byoc-int8 (avx2 kernels)"] = byoc_int8(model, spec, x, simd="avx2")[0]
    with tempfile.TemporaryDirectory() as workdir:
        systems |= onnx_runtime(model, spec, x, workdir)
        systems |= pytorch(model, spec, x)
        limit = {t: 1e3 * GMAC / (AVX2_PEAK_GMAC_PER_CORE * t) for t in args.threads}
        print(f"\n{'system':<28} {'threads':>7} {'median ms':>10} {'x byoc':>8} {'AVX2 lim':>8} {'cosine':>9}")
        for threads in args.threads:
            baseline = None
            for name, make in systems.items():
                run = make(threads)
                ms = median_ms(run, args.runs)
                baseline = baseline or ms
                print(f"{name:<28} {threads:>7} {ms:>10.2f} {ms / baseline:>8.2f} {100 * limit[threads] / ms:>7.0f}% "
                      f"{cosine(run(), reference):>9.5f}", flush=True)
    print(f"\npeak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
