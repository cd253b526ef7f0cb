"""Accelerator profiles: what the int8 engine can do, read by every stage.

A profile names the composites the engine has (``ops``), the numbers it computes in (a
:class:`~byoc_int8.qarith.NumberFormat`: activations, rounding, per-channel or per-tensor weights,
any or power-of-two scales) and its limits (largest channel count, kernel size and stride, and
on-chip memory). The partitioner refuses, with a reason naming the profile key, any composite
the profile rules out; those ops run on the host by default and are listed by ``--int8-only``.
With ``memory_bytes`` it also splits regions so that each one's arena fits (``memory.py``).

Built-ins: ``x86-sim`` (the default: everything the x86 kernels do), ``tflite-int8`` (TFLite's
int8 specification) and ``pow2-npu`` (the simplest NPUs: power-of-two scales, per-tensor weights,
convolution / dense / max pool / add / relu only, 256 KiB of memory). A user profile is a TOML
file::

    name = "my-npu"
    ops = ["conv2d", "dense", "max_pool2d", "add", "relu"]

    [numbers]
    activations = "symmetric"      # or "asymmetric"
    rounding = "single"            # "tflite", "single-away"
    weights = "per-tensor"         # or "per-channel"
    scales = "power-of-two"        # or "any"
    weight_bits = 8                # or 7

    [limits]                       # each optional
    max_channels = 1024
    max_kernel = 7
    max_stride = 2
    memory_bytes = 262144
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from . import memory
from .qarith import NumberFormat

# The op families a composite can need. A fused activation adds its own: conv2d + relu.
OPS = ("conv2d", "dense", "add", "mul", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "relu", "clip", "lut",
       "concat", "reshape", "transpose", "pad", "slice")
LIMITS = ("max_channels", "max_kernel", "max_stride", "memory_bytes")


@dataclass(frozen=True)
class Profile:
    name: str
    ops: frozenset[str] = frozenset(OPS)
    number_format: NumberFormat = NumberFormat()
    limits: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.ops) - set(OPS)
        if unknown:
            raise ValueError(f"profile {self.name}: unknown ops {sorted(unknown)}; known: {', '.join(OPS)}")
        bad = {k: v for k, v in self.limits.items() if k not in LIMITS or not isinstance(v, int) or v <= 0}
        if bad:
            raise ValueError(f"profile {self.name}: bad limits {bad}; known: {', '.join(LIMITS)} (positive integers)")

    def __hash__(self) -> int:
        return hash((self.name, self.ops, self.number_format, tuple(sorted(self.limits.items()))))


BUILTIN_PROFILES: dict[str, Profile] = {
    "x86-sim": Profile("x86-sim"),
    "tflite-int8": Profile("tflite-int8", number_format=NumberFormat("asymmetric", "tflite", "per-channel", "any")),
    "pow2-npu": Profile(
        "pow2-npu",
        ops=frozenset({"conv2d", "dense", "max_pool2d", "add", "relu"}),
        number_format=NumberFormat("symmetric", "single", "per-tensor", "power-of-two"),
        limits={"memory_bytes": 256 * 1024},
    ),
}
DEFAULT_PROFILE = BUILTIN_PROFILES["x86-sim"]


def load_profile(name_or_path: str | os.PathLike | Profile | None) -> Profile:
    """A built-in profile by name, a user profile from a TOML file, or the default."""
    if name_or_path is None:
        return DEFAULT_PROFILE
    if isinstance(name_or_path, Profile):
        return name_or_path
    if str(name_or_path) in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[str(name_or_path)]
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"unknown profile {str(name_or_path)!r}: use one of {', '.join(BUILTIN_PROFILES)} or a .toml file")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"profile {path}: not valid TOML ({err})") from None
    unknown = set(data) - {"name", "ops", "numbers", "limits"}
    if unknown:
        raise ValueError(f"profile {path}: unknown keys {sorted(unknown)} (name, ops, numbers, limits)")
    numbers = data.get("numbers", {})
    try:
        fmt = NumberFormat(**numbers)
    except TypeError:
        raise ValueError(f"profile {path}: [numbers] takes activations, rounding, weights, scales, weight_bits; got {sorted(numbers)}") from None
    return Profile(str(data.get("name", path.stem)), frozenset(data.get("ops", OPS)), fmt, dict(data.get("limits", {})))


# ---- What a composite needs ---------------------------------------------------------------------

_BASES = ("global_avg_pool2d", "adaptive_avg_pool2d", "max_pool2d", "avg_pool2d", "conv2d", "dense", "add", "mul",
          "relu", "clip", "reshape", "transpose", "pad", "slice", "concat", "mean", "lut", "layer_norm")


def composite_ops(kind: str) -> set[str]:
    """The op families a ``ccompiler.<kind>`` composite needs; none for the model's own float <->
    int8 boundary conversions."""
    kind = kind.removeprefix("qdq_").removesuffix("_int8")
    if kind in ("quantize", "dequantize"):
        return set()
    base = next((b for b in _BASES if kind.startswith(b)), kind)
    needs = {{"mean": "global_avg_pool2d", "adaptive_avg_pool2d": "avg_pool2d"}.get(base, base)}
    needs |= {act for act in ("relu", "clip") if kind.endswith("_" + act)}
    return needs


def composite_problem(profile: Profile, kind: str, conv_or_pool=None, arena_bytes: int = 0) -> str | None:
    """Why `profile` rules a composite out, naming the profile key, or None. `conv_or_pool`:
    (channels, kernel (h, w), strides (h, w)) of a convolution, dense layer or pool;
    `arena_bytes`: what it needs in the arena alone (its int8 inputs, output and scratch)."""
    missing = sorted(composite_ops(kind) - profile.ops)
    if missing:
        return f"profile {profile.name}: ops has no {', '.join(repr(m) for m in missing)}"
    limits = profile.limits
    if conv_or_pool is not None:
        channels, kernel, strides = conv_or_pool
        if "max_channels" in limits and channels > limits["max_channels"]:
            return f"profile {profile.name}: limits.max_channels is {limits['max_channels']}, this {kind} has {channels} channels"
        if "max_kernel" in limits and max(kernel) > limits["max_kernel"]:
            return f"profile {profile.name}: limits.max_kernel is {limits['max_kernel']}, this {kind} has a {kernel[0]}x{kernel[1]} kernel"
        if "max_stride" in limits and max(strides) > limits["max_stride"]:
            return f"profile {profile.name}: limits.max_stride is {limits['max_stride']}, this {kind} has stride {max(strides)}"
    if "memory_bytes" in limits and arena_bytes > limits["memory_bytes"]:
        return (f"profile {profile.name}: limits.memory_bytes is {limits['memory_bytes']}, this {kind} alone needs "
                f"{arena_bytes} bytes (its int8 inputs and output, and scratch)")
    return None


def arena_bytes(shapes: list[tuple[int, ...]], scratch: int = 0) -> int:
    """The arena of one op alone (memory.plan_arena): its int8 inputs and output, each aligned,
    and its scratch."""
    return sum(memory.aligned(math.prod(s)) for s in shapes) + memory.aligned(scratch)
