"""The SIMD paths of the kernels that end-to-end speed work added (issue 11), bit for bit against
the integer reference in every kernel build: long rows, every vector width with its tails, and
each regime of the requantization (identity copy, shifts right, left shifts) that picks a path.
The fuzzer's sample (tests/test_kernel_fuzz.py) covers them too, on smaller shapes."""

import numpy as np
import pytest

import kernel_calls


def assert_matches(kernels, kernel: str, case: dict) -> None:
    problem = kernel_calls.check(kernels, kernel, case)
    assert problem is None, f"{kernels.variant}-{kernels.rounding} {kernel}: {problem}"


def multipliers(rng, count: int) -> np.ndarray:
    return rng.integers(1 << 30, 1 << 31, count).astype(np.int32)


# (shift regime, zero points equal to the output's) per concat input.
CONCAT_REGIMES = ["identity", "identity-offset", "right", "far-right", "left", "far-left"]


@pytest.mark.parametrize("regime", CONCAT_REGIMES)
@pytest.mark.parametrize("inner", [1, 7, 8, 15, 16, 17, 64, 100])
def test_concat_rows(kernels, regime, inner):
    rng = np.random.default_rng([inner, CONCAT_REGIMES.index(regime)])
    count, outer = 3, 5
    output_zero_point = int(rng.integers(-128, 128))
    multiplier = multipliers(rng, count)
    shift = rng.integers(-3, 1, count).astype(np.int32)
    zero_points = rng.integers(-128, 128, count).astype(np.int32)
    if regime.startswith("identity"):
        multiplier[1], shift[1] = 1 << 30, 1
        zero_points[1] = output_zero_point if regime == "identity" else output_zero_point - 3
    elif regime == "far-right":
        shift[:] = rng.integers(-31, -20, count)
    elif regime == "left":
        shift[:] = rng.integers(1, 4, count)
    elif regime == "far-left":
        shift[:] = [22, 23, 30]
    inputs = [rng.integers(-128, 128, (outer, inner + k), dtype=np.int8) for k in range(count)]
    assert_matches(kernels, "concat", {"inputs": inputs, "outer": outer, "multiplier": multiplier, "shift": shift,
                                       "zero_points": zero_points, "output_zero_point": output_zero_point})
