"""How values are laid out in the accelerator's memory.

A 4-D value (logically NCHW, as PyTorch and Relax see it) is stored NHWC; every other value is
stored in its logical row-major order. Layout-changing ops (transpose, reshape, concat, pad)
are rewritten here into operations on the stored order, shared by the reference and the C
emitter.
"""

from __future__ import annotations

import numpy as np

NHWC_FROM_NCHW = (0, 2, 3, 1)


def storage_perm(rank: int) -> tuple[int, ...]:
    """Storage axis j holds logical axis storage_perm(rank)[j]."""
    return NHWC_FROM_NCHW if rank == 4 else tuple(range(rank))


def storage_shape(logical: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(logical[a] for a in storage_perm(len(logical)))


def storage_axis(logical_axis: int, rank: int) -> int:
    return storage_perm(rank).index(logical_axis % rank)


def to_storage(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(storage_perm(x.ndim)))


def to_logical(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(np.argsort(storage_perm(x.ndim))))


def is_noop_permutation(shape: tuple[int, ...], perm: tuple[int, ...]) -> bool:
    """True when transposing `shape` by `perm` leaves the bytes in place (size-1 axes aside)."""
    moved = [a for a in perm if shape[a] != 1]
    return moved == sorted(moved)


def storage_transpose(in_logical: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation of stored axes that performs the logical transpose `axes`."""
    rank = len(in_logical)
    s = storage_perm(rank)
    s_inv = np.argsort(s)
    return tuple(int(s_inv[axes[s[j]]]) for j in range(rank))


def storage_pads(logical_pads: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Per-axis (before, after) padding in stored axis order."""
    return [logical_pads[a] for a in storage_perm(len(logical_pads))]
