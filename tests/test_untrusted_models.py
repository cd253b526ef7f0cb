"""A model file is input from outside: whatever names it carries never reach the generated C
unescaped (a model with odd names compiles to the very same C as with plain ones), absurd shapes
are refused before anything is allocated, and a .pt2 that would run code is refused."""

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import byoc_int8.codegen
import onnx_models
import tflite_models
from byoc_int8 import peers, reference
from byoc_int8.codegen.emit_c import c_safe, emit_module
from byoc_int8.codegen.objects import compile_module
from byoc_int8.errors import ModelFileError
from byoc_int8.frontend import MAX_TENSOR_ELEMENTS, check_pt2_archive
from byoc_int8.pipeline import compile_model, compile_prequantized, evaluate, evaluate_prequantized, sample_inputs

PAYLOAD = '*/ "quoted" \'q\' \n#include <evil>\r\\'


def odd(name: str) -> str:
    """A name that would end a comment or a string, start a line of its own and include a file."""
    return f"{name}{PAYLOAD}"


@pytest.fixture
def c_sources(monkeypatch) -> list:
    """Every module source (C and constants) the code generator writes while the test runs."""
    sources = []
    emit = byoc_int8.codegen.emit_module

    def recording(*args, **kwargs):
        sources.append(emit(*args, **kwargs))
        return sources[-1]

    monkeypatch.setattr(byoc_int8.codegen, "emit_module", recording)
    return sources


def test_c_safe_is_the_one_way_into_the_c_text():
    assert c_safe("byoc_int8_region0", "identifier") == "byoc_int8_region0"
    for bad in ("", "0region", "a-b", "a b", "x*/", "région", "a\nb"):
        with pytest.raises(ValueError, match="not a C identifier"):
            c_safe(bad, "identifier")
    assert c_safe('a"b\\c\n?é', "string") == '"a\\042b\\134c\\012\\077\\303\\251"'
    assert c_safe("node 1 (x */ \\ ??/\n#include <y>)", "comment") == "node 1 (x */ _ __/_#include <y>)"
    with pytest.raises(ValueError, match="unknown place"):
        c_safe("x", "macro")


def test_names_in_the_c_text_are_escaped_and_the_c_compiles(tmp_path):
    """A region whose composites carry the payload: the C has it only escaped, in one comment
    line per node and in the string literals of the node labels, and compiles; a symbol that is
    no C identifier is refused."""
    compiled = compile_prequantized(onnx_models.build_qdq_conv(tmp_path / "plain.onnx"))
    (symbol, region), = reference.quantized_regions(compiled.module).items()
    for node in region.graph.nodes:
        node.composite = odd(node.composite)
    module = emit_module([(symbol, region)], simd="portable")
    source = module.model_c
    lines = source.splitlines()
    assert not any(line.startswith("#include <evil>") for line in lines)
    assert "\r" not in source and PAYLOAD not in source
    escaped = "*/ \\042quoted\\042 'q' \\012#include <evil>\\015\\134"
    holders = [line for line in lines if escaped in line]  # the node labels, as string literals
    assert len(holders) == 1 and holders[0].startswith(f"static const char* const {symbol}_labels[] = {{\"node 0 (")
    assert holders[0].count(escaped) == len(region.graph.nodes)
    comments = [line for line in lines if "// node 0 (" in line]
    assert comments == [f"  {{ // node 0 ({region.graph.nodes[0].composite.split(PAYLOAD)[0]}*/ \"quoted\" 'q' _#include <evil>__)"]
    assert compile_module(module).kind == "static_library"  # compiled and linked, or it raises
    with pytest.raises(ValueError, match="not a C identifier"):
        emit_module([(f"region{PAYLOAD}", region)])


