"""The command line's answer to a user's mistake: one line, ``byoc-int8: error: <what and what to
do>``, exit status 2, no traceback unless --debug."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import onnx_models
from byoc_int8 import cli
from byoc_int8.errors import CalibrationDataError, ModelFileError

ROOT = Path(__file__).resolve().parents[1]


class _Convs(torch.nn.Module):
    def __init__(self, head: torch.nn.Module | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3))
        self.head = head or torch.nn.Identity()

    def forward(self, x):
        return self.head(self.body(x))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A good .pt2 and .npy, and the bad files a user could hand over."""
    d = tmp_path_factory.mktemp("cli_errors")
    calib = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    model = _Convs().eval()
    torch.export.save(torch.export.export(model, (torch.from_numpy(calib[:1]),)), d / "m.pt2")
    np.save(d / "calib.npy", calib)
    paths = {"pt2": d / "m.pt2", "calib": d / "calib.npy", "dir": d}
    (d / "corrupt.pt2").write_bytes(b"PK\x03\x04 not really a zip archive")
    (d / "empty.npy").write_bytes(b"")
    np.save(d / "no_samples.npy", np.zeros((0, 3, 16, 16), np.float32))
    nan, inf = calib.copy(), calib.copy()
    nan[1, 0, 2, 3] = np.nan
    inf[3, 2, 0, 0] = np.inf
    np.save(d / "nan.npy", nan)
    np.save(d / "inf.npy", inf)
    np.save(d / "big.npy", calib.astype(np.float64) * 1e300)  # finite in float64, infinite in float32
    np.save(d / "wrong_shape.npy", calib[:, :, :8])
    np.save(d / "one_sample_no_batch.npy", calib[0])
    np.save(d / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (d / "calib.txt").write_text("1 2 3\n")
    (d / "model.pth").write_bytes(b"\x80\x02}q\x00.")
    (d / "corrupt.tflite").write_bytes(b"garbage that is no flatbuffer")
    (d / "corrupt.onnx").write_bytes(b"garbage that is no protobuf")
    for name in ("corrupt.pt2", "empty.npy", "no_samples.npy", "nan.npy", "inf.npy", "big.npy", "wrong_shape.npy",
                 "one_sample_no_batch.npy", "objects.npy", "calib.txt", "model.pth", "corrupt.tflite", "corrupt.onnx"):
        paths[name] = d / name
    return paths


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("byoc-int8: warning: ")]
    assert len(lines) == 1 and lines[0].startswith("byoc-int8: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _refused(args: list[str], capsys) -> str:
    """Runs the command line in-process; it must exit with status 2 after one error line."""
    with pytest.raises(SystemExit) as exited:
        cli.main(args + ["--quiet"])
    assert exited.value.code == 2
    return _one_error_line(capsys)


def _pt2(files, *extra, calib="calib", output=True) -> list[str]:
    args = ["compile", "--model", str(files["pt2"]), "--calib", str(files[calib])]
    return args + (["-o", str(files["dir"] / "out.so")] if output else []) + list(extra)


# (argument builder, text the one line must hold)
MISTAKES = {
    "corrupt .pt2": (lambda f: ["compile", "--model", str(f["corrupt.pt2"]), "--calib", str(f["calib"]), "-o", str(f["dir"] / "o.so")],
                     "corrupt.pt2 as a torch.export archive (a .pt2 file from torch.export.save): File is not a zip file"),
    "missing .pt2": (lambda f: ["compile", "--model", str(f["dir"] / "absent.pt2"), "--calib", str(f["calib"]), "-o", "o.so"],
                     "no such file: "),
    "unknown model name": (lambda f: ["run", "--model", "resnet19"], "unknown model 'resnet19': no such file, and not a built-in model"),
    "model of another kind": (lambda f: ["compile", "--model", str(f["model.pth"]), "-o", "o.so"],
                              "model.pth: byoc-int8 reads .pt2, .tflite, .onnx files"),
    ".pt2 without --calib": (lambda f: ["compile", "--model", str(f["pt2"]), "-o", "o.so"],
                             "--calib (a .npy file or a directory of images) is required with a .pt2 model"),
    "empty calibration file": (lambda f: _pt2(f, calib="empty.npy"), "empty.npy is empty: save the inputs with numpy.save"),
    "no calibration samples": (lambda f: _pt2(f, calib="no_samples.npy"), "no_samples.npy holds no samples (shape (0, 3, 16, 16))"),
    "NaN calibration data": (lambda f: _pt2(f, calib="nan.npy"), "nan.npy: sample 1 (of 4) contains NaN"),
    "infinite calibration data": (lambda f: _pt2(f, calib="inf.npy"), "inf.npy: sample 3 (of 4) contains an infinity"),
    "calibration data beyond float32": (lambda f: _pt2(f, calib="big.npy"), "big.npy: sample 0 (of 4) contains an infinity"),
    "calibration samples of the wrong shape": (
        lambda f: _pt2(f, calib="wrong_shape.npy"),
        "wrong_shape.npy: samples of shape (3, 8, 16), the model takes (3, 16, 16) (the array has shape (4, 3, 8, 16); "
        "stack the inputs on axis 0: (N, 3, 16, 16))"),
    "one sample without the batch axis": (lambda f: _pt2(f, calib="one_sample_no_batch.npy"),
                                          "samples of shape (16, 16), the model takes (3, 16, 16) (the array has shape (3, 16, 16);"),
    "pickled calibration file": (lambda f: _pt2(f, calib="objects.npy"), "objects.npy as a .npy array"),
    "calibration file of another kind": (lambda f: _pt2(f, calib="calib.txt"), "calib.txt: calibration data must be a .npy file"),
    "missing calibration file": (lambda f: ["compile", "--model", str(f["pt2"]), "--calib", str(f["dir"] / "absent.npy"), "-o", "o.so"],
                                 "no such file or directory: "),
    "output folder that does not exist": (lambda f: _pt2(f, output=False) + ["-o", str(f["dir"] / "missing" / "m.so")],
                                          "/missing/m.so: no such directory"),
    "output path that is a folder": (lambda f: _pt2(f, output=False) + ["-o", str(f["dir"])], "is a directory; give a file path"),
    "--json into a missing folder": (lambda f: ["run", "--model", "resnet18_stem", "--json", str(f["dir"] / "no" / "r.json")],
                                     "--json "),
    "--percentile 250": (lambda f: _pt2(f, "--method", "percentile", "--percentile", "250"),
                         "argument --percentile: must be in (0, 100], got 250 (see 'byoc-int8 compile --help')"),
    "--percentile nan": (lambda f: _pt2(f, "--method", "percentile", "--percentile", "nan"), "argument --percentile: must be in (0, 100]"),
    "--percentile without --method percentile": (lambda f: _pt2(f, "--percentile", "99"), "--percentile applies to --method percentile only"),
    "--method unknown": (lambda f: _pt2(f, "--method", "median"), "argument --method: invalid choice: 'median'"),
    "--activations unknown": (lambda f: _pt2(f, "--activations", "unsigned"), "argument --activations: invalid choice: 'unsigned'"),
    "--rounding unknown": (lambda f: _pt2(f, "--rounding", "banker"), "argument --rounding: invalid choice: 'banker'"),
    "--simd unknown": (lambda f: _pt2(f, "--simd", "neon"), "argument --simd: invalid choice: 'neon'"),
    "--batch 0": (lambda f: ["run", "--model", "resnet18_stem", "--batch", "0"], "argument --batch: must be at least 1, got 0"),
    "--batch other than a .pt2's": (lambda f: _pt2(f, "--batch", "4"),
                                    "m.pt2 was exported for batch 1; export it with batch 4"),
    "--batch with a model quantized elsewhere": (lambda f: ["compile", "--model", str(f["corrupt.onnx"]), "--batch", "8", "-o", "o.so"],
                                                 "--batch does not apply to corrupt.onnx"),
    "--num-calib 0": (lambda f: ["run", "--model", "resnet18_stem", "--num-calib", "0"], "argument --num-calib: must be at least 1, got 0"),
    "--num-eval not a number": (lambda f: ["run", "--model", "resnet18_stem", "--num-eval", "all"], "argument --num-eval: not a whole number"),
    "--plot-layer without --plot": (lambda f: ["run", "--model", "resnet18_stem", "--plot-layer", "0 conv2d"], "give --plot too"),
    "missing .tflite": (lambda f: ["run", "--model", str(f["dir"] / "absent.tflite")], "no such file: "),
    "corrupt .tflite": (lambda f: ["compile", "--model", str(f["corrupt.tflite"]), "-o", "o.so"],
                        "corrupt.tflite is not a TFLite model (no 'TFL3' flatbuffer identifier)"),
    "missing .onnx": (lambda f: ["compile", "--model", str(f["dir"] / "absent.onnx"), "-o", "o.so"], "no such file: "),
    "corrupt .onnx": (lambda f: ["compile", "--model", str(f["corrupt.onnx"]), "-o", "o.so"], "corrupt.onnx as an ONNX model"),
    "--method with a model quantized elsewhere": (lambda f: ["compile", "--model", str(f["corrupt.onnx"]), "--method", "mse", "-o", "o.so"],
                                                  "--method does not apply to corrupt.onnx"),
    "--weight-bits with a model quantized elsewhere": (
        lambda f: ["compile", "--model", str(f["corrupt.onnx"]), "--weight-bits", "7", "-o", "o.so"],
        "--weight-bits does not apply to corrupt.onnx"),
    "--weight-bits unknown": (lambda f: _pt2(f, "--weight-bits", "6"), "argument --weight-bits: invalid choice: 6"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_prints_one_line_and_exits_with_status_2(files, capsys, mistake):
    build_args, expected = MISTAKES[mistake]
    line = _refused(build_args(files), capsys)
    assert expected in line
    assert not (files["dir"] / "out.so").exists()


def test_a_kernel_build_this_cpu_cannot_run_is_refused_before_compiling(files, capsys, monkeypatch):
    monkeypatch.setattr(cli, "cpu_flags", lambda: {"sse2"})
    line = _refused(["run", "--model", str(files["pt2"]), "--calib", str(files["calib"]), "--simd", "avx2"], capsys)
    assert "--simd avx2: this CPU lacks avx2, fma, so the library could not run here; use --simd portable" in line


def test_a_missing_c_compiler_is_named_on_one_line(files, tmp_path, capsys, monkeypatch):
    """The module is compiled with gcc (or $CC): without it, one line names the tool, status 1,
    and no library is written."""
    monkeypatch.setenv("CC", "/nonexistent/cc")
    args = ["compile", "--model", str(files["pt2"]), "--calib", str(files["calib"]), "-o", str(tmp_path / "m.so"), "--quiet"]
    with pytest.raises(SystemExit) as stop:
        cli.main(args)
    assert stop.value.code == 1
    line = _one_error_line(capsys)
    assert line.startswith("byoc-int8: error: byoc_int8 builds its modules with a C compiler, ld and objcopy: "
                           "'/nonexistent/cc' (from CC) was not found"), line
    assert not (tmp_path / "m.so").exists()


def test_int8_only_lists_the_refused_ops_on_one_line(files, tmp_path, capsys):
    model = _Convs(torch.nn.Softmax(dim=1)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 16, 16),)), tmp_path / "softmax.pt2")
    args = ["compile", "--model", str(tmp_path / "softmax.pt2"), "--calib", str(files["calib"]), "-o", str(tmp_path / "m.so")]
    assert cli.main(args + ["--int8-only", "--quiet"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("byoc-int8: error: --int8-only: 1 op(s) cannot run in int8 on the accelerator: main's op #")
    assert "relax.nn.softmax" in line and "(without --int8-only they run on the host in float)" in line
    assert not (tmp_path / "m.so").exists()


def test_a_pt2_that_would_run_code_is_refused(files, tmp_path, capsys):
    """Guard code is Python that ExportedProgram.module() compiles and runs: such a file is
    refused before torch reads it, and its code never runs."""
    marker = tmp_path / "ran"
    crafted = tmp_path / "guarded.pt2"
    with zipfile.ZipFile(files["pt2"]) as source, zipfile.ZipFile(crafted, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                program["guards_code"] = [f"__import__('pathlib').Path({str(marker)!r}).touch() is None"]
                data = json.dumps(program).encode()
            target.writestr(info, data)
    line = _refused(["run", "--model", str(crafted), "--calib", str(files["calib"]), "--num-eval", "1"], capsys)
    assert "guarded.pt2: it carries guard code (Python that ExportedProgram.module() executes)" in line
    assert not marker.exists()


def test_debug_shows_the_exception_instead(files):
    with pytest.raises(CalibrationDataError, match="contains NaN"):
        cli.main(_pt2(files, "--debug", "--quiet", calib="nan.npy"))
    with pytest.raises(ModelFileError, match="not a zip file"):
        cli.main(["compile", "--model", str(files["corrupt.pt2"]), "--calib", str(files["calib"]), "-o", "o.so", "--debug"])


def test_a_model_s_names_cannot_break_the_error_line(tmp_path, capsys):
    """A name with newlines and terminal escapes, in a model with an op left on the host: the
    --int8-only refusal and every warning stay one line each, control characters removed."""
    nasty = lambda n: f"{n}\n\x1b[2J#include <{n}>\r*/"  # noqa: E731
    path = onnx_models.build_qdq_conv(tmp_path / "named.onnx", nasty, softmax=True)
    assert cli.main(["compile", "--model", str(path), "-o", str(tmp_path / "m.so"), "--int8-only", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    lines = err.splitlines()
    assert all(line.startswith(("byoc-int8: error: ", "byoc-int8: warning: ")) for line in lines), err
    assert sum(line.startswith("byoc-int8: error: --int8-only: 1 op(s)") for line in lines) == 1


def test_the_command_prints_no_traceback(files):
    """The real command, as a user runs it: one line on stderr, status 2; --debug adds the
    traceback (status 1, Python's own)."""
    command = [sys.executable, "-m", "byoc_int8", "compile", "--model", str(files["pt2"]),
               "--calib", str(files["nan.npy"]), "-o", str(files["dir"] / "out.so"), "--quiet"]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"byoc-int8: error: {files['nan.npy']}: sample 1 (of 4) contains NaN; 1 sample(s) are not finite"]
    assert done.stdout == ""
    debug = subprocess.run(command + ["--debug"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert "CalibrationDataError" in debug.stderr
