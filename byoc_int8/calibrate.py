"""Calibration: the range of every tensor that crosses a composite boundary.

The partitioned ``main`` is interpreted in float on the calibration samples: each region runs
through :func:`graph.run_float` (PyTorch kernels, batched), so no TVM float kernel is involved.
A calibrator turns the values seen at each boundary into a clipping threshold ``r`` on ``|x|``;
the tensor's range is the observed ``[min, max]`` clipped to ``[-r, r]`` (so a tensor behind a
relu gets ``[0, r]``, which asymmetric activations spend all 256 codes on). The ranges and the
number format are attached to the region functions (see :data:`quantize.RANGES_ATTR`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import torch
import tvm
from tqdm import tqdm

from .graph import extract_graph, run_float
from .host import HostOpRunner
from .partition import region_functions, run_partitioned
from .qarith import DEFAULT_FORMAT, NumberFormat
from .quantize import RANGES_ATTR, annotate_region

# Values sampled per tensor and batch for the distribution-based calibrators: enough for a
# 99.99th percentile or a 2048-bin histogram.
_SAMPLE_LIMIT = 1 << 16


class Calibrator:
    """Accumulates statistics of one tensor over batches; `range()` gives its (lo, hi)."""

    def __init__(self) -> None:
        self.lo, self.hi = 0.0, 0.0  # observed extremes (0 is always in the range)

    def observe(self, x: torch.Tensor) -> None:
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))

    @property
    def abs_max(self) -> float:
        return max(-self.lo, self.hi)

    def threshold(self) -> float:
        """r: values beyond [-r, r] are clipped."""
        raise NotImplementedError

    def range(self) -> tuple[float, float]:
        r = self.threshold()
        return max(self.lo, -r), min(self.hi, r)


class MaxCalibrator(Calibrator):
    """r = max |x|: nothing is clipped."""

    def threshold(self) -> float:
        return self.abs_max


class _SampledCalibrator(Calibrator):
    """Keeps the exact extremes and a uniform random sample of |x| from every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[np.ndarray] = []
        self._generator = torch.Generator().manual_seed(0)

    def observe(self, x: torch.Tensor) -> None:
        super().observe(x)
        flat = x.detach().abs().reshape(-1)
        if flat.numel() > _SAMPLE_LIMIT:
            flat = flat[torch.randint(0, flat.numel(), (_SAMPLE_LIMIT,), generator=self._generator)]
        self.samples.append(flat.numpy())

    def threshold(self) -> float:
        if self.abs_max == 0.0:
            return 0.0
        return min(self.abs_max, self.choose(np.concatenate(self.samples)))

    def choose(self, abs_values: np.ndarray) -> float:
        raise NotImplementedError


class PercentileCalibrator(_SampledCalibrator):
    """r = the given percentile of |x|: rare outliers are clipped to spend bits on the bulk."""

    def __init__(self, percentile: float = 99.99) -> None:
        super().__init__()
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        self.percentile = percentile

    def choose(self, abs_values: np.ndarray) -> float:
        r = float(np.percentile(abs_values, self.percentile))
        return r if r > 0 else self.abs_max


