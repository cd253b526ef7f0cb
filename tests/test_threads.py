"""Threads by default: with TVM_NUM_THREADS (and OMP_NUM_THREADS) unset, a compiled library uses
every core the process may run on, from the API and from the CLI.

TVM sizes its thread pool once per process thread, when the pool first starts, from
TVM_NUM_THREADS; unset, it takes half of hardware_concurrency on x86-64 (one thread on a 2-core
machine). ``byoc_int8/__init__.py`` sets the default; these tests run in a child process whose
environment lacks both variables (the suite itself runs with TVM_NUM_THREADS=2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CORES = len(os.sched_getaffinity(0))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "TVM_BIND_THREADS")}
    # Workers that find no task go to sleep at once instead of spinning, so a worker's CPU time
    # below is time spent on the library's tasks.
    env["TVM_THREAD_POOL_SPIN_COUNT"] = "0"
    return env


API_SCRIPT = r"""
import ctypes, json, os, threading
import numpy as np, torch, tvm
from torch import nn
import byoc_int8
from byoc_int8.pipeline import compile_model, evaluate

torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Conv2d(64, 64, 3, padding=1), nn.ReLU())]).eval()
x = np.random.default_rng(0).standard_normal((4, 64, 56, 56)).astype(np.float32)
compiled = compile_model(model, x)
threads_before_pool = set(os.listdir("/proc/self/task"))  # TVM's pool starts at the first run
report = evaluate(compiled, model, x[:1], latency_runs=1, layers=[])

def cpu_ticks():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks[int(tid)] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks

# The library's own parallel split: CPU time of TVM's workers (the threads its first run
# started) while it runs.
workers = [int(t) for t in set(os.listdir("/proc/self/task")) - threads_before_pool]
before = cpu_ticks()
for _ in range(300):
    compiled.run(x[:1])
after = cpu_ticks()
main = threading.get_native_id()

# The pool the library calls into (TVMBackendParallelLaunch, num_task 0 = every thread).
class Env(ctypes.Structure):
    _fields_ = [("sync_handle", ctypes.c_void_p), ("num_task", ctypes.c_int32)]

seen = []
LAMBDA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(Env), ctypes.c_void_p)
def task(task_id, env, cdata):
    seen.append((task_id, env.contents.num_task, threading.get_native_id()))
    return 0
callback = LAMBDA(task)
runtime = ctypes.CDLL(os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime.so"))
assert runtime.TVMBackendParallelLaunch(callback, None, 0) == 0

def allowed(tid):
    status = open(f"/proc/self/task/{tid}/status").read()
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))

print("RESULT " + json.dumps({
    "env": os.environ["TVM_NUM_THREADS"], "threads": report["threads"],
    "masks": sorted({allowed(t) for t in workers} | {allowed(main)}), "bind": os.environ["TVM_BIND_THREADS"],
    "main_ticks": after[main] - before[main], "worker_ticks": [after[t] - before[t] for t in workers],
    "tasks": sorted(t for t, _, _ in seen), "num_task": sorted({n for _, n, _ in seen}),
    "task_threads": len({tid for _, _, tid in seen}),
}))
"""


def _result(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])


def test_api_uses_every_core_by_default():
    proc = subprocess.run([sys.executable, "-c", API_SCRIPT], env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = _result(proc.stdout)
    assert result["env"] == str(CORES)
    assert result["threads"] == CORES  # the report's "threads": TVM's runtime.NumThreads
    assert result["tasks"] == list(range(CORES)) and result["num_task"] == [CORES]
    assert result["task_threads"] == CORES  # each task on its own thread
    # TVM's workers (the main thread runs task 0) each did a real share of the library's work:
    # clock ticks of 10 ms; an even split gives each about as much as the main thread.
    assert len(result["worker_ticks"]) == CORES - 1, result
    # Not pinned (TVM_BIND_THREADS=0): TVM would pin each worker to a core and leave the calling
    # thread free to share it. Workers and caller may all run on every allowed CPU.
    assert result["bind"] == "0" and len(result["masks"]) == 1, result
    assert all(ticks >= max(3, result["main_ticks"] // 4) for ticks in result["worker_ticks"]), result


def test_explicit_setting_wins():
    script = ("import os, tvm, byoc_int8; print('RESULT', os.environ['TVM_NUM_THREADS'], "
              "tvm.get_global_func('runtime.NumThreads')(), os.environ['TVM_BIND_THREADS'])")
    proc = subprocess.run([sys.executable, "-c", script], env=_env() | {"TVM_NUM_THREADS": "1", "TVM_BIND_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split("RESULT", 1)[1].split() == ["1", "1", "1"]


def test_cli_reports_every_core_by_default():
    proc = subprocess.run([sys.executable, "-m", "byoc_int8", "run", "--model", "resnet18_stem", "--num-calib", "2",
                           "--num-eval", "1"], env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line.split() for line in proc.stdout.splitlines() if line.startswith("threads ")]
    assert lines == [["threads", str(CORES)]], proc.stdout

