"""benchmarks/profile_layers.py: the B8_PROFILE build of the TVM adapter logs every kernel call,
and the script matches the log to the regions' nodes (it stops with an error when they differ)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _profile(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_layers.py"), "--blocks", "1", "--runs", "2",
                          "--all", *args], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def single_images() -> str:
    return _profile("--models", "seed002,resnet18_stem", "--threads", "1,2")


def test_profile_matches_every_call(single_images):
    text = single_images
    assert text.count("### 1 thread:") == 2 and text.count("### 2 threads:") == 2
    for row in ("| conv |", "| max_pool |", "| add |", "| dense |", "conv 7x7 s2 g1 [1, 3, 224, 224] -> [1, 64, 112, 112]"):
        assert row in text, row


def test_profile_per_image_of_a_batch(single_images):
    """--batch 3: the calls see 3 images, and every figure is per image (the MACs as at batch 1);
    seed002's classifier runs once on the batch after its layers ran image by image."""
    batched = _profile("--models", "resnet18_stem,seed002", "--threads", "1", "--batch", "3")
    for model in ("resnet18_stem", "seed002"):
        macs = [re.search(r"%s.*batch %d, ([0-9.]+) GMAC per image" % (model, b), text).group(1)
                for b, text in ((1, single_images), (3, batched))]
        assert macs[0] == macs[1] and float(macs[0]) > 0.0005, model
    assert "conv 7x7 s2 g1 [3, 3, 224, 224] -> [3, 64, 112, 112]" in batched
    assert re.search(r"\| +\d+ dense \[3, 256\] -> \[3, 10\] \|", batched)


def test_profile_beside_onnxruntime_per_node():
    """--ort: ONNX Runtime's own per-node profile of its u8 model (on its AVX2 kernels here, the
    import order that hides AVX-512 from it included) beside byoc-int8's layers: each of seed002's
    two convolutions and its dense layer once, both times positive, the header's sums theirs."""
    text = _profile("--models", "seed002", "--threads", "1", "--simd", "avx2", "--ort", "--ort-isa", "avx2")
    header = re.search(r"#### against ONNX Runtime int8 .*1 thread: these layers ([0-9.]+) ms per image, "
                       r"ONNX Runtime's ([0-9.]+) \(([0-9.]+)x\)", text)
    assert header, text[-3000:]
    rows = re.findall(r"^\| (?:\d+ )?((?:conv|dense) [^|]+) \| (\d+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$",
                      text[header.end():], re.M)
    assert sorted(r[0].split(" [")[0] for r in rows) == ["conv 5x5 s1 g1"] * 2 + ["dense"], rows
    assert all(r[1] == "1" and float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    ours, theirs = (sum(float(r[k]) for r in rows) for k in (2, 3))
    assert abs(ours - float(header.group(1))) < 0.002 and abs(theirs - float(header.group(2))) < 0.002
    assert abs(float(header.group(3)) - ours / theirs) < 0.02 * ours / theirs + 0.005
