"""Where accuracy is lost: quantization error of every tensor at a composite boundary.

For each value of each region, the int8 result of the integer reference (dequantized) is
compared with the float result of the same graph on the same inputs. Errors accumulate along
the int8 path, so a drop in SQNR from one layer to the next shows the layer that loses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from . import layout, qarith, reference
from .graph import extract_graph, run_float
from .host import HostOpRunner
from .partition import REGION_PREFIX, region_functions, run_partitioned

_HISTOGRAM_SAMPLES = 1 << 17


@dataclass
class LayerError:
    region: str
    value: int
    layer: str  # "input 0" or "<index> <composite kind>"
    shape: tuple[int, ...]
    sqnr_db: float  # 10 log10(|float|^2 / |float - int8|^2)
    clip_range: tuple[float, float]  # (lo, hi): the real values int8 covers
    clipped_fraction: float  # share of float values outside it
    samples: np.ndarray = field(default=None, repr=False)  # float values, for histograms

    def to_dict(self) -> dict:
        return {
            "region": self.region,
            "value": self.value,
            "layer": self.layer,
            "shape": list(self.shape),
            "sqnr_db": round(self.sqnr_db, 2),
            "clip_range": list(self.clip_range),
            "clipped_fraction": self.clipped_fraction,
        }


def sqnr_db(signal: np.ndarray, approximation: np.ndarray) -> float:
    signal = signal.astype(np.float64)
    noise = float(np.sum((signal - approximation.astype(np.float64)) ** 2))
    power = float(np.sum(signal**2))
    if noise == 0.0:
        return float("inf")
    return 10.0 * np.log10(max(power, 1e-30) / noise)


def layer_errors(mod, inputs: np.ndarray) -> list[LayerError]:
    """Per-value quantization error of a calibrated, partitioned module on `inputs` (axis 0)."""
    regions = region_functions(mod)
    graphs = {name: extract_graph(name, f) for name, f in regions.items()}
    qgraphs = reference.quantized_regions(mod)
    float_values: dict[str, dict[int, np.ndarray]] = {}
    int8_values: dict[str, dict[int, np.ndarray]] = {}

    def run_float_region(name: str, args: list[torch.Tensor]) -> list[torch.Tensor]:
        values = run_float(graphs[name], args)
        float_values[name] = {v: x.numpy() for v, x in values.items()}
        return [values[v] for v in graphs[name].outputs]

    def run_int8_region(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
        q = qgraphs[name]
        values = reference.run_quantized_values(q, args)
        int8_values[name] = {
            v: qarith.dequantize_tensor(layout.to_logical(x), q.quants[v]) for v, x in values.items()
        }
        return [int8_values[name][v] for v in q.graph.outputs]

    x = np.asarray(inputs, np.float32)
    host = HostOpRunner()
    run_partitioned(mod, run_float_region, [torch.from_numpy(x)], host.run_torch)
    run_partitioned(mod, run_int8_region, [x], host.run)

    errors = []
    rng = np.random.default_rng(0)
    for name, graph in graphs.items():
        # Layers are named by position in their region, prefixed by the region when there are several.
        prefix = f"{name.removeprefix(REGION_PREFIX)}/" if len(graphs) > 1 else ""
        labels = {v: f"{prefix}input {i}" for i, v in enumerate(graph.inputs)}
        labels.update({n.output: f"{prefix}{i} {n.composite.split('.', 1)[1]}" for i, n in enumerate(graph.nodes)})
        for v in range(graph.num_values):
            f, q = float_values[name][v], int8_values[name][v]
            quant = qgraphs[name].quants[v]
            lo = quant.scale * (qarith.INT8_MIN - quant.zero_point)
            hi = quant.scale * (qarith.INT8_MAX - quant.zero_point)
            flat = f.ravel()
            sample = flat if flat.size <= _HISTOGRAM_SAMPLES else rng.choice(flat, _HISTOGRAM_SAMPLES, replace=False)
            errors.append(
                LayerError(
                    region=name,
                    value=v,
                    layer=labels[v],
                    shape=graph.shapes[v],
                    sqnr_db=sqnr_db(f, q),
                    clip_range=(float(lo), float(hi)),
                    clipped_fraction=float(np.mean((flat < lo) | (flat > hi))),
                    samples=sample,
                )
            )
    return errors


def plot_layer_errors(errors: list[LayerError], path: str, layer: str | None = None) -> str:
    """Per-layer SQNR bars, and the float histogram of one layer (default: the worst SQNR) with
    its clipping range drawn. Returns the layer whose histogram was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = min(errors, key=lambda e: e.sqnr_db) if layer is None else next(
        (e for e in errors if e.layer == layer or f"{e.region}:{e.layer}" == layer), None
    )
    if chosen is None:
        raise ValueError(f"no layer named {layer!r}; layers: {[e.layer for e in errors]}")
    fig, (bars, hist) = plt.subplots(2, 1, figsize=(max(8, 0.28 * len(errors)), 8))
    sqnr = [min(e.sqnr_db, 80.0) for e in errors]
    colors = ["tab:red" if e is chosen else "tab:blue" for e in errors]
    bars.bar(range(len(errors)), sqnr, color=colors)
    bars.set_xticks(range(len(errors)), [e.layer for e in errors], rotation=90, fontsize=7)
    bars.set_ylabel("SQNR int8 vs float (dB)")
    bars.set_title("Quantization error per layer (inf shown as 80 dB)")
    hist.hist(chosen.samples, bins=200, color="tab:gray", log=True)
    for edge in chosen.clip_range:
        hist.axvline(edge, color="tab:red", linestyle="--")
    hist.set_title(
        f"{chosen.layer}: clipping range [{chosen.clip_range[0]:.3g}, {chosen.clip_range[1]:.3g}], "
        f"{100 * chosen.clipped_fraction:.3f}% clipped, SQNR {chosen.sqnr_db:.1f} dB"
    )
    hist.set_xlabel("float activation value")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return chosen.layer
