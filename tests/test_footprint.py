"""The shared library holds the int8 weights once, and nothing else of size: no float copy of
the weights, no C source."""

import os

import numpy as np
import torch
import torch.nn as nn

from byoc_int8 import reference
from byoc_int8.codegen.emit_c import footprint
from byoc_int8.pipeline import compile_model


def test_library_is_about_as_large_as_its_int8_weights(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 256, 3, padding=1), nn.ReLU(), nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(512, 512, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 1000)).eval()
    calibration = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    compiled = compile_model(model, calibration, output_path=tmp_path / "model.so")
    weights = sum(p.numel() for p in model.parameters() if p.dim() > 1)  # int8 bytes
    constants = sum(footprint(q)[1] for q in reference.quantized_regions(compiled.module).values())
    assert weights > 3_000_000 and constants >= weights
    size = os.path.getsize(compiled.library_path)
    assert size <= 1.1 * constants + 2 * 2**20, (size, constants)
