"""Compiling for a batch: --batch N (or the example input's batch) fixes the images per run; the
report counts per image and gives images/s; a .pt2 keeps the batch it was exported with."""

import json

import numpy as np
import torch
import tvm

from byoc_int8 import build, cli
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import compile_model, evaluate


def test_run_with_batch_reports_per_image_and_images_per_second(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    library = tmp_path / "stem_b3.so"
    argv = ["run", "--model", "resnet18_stem", "--batch", "3", "--num-calib", "4", "--num-eval", "4", "--quiet",
            "--json", str(report_path), "--keep", str(library)]
    assert cli.main(argv) == 0
    report = json.loads(report_path.read_text())
    assert report["batch"] == 3 and report["eval_inputs"] == 4  # two runs, the second padded
    assert report["bit_exact"] and report["cosine_vs_float"] > 0.999
    assert report["images_per_second"] == round(3e3 / report["latency_ms_median"], 1)
    # The kept library takes 3 images at a time.
    x = np.asarray(BUILTIN_MODELS["resnet18_stem"].evaluation_set(3)[0], np.float32)
    out = build.load(str(library))["main"](tvm.runtime.tensor(x))
    while not hasattr(out, "numpy"):
        out = out[0]
    assert x.shape[0] == 3 and out.numpy().shape[0] == 3


def test_a_batch_compiled_model_equals_its_batch_1_build_image_by_image():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 5)).eval()
    calibration = np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32)
    single = compile_model(model, calibration)
    batched = compile_model(model, calibration, example_inputs=(torch.from_numpy(calibration[:4]),))
    assert (single.batch, batched.batch) == (1, 4)
    out = batched.run(calibration[:4])
    for i in range(4):
        assert np.array_equal(out[i : i + 1], single.run(calibration[i : i + 1])), i
    report = evaluate(batched, model, calibration[:5], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["eval_inputs"] == 5 and report["batch"] == 4
