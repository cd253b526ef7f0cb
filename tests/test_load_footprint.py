"""benchmarks/load_footprint.py: one model's row (compile time, .so against its constants, load,
first run, peak RSS) for the kernel build asked for."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_footprint_row_for_a_kernel_build():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_footprint.py"), "--models", "resnet18",
                          "--no-ort", "--runs", "2", "--calib", "4", "--simd", "avx2"],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "byoc-int8's avx2 kernels, 1 thread, 2 runs after loading, 4 calibration images" in out.stdout
    row = re.search(r"^\| resnet18 \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| "
                    r"(\d+) \| - \| - \| - \| - \|$", out.stdout, re.M)
    assert row, out.stdout
    compile_s, so_mib, constants_mib, ratio, load_ms, first_ms, _peak = map(float, row.groups())
    assert compile_s > 0 and load_ms > 0 and first_ms > 0 and constants_mib > 0
    # The .so holds the constants once and no C source: the runtime's code (under 2 MiB) besides.
    assert so_mib <= 1.1 * constants_mib + 2 and abs(ratio - so_mib / constants_mib) < 0.02 * ratio + 0.01
