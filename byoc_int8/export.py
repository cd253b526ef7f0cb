"""Standalone C export: a compiled model as a self-contained C99 project, with no TVM, no Python
and no heap, for firmware (``byoc-int8 export-c``).

The directory holds:

* ``model.h``: ``MODEL_WORKSPACE_BYTES``, the input and output shapes and quantization as macros,
  the status codes, ``model_run`` (float in, float out, as the shared library takes and returns
  them) and ``model_run_int8`` (int8 codes in the same layouts, for hosts that convert at the
  boundary themselves);
* ``model.c``: the weights as const arrays and the kernel-call sequence, written by the same
  emitter as the shared library's (:class:`~byoc_int8.codegen.emit_c.RegionEmitter`, target
  "c99");
* the portable kernels (``byoc_int8.h``, configured for the model's rounding), the model header
  and ``serial.c`` (one thread, arena scratch);
* ``test_model.c``: golden inputs and outputs from the integer reference; it exits nonzero on any
  differing byte. ``test_model --layers DIR`` checks every kernel call's output against the layer
  vectors in DIR (``vectors.write_layer_vectors``, for the first golden input) and names the first
  layer that differs;
* ``CMakeLists.txt``. ``cc -std=c99 -O2 -Wall -Wextra -Werror -pedantic *.c -lm`` builds it too.

Only a model that is one region with one input and one output exports: ops on the host between
regions have no C here, and the export refuses them by name. A model whose interface is int8 (a
full-integer ``.tflite``) exports too: ``model_run_int8`` is then its own interface, and
``model_run`` quantizes the float input and dequantizes the output with the macros' scales.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import memory, qarith, reference
from .codegen.emit_c import KERNEL_FILES, ROUNDING_MACROS, RUNTIME_C, RegionEmitter, _c_float, _c_ints, c_safe, footprint, kernel_files
from .errors import UserError
from .partition import region_functions
from .pipeline import CompiledModel


class ExportError(UserError):
    """The model cannot be written as standalone C (ops on the host, several regions, ...)."""


@dataclass(frozen=True)
class ExportSummary:
    directory: Path
    workspace_bytes: int
    constant_bytes: int  # weights, biases, requantization constants, tables
    files: list[str]
    vectors: int  # golden input / output pairs in test_model.c


def export_c(compiled: CompiledModel, directory: str | os.PathLike, inputs: np.ndarray) -> ExportSummary:
    """Write `compiled` as a C99 project into `directory`, with `inputs` (stacked on axis 0) as
    the golden vectors of test_model.c."""
    if compiled.host_ops:
        listed = "\n".join(f"  - {h['description']}" for h in compiled.host_ops)
        raise ExportError(f"export-c needs every op in int8; {len(compiled.host_ops)} run on the host:\n{listed}")
    regions = region_functions(compiled.module)
    if len(regions) != 1:
        raise ExportError(f"export-c needs one region, the model has {len(regions)}")
    qgraphs = reference.quantized_regions(compiled.module)
    ((symbol, qgraph),) = qgraphs.items()
    g = qgraph.graph
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise ExportError(f"export-c needs one input and one output (the model has {len(g.inputs)} inputs and "
                          f"{len(g.outputs)} outputs)")
    int8_in, int8_out = g.input_dtype(0) == "int8", g.output_dtype(0) == "int8"

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    emitter = RegionEmitter(symbol, qgraph, "portable", "c99")
    region_c = emitter.emit()
    arena, constants = footprint(qgraph)
    q_in, q_out = qgraph.quants[g.inputs[0]], qgraph.quants[g.outputs[0]]
    in_shape, out_shape = emitter._interface_shape(g.inputs[0]), emitter._interface_shape(g.outputs[0])
    # An int8 interface: model_run converts the floats in codes kept after the arena.
    codes = {"input": arena} if int8_in else {}
    if int8_out:
        codes["output"] = arena + (memory.aligned(math.prod(in_shape)) if int8_in else 0)
    workspace = arena + (memory.aligned(math.prod(in_shape)) if int8_in else 0) + (
        memory.aligned(math.prod(out_shape)) if int8_out else 0)

    files: dict[str, str] = {
        "model.h": _model_h(workspace, in_shape, out_shape, q_in, q_out, len(emitter.labels), int8_in or int8_out),
        "model.c": _model_c(symbol, region_c, emitter.labels, codes),
        "test_model.c": _test_model_c(compiled, qgraph, inputs),
        "CMakeLists.txt": _CMAKE.replace("@KERNELS@", " ".join(KERNEL_FILES + ["serial.c"])),
    }
    rounding = ROUNDING_MACROS[qgraph.format.rounding]
    for path in kernel_files() + [RUNTIME_C / "include" / "byoc_int8_model.h", RUNTIME_C / "model" / "serial.c"]:
        text = path.read_text()
        if path.name == "byoc_int8.h":  # configured for the model: its rounding is the default
            default = "#define B8_ROUNDING B8_ROUND_TFLITE"
            if default not in text:
                raise RuntimeError("byoc_int8.h no longer sets a default B8_ROUNDING")
            text = text.replace(default, f"#define B8_ROUNDING {rounding}")
        files[path.name] = text
    for name, text in files.items():
        (directory / name).write_text(text)
    return ExportSummary(directory, workspace, constants, sorted(files), len(inputs))


def _model_h(workspace: int, in_shape, out_shape, q_in: qarith.ActivationQuant, q_out: qarith.ActivationQuant,
             layers: int, int8_interface: bool) -> str:
    run_doc = ("/* Float input (MODEL_INPUT_SIZE values) to float output (MODEL_OUTPUT_SIZE values). */"
               if not int8_interface else
               "/* The model's interface is int8 (model_run_int8). This entry takes and returns floats: the input\n"
               " * is quantized and the output dequantized with the scales and zero points above. */")
    return f"""/* Generated by byoc_int8 export-c. Do not edit. */
