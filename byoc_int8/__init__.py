"""byoc-int8: PyTorch CNNs -> all-int8 programs through TVM's BYOC flow (codegen ``ccompiler``).

The one-call API is :func:`compile_model` (model + calibration data -> :class:`CompiledModel`,
one loadable ``.so``) and :func:`evaluate` (the report). The stages are importable on their own:
``frontend``, ``partition``, ``calibrate``, ``quantize``, ``reference``, ``codegen``, ``build``.
"""

import os

# A compiled library splits its convolutions, adds and max pools over TVM's thread pool, which
# sizes itself once per calling thread, on first use, from TVM_NUM_THREADS (then OMP_NUM_THREADS);
# with neither set TVM takes half of std::thread::hardware_concurrency() on x86-64 (it assumes
# hyper-threading), i.e. one thread on a 2-core machine, and pins the calling thread to those
# cores. Default to every core this process may run on instead; an explicit setting wins. It
# takes effect if no TVM pool has started yet in this process (TVM reads it when the pool starts,
# not when tvm is imported).
if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
    os.environ["TVM_NUM_THREADS"] = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                        else os.cpu_count() or 1)
# TVM pins each pool worker to a core of its own but leaves the calling thread, which runs task 0,
# free to sit on a worker's core: then that split runs two tasks on one core, at one thread's speed
# or worse (on 2 cores, SqueezeNet at 2 threads measured 0.77 ms unpinned against 1.4 ms in the
# runs where the caller shared core 1 with the worker). Let the OS place the threads unless told.
os.environ.setdefault("TVM_BIND_THREADS", "0")

from .pipeline import CompiledModel, compile_model, evaluate  # noqa: E402

__all__ = ["CompiledModel", "compile_model", "evaluate"]
