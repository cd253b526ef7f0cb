"""The generated module as one object (byoc_int8/codegen/objects.py): the int8 constants enter as
bytes, the kernels compile once per process and kernel build (started ahead by compile_model) and
persist on disk for the next process, only the regions' entries stay global, and a missing or
failing compiler is named."""

import dataclasses
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn

from byoc_int8 import pipeline, reference
from byoc_int8.codegen import emit_c, objects
from byoc_int8.errors import ToolchainError
from byoc_int8.pipeline import compile_model


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3, padding=1)).eval()
    data = np.random.default_rng(0).standard_normal((4, 3, 12, 12)).astype(np.float32)
    return compile_model(model, data, output_path=tmp_path_factory.mktemp("objects") / "model.so", simd="portable")


@pytest.fixture(scope="module")
def region(compiled):
    (symbol, qgraph), = reference.quantized_regions(compiled.module).items()
    return symbol, qgraph


def _global_symbols(path) -> set[str]:
    listing = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in listing.stdout.splitlines() if line.strip()}


def test_library_holds_the_weights_as_bytes_and_exports_only_the_entries(compiled, region):
    symbol, qgraph = region
    exported = _global_symbols(compiled.library_path)
    assert f"__tvm_ffi_{symbol}" in exported
    assert all(name.startswith("__tvm_ffi_") for name in exported), sorted(exported)  # no b8_* kernels
    library = open(compiled.library_path, "rb").read()
    weights = [q.params["weight"] for q in qgraph.nodes if q.op == "conv2d"]
    assert len(weights) == 2
    for w in weights:  # each filter's codes, as the kernels read them
        assert w.astype(np.int8).tobytes() in library


@pytest.fixture
def compiles(monkeypatch, tmp_path) -> list[str]:
    """The units compile_module compiles from here on (kernels, model), in a process with no
    kernel object yet and an empty disk cache in tmp_path / "cache"."""
    names = []
    start = objects._compile

    def recording(cc, source, name, workdir):
        names.append(name)
        return start(cc, source, name, workdir)

    monkeypatch.setattr(objects, "_KERNEL_OBJECTS", {})
    monkeypatch.setattr(objects, "_AHEAD", {})
    monkeypatch.setattr(objects, "_compile", recording)
    monkeypatch.setenv("BYOC_INT8_CACHE_DIR", str(tmp_path / "cache"))
    return names


def test_kernels_compile_once_per_process_and_kernel_build(region, compiles):
    for simd in ("portable", "portable", "avx2", "portable"):
        assert objects.compile_module(emit_c.emit_module([region], simd=simd)).kind == "static_library"
    assert compiles == ["kernels", "model", "model", "kernels", "model", "model"]


def test_kernels_started_ahead_are_the_module_s_and_compile_once(region, compiles, tmp_path):
    """start_kernels compiles the unit emit_module will give (kernel_unit: the same text), in the
    background; compile_module waits for that object and keeps it (and on disk) rather than
    compiling the kernels again; a second start for a build the process has is a no-op."""
    _, qgraph = region
    source = emit_c.emit_module([region], simd="avx2")
    assert emit_c.kernel_unit("avx2", qgraph.format.rounding) == source.kernels_c
    objects.start_kernels(source.kernels_c)
    (process, _), = objects._AHEAD.values()
    assert compiles == ["kernels"] and process.poll() is None  # still compiling
    objects.compile_module(source)
    objects.start_kernels(source.kernels_c)
    objects.compile_module(source)
    assert compiles == ["kernels", "model", "model"] and objects._AHEAD == {}
    assert len(_cache_entries(tmp_path)) == 1


def test_a_kernels_compile_started_ahead_fails_or_stops_cleanly(region, compiles, monkeypatch, tmp_path):
    """A compiler that fails on the kernels ahead of time fails compile_module as it would have;
    one still running at exit (the model never came) is stopped and its directory removed."""
    source = emit_c.emit_module([region], simd="portable")
    failing = tmp_path / "cc"
    failing.write_text('#!/bin/sh\n'
                       'case "$*" in *kernels.c*) echo "no kernels today" >&2; exit 1;; esac\n'
                       'exec gcc "$@"\n')
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    objects.start_kernels(source.kernels_c)
    with pytest.raises(ToolchainError, match="(?s)compiling the kernels failed.*no kernels today"):
        objects.compile_module(source)
    monkeypatch.setenv("CC", "gcc")
    objects.start_kernels(source.kernels_c)
    (process, workdir), = objects._AHEAD.values()
    objects._stop_ahead()
    assert process.returncode is not None and not os.path.exists(workdir.name) and objects._AHEAD == {}


