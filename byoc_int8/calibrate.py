"""Calibration: the range of every tensor that crosses a composite boundary.

The partitioned ``main`` is interpreted in float on the calibration samples: each region runs
through :func:`graph.run_float` (PyTorch kernels, batched), so no TVM float kernel is involved.
A calibrator turns the values seen at each boundary into one clipping range ``[-r, r]``; the
ranges are attached to the region functions (see :data:`quantize.RANGES_ATTR`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import tvm

from .graph import extract_graph, run_float
from .partition import region_functions, run_partitioned
from .quantize import annotate_region

# Values kept per tensor and batch for percentile calibration: enough for a 99.99th percentile.
_SAMPLE_LIMIT = 1 << 18


class Calibrator:
    """Accumulates |x| statistics of one tensor over batches; `range()` gives r."""

    def observe(self, x: torch.Tensor) -> None:
        raise NotImplementedError

    def range(self) -> float:
        raise NotImplementedError


class MaxCalibrator(Calibrator):
    """r = max |x|: nothing is clipped."""

    def __init__(self) -> None:
        self.abs_max = 0.0

    def observe(self, x: torch.Tensor) -> None:
        self.abs_max = max(self.abs_max, float(x.abs().max()))

    def range(self) -> float:
        return self.abs_max


class PercentileCalibrator(Calibrator):
    """r = the given percentile of |x|: rare outliers are clipped to spend bits on the bulk."""

    def __init__(self, percentile: float = 99.99) -> None:
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        self.percentile = percentile
        self.samples: list[np.ndarray] = []
        self.abs_max = 0.0

    def observe(self, x: torch.Tensor) -> None:
        flat = x.detach().abs().reshape(-1)
        self.abs_max = max(self.abs_max, float(flat.max()))
        step = max(1, flat.numel() // _SAMPLE_LIMIT)
        self.samples.append(flat[::step].numpy())

    def range(self) -> float:
        r = float(np.percentile(np.concatenate(self.samples), self.percentile))
        return r if r > 0 else self.abs_max


CALIBRATORS = {"max": MaxCalibrator, "percentile": PercentileCalibrator}


def make_calibrator(method: str, **options) -> Calibrator:
    if method not in CALIBRATORS:
        raise ValueError(f"unknown calibration method {method!r}; choose from {sorted(CALIBRATORS)}")
    return CALIBRATORS[method](**options)


def calibrate(
    mod: tvm.IRModule,
    samples: Iterable[np.ndarray] | np.ndarray,
    method: str = "max",
    batch_size: int = 16,
    **options,
) -> tvm.IRModule:
    """Attach calibrated ranges to every region of a partitioned module.

    `samples` holds calibration inputs stacked on axis 0 (one array), or is an iterable of such
    batches. Models with one input only.
    """
    regions = region_functions(mod)
    graphs = {name: extract_graph(name, f) for name, f in regions.items()}
    stats = {name: [make_calibrator(method, **options) for _ in range(g.num_values)] for name, g in graphs.items()}

    if isinstance(samples, np.ndarray):
        samples = [samples[i : i + batch_size] for i in range(0, len(samples), batch_size)]

    def run_region(name: str, args: list[torch.Tensor]) -> list[torch.Tensor]:
        graph = graphs[name]
        values = run_float(graph, args)
        for v, x in values.items():
            stats[name][v].observe(x)
        return [values[v] for v in graph.outputs]

    seen = 0
    for batch in samples:
        batch = np.asarray(batch, dtype=np.float32)
        if not np.isfinite(batch).all():
            raise ValueError("calibration data contains NaN or infinity")
        run_partitioned(mod, run_region, [torch.from_numpy(batch)])
        seen += len(batch)
    if seen == 0:
        raise ValueError("no calibration samples")
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)  # leave the caller's module alone
    for gv in list(mod.functions.keys()):
        if gv.name_hint in regions:
            ranges = {v: c.range() for v, c in enumerate(stats[gv.name_hint])}
            mod[gv] = annotate_region(mod[gv], ranges)
    return mod
