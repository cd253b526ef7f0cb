"""The end-to-end flow: partition, calibrate, compile, run, and check against the reference."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import tvm

from byoc_int8 import cli
from byoc_int8.frontend import ModelImportError, import_model
from byoc_int8.models import BUILTIN_MODELS, random_inputs
from byoc_int8.partition import partition, region_functions
from byoc_int8.pipeline import compile_model, cosine, evaluate
from byoc_int8.quantize import RANGES_ATTR


def composite_sequence(mod):
    """The composite names of each region, in binding order."""
    names = []
    for region in region_functions(mod).values():
        for block in region.body.blocks:
            for binding in block.bindings:
                if isinstance(binding.value, tvm.relax.Function):
                    names.append(str(binding.value.attrs["Composite"]))
    return names


@pytest.fixture(scope="module")
def stem():
    model = BUILTIN_MODELS["resnet18_stem"].make()
    calib = random_inputs((1, 3, 224, 224), 8, 1).numpy()
    return model, compile_model(model, calib)


def test_seed_stem_partitions_into_the_seed_composites():
    """The tutorial's stem sub-graph becomes exactly its composites, all in one region."""
    model = BUILTIN_MODELS["resnet18_stem"].make()
    parted = partition(import_model(model, (torch.randn(1, 3, 224, 224),)))
    assert parted.host_ops == []
    assert len(region_functions(parted.mod)) == 1
    assert composite_sequence(parted.mod) == [
        "ccompiler.conv2d_bias_relu",
        "ccompiler.max_pool2d",
        "ccompiler.conv2d_bias_relu",
        "ccompiler.conv2d_bias",
        "ccompiler.add",
    ]


def test_seed_stem_runs_bit_exact(stem):
    model, compiled = stem
    report = evaluate(compiled, model, random_inputs((1, 3, 224, 224), 3, 2).numpy(), latency_runs=2)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] > 0.999
    assert report["ops_offloaded"] == report["ops_total"] == 10  # 3 conv+bias(+relu), pool, add


def test_library_runs_in_a_fresh_process_without_byoc_int8(stem, tmp_path):
    _, compiled = stem
    x = random_inputs((1, 3, 224, 224), 1, 3).numpy()
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, tvm\n"
        "from tvm import relax\n"
        f"vm = relax.VirtualMachine(tvm.runtime.load_module({compiled.library_path!r}), tvm.cpu())\n"
        f"y = vm['main'](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r})))\n"
        "y = y[0] if not hasattr(y, 'numpy') else y\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y.numpy())\n"
        "assert not any(m.startswith('byoc_int8') for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), compiled.run(x))


def test_entry_point_rejects_bad_arguments(stem):
    _, compiled = stem
    main = compiled.vm["main"]
    with pytest.raises(Exception, match="contains NaN"):
        x = np.zeros((1, 3, 224, 224), np.float32)
        x[0, 1, 2, 3] = np.nan
        main(tvm.runtime.tensor(x))
    # Shape and dtype mismatches are caught by the VM's own checks or by the entry point; either
    # way the error names the problem instead of crashing: the dimension and both sizes, or both
    # dtypes (the VM's message, or the entry point's).
    with pytest.raises(Exception, match=r"(?s)\(220 vs\. 224\).*shape\[2\] mismatch|"
                                        r"\S+ must be a compact tensor of shape \(1, 3, 224, 224\)"):
        main(tvm.runtime.tensor(np.zeros((1, 3, 220, 224), np.float32)))
    with pytest.raises(Exception, match=r"expect Tensor with dtype float32 but get int8|"
                                        r"\S+ must be float32 \(dtype code 0, 8 bits\)"):
        main(tvm.runtime.tensor(np.zeros((1, 3, 224, 224), np.int8)))


def test_resnet18_all_ops_offloaded_and_bit_exact():
    spec = BUILTIN_MODELS["resnet18"]
    model = spec.make()
    compiled = compile_model(model, random_inputs(spec.input_shape, 16, 1234).numpy())
    report = evaluate(compiled, model, random_inputs(spec.input_shape, 8, 4321).numpy(), latency_runs=1)
    assert report["ops_total"] == report["ops_offloaded"] == 70
    assert report["regions"] == 1 and report["host_ops"] == []
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= 0.999
    assert report["top1_agreement_vs_float"] >= 0.875


