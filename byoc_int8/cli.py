"""Command line: ``byoc-int8 run`` (compile + check + report), ``byoc-int8 compile`` (the shared
library) and ``byoc-int8 export-c`` (a standalone C99 project, for firmware).

Models: a built-in name, a ``torch.export`` program (``.pt2``, calibrated on ``--calib``), or a
model quantized elsewhere (a full-integer ``.tflite``, an ONNX QDQ ``.onnx``), which keeps its
own scales and zero points and is checked against its peer stack.

A mistake in what the user gave (an option, a file, data) prints one line,
``byoc-int8: error: <what went wrong and what to do>``, and exits with status 2; ``--debug``
shows the Python traceback instead."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils._pytree import tree_leaves

from .calibrate import CALIBRATORS
from .codegen.emit_c import SIMD_BUILDS, SIMD_FLAGS, cpu_flags
from .errors import CalibrationDataError, ModelFileError, ModelImportError, ToolchainError, UserError
from .frontend import check_pt2_archive
from .inputs import check_samples, load_inputs, load_npy
from .layer_errors import layer_errors, plot_layer_errors
from .models import BUILTIN_MODELS
from .export import export_c
from .partition import Int8OnlyError
from .profiles import BUILTIN_PROFILES, load_profile
from .vectors import write_layer_vectors
from . import peers, reference
from .pipeline import (
    LAYER_ERROR_INPUTS,
    PREQUANTIZED_FORMATS,
    compile_model,
    compile_prequantized,
    evaluate,
    evaluate_prequantized,
    sample_inputs,
    whole_batches,
)
from .qarith import ACTIVATIONS, DEFAULT_FORMAT, ROUNDINGS, WEIGHT_BITS, NumberFormat


MODEL_SUFFIXES = (".pt2", ".tflite", ".onnx")


def _load_model(args):
    """(model to compile, float model to compare with, calibration inputs, eval inputs, labels)."""
    if args.model in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[args.model]
        model = spec.make()
        calib = load_inputs(args.calib, spec.input_shape) if args.calib else spec.calibration_inputs(args.num_calib)
        evals, labels = spec.evaluation_set(args.num_eval)
        return model, model, calib, evals, labels
    path = Path(args.model)
    program = _load_exported_program(path)
    shape = _example_shape(program, path)
    calib = load_inputs(args.calib, shape)
    # No guard function: guard code is Python from the file (check_pt2_archive refuses it anyway).
    return program, program.module(check_guards=False), calib, calib[: args.num_eval or 8], None


def _load_exported_program(path: Path) -> torch.export.ExportedProgram:
    """torch.export.load of a .pt2 file that check_pt2_archive accepts (see its docstring: what
    torch's loader would otherwise run)."""
    check_pt2_archive(path)
    try:
        return torch.export.load(str(path))
    except Exception as err:  # torch's deserializer raises many kinds
        raise ModelFileError(f"torch.export.load cannot read {path}: {type(err).__name__}: {err}") from err


def _example_shape(program, path: Path) -> list[int]:
    """The shape of the program's (one) user input, from its example inputs or its graph."""
    if program.example_inputs:
        flat = [x for x in tree_leaves(program.example_inputs) if isinstance(x, torch.Tensor)]
        if len(flat) == 1:
            return [int(d) for d in flat[0].shape]
    users = set(program.graph_signature.user_inputs)
    shapes = [node.meta["val"].shape for node in program.graph.nodes
              if node.op == "placeholder" and node.name in users and isinstance(node.meta.get("val"), torch.Tensor)]
    if len(shapes) != 1:
        raise ModelFileError(f"{path}: byoc-int8 compiles programs with one tensor input; this one takes {len(users)}")
    return [int(d) for d in shapes[0]]


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


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line: ``byoc-int8: error: <message>``, status 2."""

    def error(self, message: str):
        _print_error(f"{message} (see '{self.prog} --help')")
        sys.exit(2)


class CommandLineError(SystemExit):
    """Exit status 2 after a user error was printed; ``str()`` is the message printed."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _percentile(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"must be in (0, 100], got {text}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="byoc-int8", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("run", "compile, run, check against float and the integer reference, report"),
        ("compile", "write the compiled library"),
        ("export-c", "write the model as a standalone C99 project (no TVM, no heap) with golden vectors"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--model", default="resnet18",
                       help=f"{', '.join(BUILTIN_MODELS)}, PATH.pt2, or a quantized PATH.tflite / PATH.onnx")
        p.add_argument("--calib", help="calibration inputs: a .npy file (stacked on axis 0) or a directory of images")
        p.add_argument("--method", choices=sorted(CALIBRATORS), help="calibrator (default: max)")
        p.add_argument("--percentile", type=_percentile, help="percentile for --method percentile (default 99.99)")
        p.add_argument("--activations", choices=ACTIVATIONS,
                       help=f"int8 activation encoding (default: {DEFAULT_FORMAT.activations}; asymmetric is "
                            "TFLite's, with zero points)")
        p.add_argument("--rounding", choices=ROUNDINGS,
                       help=f"requantization rounding (default: {DEFAULT_FORMAT.rounding}; tflite is TFLite's "
                            "default double rounding; a .tflite model defaults to tflite)")
        p.add_argument("--weight-bits", type=int, choices=WEIGHT_BITS,
                       help="weights in 8 bits (the default) or 7: one bit of weight precision for speed on "
                            "CPUs without VNNI (the AVX2 kernels' exact fast path; ONNX Runtime's reduce_range)")
        p.add_argument("--num-calib", type=_positive, help="calibration inputs drawn for a built-in model")
        p.add_argument("--num-eval", type=_positive, help="evaluation inputs (default: the model's evaluation set)")
        p.add_argument("--int8-only", action="store_true",
                       help="fail, listing them, if any op cannot run in int8 on the accelerator")
        p.add_argument("--simd", choices=list(SIMD_BUILDS),
                       help="kernel implementation (default: the fastest this machine runs)")
        p.add_argument("--profile", default=None,
                       help=f"accelerator profile: {', '.join(BUILTIN_PROFILES)} (default x86-sim) or a .toml file")
        if name in ("run", "compile"):
            p.add_argument("--batch", type=_positive,
                           help="images per run the library is compiled for (default: the model's; a .pt2 "
                                "program keeps the batch it was exported with)")
        if name in ("run", "export-c"):
            p.add_argument("--vectors", metavar="DIR",
                           help="write every kernel call's int8 inputs, parameters and expected output (golden vectors)")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        p.add_argument("--debug", action="store_true", help="on an error, show the Python traceback")
        if name == "run":
            p.add_argument("--json", help="also write the report to this path")
            p.add_argument("--keep", metavar="PATH", help="keep the compiled library at PATH (by default run deletes it)")
            p.add_argument("--plot", help="write per-layer SQNR and an activation histogram to this PNG")
            p.add_argument("--plot-layer", help="layer whose histogram to draw (default: lowest SQNR)")
        elif name == "compile":
            p.add_argument("-o", "--output", required=True, help="path of the .so to write")
            p.add_argument("--kernel-library", metavar="PATH.so",
                           help="link this kernel library (byoc_int8.h's functions) instead of the built-in kernels")
        else:
            p.add_argument("-o", "--output", required=True, help="directory of the C project to write")
            p.add_argument("--golden", type=_positive, default=2, help="golden input/output pairs in test_model.c")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line. A user's mistake prints ``byoc-int8: error: ...`` on one line and
    exits with status 2 (:class:`CommandLineError`; a model that --int8-only refuses returns 2);
    any other failure prints one line and exits with status 1. ``--debug`` re-raises instead."""
    args = _parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run_command(args)


def _run_command(args) -> int:
    try:
        return _command(args)
    except Int8OnlyError as err:
        if args.debug:
            raise
        ops = "; ".join(h.describe() for h in err.host_ops)
        _print_error(f"--int8-only: {len(err.host_ops)} op(s) cannot run in int8 on the accelerator: {ops} "
                     "(without --int8-only they run on the host in float)")
        return 2
    except (UserError, ModelImportError) as err:
        if args.debug:
            raise
        raise CommandLineError(_print_error(str(err))) from None
    except ModuleNotFoundError as err:
        if args.debug:
            raise
        raise CommandLineError(_print_error(f"{err}: install it (pip install {err.name})")) from None
    except ToolchainError as err:
        if args.debug:
            raise
        _print_error(str(err))
        raise SystemExit(1) from None
    except Exception as err:
        if args.debug:
            raise
        _print_error(f"internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback)")
        raise SystemExit(1) from None


def _one_line(message: str, limit: int = 600) -> str:
    """`message` on one line: whitespace runs, newlines and control characters (a model's names
    can hold any) become one space; a very long message is cut."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(message)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _print_error(message: str) -> str:
    """Prints ``byoc-int8: error: <message>`` on one line; returns the message printed."""
    text = _one_line(message)
    print(f"byoc-int8: error: {text}", file=sys.stderr)
    return text


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings (TVM's importers quote the model's names in theirs) as one line each."""
    print(f"byoc-int8: warning: {_one_line(f'{category.__name__}: {message}', 300)}", file=sys.stderr)


def _command(args) -> int:
    _check_args(args)
    if Path(args.model).suffix.lower() in (".tflite", ".onnx"):
        return _prequantized(args)
    method = args.method or "max"
    model, float_model, calib, evals, labels = _load_model(args)
    compiled = _compiled(args, lambda: compile_model(
            model,
            calib,
            example_inputs=_batch_example(args, model, calib),
            method=method,
            output_path=_library_path(args),
            progress=not args.quiet,
            int8_only=args.int8_only,
            simd=args.simd,
            number_format=_number_format(args),
            profile=args.profile,
            **_kernel_options(args),
            **_calibration_options(args),
        ))
    if args.command == "compile":
        return 0
    if args.command == "export-c":
        return _export_c(args, compiled, evals)
    if args.vectors:
        _write_vectors(args.vectors, compiled, next(whole_batches(evals, compiled.batch))[1])
    layers = layer_errors(compiled.module, next(whole_batches(evals[:LAYER_ERROR_INPUTS], compiled.batch))[1])
    if args.plot_layer and not any(args.plot_layer in (e.layer, f"{e.region}:{e.layer}") for e in layers):
        raise UserError(f"--plot-layer: no layer named {args.plot_layer!r}; layers: {', '.join(e.layer for e in layers)}")
    fmt = _number_format(args) or load_profile(args.profile).number_format
    report = {"model": args.model, "calibration": method, "profile": load_profile(args.profile).name,
              "activations": fmt.activations, "rounding": fmt.rounding, "weight_bits": fmt.weight_bits,
              **evaluate(compiled, float_model, evals, labels=labels, layers=layers)}
    _print_report(_report(args, report))
    if args.plot:
        drawn = plot_layer_errors(layers, args.plot, args.plot_layer)
        print(f"\nwrote {args.plot} (histogram of layer {drawn!r})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _batch_example(args, model, calib: np.ndarray) -> tuple[torch.Tensor, ...]:
    """The example input that fixes the compiled batch (--batch), or () for the model's own."""
    batch = getattr(args, "batch", None)
    if not batch:
        return ()
    if isinstance(model, torch.export.ExportedProgram):
        exported = _example_shape(model, Path(args.model))[0]
        if exported != batch:
            raise UserError(f"--batch {batch}: {args.model} was exported for batch {exported}; export it with "
                            f"batch {batch} (torch.export.export with an example input of {batch} images)")
        return ()
    return (torch.from_numpy(np.repeat(np.asarray(calib[:1], np.float32), batch, axis=0)),)


def _number_format(args) -> NumberFormat | None:
    """--activations / --rounding / --weight-bits over the profile's numbers, or None for the
    profile's own."""
    if not (args.activations or args.rounding or args.weight_bits):
        return None
    base = load_profile(args.profile).number_format
    return dataclasses.replace(base, activations=args.activations or base.activations,
                               rounding=args.rounding or base.rounding,
                               weight_bits=args.weight_bits or base.weight_bits)


def _kernel_options(args) -> dict:
    """compile --kernel-library PATH.so: link that library instead of the built-in kernels."""
    library = getattr(args, "kernel_library", None)
    if not library:
        return {}
    path = Path(library).resolve()
    name = path.name
    if not (name.startswith("lib") and name.endswith(".so")):
        raise UserError(f"--kernel-library {library}: expected a shared library named lib<name>.so")
    include = Path(__file__).resolve().parents[1] / "runtime_c" / "include"
    return {"kernels": "external", "link_options": [f"-I{include}", f"-L{path.parent}", "-Wl,--no-as-needed",
                                                   f"-l{name[3:-3]}", f"-Wl,-rpath,{path.parent}"]}


def _export_c(args, compiled, inputs: np.ndarray) -> int:
    """export-c: the C project, its sizes, and (--vectors) the golden vectors of its first input."""
    summary = export_c(compiled, args.output, inputs[: args.golden])
    print(f"wrote {summary.directory}: {len(summary.files)} files, workspace {summary.workspace_bytes} bytes "
          f"(MODEL_WORKSPACE_BYTES), constants {summary.constant_bytes} bytes, {summary.vectors} golden vectors; "
          f"build: cc -std=c99 -O2 *.c -lm -o test_model && ./test_model")
    if args.vectors:
        _write_vectors(args.vectors, compiled, inputs[:1])
    return 0


def _write_vectors(directory: str, compiled, x: np.ndarray) -> None:
    regions = reference.quantized_regions(compiled.module)
    if len(regions) != 1 or compiled.host_ops:
        raise UserError(f"--vectors needs a model that is one int8 region; this one has {len(regions)} and "
                        f"{len(compiled.host_ops)} host op(s)")
    ((symbol, qgraph),) = regions.items()
    manifest = write_layer_vectors(symbol, qgraph, np.asarray(x), directory)
    print(f"wrote {len(qgraph.nodes)} layers of golden vectors to {directory} ({manifest.name}); "
          "check a C build with test_model --layers " + directory)


def _check_args(args) -> None:
    """The mistakes that can be seen before any work: the model named, options that do not go
    together, a kernel build this CPU cannot run, output paths that cannot be written."""
    path = Path(args.model)
    suffix = path.suffix.lower()
    if args.model not in BUILTIN_MODELS:
        if suffix in MODEL_SUFFIXES and not path.is_file():
            raise ModelFileError(f"no such file: {args.model}" + (" (it is a directory)" if path.is_dir() else ""))
        if suffix not in MODEL_SUFFIXES:
            what = (f"{args.model}: byoc-int8 reads {', '.join(MODEL_SUFFIXES)} files" if path.exists()
                    else f"unknown model {args.model!r}: no such file, and not a built-in model")
            raise ModelFileError(f"{what}; use a built-in model ({', '.join(sorted(BUILTIN_MODELS))}), a .pt2 file from "
                                 "torch.export.save, a full-integer .tflite or an ONNX QDQ .onnx")
    prequantized = suffix in (".tflite", ".onnx") and args.model not in BUILTIN_MODELS
    if prequantized:
        for option, value in (("--method", args.method), ("--percentile", args.percentile), ("--num-calib", args.num_calib),
                              ("--profile", args.profile)):
            if value is not None:
                raise UserError(f"{option} does not apply to {path.name}: a model quantized elsewhere keeps its own "
                                "scales (nothing is calibrated)")
        if getattr(args, "batch", None):
            raise UserError(f"--batch does not apply to {path.name}: a model quantized elsewhere keeps its own batch")
        if args.weight_bits:
            raise UserError(f"--weight-bits does not apply to {path.name}: a model quantized elsewhere keeps its own "
                            "weights (the AVX2 kernels take their fast path by themselves where every weight lies "
                            "in [-64, 64])")
    elif suffix == ".pt2" and not args.calib:
        raise UserError("--calib (a .npy file or a directory of images) is required with a .pt2 model")
    if args.percentile is not None and args.method != "percentile":
        raise UserError("--percentile applies to --method percentile only")
    try:
        load_profile(args.profile)
    except ValueError as err:
        raise UserError(f"--profile: {err}") from None
    if getattr(args, "kernel_library", None) and not Path(args.kernel_library).is_file():
        raise UserError(f"--kernel-library {args.kernel_library}: no such file")
    flags = cpu_flags()
    if args.command == "run" and args.simd and not SIMD_FLAGS[args.simd] <= flags:
        runnable = next(simd for simd in SIMD_BUILDS if SIMD_FLAGS[simd] <= flags)
        raise UserError(f"--simd {args.simd}: this CPU lacks {', '.join(sorted(SIMD_FLAGS[args.simd] - flags))}, so the "
                        f"library could not run here; use --simd {runnable} (or 'compile' to build for another machine)")
    if args.command == "run" and args.plot_layer and not args.plot:
        raise UserError("--plot-layer names the layer to draw in --plot PATH: give --plot too")
    if args.command == "export-c":
        if Path(args.output).exists() and not Path(args.output).is_dir():
            raise UserError(f"-o {args.output}: exists and is not a directory; give a directory for the C project")
        outputs = [("-o", Path(args.output) / "model.c")] if Path(args.output).is_dir() else []
        if not Path(args.output).parent.is_dir():
            raise UserError(f"-o {args.output}: no such directory {Path(args.output).parent}; create it first")
    elif args.command == "compile":
        outputs = [("-o", args.output)]
    else:
        outputs = [("--keep", args.keep), ("--json", args.json), ("--plot", args.plot)]
    for option, target in outputs:
        if target is not None:
            _check_writable(option, Path(target))


def _check_writable(option: str, path: Path) -> None:
    """The file `path` can be created or replaced: its folder exists and is writable, and it is
    not a folder itself."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"{option} {path}: is a directory; give a file path")
    if not folder.is_dir():
        raise UserError(f"{option} {path}: no such directory {folder}; create it first")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{option} {path}: permission denied; choose a path you can write")


def _library_path(args) -> str | None:
    """Where the library goes: compile's -o, run's --keep, or (None) a temporary directory that is
    deleted with the compiled model."""
    return args.output if args.command == "compile" else getattr(args, "keep", None)


def _report(args, report: dict) -> dict:
    if not getattr(args, "keep", None):
        report.pop("library", None)  # deleted on exit
    return report


def _compiled(args, compile_it):
    """The compiled model (for `compile`, the library written and said so)."""
    compiled = compile_it()
    if args.command == "compile":
        print(f"wrote {compiled.library_path} ({compiled.ops_offloaded}/{compiled.ops_total} ops offloaded, "
              f"{compiled.compile_seconds:.1f} s)")
    return compiled


def _prequantized(args) -> int:
    """compile / run of a model quantized elsewhere: its own scales, no calibration."""
    path = Path(args.model)
    kind = path.suffix.lower().lstrip(".")
    default = PREQUANTIZED_FORMATS[kind]
    fmt = NumberFormat(args.activations or default.activations, args.rounding or default.rounding)
    compiled = _compiled(args, lambda: compile_prequantized(
        path, _library_path(args), int8_only=args.int8_only, simd=args.simd,
        number_format=fmt))
    if args.command == "compile":
        return 0
    if args.command == "export-c":
        return _export_c(args, compiled, sample_inputs(compiled, args.golden))
    inputs = _evaluation_inputs(args.calib, compiled) if args.calib else sample_inputs(compiled, args.num_eval or 16)
    report = {"model": args.model, "activations": fmt.activations, "rounding": fmt.rounding,
              **evaluate_prequantized(compiled, _peer(kind, path, compiled), inputs)}
    _print_report(_report(args, report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _evaluation_inputs(source: str, compiled) -> np.ndarray:
    """--calib for a model quantized elsewhere: evaluation inputs of its input shape and type
    (int8 codes for an int8 interface)."""
    shape = [int(d) for d in compiled.module["main"].params[0].ty.shape.values]
    if not Path(source).is_file():
        raise CalibrationDataError(f"no such file: {source} (a .npy file of inputs stacked on axis 0)")
    data = load_npy(source)
    if tuple(data.shape[1:]) != tuple(shape[1:]) or len(data) == 0:
        raise CalibrationDataError(f"{source} has shape {tuple(data.shape)}; the model takes samples of shape "
                                   f"{tuple(shape[1:])}, stacked on axis 0")
    if compiled.input_dtype == "int8":
        if not (np.issubdtype(data.dtype, np.integer) and data.min() >= -128 and data.max() <= 127):
            raise CalibrationDataError(f"{source}: the model's input is int8; give integer codes in [-128, 127]")
        return np.asarray(data, np.int8)
    return check_samples(np.asarray(data), shape, source)


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
