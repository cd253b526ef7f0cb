"""benchmarks/bench_depthwise.py runs every kernel build it offers on this CPU (it had no
description of the AVX-VNNI and AMX builds and stopped at them), and their outputs agree."""

import subprocess
import sys
from pathlib import Path

import kernel_calls

ROOT = Path(__file__).resolve().parents[1]


def test_every_build_runs(kernel_build):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_depthwise.py"), "--build-dir",
                          str(kernel_build), "--samples", "1", "--min-ms", "1"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for variant in kernel_calls.VARIANTS:  # described and timed, or named as not run on this CPU
        assert f"  {variant} " in out.stdout or f"{variant}: not run" in out.stdout, variant
    assert "MobileNetV2 (all)" in out.stdout