def test_an_onnx_model_with_odd_names_compiles_to_the_same_c(tmp_path, c_sources):
    plain = onnx_models.build_qdq_conv(tmp_path / "plain.onnx")
    named = onnx_models.build_qdq_conv(tmp_path / "named.onnx", odd)
    assert PAYLOAD.encode() in named.read_bytes()
    for path in (plain, named):
        compiled = compile_prequantized(path, tmp_path / f"{path.stem}.so")
        assert compiled.regions == 1 and compiled.host_ops == []
        x = sample_inputs(compiled, 4)
        report = evaluate_prequantized(compiled, peers.onnxruntime_session(path, onnx_models.output_quantization(plain)[0]), x,
                                       latency_runs=1)
        assert report["bit_exact"] and report["max_lsb_diff_vs_onnxruntime"] <= 1
    assert len(c_sources) == 2 and c_sources[0] == c_sources[1]


def test_a_tflite_model_with_odd_names_compiles_to_the_same_c(tmp_path, c_sources):
    plain = tflite_models.build_tflite("mobilenet", tmp_path / "plain.tflite")
    named = tflite_models.patch_tensors(plain, tmp_path / "named.tflite", names=lambda i, old: f"{i}{PAYLOAD}")
    assert PAYLOAD.encode() in named.read_bytes()
    for path in (plain, named):
        compiled = compile_prequantized(path)
        report = evaluate_prequantized(compiled, peers.tflite_reference(path), sample_inputs(compiled, 4), latency_runs=1)
        assert report["bit_exact"] and report["max_lsb_diff_vs_tflite"] == 0
    assert len(c_sources) == 2 and c_sources[0] == c_sources[1]
    for shape, expected in (((1, -32, 32, 3), "has a negative dimension: shape (1, -32, 32, 3)"),
                            ((1, 1 << 20, 1 << 20, 3), "is too large: shape (1, 1048576, 1048576, 3) has 3,298,534,883,328 elements")):
        absurd = tflite_models.patch_tensors(plain, tmp_path / "absurd.tflite", shapes={0: shape})
        with pytest.raises(ModelFileError, match=r"tensor 'serving_default_input:0' of absurd\.tflite " + _escaped(expected)):
            compile_prequantized(absurd)


def _escaped(text: str) -> str:
    return re.escape(text)


class _Named(torch.nn.Module):
    def __init__(self, names: list[str]):
        super().__init__()
        torch.manual_seed(0)
        self.names = names
        for name in names:
            self.add_module(name, torch.nn.Conv2d(3, 3, 3, padding=1))

    def forward(self, x):
        for name in self.names:
            x = torch.relu(self._modules[name](x))
        return x


