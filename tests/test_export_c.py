"""Standalone C export: a C99 project with no TVM and no heap that reproduces the compiled
library bit for bit, built by gcc and clang with -Werror -pedantic, and under qemu for aarch64 and
riscv64 (the README's test set-up installs the cross compilers and qemu)."""

import ctypes
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torchvision

from byoc_int8.export import ExportError, export_c
from byoc_int8.models import BUILTIN_MODELS, randomize_batch_norm
from byoc_int8.pipeline import compile_model

STRICT = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic"]
CROSS = {"aarch64": ("aarch64-linux-gnu-gcc", "qemu-aarch64"), "riscv64": ("riscv64-linux-gnu-gcc", "qemu-riscv64")}


def _sources(directory) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.c"))


def _build_and_run(directory, compiler: str, runner: list[str] = (), extra: list[str] = ()) -> str:
    assert shutil.which(compiler), f"{compiler} is not installed (scripts/test.sh installs it)"
    binary = directory / f"test_model_{compiler}"
    subprocess.run([compiler, *STRICT, *extra, *_sources(directory), "-lm", "-o", str(binary)], check=True,
                   capture_output=True, text=True)
    done = subprocess.run([*runner, str(binary)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class ExportedModel:
    """The exported C built as a shared library, called through ctypes."""

    def __init__(self, directory):
        library = directory / "libmodel.so"
        sources = [s for s in _sources(directory) if not s.endswith("test_model.c")]
        subprocess.run(["gcc", *STRICT, "-shared", "-fPIC", *sources, "-lm", "-o", str(library)], check=True,
                       capture_output=True, text=True)
        self.lib = ctypes.CDLL(str(library))
        header = (directory / "model.h").read_text()
        self.macro = {m: int(re.search(rf"#define MODEL_{m} (-?\d+)", header).group(1))
                      for m in ("WORKSPACE_BYTES", "OUTPUT_SIZE", "INPUT_SIZE")}
        self.workspace = np.zeros(self.macro["WORKSPACE_BYTES"] + 64, np.uint8)

    def run(self, x: np.ndarray) -> tuple[int, np.ndarray]:
        """model_run's status and output."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        assert x.size == self.macro["INPUT_SIZE"]
        out = np.zeros(self.macro["OUTPUT_SIZE"], np.float32)
        aligned = self.workspace.ctypes.data + (-self.workspace.ctypes.data) % 64
        status = self.lib.model_run(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(aligned))
        return status, out



def _torchvision(name: str) -> nn.Module:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    return model.eval()


def _workload(name: str):
    """(model, calibration inputs, golden inputs): built-ins at their size, torchvision networks
    at 64x64 (the weights are the full networks'; the small input keeps qemu quick)."""
    if name in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[name]
        return spec.make(), spec.calibration_inputs(16), spec.evaluation_set(2)[0]
    x = torch.randn(18, 1, 3, 64, 64, generator=torch.Generator().manual_seed(0)).numpy()
    return _torchvision(name), x[:16], x[16:]


@pytest.fixture(scope="module", params=["digits", "seed002", "resnet18", "mobilenet_v2"])
def exported(request, tmp_path_factory):
    model, calibration, golden = _workload(request.param)
    compiled = compile_model(model, calibration)
    directory = tmp_path_factory.mktemp(f"export_{request.param}")
    summary = export_c(compiled, directory, golden)
    return request.param, compiled, directory, summary, golden


def test_export_reproduces_the_library_bit_for_bit(exported):
    name, compiled, directory, summary, golden = exported
    assert summary.vectors == 2 and summary.workspace_bytes > 0 and summary.constant_bytes > 0
    for compiler in ("gcc", "clang"):
        assert "passed: 2 vectors, 0 failures" in _build_and_run(directory, compiler), compiler
    model = ExportedModel(directory)
    for x in golden:
        status, out = model.run(x)
        library = compiled.run(x[None] if x.ndim == 3 else x).reshape(-1)
        assert status == 0 and out.tobytes() == library.astype(np.float32).tobytes(), name
    # test_model (above) also checks model_run_int8 on the golden vectors' int8 codes.


@pytest.mark.parametrize("isa", sorted(CROSS))
def test_export_is_bit_exact_on_other_isas_under_qemu(exported, isa):
    _, _, directory, _, _ = exported
    compiler, emulator = CROSS[isa]
    assert shutil.which(emulator), f"{emulator} is not installed (scripts/test.sh installs it)"
    assert "passed: 2 vectors, 0 failures" in _build_and_run(directory, compiler, [emulator], ["-static"])


def test_nonfinite_input_is_a_status_not_a_crash(exported):
    name, _, directory, _, golden = exported
    if name != "digits":
        return
    model = ExportedModel(directory)
    x = golden[0].astype(np.float32).copy()
    x.reshape(-1)[5] = np.nan
    assert model.run(x)[0] == 2  # MODEL_ERROR_NONFINITE_INPUT


def test_export_refuses_a_model_with_host_ops(tmp_path):
    class WithLayerNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.norm = nn.LayerNorm(6)

        def forward(self, x):
            return self.conv(self.norm(x))

    calibration = np.random.default_rng(0).standard_normal((4, 3, 6, 6)).astype(np.float32)
    compiled = compile_model(WithLayerNorm().eval(), calibration)
    with pytest.raises(ExportError, match=r"(?s)1 run on the host:.*relax\.nn\.layer_norm"):
        export_c(compiled, tmp_path, calibration[:1])
    assert not (tmp_path / "model.c").exists()
