"""Memory planning: where every int8 tensor of a region lives in its one arena.

The arena is what an engine's on-chip memory holds while the region runs: every int8 value,
placed first-fit and reused after its last use, then the scratch that one kernel at a time
needs. The code generator lays a region out with :func:`plan_arena`; the partitioner uses the same
function to split a region whose arena would exceed a profile's ``memory_bytes`` into regions
that fit, so the number it checks is the number the generated C allocates.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

ALIGN = 64  # every tensor starts on a cache line (and a vector load never straddles two values)


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@dataclass
class MemoryPlan:
    offsets: dict[Hashable, int]  # value -> byte offset in the arena
    scratch_offset: int
    size: int


def plan_arena(
    steps: Sequence[tuple[Sequence[Hashable], Hashable]],
    sizes: Mapping[Hashable, int],
    inputs: Sequence[Hashable],
    outputs: Sequence[Hashable],
    alias: Mapping[Hashable, Hashable] | None = None,
    scratch_bytes: int = 0,
) -> MemoryPlan:
    """First-fit placement of every value, reusing space after a value's last use.

    `steps`: (input values, output value) per kernel call, in run order; `sizes`: bytes of each
    value; `inputs` are in the arena before the first step and `outputs` stay to the end.
    `alias`: a value that shares its input's bytes (a reshape that moves none) -> that input.
    """
    alias = dict(alias or {})

    def root(v: Hashable) -> Hashable:
        while v in alias:
            v = alias[v]
        return v

    last_use: dict[Hashable, int] = {root(v): -1 for v in inputs}
    for step, (args, out) in enumerate(steps):
        for v in [*args, out]:
            last_use[root(v)] = max(last_use.get(root(v), -1), step)
    for v in outputs:
        last_use[root(v)] = len(steps)

    live: list[tuple[int, int, Hashable]] = []  # (offset, size, value)
    offsets: dict[Hashable, int] = {}
    top = 0

    def place(v: Hashable, step: int) -> None:
        nonlocal top
        live[:] = [entry for entry in live if last_use[entry[2]] >= step]
        size = aligned(sizes[v])
        cursor = 0
        for offset, length, _ in sorted(live, key=lambda entry: entry[:2]):
            if offset - cursor >= size:
                break
            cursor = max(cursor, offset + length)
        offsets[v] = cursor
        live.append((cursor, size, v))
        top = max(top, cursor + size)

    for v in inputs:
        place(v, 0)
    for step, (_, out) in enumerate(steps):
        if out not in alias:
            place(out, step)
    for v in alias:
        offsets[v] = offsets[root(v)]
    return MemoryPlan(offsets, top, top + aligned(scratch_bytes))
