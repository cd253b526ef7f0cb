"""Constant folding in numpy gives exactly what TVM's FoldConstant gives, without building."""

import numpy as np
import torch
import torch.nn as nn
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from byoc_int8.fold import fold_constants
from byoc_int8.frontend import export_model
from byoc_int8.models import randomize_batch_norm


def test_numpy_folding_equals_fold_constant_structurally_and_bitwise():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                          nn.Conv2d(8, 8, 3, groups=8), nn.BatchNorm2d(8, eps=1e-3), nn.Flatten(),
                          nn.Linear(8 * 4 * 4, 5)).eval()
    randomize_batch_norm(model, torch.Generator().manual_seed(1))
    mod = relax.transform.FoldBatchnormToConv2D()(from_exported_program(export_model(model, (torch.randn(1, 3, 8, 8),))))
    by_tvm = relax.transform.FoldConstant()(mod)["main"]
    folded = fold_constants(mod["main"])
    finished = relax.transform.FoldConstant()(tvm.IRModule({"main": folded}))["main"]
    tvm.ir.assert_structural_equal(finished, by_tvm)

    def constants(func) -> list[np.ndarray]:
        found = []
        relax.analysis.post_order_visit(func, lambda e: found.append(e.value.numpy()) if isinstance(e, tvm.ir.GenericConst) else None)
        return found

    ops = []
    relax.analysis.post_order_visit(folded, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    assert "relax.sqrt" not in ops and "relax.divide" not in ops  # folded here, not left to TVM
    assert len(constants(finished)) == len(constants(by_tvm)) > 3
    for ours, theirs in zip(constants(finished), constants(by_tvm)):
        assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()
