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

from . import qarith
from .errors import CalibrationDataError
from .graph import extract_graph, run_float
from .host import HostOpRunner
from .partition import region_functions, run_partitioned
from .qarith import DEFAULT_FORMAT, NumberFormat
from .quantize import RANGES_ATTR, annotate_region, region_format

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
    magnitudes = {name: [_Magnitudes() for _ in range(g.num_values)] for name, g in graphs.items()}

    if isinstance(samples, np.ndarray):
        samples = [samples[i : i + batch_size] for i in range(0, len(samples), batch_size)]

    def run_region(name: str, args: list[torch.Tensor]) -> list[torch.Tensor]:
        graph = graphs[name]
        values = run_float(graph, args)
        for v, x in values.items():
            stats[name][v].observe(x)
            magnitudes[name][v].observe(x)
        return [values[v] for v in graph.outputs]

    host = HostOpRunner()
    seen = 0
    total = len(samples) if hasattr(samples, "__len__") else None
    for batch in tqdm(samples, desc=f"calibrating ({method})", unit="batch", total=total, disable=not progress):
        batch = _checked_batch(batch, sample_shape, params[0].name, seen)
        run_partitioned(mod, run_region, [torch.from_numpy(batch)], host.run_torch)
        seen += len(batch)
    if seen == 0:
        raise CalibrationDataError("no calibration samples: give at least one input of the model's shape "
                                   f"{sample_shape} (stacked on axis 0)")
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)  # leave the caller's module alone
    zeroed: dict[str, dict[int, float]] = {}
    for gv in list(mod.functions.keys()):
        if gv.name_hint in regions:
            ranges = {v: c.range() for v, c in enumerate(stats[gv.name_hint])}
            mod[gv] = annotate_region(mod[gv], ranges, number_format)
            for v, (lo, hi) in ranges.items():
                step = qarith.activation_quant(lo, hi, number_format.activations, number_format.scales).scale
                share = magnitudes[gv.name_hint][v].share_below(step / 2)
                if hi - lo >= DEGENERATE_RANGE and share > ZEROED_WARNING:
                    zeroed.setdefault(gv.name_hint, {})[v] = share
    return mod.with_attr(CALIBRATION_ATTR, json.dumps({"samples": seen, "zeroed": zeroed}))