def _rewrite_pt2(source: Path, target: Path, change) -> Path:
    """A copy of a .pt2 archive with its program's JSON passed through `change`."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w") as copy:
        for info in archive.infolist():
            data = archive.read(info.filename)
            if info.filename.endswith("models/model.json"):
                data = json.dumps(change(json.loads(data))).encode()
            copy.writestr(info, data)
    return target


def test_a_pt2_with_odd_metadata_compiles_to_the_same_c_and_odd_names_are_refused(tmp_path, c_sources):
    calib = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    plain = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(_Named(["a", "b"]).eval(), (torch.from_numpy(calib[:1]),)), plain)

    def odd_metadata(program):
        for node in program["graph_module"]["graph"]["nodes"]:
            node["metadata"]["stack_trace"] = f'File "{PAYLOAD}", line 1, in forward\n    {PAYLOAD}'
        return program

    noted = _rewrite_pt2(plain, tmp_path / "noted.pt2", odd_metadata)
    for path in (plain, noted):
        check_pt2_archive(path)
        program = torch.export.load(str(path))
        report = evaluate(compile_model(program, calib, int8_only=True), program.module(), calib[:2], latency_runs=1, layers=[])
        assert report["bit_exact"]
    assert len(c_sources) == 2 and c_sources[0] == c_sources[1]

    # Parameter names are written into the Python code torch generates for the program: odd
    # ones are refused, and one that is code never runs.
    named = tmp_path / "named.pt2"
    torch.export.save(torch.export.export(_Named([odd("a").replace(".", "_")]).eval(), (torch.from_numpy(calib[:1]),)), named)
    with pytest.raises(ModelFileError, match="is not a plain name"):
        check_pt2_archive(named)
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    injected = 'w",exec(bytes((' + ",".join(str(b) for b in code.encode()) + ')))or"'

    def inject(program):
        for spec in program["graph_module"]["signature"]["input_specs"]:
            if "parameter" in spec and spec["parameter"]["parameter_name"] == "a.weight":
                spec["parameter"]["parameter_name"] = f"a.{injected}"
        return program

    with pytest.raises(ModelFileError, match=r"its parameter_name 'a\.w\",exec\(bytes"):
        check_pt2_archive(_rewrite_pt2(plain, tmp_path / "injected.pt2", inject))
    assert not marker.exists()


def test_absurd_pt2_shapes_are_refused(tmp_path):
    plain = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(_Named(["a"]).eval(), (torch.zeros(1, 3, 8, 8),)), plain)

    def sized(sizes):
        def change(program):
            program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"] = [{"as_int": s} for s in sizes]
            return program
        return change

    with pytest.raises(ModelFileError, match=r"tensor 'x' of huge\.pt2 is too large: shape \(1, 3, 1048576, 1048576\)"):
        check_pt2_archive(_rewrite_pt2(plain, tmp_path / "huge.pt2", sized([1, 3, 1 << 20, 1 << 20])))
    with pytest.raises(ModelFileError, match=r"tensor 'x' of negative\.pt2 has a negative dimension: shape \(1, -3, 8, 8\)"):
        check_pt2_archive(_rewrite_pt2(plain, tmp_path / "negative.pt2", sized([1, -3, 8, 8])))
    with pytest.raises(ModelFileError, match="symbolic shapes"):
        check_pt2_archive(_rewrite_pt2(plain, tmp_path / "symbolic.pt2", _symbolic))


def _symbolic(program):
    program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][2] = {"as_expr": {"expr_str": "__import__('os')", "hint": None}}
    return program


def _onnx_with(tmp_path: Path, name: str, change) -> Path:
    import onnx

    model = onnx.load(str(onnx_models.build_qdq_conv(tmp_path / "plain.onnx")))
    change(model.graph)
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_absurd_onnx_shapes_and_external_data_are_refused(tmp_path):
    from onnx import TensorProto

    def input_dims(*dims):
        def change(graph):
            for dim, value in zip(graph.input[0].type.tensor_type.shape.dim, dims):
                dim.dim_value = value
        return change

    def huge_kernel(graph):  # a 1x1 kernel of 10^6 x 10^6 channels, declared without its data
        graph.initializer.remove(next(t for t in graph.initializer if t.name == "w"))
        kernel = graph.initializer.add(name="w", data_type=TensorProto.INT8)
        kernel.dims.extend([10**6, 10**6, 1, 1])

    def external(graph):
        weight = next(t for t in graph.initializer if t.name == "w")
        weight.ClearField("raw_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value="../../../../etc/passwd")

    cases = {
        "huge.onnx": (input_dims(1, 3, 1 << 20, 1 << 20), r"tensor 'input' of huge\.onnx is too large: shape \(1, 3, 1048576, 1048576\)"),
        "negative.onnx": (input_dims(1, -3, 8, 8), r"tensor 'input' of negative\.onnx has a negative dimension: shape \(1, -3, 8, 8\)"),
        "kernel.onnx": (huge_kernel, r"initializer 'w' of kernel\.onnx is too large: shape \(1000000, 1000000, 1, 1\) "
                                     r"has 1,000,000,000,000 elements, more than the 268,435,456 byoc-int8 accepts"),
        "external.onnx": (external, r"initializer 'w' keeps its data in an external file; byoc-int8 reads only self-contained"),
    }
    assert MAX_TENSOR_ELEMENTS == 268_435_456
    for name, (change, expected) in cases.items():
        with pytest.raises(ModelFileError, match=expected):
            compile_prequantized(_onnx_with(tmp_path, name, change))
