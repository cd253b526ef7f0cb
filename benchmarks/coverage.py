"""The coverage table: networks compiled through the int8 flow and checked.

    python benchmarks/coverage.py [--eval 2] [--calib 16] [--int8-only] [model ...]
    python benchmarks/coverage.py --torchvision            # one of each torchvision CNN family

For each model: ops total / offloaded, regions, float <-> int8 boundary crossings, bit-exactness
of the C library vs the integer reference, logits cosine vs float (minimum over the evaluation
inputs), compile seconds, latency, and warnings (degenerate tensors). Random-init networks get
randomized batch-norm statistics (as the built-in models do), so activations stay O(1); inputs
are standard normal at each network's input size.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from byoc_int8.models import BUILTIN_MODELS, randomize_batch_norm
from byoc_int8.partition import Int8OnlyError
from byoc_int8.pipeline import compile_model, evaluate

DEFAULT = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "vgg11_bn", "seed002", "digits"]

# One network of every torchvision classification CNN family, and its input size.
TORCHVISION = {
    "alexnet": 224, "vgg11_bn": 224, "resnet18": 224, "resnet50": 224, "resnext50_32x4d": 224,
    "wide_resnet50_2": 224, "squeezenet1_1": 224, "densenet121": 224, "inception_v3": 299,
    "googlenet": 224, "shufflenet_v2_x1_0": 224, "mobilenet_v2": 224, "mobilenet_v3_small": 224,
    "mobilenet_v3_large": 224, "mnasnet1_0": 224, "efficientnet_b0": 224, "efficientnet_v2_s": 384,
    "regnet_x_400mf": 224, "regnet_y_400mf": 224, "convnext_tiny": 224,
}


def torchvision_model(name: str) -> torch.nn.Module:
    import torchvision

    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("inception_v3", "googlenet") else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    return model.eval()


def workload(name: str, size: int | None, calib: int, evals: int) -> tuple[torch.nn.Module, np.ndarray, np.ndarray]:
    if size is None:
        spec = BUILTIN_MODELS[name]
        return spec.make(), spec.calibration_inputs(calib), spec.evaluation_set(evals)[0]
    inputs = torch.randn(calib + evals, 3, size, size, generator=torch.Generator().manual_seed(0)).numpy()
    return torchvision_model(name), inputs[:calib], inputs[calib:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--torchvision", action="store_true", help="one network of every torchvision CNN family")
    parser.add_argument("--eval", type=int, default=2)
    parser.add_argument("--calib", type=int, default=16)
    parser.add_argument("--int8-only", action="store_true", help="fail a model (and say why) if any op stays in float")
    args = parser.parse_args()
    sizes = TORCHVISION if args.torchvision else {}
    names = args.models or (list(TORCHVISION) if args.torchvision else DEFAULT)
    print(f"{'model':<20} {'ops':>5} {'offloaded':>9} {'regions':>7} {'crossings':>9} {'bit-exact':>9} "
          f"{'cosine':>8} {'compile s':>9} {'latency ms':>10} {'warnings':>8}", flush=True)
    for name in names:
        model, calib, evals = workload(name, sizes.get(name, None if name in BUILTIN_MODELS else 224), args.calib, args.eval)
        try:
            compiled = compile_model(model, calib, int8_only=args.int8_only)
        except Int8OnlyError as err:
            print(f"{name:<20} refused: {len(err.host_ops)} op(s) in float, e.g. {err.host_ops[0].describe()}", flush=True)
            continue
        report = evaluate(compiled, model, evals, latency_runs=3, layers=[])
        print(f"{name:<20} {report['ops_total']:>5} {report['ops_offloaded']:>9} {report['regions']:>7} "
              f"{report['boundary_crossings']:>9} {str(report['bit_exact']):>9} {report['cosine_vs_float']:>8.5f} "
              f"{report['compile_seconds']:>9.1f} {report['latency_ms_median']:>10.1f} {len(report['warnings']):>8}",
              flush=True)
        for op in {h["op"] + ": " + h["reason"] for h in report["host_ops"]}:
            print(f"{'':<20}   on the host: {op}")


if __name__ == "__main__":
    main()