def test_compile_model_starts_the_kernels_before_it_exports_the_model(compiles, monkeypatch):
    started = []
    export = pipeline.export_model

    def recording(*args, **kwargs):
        started.append(len(objects._AHEAD))
        return export(*args, **kwargs)

    monkeypatch.setattr(pipeline, "export_model", recording)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    data = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    compile_model(model, data, simd="portable")
    assert started == [1] and compiles == ["kernels", "model"] and objects._AHEAD == {}


def _cache_entries(tmp_path) -> list:
    return sorted((tmp_path / "cache").glob("kernels-*.o"))


def test_a_new_process_takes_the_kernels_from_the_disk_cache(region, compiles, monkeypatch, tmp_path):
    source = emit_c.emit_module([region], simd="portable")
    objects.compile_module(source).write_to_file(str(tmp_path / "first.o"))
    assert compiles == ["kernels", "model"] and len(_cache_entries(tmp_path)) == 1
    monkeypatch.setattr(objects, "_KERNEL_OBJECTS", {})  # as in a new process
    objects.compile_module(source).write_to_file(str(tmp_path / "second.o"))
    assert compiles == ["kernels", "model", "model"]
    assert (tmp_path / "first.o").read_bytes() == (tmp_path / "second.o").read_bytes()
    # Another compiler (here gcc behind a script: another path) is another entry.
    wrapper = tmp_path / "cc"
    wrapper.write_text('#!/bin/sh\nexec gcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setattr(objects, "_KERNEL_OBJECTS", {})
    objects.compile_module(source)
    assert compiles == ["kernels", "model", "model", "kernels", "model"] and len(_cache_entries(tmp_path)) == 2


def test_a_damaged_cache_entry_is_compiled_again(region, compiles, monkeypatch, tmp_path):
    source = emit_c.emit_module([region], simd="portable")
    objects.compile_module(source)
    entry, = _cache_entries(tmp_path)
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2])  # cut short
    monkeypatch.setattr(objects, "_KERNEL_OBJECTS", {})
    assert objects.compile_module(source).kind == "static_library"
    assert compiles == ["kernels", "model", "kernels", "model"]
    assert [path.read_bytes() for path in _cache_entries(tmp_path)] == [good]


def test_the_disk_cache_is_bounded_and_can_be_turned_off(region, compiles, monkeypatch, tmp_path):
    monkeypatch.setattr(objects, "KERNEL_CACHE_ENTRIES", 1)
    sources = {simd: emit_c.emit_module([region], simd=simd) for simd in ("portable", "avx2")}
    objects.compile_module(sources["portable"])
    older, = _cache_entries(tmp_path)
    os.utime(older, (older.stat().st_atime, older.stat().st_mtime - 10))  # surely older
    objects.compile_module(sources["avx2"])
    entry, = _cache_entries(tmp_path)  # the newer: the avx2 kernels'
    newer = objects._kernel_key(objects._tool("gcc", "CC"), sources["avx2"].kernels_c)
    assert entry.name.startswith(f"kernels-{newer}-")
    monkeypatch.setenv("BYOC_INT8_CACHE_DIR", "")
    assert objects.kernel_cache_dir() is None
    monkeypatch.setattr(objects, "_KERNEL_OBJECTS", {})
    objects.compile_module(emit_c.emit_module([region], simd="portable"))
    assert compiles == ["kernels", "model", "kernels", "model", "kernels", "model"]
    assert _cache_entries(tmp_path) == [entry]


