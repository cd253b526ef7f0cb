"""Degenerate models and calibration data: they compile into one int8 region, the C library stays
bit-exact with the integer reference, and the report warns where int8 loses the values."""

import numpy as np
import pytest
import torch
from torch import nn

from byoc_int8.pipeline import compile_model, evaluate

CALIB = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
# Evaluation inputs the calibration never saw, some beyond its range.
EVALS = (np.random.default_rng(1).standard_normal((4, 3, 16, 16)) * 1.5).astype(np.float32)


def _convs(**init) -> nn.Sequential:
    """conv 3->8, relu, conv 8->8, relu, 1x1 conv 8->4 (seeded weights), then `init(model)`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 4, 1))
    with torch.no_grad():
        for change in init.values():
            change(model)
    return model.eval()


def _bit_exact(model, calib, evals=EVALS, layers=None) -> tuple[object, dict]:
    """Compiled in strict int8 mode into one region; the report on `evals`, whose C outputs
    equal the integer reference's."""
    compiled = compile_model(model, calib, int8_only=True)
    assert compiled.regions == 1 and compiled.ops_offloaded == compiled.ops_total
    report = evaluate(compiled, model, evals, latency_runs=1, layers=layers)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    return compiled, report


@pytest.fixture(scope="module")
def dead_branch():
    """The first conv's output is negative everywhere, so its relu is 0 on every input."""
    model = _convs(dead=lambda m: (m[0].weight.mul_(0.01), m[0].bias.fill_(-5.0)))
    with torch.no_grad():
        assert float(model[:2](torch.from_numpy(CALIB)).abs().max()) == 0.0
    return model, _bit_exact(model, CALIB, layers=[])


def test_a_tensor_that_is_zero_on_every_calibration_input(dead_branch):
    _, (_, report) = dead_branch
    assert any(w.endswith("0 conv2d_bias_relu is 0 on every calibration input: its int8 values carry no information")
               for w in report["warnings"]), report["warnings"]


# A tensor that is 0 on every calibration input gets the unit range (qarith.MIN_RANGE): the next
# conv's bias keeps its value and no requantization factor explodes.
def test_a_conv_after_a_dead_tensor_keeps_its_bias(dead_branch):
    model, (compiled, _) = dead_branch
    with torch.no_grad():
        expected = model(torch.from_numpy(EVALS[:1])).numpy()
    assert np.abs(compiled.run(EVALS[:1]) - expected).max() <= 0.02 * np.abs(expected).max()


def test_all_zero_weights_with_a_bias():
    """A conv whose weights are all 0: its output is its bias, which int8 keeps."""
    model = _convs(zero=lambda m: m[2].weight.zero_())
    compiled, report = _bit_exact(model, CALIB, layers=[])
    assert report["cosine_vs_float"] > 0.999
    with torch.no_grad():
        expected = model(torch.from_numpy(EVALS[:1])).numpy()
    assert np.abs(compiled.run(EVALS[:1]) - expected).max() < 0.02 * np.abs(expected).max()


def test_all_zero_weights_without_a_bias_on_large_inputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    with torch.no_grad():
        model[0].weight.zero_()
    _, report = _bit_exact(model, CALIB * 100, EVALS * 100, layers=[])
    assert any("is 0 on every calibration input" in w for w in report["warnings"])


def test_a_channel_with_all_zero_weights():
    """Output channel 3 of the first conv, input channel 5 of the second and output channel 2
    of the last have zero weights: the last one's output is its bias, constant, to within one
    int8 step."""
    model = _convs(zero=lambda m: (m[0].weight[3].zero_(), m[2].weight[:, 5].zero_(), m[4].weight[2].zero_()))
    compiled, report = _bit_exact(model, CALIB, layers=[])
    assert report["cosine_vs_float"] > 0.999 and report["warnings"] == []
    out = compiled.run(EVALS[:1])
    step = np.ptp(out) / 255
    assert np.ptp(out[0, 2]) == 0.0 and abs(out[0, 2, 0, 0] - model[4].bias[2].item()) <= step


def test_a_huge_dynamic_range_in_the_input_is_warned_about():
    """Inputs spanning 1e-6 .. 1e6: 70% of the values are ~1e-6 and round to 0 next to the 1e6
    ones, which the report says."""
    rng = np.random.default_rng(2)
    magnitude = np.where(rng.random(CALIB.shape) < 0.7, 1e-6, 1e6).astype(np.float32)
    calib, evals = CALIB * magnitude, EVALS * magnitude[:4]
    _, report = _bit_exact(_convs(), calib, evals, layers=[])
    zeroed = [w for w in report["warnings"] if "round to 0 in int8" in w]
    assert len(zeroed) == 1 and zeroed[0].startswith("byoc_int8_region0: input 0: ")
    share = int(zeroed[0].split(": ")[2].split("%")[0])
    assert 65 <= share <= 75  # the share of 1e-6 values


def test_weights_a_million_times_smaller_than_their_bias_are_warned_about():
    """Weights scaled by 1e-6 next to O(0.1) biases: the bias does not fit int32 at the scale
    s_in * s_w and saturates, and that layer's SQNR collapses: both are in the report."""
    model = _convs(tiny=lambda m: m[0].weight.mul_(1e-6))
    _, report = _bit_exact(model, CALIB)
    warnings = report["warnings"]
    assert any(w.startswith("byoc_int8_region0: 0 conv2d_bias_relu: the bias of ") and w.endswith("is saturated")
               for w in warnings), warnings
    low = [w for w in warnings if "SQNR of int8 vs float" in w]
    assert low and all(float(w.split(" is ")[1].split(" dB")[0]) < 10 for w in low)


def test_a_single_calibration_sample():
    """Calibrated on one input, run on others (beyond its range: outputs saturate, identically
    in C and in the reference)."""
    _, report = _bit_exact(_convs(), CALIB[:1], EVALS * 3, layers=[])
    assert "calibrated on 1 input(s): ranges seen on so few inputs may clip others; calibrate on at least 8 " \
           "representative inputs" in report["warnings"]
    assert report["cosine_vs_float"] > 0.9


def test_a_well_conditioned_model_gets_no_warning():
    _, report = _bit_exact(_convs(), CALIB)
    assert report["warnings"] == [] and report["cosine_vs_float"] > 0.99


def test_a_dot_product_too_long_for_int32_runs_on_the_host_with_the_reason():
    """A dense layer over 40000 features could overflow the int32 accumulator (qarith.MAX_DOT_TERMS):
    refused by its pattern, so it runs on the host instead of crashing the compile."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(40000, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    calibration = np.random.default_rng(0).standard_normal((4, 40000)).astype(np.float32)
    compiled = compile_model(model, calibration)
    reasons = [h["reason"] for h in compiled.host_ops]
    assert any("dense dot products of 40000 terms" in r for r in reasons), reasons
    report = evaluate(compiled, model, calibration[:2], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["cosine_vs_float"] > 0.999
