"""Build: a generated module's C (:class:`~.emit_c.ModuleSource`) -> one relocatable object,
handed to TVM as a static library that ``export_library`` links into the ``.so``.

* The regions' unit and the kernels' unit compile separately. The kernels' object depends only on
  the kernel build (implementation, rounding, the sources) and the compiler, so each process
  compiles it once and keeps its bytes, and keeps them on disk too (:func:`kernel_cache_dir`) for
  the next process: every later model of that build compiles only its own code.
* The int8 constants never become C text: an assembler file places each one (aligned, named as
  the regions' code declares it) with ``.incbin`` from one binary file.
* Both units are compiled with hidden visibility and linked with ``ld -r``; ``objcopy
  --localize-hidden`` then leaves only the ``__tvm_ffi_<symbol>`` entries global, so two modules
  can be linked into one library, or loaded into one process, without a clash.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import tvm
import tvm_ffi
import tvm_ffi.libinfo

from ..errors import ToolchainError
from ..memory import ALIGN
from .emit_c import SIMD_PRELUDE, ModuleSource

# Raised inside RunCodegen's call: registered, it reaches the caller as itself.
tvm_ffi.register_error(ToolchainError)

# No FP exception flags are read, so the vectorizer may assume none: loops with truncf and float
# selects (the boundary quantize) vectorize; results are the same.
C_FLAGS = ("-std=gnu11", "-O3", "-fno-trapping-math", "-fPIC", "-fvisibility=hidden")


def _tool(name: str, env: str | None = None) -> str:
    """The program `name` (or the one environment variable `env` names) as a path."""
    wanted = (os.environ.get(env) if env else None) or name
    found = shutil.which(wanted)
    if not found:
        source = f" (from {env})" if wanted != name else ""
        raise ToolchainError(f"byoc_int8 builds its modules with a C compiler, ld and objcopy: {wanted!r}{source} "
                           "was not found (Debian: apt-get install gcc binutils)")
    return found


def _include_flags() -> tuple[str, ...]:
    paths = [tvm.libinfo.find_include_path(), tvm_ffi.libinfo.find_include_path(),
             tvm_ffi.libinfo.find_dlpack_include_path()]
    return tuple(f"-I{path}" for path in dict.fromkeys(paths))


def _start(command: list[str], workdir: Path) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _compile(cc: str, source: str, name: str, workdir: Path) -> subprocess.Popen:
    """Starts compiling `source` (C) to `workdir`/`name`.o."""
    (workdir / f"{name}.c").write_text(source)
    return _start([cc, *C_FLAGS, *_include_flags(), "-c", f"{name}.c", "-o", f"{name}.o"], workdir)


def _finish(started: list[tuple[str, subprocess.Popen]]) -> None:
    """Waits for every process, then raises naming the first that failed."""
    failures = []
    for what, process in started:
        output, _ = process.communicate()
        if process.returncode:
            failures.append(f"{what} failed ({' '.join(process.args)}):\n{output[-4000:]}")
    if failures:
        raise ToolchainError(failures[0])


# The kernels' object of each kernel build this process has compiled or read, by _kernel_key.
_KERNEL_OBJECTS: dict[str, bytes] = {}
# Objects the disk cache keeps (about 120 KB each), the least recently used going first.
KERNEL_CACHE_ENTRIES = 32


def kernel_cache_dir() -> Path | None:
    """Where kernel objects persist between processes: ``$BYOC_INT8_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/byoc-int8`` (``~/.cache/byoc-int8``); None, no cache on disk, when
    ``BYOC_INT8_CACHE_DIR`` is set empty."""
    configured = os.environ.get("BYOC_INT8_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "byoc-int8"
    except RuntimeError:  # no home directory to be found: no cache
        return None


@functools.cache
def _compiler_identity(cc: str) -> str:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return f"{os.path.realpath(cc)}\n{version.stdout}"


@functools.cache
def _compiles_isa(cc: str, simd: str) -> bool:
    source = SIMD_PRELUDE[simd] + "#include <immintrin.h>\nint b8_probe(void) { return 0; }\n"
    done = subprocess.run([cc, "-x", "c", "-c", "-", "-o", os.devnull], input=source, capture_output=True, text=True)
    return done.returncode == 0


def compiler_has_isa(simd: str) -> bool:
    """Whether this machine's C compiler ($CC, else gcc) compiles the kernels of build `simd` (the
    AMX build's tile intrinsics need GCC 11 or Clang 12); True where there is no compiler at all,
    so that the build fails naming it."""
    try:
        cc = _tool("gcc", "CC")
    except ToolchainError:
        return True
    return _compiles_isa(cc, simd)


def _kernel_key(cc: str, kernels_c: str) -> str:
    """The kernels' object's identity: the compiler (its path and version), the flags, the unit."""
    key = hashlib.sha256()
    for part in (_compiler_identity(cc), " ".join((*C_FLAGS, *_include_flags())), kernels_c):
        key.update(part.encode() + b"\0")
    return key.hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _cached_kernels(key: str) -> bytes | None:
    """The object of `key` from the disk cache, or None. Files are named by the key and their
    bytes' own digest; one whose bytes do not match (a damaged file) is removed, and compiled again."""
    directory = kernel_cache_dir()
    if directory is None:
        return None
    for path in directory.glob(f"kernels-{key}-*.o"):
        try:
            data = path.read_bytes()
            if path.stem.endswith(f"-{_digest(data)}"):
                os.utime(path)  # recently used
                return data
            path.unlink()
        except OSError:
            continue
    return None


