"""Interleaved A/B of two runtime_c trees on whole models: the same compiled graph, emitted once
with this tree's kernels and adapter and once with another tree's (e.g. an older commit's,
extracted with `git archive <commit> runtime_c | tar -x -C DIR`), timed in one process in
alternating run by run at each thread count, so that the load of a shared machine hits both
alike.

    PYTHONPATH=. python benchmarks/ab_runtime.py --other DIR [--models mobilenet_v2,squeezenet1_1]
        [--threads 1,2] [--blocks 6] [--runs 20] [--simd avx512vnni] [--weight-bits 7] [--batch 8]

The other tree must split the generated module as this one does (runtime_c/tvm/tvm_adapter.h):
both its units, the model's and the kernels', compile from it. Outputs are checked equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", required=True, help="directory holding the other runtime_c/")
    parser.add_argument("--models", default="mobilenet_v2,squeezenet1_1")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--simd", default=None)
    parser.add_argument("--weight-bits", type=int, choices=(8, 7), default=8)
    parser.add_argument("--batch", type=int, default=1, help="images per run, compiled for (default 1)")
    args = parser.parse_args()
    try:
        threads = sorted({int(t) for t in args.threads.split(",") if t})
    except ValueError:
        parser.error(f"--threads {args.threads}: thread counts are integers, e.g. 1,2")
    if not threads or threads[0] < 1 or args.blocks < 1 or args.runs < 1 or args.batch < 1:
        parser.error("thread counts, --blocks, --runs and --batch must be positive")
    os.environ["TVM_NUM_THREADS"] = str(max(threads))
    all_cpus = set(os.sched_getaffinity(0))
    sys.path.insert(0, str(HERE))
    import torch
    import tvm
    from bench_models import make_model
    from byoc_int8.codegen import emit_c
    from byoc_int8.pipeline import compile_model
    from byoc_int8.qarith import NumberFormat

    configure = tvm.get_global_func("runtime.config_threadpool")
    this_root, other_root = emit_c.RUNTIME_C, Path(args.other).resolve() / "runtime_c"
    if not (other_root / "tvm" / "tvm_adapter.h").exists():
        sys.exit(f"{other_root}: no tvm/tvm_adapter.h; the other tree must be from the same module layout")
    print(f"A = this tree ({this_root}), B = {other_root}; ms per image (batch {args.batch}), median of "
          f"{args.blocks} x {args.runs} runs\n")
    print("| model | threads | A ms | B ms | A / B |")
    print("|---|---:|---:|---:|---:|")
    for name in [m for m in args.models.split(",") if m]:
        model, shape = make_model(name)
        x = np.random.default_rng(4321).standard_normal((args.batch, *shape[1:]), dtype=np.float32)
        calib = np.random.default_rng(1234).standard_normal((16, *shape[1:]), dtype=np.float32)
        compiled = {}
        for label, root in (("A", this_root), ("B", other_root)):
            emit_c.RUNTIME_C = root
            try:
                compiled[label] = compile_model(model, calib, example_inputs=(torch.from_numpy(x),), simd=args.simd,
                                                number_format=NumberFormat(weight_bits=args.weight_bits))
            finally:
                emit_c.RUNTIME_C = this_root
        tensor = tvm.runtime.tensor(x)
        mains = {label: c.vm["main"] for label, c in compiled.items()}

        def run(label):
            out = mains[label](tensor)
            while not hasattr(out, "numpy"):
                out = out[0]
            return out

        outputs = {label: run(label).numpy() for label in mains}
        assert np.array_equal(outputs["A"], outputs["B"]), f"{name}: the two trees' outputs differ"
        # Per block and thread count, A and B alternate run by run (the order flipping every
        # run): a slow phase of the machine, however short, lands on both.
        times = {(label, n): [] for label in mains for n in threads}
        for block in range(args.blocks):
            for n in threads:
                configure(1, n)
                os.sched_setaffinity(0, all_cpus)
                run("A"), run("B")
                for i in range(args.runs):
                    for label in (["A", "B"] if (i + block) % 2 == 0 else ["B", "A"]):
                        start = time.perf_counter()
                        run(label)
                        times[(label, n)].append((time.perf_counter() - start) * 1e3)
        for n in threads:
            a = statistics.median(times[("A", n)]) / args.batch
            b = statistics.median(times[("B", n)]) / args.batch
            print(f"| {name} | {n} | {a:.3f} | {b:.3f} | {a / b:.2f} |", flush=True)
        del mains, compiled


if __name__ == "__main__":
    main()
