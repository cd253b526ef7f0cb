"""benchmarks/ort_isa.py: ONNX Runtime imported with AVX-512 and VNNI hidden runs its AVX2 int8
kernels, whose vpmaddubsw pairs saturate at int16; with AVX-512 hidden and AVX-VNNI kept, its
AVX-VNNI kernels; unpatched, it runs the CPU's best kernels.

The probe is an int8 MatMulInteger whose every product is 255 x -128: an exact kernel sums them
(VNNI's vpdpbusd widens each product to 32 bits), the AVX2 one clamps each pair to -32768."""

import json
import os
import subprocess
import sys
from pathlib import Path

from byoc_int8.codegen.emit_c import cpu_flags

ROOT = Path(__file__).resolve().parents[1]
DEPTH = 64

PROBE = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import numpy as np
if sys.argv[1] != "native":
    import ort_isa
    hidden = ort_isa.import_onnxruntime_avx2(keep_avx_vnni=sys.argv[1] == "avxvnni")
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
