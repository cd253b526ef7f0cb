"""The ``ccompiler`` external codegen: quantized regions -> one object file, a TVM static library
module that ``export_library`` links into the ``.so``.

Importing this package registers ``relax.ext.ccompiler``, which ``relax.transform.RunCodegen``
calls with every function annotated ``Codegen="ccompiler"``. Option ``simd`` ("amx", "avx512vnni",
"avx512bw", "avxvnni", "avx2" or "portable"; default: the fastest this machine runs) selects the
kernels compiled in; option ``kernels`` "external" leaves them out, for a kernel library linked at
export.
"""

from __future__ import annotations

import tvm_ffi

from ..quantize import quantized_region
from .emit_c import emit_module
from .objects import compile_module

__all__ = ["emit_module", "compile_module", "ccompiler_codegen"]


@tvm_ffi.register_global_func("relax.ext.ccompiler", override=True)
def ccompiler_codegen(functions, options, constant_names):
    regions = []
    for func in functions:
        symbol = str(func.attrs["global_symbol"])
        regions.append((symbol, quantized_region(symbol, func)))
    if not regions:
        return []
    # RunCodegen(target_options={"ccompiler": {"simd": "portable", "kernels": "external"}}) picks the kernels.
    simd = str(options["simd"]) if options is not None and "simd" in options else None
    kernels = str(options["kernels"]) if options is not None and "kernels" in options else "builtin"
    return [compile_module(emit_module(regions, simd, kernels))]
