"""Every number format (activations x rounding) end to end: bit-exact, and accurate."""

import numpy as np
import pytest

from byoc_int8 import cli, digits, qarith
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import compile_model, evaluate
from byoc_int8.qarith import NumberFormat
from byoc_int8.reference import quantized_regions

FORMATS = [NumberFormat(a, r) for a in qarith.ACTIVATIONS for r in qarith.ROUNDINGS]
IDS = [str(f).replace("/", "-") for f in FORMATS]


@pytest.fixture(scope="module")
def digits_data():
    return digits.load_split(), digits.pretrained()


@pytest.fixture(scope="module")
def resnet18():
    spec = BUILTIN_MODELS["resnet18"]
    return spec, spec.make()


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_digits_in_every_format(digits_data, fmt):
    split, model = digits_data
    compiled = compile_model(model, split.train_x[:256], number_format=fmt)
    report = evaluate(compiled, model, split.test_x, labels=split.test_y, latency_runs=1, layers=[])
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["int8_accuracy"] >= report["float_accuracy"] - (0.002 if fmt.activations == "asymmetric" else 0.01)


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_resnet18_in_every_format(resnet18, fmt):
    spec, model = resnet18
    compiled = compile_model(model, spec.calibration_inputs(16), number_format=fmt)
    report = evaluate(compiled, model, spec.evaluation_set(2)[0], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= (0.9998 if fmt.activations == "asymmetric" else 0.999)
    qgraph = next(iter(quantized_regions(compiled.module).values()))
    assert qgraph.format == fmt
    zero_points = {q.zero_point for q in qgraph.quants.values()}
    if fmt.activations == "symmetric":
        assert zero_points == {0}
    else:  # every relu output spends all 256 codes on [0, max]: zero point -128
        assert -128 in zero_points and len(zero_points) > 2


@pytest.mark.parametrize("simd", ["avx2", "avxvnni", "avx512bw", "portable"])
def test_resnet18_with_seven_bit_weights(resnet18, simd):
    """weight_bits 7: every weight in [-63, 63], each channel's largest at 63 (so that the AVX2
    tiles take their offset form), bit-exact in the builds of the AVX2 tiles (AVX2, AVX-VNNI,
    AVX-512BW) and the portable one, one bit of weight precision from the 8-bit format's accuracy."""
    from byoc_int8.codegen.emit_c import SIMD_FLAGS, cpu_flags

    if not SIMD_FLAGS[simd] <= cpu_flags():
        pytest.skip(f"this CPU cannot run {simd} code")  # hardware, not missing work
    spec, model = resnet18
    fmt = NumberFormat(weight_bits=7)
    compiled = compile_model(model, spec.calibration_inputs(16), number_format=fmt, simd=simd)
    report = evaluate(compiled, model, spec.evaluation_set(2)[0], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["cosine_vs_float"] >= 0.999
    qgraph = next(iter(quantized_regions(compiled.module).values()))
    assert qgraph.format == fmt and str(fmt) == "asymmetric/tflite/7-bit weights"
    weights = [q.params["weight"] for q in qgraph.nodes if q.op in ("conv2d", "dense")]
    assert len(weights) == 21
    for w in weights:
        assert np.array_equal(np.abs(w.reshape(w.shape[0], -1).astype(np.int32)).max(axis=1), np.full(w.shape[0], 63))


def test_seven_bit_weights_scale_to_63():
    w = np.array([[0.5, -1.0, 0.25], [2.0, 1.0, -0.03]], np.float32)
    q, scales = qarith.quantize_weights(w, NumberFormat(weight_bits=7))
    assert np.allclose(scales, [1.0 / 63, 2.0 / 63])
    assert q.tolist() == [[32, -63, 16], [63, 32, -1]]
    assert qarith.quantize_weights(w)[0].tolist() == [[64, -127, 32], [127, 64, -2]]


def test_asymmetric_activations_follow_the_tflite_spec():
    relu = qarith.activation_quant(0.0, 6.0, "asymmetric")
    assert relu == qarith.ActivationQuant(6.0 / 255, -128)
    mixed = qarith.activation_quant(-1.0, 3.0, "asymmetric")
    assert mixed.scale == 4.0 / 255 and mixed.zero_point == -64  # -128 + 1 / (4 / 255) = -64.25
    assert qarith.quantize_value(0.0, mixed) == mixed.zero_point  # real 0 is exact
    # A range that excludes 0 is widened to include it.
    assert qarith.activation_quant(2.0, 3.0, "asymmetric") == qarith.ActivationQuant(3.0 / 255, -128)
    assert qarith.activation_quant(-3.0, 2.0, "symmetric") == qarith.ActivationQuant(3.0 / 127, 0)


def test_number_format_is_checked_and_round_trips():
    fmt = NumberFormat("asymmetric", "tflite")
    assert NumberFormat.from_json(fmt.to_json()) == fmt
    with pytest.raises(ValueError, match="unknown rounding 'banker'"):
        NumberFormat("symmetric", "banker")
    with pytest.raises(ValueError, match="unknown activations 'unsigned'"):
        NumberFormat("unsigned")
    with pytest.raises(ValueError, match="unknown weight_bits 6; choose from 8, 7"):
        NumberFormat(weight_bits=6)
    seven = NumberFormat(weight_bits=7)
    assert NumberFormat.from_json(seven.to_json()) == seven and seven.weight_max == 63


def test_cli_takes_the_number_format(tmp_path):
    report = tmp_path / "report.json"
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "4", "--num-eval", "2", "--quiet",
                     "--activations", "asymmetric", "--rounding", "tflite", "--json", str(report)]) == 0
    import json

    data = json.loads(report.read_text())
    assert data["activations"] == "asymmetric" and data["rounding"] == "tflite" and data["bit_exact"]
    assert data["weight_bits"] == 8
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "4", "--num-eval", "2", "--quiet",
                     "--weight-bits", "7", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["weight_bits"] == 7 and data["bit_exact"]


@pytest.mark.parametrize("rounding", qarith.ROUNDINGS)
def test_power_of_two_requantization_is_a_shift_equal_to_the_multiplier_form(rounding):
    """requantize_pow2 (shifts only: what the generated C runs for power-of-two scales) is the
    same integer function as the multiplier form (2^30, exponent + 1) over int32 and every exponent."""
    rng = np.random.default_rng(7)
    acc = np.concatenate([rng.integers(-2**31, 2**31, 5000), rng.integers(-600, 600, 2000),
                          [0, 1, -1, 3, -3, 5, -5, 2**31 - 1, -2**31]])
    for exponent in range(-32, 30):
        shifted = qarith.requantize_pow2(acc, exponent, rounding)
        assert np.array_equal(shifted, qarith.requantize(acc, qarith.POW2_MULTIPLIER, exponent + 1, rounding)), exponent
    # ties: 2.5 -> 3; -2.5 -> -3 away from zero, -2 up (single, and TFLite's halving with x 2^30)
    assert qarith.requantize_pow2(np.array([5, -5]), -1, rounding).tolist() == [3, -3 if rounding == "single-away" else -2]
    assert qarith.pow2_exponents(np.array([1 << 30, 1 << 30]), np.array([-3, 0])).tolist() == [-4, -1]
    assert qarith.pow2_exponents(np.array([1 << 30, (1 << 30) + 1]), np.array([0, 0])) is None
