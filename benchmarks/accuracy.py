"""Accuracy of every calibrator: the digits ResNet (real data, held-out split) and ResNet-18.

    python benchmarks/accuracy.py [--resnet-calib 32] [--resnet-eval 8]

Prints one table. Digits: float and int8 top-1 accuracy on the 360 held-out images, the drop in
percentage points, mean logits cosine and logits SQNR (int8 vs float). ResNet-18 (random init,
no labels): mean logits cosine vs float on random inputs.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from byoc_int8 import digits
from byoc_int8.calibrate import CALIBRATORS
from byoc_int8.layer_errors import sqnr_db
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import compile_model, cosine


def logits(predict, x: np.ndarray) -> np.ndarray:
    return np.concatenate([predict(x[i : i + 1]) for i in range(len(x))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resnet-calib", type=int, default=32)
    parser.add_argument("--resnet-eval", type=int, default=8)
    args = parser.parse_args()

    split = digits.load_split()
    model = digits.pretrained()
    with torch.no_grad():
        float_logits = logits(lambda b: model(torch.from_numpy(b)).numpy(), split.test_x)
    float_acc = float(np.mean(float_logits.argmax(1) == split.test_y))

    resnet = BUILTIN_MODELS["resnet18"]
    resnet_model = resnet.make()
    resnet_x, _ = resnet.evaluation_set(args.resnet_eval)
    with torch.no_grad():
        resnet_float = resnet_model(torch.from_numpy(resnet_x)).numpy()

    header = (f"{'calibrator':<11} {'float acc':>9} {'int8 acc':>9} {'drop pp':>8} {'cosine':>9} "
              f"{'SQNR dB':>8} {'resnet18 cosine':>16}")
    print(header, flush=True)
    for method in sorted(CALIBRATORS):
        compiled = compile_model(model, split.train_x[:256], method=method)
        int8_logits = logits(compiled.run, split.test_x)
        int8_acc = float(np.mean(int8_logits.argmax(1) == split.test_y))
        digits_cos = np.mean([cosine(a, b) for a, b in zip(int8_logits, float_logits)])
        resnet_compiled = compile_model(resnet_model, resnet.calibration_inputs(args.resnet_calib), method=method)
        resnet_int8 = logits(resnet_compiled.run, resnet_x)
        resnet_cos = np.mean([cosine(a, b) for a, b in zip(resnet_int8, resnet_float)])
        print(
            f"{method:<11} {100 * float_acc:>8.2f}% {100 * int8_acc:>8.2f}% {100 * (float_acc - int8_acc):>8.2f} "
            f"{digits_cos:>9.6f} {sqnr_db(float_logits, int8_logits):>8.2f} {resnet_cos:>16.6f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
