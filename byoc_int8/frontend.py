"""Frontend: a PyTorch model -> a Relax IRModule ready for partitioning.

Capture goes through ``torch.export``; batch norm is folded into the preceding convolution and
constants are folded, so the partitioner sees conv2d + add(bias) chains.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program


class ModelImportError(RuntimeError):
    """The model could not be captured or translated."""


def export_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor]) -> torch.export.ExportedProgram:
    if isinstance(model, torch.export.ExportedProgram):
        return model
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module or ExportedProgram, got {type(model).__name__}")
    model = model.eval()
    try:
        return torch.export.export(model, tuple(example_inputs))
    except Exception as err:  # torch raises many kinds; all mean "cannot capture"
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelImportError(
            f"torch.export could not capture {type(model).__name__}: {first_line}"
        ) from err


def to_relax(program: torch.export.ExportedProgram) -> tvm.IRModule:
    try:
        mod = from_exported_program(program)
    except Exception as err:
        raise ModelImportError(f"TVM's PyTorch frontend could not translate the program: {err}") from err
    return tvm.transform.Sequential(
        [
            relax.transform.FoldBatchnormToConv2D(),
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)


def import_model(model: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Sequence[torch.Tensor] = ()) -> tvm.IRModule:
    """torch model (or exported program) -> Relax IRModule with batch norm and constants folded."""
    return to_relax(export_model(model, example_inputs))
