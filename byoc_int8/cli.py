"""Command line: ``byoc-int8 run`` (compile + check + report) and ``byoc-int8 compile``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from .calibrate import CALIBRATORS
from .models import BUILTIN_MODELS, random_inputs
from .pipeline import compile_model, evaluate


def _load_model(args) -> tuple[torch.nn.Module | torch.export.ExportedProgram, torch.nn.Module, np.ndarray, np.ndarray]:
    """(model to compile, float model to compare with, calibration inputs, evaluation inputs)."""
    if args.model in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[args.model]
        model = spec.make()
        calib = np.load(args.calib) if args.calib else random_inputs(spec.input_shape, args.num_calib, 1234).numpy()
        evals = random_inputs(spec.input_shape, args.num_eval, 4321).numpy()
        return model, model, calib.astype(np.float32), evals
    path = Path(args.model)
    if path.suffix != ".pt2" or not path.exists():
        raise SystemExit(
            f"unknown model {args.model!r}: use one of {sorted(BUILTIN_MODELS)} or a .pt2 file from torch.export.save"
        )
    if not args.calib:
        raise SystemExit("--calib PATH.npy is required with a .pt2 model")
    program = torch.export.load(str(path))
    calib = np.load(args.calib).astype(np.float32)
    return program, program.module(), calib, calib[: args.num_eval]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="byoc-int8", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("run", "compile, run, check against float and the integer reference"), ("compile", "write the compiled library")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--model", default="resnet18", help=f"{', '.join(BUILTIN_MODELS)} or PATH.pt2")
        p.add_argument("--calib", help="calibration inputs (.npy, stacked on axis 0)")
        p.add_argument("--method", default="max", choices=sorted(CALIBRATORS))
        p.add_argument("--num-calib", type=int, default=32, help="random calibration inputs for built-in models")
        p.add_argument("--num-eval", type=int, default=8, help="evaluation inputs")
        if name == "run":
            p.add_argument("--json", help="also write the report to this path")
        else:
            p.add_argument("-o", "--output", required=True, help="path of the .so to write")
    args = parser.parse_args(argv)

    model, float_model, calib, evals = _load_model(args)
    output = args.output if args.command == "compile" else None
    compiled = compile_model(model, calib, method=args.method, output_path=output)
    if args.command == "compile":
        print(f"wrote {compiled.library_path} ({compiled.ops_offloaded}/{compiled.ops_total} ops offloaded, "
              f"{compiled.compile_seconds:.1f} s)")
        return 0
    report = {"model": args.model, "calibration": args.method, **evaluate(compiled, float_model, evals)}
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
