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


def test_cli_takes_the_number_format(tmp_path):
    report = tmp_path / "report.json"
    assert cli.main(["run", "--model", "resnet18_stem", "--num-calib", "4", "--num-eval", "2", "--quiet",
                     "--activations", "asymmetric", "--rounding", "tflite", "--json", str(report)]) == 0
    import json

    data = json.loads(report.read_text())
    assert data["activations"] == "asymmetric" and data["rounding"] == "tflite" and data["bit_exact"]


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
