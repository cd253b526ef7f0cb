"""Accelerator profiles: the ops, numbers and limits an engine has, read by every stage."""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from byoc_int8 import profiles, reference
from byoc_int8.codegen.emit_c import RegionEmitter, footprint
from byoc_int8.partition import Int8OnlyError
from byoc_int8.pipeline import compile_model, evaluate
from byoc_int8.qarith import NumberFormat


@pytest.mark.parametrize("kind, needs", [
    ("conv2d_bias_relu", {"conv2d", "relu"}),
    ("conv2d_bias_clip", {"conv2d", "clip"}),
    ("dense_bias", {"dense"}),
    ("add_relu", {"add", "relu"}),
    ("max_pool2d", {"max_pool2d"}),
    ("global_avg_pool2d", {"global_avg_pool2d"}),
    ("adaptive_avg_pool2d", {"avg_pool2d"}),
    ("lut_hardswish", {"lut"}),
    ("qdq_conv2d_bias_clip", {"conv2d", "clip"}),
    ("qdq_mean", {"global_avg_pool2d"}),
    ("qdq_concat3", {"concat"}),
    ("max_pool2d_int8", {"max_pool2d"}),
    ("quantize", set()),
])
def test_a_composite_needs_its_op_and_its_fused_activation(kind, needs):
    assert profiles.composite_ops(kind) == needs


def test_user_profile_from_toml(tmp_path):
    path = tmp_path / "npu.toml"
    path.write_text('name = "npu"\nops = ["conv2d", "relu"]\n[numbers]\nactivations = "symmetric"\nrounding = "single"\n'
                    'weights = "per-tensor"\nweight_bits = 7\n[limits]\nmax_kernel = 3\nmemory_bytes = 4096\n')
    profile = profiles.load_profile(path)
    assert profile.ops == {"conv2d", "relu"} and profile.limits == {"max_kernel": 3, "memory_bytes": 4096}
    assert profile.number_format == NumberFormat("symmetric", "single", "per-tensor", "any", weight_bits=7)
    assert profiles.load_profile("pow2-npu") is profiles.BUILTIN_PROFILES["pow2-npu"]


@pytest.mark.parametrize("text, message", [
    ('ops = ["conv3d"]', r"unknown ops \['conv3d'\]"),
    ("[limits]\nmax_kernel = -1", "bad limits"),
    ("[numbers]\nscales = \"log\"", "unknown scales 'log'"),
    ("[numbers]\nweight_bits = 6", "unknown weight_bits 6"),
    ("[numbers]\nbits = 4", r"\[numbers\] takes"),
    ("colour = 1", r"unknown keys \['colour'\]"),
    ("ops = [", "not valid TOML"),
])
def test_bad_user_profiles_are_refused_with_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        profiles.load_profile(path)


def test_unknown_profile_name():
    with pytest.raises(ValueError, match="unknown profile 'npu9'.*pow2-npu"):
        profiles.load_profile("npu9")


