"""Golden vectors for bring-up: every kernel call of a region, as the integer reference runs it.

For one input, a directory gets, per kernel call in call order: its int8 input(s) and output
(``.npy``, storage order NHWC, as the kernels see them), its parameters (``.npz``: weights,
biases, multipliers, shifts, tables and scalars) and the output again as raw bytes
(``layerNNNN.bin``, what ``test_model --layers DIR`` of the standalone export reads); and a
``manifest.json`` listing the calls with their op, composite, shapes and files. A vendor runs
one layer on the chip, compares bytes, and finds the first that differs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from . import reference
from .quantize import QGraph


def _arrays(params: dict) -> tuple[dict[str, np.ndarray], dict]:
    """A node's parameters split into numeric arrays (for the .npz) and JSON values."""
    arrays, scalars = {}, {}
    for key, value in params.items():
        if dataclasses.is_dataclass(value):  # qarith.FixedPoint, AddRescale
            scalars[key] = dataclasses.asdict(value)
            continue
        if isinstance(value, (list, tuple, np.ndarray)):
            try:
                array = np.asarray(value)
            except ValueError:  # ragged: keep it readable in the manifest instead
                array = None
            if array is not None and array.dtype != object:
                arrays[key] = array
                continue
        scalars[key] = value.item() if isinstance(value, np.generic) else (
            repr(value) if isinstance(value, (list, tuple, np.ndarray)) else value)
    return arrays, scalars


def write_layer_vectors(symbol: str, qgraph: QGraph, x: np.ndarray, directory: str | os.PathLike) -> Path:
    """Write the golden vectors of region `symbol` for input `x` (one sample, the region's input
    as the library takes it) into `directory`; returns the manifest's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    values = reference.run_quantized_values(qgraph, [x])
    g = qgraph.graph
    calls = []
    for index, q in enumerate(qgraph.nodes):
        stem = f"layer{index:04d}"
        inputs = []
        for k, v in enumerate(q.node.inputs):
            np.save(directory / f"{stem}_in{k}.npy", values[v])
            inputs.append({"file": f"{stem}_in{k}.npy", "shape": list(values[v].shape)})
        out = values[q.node.output]
        np.save(directory / f"{stem}_out.npy", out)
        (directory / f"{stem}.bin").write_bytes(np.ascontiguousarray(out, np.int8).tobytes())
        arrays, scalars = _arrays(q.params)
        np.savez(directory / f"{stem}_params.npz", **arrays)
        calls.append({
            "index": index, "op": q.op, "composite": q.node.composite, "inputs": inputs,
            "output": {"file": f"{stem}_out.npy", "raw": f"{stem}.bin", "shape": list(out.shape)},
            "params": {"file": f"{stem}_params.npz", "arrays": sorted(arrays), "scalars": scalars},
        })
    manifest = {
        "region": symbol, "number_format": qgraph.format.to_json(), "layout": "NHWC (storage order)",
        "input_quantization": [{"scale": qgraph.quants[v].scale, "zero_point": qgraph.quants[v].zero_point} for v in g.inputs],
        "calls": calls,
    }
    path = directory / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1, default=str))
    return path
