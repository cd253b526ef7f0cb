"""Standalone C export: a C99 project with no TVM and no heap that reproduces the compiled
library bit for bit, built by gcc and clang with -Werror -pedantic, and under qemu for aarch64 and
riscv64 (the README's test set-up installs the cross compilers and qemu)."""

import ctypes
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torchvision

import tflite_models

from byoc_int8.export import ExportError, export_c
from byoc_int8.models import BUILTIN_MODELS, randomize_batch_norm
from byoc_int8.pipeline import compile_model, compile_prequantized, sample_inputs

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

    def run_int8(self, codes: np.ndarray) -> tuple[int, np.ndarray]:
        """model_run_int8's status and output codes."""
        codes = np.ascontiguousarray(codes, dtype=np.int8)
        assert codes.size == self.macro["INPUT_SIZE"]
        out = np.zeros(self.macro["OUTPUT_SIZE"], np.int8)
        aligned = self.workspace.ctypes.data + (-self.workspace.ctypes.data) % 64
        status = self.lib.model_run_int8(ctypes.c_void_p(codes.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                                         ctypes.c_void_p(aligned))
        return status, out

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
    """(model, calibration inputs, golden inputs): torchvision networks at 32x32 (every layer and
    weight of the full network; the small input keeps qemu quick), other built-ins at their size."""
    if name in BUILTIN_MODELS and not hasattr(torchvision.models, name):
        spec = BUILTIN_MODELS[name]
        return spec.make(), spec.calibration_inputs(16), spec.evaluation_set(2)[0]
    x = torch.randn(18, 3, 32, 32, generator=torch.Generator().manual_seed(0)).numpy()
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
    _run_cross(exported[2], isa)


def _run_cross(directory, isa: str) -> None:
    compiler, emulator = CROSS[isa]
    assert shutil.which(emulator), f"{emulator} is not installed (scripts/test.sh installs it)"
    assert "passed: 2 vectors, 0 failures" in _build_and_run(directory, compiler, [emulator], ["-static"])


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


def test_layer_vectors_name_the_first_layer_with_an_injected_fault(tmp_path):
    """Bring-up: the vectors of every kernel call; a one-byte fault in one layer's weights of the
    exported C is found at that layer by test_model --layers."""
    from byoc_int8 import reference
    from byoc_int8.vectors import write_layer_vectors

    model, calibration, golden = _workload("digits")
    compiled = compile_model(model, calibration)
    export_c(compiled, tmp_path / "c", golden)
    ((symbol, qgraph),) = reference.quantized_regions(compiled.module).items()
    manifest = json.loads(write_layer_vectors(symbol, qgraph, golden[0][None], tmp_path / "vectors").read_text())
    calls = manifest["calls"]
    assert len(calls) == len(qgraph.nodes) and calls[0]["op"] == "conv2d"
    assert (tmp_path / "vectors" / calls[0]["params"]["file"]).exists()
    last = np.load(tmp_path / "vectors" / calls[-1]["output"]["file"])
    assert last.tobytes() == (tmp_path / "vectors" / calls[-1]["output"]["raw"]).read_bytes()
    # The last call's output is the model's int8 output for that input.
    expected, scale = compiled.run_reference(golden[0][None])
    zero_point = qgraph.quants[qgraph.graph.outputs[0]].zero_point
    np.testing.assert_array_equal(last.reshape(-1), np.rint(expected.reshape(-1) / np.float32(scale)) + zero_point)

    binary = tmp_path / "c" / "test_model"
    subprocess.run(["gcc", *STRICT, *_sources(tmp_path / "c"), "-lm", "-o", str(binary)], check=True)
    clean = subprocess.run([str(binary), "--layers", str(tmp_path / "vectors")], capture_output=True, text=True)
    assert clean.returncode == 0 and f"layers: {len(calls)} of {len(calls)} checked, all equal" in clean.stdout

    # Corrupt one weight byte of the third convolution (a layer in the middle).
    faulty = [c["index"] for c in calls if c["op"] == "conv2d"][2]
    model_c = (tmp_path / "c" / "model.c").read_text()
    # Its weights are rows of string literals: the first byte is one character or an octal escape.
    head, rest = model_c.split(f"{symbol}_n{faulty}_weight_rows[", 1)
    size, literal = rest.split('] = {\n"', 1)
    length = 4 if literal[0] == "\\" else 1
    first = int(literal[1:4], 8) if length == 4 else ord(literal[0])
    faulted = f"{head}{symbol}_n{faulty}_weight_rows[{size}] = {{\n\"\\{(first + 100) % 256:03o}{literal[length:]}"
    (tmp_path / "c" / "model.c").write_text(faulted)
    subprocess.run(["gcc", *STRICT, *_sources(tmp_path / "c"), "-lm", "-o", str(binary)], check=True)
    found = subprocess.run([str(binary), "--layers", str(tmp_path / "vectors")], capture_output=True, text=True)
    assert found.returncode == 1
    assert re.search(rf"first differing layer: {faulty} \(node {faulty} \(ccompiler\.conv2d\w*\)\), byte \d+", found.stdout), found.stdout


def test_exported_model_runs_clean_under_sanitizers_and_reports_nonfinite_input(tmp_path):
    model, calibration, golden = _workload("digits")
    export_c(compile_model(model, calibration), tmp_path, golden)
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
    assert "passed: 2 vectors, 0 failures" in _build_and_run(tmp_path, "gcc", extra=flags)
    model = ExportedModel(tmp_path)
    x = golden[0].astype(np.float32).copy()
    assert model.run(x)[0] == 0
    x.reshape(-1)[5] = np.nan
    assert model.run(x)[0] == 2  # MODEL_ERROR_NONFINITE_INPUT: a status, not a crash


def test_export_of_an_int8_interface_tflite_model(tmp_path):
    """A full-integer .tflite (int8 input and output) exports: model_run_int8 is its interface and
    equals the library on int8 codes; model_run takes and returns floats through the macros'
    scales; test_model passes built by gcc and clang, and under qemu on aarch64."""
    compiled = compile_prequantized(tflite_models.build_tflite("mobilenet", tmp_path / "mobilenet.tflite"))
    assert compiled.input_dtype == "int8"
    codes = sample_inputs(compiled, 3, seed=3)
    summary = export_c(compiled, tmp_path / "c", codes[:2])
    for compiler in ("gcc", "clang"):
        assert "passed: 2 vectors, 0 failures" in _build_and_run(tmp_path / "c", compiler), compiler
    _run_cross(tmp_path / "c", "aarch64")
    model = ExportedModel(tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    scale = float.fromhex(re.search(r"#define MODEL_OUTPUT_SCALE (\S+)f", header).group(1))
    zero_point = int(re.search(r"#define MODEL_OUTPUT_ZERO_POINT (-?\d+)", header).group(1))
    for x in codes:
        library = compiled.run(x[None]).reshape(-1)
        status, out = model.run_int8(x)
        assert status == 0 and np.array_equal(out, library)
    assert summary.workspace_bytes == model.macro["WORKSPACE_BYTES"]
    # The float entry: dequantized codes in, the library's codes dequantized out.
    in_scale = float.fromhex(re.search(r"#define MODEL_INPUT_SCALE (\S+)f", header).group(1))
    in_zero_point = int(re.search(r"#define MODEL_INPUT_ZERO_POINT (-?\d+)", header).group(1))
    floats = (codes[2].astype(np.int32) - in_zero_point).astype(np.float32) * np.float32(in_scale)
    status, out = model.run(floats)
    expected = (compiled.run(codes[2][None]).reshape(-1).astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)
    assert status == 0 and out.tobytes() == expected.tobytes()
