"""ONNX Runtime on the int8 kernels of a lesser x86 ISA, on a CPU that also has AVX-512 VNNI.

ONNX Runtime picks its int8 kernels from CPUID and has no option to pick others. To compare
byoc-int8's AVX2 build with ONNX Runtime's AVX2 kernels on one CPU, `import_onnxruntime_as`
imports a copy of the installed `onnxruntime` package in which every `cpuid` instruction of its
native library is replaced by `int3; nop` (same length). The SIGTRAP handler of
`benchmarks/cpuid_avx2.c` answers those with the real CPUID less the feature bits of the ISA
asked for (HIDDEN_ISAS): the copy sees an AVX2-only CPU of the same model; or one of AVX2 and
AVX-VNNI without AVX-512, as Intel's client cores; or one of AVX-512 without VNNI, as Intel's
Skylake-SP servers (where byoc-int8, finding no VNNI, runs its AVX-512BW build). Nothing else in the
process is affected. This stands in for such a machine: the same instructions run on another
core design, so it is not a measurement of such a machine.

Needs the system cc and binutils' objdump; Linux x86-64 only. Must run before anything imports
onnxruntime.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CPUID = b"\x0f\xa2"
TRAP_CPUID = b"\xcc\x90"  # int3; nop: the handler resumes after the nop
# What ONNX Runtime is shown, per --ort-isa value: a description, and cpuid_avx2.c's mode.
HIDDEN_ISAS = {
    "avx2": ("no AVX-512 / VNNI", 0),
    "avxvnni": ("no AVX-512 (AVX-VNNI kept)", 1),
    "avx512bw": ("AVX-512 F/CD/BW/DQ/VL without VNNI (Intel Skylake-SP's set)", 2),
}


@dataclass
class HiddenIsa:
    """What `import_onnxruntime_as` did: the module, the patched library, its CPUID count."""

    module: ModuleType
    library: Path
    patched: int
    handler: ctypes.CDLL

    def answered(self) -> int:
        """CPUID instructions of the copy answered so far (ONNX Runtime asks when it starts)."""
        return int(self.handler.cpuid_avx2_answered())


def _file_offsets(library: Path) -> list[tuple[int, int, int]]:
    """(start, end, file offset - address) of each section, from `objdump -h`."""
    headers = subprocess.run(["objdump", "-h", str(library)], check=True, capture_output=True, text=True).stdout
    sections = []
    for match in re.finditer(r"^\s*\d+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", headers, re.M):
        size, address, offset = (int(g, 16) for g in match.groups())
        sections.append((address, address + size, offset - address))
    return sections


def patch_cpuid(library: Path) -> int:
    """Replaces each `cpuid` instruction objdump finds in `library` by `int3; nop`; their number."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], check=True,
                             capture_output=True, text=True).stdout
    addresses = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\s+cpuid\b", listing, re.M)]
    sections = _file_offsets(library)
    data = bytearray(library.read_bytes())
    for address in addresses:
        offset = address + next(delta for start, end, delta in sections if start <= address < end)
        if data[offset:offset + 2] != CPUID:
            raise RuntimeError(f"{library.name}: no cpuid at {address:#x} (file offset {offset:#x})")
        data[offset:offset + 2] = TRAP_CPUID
    library.write_bytes(bytes(data))
    return len(addresses)


def _build_handler(workdir: Path) -> ctypes.CDLL:
    library = workdir / "libcpuid_avx2.so"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(HERE / "cpuid_avx2.c"), "-o", str(library)],
                   check=True, capture_output=True, text=True)
    handler = ctypes.CDLL(str(library), use_errno=True)
    if handler.cpuid_avx2_install() != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGTRAP) failed")
    return handler


def import_onnxruntime_as(isa: str = "avx2") -> HiddenIsa:
    """Imports `onnxruntime` from a patched copy (removed at exit) that sees the CPU as `isa` (a
    key of HIDDEN_ISAS) shows it, and runs that ISA's int8 kernels."""
    if isa not in HIDDEN_ISAS:
        raise ValueError(f"unknown ISA {isa!r}: choose from {', '.join(HIDDEN_ISAS)}")
    if "onnxruntime" in sys.modules:
        raise RuntimeError("onnxruntime is already imported: hide AVX-512 from it before its first import")
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise ImportError("onnxruntime is not installed (pip install -e '.[bench]')")
    workdir = Path(tempfile.mkdtemp(prefix="ort_avx2"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    handler = _build_handler(workdir)
    if handler.cpuid_avx2_set_mode(HIDDEN_ISAS[isa][1]) != 0:
        raise RuntimeError(f"{HERE / 'cpuid_avx2.c'} rejected mode {HIDDEN_ISAS[isa][1]}")
    package = workdir / "onnxruntime"
    shutil.copytree(Path(spec.origin).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    libraries = sorted((package / "capi").glob("onnxruntime_pybind11_state*.so"))
    if len(libraries) != 1:
        raise RuntimeError(f"expected one onnxruntime_pybind11_state library in {package / 'capi'}, "
                           f"found {len(libraries)}")
    patched = patch_cpuid(libraries[0])
    if patched == 0:
        raise RuntimeError(f"{libraries[0].name}: no cpuid instruction found; cannot hide AVX-512")
    sys.path.insert(0, str(workdir))
    module = importlib.import_module("onnxruntime")
    if Path(module.__file__).parent != package:
        raise RuntimeError(f"imported {module.__file__}, not the patched copy in {package}")
    return HiddenIsa(module, libraries[0], patched, handler)


def import_for_option(parser: argparse.ArgumentParser, isa: str) -> HiddenIsa:
    """`import_onnxruntime_as` for a script's ``--ort-isa avx2|avxvnni|avx512bw``; what stops it (no
    cc or objdump, no onnxruntime, a library unlike 1.32's) ends the script as the parser's usage
    error."""
    try:
        return import_onnxruntime_as(isa)
    except (OSError, ImportError, RuntimeError, subprocess.CalledProcessError) as err:
        detail = (getattr(err, "stderr", None) or "").strip().splitlines()
        parser.error(f"--ort-isa {isa}: {err}" + (f" ({detail[-1]})" if detail else ""))
