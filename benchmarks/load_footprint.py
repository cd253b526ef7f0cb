"""What a compiled model costs to ship and to load: library size against its int8 weights, load
time, and peak memory of load + N runs, against ONNX Runtime's int8 session on the same model.

    python benchmarks/load_footprint.py [--models resnet18,mobilenet_v2] [--runs 100] [--calib 32]
        [--simd avx2]

Per model: compile time (end to end: import, calibration on --calib images, codegen, C compile),
the .so's size next to its constants (int8 weights, int32 biases, requantization constants and
tables, as the generated C holds them), then, in a fresh process for each system: the time to
load (byoc-int8: ``build.load`` of the .so; ONNX Runtime: ``InferenceSession`` of the QDQ model,
which quantizes and packs the weights at load), the first run (byoc-int8 packs its filters
then), and the peak resident memory (VmHWM) over load + --runs runs, less the process's peak
after importing its runtime. Medians move with the machine's load: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_models import make_model, ort_models  # noqa: E402

# Runs in a fresh interpreter: load one model, run it, print one JSON line.
CHILD = r"""
import json, sys, time
import numpy as np

def high_water_mib():  # this process's peak RSS (VmHWM), which exec starts afresh
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024

kind, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
x = np.load(sys.argv[4])
if kind == "byoc":
    import tvm
    from byoc_int8 import build
else:
    import onnxruntime as ort
before = high_water_mib()
start = time.perf_counter()
if kind == "byoc":
    vm = build.load(path)
    run = lambda: vm["main"](tvm.runtime.tensor(x))
else:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    run = lambda: session.run(None, {session.get_inputs()[0].name: x})
loaded = time.perf_counter()
run()
first = time.perf_counter()
for _ in range(runs):
    run()
print(json.dumps({"load_ms": 1e3 * (loaded - start), "first_run_ms": 1e3 * (first - loaded),
                  "peak_mib": high_water_mib() - before, "baseline_mib": before}))
"""


def measure(kind: str, path: str, runs: int, x_path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, kind, path, str(runs), x_path], capture_output=True, text=True,
                          env={**os.environ, "TVM_NUM_THREADS": "1"})
    if done.returncode:
        raise SystemExit(f"{kind} child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,resnet50,squeezenet1_1")
    parser.add_argument("--runs", type=int, default=100, help="runs after loading (default 100)")
    parser.add_argument("--calib", type=int, default=32, help="calibration images (default 32)")
    parser.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    parser.add_argument("--simd", default=None, help="kernel build (default: the fastest this CPU runs)")
    args = parser.parse_args()

    import torch
    from byoc_int8 import reference
    from byoc_int8.codegen.emit_c import footprint
    from byoc_int8.pipeline import compile_model

    rows = []
    with tempfile.TemporaryDirectory(prefix="load_footprint") as tmp:
        for name in args.models.split(","):
            model, shape = make_model(name)
            rng = np.random.default_rng(0)
            calib = rng.standard_normal((args.calib, *shape[1:]), dtype=np.float32)
            x = rng.standard_normal(shape, dtype=np.float32)
            x_path = os.path.join(tmp, f"{name}_x.npy")
            np.save(x_path, x)
            library = os.path.join(tmp, f"{name}.so")
            start = time.perf_counter()
            compiled = compile_model(model, calib, example_inputs=(torch.from_numpy(x),), output_path=library,
                                     simd=args.simd)
            compile_s = time.perf_counter() - start
            constants = sum(footprint(q)[1] for q in reference.quantized_regions(compiled.module).values())
            size = os.path.getsize(library)
            row = {"model": name, "kernels": compiled.kernels, "compile_s": compile_s, "so_mib": size / 2**20,
                   "constants_mib": constants / 2**20, "byoc": measure("byoc", library, args.runs, x_path)}
            if not args.no_ort:
                workdir = os.path.join(tmp, name)
                os.mkdir(workdir)
                onnx_path = ort_models(model, calib[:16], x, workdir).get("ort-u8")
                if onnx_path:
                    row["ort"] = measure("ort", onnx_path, args.runs, x_path)
                    row["onnx_mib"] = os.path.getsize(onnx_path) / 2**20
            rows.append(row)
            print(f"{name}: done", file=sys.stderr)

    kernels = ", ".join(sorted({r["kernels"] for r in rows}))
    print(f"\nload and memory, byoc-int8's {kernels} kernels, 1 thread, {args.runs} runs after loading, "
          f"{args.calib} calibration images\n")
    print("| model | compile s | .so MiB | constants MiB | .so / constants | load ms | first run ms | peak RSS MiB "
          "| ORT .onnx MiB | ORT load ms | ORT first run ms | ORT peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b, o = r["byoc"], r.get("ort")
        ort_cells = (f"{r['onnx_mib']:.1f} | {o['load_ms']:.1f} | {o['first_run_ms']:.1f} | {o['peak_mib']:.0f}"
                     if o else "- | - | - | -")
        print(f"| {r['model']} | {r['compile_s']:.1f} | {r['so_mib']:.1f} | {r['constants_mib']:.1f} | "
              f"{r['so_mib'] / r['constants_mib']:.2f} | {b['load_ms']:.1f} | {b['first_run_ms']:.1f} | "
              f"{b['peak_mib']:.0f} | {ort_cells} |")
    print("\npeak RSS: the child process's peak over load + runs, less its peak after importing the runtime "
          f"(byoc-int8 + TVM: {rows[0]['byoc']['baseline_mib']:.0f} MiB"
          + (f"; onnxruntime: {rows[0]['ort']['baseline_mib']:.0f} MiB)" if rows and 'ort' in rows[0] else ")"))


if __name__ == "__main__":
    main()
