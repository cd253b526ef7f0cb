"""Graph fuzzing: random small CNNs compiled end to end, C library vs integer reference.

    python benchmarks/fuzz_graphs.py [--seed 0] [--count 200] [--int8-only | --both]
                                     [--activations symmetric] [--rounding single]

Graph ``i`` is generated from seed ``--seed + i`` by ``tests/graph_gen.py`` (reproducible: rerun
one graph with ``--seed S --count 1``). Each graph is compiled in default mode (ops the int8
kernels do not cover run on the host), or with ``--int8-only`` (only the graphs with no such op,
which must compile into one int8 region; the others are skipped), or ``--both``. One line per
graph and mode: seed, regions, host ops, bit-exact, cosine vs float (minimum over 4 held-out
inputs), number of report warnings, seconds, the ops; LOW marks a cosine below
graph_gen.LOW_COSINE with no warning to explain it (reported, not a failure). A graph fails on
any compiler or runtime error, on C != reference, and in int8-only mode on more than one region;
for each failure the script prints the graph's seed and a standalone reproduction script
(``--repro-dir DIR`` also writes them there). Exit status 1 when any graph failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from graph_gen import LOW_COSINE, Outcome, check, generate  # noqa: E402

from byoc_int8.qarith import ACTIVATIONS, DEFAULT_FORMAT, ROUNDINGS, NumberFormat  # noqa: E402


def _line(outcome: Outcome, summary: str) -> str:
    mode = "int8-only" if outcome.int8_only else "default"
    cosine = f"{outcome.cosine:.5f}" if outcome.cosine is not None else "-"
    regions = outcome.regions if outcome.regions is not None else "-"
    status = "FAIL" if not outcome.ok else "LOW" if outcome.low_cosine else "ok"
    return (f"seed {outcome.seed:>6} {mode:<9} regions {regions!s:>2} host {len(outcome.host_ops):>2} "
            f"bit_exact {outcome.bit_exact!s:<5} cosine {cosine:>8} warn {len(outcome.warnings):>2} "
            f"{outcome.seconds:5.1f}s {status:<4} | {summary}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first graph")
    parser.add_argument("--count", type=int, default=200, help="number of graphs")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--int8-only", action="store_true", help="strict mode, graphs without host ops only")
    mode.add_argument("--both", action="store_true", help="default mode, and int8-only where applicable")
    parser.add_argument("--activations", choices=ACTIVATIONS, default=DEFAULT_FORMAT.activations)
    parser.add_argument("--rounding", choices=ROUNDINGS, default=DEFAULT_FORMAT.rounding)
    parser.add_argument("--no-host-ops", action="store_true",
                        help="generate graphs without host ops (different graphs from the same seeds)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each graph's host ops and warnings")
    parser.add_argument("--repro-dir", type=Path, help="write each failing graph's reproduction script here")
    args = parser.parse_args(argv)
    fmt = NumberFormat(args.activations, args.rounding)
    modes = [False, True] if args.both else [args.int8_only]
    print(f"graph fuzzing: seeds {args.seed}..{args.seed + args.count - 1}, format {fmt}, "
          f"modes {', '.join('int8-only' if m else 'default' for m in modes)}", flush=True)

    outcomes: list[Outcome] = []
    skipped = 0
    failures: list[tuple[Outcome, object]] = []
    for seed in range(args.seed, args.seed + args.count):
        spec = generate(seed, allow_host=not args.no_host_ops)
        for int8_only in modes:
            if int8_only and not spec.int8:
                skipped += 1
                continue
            outcome = check(spec, int8_only=int8_only, number_format=fmt)
            outcomes.append(outcome)
            print(_line(outcome, spec.summary()), flush=True)
            for problem in outcome.problems:
                print(f"    problem: {problem}", flush=True)
            if args.verbose:
                for line in outcome.host_ops:
                    print(f"    on the host: {line}")
                for line in outcome.warnings:
                    print(f"    warning: {line}")
            if not outcome.ok:
                failures.append((outcome, spec))

    print()
    for outcome, spec in failures:
        repro = spec.repro(outcome.int8_only, fmt.activations, fmt.rounding)
        print(f"==== FAILED: graph seed {spec.seed} ({'int8-only' if outcome.int8_only else 'default'}, {fmt}): "
              f"{'; '.join(outcome.problems)}")
        print(f"rebuild it:  from graph_gen import generate; graph = generate({spec.seed}"
              f"{', allow_host=False' if args.no_host_ops else ''}); model = graph.build()   # tests/ on sys.path")
        if outcome.traceback:
            print(outcome.traceback.rstrip())
        print("---- reproduction script ----")
        print(repro)
        if args.repro_dir:
            args.repro_dir.mkdir(parents=True, exist_ok=True)
            (args.repro_dir / f"fuzz_graph_{spec.seed}.py").write_text(repro)

    compiled = [o for o in outcomes if o.cosine is not None]
    cosines = np.array([o.cosine for o in compiled]) if compiled else np.zeros(0)
    print(f"summary: {len(outcomes)} compiles of {args.count} graphs ({fmt}), {len(outcomes) - len(failures)} passed, "
          f"{len(failures)} failed, {skipped} skipped in int8-only mode (host ops)")
    for int8_only in modes:
        group = [o for o in outcomes if o.int8_only == int8_only]
        if group:
            name = "int8-only" if int8_only else "default"
            with_host = sum(1 for o in group if o.host_ops)
            regions = [o.regions for o in group if o.regions is not None]
            print(f"  {name}: {len(group)} compiled, {sum(o.ok for o in group)} passed, "
                  f"{sum(bool(o.bit_exact) for o in group)} bit-exact, {with_host} with host ops, "
                  f"max regions {max(regions, default=0)}")
    if len(cosines):
        print(f"  cosine vs float: min {cosines.min():.5f}, median {np.median(cosines):.5f}, "
              f"< 0.99: {int((cosines < 0.99).sum())}, < 0.999: {int((cosines < 0.999).sum())}")
        low = sorted({o.seed for o in outcomes if o.low_cosine})
        warned = sorted({o.seed for o in compiled if o.cosine < 0.99 and o.warnings})
        print(f"  cosine < {LOW_COSINE} without a warning (LOW): {len(low)} graph(s) {low}; "
              f"cosine < 0.99 with warnings (degenerate tensors, saturated biases): {warned}")
        print(f"  seconds per compile: median {np.median([o.seconds for o in outcomes]):.1f}, "
              f"total {sum(o.seconds for o in outcomes):.0f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
