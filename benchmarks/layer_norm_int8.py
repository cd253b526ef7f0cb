"""What ConvNeXt's layer norms would cost in int8: a measurement, not a kernel.

    python benchmarks/layer_norm_int8.py [--calib 8] [--eval 4]

byoc-int8 runs layer norm on the host, in float, between int8 regions: its input arrives as int8
codes and its output is quantized again by the next region. This script measures, on a
random-init convnext_tiny (torchvision, randomized like benchmarks/coverage.py), the logits
cosine vs float when every layer norm of the float model is replaced by

* ``int8 I/O``: int8 input and output codes at the calibrated ranges (asymmetric, as the
  compiled model's boundaries), the normalization itself exact, in float64: what the host does;
* ``integer``: the same codes, normalized in integer arithmetic as an integer-only kernel would
  (I-BERT-style): ``d = C * x - sum(x)``, ``V = sum(d^2)`` in int64, the reciprocal standard
  deviation as ``isqrt(C * 4^K / (V + eps'))`` with ``K = 40`` (eps folded into code units), then
  the per-channel affine and the output rounding;

and prints both, with the largest difference between the two variants' output codes. Everything
else in the network stays float, so the numbers isolate the layer norms.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coverage import torchvision_model  # noqa: E402

from byoc_int8 import qarith  # noqa: E402
from byoc_int8.pipeline import cosine  # noqa: E402

RECIPROCAL_BITS = 40


def integer_layer_norm(codes: np.ndarray, zero_point: int, scale: float, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over the last axis of int8 codes, in integers; returns the
    normalized values as exact rationals evaluated in float64 (numerator * reciprocal / 2^K)."""
    x = codes.astype(np.int64) - zero_point
    channels = x.shape[-1]
    d = channels * x - x.sum(axis=-1, keepdims=True)  # C * (x - mean), exact
    v = (d * d).sum(axis=-1, keepdims=True)  # C^3 * var in codes^2, exact in int64
    eps_codes = round(eps * channels**3 / scale**2)
    ratio = (channels << (2 * RECIPROCAL_BITS)) // np.maximum(v + eps_codes, 1).astype(object)
    reciprocal = np.vectorize(math.isqrt, otypes=[object])(ratio).astype(np.int64)  # 2^K * sqrt(C / V), per row
    # (x - mean) / std = (d / C) / sqrt(V / C^3) = d * sqrt(C / V) = d * reciprocal / 2^K
    return d.astype(np.float64) * reciprocal.astype(np.float64) / float(1 << RECIPROCAL_BITS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calib", type=int, default=8)
    parser.add_argument("--eval", type=int, default=4)
    args = parser.parse_args()
    model = torchvision_model("convnext_tiny")
    inputs = torch.randn(args.calib + args.eval, 1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    original = F.layer_norm

    # Calibrate: the range of every layer norm's input and output, in call order.
    ranges: list[list[float]] = []

    def observe(x, shape, weight=None, bias=None, eps=1e-5):
        y = original(x, shape, weight, bias, eps)
        for t in (x, y):
            ranges.append([float(t.min()), float(t.max())])
        return y

    def run(layer_norm, x):
        F.layer_norm = layer_norm
        try:
            with torch.no_grad():
                return model(x).numpy()
        finally:
            F.layer_norm = original

    lo_hi: list[list[float]] = []
    for x in inputs[: args.calib]:
        ranges.clear()
        run(observe, x)
        lo_hi = [[min(a[0], b[0]), max(a[1], b[1])] for a, b in zip(lo_hi, ranges)] if lo_hi else [r[:] for r in ranges]
    quants = [qarith.activation_quant(lo, hi, "asymmetric") for lo, hi in lo_hi]

    def int8_layer_norm(integer: bool, codes_out: list):
        calls = iter(range(0, len(quants), 2))

        def layer_norm(x, shape, weight=None, bias=None, eps=1e-5):
            i = next(calls)
            q_in, q_out = quants[i], quants[i + 1]
            codes = qarith.quantize_tensor(x.numpy(), q_in, "tflite")
            if integer:
                normalized = integer_layer_norm(codes, q_in.zero_point, q_in.scale, eps)
            else:
                real = qarith.dequantize_tensor(codes, q_in).astype(np.float64)
                normalized = (real - real.mean(-1, keepdims=True)) / np.sqrt(real.var(-1, keepdims=True) + eps)
            y = normalized * weight.numpy().astype(np.float64) + bias.numpy().astype(np.float64)
            out = qarith.clamp_s8(np.round(y / q_out.scale) + q_out.zero_point)
            codes_out.append(out)
            return torch.from_numpy(qarith.dequantize_tensor(out, q_out).astype(np.float32))

        return layer_norm

    cos = {"int8 I/O": [], "integer": []}
    max_code_diff = 0
    for x in inputs[args.calib :]:
        reference = run(original, x)
        exact_codes, integer_codes = [], []
        cos["int8 I/O"].append(cosine(run(int8_layer_norm(False, exact_codes), x), reference))
        cos["integer"].append(cosine(run(int8_layer_norm(True, integer_codes), x), reference))
        # The same input codes reach layer norm 0 in both; later ones may differ through earlier ones.
        max_code_diff = max(max_code_diff, int(np.abs(exact_codes[0].astype(int) - integer_codes[0]).max()))
    print(f"convnext_tiny, {len(quants) // 2} layer norms, {args.calib} calibration / {args.eval} evaluation inputs")
    for name, values in cos.items():
        print(f"  layer norms {name:<9} logits cosine vs float: min {min(values):.5f}  mean {np.mean(values):.5f}")
    print(f"  first layer norm, largest output code difference integer vs exact: {max_code_diff}")


if __name__ == "__main__":
    main()