def test_unsupported_op_is_reported_with_a_reason():
    class ChannelMean(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x.mean(dim=1, keepdim=True), dim=2)

    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), ChannelMean()).eval()
    parted = partition(import_model(model, (torch.randn(1, 4, 8, 8),)))
    reasons = {h.op: h.reason for h in parted.host_ops}
    assert reasons["relax.mean"] == "mean over axes [1] (only global average pooling over H, W)"
    assert reasons["relax.nn.softmax"] == "no ccompiler pattern for relax.nn.softmax"


def test_model_that_cannot_be_exported_fails_clearly():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: torch.export refuses it
                return x
            return -x

    with pytest.raises(ModelImportError, match="torch.export could not capture DataDependent"):
        import_model(DataDependent(), (torch.randn(1, 3),))


def test_calibration_rejects_nan_and_wrong_shapes():
    model = BUILTIN_MODELS["resnet18_stem"].make()
    calib = np.full((2, 3, 224, 224), np.nan, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        compile_model(model, calib)
    with pytest.raises(ValueError, match=r"calibration samples of shape \(3, 200, 224\), the model's input .* takes \(3, 224, 224\)"):
        compile_model(model, np.zeros((2, 3, 200, 224), np.float32), example_inputs=(torch.zeros(1, 3, 224, 224),))


def test_percentile_clips_outliers_that_max_keeps():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1)).eval()
    calib = np.random.default_rng(0).standard_normal((64, 1, 8, 8)).astype(np.float32)
    calib[0, 0, 0, 0] = 50.0  # one outlier
    mods = {
        "max": compile_model(model, calib, method="max").module,
        "percentile": compile_model(model, calib, method="percentile", percentile=99.9).module,
    }
    ranges = {m: json.loads(str(next(iter(region_functions(mod).values())).attrs[RANGES_ATTR])) for m, mod in mods.items()}
    lowest = float(calib.min())
    assert ranges["max"][0] == [lowest, 50.0]  # the input's observed range
    lo, hi = ranges["percentile"][0]
    assert 2.0 < hi < 5.0 and -hi <= lo < -2.0  # clipped at the 99.9th percentile of |x|


def test_cli_run_and_compile(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "4", "--num-eval", "2", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    for key in ("ops_total", "ops_offloaded", "host_ops", "bit_exact", "max_lsb_diff", "cosine_vs_float",
                "top1_agreement_vs_float", "compile_seconds", "latency_ms_median"):
        assert key in report
    assert report["bit_exact"] is True
    assert "cosine_vs_float" in capsys.readouterr().out

    # A user's own exported program with a .npy of calibration inputs.
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)).eval()
    calib = np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32)
    torch.export.save(torch.export.export(model, (torch.from_numpy(calib[:1]),)), tmp_path / "m.pt2")
    np.save(tmp_path / "calib.npy", calib)
    out = tmp_path / "m.so"
    assert cli.main(["compile", "--model", str(tmp_path / "m.pt2"), "--calib", str(tmp_path / "calib.npy"), "-o", str(out)]) == 0
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    y = vm["main"](tvm.runtime.tensor(calib[:1]))
    y = (y if hasattr(y, "numpy") else y[0]).numpy()
    assert cosine(y, model(torch.from_numpy(calib[:1])).detach().numpy()) > 0.99


def test_biased_conv_batch_norm_and_ceil_mode_pool():
    """conv with its own bias followed by batch norm folds; a ceil_mode pool's partial windows
    agree between float graph, reference and C."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(8)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2.0)
    bn.bias.data.normal_()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), bn, torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, ceil_mode=True)).eval()
    rng = np.random.default_rng(0)
    compiled = compile_model(model, rng.standard_normal((16, 3, 16, 16)).astype(np.float32))
    assert compiled.host_ops == [] and compiled.ops_offloaded == 4  # conv, add, relu, pool
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    report = evaluate(compiled, model, x, latency_runs=1)
    assert report["bit_exact"] and report["cosine_vs_float"] > 0.999
    assert compiled.run(x[:1]).shape == (1, 8, 8, 8)  # ceil((16 - 3) / 2) + 1


def test_float_graph_matches_pytorch():
    """Calibration sees what the model computes: the extracted region, run in float, equals the
    PyTorch model's output."""
    from byoc_int8.graph import extract_graph, run_float

    model = BUILTIN_MODELS["resnet18_stem"].make()
    x = random_inputs((1, 3, 224, 224), 2, 5)
    parted = partition(import_model(model, (x[:1],)))
    name, region = next(iter(region_functions(parted.mod).items()))
    graph = extract_graph(name, region)
    values = run_float(graph, [x])
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(values[graph.outputs[0]], expected, rtol=1e-4, atol=1e-4)