#ifndef MODEL_H_
#define MODEL_H_

#include <stdint.h>

/* Caller-owned scratch for one run: MODEL_WORKSPACE_BYTES, 64-byte aligned. */
#define MODEL_WORKSPACE_BYTES {workspace}

/* The input and output, in the layout the compiled library takes and returns them (row-major),
 * with the int8 quantization model_run_int8 reads and writes: real = scale * (q - zero_point). */
#define MODEL_INPUT_RANK {len(in_shape)}
#define MODEL_INPUT_SHAPE {{{_c_ints(in_shape)}}}
#define MODEL_INPUT_SIZE {math.prod(in_shape)}
#define MODEL_INPUT_SCALE {_c_float(q_in.scale)}
#define MODEL_INPUT_ZERO_POINT {q_in.zero_point}
#define MODEL_OUTPUT_RANK {len(out_shape)}
#define MODEL_OUTPUT_SHAPE {{{_c_ints(out_shape)}}}
#define MODEL_OUTPUT_SIZE {math.prod(out_shape)}
#define MODEL_OUTPUT_SCALE {_c_float(q_out.scale)}
#define MODEL_OUTPUT_ZERO_POINT {q_out.zero_point}

/* What model_run and model_run_int8 return. */
#define MODEL_OK 0
#define MODEL_ERROR_KERNEL 1          /* a kernel refused its arguments (a code generator bug) */
#define MODEL_ERROR_NONFINITE_INPUT 2 /* the float input holds NaN or infinity */

/* Bring-up: when set, called after every kernel call with its index (0 .. MODEL_LAYERS - 1) and
 * its int8 output (NHWC), `size` bytes; model_layer_names[index] says what the call is. */
#define MODEL_LAYERS {layers}
extern void (*model_layer_hook)(int32_t index, const int8_t* output, int32_t size);
extern const char* const model_layer_names[MODEL_LAYERS];

{run_doc}
int model_run(const float* input, float* output, void* workspace);
/* The same on int8 codes: the input quantized with MODEL_INPUT_SCALE / _ZERO_POINT, the output
 * in MODEL_OUTPUT_SCALE / _ZERO_POINT. */
int model_run_int8(const int8_t* input, int8_t* output, void* workspace);

#endif /* MODEL_H_ */
"""


def _model_c(symbol: str, region_c: str, labels: list[str], codes: dict[str, int]) -> str:
    """`codes`: workspace offsets of the int8 input / output codes model_run converts, for an
    int8 interface."""
    names = ",\n  ".join(c_safe(label, "string") for label in labels)
    run = "  return model_call(input, output, workspace, 0);"
    if codes:
        lines = []
        call_in, call_out = "input", "output"
        if "input" in codes:
            lines += [f"  int8_t* const input_codes = (int8_t*)workspace + {codes['input']};",
                      "  if (b8_quantize_f32(MODEL_INPUT_SCALE, MODEL_INPUT_ZERO_POINT, NULL, MODEL_INPUT_SIZE, input, "
                      "input_codes) != B8_OK)",
                      "    return MODEL_ERROR_NONFINITE_INPUT;"]
            call_in = "input_codes"
        if "output" in codes:
            lines.insert(0, f"  int8_t* const output_codes = (int8_t*)workspace + {codes['output']};")
            call_out = "output_codes"
        lines.append(f"  const int status = model_call({call_in}, {call_out}, workspace, 0);")
        if "output" in codes:
            lines += ["  if (status == MODEL_OK)",
                      "    b8_dequantize_f32(MODEL_OUTPUT_SCALE, MODEL_OUTPUT_ZERO_POINT, NULL, MODEL_OUTPUT_SIZE, "
                      "output_codes, output);"]
        run = "\n".join(lines + ["  return status;"])
    return f"""/* Generated by byoc_int8 export-c. Do not edit. */
