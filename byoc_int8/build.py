"""Build: a calibrated, partitioned module -> one shared library, and loading it back.

``RunCodegen`` hands the regions to ``relax.ext.ccompiler`` (registered by importing
:mod:`byoc_int8.codegen`), which compiles them into one object, ``tvm.compile`` builds the host
part, and ``export_library`` links everything into one ``.so``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import tvm
from tvm import relax

from . import codegen  # noqa: F401  (registers relax.ext.ccompiler)

HOST_TARGET = {"kind": "llvm"}


def start_kernels(simd: str | None, rounding: str, kernels: str = "builtin") -> None:
    """Start compiling the kernels' object of the build that `build` will be asked for (`simd`,
    the regions' qarith rounding, `kernels`) in the background, where no cache has it yet: on a
    fresh machine it takes a 2-core one longer than exporting and calibrating ResNet-18."""
    codegen.objects.start_kernels(codegen.emit_c.kernel_unit(simd, rounding, kernels))


def build(mod: tvm.IRModule, target: dict | None = None, simd: str | None = None,
          kernels: str = "builtin") -> tvm.relax.VMExecutable:
    """Run the external codegen and compile the host program. `simd` picks the kernel
    implementation ("amx", "avx512vnni", "avx512bw", "avxvnni", "avx2", "portable"; default: the
    fastest this machine runs); `kernels` "external" leaves the kernels to a library linked at export."""
    options = {key: value for key, value in (("simd", simd), ("kernels", kernels)) if value}
    mod = relax.transform.RunCodegen({"ccompiler": options})(mod)
    # RunCodegen hands the regions' float constants to TVM for a constant loader; the generated C
    # holds its own int8 constants, so shipping the float ones would only make the library 5x
    # larger than its weights.
    mod = mod.without_attr("const_name_to_constant")
    return tvm.compile(mod, target=tvm.target.Target(target or HOST_TARGET))


def export(executable, path: str | os.PathLike, link_options: list[str] | tuple[str, ...] = ()) -> str:
    """Write the shared library; `link_options` go to the compiler (an external kernel library's
    ``-I``, ``-L``, ``-l`` and ``-Wl,-rpath`` flags)."""
    path = os.fspath(path)
    if link_options:
        executable.export_library(path, options=list(link_options))
    else:
        executable.export_library(path)
    return path


# The file each path had when this process loaded a library from it: the dynamic loader keeps
# a loaded library by its path, and would hand that one back for a new file written there.
_LOADED: dict[str, tuple[int, int, int, int]] = {}


def load(path: str | os.PathLike, device=None) -> relax.VirtualMachine:
    """Load an exported library; needs nothing of byoc_int8. A library written at a path that
    this process has already loaded a different file from (a model compiled twice to one path)
    is loaded from a copy, removed once loaded: the loader would otherwise return the old
    library for the path (or for the file, if rewritten in place), and the new model would
    silently run the old one."""
    real = os.path.realpath(os.fspath(path))
    info = os.stat(real)
    identity = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
    if _LOADED.setdefault(real, identity) == identity:
        lib = tvm.runtime.load_module(real)
    else:
        with tempfile.TemporaryDirectory(prefix="byoc_int8_load_") as fresh:
            copy = shutil.copyfile(real, os.path.join(fresh, os.path.basename(real)))
            lib = tvm.runtime.load_module(copy)
    return relax.VirtualMachine(lib, device or tvm.cpu())
