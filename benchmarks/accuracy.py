"""Accuracy of every number format x calibrator: the digits ResNet (real data) and ResNet-18.

    TVM_NUM_THREADS=2 python benchmarks/accuracy.py [--formats asymmetric/tflite,asymmetric/tflite/w7]
        [--methods max,mse] [--resnet-calib 32] [--resnet-eval 8]

One row per (number format, calibrator); defaults: all six formats (``qarith.ACTIVATIONS`` x
``qarith.ROUNDINGS``) and every calibrator in ``calibrate.CALIBRATORS``. Columns:

* digits (calibrated on 256 training images, evaluated on the 360 held-out ones): float and
  int8 top-1 accuracy, the drop in percentage points, mean logits cosine and logits SQNR (int8 vs
  float), and the mean per-layer SQNR (``layer_errors`` on 64 held-out images; finite values);
* ResNet-18 (random init, random inputs, no labels): mean logits cosine vs float over the
  evaluation inputs, mean per-layer SQNR on 4 of them;
* bit-exact: whether the C library matches the integer reference bit for bit on 8 digits images
  and 2 ResNet-18 inputs (when not, a line with the mismatching inputs follows the row).

The last line names the best format for the "max" calibrator: highest ResNet-18 cosine, then
smallest digits drop.

    TVM_NUM_THREADS=2 python benchmarks/accuracy.py --profiles x86-sim,tflite-int8,pow2-npu

compares accelerator profiles instead (``profiles.py``; "max" calibrator, each profile's own
number format): per model, ops offloaded, digits accuracy or ResNet-18 cosine, the largest
region's workspace (arena) bytes and the constant bytes (weights, biases, multipliers, tables).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from byoc_int8 import digits, reference
from byoc_int8.calibrate import CALIBRATORS
from byoc_int8.codegen.emit_c import footprint
from byoc_int8.layer_errors import layer_errors, sqnr_db
from byoc_int8.models import BUILTIN_MODELS
from byoc_int8.pipeline import CompiledModel, compile_model, cosine
from byoc_int8.profiles import BUILTIN_PROFILES, load_profile
from byoc_int8.qarith import ACTIVATIONS, ROUNDINGS, NumberFormat

DIGITS_CALIBRATION = 256
DIGITS_LAYER_INPUTS = 64
DIGITS_CHECK_INPUTS = 8
RESNET_LAYER_INPUTS = 4
RESNET_CHECK_INPUTS = 2
BEST_CALIBRATOR = "max"

ALL_FORMATS = [NumberFormat(a, r) for a in ACTIVATIONS for r in ROUNDINGS]


@dataclass(frozen=True)
class Workload:
    """A float model, its calibration inputs and the inputs its int8 build is measured on."""

    model: torch.nn.Module
    calibration: np.ndarray
    inputs: np.ndarray  # logits are compared with float on all of them
    float_logits: np.ndarray
    layer_inputs: int  # the first this many go through layer_errors
    check_inputs: int  # the first this many are checked C vs integer reference


@dataclass(frozen=True)
class Measurement:
    """One int8 build of a workload, measured against its float model."""

    compiled: CompiledModel
    workspace_bytes: int  # the largest region's arena
    constant_bytes: int  # weights, biases, requantization constants and tables of every region
    logits: np.ndarray
    cosine: float  # mean over the inputs
    logits_sqnr_db: float
    layer_sqnr_db: float  # mean of the finite per-layer SQNRs
    mismatches: list[str]  # inputs where C and the integer reference differ, described


@dataclass(frozen=True)
class Row:
    number_format: NumberFormat
    method: str
    float_acc: float
    int8_acc: float
    digits: Measurement
    resnet: Measurement

    @property
    def drop_pp(self) -> float:
        return 100 * (self.float_acc - self.int8_acc)

    @property
    def bit_exact(self) -> bool:
        return not (self.digits.mismatches or self.resnet.mismatches)


def logits(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """`predict` applied to each batch-1 input of `x`, stacked."""
    return np.concatenate([predict(x[i : i + 1]) for i in range(len(x))])


def float_logits(model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return logits(lambda b: model(torch.from_numpy(b)).numpy(), x)


def digits_workload() -> tuple[Workload, np.ndarray]:
    """The digits ResNet on its held-out split, and the split's labels."""
    split = digits.load_split()
    model = digits.pretrained()
    workload = Workload(model, split.train_x[:DIGITS_CALIBRATION], split.test_x,
                        float_logits(model, split.test_x), DIGITS_LAYER_INPUTS, DIGITS_CHECK_INPUTS)
    return workload, split.test_y


