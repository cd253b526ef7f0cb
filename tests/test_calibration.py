"""Calibrators, calibration inputs, the digits model's accuracy and the per-layer error report."""

import numpy as np
import pytest
import torch
from PIL import Image

from byoc_int8 import digits
from byoc_int8.calibrate import CALIBRATORS, make_calibrator
from byoc_int8.inputs import load_inputs
from byoc_int8.layer_errors import layer_errors, plot_layer_errors
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import compile_model, evaluate


def calibrated_calibrator(method, x, **options):
    calibrator = make_calibrator(method, **options)
    for chunk in x.split(len(x) // 4):
        calibrator.observe(chunk)
    return calibrator


def calibrated_range(method, x, **options):
    """The clipping threshold r on |x|."""
    return calibrated_calibrator(method, x, **options).threshold()


@pytest.mark.parametrize("method", sorted(CALIBRATORS))
def test_range_is_the_observed_range_clipped_at_the_threshold(distributions, method):
    for name, x in distributions.items():
        calibrator = calibrated_calibrator(method, x)
        r = calibrator.threshold()
        lo, hi = calibrator.range()
        assert lo == max(float(x.min()), -r) and hi == min(float(x.max()), r), name
    assert calibrated_calibrator(method, distributions["relu"]).range()[0] == 0.0  # one-sided stays one-sided


def quantization_mse(x, r):
    scale = r / 127
    return float(((x - np.clip(np.rint(x / scale), -128, 127) * scale) ** 2).mean())


@pytest.fixture(scope="module")
def distributions():
    g = torch.Generator().manual_seed(0)
    gauss = torch.randn(1 << 18, generator=g)
    u = torch.rand(1 << 18, generator=g) - 0.5  # Laplace(0, 1) by its inverse CDF, seeded
    return {
        "gauss": gauss,
        "relu": torch.relu(gauss),
        "laplace": -torch.sign(u) * torch.log1p(-2 * u.abs()),
    }


def test_max_is_the_largest_magnitude(distributions):
    for x in distributions.values():
        assert calibrated_range("max", x) == pytest.approx(float(x.abs().max()))


def test_percentile_follows_its_parameter(distributions):
    x = distributions["laplace"]
    r99 = calibrated_range("percentile", x, percentile=99.0)
    # Four batches of 2^16 values, the sample limit: every value is kept, so the threshold is
    # numpy's percentile of |x| exactly.
    assert r99 == float(np.percentile(x.abs().numpy(), 99.0))
    assert r99 < calibrated_range("percentile", x, percentile=99.99) < calibrated_range("max", x)
    with pytest.raises(ValueError, match="percentile"):
        make_calibrator("percentile", percentile=0)


def test_entropy_clips_long_tails_but_not_relu_zeros(distributions):
    """KL clips a lone outlier: 2^18 standard normal values and one at 50. At r = max the 128
    levels are 0.39 wide and the bulk (|x| < 5) falls into 13 of them, which Q flattens; at
    r ~ 4 one level per histogram bin reproduces the bulk and only the tail beyond r is folded.
    So the threshold lands near the bulk's edge, far below the max (a calibrator returning the
    max fails this). Heavy tails are clipped too, and the zero spike of a ReLU does not drag the
    range down to a fraction of the distribution."""
    outlier = distributions["gauss"].clone()
    outlier[7] = 50.0
    r = calibrated_range("entropy", outlier)
    assert calibrated_range("max", outlier) == 50.0
    assert 3.0 < r < 10.0
    laplace, relu = distributions["laplace"], distributions["relu"]
    assert calibrated_range("entropy", laplace) < 0.9 * calibrated_range("max", laplace)
    assert calibrated_range("entropy", relu) > 0.75 * calibrated_range("max", relu)


def test_mse_minimises_quantization_error(distributions):
    for x in distributions.values():
        r_mse, r_max = calibrated_range("mse", x), calibrated_range("max", x)
        values = x.numpy()
        assert quantization_mse(values, r_mse) <= quantization_mse(values, r_max)
        # No other range on a fine grid does noticeably better.
        best = min(quantization_mse(values, r) for r in np.linspace(0.2, 1.0, 200) * r_max)
        assert quantization_mse(values, r_mse) <= best * 1.02


def test_unknown_calibrator_is_named():
    with pytest.raises(ValueError, match="unknown calibration method 'kl'"):
        make_calibrator("kl")


@pytest.fixture(scope="module")
def digits_data():
    return digits.load_split(), digits.pretrained()


def test_digits_split_is_fixed_and_real(digits_data):
    split, _ = digits_data
    assert len(split.test_x) == 360 and len(split.train_x) == 1437
    assert split.test_x.shape[1:] == (1, 8, 8) and 0.0 <= split.test_x.min() and split.test_x.max() <= 1.0
    # Fixed: loading it again gives the same images in the same order.
    again = digits.load_split()
    np.testing.assert_array_equal(again.test_x, split.test_x)
    np.testing.assert_array_equal(again.train_y, split.train_y)
    # Stratified: each digit's share of the held-out images is its share of all 1797, to within
    # one image.
    counts = np.bincount(np.concatenate([split.train_y, split.test_y]), minlength=10)
    assert np.all(np.abs(np.bincount(split.test_y, minlength=10) - counts * 360 / counts.sum()) < 1)


@pytest.mark.parametrize("method", sorted(CALIBRATORS))
def test_every_calibrator_stays_bit_exact_and_accurate(digits_data, method):
    """The C library equals the integer reference for every calibrator, and int8 accuracy on the
    held-out split stays within 1 pp of float."""
    split, model = digits_data
    compiled = compile_model(model, split.train_x[:256], method=method)
    report = evaluate(compiled, model, split.test_x, labels=split.test_y, latency_runs=1)
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    assert report["float_accuracy"] >= 0.98  # the trained model is a real classifier
    assert report["int8_accuracy"] >= report["float_accuracy"] - 0.01
    assert all(layer["sqnr_db"] > 20 for layer in report["layers"])


def test_training_is_deterministic_and_leaves_torch_as_it_found_it(monkeypatch):
    """Two trainings give the same weights; each switches torch to one thread, deterministic
    algorithms and its own seed only while it runs, also when it fails."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(False)
    try:
        rng_state = torch.get_rng_state()
        a, b = digits.train(epochs=1), digits.train(epochs=1)
        for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(pa, pb), name
        assert torch.get_num_threads() == 2 and not torch.are_deterministic_algorithms_enabled()
        assert torch.equal(torch.get_rng_state(), rng_state)

        def fail():
            assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
            raise RuntimeError("no data")

        monkeypatch.setattr(digits, "load_split", fail)
        with pytest.raises(RuntimeError, match="no data"):
            digits.train(epochs=1)
        assert torch.get_num_threads() == 2 and not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def test_calibration_inputs_from_images_npy_and_iterables(tmp_path, digits_data):
    split, model = digits_data
    images = tmp_path / "images"
    images.mkdir()
    for i in range(6):
        pixels = (split.train_x[i, 0] * 255).astype(np.uint8)
        Image.fromarray(pixels).resize((16, 16)).save(images / f"{i}.png")
    (images / "notes.txt").write_text("not an image")
    loaded = load_inputs(images, (1, 1, 8, 8))
    assert loaded.shape == (6, 1, 8, 8) and loaded.dtype == np.float32
    # Down- then up-sampled digits keep their shape.
    assert np.corrcoef(loaded[0].ravel(), split.train_x[0].ravel())[0, 1] > 0.9

    np.save(tmp_path / "calib.npy", split.train_x[:6])
    with pytest.raises(ValueError, match=r"samples of shape \(1, 8, 8\), the model takes \(3, 8, 8\)"):
        load_inputs(tmp_path / "calib.npy", (1, 3, 8, 8))

    from_dir = compile_model(model, images, example_inputs=(torch.zeros(1, 1, 8, 8),))
    from_iterable = compile_model(model, (x for x in loaded), example_inputs=(torch.zeros(1, 1, 8, 8),))
    # The same samples, one way or the other, give the same calibration (up to float rounding:
    # PyTorch's batched and single-sample convolutions differ in the last bits).
    x = split.test_x[:1]
    np.testing.assert_allclose(from_dir.run(x), from_iterable.run(x), rtol=1e-5)


def test_layer_error_report_and_plot(tmp_path, digits_data):
    split, model = digits_data
    compiled = compile_model(model, split.train_x[:128], method="percentile", percentile=99.0)
    errors = layer_errors(compiled.module, split.test_x[:32])
    assert [e.layer for e in errors][:3] == ["input 0", "0 conv2d_bias_relu", "1 conv2d_bias_relu"]
    assert len(errors) == 12
    for e in errors:
        assert np.isfinite(e.sqnr_db) and e.sqnr_db > 10  # a 99th percentile costs SQNR where it clips
        lo, hi = e.clip_range
        assert lo <= 0 < hi and 0.0 <= e.clipped_fraction < 0.05
    assert any(e.clipped_fraction > 0 for e in errors)  # a 99th percentile clips something
    drawn = plot_layer_errors(errors, str(tmp_path / "layers.png"), layer="3 add_relu")
    assert drawn == "3 add_relu"
    with Image.open(tmp_path / "layers.png") as image:
        assert image.size[0] > 600 and image.size[1] > 600
    with pytest.raises(ValueError, match="no layer named 'nope'"):
        plot_layer_errors(errors, str(tmp_path / "x.png"), layer="nope")


def test_digits_is_a_builtin_model():
    spec = BUILTIN_MODELS["digits"]
    x, labels = spec.evaluation_set()
    assert len(x) == len(labels) == 360
    assert spec.calibration_inputs().shape == (256, 1, 8, 8)