class EntropyCalibrator(_SampledCalibrator):
    """TensorRT's entropy calibration: r minimises KL(P || Q) between the histogram of |x| clipped
    at r (outliers folded into the last bin) and the same histogram quantized to 128 levels."""

    def __init__(self, bins: int = 2048, levels: int = 128) -> None:
        super().__init__()
        self.bins, self.levels = bins, levels

    def choose(self, abs_values: np.ndarray) -> float:
        hist, edges = np.histogram(abs_values, bins=self.bins, range=(0.0, self.abs_max))
        hist = hist.astype(np.float64)
        # The spike of exact zeros a ReLU leaves in bin 0 would dominate both distributions and
        # push r down; like NVIDIA's calibrator, give bin 0 its neighbour's count instead.
        hist[0] = hist[1]
        best_kl, best_i = np.inf, self.bins
        for i in range(self.levels, self.bins + 1, 8):
            p = hist[:i].copy()
            p[-1] += hist[i:].sum()
            # Q: merge the i bins into `levels` groups, spread each group's mass evenly over its
            # non-empty bins, as int8 quantization with range edges[i] would.
            groups = np.minimum(np.arange(i) * self.levels // i, self.levels - 1)
            nonzero = hist[:i] > 0
            mass = np.bincount(groups, weights=hist[:i], minlength=self.levels)
            count = np.bincount(groups, weights=nonzero, minlength=self.levels)
            q = np.where(nonzero, mass[groups] / np.maximum(count[groups], 1), 0.0)
            kl = _kl_divergence(p, q)
            if kl < best_kl:
                best_kl, best_i = kl, i
        return float(edges[best_i])


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    if q.sum() == 0:
        return float("inf")
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    # Bins where P has mass but Q has none get a tiny Q (TensorRT smooths the same way).
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


class MSECalibrator(_SampledCalibrator):
    """r minimises the mean squared error of int8 quantization of the sampled values."""

    def __init__(self, candidates: int = 100) -> None:
        super().__init__()
        self.candidates = candidates

    def choose(self, abs_values: np.ndarray) -> float:
        best_err, best_r = np.inf, self.abs_max
        for r in np.linspace(self.abs_max / self.candidates, self.abs_max, self.candidates):
            scale = r / 127.0
            q = np.minimum(np.rint(abs_values / scale), 127.0) * scale
            err = float(np.mean((abs_values - q) ** 2))
            if err < best_err:
                best_err, best_r = err, float(r)
        return best_r


CALIBRATORS = {
    "max": MaxCalibrator,
    "percentile": PercentileCalibrator,
    "entropy": EntropyCalibrator,
    "mse": MSECalibrator,
}


def make_calibrator(method: str, **options) -> Calibrator:
    if method not in CALIBRATORS:
        raise ValueError(f"unknown calibration method {method!r}; choose from {sorted(CALIBRATORS)}")
    return CALIBRATORS[method](**options)


def calibrate(
    mod: tvm.IRModule,
    samples: Iterable[np.ndarray] | np.ndarray,
    method: str = "max",
    batch_size: int = 16,
    progress: bool = False,
    number_format: NumberFormat = DEFAULT_FORMAT,
    **options,
) -> tvm.IRModule:
    """Attach calibrated ranges and the number format to every region of a partitioned module.

    `samples` holds calibration inputs stacked on axis 0 (one array), or is an iterable of
    batches or of single samples. Models with one input only. `options` go to the calibrator
    (e.g. ``percentile=99.9``).
    """
    params = mod["main"].params
    if len(params) != 1:
        raise ValueError(f"calibration feeds one input; main takes {len(params)}")
    sample_shape = tuple(int(d) for d in params[0].ty.shape.values)[1:]
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

    host = HostOpRunner()
    seen = 0
    total = len(samples) if hasattr(samples, "__len__") else None
    for batch in tqdm(samples, desc=f"calibrating ({method})", unit="batch", total=total, disable=not progress):
        batch = np.asarray(batch, dtype=np.float32)
        if batch.ndim == len(sample_shape):
            batch = batch[None]
        if tuple(batch.shape[1:]) != sample_shape:
            raise ValueError(
                f"calibration samples of shape {tuple(batch.shape[1:])}, the model's input "
                f"{params[0].name} takes {sample_shape}"
            )
        if not np.isfinite(batch).all():
            raise ValueError("calibration data contains NaN or infinity")
        run_partitioned(mod, run_region, [torch.from_numpy(batch)], host.run_torch)
        seen += len(batch)
    if seen == 0:
        raise ValueError("no calibration samples")
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)  # leave the caller's module alone
    for gv in list(mod.functions.keys()):
        if gv.name_hint in regions:
            ranges = {v: c.range() for v, c in enumerate(stats[gv.name_hint])}
            mod[gv] = annotate_region(mod[gv], ranges, number_format)
    return mod


# A calibrated range narrower than this gives a scale near the MIN_RANGE floor: the tensor is
# (nearly) constant on the calibration data, and int8 cannot tell its values apart.
DEGENERATE_RANGE = 1e-6


def calibration_warnings(mod: tvm.IRModule) -> list[str]:
    """What in a calibrated module puts accuracy at risk: tensors whose calibrated range is below
    DEGENERATE_RANGE (all zeros on the calibration data, or vanishing), named by region and
    layer."""
    warnings = []
    for name, func in region_functions(mod).items():
        if func.attrs is None or RANGES_ATTR not in func.attrs:
            continue
        graph = extract_graph(name, func)
        labels = {v: f"input {i}" for i, v in enumerate(graph.inputs)}
        labels.update({n.output: f"{i} {n.composite.split('.', 1)[1]}" for i, n in enumerate(graph.nodes)})
        for v, (lo, hi) in enumerate(json.loads(str(func.attrs[RANGES_ATTR]))):
            if hi - lo < DEGENERATE_RANGE:
                what = "is 0 on every calibration input" if lo == hi == 0 else f"spans only [{lo:.3g}, {hi:.3g}]"
                warnings.append(f"{name}: {labels[v]} {what}: its int8 values carry no information")
    return warnings