#include <string.h>

#include "byoc_int8_model.h"
#include "model.h"

void (*model_layer_hook)(int32_t index, const int8_t* output, int32_t size) = NULL;
const char* const model_layer_names[MODEL_LAYERS] = {{
  {names}}};

{region_c}
static int model_call(const void* input, void* output, void* workspace, int32_t int8_io) {{
  const void* inputs[1];
  void* outputs[1];
  int32_t where = 0;
  inputs[0] = input;
  outputs[0] = output;
  return {symbol}_run(inputs, outputs, (int8_t*)workspace, int8_io, &where);
}}

int model_run(const float* input, float* output, void* workspace) {{
{run}
}}

int model_run_int8(const int8_t* input, int8_t* output, void* workspace) {{
  return model_call(input, output, workspace, 1);
}}
"""


def _floats(values: np.ndarray) -> str:
    """float32 values as exact hex literals, eight to a line."""
    flat = [_c_float(v) for v in np.asarray(values, np.float32).ravel()]
    return ",\n".join(", ".join(flat[i : i + 8]) for i in range(0, len(flat), 8))


def _test_model_c(compiled: CompiledModel, qgraph, inputs: np.ndarray) -> str:
    """Golden vectors: each input, the integer reference's float output, and the same pair as int8
    codes; test_model runs both entry points and compares every byte. Inputs are floats, or
    codes for an int8 interface (its float input is their dequantized values)."""
    g = qgraph.graph
    q_in, q_out = qgraph.quants[g.inputs[0]], qgraph.quants[g.outputs[0]]
    int8_in, int8_out = g.input_dtype(0) == "int8", g.output_dtype(0) == "int8"
    rounding = qgraph.format.rounding
    blocks = []
    for i, x in enumerate(inputs):
        x = x[None] if x.ndim == len(compiled.module["main"].params[0].ty.shape.values) - 1 else x
        if int8_in:
            codes_in = np.asarray(x, np.int8)
            x = qarith.dequantize_tensor(codes_in, q_in)
            assert np.array_equal(qarith.quantize_tensor(x, q_in, rounding), codes_in)  # model_run's round trip
        else:
            x = np.ascontiguousarray(x, dtype=np.float32)
            codes_in = qarith.quantize_tensor(x, q_in, rounding)
        out, _ = compiled.run_reference(codes_in if int8_in else x)
        if int8_out:
            codes_out = np.asarray(out, np.int8)
            expected = qarith.dequantize_tensor(codes_out, q_out)
        else:
            expected = np.asarray(out, np.float32)
            codes_out = np.clip(np.rint(expected.astype(np.float64) / np.float32(q_out.scale)) + q_out.zero_point, -128, 127)
        blocks.append(
            f"static const float input{i}[MODEL_INPUT_SIZE] = {{\n{_floats(x)}}};\n"
            f"static const float expected{i}[MODEL_OUTPUT_SIZE] = {{\n{_floats(expected)}}};\n"
            f"static const int8_t input{i}_q[MODEL_INPUT_SIZE] = {{{_c_ints(codes_in)}}};\n"
            f"static const int8_t expected{i}_q[MODEL_OUTPUT_SIZE] = {{{_c_ints(codes_out)}}};\n"
        )
    count = len(inputs)
    table = ", ".join(f"{{input{i}, expected{i}, input{i}_q, expected{i}_q}}" for i in range(count))
    return f"""/* Generated by byoc_int8 export-c: golden vectors from the integer reference. Exits 0 when
 * model_run and model_run_int8 reproduce every byte of them. */
#include <stdio.h>
#include <string.h>

#include "model.h"

{"".join(blocks)}
typedef struct {{
  const float *input, *expected;
  const int8_t *input_q, *expected_q;
}} golden;

static const golden vectors[{count}] = {{{table}}};

