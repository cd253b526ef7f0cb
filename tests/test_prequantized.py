"""Models quantized elsewhere: full-integer .tflite models bit-exact with TFLite's reference
kernels, ONNX Runtime QDQ models within an output LSB of ONNX Runtime.

The models are built here: Keras models converted by TFLiteConverter (tflite_models.py) and
random-init torchvision networks quantized by ONNX Runtime's quantize_static (onnx_models.py).
"""

import json

import numpy as np
import pytest
import tvm

import onnx_models
import tflite_models
from byoc_int8 import build, cli, peers
from byoc_int8.frontend import ModelImportError
from byoc_int8.partition import Int8OnlyError
from byoc_int8.pipeline import compile_prequantized, evaluate_prequantized, sample_inputs

TFLITE_CASES = [(name, float_io) for name in tflite_models.ARCHITECTURES for float_io in (False, True)]


@pytest.fixture(scope="module")
def tflite_dir(tmp_path_factory):
    """Every .tflite model of this module, built at once: `<name>.tflite`, `<name>_fio.tflite`."""
    directory = tmp_path_factory.mktemp("tflite")
    cases = TFLITE_CASES + [("softmax_head", False)]
    tflite_models.build_tflites([(n, directory / f"{n}{'_fio' if f else ''}.tflite", f) for n, f in cases])
    return directory


@pytest.mark.parametrize("name, float_io", TFLITE_CASES, ids=[f"{n}-{'float' if f else 'int8'}-io" for n, f in TFLITE_CASES])
def test_tflite_model_is_bit_exact_with_the_tflite_reference_kernels(tflite_dir, name, float_io):
    path = tflite_dir / f"{name}{'_fio' if float_io else ''}.tflite"
    compiled = compile_prequantized(path, tflite_dir / f"{path.stem}.so")
    assert compiled.ops_offloaded == compiled.ops_total and compiled.host_ops == [] and compiled.regions == 1

    # The library alone, loaded by TVM, keeps the model's interface: int8 (or float) NHWC tensors.
    vm = build.load(compiled.library_path)
    peer = peers.tflite_reference(path)
    inputs = sample_inputs(compiled, 16, seed=7)
    assert inputs.dtype == (np.float32 if float_io else np.int8)
    for i in range(len(inputs)):
        out = vm["main"](tvm.runtime.tensor(inputs[i : i + 1])).numpy()
        expected = peer.run(inputs[i : i + 1])
        assert out.dtype == expected.dtype and out.shape == expected.shape
        np.testing.assert_array_equal(out, expected, err_msg=f"{name}, input {i}")
    assert len(np.unique(expected)) > 3  # the outputs are not all saturated

    report = evaluate_prequantized(compiled, peer, inputs[:4], latency_runs=1)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["max_lsb_diff_vs_tflite"] == 0 and report["equal_share_vs_tflite"] == 1.0


def test_tflite_op_without_a_composite_is_listed_in_strict_mode(tflite_dir):
    """A softmax head: TFLite's int8 SOFTMAX has no int8 composite here."""
    path = tflite_dir / "softmax_head.tflite"
    with pytest.raises(Int8OnlyError, match=r"relax\.nn\.softmax.*no ccompiler pattern for relax\.nn\.softmax"):
        compile_prequantized(path, int8_only=True)
    compiled = compile_prequantized(path)  # by default the softmax runs on the host, in float
    assert [h["op"] for h in compiled.host_ops] == ["relax.nn.softmax"]
    assert compiled.regions == 2  # its input dequantized by the first region, its output quantized by the second
    report = evaluate_prequantized(compiled, peers.tflite_reference(path), sample_inputs(compiled, 2), latency_runs=1)
    assert report["bit_exact"]


def test_tflite_logistic_tanh_and_hard_swish_tables_are_tflites_own(tmp_path):
    """Every input code of LOGISTIC, TANH and HARD_SWISH at three input scales: the table equals
    TFLite's reference kernel. HARD_SWISH is TFLite's 16-bit fixed point, which is not f rounded
    to the nearest code: the plain table of the float function misses it somewhere."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from byoc_int8 import activations
    from byoc_int8.qarith import ActivationQuant

    codes = np.arange(-128, 128, dtype=np.int8).reshape(1, 16, 16, 1)
    float_misses = {}
    for (name, span), path in tflite_models.build_activation_tflites(tmp_path).items():
        interpreter = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        interpreter.allocate_tensors()
        (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
        interpreter.set_tensor(inp["index"], codes)
        interpreter.invoke()
        expected = interpreter.get_tensor(out["index"]).reshape(-1)
        q_in, q_out = ActivationQuant(*inp["quantization"]), ActivationQuant(*out["quantization"])
        table = activations.tflite_table(name, q_in, q_out)
        np.testing.assert_array_equal(table, expected, err_msg=f"{name}, inputs on [-{span}, {span}]")
        assert len(np.unique(expected)) > 15  # not a saturated step: many output codes in use
        float_table = activations.lookup_table(name, 0.0, q_in, q_out)
        float_misses[name] = float_misses.get(name, 0) + int(np.count_nonzero(float_table != expected))
    assert float_misses["hardswish"] > 0


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_onnxruntime_qdq_model_runs_within_an_lsb_of_onnxruntime(onnx_dir, name):
    path = onnx_models.build_qdq_model(name, onnx_dir)
    compiled = compile_prequantized(path, onnx_dir / f"{name}.so")
    assert compiled.ops_offloaded == compiled.ops_total and compiled.regions == 1
    scale, _ = onnx_models.output_quantization(path)
    inputs = onnx_models.calibration_inputs(name, 4, seed=4321)
    report = evaluate_prequantized(compiled, peers.onnxruntime_session(path, scale), inputs, latency_runs=1)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    # QDQ semantics are float and ONNX Runtime's own kernels differ by CPU: the aim is <= 1 LSB.
    assert report["max_lsb_diff_vs_onnxruntime"] <= 2
    assert report["equal_share_vs_onnxruntime"] >= 0.7


def test_cli_runs_and_compiles_a_tflite_model(tflite_dir, tmp_path):
    path = tflite_dir / "odd_valid.tflite"
    report_path = tmp_path / "report.json"
    assert cli.main(["run", "--model", str(path), "--num-eval", "4", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["rounding"] == "tflite" and report["activations"] == "asymmetric"
    assert report["bit_exact"] and report["max_lsb_diff_vs_tflite"] == 0
    library = tmp_path / "model.so"
    assert cli.main(["compile", "--model", str(path), "-o", str(library)]) == 0
    assert library.stat().st_size > 0


def test_missing_or_corrupt_model_files_are_named(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["run", "--model", str(tmp_path / "absent.tflite")])
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not a model")
    with pytest.raises(ModelImportError, match="corrupt.onnx"):
        compile_prequantized(corrupt)
