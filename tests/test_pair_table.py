"""Large adds on the host run by a table of their results at every input pair (b8_pair_lut_s8),
built from the reference's arithmetic; small adds and the standalone C keep the arithmetic."""

import re

import numpy as np
import torch
from torch import nn

from byoc_int8 import reference
from byoc_int8.codegen import emit_c
from byoc_int8.export import export_c
from byoc_int8.pipeline import compile_model, evaluate


class TwoResiduals(nn.Module):
    """One residual add of 8 x 64 x 64 values (large enough for a table), then one of 8 x 16 x 16."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(x + self.a(x))
        y = nn.functional.max_pool2d(y, 4)
        return y + self.b(y)


def test_large_adds_run_by_their_pair_table_bit_exact(tmp_path):
    torch.manual_seed(0)
    model = TwoResiduals().eval()
    data = np.random.default_rng(0).standard_normal((11, 8, 64, 64)).astype(np.float32)
    compiled = compile_model(model, data[:8], simd="portable")
    (symbol, qgraph), = reference.quantized_regions(compiled.module).items()
    # The SIMD builds keep the arithmetic: their add in float costs less than the table's cache misses.
    for simd, by_table in (("portable", True), ("avx2", False), ("avxvnni", False), ("avx512bw", False),
                           ("avx512vnni", False)):
        source = emit_c.emit_module([(symbol, qgraph)], simd=simd).model_c
        jobs = re.findall(r"b8_add_job job = \{&ap, (\d+), [^}]*, (\w+)\};", source)
        assert [(int(size), table != "NULL") for size, table in jobs] == [(32768, by_table), (2048, False)], simd
    report = evaluate(compiled, model, data[8:], latency_runs=1, layers=[])  # the portable build, by table
    assert report["bit_exact"] and report["max_lsb_diff"] == 0
    export_c(compiled, tmp_path, data[8:9])  # firmware: no 64 KiB tables
    assert "pair_table" not in (tmp_path / "model.c").read_text()