def _checked_batch(batch, sample_shape: tuple[int, ...], input_name: str, first: int) -> np.ndarray:
    """One batch of calibration samples (or one sample) as float32 (N, *sample_shape), refused
    (:class:`CalibrationDataError`) when it is not of the model's input shape or holds a value
    that is not finite; samples are counted from `first` in the messages."""
    try:
        batch = np.asarray(batch, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise CalibrationDataError(f"calibration sample {first}: not an array of numbers ({err})") from None
    if batch.ndim == len(sample_shape):
        batch = batch[None]
    if tuple(batch.shape[1:]) != sample_shape:
        raise CalibrationDataError(
            f"calibration samples of shape {tuple(batch.shape[1:])}, the model's input {input_name} takes "
            f"{sample_shape} (from sample {first} on)"
        )
    finite = np.isfinite(batch.reshape(len(batch), -1)).all(axis=1)
    if not finite.all():
        bad = int(np.argmin(finite))
        what = "NaN" if np.isnan(batch[bad]).any() else "an infinity (or a value beyond float32's range)"
        raise CalibrationDataError(f"calibration sample {first + bad} contains {what}")
    return batch


class _Magnitudes:
    """A bounded, deterministic random sample of one tensor's nonzero |x|, to tell after
    calibration how many of its values the int8 step rounds to 0."""

    PER_BATCH, LIMIT = 1 << 12, 1 << 14

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.count = 0
        self._generator = torch.Generator().manual_seed(0)

    def observe(self, x: torch.Tensor) -> None:
        if self.count >= self.LIMIT:
            return
        flat = x.detach().reshape(-1)
        if flat.numel() > self.PER_BATCH:
            flat = flat[torch.randint(0, flat.numel(), (self.PER_BATCH,), generator=self._generator)]
        flat = flat.abs()
        flat = flat[flat > 0].numpy()
        self.parts.append(flat)
        self.count += flat.size

    def share_below(self, threshold: float) -> float:
        """The share of the sampled nonzero magnitudes below `threshold` (0 with no sample)."""
        values = np.concatenate(self.parts) if self.parts else np.zeros(0)
        return float(np.mean(values < threshold)) if values.size else 0.0


# A calibrated range narrower than this gives a scale near the MIN_RANGE floor: the tensor is
# (nearly) constant on the calibration data, and int8 cannot tell its values apart.
DEGENERATE_RANGE = 1e-6
# Module attribute with what calibration saw beyond the ranges (JSON): the number of samples, and
# per region the tensors whose nonzero values mostly round to 0.
CALIBRATION_ATTR = "byoc_int8_calibration"
# Fewer calibration samples than this, and the ranges may not cover the inputs to come.
FEW_SAMPLES = 8
# Warn when more than this share of a tensor's nonzero values is below half its int8 step.
ZEROED_WARNING = 0.5
# A per-layer SQNR below this (dB) in the report: int8 noise is a third of the signal's RMS.
LOW_SQNR_DB = 10.0


def calibration_warnings(mod: tvm.IRModule) -> list[str]:
    """What in a calibrated module puts accuracy at risk, named by region and layer: tensors
    whose calibrated range is below DEGENERATE_RANGE (all zeros on the calibration data, or
    vanishing), tensors most of whose nonzero values round to 0 (a range too wide for them: a
    huge dynamic range), biases that do not fit their int32 encoding (saturated), and a
    calibration on fewer than FEW_SAMPLES inputs."""
    warnings = []
    seen = json.loads(str(mod.attrs[CALIBRATION_ATTR])) if mod.attrs is not None and CALIBRATION_ATTR in mod.attrs else {}
    if seen and seen["samples"] < FEW_SAMPLES:
        warnings.append(f"calibrated on {seen['samples']} input(s): ranges seen on so few inputs may clip others; "
                        f"calibrate on at least {FEW_SAMPLES} representative inputs")
    for name, func in region_functions(mod).items():
        if func.attrs is None or RANGES_ATTR not in func.attrs:
            continue
        graph = extract_graph(name, func)
        labels = {v: f"input {i}" for i, v in enumerate(graph.inputs)}
        labels.update({n.output: f"{i} {n.composite.split('.', 1)[1]}" for i, n in enumerate(graph.nodes)})
        ranges = json.loads(str(func.attrs[RANGES_ATTR]))
        for v, (lo, hi) in enumerate(ranges):
            if hi - lo < DEGENERATE_RANGE:
                what = "is 0 on every calibration input" if lo == hi == 0 else f"spans only [{lo:.3g}, {hi:.3g}]"
                warnings.append(f"{name}: {labels[v]} {what}: its int8 values carry no information")
        for v, share in seen.get("zeroed", {}).get(name, {}).items():
            lo, hi = ranges[int(v)]
            warnings.append(f"{name}: {labels[int(v)]}: {100 * share:.0f}% of its nonzero values round to 0 in int8 "
                            f"(range [{lo:.3g}, {hi:.3g}] is too wide for them: a huge dynamic range)")
        fmt = region_format(func)
        for i, node in enumerate(graph.nodes):
            if "weight" not in node.consts or "bias" not in node.consts:
                continue
            s_in = qarith.activation_quant(*ranges[node.inputs[0]], fmt.activations, fmt.scales).scale
            s_w = qarith.weight_scales(node.consts["weight"], fmt)
            saturated = int((np.abs(node.consts["bias"].astype(np.float64).reshape(-1)) / (s_in * s_w) > 2**30).sum())
            if saturated:
                warnings.append(f"{name}: {labels[node.output]}: the bias of {saturated} output channel(s) exceeds its "
                                f"int32 range at scale s_in * s_w (s_in = {s_in:.3g}) and is saturated")
    return warnings


def layer_warnings(layers) -> list[str]:
    """Layers (``layer_errors.LayerError``) whose int8 values are far from float: SQNR below
    LOW_SQNR_DB, except tensors already warned about as degenerate (a range below
    DEGENERATE_RANGE)."""
    return [
        f"{e.region}: {e.layer}: SQNR of int8 vs float is {e.sqnr_db:.1f} dB (below {LOW_SQNR_DB:.0f} dB): "
        "accuracy is at risk here"
        for e in layers
        if e.sqnr_db < LOW_SQNR_DB and e.clip_range[1] - e.clip_range[0] >= DEGENERATE_RANGE
    ]
