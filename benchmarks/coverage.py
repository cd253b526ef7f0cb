"""The coverage table: every built-in network compiled all-int8 and checked.

    python benchmarks/coverage.py [--eval 8] [--calib 32] [model ...]

For each model: ops total / offloaded, regions, host ops, bit-exactness of the C library vs the
integer reference, logits cosine vs float (minimum over the evaluation inputs), compile seconds.
"""

from __future__ import annotations

import argparse

from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import compile_model, evaluate

DEFAULT = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "vgg11_bn", "seed002", "digits"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--eval", type=int, default=8)
    parser.add_argument("--calib", type=int, default=32)
    args = parser.parse_args()
    print(f"{'model':<14} {'ops':>5} {'offloaded':>9} {'regions':>7} {'host':>4} {'bit-exact':>9} "
          f"{'cosine':>8} {'compile s':>9} {'latency ms':>10}")
    for name in args.models:
        spec = BUILTIN_MODELS[name]
        model = spec.make()
        compiled = compile_model(model, spec.calibration_inputs(args.calib))
        report = evaluate(compiled, model, spec.evaluation_set(args.eval)[0], latency_runs=5, layers=[])
        print(f"{name:<14} {report['ops_total']:>5} {report['ops_offloaded']:>9} {report['regions']:>7} "
              f"{len(report['host_ops']):>4} {str(report['bit_exact']):>9} {report['cosine_vs_float']:>8.5f} "
              f"{report['compile_seconds']:>9.1f} {report['latency_ms_median']:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