def resnet_workload(calibration: int, evaluation: int) -> Workload:
    spec = BUILTIN_MODELS["resnet18"]
    model = spec.make()
    x, _ = spec.evaluation_set(evaluation)
    return Workload(model, spec.calibration_inputs(calibration), x, float_logits(model, x),
                    RESNET_LAYER_INPUTS, RESNET_CHECK_INPUTS)


def mismatches(compiled: CompiledModel, x: np.ndarray) -> list[str]:
    """The inputs of `x` on which the C library and the integer reference differ, with the
    largest difference in output LSBs (in float units when a host op makes the output)."""
    found = []
    for i in range(len(x)):
        c_out = compiled.run(x[i : i + 1])
        ref_out, scale = compiled.run_reference(x[i : i + 1])
        if not np.array_equal(c_out, ref_out):
            diff = np.abs(c_out.astype(np.float64) - ref_out)
            found.append(f"input {i}: {int(np.count_nonzero(diff))} values differ, "
                         f"max {diff.max() / (scale or 1.0):.3g} LSB")
    return found


def mean_layer_sqnr(compiled: CompiledModel, x: np.ndarray) -> float:
    finite = [e.sqnr_db for e in layer_errors(compiled.module, x) if math.isfinite(e.sqnr_db)]
    return float(np.mean(finite)) if finite else float("nan")


def measure(workload: Workload, number_format: NumberFormat | None, method: str, library: Path,
            profile: str | None = None) -> Measurement:
    """Compile `workload` in `number_format` (or `profile`'s) with calibrator `method` into
    `library`, and measure it."""
    compiled = compile_model(workload.model, workload.calibration, method=method,
                             number_format=number_format, output_path=library, profile=profile)
    int8 = logits(compiled.run, workload.inputs)
    arena, constants = zip(*(footprint(q) for q in reference.quantized_regions(compiled.module).values()))
    return Measurement(
        compiled=compiled,
        workspace_bytes=max(arena),
        constant_bytes=sum(constants),
        logits=int8,
        cosine=float(np.mean([cosine(a, b) for a, b in zip(int8, workload.float_logits)])),
        logits_sqnr_db=sqnr_db(workload.float_logits, int8),
        layer_sqnr_db=mean_layer_sqnr(compiled, workload.inputs[: workload.layer_inputs]),
        mismatches=mismatches(compiled, workload.inputs[: workload.check_inputs]),
    )


def accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(scores.argmax(1) == labels))


HEADER = (f"{'activations':<11} {'rounding':<11} {'calibrator':<10} {'float acc':>9} {'int8 acc':>9} "
          f"{'drop pp':>7} {'cosine':>9} {'SQNR dB':>7} {'layer dB':>8} {'r18 cosine':>10} "
          f"{'r18 layer dB':>12} {'bit-exact':>9}")


def format_row(row: Row) -> str:
    d, r = row.digits, row.resnet
    fmt = row.number_format
    rounding = fmt.rounding + ("" if fmt.weight_bits == 8 else f"/w{fmt.weight_bits}")
    line = (f"{fmt.activations:<11} {rounding:<11} {row.method:<10} "
            f"{100 * row.float_acc:>8.2f}% {100 * row.int8_acc:>8.2f}% {row.drop_pp:>7.2f} "
            f"{d.cosine:>9.6f} {d.logits_sqnr_db:>7.2f} {d.layer_sqnr_db:>8.2f} {r.cosine:>10.6f} "
            f"{r.layer_sqnr_db:>12.2f} {'yes' if row.bit_exact else 'NO':>9}")
    details = [f"    digits {m}" for m in d.mismatches] + [f"    resnet18 {m}" for m in r.mismatches]
    return "\n".join([line, *details])


def best_format(rows: list[Row]) -> str:
    candidates = [row for row in rows if row.method == BEST_CALIBRATOR]
    if not candidates:
        return f"best format: none measured with calibrator {BEST_CALIBRATOR!r}"
    best = max(candidates, key=lambda row: (row.resnet.cosine, -row.drop_pp))
    return (f"best format ({BEST_CALIBRATOR} calibrator, by ResNet-18 cosine then digits drop): "
            f"{best.number_format} (ResNet-18 cosine {best.resnet.cosine:.6f}, digits drop {best.drop_pp:.2f} pp)")


