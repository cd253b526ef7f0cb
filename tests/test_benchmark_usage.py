"""The benchmark scripts' command lines: what they cannot do ends as a usage error (exit status 2,
one line naming the option), before any model is built, never as a traceback."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _usage_error(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    return out.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("script, options", [("bench_models.py", ()), ("profile_layers.py", ("--ort",))])
def test_ort_isa_without_a_c_compiler(tmp_path, script, options):
    """ONNX Runtime's AVX2 kernels need the CPUID handler built by cc: without one, the option says so."""
    missing = tmp_path / "no-such-cc"
    line = _usage_error(script, *options, "--ort-isa", "avx2", env={"CC": str(missing)})
    assert line.startswith(f"{script}: error: --ort-isa avx2: ") and str(missing) in line, line


def test_profile_layers_options():
    assert _usage_error("profile_layers.py", "--ort-isa", "avxvnni").endswith(
        "--ort-isa avxvnni takes effect with --ort only")
    for bad in (("--threads", "0"), ("--runs", "0"), ("--batch", "0"), ("--top", "-1")):
        assert "must be positive" in _usage_error("profile_layers.py", *bad), bad


def test_bench_conv_options(tmp_path):
    """A kernel build's name with its rounding, a build that is not there, a count of zero."""
    assert "argument --variant: invalid choice: 'avxvnni_tflite'" in _usage_error(
        "bench_conv.py", "--variant", "avxvnni_tflite")
    line = _usage_error("bench_conv.py", "--variant", "avx2", "--build-dir", str(tmp_path))
    assert line.startswith(f"bench_conv.py: error: no {tmp_path / 'libbyoc_int8_kernels_avx2_tflite.so'}"), line
    assert "--samples must be positive" in _usage_error("bench_conv.py", "--samples", "0")


def test_ab_runtime_options(tmp_path):
    """Counts of zero and thread counts that are not numbers, before any tree is read."""
    for bad in (("--threads", "0"), ("--blocks", "0"), ("--runs", "0"), ("--batch", "0")):
        assert "must be positive" in _usage_error("ab_runtime.py", "--other", str(tmp_path), *bad), bad
    assert "thread counts are integers" in _usage_error("ab_runtime.py", "--other", str(tmp_path), "--threads", "a")


def test_paired_ratio_cancels_a_slow_phase():
    """bench_models.py's ratio pairs the two systems block by block: with a slow phase (3x) over
    both in block 2 and over the system alone in block 3, it stays 0.5, where the ratio of the
    whole-run medians would read 1.5."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_models import paired_ratio, ratio_text
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    system, reference = [[1.0, 1.0], [3.0, 3.0], [3.0, 3.0]], [[2.0, 2.0], [6.0, 6.0], [2.0, 2.0]]
    assert paired_ratio(system, reference) == pytest.approx(0.5)
    assert paired_ratio(reference, system) == pytest.approx(2.0)
    assert ratio_text(system, reference) == "0.50 (0.50-1.50)" and ratio_text(reference, reference) == "1.00"


def test_other_cpu_share_leaves_out_the_process_own_work():
    """bench_models.py's measure of other work on the machine (the load average counted its own
    threads, and for a minute the work that ended before it): readings give the shares exactly, and
    this process burning a CPU shows in its own time and the machine's busy time alike."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_models import CpuTimes, cpu_times, other_cpu_share
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    before = CpuTimes(busy=100.0, steal=1.0, own=10.0, wall=50.0)
    after = CpuTimes(busy=103.0, steal=1.5, own=11.0, wall=52.0)
    # 3 CPU-seconds busy in 2 s on 2 CPUs: 1 this process's, 0.5 stolen, 1.5 others'
    assert other_cpu_share(before, after, 2) == pytest.approx((0.375, 0.125))
    start = cpu_times()
    until = time.perf_counter() + 0.3
    while time.perf_counter() < until:
        pass
    end = cpu_times()
    own = end.own - start.own
    assert own >= 0.2 and end.busy - start.busy >= 0.8 * own


def test_int8_peak_measures_each_isa_the_cpu_runs():
    """benchmarks/int8_peak.c (the peaks bench_models.py and bench_conv.py judge kernels by): a
    positive figure for every ISA this CPU has, none for one it lacks."""
    from byoc_int8.codegen.emit_c import cpu_flags

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_models import measure_peaks
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    flags = cpu_flags()
    needs = {"avx2": {"avx2"}, "avxvnni": {"avx2", "avx_vnni"}, "avx512bw": {"avx512f", "avx512bw"},
             "avx512vnni": {"avx512f", "avx512bw", "avx512_vnni"}}
    peaks, error = measure_peaks([1])
    assert not error, error
    # AMX also needs the OS to grant the tile state: present or not, it is not judged here.
    measured = {isa for isa, _ in peaks if isa != "amx"}
    assert measured == {isa for isa, flag_set in needs.items() if flag_set <= flags}
    assert set(peaks) >= {(isa, 1) for isa in measured} and min(peaks.values()) > 0
