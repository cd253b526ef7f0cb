"""benchmarks/profile_layers.py: the B8_PROFILE build of the TVM adapter logs every kernel call,
and the script matches the log to the regions' nodes (it stops with an error when they differ)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_profile_matches_every_call():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_layers.py"), "--models",
                          "seed002,resnet18_stem", "--threads", "1,2", "--blocks", "1", "--runs", "2", "--all"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert text.count("### 1 thread:") == 2 and text.count("### 2 threads:") == 2
    for row in ("| conv |", "| max_pool |", "| add |", "| dense |", "conv 7x7 s2 g1 [1, 3, 224, 224] -> [1, 64, 112, 112]"):
        assert row in text, row



def test_profile_per_image_of_a_batch():
    """--batch 3: the calls see 3 images, and every figure is per image (the MACs as at batch 1)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    texts = {}
    for batch in (1, 3):
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_layers.py"), "--models",
                              "resnet18_stem", "--threads", "1", "--blocks", "1", "--runs", "2", "--all",
                              "--batch", str(batch)], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        texts[batch] = out.stdout
    macs = [re.search(r"batch %d, ([0-9.]+) GMAC per image" % b, texts[b]).group(1) for b in (1, 3)]
    assert macs[0] == macs[1] and float(macs[0]) > 0.1
    assert "conv 7x7 s2 g1 [3, 3, 224, 224] -> [3, 64, 112, 112]" in texts[3]
