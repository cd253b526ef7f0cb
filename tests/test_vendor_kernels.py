"""Plug-in kernels: a model compiled with kernels="external" calls a kernel library linked at
export; examples/vendor_kernels (its own convolutions, counting MACs per call, plus the other
built-in kernels) gives the same bytes as the built-in kernels."""

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from byoc_int8.pipeline import compile_model, evaluate

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "runtime_c"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.conv2 = nn.Conv2d(16, 24, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.max_pool2d(torch.relu(x + self.dw(x)), 2)
        return self.fc(torch.relu(self.conv2(x)).mean((2, 3)))


def _vendor_library(directory: Path) -> Path:
    library = directory / "libvendor_kernels.so"
    sources = [ROOT / "examples/vendor_kernels/vendor_conv.c"] + [RUNTIME / "src" / f"{k}_s8.c" for k in ("pool", "elementwise", "dense", "layout")]
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC",
                    f"-I{RUNTIME / 'include'}", f"-I{RUNTIME / 'src'}", "-DB8_ROUNDING=B8_ROUND_TFLITE",
                    *map(str, sources), "-o", str(library)], check=True, capture_output=True, text=True)
    return library


def test_external_kernels_are_linked_and_bit_exact(tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    calibration = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
    library = _vendor_library(tmp_path)
    compiled = compile_model(model, calibration, kernels="external", output_path=tmp_path / "model.so",
                             link_options=[f"-I{RUNTIME / 'include'}", f"-L{tmp_path}", "-Wl,--no-as-needed", "-lvendor_kernels",
                                           f"-Wl,-rpath,{tmp_path}"])
    assert compiled.regions == 1
    # The library links the vendor's kernels instead of carrying its own copy.
    dependencies = subprocess.run(["ldd", compiled.library_path], capture_output=True, text=True).stdout
    assert "libvendor_kernels.so" in dependencies
    symbols = subprocess.run(["nm", "-D", "--undefined-only", compiled.library_path], capture_output=True, text=True).stdout
    assert "b8_conv2d_s8" in symbols

    vendor = ctypes.CDLL(str(library))  # the same copy the model loaded
    vendor.vendor_call_macs.restype = ctypes.c_int64
    vendor.vendor_reset()
    report = evaluate(compiled, model, calibration[:2], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["cosine_vs_float"] > 0.99
    # Three convolutions per run, on each input the evaluation ran the library on.
    calls = vendor.vendor_num_calls()
    assert calls > 0 and calls % 3 == 0
    expected_macs = [16 * 16 * 16 * 9 * 3, 16 * 16 * 16 * 9, 4 * 4 * 24 * 9 * 8]
    assert [vendor.vendor_call_macs(i) for i in range(3)] == expected_macs

    builtin = compile_model(model, calibration)
    for x in calibration[:2]:
        assert np.array_equal(compiled.run(x[None]), builtin.run(x[None]))
