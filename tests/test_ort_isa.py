"""benchmarks/ort_isa.py: ONNX Runtime imported with AVX-512 and VNNI hidden runs its AVX2 int8
kernels, whose vpmaddubsw pairs saturate at int16; with AVX-512 hidden and AVX-VNNI kept, its
AVX-VNNI kernels; with VNNI alone hidden, kernels that saturate too (its AVX-512 ones); unpatched,
it runs the CPU's best kernels. The CPUID answers of each mode are checked bit by bit.

The probe is an int8 MatMulInteger whose every product is 255 x -128: an exact kernel sums them
(VNNI's vpdpbusd widens each product to 32 bits), the AVX2 one clamps each pair to -32768."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from byoc_int8.codegen.emit_c import cpu_flags

ROOT = Path(__file__).resolve().parents[1]
DEPTH = 64

PROBE = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import numpy as np
if sys.argv[1] != "native":
    import ort_isa
    hidden = ort_isa.import_onnxruntime_as(sys.argv[1])
import onnxruntime as ort
from onnx import TensorProto, helper

weights = helper.make_tensor("B", TensorProto.INT8, [{DEPTH}, 16], np.full(({DEPTH}, 16), -128, np.int8).tobytes(),
                             raw=True)
graph = helper.make_graph([helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "probe",
                          [helper.make_tensor_value_info("A", TensorProto.UINT8, [4, {DEPTH}])],
                          [helper.make_tensor_value_info("Y", TensorProto.INT32, [4, 16])], initializer=[weights])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
out = session.run(None, {{"A": np.full((4, {DEPTH}), 255, np.uint8)}})[0]
report = {{"values": sorted(set(out.ravel().tolist())), "module": ort.__file__}}
if sys.argv[1] != "native":
    report.update(patched=hidden.patched, answered=hidden.answered())
print(json.dumps(report))
"""

EXACT = 255 * -128 * DEPTH
SATURATED = -32768 * (DEPTH // 2)


def _probe(mode: str, tmp_path: Path) -> dict:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_hidden_avx512_runs_the_saturating_avx2_kernels(tmp_path):
    hidden = _probe("avx2", tmp_path)
    assert hidden["values"] == [SATURATED]
    assert hidden["patched"] > 0 and hidden["answered"] > 0
    assert str(tmp_path) in hidden["module"]
    assert not list(tmp_path.glob("ort_avx2*"))  # the patched copy is removed at exit

    native = _probe("native", tmp_path)
    vnni = {"avx512_vnni", "avx_vnni"} & cpu_flags()
    assert native["values"] == [EXACT if vnni else SATURATED]
    assert str(tmp_path) not in native["module"]


def test_hidden_avx512_with_avx_vnni_kept_runs_exact_kernels(tmp_path):
    """Keeping AVX-VNNI visible (a CPU of AVX2 and AVX-VNNI), ONNX Runtime's int8 kernels are the
    exact vpdpbusd ones where the CPU has AVX-VNNI, the saturating AVX2 ones where it does not."""
    kept = _probe("avxvnni", tmp_path)
    assert kept["values"] == [EXACT if "avx_vnni" in cpu_flags() else SATURATED]
    assert kept["patched"] > 0 and kept["answered"] > 0
    assert str(tmp_path) in kept["module"]


def test_hidden_vnni_with_avx512_kept_runs_saturating_kernels(tmp_path):
    kept = _probe("avx512bw", tmp_path)
    assert kept["values"] == [SATURATED]
    assert kept["patched"] > 0 and kept["answered"] > 0


# In a child process (the handler stays installed in its process): a library whose cpuid
# instructions report leaves 7.0 and 7.1, run as built and as patched with ONNX Runtime's, the
# handler in the mode given.
LEAF7_C = """#include <cpuid.h>
void leaf7(unsigned out[5]) {
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  out[0] = b, out[1] = c, out[2] = d;
  __cpuid_count(7, 1, a, b, c, d);
  out[3] = a, out[4] = d;
}
"""
LEAF7_PROBE = f"""
import ctypes, json, subprocess, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import ort_isa

isa, tmp = sys.argv[1], Path(sys.argv[2])
built, patched = tmp / "libleaf7.so", tmp / "libleaf7_patched.so"
subprocess.run(["cc", "-O1", "-shared", "-fPIC", str(tmp / "leaf7.c"), "-o", str(built)], check=True)
patched.write_bytes(built.read_bytes())
count = ort_isa.patch_cpuid(patched)
handler = ort_isa._build_handler(tmp)
modes = [handler.cpuid_avx2_set_mode(ort_isa.HIDDEN_ISAS[isa][1]), handler.cpuid_avx2_set_mode(3)]
real, answered = (ctypes.c_uint * 5)(), (ctypes.c_uint * 5)()
ctypes.CDLL(str(built)).leaf7(real)
ctypes.CDLL(str(patched)).leaf7(answered)
print(json.dumps(dict(patched=count, modes=modes, real=list(real), answered=list(answered),
                      count=handler.cpuid_avx2_answered())))
"""
BIT = [1 << n for n in range(32)]
# (leaf 7.0 EBX, ECX, EDX, leaf 7.1 EAX, EDX): the bits every mode hides, then those it keeps.
HIDDEN = (BIT[16] | BIT[17] | BIT[21] | BIT[26] | BIT[27] | BIT[28] | BIT[30] | BIT[31],
          BIT[1] | BIT[6] | BIT[11] | BIT[12] | BIT[14],
          BIT[2] | BIT[3] | BIT[8] | BIT[22] | BIT[23] | BIT[24] | BIT[25],
          BIT[4] | BIT[5] | BIT[23],
          BIT[4] | BIT[5] | BIT[10])
KEPT = {"avx2": (0, 0, 0, 0, 0),
        "avxvnni": (0, 0, 0, BIT[4], 0),  # AVX-VNNI
        "avx512bw": (BIT[16] | BIT[17] | BIT[28] | BIT[30] | BIT[31], 0, 0, 0, 0)}  # F, DQ, CD, BW, VL


@pytest.mark.parametrize("isa", sorted(KEPT))
def test_cpuid_answers_hide_the_mode_bits(tmp_path, isa):
    (tmp_path / "leaf7.c").write_text(LEAF7_C)
    out = subprocess.run([sys.executable, "-c", LEAF7_PROBE, isa, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["patched"] == 2 and report["count"] == 2
    assert report["modes"] == [0, -1]  # the mode taken; mode 3 refused (the one set stands)
    expected = [r & ~(h & ~k) for r, h, k in zip(report["real"], HIDDEN, KEPT[isa])]
    assert report["answered"] == expected, [hex(v) for v in report["answered"]]
    if isa == "avx512bw" and report["real"][0] & BIT[30]:  # this CPU's AVX-512BW shows through, VNNI not
        assert report["answered"][0] & BIT[30] and not report["answered"][1] & BIT[11]