class SmallCNN(nn.Module):
    """conv + relu, max pool, a residual add, a 5x5 stride-2 conv, flatten, dense."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 12, 5, stride=2, padding=2)
        self.fc = nn.Linear(12 * 4 * 4, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(x + self.conv2(x))
        return self.fc(torch.relu(self.conv3(x)).flatten(1))


def _calibration() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)


@pytest.mark.parametrize("simd", ["portable", None])  # None: the fastest build this CPU runs
def test_pow2_npu_requantizes_by_shifts_with_per_tensor_power_of_two_weights(simd):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with pytest.raises(Int8OnlyError, match=r"(?s)1 op\(s\).*relax\.reshape.*profile pow2-npu: ops has no 'reshape'"):
        compile_model(model, _calibration(), int8_only=True, profile="pow2-npu")
    compiled = compile_model(model, _calibration(), profile="pow2-npu", simd=simd)  # the flatten runs on the host
    assert compiled.regions == 2
    report = evaluate(compiled, model, _calibration()[:3], latency_runs=1, layers=[])
    assert report["bit_exact"] and report["cosine_vs_float"] > 0.99
    # The generated C has no requantization multiplier: NULL multiplier arrays, B8_SHIFT_ONLY adds.
    regions = list(reference.quantized_regions(compiled.module).items())
    model_c = "\n".join(RegionEmitter(symbol, qgraph, "portable").emit() for symbol, qgraph in regions)
    assert "_mult" not in model_c and str(1 << 30) not in model_c
    assert model_c.count("static const b8_requant_params rq = {NULL, ") == 4
    assert model_c.count("B8_SHIFT_ONLY") == 3  # the residual add's three factors
    qgraphs = reference.quantized_regions(compiled.module).values()
    weighted = [q for qgraph in qgraphs for q in qgraph.nodes if q.op in ("conv2d", "dense")]
    assert len(weighted) == 4
    for qgraph in qgraphs:
        assert qgraph.format == profiles.BUILTIN_PROFILES["pow2-npu"].number_format
        for scale in [q.scale for q in qgraph.quants.values()]:
            assert math.frexp(scale)[0] == 0.5  # a power of two
    for q in weighted:
        assert set(np.asarray(q.params["multiplier"]).tolist()) == {1 << 30}  # requantization is a shift
        assert len(set(np.asarray(q.params["shift"]).tolist())) == 1  # per-tensor weights: one factor


def test_profile_ops_and_limits_refuse_with_the_profile_key(tmp_path):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    path = tmp_path / "tiny.toml"
    path.write_text('name = "tiny"\nops = ["conv2d", "relu", "add", "max_pool2d", "dense"]\n'
                    "[limits]\nmax_kernel = 3\nmemory_bytes = 2048\n")
    with pytest.raises(Int8OnlyError) as refused:
        compile_model(model, _calibration(), int8_only=True, profile=path)
    text = str(refused.value)
    assert "profile tiny: limits.max_kernel is 3, this conv2d has a 5x5 kernel" in text
    # conv1: 3x16x16 in (768 bytes), 8x16x16 out (2048), a 3x3x3 patch of scratch (27, 64 aligned)
    assert "profile tiny: limits.memory_bytes is 2048, this conv2d alone needs 2880 bytes (its int8" in text
    # By default the refused ops run on the host, and the rest is still int8 and exact.
    compiled = compile_model(model, _calibration(), profile=path)
    assert {h["op"] for h in compiled.host_ops} >= {"relax.nn.conv2d"} and compiled.regions >= 1
    assert evaluate(compiled, model, _calibration()[:2], latency_runs=1, layers=[])["bit_exact"]


def test_a_region_over_the_memory_budget_is_split_into_regions_that_fit(tmp_path):
    """The whole SmallCNN region plans a 3072-byte arena: a budget of 3072 keeps one region, one
    byte less splits it (the partitioner checks the same plan the generated C allocates), and each
    part fits, stays int8 and bit-exact."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    arenas = {}
    for budget in (3072, 3071, 2900):
        path = tmp_path / f"sram{budget}.toml"
        path.write_text(f'name = "sram"\nops = {sorted(profiles.DEFAULT_PROFILE.ops)!r}\n'
                        f"[limits]\nmemory_bytes = {budget}\n".replace("'", '"'))
        compiled = compile_model(model, _calibration(), profile=path, int8_only=True)
        arenas[budget] = [footprint(q)[0] for q in reference.quantized_regions(compiled.module).values()]
        assert max(arenas[budget]) <= budget and compiled.ops_offloaded == compiled.ops_total
        assert evaluate(compiled, model, _calibration()[:2], latency_runs=1, layers=[])["bit_exact"]
    assert arenas[3072] == [3072]
    assert len(arenas[3071]) == 2 and len(arenas[2900]) >= 2


def test_refusal_reasons_belong_to_their_own_ops_when_names_repeat():
    """torch.export gives ResNet-18's main several variables of one name (lv15 twice, ...): each
    host op still gets its own refusal (a conv2d's memory reason speaks of a conv2d, with its bytes)."""
    import torchvision
    from byoc_int8 import frontend, partition

    torch.manual_seed(0)
    mod = frontend.import_model(torchvision.models.resnet18().eval(), (torch.randn(1, 3, 224, 224),))
    names = [b.var.name for block in mod["main"].body.blocks for b in block.bindings]
    assert len(set(names)) < len(names)
    host = partition.partition(mod, profile=profiles.load_profile("pow2-npu")).host_ops
    memory = [h for h in host if "limits.memory_bytes" in h.reason]
    assert len(memory) >= 10
    for h in memory:
        kind = h.op.removeprefix("relax.").removeprefix("nn.")
        assert f"this {kind}" in h.reason, h.describe()
    stem = next(h for h in host if h.op == "relax.nn.conv2d")  # 3x224x224 in, 64x112x112 out, 7x7x3 patch
    assert "alone needs 953536 bytes" in stem.reason