def test_two_modules_link_into_one_library_without_a_clash(region, tmp_path):
    """Both objects define every kernel; made local to each, they link side by side."""
    _, qgraph = region
    paths = []
    for symbol in ("first", "second"):
        module = objects.compile_module(emit_c.emit_module([(symbol, qgraph)], simd="portable"))
        paths.append(str(tmp_path / f"{symbol}.o"))
        module.write_to_file(paths[-1])
    linked = subprocess.run(["gcc", "-shared", "-o", str(tmp_path / "both.so"), *paths], capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr[-3000:]
    assert _global_symbols(tmp_path / "both.so") == {"__tvm_ffi_first", "__tvm_ffi_second"}


def test_an_amx_cpu_with_a_compiler_without_amx_gets_the_vnni_build(monkeypatch, tmp_path):
    """The default kernel build is one the compiler can build: GCC before 11 (here a wrapper that
    refuses AMX's target names) turns an AMX CPU's default into the AVX-512 VNNI build."""
    if not emit_c.SIMD_FLAGS["amx"] <= emit_c.cpu_flags():
        pytest.skip("this CPU has no AMX: its default is not the AMX build anyway")  # hardware, not missing work
    assert emit_c.default_simd() == "amx"
    old_gcc = tmp_path / "old-gcc"
    old_gcc.write_text('#!/bin/sh\nsource=$(cat)\ncase "$source" in *amx-tile*) echo "error: bad option amx-tile" >&2; '
                       'exit 1;; esac\nprintf %s "$source" | exec gcc "$@"\n')
    old_gcc.chmod(0o755)
    monkeypatch.setenv("CC", str(old_gcc))
    assert not objects.compiler_has_isa("amx") and objects.compiler_has_isa("avx512vnni")
    assert emit_c.default_simd() == "avx512vnni"


@pytest.mark.parametrize("cpu, flags, build", [
    ("AMD Zen 3", {"avx2", "fma"}, "avx2"),
    ("Intel Alder Lake", {"avx2", "fma", "avx_vnni"}, "avxvnni"),
    ("Intel Skylake-SP", {"avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}, "avx512bw"),
    ("AMD Zen 4", {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx_vnni"},
     "avx512vnni"),
    ("a CPU without AVX2", {"sse4_2"}, "portable"),
])
def test_the_default_build_is_the_fastest_the_cpu_runs(monkeypatch, cpu, flags, build):
    """An AVX-512 CPU without VNNI gets the AVX-512BW build, one with VNNI the AVX-512 VNNI build."""
    monkeypatch.setattr(emit_c, "cpu_flags", lambda: set(flags))
    assert emit_c.default_simd() == build, cpu


def test_a_missing_or_failing_compiler_is_named(region, monkeypatch):
    source = emit_c.emit_module([region], simd="portable")
    with pytest.raises(ToolchainError, match="(?s)compiling the generated model failed.*not_c"):
        objects.compile_module(dataclasses.replace(source, model_c=source.model_c + "\nint not_c = ;\n"))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(ToolchainError, match=r"'/nonexistent/cc' \(from CC\) was not found"):
        objects.compile_module(source)


@pytest.mark.parametrize("simd", ["portable", "avx2", "avxvnni", "avx512bw", "avx512vnni", "amx"])
def test_both_units_compile_without_warnings(simd, tmp_path):
    """The generated model's unit and the kernels' unit (with the adapter) are warning-free C
    under -Wall -Wextra, for a region with convolutions, a pool, a reshape and a dense layer."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 8, 3, padding=1),
                          nn.Flatten(), nn.Linear(8 * 6 * 6, 10)).eval()
    data = np.random.default_rng(1).standard_normal((4, 3, 12, 12)).astype(np.float32)
    compiled = compile_model(model, data, output_path=tmp_path / "model.so", simd=simd)
    regions = reference.quantized_regions(compiled.module)
    source = emit_c.emit_module(list(regions.items()), simd=simd)
    ops = {q.op for qgraph in regions.values() for q in qgraph.nodes}
    assert {"conv2d", "max_pool2d", "dense"} <= ops, ops
    for name, text in (("model", source.model_c), ("kernels", source.kernels_c)):
        (tmp_path / f"{name}.c").write_text(text)
        done = subprocess.run(["gcc", *objects.C_FLAGS, *objects._include_flags(), "-Wall", "-Wextra", "-Werror", "-c",
                               f"{name}.c", "-o", f"{name}.o"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and not done.stderr, (name, done.stderr[-3000:])
