"""Per-kernel-call profile of a compiled model: where the milliseconds of one image go.

    PYTHONPATH=. python benchmarks/profile_layers.py [--models mobilenet_v2,squeezenet1_1]
        [--threads 1,2] [--simd avx512vnni] [--weight-bits 7] [--blocks 5] [--runs 20] [--top 25] [--all]

Each model (as benchmarks/bench_models.py builds it: torchvision, random weights, randomized
batch-norm statistics, 16 standard-normal calibration inputs) is compiled with the kernels of
this tree and B8_PROFILE=1, which makes runtime_c/tvm/tvm_adapter.c time every kernel call of
the generated code (thread-pool launch included for the calls it splits) into a log read here
through ctypes. Calls are matched to the regions' nodes by their order. The thread counts run
interleaved (--blocks rounds of --runs images each), so that a slow phase of the shared machine
hits them alike; every figure is the median over all runs.

Printed per thread count: each call (or the --top slowest) with its op, shapes, ms, share of the
model's time, GMAC/s (convolution and dense MACs), and a summary per op kind; the header
compares the model's time with its regions' (the rest is the VM's: host ops, tensors) and with
the timed calls' (the rest: argument checks, the arena, int8 copies).

--ort also profiles ONNX Runtime's static QDQ int8 model with uint8 activations (as
bench_models.py builds it, on the same calibration inputs and input) with its own per-node profiler,
at each thread count, and sets its convolutions, dense layers and adds beside byoc-int8's, matched
in order: per layer shape the summed ms of both and their ratio, the layers that lose most first
(--ort-isa avx2 / avxvnni / avx512bw as in bench_models.py: ONNX Runtime's AVX2, AVX-VNNI or
AVX-512-without-VNNI kernels on a CPU with AVX-512 VNNI; pick --simd to match). ONNX Runtime runs
after byoc-int8 at each thread count, not alternated with it: a slow phase of the machine may hit
one of them only; bench_models.py gives the models' ratio.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def expected_calls(q, features: int | None = None) -> list[tuple[str, str, float]]:
    """(kernel log name, description, MACs) for each timed call of one region, in order (of one
    part of it: its `features` pass between the parts as they lie)."""
    g = q.graph
    calls = []

    def boundary(value, dtype, entering):
        if value == features:
            return
        if dtype != "int8":
            calls.append(("quantize" if entering else "dequantize", f"{'in' if entering else 'out'} {list(g.shapes[value])}", 0.0))
        elif len(g.shapes[value]) == 4 and g.layout != "NHWC":
            calls.append(("transpose", f"{'in' if entering else 'out'} {list(g.shapes[value])}", 0.0))

    for i, v in enumerate(g.inputs):
        boundary(v, g.input_dtype(i), True)
    for index, qn in enumerate(q.nodes):
        n, p, a = qn.node, qn.params, qn.node.attrs
        shapes = " ".join(str(list(g.shapes[v])) for v in n.inputs) + f" -> {list(g.shapes[n.output])}"
        out = math.prod(g.shapes[n.output])
        name = {"conv2d": "conv", "dense": "dense", "max_pool2d": "max_pool", "avg_pool2d": "avg_pool",
                "global_avg_pool2d": "global_avg_pool"}.get(qn.op, qn.op)
        if qn.op == "conv2d":
            w = p["weight"].shape
            kind = "dwconv" if p["depthwise"] else "conv"
            macs = out * w[1] * w[2] * (1 if p["depthwise"] else w[3])
            desc = (f"{index:3d} {kind} {w[1]}x{w[2]} s{a['strides'][0]} g{a['groups']} {shapes}")
            calls.append(("conv", desc, float(macs)))
        elif qn.op == "dense":
            calls.append(("dense", f"{index:3d} dense {shapes}", float(out * p["weight"].shape[1])))
        elif qn.op in ("transpose", "reshape"):
            steps = [p["transpose"]] if qn.op == "transpose" else [p["to_logical"], p["to_stored"]]
            for step in steps:
                if step is not None:
                    calls.append(("transpose", f"{index:3d} {qn.op} {shapes}", 0.0))
        else:
            extra = f" {a['pool_size'][0]}x{a['pool_size'][1]} s{a['strides'][0]}" if "pool_size" in a else ""
            calls.append((name, f"{index:3d} {qn.op}{extra} {shapes}", 0.0))
    for i, v in enumerate(g.outputs):
        boundary(v, g.output_dtype(i), False)
    return calls


def fold_images(records: list[tuple[str, int]], qgraphs: dict) -> list[tuple[str, int]]:
    """One run's log with each region's calls summed per node: a region of a batch whose images
    never mix runs its calls once per image, then its head's once (byoc_int8.codegen.emit_c.image_parts)."""
    from byoc_int8.codegen.emit_c import image_parts

    folded, i = [], 0
    while i < len(records):
        symbol = records[i][0]
        if symbol not in qgraphs:
            raise SystemExit(f"unexpected record {symbol!r} at {i}")
        end = next((j for j in range(i + 1, len(records)) if records[j][0] == "region_total"), None)
        parts = image_parts(qgraphs[symbol])
        images, per_image, head = (1, qgraphs[symbol], None) if parts is None else parts
        features = head.graph.inputs[0] if head else None
        nodes = len(expected_calls(per_image, features))
        once = len(expected_calls(head, features)) if head else 0
        if end is None or not nodes or end - i - 1 != images * nodes + once:
            raise SystemExit(f"region {symbol}: {len(records) if end is None else end - i - 1} calls logged "
                             f"for {images} x {nodes} + {once} calls")
        calls = records[i + 1:end]
        folded += [records[i], *((calls[j][0], sum(t for _, t in calls[j:images * nodes:nodes])) for j in range(nodes)),
                   *calls[images * nodes:], records[end]]
        i = end + 1
    return folded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mobilenet_v2,squeezenet1_1")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--simd", default=None, help="kernel build (default: the fastest this CPU runs)")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25, help="calls listed per thread count (default 25)")
    parser.add_argument("--all", action="store_true", help="list every call, in order")
    parser.add_argument("--weight-bits", type=int, choices=(8, 7), default=8,
                        help="the number format's weight width (7: the AVX2 kernels' offset form)")
    parser.add_argument("--batch", type=int, default=1,
                        help="images per run (default 1); every figure is per image (a run's time / batch)")
    parser.add_argument("--ort", action="store_true",
                        help="also ONNX Runtime's u8 int8 model, per node, beside byoc-int8's layers")
    parser.add_argument("--ort-isa", choices=("native", "avx2", "avxvnni", "avx512bw"), default="native",
                        help="with --ort: the kernels ONNX Runtime sees (bench_models.py --ort-isa)")
    args = parser.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",") if t})
    if not threads or min(threads) < 1 or args.blocks < 1 or args.runs < 1 or args.batch < 1 or args.top < 1:
        parser.error("thread counts, --blocks, --runs, --batch and --top must be positive")
    if args.ort_isa != "native" and not args.ort:
        parser.error(f"--ort-isa {args.ort_isa} takes effect with --ort only")
    os.environ["TVM_NUM_THREADS"] = str(max(threads))
    all_cpus = set(os.sched_getaffinity(0))

    sys.path.insert(0, str(HERE))
    if args.ort and args.ort_isa != "native":
        import ort_isa  # before onnxruntime is imported (by torch's exporter, too)

        ort_isa.import_for_option(parser, args.ort_isa)
    import torch
    import tvm
    from bench_models import make_model
    from byoc_int8 import reference
    from byoc_int8.codegen import emit_c
    from byoc_int8.pipeline import compile_model
    from byoc_int8.qarith import NumberFormat

    # Profiling is compiled in only here (B8_PROFILE=1 in both units, the calls timed).
    emit_c.PROFILE_CALLS = True
    simd = args.simd or emit_c.default_simd()
    configure = tvm.get_global_func("runtime.config_threadpool")

    for model_name in [m for m in args.models.split(",") if m]:
        model, shape = make_model(model_name)
        shape = (args.batch, *shape[1:])
        x = np.random.default_rng(4321).standard_normal(shape, dtype=np.float32)
        calib = np.random.default_rng(1234).standard_normal((16, *shape[1:]), dtype=np.float32)
        compiled = compile_model(model, calib, example_inputs=(torch.from_numpy(x),), simd=simd,
                                 number_format=NumberFormat(weight_bits=args.weight_bits))
        qgraphs = reference.quantized_regions(compiled.module)
        lib = ctypes.CDLL(compiled.library_path)
        lib.b8_profile_read.restype = ctypes.c_int32
        capacity = 1 << 16
        names = (ctypes.c_char_p * capacity)()
        ns = (ctypes.c_int64 * capacity)()
        main_fn, tensor = compiled.vm["main"], tvm.runtime.tensor(x)

        def run() -> tuple[float, list[tuple[str, int]]]:
            start = time.perf_counter_ns()
            out = main_fn(tensor)
            total = time.perf_counter_ns() - start
            del out
            count = lib.b8_profile_read(names, ns, capacity)
            return total, fold_images([(names[i].decode(), ns[i]) for i in range(count)], qgraphs)

        def prepare(n: int) -> None:
            configure(1, n)
            os.sched_setaffinity(0, all_cpus)

        # One warm-up run per thread count (filters are packed on the first).
        for n in threads:
            prepare(n)
            run()
        totals: dict[int, list[float]] = defaultdict(list)
        per_call: dict[int, list[list[int]]] = {}
        layout = None
        for block in range(args.blocks):
            for n in threads[block % len(threads):] + threads[:block % len(threads)]:
                prepare(n)
                for _ in range(args.runs):
                    total, records = run()
                    if layout is None:
                        layout = [name for name, _ in records]
                    if [name for name, _ in records] != layout:
                        raise SystemExit("the calls differ between runs")
                    totals[n].append(total)
                    per_call.setdefault(n, [[] for _ in records])
                    for i, (_, t) in enumerate(records):
                        per_call[n][i].append(t)

        # Match the log with the regions: "<symbol>", its calls, "region_total".
        rows = []  # (log index, kind, description, macs)
        i = 0
        while i < len(layout):
            symbol = layout[i]
            if symbol not in qgraphs:
                raise SystemExit(f"unexpected record {symbol!r} at {i}")
            calls = expected_calls(qgraphs[symbol])
            got = layout[i + 1: i + 1 + len(calls)]
            if got != [c[0] for c in calls] or layout[i + 1 + len(calls)] != "region_total":
                raise SystemExit(f"region {symbol}: calls {got[:10]}... differ from the nodes' {[c[0] for c in calls][:10]}...")
            for j, (kind, desc, macs) in enumerate(calls):
                rows.append((i + 1 + j, kind, desc, macs / args.batch))
            rows.append((i + 1 + len(calls), "region_total", symbol, 0.0))
            i += len(calls) + 2

        total_macs = sum(r[3] for r in rows)
        print(f"\n## {model_name}: byoc-int8 {simd}, batch {args.batch}, {total_macs / 1e9:.3f} GMAC per image in "
              "convolutions and dense layers\n")
        for n in threads:
            med = {r[0]: statistics.median(per_call[n][r[0]]) / 1e6 / args.batch for r in rows}
            model_ms = statistics.median(totals[n]) / 1e6 / args.batch
            kernel_rows = [r for r in rows if r[1] != "region_total"]
            # Sums per run, then their median: a run slowed by the machine counts as one run
            # (medians of the parts would not add up to the whole).
            runs = range(len(totals[n]))
            region_ms = statistics.median(sum(per_call[n][r[0]][k] for r in rows if r[1] == "region_total")
                                          for k in runs) / 1e6 / args.batch
            kernel_ms = statistics.median(sum(per_call[n][r[0]][k] for r in kernel_rows) for k in runs) / 1e6 / args.batch
            print(f"### {n} thread{'s' * (n > 1)}: {model_ms:.3f} ms per image (median of {len(totals[n])}); "
                  f"regions {region_ms:.3f} ms, timed kernel calls {kernel_ms:.3f} ms (medians of per-run sums; "
                  f"the rows below are medians per call)\n")
            by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
            for r in kernel_rows:
                kind = r[2].split()[1] if r[1] == "conv" else r[1]
                by_kind[kind][0] += med[r[0]]
                by_kind[kind][1] += r[3]
                by_kind[kind][2] += 1
            print("| op | calls | ms | share | GMAC/s |")
            print("|---|---:|---:|---:|---:|")
            for kind, (ms, macs, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
                gmacs = f"{macs / ms / 1e6:.1f}" if macs else ""
                print(f"| {kind} | {count} | {ms:.3f} | {100 * ms / model_ms:.1f}% | {gmacs} |")
            print()
            listed = kernel_rows if args.all else sorted(kernel_rows, key=lambda r: -med[r[0]])[:args.top]
            print("| call | ms | share | GMAC/s |")
            print("|---|---:|---:|---:|")
            for r in listed:
                ms = med[r[0]]
                gmacs = f"{r[3] / ms / 1e6:.1f}" if r[3] else ""
                print(f"| {r[2]} | {ms:.4f} | {100 * ms / model_ms:.1f}% | {gmacs} |")
            print()
            if args.ort:
                ours = [(r[1], r[2].split(None, 1)[1], med[r[0]]) for r in kernel_rows if r[1] in ORT_OPS]
                print_against_ort(ours, ort_nodes(model, calib, x, n, args.blocks * args.runs, args.batch), n,
                                  args.all)
        del main_fn, tensor, compiled


# byoc-int8's kernel calls and the ONNX Runtime nodes that do their work.
ORT_OPS = {"conv": "QLinearConv", "dense": "QGemm", "add": "QLinearAdd"}


def ort_nodes(model, calib, x, threads: int, runs: int, batch: int) -> list[tuple[str, float]]:
    """ONNX Runtime's u8 QDQ model (bench_models.ort_models) run `runs` times on `threads` threads
    with its profiler: (op type, median ms per image) of each node, in the order they ran."""
    import json
    import tempfile

    import onnxruntime as ort
    from bench_models import ort_models

    with tempfile.TemporaryDirectory() as workdir:
        path = ort_models(model, calib, x, workdir)["ort-u8"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(workdir, "profile")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        warm_up = 3
        for _ in range(warm_up + runs):
            session.run(None, {"input": x})
        with open(session.end_profiling()) as f:
            events = json.load(f)
    times: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, str] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = event["name"][: -len("_kernel_time")]
            times[node].append(event["dur"] / 1000 / batch)  # "dur": microseconds per run
            kinds[node] = event["args"]["op_name"]
    return [(kinds[node], statistics.median(d[warm_up:])) for node, d in times.items()]


def print_against_ort(ours: list[tuple[str, str, float]], theirs: list[tuple[str, float]], threads: int,
                      every: bool) -> None:
    """byoc-int8's calls (kind, description, ms) beside ONNX Runtime's nodes of those kinds, in order."""
    theirs = [(kind, ms) for kind, ms in theirs if kind in ORT_OPS.values()]
    if [ORT_OPS[kind] for kind, _, _ in ours] != [kind for kind, _ in theirs]:
        print(f"ONNX Runtime's nodes ({len(theirs)} convolutions, dense layers and adds) do not match "
              f"byoc-int8's calls ({len(ours)}) in order: no comparison\n")
        return
    ours_ms, theirs_ms = sum(ms for _, _, ms in ours), sum(ms for _, ms in theirs)
    print(f"#### against ONNX Runtime int8 (u8 activations, its per-node profile), {threads} "
          f"thread{'s' * (threads > 1)}: these layers {ours_ms:.3f} ms per image, ONNX Runtime's {theirs_ms:.3f} "
          f"({ours_ms / theirs_ms:.2f}x)\n")
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for (_, description, ms), (_, ort_ms) in zip(ours, theirs):
        group = groups[description if not every else f"{len(groups)} {description}"]
        group[0] += 1
        group[1] += ms
        group[2] += ort_ms
    print("| layer | calls | byoc-int8 ms | ONNX Runtime ms | ratio |")
    print("|---|---:|---:|---:|---:|")
    order = groups.items() if every else sorted(groups.items(), key=lambda kv: kv[1][2] - kv[1][1])
    for description, (count, ms, ort_ms) in order:
        print(f"| {description} | {count} | {ms:.4f} | {ort_ms:.4f} | {ms / ort_ms:.2f} |")
    print()


if __name__ == "__main__":
    main()