def parse_formats(text: str) -> list[NumberFormat]:
    """"asymmetric/tflite,symmetric/single,asymmetric/tflite/w7" -> NumberFormats (w7: 7-bit
    weights)."""
    formats = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        activations, sep, rest = item.partition("/")
        rounding, _, weights = rest.partition("/")
        if not sep or weights not in ("", "w7", "w8"):
            raise argparse.ArgumentTypeError(f"{item!r}: expected ACTIVATIONS/ROUNDING[/w7]")
        try:
            formats.append(NumberFormat(activations, rounding, weight_bits=int(weights[1:] or 8)))
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return formats


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in CALIBRATORS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown calibrator(s) {', '.join(unknown)}; "
                                         f"choose from {', '.join(sorted(CALIBRATORS))}")
    return methods


PROFILE_HEADER = (f"{'profile':<12} {'model':<9} {'offloaded':>9} {'regions':>7} {'accuracy / cosine':>17} "
                  f"{'drop pp':>7} {'workspace B':>11} {'constants B':>11} {'bit-exact':>9}")


def profile_rows(names: list[str], digits_wl: Workload, labels: np.ndarray, resnet_wl: Workload, tmp: str) -> None:
    float_acc = accuracy(digits_wl.float_logits, labels)
    print(PROFILE_HEADER, flush=True)
    for name in names:
        for model, workload in (("digits", digits_wl), ("resnet18", resnet_wl)):
            m = measure(workload, None, BEST_CALIBRATOR, Path(tmp) / f"{name}_{model}.so", profile=name)
            c = m.compiled
            score = (f"{100 * accuracy(m.logits, labels):>16.2f}%" if model == "digits" else f"{m.cosine:>17.6f}")
            drop = f"{100 * (float_acc - accuracy(m.logits, labels)):>7.2f}" if model == "digits" else f"{'':>7}"
            print(f"{name:<12} {model:<9} {f'{c.ops_offloaded}/{c.ops_total}':>9} {c.regions:>7} {score} {drop} "
                  f"{m.workspace_bytes:>11} {m.constant_bytes:>11} {'yes' if not m.mismatches else 'NO':>9}", flush=True)
            for host in sorted({h["op"] + ": " + h["reason"] for h in c.host_ops}):
                print(f"{'':<12}   on the host: {host}")


def parse_profiles(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        try:
            load_profile(name)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return names


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--formats", type=parse_formats, default=ALL_FORMATS,
                        help="comma-separated ACTIVATIONS/ROUNDING (default: all six)")
    parser.add_argument("--methods", type=parse_methods, default=sorted(CALIBRATORS),
                        help="comma-separated calibrators (default: all)")
    parser.add_argument("--resnet-calib", type=int, default=32, help="ResNet-18 calibration inputs")
    parser.add_argument("--resnet-eval", type=int, default=8, help="ResNet-18 evaluation inputs")
    parser.add_argument("--profiles", type=parse_profiles, default=None,
                        help=f"compare accelerator profiles (built-in: {', '.join(BUILTIN_PROFILES)}, or .toml files)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    digits_wl, labels = digits_workload()
    resnet_wl = resnet_workload(args.resnet_calib, args.resnet_eval)
    float_acc = accuracy(digits_wl.float_logits, labels)
    rows = []
    if args.profiles:
        with tempfile.TemporaryDirectory(prefix="byoc_int8_accuracy_") as tmp:
            profile_rows(args.profiles, digits_wl, labels, resnet_wl, tmp)
        return
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="byoc_int8_accuracy_") as tmp:
        for fmt in args.formats:
            for method in args.methods:
                stem = Path(tmp) / f"{fmt.activations}_{fmt.rounding}_w{fmt.weight_bits}_{method}"
                d = measure(digits_wl, fmt, method, stem.with_name(stem.name + "_digits.so"))
                r = measure(resnet_wl, fmt, method, stem.with_name(stem.name + "_resnet18.so"))
                row = Row(fmt, method, float_acc, accuracy(d.logits, labels), d, r)
                rows.append(row)
                print(format_row(row), flush=True)
    print(best_format(rows), flush=True)


if __name__ == "__main__":
    main()