def _store_kernels(key: str, data: bytes) -> None:
    """Keeps the object on disk for later processes; the cache is an optimization, so a folder
    that cannot be written is left alone. Written to a temporary file, then renamed: a reader sees
    the whole file or none."""
    directory = kernel_cache_dir()
    if directory is None:
        return
    temporary = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".kernels-", delete=False) as file:
            temporary = file.name
            file.write(data)
        os.replace(temporary, directory / f"kernels-{key}-{_digest(data)}.o")
        entries = sorted(directory.glob("kernels-*.o"), key=lambda path: path.stat().st_mtime, reverse=True)
        for stale in entries[KERNEL_CACHE_ENTRIES:]:
            stale.unlink(missing_ok=True)
    except OSError:
        if temporary:
            Path(temporary).unlink(missing_ok=True)


# Kernel objects being compiled ahead of their module (start_kernels), by _kernel_key: the
# compiler's process and the directory it writes to.
_AHEAD: dict[str, tuple[subprocess.Popen, tempfile.TemporaryDirectory]] = {}


def start_kernels(kernels_c: str) -> None:
    """Starts compiling a kernel build's object in the background, unless this process or the disk
    cache has it: compile_model starts it before it exports the model, so that the compiler runs
    while the model is exported and calibrated, and compile_module then waits for it. A missing
    compiler is left for compile_module to report."""
    try:
        cc = _tool("gcc", "CC")
    except ToolchainError:
        return
    key = _kernel_key(cc, kernels_c)
    if key in _KERNEL_OBJECTS or key in _AHEAD:
        return
    if (cached := _cached_kernels(key)) is not None:
        _KERNEL_OBJECTS[key] = cached
        return
    workdir = tempfile.TemporaryDirectory(prefix="byoc_int8_kernels_")
    _AHEAD[key] = (_compile(cc, kernels_c, "kernels", Path(workdir.name)), workdir)


def _collect_ahead(key: str) -> None:
    """Waits for the object of `key` started ahead, if one was, and keeps it (raising as
    compile_module would where the compiler failed)."""
    if (ahead := _AHEAD.pop(key, None)) is None:
        return
    process, workdir = ahead
    with workdir:
        _finish([("compiling the kernels", process)])
        _KERNEL_OBJECTS[key] = (Path(workdir.name) / "kernels.o").read_bytes()
    _store_kernels(key, _KERNEL_OBJECTS[key])


@atexit.register
def _stop_ahead() -> None:
    """Compiles started ahead for a module that never came (compile_model failed on the model):
    stopped at exit, their directories removed."""
    for process, workdir in _AHEAD.values():
        process.kill()
        process.communicate()
        workdir.cleanup()
    _AHEAD.clear()


def _constants_assembly(constants: tuple[tuple[str, bytes], ...], blob: str) -> str:
    """Each int8 constant, read-only and aligned, from its span of the file `blob`."""
    lines = ['  .section .rodata.byoc_int8,"a"']
    offset = 0
    for name, data in constants:
        lines += [f"  .balign {ALIGN}", f"  .globl {name}", f"  .hidden {name}", f"  .size {name}, {len(data)}",
                  f"{name}:"]
        if data:
            lines.append(f'  .incbin "{blob}", {offset}, {len(data)}')
        offset += len(data)
    lines.append('  .section .note.GNU-stack,"",%progbits')  # no executable stack
    return "\n".join(lines) + "\n"


def compile_module(source: ModuleSource) -> tvm.runtime.Module:
    """The module as one object file in a TVM static library module."""
    cc, ld, objcopy = _tool("gcc", "CC"), _tool("ld"), _tool("objcopy")
    key = _kernel_key(cc, source.kernels_c)
    _collect_ahead(key)
    if key not in _KERNEL_OBJECTS and (cached := _cached_kernels(key)) is not None:
        _KERNEL_OBJECTS[key] = cached
    with tempfile.TemporaryDirectory(prefix="byoc_int8_module_") as name:
        workdir = Path(name)
        started = []
        if key not in _KERNEL_OBJECTS:  # a kernel build not seen yet compiles while the model does
            started.append(("compiling the kernels", _compile(cc, source.kernels_c, "kernels", workdir)))
        started.append(("compiling the generated model", _compile(cc, source.model_c, "model", workdir)))
        (workdir / "constants.bin").write_bytes(b"".join(data for _, data in source.int8_constants))
        (workdir / "constants.s").write_text(_constants_assembly(source.int8_constants, "constants.bin"))
        started.append(("assembling the constants", _start([cc, "-c", "constants.s", "-o", "constants.o"], workdir)))
        _finish(started)
        if key in _KERNEL_OBJECTS:
            (workdir / "kernels.o").write_bytes(_KERNEL_OBJECTS[key])
        else:
            _KERNEL_OBJECTS[key] = (workdir / "kernels.o").read_bytes()
            _store_kernels(key, _KERNEL_OBJECTS[key])
        _finish([("linking the module", _start([ld, "-r", "-o", "module.o", "model.o", "constants.o", "kernels.o"], workdir))])
        _finish([("hiding the kernels", _start([objcopy, "--localize-hidden", "module.o"], workdir))])
        # The module keeps the object's bytes: the directory can go.
        return tvm.runtime.load_static_library(str(workdir / "module.o"), list(source.symbols))
