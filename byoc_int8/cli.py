"""Command line: ``byoc-int8 run`` (compile + check + report) and ``byoc-int8 compile``.

Models: a built-in name, a ``torch.export`` program (``.pt2``, calibrated on ``--calib``), or a
model quantized elsewhere (a full-integer ``.tflite``, an ONNX QDQ ``.onnx``), which keeps its
own scales and zero points and is checked against its peer stack."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from .calibrate import CALIBRATORS
from .inputs import load_inputs
from .layer_errors import layer_errors, plot_layer_errors
from .models import BUILTIN_MODELS
from .partition import Int8OnlyError
from . import peers, reference
from .pipeline import (
    LAYER_ERROR_INPUTS,
    PREQUANTIZED_FORMATS,
    compile_model,
    compile_prequantized,
    evaluate,
    evaluate_prequantized,
    sample_inputs,
)
from .qarith import ACTIVATIONS, DEFAULT_FORMAT, ROUNDINGS, NumberFormat


def _load_model(args):
    """(model to compile, float model to compare with, calibration inputs, eval inputs, labels)."""
    if args.model in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[args.model]
        model = spec.make()
        calib = load_inputs(args.calib, spec.input_shape) if args.calib else spec.calibration_inputs(args.num_calib)
        evals, labels = spec.evaluation_set(args.num_eval)
        return model, model, calib, evals, labels
    path = Path(args.model)
    if path.suffix != ".pt2" or not path.exists():
        raise SystemExit(
            f"unknown model {args.model!r}: use one of {sorted(BUILTIN_MODELS)} or a .pt2 file from torch.export.save"
        )
    if not args.calib:
        raise SystemExit("--calib (a .npy file or a directory of images) is required with a .pt2 model")
    program = torch.export.load(str(path))
    shape = [int(d) for d in next(iter(program.example_inputs[0])).shape]
    calib = load_inputs(args.calib, shape)
    return program, program.module(), calib, calib[: args.num_eval or 8], None


def _calibration_options(args) -> dict:
    return {"percentile": args.percentile} if args.method == "percentile" and args.percentile else {}


def _print_report(report: dict) -> None:
    scalars = {k: v for k, v in report.items() if k not in ("layers", "host_ops", "warnings")}
    width = max(len(k) for k in scalars)
    for key, value in scalars.items():
        print(f"{key:<{width}}  {value}")
    for op in report["host_ops"]:
        print(f"  on the host: {op['description']}")
    for warning in report.get("warnings", []):
        print(f"  warning: {warning}")
    if report.get("layers"):
        print(f"\n{'layer':<28} {'SQNR dB':>8} {'clip range':>22} {'clipped %':>10}")
        for layer in report["layers"]:
            lo, hi = layer["clip_range"]
            print(f"{layer['layer']:<28} {layer['sqnr_db']:>8.2f} {f'[{lo:.4g}, {hi:.4g}]':>22} "
                  f"{100 * layer['clipped_fraction']:>10.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="byoc-int8", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("run", "compile, run, check against float and the integer reference, report"),
        ("compile", "write the compiled library"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--model", default="resnet18",
                       help=f"{', '.join(BUILTIN_MODELS)}, PATH.pt2, or a quantized PATH.tflite / PATH.onnx")
        p.add_argument("--calib", help="calibration inputs: a .npy file (stacked on axis 0) or a directory of images")
        p.add_argument("--method", default="max", choices=sorted(CALIBRATORS), help="calibrator (default: max)")
        p.add_argument("--percentile", type=float, help="percentile for --method percentile (default 99.99)")
        p.add_argument("--activations", choices=ACTIVATIONS,
                       help=f"int8 activation encoding (default: {DEFAULT_FORMAT.activations}; asymmetric is "
                            "TFLite's, with zero points)")
        p.add_argument("--rounding", choices=ROUNDINGS,
                       help=f"requantization rounding (default: {DEFAULT_FORMAT.rounding}; tflite is TFLite's "
                            "default double rounding; a .tflite model defaults to tflite)")
        p.add_argument("--num-calib", type=int, help="calibration inputs drawn for a built-in model")
        p.add_argument("--num-eval", type=int, help="evaluation inputs (default: the model's evaluation set)")
        p.add_argument("--int8-only", action="store_true",
                       help="fail, listing them, if any op cannot run in int8 on the accelerator")
        p.add_argument("--simd", choices=["avx512vnni", "avx2", "portable"],
                       help="kernel implementation (default: the fastest this machine runs)")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        if name == "run":
            p.add_argument("--json", help="also write the report to this path")
            p.add_argument("--keep", metavar="PATH", help="keep the compiled library at PATH (by default run deletes it)")
            p.add_argument("--plot", help="write per-layer SQNR and an activation histogram to this PNG")
            p.add_argument("--plot-layer", help="layer whose histogram to draw (default: lowest SQNR)")
        else:
            p.add_argument("-o", "--output", required=True, help="path of the .so to write")
    args = parser.parse_args(argv)

    if Path(args.model).suffix.lower() in (".tflite", ".onnx"):
        return _prequantized(args)
    model, float_model, calib, evals, labels = _load_model(args)
    compiled = _compiled(args, lambda: compile_model(
            model,
            calib,
            method=args.method,
            output_path=_library_path(args),
            progress=not args.quiet,
            int8_only=args.int8_only,
            simd=args.simd,
            number_format=NumberFormat(args.activations or DEFAULT_FORMAT.activations,
                                       args.rounding or DEFAULT_FORMAT.rounding),
            **_calibration_options(args),
        ))
    if compiled is None or args.command == "compile":
        return 2 if compiled is None else 0
    layers = layer_errors(compiled.module, evals[:LAYER_ERROR_INPUTS])
    report = {"model": args.model, "calibration": args.method,
              "activations": args.activations or DEFAULT_FORMAT.activations,
              "rounding": args.rounding or DEFAULT_FORMAT.rounding,
              **evaluate(compiled, float_model, evals, labels=labels, layers=layers)}
    _print_report(_report(args, report))
    if args.plot:
        drawn = plot_layer_errors(layers, args.plot, args.plot_layer)
        print(f"\nwrote {args.plot} (histogram of layer {drawn!r})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _library_path(args) -> str | None:
    """Where the library goes: compile's -o, run's --keep, or (None) a temporary directory that is
    deleted with the compiled model."""
    return args.output if args.command == "compile" else args.keep


def _report(args, report: dict) -> dict:
    if not args.keep:
        report.pop("library", None)  # deleted on exit
    return report


def _compiled(args, compile_it):
    """The compiled model (for `compile`, the library written and said so), or None after
    printing why strict int8 mode refused the model."""
    try:
        compiled = compile_it()
    except Int8OnlyError as err:
        print(f"byoc-int8: {err}", file=sys.stderr)
        return None
    if args.command == "compile":
        print(f"wrote {compiled.library_path} ({compiled.ops_offloaded}/{compiled.ops_total} ops offloaded, "
              f"{compiled.compile_seconds:.1f} s)")
    return compiled


def _prequantized(args) -> int:
    """compile / run of a model quantized elsewhere: its own scales, no calibration."""
    path = Path(args.model)
    if not path.is_file():
        raise SystemExit(f"byoc-int8: error: no such file: {path}")
    kind = path.suffix.lower().lstrip(".")
    default = PREQUANTIZED_FORMATS[kind]
    fmt = NumberFormat(args.activations or default.activations, args.rounding or default.rounding)
    compiled = _compiled(args, lambda: compile_prequantized(
        path, _library_path(args), int8_only=args.int8_only, simd=args.simd,
        number_format=fmt))
    if compiled is None or args.command == "compile":
        return 2 if compiled is None else 0
    inputs = np.load(args.calib) if args.calib else sample_inputs(compiled, args.num_eval or 16)
    report = {"model": args.model, "activations": fmt.activations, "rounding": fmt.rounding,
              **evaluate_prequantized(compiled, _peer(kind, path, compiled), inputs)}
    _print_report(_report(args, report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _peer(kind: str, path: Path, compiled) -> peers.Peer | None:
    """The stack the model came from, when its package is installed (the report says so)."""
    try:
        if kind == "tflite":
            return peers.tflite_reference(path)
        scale = reference.output_scales(compiled.module)[0] or 1.0
        return peers.onnxruntime_session(path, scale)
    except ImportError as err:
        print(f"byoc-int8: no comparison with the {kind} peer ({err})", file=sys.stderr)
        return None


if __name__ == "__main__":
    sys.exit(main())
