"""byoc-int8 against ONNX Runtime and PyTorch, on the CNNs of the coverage table, in one process.

    pip install -e '.[bench]'      # onnxruntime, onnx (without them their rows are left out)
    python benchmarks/bench_models.py [--models resnet18,mobilenet_v2] [--threads 1,2]
        [--blocks 5] [--runs 10] [--simd avx2] [--portable] [--batch 1] [--calib 16] [--weight-bits 8,7]
        [--ort-isa avx2|avxvnni|avx512bw]

Models: torchvision networks with random weights and randomized batch-norm statistics (as
``benchmarks/coverage.py`` builds them), standard-normal inputs. Systems: byoc-int8 with each
kernel build this CPU runs (``--simd`` picks some; the portable build only with ``--portable`` or
``--simd portable``: it is slow; ``--weight-bits 8,7`` also with 7-bit weights, rows "w7"), ONNX
Runtime static QDQ int8 (per-channel int8 weights; uint8 and int8 activations) and fp32, PyTorch
FX int8 (x86 backend; "n/a" and the reason where it does not quantize the model) and PyTorch
eager fp32.
All of them calibrate on the same ``--calib`` inputs. ``--ort-isa avx2`` runs ONNX Runtime on its
AVX2 int8 kernels on a CPU with AVX-512 VNNI (``benchmarks/ort_isa.py`` hides AVX-512 and VNNI
from its CPUID), against byoc-int8's AVX2 build: the AVX2 comparison on one CPU. ``--ort-isa
avxvnni`` hides AVX-512 only (a CPU with AVX-VNNI), against byoc-int8's AVX-VNNI and AVX2 builds;
``--ort-isa avx512bw`` hides VNNI only (a CPU of AVX-512 without VNNI, as Intel's Skylake-SP: ONNX
Runtime's AVX-512 int8 kernels), against byoc-int8's AVX-512BW and AVX2 builds, those such a CPU runs.

Measurement: every (system, thread count) runs once per block, each thread count's systems back
to back (both orders rotated each block) so that a slow phase of the machine hits every system
alike; per block a short warm-up, then ``--runs`` timed runs; ms is the median of all per-run
times. Columns: ms per image, the ratio to ONNX Runtime int8 (the faster of its u8 and s8
activation models at that thread count, marked "ref": the median over blocks of the ratio of the
two systems' medians in that block, which a slow phase longer than a block leaves alone; the
blocks' range follows), GMAC/s (convolution and linear MACs counted with forward hooks on the
torch model), the share of the int8 peak of the ISA in use (measured by
``benchmarks/int8_peak.c`` on this machine at the same thread count) and the cosine of the
logits with the float model's. Medians move with the machine's load: compare rows of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_MODELS = "resnet18,mobilenet_v2,resnet50,squeezenet1_1"
BUILDS = ("amx", "avx512vnni", "avx512bw", "avxvnni", "avx2", "portable")  # byoc-int8 kernel builds, fastest first
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8")


# ---------------------------------------------------------------------------------------------
# The machine


def cpu_info() -> tuple[str, set[str]]:
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return model, flags


def allowed_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


def measure_peaks(threads: list[int]) -> tuple[dict[tuple[str, int], float], str]:
    """GMAC/s per (ISA, threads) from benchmarks/int8_peak.c, compiled here with the system cc."""
    with tempfile.TemporaryDirectory(prefix="int8_peak") as tmp:
        binary = Path(tmp) / "int8_peak"
        cc = os.environ.get("CC", "cc")
        try:
            subprocess.run([cc, "-O1", "-pthread", str(HERE / "int8_peak.c"), "-o", str(binary)],
                           check=True, capture_output=True, text=True)
            out = subprocess.run([str(binary), *map(str, threads)], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as err:
            detail = getattr(err, "stderr", "") or str(err)
            return {}, f"int8 peak not measured ({cc} failed: {detail.strip().splitlines()[-1] if detail.strip() else err})"
    peaks = {}
    for line in out.splitlines():
        isa, n, gmacs = line.split()
        peaks[(isa, int(n))] = float(gmacs)
    return peaks, ""


# ---------------------------------------------------------------------------------------------
# Fairness: the whole affinity mask, threads that have gone to sleep


ALL_CPUS: set[int] = set()


def reset_affinity() -> None:
    """Threads created afterwards (ONNX Runtime's, PyTorch's) inherit the calling thread's mask
    (TVM's pool would pin it if TVM_BIND_THREADS allowed). Give it every allowed CPU."""
    os.sched_setaffinity(0, ALL_CPUS)


def _proc_task(tid: str, name: str) -> str:
    with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/{name}") as f:
        return f.read()
    return ""  # the thread has ended


def _thread_states() -> dict[int, str]:
    """Scheduler state of each thread of this process ("R": running or runnable)."""
    states = {}
    for tid in os.listdir("/proc/self/task"):
        stat = _proc_task(tid, "stat")
        if stat:
            states[int(tid)] = stat.rsplit(")", 1)[1].split()[0]
    return states


@dataclass
class Quiesce:
    """Wait until the process's other threads sleep: TVM's workers spin (sched_yield) up to
    300000 times after their last task and OpenMP's threads spin too, which would take CPU from
    the next system measured."""

    waits: int = 0
    timeouts: int = 0
    seconds: float = 0.0

    def __call__(self, timeout: float = 1.0) -> None:
        me, start, calm = threading.get_native_id(), time.perf_counter(), 0
        while calm < 2:
            busy = any(state == "R" for tid, state in _thread_states().items() if tid != me)
            calm = 0 if busy else calm + 1
            if time.perf_counter() - start > timeout:
                self.timeouts += 1
                break
            time.sleep(0.002)
        self.waits += 1
        self.seconds += time.perf_counter() - start


@dataclass(frozen=True)
class CpuTimes:
    """CPU-seconds so far: the machine's busy time (every CPU, /proc/stat: all but idle and iowait),
    of it the hypervisor's steal, and this process's own (its threads and its waited-for children:
    the peak benchmark, the C compiler), at wall-clock time `wall`."""

    busy: float
    steal: float
    own: float
    wall: float


def cpu_times() -> CpuTimes:
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    hz = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return CpuTimes(busy=(sum(ticks) - ticks[3] - ticks[4]) / hz, steal=ticks[7] / hz,
                    own=own.user + own.system + own.children_user + own.children_system, wall=time.perf_counter())


def other_cpu_share(start: CpuTimes, end: CpuTimes, cpus: int) -> tuple[float, float]:
    """The share of the machine's `cpus` CPUs that other processes used between two readings (their
    busy time, this process's own left out; the load average counts this process's threads, and for
    a minute after it the work that ended before it), and the share the hypervisor stole."""
    capacity = max(end.wall - start.wall, 1e-9) * cpus
    others = (end.busy - start.busy) - (end.own - start.own) - (end.steal - start.steal)
    return max(others, 0.0) / capacity, (end.steal - start.steal) / capacity


def affinity_summary() -> str:
    masks: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        for line in _proc_task(tid, "status").splitlines():
            if line.startswith("Cpus_allowed_list"):
                mask = line.split(":", 1)[1].strip()
                masks[mask] = masks.get(mask, 0) + 1
    return ", ".join(f"{n} on CPUs {mask}" for mask, n in sorted(masks.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------------------------
# Models


def make_model(name: str):
    import torch
    from byoc_int8.models import BUILTIN_MODELS, randomize_batch_norm

    if name in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[name]
        return spec.make(), spec.input_shape
    import torchvision

    if not callable(getattr(torchvision.models, name, None)):
        raise SystemExit(f"unknown model {name!r}: a built-in model or a torchvision.models classifier")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    return model.eval(), (1, 3, 224, 224)


def count_macs(model, shape) -> int:
    """Multiply-accumulates of one image through the convolutions and linear layers."""
    import torch

    total = 0

    def conv(module, _inputs, out):
        nonlocal total
        total += out[0].numel() * (module.in_channels // module.groups) * module.kernel_size[0] * module.kernel_size[1]

    def linear(module, _inputs, out):
        nonlocal total
        total += out[0].numel() * module.in_features

    hooks = [m.register_forward_hook(conv if isinstance(m, torch.nn.Conv2d) else linear)
             for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(torch.zeros((1, *shape[1:])))
    for hook in hooks:
        hook.remove()
    return total


# ---------------------------------------------------------------------------------------------
# Systems: each gives run() for a thread count, with its threads set explicitly.


@dataclass
class System:
    name: str
    kind: str  # "byoc", "ort-u8", "ort-s8", "ort-fp32", "torch-int8", "torch-fp32"
    isa: str | None  # the int8 ISA whose peak it is compared with (None: float or portable)
    runs: dict[int, Callable[[], object]] = field(default_factory=dict)  # threads -> one run
    prepare: Callable[[int], None] = lambda threads: None  # sets the thread count before a block
    note: str = ""  # why it does not run ("n/a (...)")


def byoc_systems(model, calib, x, builds: list[str], threads: list[int], compile_seconds: dict,
                 weight_bits: list[int]) -> list[System]:
    import torch
    import tvm
    from byoc_int8.pipeline import compile_model
    from byoc_int8.qarith import NumberFormat

    configure = tvm.get_global_func("runtime.config_threadpool")
    num_threads = tvm.get_global_func("runtime.NumThreads")

    def prepare(n: int) -> None:
        configure(1, n)  # TVM's pool splits each parallel op into n tasks, the main thread runs one
        assert num_threads() == n, (num_threads(), n)

    systems = []
    for simd, bits in ((simd, bits) for simd in builds for bits in weight_bits):
        label = simd if bits == 8 else f"{simd} w{bits}"
        start = time.perf_counter()
        compiled = compile_model(model, calib, example_inputs=(torch.from_numpy(x),), simd=simd,
                                 number_format=NumberFormat(weight_bits=bits))
        compile_seconds[label] = time.perf_counter() - start
        main, tensor = compiled.vm["main"], tvm.runtime.tensor(x)

        def run(main=main, tensor=tensor, compiled=compiled):  # compiled: keeps its library alive
            out = main(tensor)
            while not hasattr(out, "numpy"):
                out = out[0]
            return out

        systems.append(System(f"byoc-int8 {label}", "byoc", None if simd == "portable" else simd,
                              {t: run for t in threads}, prepare))
    return systems


def ort_models(model, calib, x, workdir: str) -> dict[str, str]:
    """The model for ONNX Runtime: fp32 ONNX, and static QDQ int8 with per-channel int8 weights
    and uint8 / int8 activations calibrated on `calib` (paths by kind); {} without onnxruntime."""
    try:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:
        return {}
    import torch

    fp32 = os.path.join(workdir, "model.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x),), fp32, input_names=["input"], output_names=["output"],
                          dynamo=False, opset_version=17, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    prepared = os.path.join(workdir, "model_pre.onnx")
    quant_pre_process(fp32, prepared)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{"input": s[None]} for s in calib])

        def get_next(self):
            return next(self.samples, None)

    paths = {"ort-fp32": fp32}
    for kind, activation in (("ort-u8", QuantType.QUInt8), ("ort-s8", QuantType.QInt8)):
        paths[kind] = os.path.join(workdir, f"model_{activation.name}.onnx")
        with contextlib.redirect_stdout(sys.stderr):
            quantize_static(prepared, paths[kind], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=activation, weight_type=QuantType.QInt8)
    return paths


def ort_systems(model, calib, x, workdir: str, threads: list[int], best_isa: str | None) -> list[System]:
    paths = ort_models(model, calib, x, workdir)
    if not paths:
        return []
    import onnxruntime as ort

    def session(path: str, n: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = n  # the calling thread included
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        reset_affinity()  # its threads start now and inherit this thread's mask
        created = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return lambda: created.run(None, {"input": x})[0]

    names = {"ort-u8": "onnxruntime int8 u8-act", "ort-s8": "onnxruntime int8 s8-act", "ort-fp32": "onnxruntime fp32"}
    return [System(names[kind], kind, None if kind == "ort-fp32" else best_isa, {t: session(path, t) for t in threads})
            for kind, path in paths.items()]


def torch_system(model, calib, x, threads: list[int], best_isa: str | None) -> System:
    """PyTorch int8: FX graph mode post-training static quantization, x86 backend (fbgemm +
    onednn), per-channel weights, calibrated on the same inputs."""
    import torch

    system = System("pytorch fx int8 x86", "torch-int8", best_isa, prepare=torch.set_num_threads)
    try:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

        torch.backends.quantized.engine = "x86"
        tensor = torch.from_numpy(x)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            prepared = prepare_fx(model, get_default_qconfig_mapping("x86"), (tensor,))
            for sample in calib:
                prepared(torch.from_numpy(sample[None]))
            quantized = convert_fx(prepared)
            quantized(tensor)
    except Exception as err:  # noqa: BLE001 - any failure is reported as n/a with its reason
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        system.note = f"n/a ({type(err).__name__}: {message})"[:200]
        return system

    def run():
        with torch.no_grad():
            return quantized(tensor)

    system.runs = {t: run for t in threads}
    return system


def torch_fp32_system(model, x, threads: list[int]) -> System:
    import torch

    tensor = torch.from_numpy(x)

    def run():
        with torch.no_grad():
            return model(tensor)

    return System("pytorch fp32", "torch-fp32", None, {t: run for t in threads}, torch.set_num_threads)


def as_numpy(out) -> np.ndarray:
    return out.numpy() if hasattr(out, "numpy") else np.asarray(out)


# ---------------------------------------------------------------------------------------------
# Measurement


def measure(systems: list[System], threads: list[int], blocks: int, runs: int, quiesce: Quiesce) -> dict:
    """Per-run seconds of every (system, threads), one list per block: each block runs every thread
    count's systems back to back (both orders rotated block by block)."""
    measured = [s for s in systems if not s.note]
    times: dict[tuple[str, int], list[list[float]]] = {(s.name, t): [] for s in measured for t in threads}
    for block in range(-1, blocks if measured else -1):  # block -1: warm-up only
        shift = max(block, 0)
        order = [(s, t) for t in threads[shift % len(threads):] + threads[:shift % len(threads)]
                 for s in measured[shift % len(measured):] + measured[:shift % len(measured)]]
        for system, t in order:
            run = system.runs[t]
            system.prepare(t)
            reset_affinity()
            quiesce()
            for _ in range(5 if block < 0 else 2):
                as_numpy(run())
            if block < 0:
                continue
            block_times = []
            times[(system.name, t)].append(block_times)
            gc.disable()
            try:
                for _ in range(runs):
                    start = time.perf_counter()
                    as_numpy(run())
                    block_times.append(time.perf_counter() - start)
            finally:
                gc.enable()
    return times


def block_ratios(system: list[list[float]], reference: list[list[float]]) -> list[float]:
    """Per block, the ratio of the two systems' medians in that block."""
    return [statistics.median(a) / statistics.median(b) for a, b in zip(system, reference)]


def paired_ratio(system: list[list[float]], reference: list[list[float]]) -> float:
    """The median over blocks of block_ratios: within a block the two ran within seconds of each
    other, so a slow phase of a shared machine that lasts longer scales both and cancels, where a
    ratio of whole-run medians would keep it."""
    return statistics.median(block_ratios(system, reference))


def ratio_text(system: list[list[float]], reference: list[list[float]]) -> str:
    """paired_ratio and, where there are several blocks, the range of the blocks' ratios."""
    ratios = block_ratios(system, reference)
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 and system is not reference else ""
    return f"{paired_ratio(system, reference):.2f}{spread}"


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--blocks", type=int, default=5, help="round-robin blocks (default 5)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per system per block (default 10)")
    parser.add_argument("--simd", help="byoc-int8 kernel builds to run, comma-separated (default: every build "
                                       "this CPU runs but portable)")
    parser.add_argument("--portable", action="store_true", help="also the portable C build (slow)")
    parser.add_argument("--batch", type=int, default=1, help="images per run (default 1)")
    parser.add_argument("--calib", type=int, default=16, help="calibration inputs (default 16)")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument("--ort-isa", choices=("native", "avx2", "avxvnni", "avx512bw"), default="native",
                        help="avx2: ONNX Runtime sees a CPU without AVX-512 and VNNI and runs its AVX2 int8 "
                             "kernels (benchmarks/ort_isa.py), byoc-int8 its AVX2 build; avxvnni: AVX-512 hidden "
                             "only (ONNX Runtime's AVX-VNNI kernels), byoc-int8's AVX-VNNI and AVX2 builds; "
                             "avx512bw: VNNI hidden only (ONNX Runtime's AVX-512 kernels), byoc-int8's AVX-512BW "
                             "and AVX2 builds")
    parser.add_argument("--weight-bits", default="8",
                        help="byoc-int8 weight widths to run each build with, comma-separated: 8 (the default), "
                             "7 (rows 'w7': the AVX2 kernels' fast path, one bit of weight precision less)")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    threads = sorted({int(t) for t in args.threads.split(",") if t})
    weight_bits = [int(b) for b in args.weight_bits.split(",") if b]
    if not weight_bits or not set(weight_bits) <= {7, 8}:
        parser.error("--weight-bits takes 8 and / or 7")
    if not threads or min(threads) < 1 or args.blocks < 1 or args.runs < 1 or args.batch < 1:
        parser.error("thread counts, --blocks, --runs and --batch must be positive")

    # TVM sizes its pool once, from TVM_NUM_THREADS, when the pool starts (the first parallel
    # run); runtime.config_threadpool then sets any count up to that size, so one process
    # measures every thread count. Set before byoc_int8 (whose default is every core) and tvm.
    os.environ["TVM_NUM_THREADS"] = str(max(threads))
    ALL_CPUS.update(allowed_cpus())
    hidden_isa = None
    if args.ort_isa != "native":
        import ort_isa

        hidden_isa = ort_isa.import_for_option(parser, args.ort_isa)

    import torch

    torch.set_num_interop_threads(1)
    from byoc_int8.codegen.emit_c import SIMD_FLAGS
    from byoc_int8.pipeline import cosine

    model_name, flags = cpu_info()
    runnable = [b for b in BUILDS if SIMD_FLAGS[b] <= flags]
    if args.simd:
        builds = [b for b in args.simd.split(",") if b]
        unknown = [b for b in builds if b not in SIMD_FLAGS]
        if unknown:
            parser.error(f"unknown kernel build(s) {', '.join(unknown)}: choose from {', '.join(BUILDS)}")
        skipped = [b for b in builds if b not in runnable]
        for b in skipped:
            print(f"byoc-int8 {b}: this CPU lacks {', '.join(sorted(SIMD_FLAGS[b] - flags))}; not run")
        builds = [b for b in builds if b in runnable]
    else:
        # With ONNX Runtime on its AVX2, AVX-VNNI or AVX-512 (no VNNI) kernels, the byoc-int8 builds that
        # a CPU of that ISA runs.
        no_avx512 = ("amx", "avx512vnni", "avx512bw")
        hidden = {"native": (), "avx2": (*no_avx512, "avxvnni"), "avxvnni": no_avx512,
                  "avx512bw": ("amx", "avx512vnni", "avxvnni")}[args.ort_isa]
        builds = [b for b in runnable if (b != "portable" or args.portable) and b not in hidden]
    # ONNX Runtime's (and PyTorch's) int8 kernels: VNNI at best (ONNX Runtime 1.32 does not run
    # its convolutions on AMX tiles; ResNet-18 at about half the VNNI peak on an AMX CPU).
    best_isa = next((isa for isa in ("avx512vnni", "avxvnni", "avx2") if SIMD_FLAGS[isa] <= flags), None)
    ort_isa_name = args.ort_isa if hidden_isa else best_isa  # the ISA of ONNX Runtime's kernels

    print("# byoc-int8 vs ONNX Runtime vs PyTorch\n")
    print(f"CPU: {model_name}; {len(ALL_CPUS)} CPUs allowed of {os.cpu_count()}; int8 ISA flags: "
          f"{' '.join(f for f in ISA_FLAGS if f in flags) or 'none'}")
    print(f"byoc-int8 kernel builds run: {', '.join(builds) or 'none'} (this CPU runs: {', '.join(runnable)})")
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = "not installed (pip install -e '.[bench]'): its rows are left out"
    if hidden_isa:
        seen = ort_isa.HIDDEN_ISAS[args.ort_isa][0]
        print(f"ONNX Runtime sees {seen}: {hidden_isa.patched} cpuid instructions of its library patched, "
              f"answered by benchmarks/cpuid_avx2.c (benchmarks/ort_isa.py); it runs its {args.ort_isa} int8 kernels")
    print(f"versions: onnxruntime {ort_version}, torch {torch.__version__}, batch {args.batch}, "
          f"threads {','.join(map(str, threads))}, {args.blocks} blocks x {args.runs} runs\n")

    run_start = cpu_times()
    time.sleep(1.0)
    others, steal = other_cpu_share(run_start, cpu_times(), os.cpu_count() or 1)
    print(f"other processes in the second before the run: {100 * others:.0f}% of the machine's "
          f"{os.cpu_count()} CPUs, hypervisor steal {100 * steal:.0f}%"
          + (" (other work is running: timings and peaks are noisy)" if others + steal > 0.1 else "") + "\n")
    peaks, peak_error = measure_peaks(threads)
    if peaks:
        print("int8 MAC peak, GMAC/s (benchmarks/int8_peak.c; avx2 = vpmaddubsw+vpmaddwd+vpaddd, "
              "avx512bw = the same on zmm, avx512vnni = vpdpbusd zmm, avxvnni = vpdpbusd ymm, amx = tdpbssd "
              "on tiles):\n")
        isas = sorted({isa for isa, _ in peaks}, key=["avx2", "avxvnni", "avx512bw", "avx512vnni", "amx"].index)
        print("| ISA | " + " | ".join(f"{t} thread{'s' * (t > 1)}" for t in threads) + " |")
        print("|---|" + "---:|" * len(threads))
        for isa in isas:
            print(f"| {isa} | " + " | ".join(f"{peaks.get((isa, t), float('nan')):.0f}" for t in threads) + " |")
        print()
    else:
        print(peak_error + "\n")

    quiesce = Quiesce()
    rows, compile_rows, notes = [], [], []
    for name in models:
        model, shape = make_model(name)
        macs = count_macs(model, shape)
        rng = np.random.default_rng(4321)
        x = rng.standard_normal((args.batch, *shape[1:]), dtype=np.float32)
        calib = np.random.default_rng(1234).standard_normal((args.calib, *shape[1:]), dtype=np.float32)
        with torch.no_grad():
            reference = model(torch.from_numpy(x)).numpy()
        print(f"{name}: {macs / 1e9:.3f} GMAC per image; preparing systems ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="bench_models") as workdir:
            # ONNX Runtime's sessions first, before this model's TVM calls (their masks are reset
            # anyway, before every session is created).
            systems = ort_systems(model, calib, x, workdir, threads, ort_isa_name)
            if not args.no_torch:
                systems += [torch_system(model, calib, x, threads, best_isa), torch_fp32_system(model, x, threads)]
            compile_seconds: dict[str, float] = {}
            systems = byoc_systems(model, calib, x, builds, threads, compile_seconds, weight_bits) + systems
            for simd, seconds in compile_seconds.items():
                compile_rows.append((name, simd, seconds))
            outputs = {}
            for system in systems:
                if not system.note:
                    system.prepare(threads[0])
                    outputs[system.name] = as_numpy(system.runs[threads[0]]())
            print(f"{name}: measuring ...", file=sys.stderr, flush=True)
            times = measure(systems, threads, args.blocks, args.runs, quiesce)
            affinity = affinity_summary()
        for t in threads:
            ms = {s.name: 1e3 * statistics.median(sum(times[(s.name, t)], [])) / args.batch
                  for s in systems if not s.note}
            ort_int8 = [s.name for s in systems if s.kind in ("ort-u8", "ort-s8")]
            ref = min(ort_int8, key=ms.__getitem__) if ort_int8 else None
            for system in systems:
                if system.note:
                    rows.append((name, t, system.name, "n/a", "", "", "", "", system.note))
                    continue
                value = ms[system.name]
                gmacs = macs / (value * 1e6)
                peak = peaks.get((system.isa, t)) if system.isa else None
                rows.append((
                    name, t, system.name + (" (ref)" if system.name == ref else ""), f"{value:.2f}",
                    ratio_text(times[(system.name, t)], times[(ref, t)]) if ref else "-", f"{gmacs:.1f}",
                    f"{100 * gmacs / peak:.0f}% {system.isa}" if peak else "-",
                    f"{cosine(outputs[system.name], reference):.4f}", "",
                ))
        del systems
        gc.collect()

    print("| model | threads | system | ms/image | x ORT int8 | GMAC/s | % int8 peak | cosine vs fp32 |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        if row[3] == "n/a":
            print(f"| {row[0]} | {row[1]} | {row[2]} | n/a | | | | {row[8]} |")
        else:
            print("| " + " | ".join(map(str, row[:8])) + " |")
    print("\nbyoc-int8 compile time (export, partition, calibration on "
          f"{args.calib} inputs, codegen, C compile):\n")
    print("| model | kernels | compile s |")
    print("|---|---|---:|")
    for name, simd, seconds in compile_rows:
        print(f"| {name} | {simd} | {seconds:.1f} |")
    print()
    for note in notes:
        print(f"- {note}")
    print("- x ORT int8: time over that of the faster of ONNX Runtime's u8- and s8-activation int8 models at "
          "the same thread count (marked ref; faster by ms/image), the median over the blocks of the ratio of the "
          "two per-block medians (paired_ratio), then the range of the blocks' ratios; below 1 is faster than "
          "ONNX Runtime.")
    print(f"- % int8 peak: GMAC/s over int8_peak.c's GMAC/s at the same thread count, for the ISA of the "
          f"byoc-int8 kernel build; ONNX Runtime int8 rows against {ort_isa_name}, PyTorch int8 rows against "
          f"the best int8 ISA here ({best_isa}), which their kernels dispatch to; '-' for float and the "
          "portable build.")
    if hidden_isa:
        kernels = {"avx2": "its AVX2 int8 kernels, whose u8 x s8 pairs saturate at int16 (byoc-int8's AVX2 build "
                           "is exact)",
                   "avxvnni": "its AVX-VNNI int8 kernels",
                   "avx512bw": "its AVX-512 int8 kernels, whose u8 x s8 pairs saturate at int16 as the AVX2 "
                               "ones do (byoc-int8's AVX-512BW and AVX2 builds are exact)"}[args.ort_isa]
        print(f"- ONNX Runtime saw {ort_isa.HIDDEN_ISAS[args.ort_isa][0]} in its CPUID "
              f"({hidden_isa.answered()} CPUID queries answered): {kernels}. PyTorch saw the whole CPU. "
              "The same instructions run on this CPU's cores, not on a CPU of those ISAs alone.")
    print(f"- Threads: byoc-int8 through TVM's pool (TVM_NUM_THREADS={max(threads)} sizes it; "
          "runtime.config_threadpool(1, n) before each block; TVM_BIND_THREADS="
          f"{os.environ.get('TVM_BIND_THREADS', '1')}: 0, byoc_int8's default, leaves its workers unpinned); "
          "ONNX Runtime intra_op_num_threads=n, inter_op 1, sequential, session.intra_op/inter_op.allow_spinning=0; PyTorch torch.set_num_threads(n), "
          "interop 1. n counts the calling thread in all three.")
    print(f"- Affinity: the calling thread's mask is reset to all {len(ALL_CPUS)} allowed CPUs before "
          "every session / pool configuration and every block; before each block the script waited until "
          f"the process's other threads slept ({quiesce.waits} waits, {quiesce.seconds:.1f} s in all, "
          f"{quiesce.timeouts} gave up after 1 s). Threads at the end of the last model: {affinity}.")
    others, steal = other_cpu_share(run_start, cpu_times(), os.cpu_count() or 1)
    print(f"- Other processes used {100 * others:.1f}% of the machine's {os.cpu_count()} CPUs during the run "
          f"(this one's threads and children left out), the hypervisor stole {100 * steal:.1f}%"
          + (": peaks measured under load can be low (a share over 100%), and multi-thread runs that wait for "
             "every thread at each layer (OpenMP, TVM's pool) suffer most." if others + steal > 0.05 else "."))
    print(f"- Peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB.")
    if args.batch > 1:
        print(f"- Batch {args.batch}: byoc-int8 compiles the model at that batch; ms/image = ms per run / "
              f"{args.batch}.")


if __name__ == "__main__":
    main()