def test_generated_entry_point_checks_its_arguments():
    """Called directly (not through the VM's own checks), the C entry point refuses wrong
    argument counts, shapes, dtypes and non-tensors with an error naming region and argument."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    compiled = compile_model(model, np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32))
    fn = tvm.runtime.load_module(compiled.library_path).get_function("byoc_int8_region0", query_imports=True)
    good_in = tvm.runtime.tensor(np.zeros((1, 3, 8, 8), np.float32))
    good_out = tvm.runtime.tensor(np.zeros((1, 4, 6, 6), np.float32))
    cases = [
        ((good_in,), "byoc_int8_region0: expected 1 inputs and 1 outputs"),
        ((good_in, tvm.runtime.tensor(np.zeros((1, 4, 6, 5), np.float32))), r"output 0 must be a compact tensor of shape \(1, 4, 6, 6\)"),
        ((tvm.runtime.tensor(np.zeros((1, 3, 8, 8), np.int32)), good_out), "input 0 must be float32"),
        ((1, good_out), "argument input 0 is not a tensor"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            fn(*args)
    fn(good_in, good_out)
    np.testing.assert_array_equal(good_out.numpy(), compiled.run(np.zeros((1, 3, 8, 8), np.float32)))


@pytest.mark.parametrize("simd", ["portable", "avx2", "avxvnni", "avx512bw", "avx512vnni", "amx"])
def test_resnet18_bit_exact_with_every_kernel_implementation(simd):
    """The generated library equals the integer reference whichever kernels it compiles in."""
    from byoc_int8.codegen.emit_c import SIMD_FLAGS, cpu_flags

    if not SIMD_FLAGS[simd] <= cpu_flags():
        pytest.skip(f"this CPU cannot run {simd} code")  # hardware, not missing work
    spec = BUILTIN_MODELS["resnet18"]
    model = spec.make()
    compiled = compile_model(model, spec.calibration_inputs(8), simd=simd)
    report = evaluate(compiled, model, spec.evaluation_set(2)[0], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["max_lsb_diff"] == 0


def test_unknown_kernel_implementation_is_named():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    with pytest.raises(Exception, match="unknown kernel implementation 'sse9'"):
        compile_model(model, np.zeros((2, 3, 8, 8), np.float32), simd="sse9")


def test_importing_the_package_registers_the_composites_in_tvm():
    code = ("import byoc_int8.patterns; from tvm.relax.backend.pattern_registry import get_patterns_with_prefix; "
            "names = {p.name for p in get_patterns_with_prefix('ccompiler')}; "
            "assert {'ccompiler.conv2d_bias_relu', 'ccompiler.qdq_conv2d_bias', 'ccompiler.lut_sigmoid'} <= names, names")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_refusal_reasons_of_two_threads_do_not_mix():
    """Reasons recorded by one thread's pattern checks are not seen, or taken, by another's."""
    import threading

    from byoc_int8 import patterns

    patterns.take_refusals()
    patterns._refusals()["main's call"] = "main's reason"
    seen = {}
    worker = threading.Thread(target=lambda: seen.update(patterns.take_refusals()))
    worker.start()
    worker.join()
    assert seen == {}
    assert patterns.take_refusals() == {"main's call": "main's reason"}


def test_run_leaves_no_library_behind_unless_kept(tmp_path, monkeypatch):
    import gc
    import tempfile

    # A private temporary folder: other processes on the machine may be compiling too.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "2", "--num-eval", "1", "--quiet"]) == 0
    gc.collect()
    assert list(private.glob("byoc_int8_*")) == []
    kept = tmp_path / "kept.so"
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "2", "--num-eval", "1", "--quiet",
                     "--keep", str(kept)]) == 0
    assert kept.stat().st_size > 0


def test_models_compiled_to_one_path_each_run_their_own(tmp_path):
    """The dynamic loader keeps a loaded library by its path: a second model compiled to the same
    path in the same process must not run the first one's library."""
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    path = tmp_path / "model.so"
    outputs = []
    for seed in (1, 2, 1):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        compiled = compile_model(model, x, output_path=path)
        out = compiled.run(x[:1])
        np.testing.assert_array_equal(out, compiled.run_reference(x[:1])[0])
        outputs.append(out)
    assert not np.array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[0], outputs[2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.so"]