/* The workspace: MODEL_WORKSPACE_BYTES, 64-byte aligned, with no heap (C99 has no alignas). */
static union {{
  double align;
  unsigned char bytes[MODEL_WORKSPACE_BYTES + 64];
}} workspace_storage;

static float output[MODEL_OUTPUT_SIZE];
static int8_t output_q[MODEL_OUTPUT_SIZE];

/* test_model --layers DIR: each layer's output against DIR/layerNNNN.bin (byoc-int8 --vectors
 * DIR, for vector 0); names the first layer whose bytes differ. */
static const char* layers_dir = NULL;
static int first_bad_layer = -1, layers_checked = 0;

static void check_layer(int32_t index, const int8_t* output, int32_t size) {{
  char path[4096];
  FILE* file;
  int32_t i;
  ++layers_checked;
  if (first_bad_layer >= 0) return;
  snprintf(path, sizeof path, "%s/layer%04d.bin", layers_dir, (int)index);
  if (!(file = fopen(path, "rb"))) {{
    printf("layer %d (%s): cannot read %s\\n", (int)index, model_layer_names[index], path);
    first_bad_layer = index;
    return;
  }}
  for (i = 0; i < size; ++i) {{
    const int c = fgetc(file);
    if (c == EOF || (int8_t)(c - (c > 127 ? 256 : 0)) != output[i]) {{
      printf("first differing layer: %d (%s), byte %d: %d, expected %d\\n", (int)index, model_layer_names[index],
             (int)i, output[i], c == EOF ? -999 : c - (c > 127 ? 256 : 0));
      first_bad_layer = index;
      break;
    }}
  }}
  fclose(file);
}}

static int check_layers(const char* directory, void* workspace) {{
  layers_dir = directory;
  model_layer_hook = check_layer;
  if (model_run(vectors[0].input, output, workspace) != MODEL_OK) {{
    printf("model_run failed\\n");
    return 1;
  }}
  model_layer_hook = NULL;
  if (first_bad_layer >= 0) return 1;
  printf("layers: %d of %d checked, all equal\\n", layers_checked, MODEL_LAYERS);
  return layers_checked == MODEL_LAYERS ? 0 : 1;
}}

static int first_difference(const unsigned char* a, const unsigned char* b, size_t size) {{
  size_t i;
  for (i = 0; i < size; ++i)
    if (a[i] != b[i]) return (int)i;
  return -1;
}}

int main(int argc, char** argv) {{
  unsigned char* base = workspace_storage.bytes;
  void* workspace = base + (64 - (size_t)base % 64) % 64;
  int failures = 0, i;
  if (argc == 3 && strcmp(argv[1], "--layers") == 0) return check_layers(argv[2], workspace);
  if (argc != 1) {{
    printf("usage: %s [--layers DIR]\\n", argv[0]);
    return 2;
  }}
  for (i = 0; i < {count}; ++i) {{
    int status = model_run(vectors[i].input, output, workspace), at;
    if (status != MODEL_OK) {{
      printf("vector %d: model_run returned %d\\n", i, status);
      ++failures;
    }} else if ((at = first_difference((const unsigned char*)output, (const unsigned char*)vectors[i].expected,
                                       sizeof output)) >= 0) {{
      printf("vector %d: model_run output differs at byte %d (value %d)\\n", i, at, at / (int)sizeof(float));
      ++failures;
    }}
    status = model_run_int8(vectors[i].input_q, output_q, workspace);
    if (status != MODEL_OK) {{
      printf("vector %d: model_run_int8 returned %d\\n", i, status);
      ++failures;
    }} else if ((at = first_difference((const unsigned char*)output_q, (const unsigned char*)vectors[i].expected_q,
                                       sizeof output_q)) >= 0) {{
      printf("vector %d: model_run_int8 output differs at byte %d: %d, expected %d\\n", i, at, output_q[at],
             vectors[i].expected_q[at]);
      ++failures;
    }}
  }}
  printf("%s: %d vectors, %d failures\\n", failures ? "FAILED" : "passed", {count}, failures);
  return failures ? 1 : 0;
}}
"""


_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(byoc_int8_model C)
set(CMAKE_C_STANDARD 99)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
file(GLOB KERNELS @KERNELS@)
add_library(model STATIC model.c ${KERNELS})
target_include_directories(model PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(model PRIVATE -Wall -Wextra -Werror -pedantic)
target_link_libraries(model PUBLIC m)
add_executable(test_model test_model.c)
target_compile_options(test_model PRIVATE -Wall -Wextra -Werror -pedantic)
target_link_libraries(test_model PRIVATE model)
enable_testing()
add_test(NAME test_model COMMAND test_model)
"""
