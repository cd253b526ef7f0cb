"""benchmarks/bench_depthwise.py runs every kernel build it offers on this CPU (it had no
description of the AVX-VNNI and AMX builds and stopped at them), and their outputs agree."""

import subprocess
import sys
from pathlib import Path

import kernel_calls
import pytest
from conftest import missing_cpu_features

ROOT = Path(__file__).resolve().parents[1]


def test_every_build_runs(kernel_build):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_depthwise.py"), "--build-dir",
                          str(kernel_build), "--samples", "1", "--min-ms", "1"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for variant in kernel_calls.VARIANTS:  # described and timed, or named as not run on this CPU
        assert f"  {variant} " in out.stdout or f"{variant}: not run" in out.stdout, variant
    assert "MobileNetV2 (all)" in out.stdout


def test_compare_times_the_other_builds_beside_these(kernel_build):
    """--compare DIR: the same builds from DIR, checked against the portable output and timed
    interleaved, then one speedup line per build (here DIR is the same build: a ratio near 1)."""
    if missing_cpu_features("avx2"):
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing_cpu_features('avx2')))}")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_depthwise.py"), "--build-dir",
                          str(kernel_build), "--variant", "avx2", "--compare", str(kernel_build), "--samples", "1",
                          "--min-ms", "1"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  avx2 old " in out.stdout
    line = next(line for line in out.stdout.splitlines() if line.startswith("avx2 over avx2 old"))
    assert 0.2 < float(line.split(": ")[1].split("x")[0]) < 5, line
