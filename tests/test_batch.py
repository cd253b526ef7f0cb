"""Compiling for a batch: --batch N (or the example input's batch) fixes the images per run; the
report counts per image and gives images/s; a .pt2 keeps the batch it was exported with."""

import json
import os
import subprocess
import sys

import numpy as np
import torch
import tvm

from byoc_int8 import build, cli
from byoc_int8.codegen.emit_c import default_simd
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
    assert report["kernels"] == default_simd()  # the kernel build the figures ran on
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


def _regions(compiled) -> dict:
    from byoc_int8 import reference

    return reference.quantized_regions(compiled.module)


def test_a_batch_runs_image_by_image_where_images_never_mix(monkeypatch):
    """A region of N images that never mix runs as N one-image runs (each image's activations stay
    in cache) and gives the batch's results bit for bit; a region whose values do not all lead with
    the N images, or with an op not known to keep them apart, keeps whole-batch layers."""
    import dataclasses

    from byoc_int8.codegen import emit_c

    torch.manual_seed(0)
    calibration = np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(128, 5)).eval()
    batched = compile_model(model, calibration, example_inputs=(torch.from_numpy(calibration[:4]),))
    (symbol, qgraph), = _regions(batched).items()
    images, one = emit_c.split_images(qgraph)
    assert images == 4 and all(shape[0] == 1 for shape in one.graph.shapes.values())
    assert [q.op for q in one.nodes] == [q.op for q in qgraph.nodes]
    model_c = emit_c.emit_module([(symbol, qgraph)], simd="portable").model_c
    assert f"{symbol}_image(image_inputs" in model_c
    # Only the first convolution runs per image: from its output on, every value of the 4 images
    # fits in HEAD_BATCH_BYTES, and the rest (the pool, the second convolution, the classifier) runs
    # once on the batch, reading the 4 images' features (4-D, as they lie) after the loop.
    assert [q.op for q in qgraph.nodes] == ["conv2d", "max_pool2d", "conv2d", "reshape", "dense"]
    assert emit_c.batched_head(qgraph) == (1, qgraph.nodes[0].node.output)
    assert f"{symbol}_head(features, outputs" in model_c
    report = evaluate(batched, model, calibration[:8], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["batch"] == 4
    # Where the batch's values outgrow the budget, the head shrinks to what fits (from the second
    # convolution, on the pooled maps: 4 x 8 x 4 x 4 bytes in and out); a head that reads anything
    # else made before it (here the input too) runs per image.
    monkeypatch.setattr(emit_c, "HEAD_BATCH_BYTES", 512)
    assert emit_c.batched_head(qgraph) == (2, qgraph.nodes[1].node.output)
    two_reads = dataclasses.replace(qgraph, nodes=qgraph.nodes[:4] + [dataclasses.replace(
        qgraph.nodes[4], node=dataclasses.replace(qgraph.nodes[4].node, inputs=[qgraph.nodes[3].node.output, 0]))])
    assert emit_c.batched_head(two_reads) is None

    mixed = dataclasses.replace(qgraph, graph=dataclasses.replace(
        qgraph.graph, shapes={**qgraph.graph.shapes, qgraph.graph.outputs[0]: (1, 20)}))
    assert emit_c.split_images(mixed) is None
    unknown = dataclasses.replace(qgraph, nodes=[dataclasses.replace(
        qgraph.nodes[0], node=dataclasses.replace(qgraph.nodes[0].node, op="pad"))] + qgraph.nodes[1:])
    assert emit_c.split_images(unknown) is None
    assert f"{symbol}_image(" not in emit_c.emit_module([(symbol, mixed)], simd="portable").model_c


def test_each_thread_runs_the_head_on_its_own_images():
    """With a head (batched_head), each thread of the pool runs it once on the images it ran (2 + 2
    of 5 on two threads, the fifth left over: its layers and then its head split over the pool;
    all 5 at once on one thread): every split gives each image's batch-1 result bit for bit."""
    from byoc_int8.codegen import emit_c

    torch.manual_seed(0)
    calibration = np.random.default_rng(1).standard_normal((8, 3, 8, 8)).astype(np.float32)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(128, 5)).eval()
    single = compile_model(model, calibration)
    batched = compile_model(model, calibration, example_inputs=(torch.from_numpy(calibration[:5]),))
    (symbol, qgraph), = _regions(batched).items()
    assert emit_c.batched_head(qgraph) is not None
    model_c = emit_c.emit_module([(symbol, qgraph)], simd="portable").model_c
    assert f"{symbol}_head(features, outputs, arena, batch->int8_io, where, count)" in model_c
    expected = np.concatenate([single.run(calibration[i : i + 1]) for i in range(5)])
    configure = tvm.get_global_func("runtime.config_threadpool")
    try:
        for threads in (1, 2):
            configure(1, threads)
            assert np.array_equal(batched.run(calibration[:5]), expected), threads
    finally:
        configure(1, len(os.sched_getaffinity(0)))


def test_two_threads_take_the_images_from_both_ends():
    """b8_model_images: two threads take a batch's images one at a time from its two ends, so that
    one on a slower core runs fewer, and each runs the head on its own. However they split (it
    varies from run to run: the pool's worker starts after the calling thread, and a busy process
    here slows either), every image gets its batch-1 result bit for bit; also with three threads
    (a pair, one on its own share, 2 images left over) and four (two pairs)."""
    torch.manual_seed(0)
    calibration = np.random.default_rng(2).standard_normal((8, 3, 32, 32)).astype(np.float32)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(256, 5)).eval()
    single = compile_model(model, calibration)
    batched = compile_model(model, calibration, example_inputs=(torch.from_numpy(calibration),))
    expected = np.concatenate([single.run(calibration[i : i + 1]) for i in range(8)])
    configure = tvm.get_global_func("runtime.config_threadpool")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for threads, runs in ((2, 20), (3, 5), (4, 5)):
            configure(1, threads)
            for run in range(runs):
                assert np.array_equal(batched.run(calibration), expected), (threads, run)
    finally:
        busy.kill()
        busy.wait()
        configure(1, len(os.sched_getaffinity(0)))
