"""The C kernels (runtime_c/include/byoc_int8.h) through ctypes: the structs, the library loader,
one call wrapper per kernel and the integer reference's answer for the same call.

Shared by the kernel tests (tests/test_kernels_vs_reference.py, tests/test_layout_kernels.py,
tests/test_kernel_fuzz.py) and the fuzzer (benchmarks/fuzz_kernels.py, which puts tests/ on
sys.path). A *case* is a dict of plain values and numpy arrays that describes one kernel call
completely; ``run(lib, kernel, case)`` makes the call and returns (status, output),
``expected(kernel, case, rounding)`` computes what the integer reference (byoc_int8.reference and
byoc_int8.qarith) says the call returns, and ``check`` compares the two bit for bit.

This module imports neither byoc_int8 nor TVM at load time (``expected`` imports them when
called), so that a process running sanitized kernels (LD_PRELOAD=libasan.so, under which TVM
cannot load) can replay cases with it: ``python tests/kernel_calls.py replay CASES RESULTS LIB...``.
"""

from __future__ import annotations

import base64
import ctypes
import io
import math
import os
import pickle
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("portable", "avx2", "avxvnni", "avx512bw", "avx512vnni", "amx")
# Builds that take another's code paths: the AVX-512BW build is the AVX2 one with some of them on
# 512-bit vectors (the corrected form's tiles, Winograd), chosen alike but for its convolution's
# signed inputs (conv2d_paths).
SAME_PATHS = {"avx512bw": "avx2"}
ROUNDINGS = ("single", "tflite", "single-away")  # qarith.ROUNDINGS
# Tile shape of the SIMD convolutions (runtime_c/src/conv2d_s8.c): output pixels x channels.
TILES = {"avx2": (4, 16), "avxvnni": (6, 16), "avx512vnni": (8, 32), "amx": (32, 32)}
MAX_SEGMENTS = 16  # taller kernels are gathered, not read in place (B8_MAX_SEGMENTS)
CHUNK_WEIGHT_BYTES = 256 * 1024  # larger packed filters are read per tap, in chunks (B8_CHUNK_WEIGHT_BYTES)
# Channels per block of the SIMD depthwise convolution (int32 lanes, B8_DW_LANES) and the most
# taps it takes (B8_DW_MAX_TAPS; larger kernels, like other channel multipliers, run portable).
DEPTHWISE_LANES = {"avx2": 8, "avxvnni": 8, "avx512vnni": 16}
DEPTHWISE_MAX_TAPS = 64
DEPTHWISE_PIXELS = 4  # interior pixels computed together (B8_DW_PIXELS)
# Channels per wide block of the 3x3 depthwise (B8_DW_WIDE with AVX-512 VNNI, else b8_dw16_*).
WIDE_DEPTHWISE = {"avx2": 16, "avxvnni": 16, "avx512vnni": 64}
MAX_PATCH = 1 << 15  # longest patch or dense depth whose int32 accumulator cannot overflow
ESTIMATE_BOUND = 1 << 30  # accumulators within it skip the float estimate's cap (B8_ESTIMATE_BOUND)


def estimate_mode(case: dict, depth: int) -> str:
    """The float estimate's mode of a call whose sums are the bias plus `depth` products
    (b8_estimate_mode): "full" unless every accumulator is within ESTIMATE_BOUND, "clamped" where
    negative ones also give act_min (every multiplier positive, act_min >= the zero point)."""
    bias = case["bias"]
    largest = int(np.abs(bias.astype(np.int64)).max()) if bias is not None and bias.size else 0
    if largest + depth * 16384 > ESTIMATE_BOUND:
        return "estimate full"
    clamped = case["act"][0] >= case["output_zero_point"] and bool(np.all(case["multiplier"] > 0))
    return "estimate clamped" if clamped else "estimate bounded"

i8, i32, i64, f32 = ctypes.c_int8, ctypes.c_int32, ctypes.c_int64, ctypes.c_float
P = ctypes.POINTER


class Dims(ctypes.Structure):
    _fields_ = [("n", i32), ("h", i32), ("w", i32), ("c", i32)]


class RequantParams(ctypes.Structure):
    _fields_ = [("multiplier", P(i32)), ("shift", P(i32)), ("act_min", i32), ("act_max", i32),
                ("output_zero_point", i32)]


class DoubleRequantParams(ctypes.Structure):
    _fields_ = [("mantissa", P(i64)), ("exponent", P(i32)), ("act_min", i32), ("act_max", i32),
                ("output_zero_point", i32)]


class ConvParams(ctypes.Structure):
    _fields_ = [(n, i32) for n in ("stride_h", "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w",
                                   "groups", "pad_value")]


class PoolParams(ctypes.Structure):
    _fields_ = [(n, i32) for n in ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left",
                                   "dilation_h", "dilation_w")]


class AddParams(ctypes.Structure):
    _fields_ = [(n, i32) for n in ("left_shift", "input1_multiplier", "input1_shift", "input2_multiplier",
                                   "input2_shift", "output_multiplier", "output_shift", "act_min", "act_max",
                                   "input1_zero_point", "input2_zero_point", "output_zero_point")]


class MulParams(ctypes.Structure):
    _fields_ = [(n, i32) for n in ("multiplier", "shift", "input1_zero_point", "input2_zero_point",
                                   "output_zero_point", "act_min", "act_max")]


class Pixels(ctypes.Structure):
    _fields_ = [("begin", i32), ("end", i32)]


class Channels(ctypes.Structure):
    _fields_ = [("begin", i32), ("end", i32)]


def ptr(array: np.ndarray, ctype):
    assert array.flags["C_CONTIGUOUS"]
    return array.ctypes.data_as(ctypes.POINTER(ctype))


# Every exported function of byoc_int8.h: (result type, argument types). The mul parameters go as
# void* so that callers may pass a structure of their own with the same fields.
SIGNATURES = {
    "b8_conv2d_s8_packed_size": (i32, [P(ConvParams), P(Dims)]),
    "b8_conv2d_s8_pack_filter": (None, [P(ConvParams), P(Dims), P(i8), P(i8)]),
    "b8_conv2d_s8_scratch_size": (i32, [P(ConvParams), P(Dims)]),
    "b8_conv2d_s8_row_block": (i32, [P(ConvParams), P(Dims)]),
    "b8_conv2d_s8_channel_block": (i32, [P(ConvParams), P(Dims)]),
    "b8_conv2d_s8": (i32, [P(ConvParams), P(RequantParams), P(Dims), P(i8), i32, P(Dims), P(i8), P(i32), P(Dims),
                           P(i8), P(Pixels), P(i8)]),
    "b8_conv2d_s8_channels": (i32, [P(ConvParams), P(RequantParams), P(Dims), P(i8), i32, P(Dims), P(i8), P(i32),
                                    P(Dims), P(i8), P(Pixels), P(Channels), P(i8)]),
    "b8_depthwise_conv2d_s8": (i32, [P(ConvParams), P(RequantParams), P(Dims), P(i8), P(Dims), P(i8), P(i32),
                                     P(Dims), P(i8), P(Pixels)]),
    "b8_max_pool2d_s8": (i32, [P(PoolParams), P(Dims), P(i8), P(Dims), P(i8), P(Pixels)]),
    "b8_avg_pool2d_s8": (i32, [P(PoolParams), i32, i32, P(Dims), P(i8), P(Dims), P(i8)]),
    "b8_global_avg_pool_s8": (i32, [i32, i32, i32, i32, P(Dims), P(i8), P(i8)]),
    "b8_add_s8": (i32, [P(AddParams), i32, P(i8), P(i8), P(i8)]),
    "b8_dense_s8": (i32, [P(RequantParams), i32, i32, i32, P(i8), P(i8), P(i32), P(i8)]),
    "b8_dense_s8_double_requant": (i32, [P(DoubleRequantParams), i32, i32, i32, P(i8), P(i8), P(i32), P(i8)]),
    "b8_clip_s8": (i32, [i32, i32, i32, P(i8), P(i8)]),
    "b8_mul_s8": (i32, [ctypes.c_void_p, i32, i32, i32, i32, P(i8), P(i8), P(i8)]),
    "b8_lut_s8": (i32, [i32, P(i8), P(i8), P(i8)]),
    "b8_pair_lut_s8": (i32, [i32, P(i8), P(i8), P(i8), P(i8)]),
    "b8_concat_s8": (i32, [i32, P(P(i8)), P(i32), P(i32), P(i32), P(i32), i32, i32, P(i8)]),
    "b8_transpose_s8": (i32, [i32, P(i32), P(i32), P(i8), P(i8)]),
    "b8_slice_s8": (i32, [i32, P(i32), P(i32), P(i32), P(i32), P(i8), P(i8)]),
    "b8_pad_s8": (i32, [i32, P(i32), P(i32), i8, P(i8), P(i8)]),
    "b8_quantize_f32": (i32, [f32, i32, P(Dims), i32, P(f32), P(i8)]),
    "b8_quantize_f32_rows": (i32, [f32, i32, P(Dims), P(Pixels), P(f32), P(i8)]),
    "b8_dequantize_f32": (i32, [f32, i32, P(Dims), i32, P(i8), P(f32)]),
}


def library_path(build_dir: Path | str, variant: str, rounding: str) -> Path:
    return Path(build_dir) / f"libbyoc_int8_kernels_{variant}_{rounding.replace('-', '_')}.so"


def load(path: Path | str, variant: str, rounding: str) -> ctypes.CDLL:
    """One kernel build, every function typed; `lib.variant` and `lib.rounding` name the build.
    A function the library lacks (an older build's, compared by a benchmark) stays untyped and
    raises where it is called."""
    lib = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in SIGNATURES.items():
        if hasattr(lib, name):
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
    lib.variant, lib.rounding = variant, rounding
    return lib


def _i32(values) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int32)


def _requant(case: dict) -> RequantParams:
    act_min, act_max = case["act"]
    return RequantParams(ptr(case["multiplier"], i32), ptr(case["shift"], i32), act_min, act_max,
                         case["output_zero_point"])


def _ranges(case: dict) -> list:
    """The pixel ranges of a call, one call each (None: one call over all pixels)."""
    ranges = case.get("pixels")
    return [None] if ranges is None else [ctypes.byref(Pixels(int(b), int(e))) for b, e in ranges]


def channel_shares(case: dict, block: int) -> list[tuple[int, int]]:
    """The output channel ranges of a convolution's calls: all at once, or with
    case["channel_shares"] = k in k shares of whole blocks of `block` channels (the build's
    b8_conv2d_s8_channel_block), as the TVM adapter splits convolutions of few pixels over threads;
    shares may be empty where there are fewer blocks than shares."""
    cout, k = case["weight"].shape[0], case.get("channel_shares")
    if k is None:
        return [(0, cout)]
    blocks = -(-cout // block)
    cuts = [min(i * blocks // k * block, cout) for i in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def _channel_block(case: dict, variant: str) -> int:
    """b8_conv2d_s8_channel_block as the path model gives it: the SIMD tiles' channel blocks."""
    variant = SAME_PATHS.get(variant, variant)
    if variant == "portable" or case["groups"] != 1:
        return 1
    return 32 if variant in ("avx512vnni", "amx") else 16


def _covered(case: dict, total: int) -> np.ndarray:
    """Which output pixels the calls of a case write."""
    ranges = case.get("pixels")
    covered = np.zeros(total, bool)
    for begin, end in [(0, total)] if ranges is None else ranges:
        covered[max(begin, 0) : max(min(end, total), 0)] = True
    return covered


def conv2d_paths(case: dict, variant: str) -> set[str]:
    """The code paths of b8_conv2d_s8 (runtime_c/src/conv2d_s8.c) that a case takes in a kernel
    build, as that file chooses them: portable, or the SIMD tiles with their pixel and channel
    tiles (whole or partial), patches read per tap (large filters, in chunks of tiles), as the
    input's pixels (pointwise), or their rows read in place (a tile's row of windows stepped) or
    gathered (patches whose row padding would be a tenth of them or more: their rows gathered
    back to back, copied where the window is inside), signed or unsigned inputs (AVX2: where every
    weight lies in [-64, 64], weights shifted by 64 from 4 channel blocks and 64-byte patches on,
    whatever the inputs, else signed inputs offset by 128; other signed inputs by the sign trick,
    or in the corrected form from 4 channel blocks or 128 bytes of patch times blocks) and the
    epilogue of each channel tile (fused into the tile for whole blocks: 16 channels, and for VNNI
    also 32; else 8 lanes, or scalar). VNNI and AVX-VNNI: weights shifted by 128 where channel
    blocks x patch bytes reach 128 on patches read in place, else signed inputs offset by 128 (those
    of gathered patches as they are gathered)."""
    weight = case["weight"]
    # AVX-512BW: signed inputs in the corrected form wherever AVX2 would take the sign trick
    # (vpsignb has no 512-bit form), a last whole block alone on 512-bit vectors too.
    bw = variant == "avx512bw"
    variant = SAME_PATHS.get(variant, variant)
    if variant == "portable" or case["groups"] != 1:
        return {"portable"} | _share_paths(channel_shares(case, 1))
    if variant == "amx":  # patches of 32 bytes or more on AMX tiles, shorter ones on the VNNI tiles
        return _amx_conv2d_paths(case) if np.prod(weight.shape[1:]) >= 32 else conv2d_paths(case, "avx512vnni")
    if winograd_suits(case, variant):
        return _winograd_conv2d_paths(case, variant)
    tile_pixels, tile_channels = TILES[variant]
    cout, kh, kw, cin = weight.shape
    n, h, w = case["x"].shape[:3]
    oh, ow = case["out_hw"]
    (sh, sw), (_, left), (_, dw) = case["strides"], case["padding"], case["dilation"]
    paths = {"tile", "unsigned" if case["nonnegative"] and case["pad_value"] >= 0 else "signed"}
    row = -(-kw * cin // 4) * 4  # a kernel row's bytes, padded to whole 4-byte steps
    # Rows back to back where row padding would be a tenth of the patch or more, gathered.
    contiguous = (kh * row - -(-kh * kw * cin // 4) * 4) * 10 >= kh * row
    if contiguous:
        paths.add("contiguous patch")
        row = kw * cin
    elif (kw * cin) % 4:
        paths.add("row tail")  # read in place past the row's end (zero weights), or gathered
    seven_bit = np.abs(weight.astype(np.int32)).max(initial=0) <= 64
    depth = -(-kh * row // 4) * 4
    if variant in ("avx512vnni", "avxvnni") and contiguous and "signed" in paths:
        # gathered patches of signed inputs copied as a + 128, unsigned times w (never shifted)
        paths = paths - {"signed"} | {"signed patch offset"}
    elif variant in ("avx512vnni", "avxvnni") and not contiguous and -(-cout // tile_channels) * depth >= 128:
        # vpdpbusd: w + 128 as unsigned times a, whatever the inputs, per pixel 128 x the patch's
        # sum taken off, where channel blocks x patch bytes reach 128 (patches read in place)
        paths = paths - {"signed", "unsigned"} | {"shifted weights"}
    elif variant == "avxvnni" and "signed" in paths:
        # a + 128 as unsigned times w, any 8-bit weights (no int16 pair sums to saturate)
        paths = paths - {"signed"} | {"signed offset"}
    elif variant == "avx2" and seven_bit and cout > 3 * tile_channels and -(-kh * row // 4) * 4 >= 64:
        # 7-bit weights on 4 or more channel blocks and patches of 64 bytes or more, whatever the
        # inputs: w + 64 as unsigned times a, per pixel 64 x the patch's sum taken off
        paths = paths - {"signed", "unsigned"} | {"shifted weights"}
    elif variant == "avx2" and "signed" in paths and seven_bit:
        # other 7-bit weights: a + 128 as unsigned times w, the weight sums taken from the bias
        paths = paths - {"signed"} | {"signed offset"}
    elif variant == "avx2" and "signed" in paths and (bw or cout > 3 * tile_channels or
                                                      -(-cout // tile_channels) * -(-kh * row // 4) * 4 >= 128):
        # |a| times w ^ (a < 0), and per pixel the sum of |a| over a < 0, instead of the sign trick,
        # on 4 or more channel blocks, or where blocks x patch bytes reach 128 (AVX-512BW: always)
        paths = paths - {"signed"} | {"signed corrected"}
    if kh > MAX_SEGMENTS:
        paths.add("tall kernel")
    packed = -(-cout // tile_channels) * tile_channels * -(-kh * row // 4) * 4
    per_tap = cin % 4 == 0 and kh * kw <= MAX_SEGMENTS and packed > CHUNK_WEIGHT_BYTES
    in_place = not per_tap and not contiguous and dw == 1 and kh <= MAX_SEGMENTS
    copied = contiguous and dw == 1  # windows inside the input: rows copied 32 bytes at a time
    read = -(-row // 32) * 32 if copied else row  # bytes read from a window's last row
    # 1x1, stride 1, no padding, whole 4-byte steps: each pixel's patch is its input pixel.
    pointwise = (kh, kw, sh, sw, case["padding"][0], left) == (1, 1, 1, 1, 0, 0) and (h, w) == (oh, ow) and cin % 4 == 0
    tiles = 0
    ranges = [(max(begin, 0), min(end, n * oh * ow))
              for begin, end in ([(0, n * oh * ow)] if case.get("pixels") is None else case["pixels"])]
    for begin, end in ranges:
        for first in range(begin, end, tile_pixels):
            tiles += 1
            paths.add("whole pixel tile" if end - first >= tile_pixels else "partial pixel tile")
            if end - first == 1 and variant in ("avx512vnni", "avxvnni"):
                paths.add("one-pixel tile")  # its own loop, four steps at a time
        if per_tap:
            # Every tap read in place (the pad value's bytes outside the input), tiles in chunks.
            paths |= {"per tap"} if end > begin else set()
            paths |= {"several tiles per chunk"} if end - begin > tile_pixels else set()
        if pointwise:  # the input's pixels as patches, tiles in chunks
            paths |= {"pointwise"} if end > begin else set()
            paths |= {"pointwise, several tiles per chunk"} if end - begin > tile_pixels else set()
        if per_tap or pointwise:
            continue
        pixel = np.arange(begin, max(begin, end))
        ix0 = pixel % ow * sw - left
        inside = (in_place or copied) & (ix0 >= 0) & (ix0 + kw <= w)
        # In place, the last kernel row inside the input must not be read past the input's end.
        top = pixel // ow % oh * sh - case["padding"][0]
        last = np.minimum(top + (kh - 1) * case["dilation"][0], h - 1)
        last = last - (last - top) % case["dilation"][0] if kh > 1 else top
        read_end = ((pixel // (ow * oh) * h + last) * w + ix0) * cin + read
        overrun = inside & (last >= 0) & (last >= top) & (read_end > n * h * w * cin)
        paths |= {"read end gathered"} if overrun.any() else set()
        inside &= ~overrun
        if copied:  # every row inside too
            inside &= (top >= 0) & (top + (kh - 1) * case["dilation"][0] < h)
        paths |= {"rows copied" if copied else "in place"} if inside.any() else set()
        paths |= {"gathered"} if (~inside).any() else set()
        # A whole tile in one output row with every window inside, its rows read in place: the
        # rows of each pixel are stepped from the previous pixel's, with no test per pixel.
        first = np.arange(begin, end - tile_pixels + 1, tile_pixels)
        ox, oy = first % ow, first // ow % oh
        x0, y0 = ox * sw - left, oy * sh - case["padding"][0]
        y_last = y0 + (kh - 1) * case["dilation"][0]
        tile_read_end = ((first // (ow * oh) * h + y_last) * w + x0 + (tile_pixels - 1) * sw) * cin + read
        row_tile = ((in_place or copied) & (ox + tile_pixels <= ow) & (x0 >= 0)
                    & (x0 + (tile_pixels - 1) * sw + kw <= w) & (y0 >= 0) & (y_last < h)
                    & (tile_read_end <= n * h * w * cin))
        paths |= {"rows copied, row of windows" if copied else "row of windows"} if row_tile.any() else set()
    if tiles > 1:
        paths.add("several pixel tiles")
    vector = cout % 8 == 0 and bool(np.all(case["shift"] <= 0))
    # AVX2's corrected form runs two whole, fused blocks at a time (b8_tile_pair), two pixels per
    # pass: a tile of at most 2 pixels takes one pass. Each channel share goes from its first
    # block: pairs while two blocks of it remain, its last 24 channels as a whole block and a
    # narrow one of 8 (b8_tile_pair_narrow, whose 8 channels requantize in registers too).
    # AVX-512BW's corrected tiles take the tile's 4 pixels at once, a last whole block too.
    shares = channel_shares(case, tile_channels)
    pairing = "signed corrected" in paths and vector
    # The AVX2 tiles' epilogue (b8_block_finish) takes the call's estimate mode, and so do
    # AVX-512BW's pairs (b8_tile_pair's b8_block32_finish_as), not its last blocks (b8_tile_block).
    mode = estimate_mode(case, kh * kw * cin) if variant == "avx2" else None
    block_mode = None if bw else mode
    for begin, end in shares:
        oc0 = begin
        while oc0 < end:
            left_over = end - oc0
            if pairing and (left_over >= 2 * tile_channels or left_over == tile_channels + 8):
                narrow = left_over == tile_channels + 8
                paths.add("corrected pair tile")
                paths |= _epilogue_paths(case, vector, tile_channels, (16,), block_mode if narrow else mode)
                if narrow:
                    paths |= {"corrected narrow pair", "whole channel tile", "partial channel tile"}
                else:
                    paths.add("whole channel tile")
                oc0 += 2 * tile_channels
                continue
            channels = min(tile_channels, left_over)
            paths.add("whole channel tile" if channels == tile_channels else "partial channel tile")
            block = bw and pairing and channels == tile_channels
            if block:
                paths.add("corrected block tile")  # b8_tile_block: one vector of 16 channels per step
            if variant == "avx512vnni" and channels <= 16:
                paths.add("narrow channel tile")  # b8_tile_narrow: one vector of 16 channels per step
            paths |= _epilogue_paths(case, vector, channels, (16, 32) if variant == "avx512vnni" else (16,),
                                     block_mode if block else mode)
            oc0 += tile_channels
    if "corrected pair tile" in paths and not bw:  # AVX2's pairs of pixels (AVX-512BW's take 4 at once)
        counts = [min(tile_pixels, end - first) for begin, end in ranges for first in range(begin, end, tile_pixels)]
        paths |= {"corrected pair, one pass"} if any(count <= 2 for count in counts) else set()
    if cout > tile_channels:
        paths.add("several channel tiles")
    return paths | _share_paths(shares)


def _share_paths(shares: list[tuple[int, int]]) -> set[str]:
    """A convolution computed in channel shares (some of them possibly empty)."""
    if len(shares) == 1:
        return set()
    return {"channel shares"} | ({"empty channel share"} if any(end == begin for begin, end in shares) else set())


def _epilogue_paths(case: dict, vector: bool, channels: int, fused: tuple[int, ...],
                    mode: str | None = None) -> set[str]:
    """The output stage of a block of `channels`: requantized in registers and packed to bytes for
    the `fused` widths ("clamped" when act_min / act_max are not the int8 limits: the byte clamp
    after the saturating packs; `mode`, the estimate's where the kernel has modes), else 8 channels
    at a time where `vector` (no shift > 0, channels a multiple of 8), else scalar."""
    if vector and channels in fused:
        clamped = {"epilogue fused clamped"} if tuple(case["act"]) != (-128, 127) else set()
        return {f"epilogue fused x{channels}"} | clamped | ({mode} if mode else set())
    return {"epilogue x8" if vector else "epilogue scalar"}


def _amx_conv2d_paths(case: dict) -> set[str]:
    """conv2d_paths of the AMX build on a CPU and OS that grant AMX (b8_conv2d_s8_amx): groups of
    32 pixels (one A tile where at most 16 remain), read in place for 1x1 stride-1 unpadded
    convolutions where the tiles' rows (16 or 32 pixels, a patch's bytes rounded up to 64 from
    each) stay inside the input, else each pixel's patch rows copied (window inside the input, no
    dilation across, the 64-byte copies of its last row inside the input) or gathered; blocks of
    32 channels (narrow: at most 16) and their epilogue (fused for blocks of exactly 32 or 16
    channels, else 8 channels at a time, or scalar)."""
    weight = case["weight"]
    cout, kh, kw, cin = weight.shape
    n, h, w = case["x"].shape[:3]
    oh, ow = case["out_hw"]
    (sh, sw), (top, left), (dh, dw) = case["strides"], case["padding"], case["dilation"]
    group_pixels, block = TILES["amx"]
    depth = -(-kh * kw * cin // 64) * 64
    pointwise = (kh, kw, sh, sw, top, left) == (1, 1, 1, 1, 0, 0) and (h, w) == (oh, ow)
    paths, groups = {"amx"}, 0
    for begin, end in [(0, n * oh * ow)] if case.get("pixels") is None else case["pixels"]:
        begin, end = max(begin, 0), min(end, n * oh * ow)
        in_place = np.zeros(max(end - begin, 0), bool)
        for first in range(begin, end, group_pixels):
            groups += 1
            count = min(group_pixels, end - first)
            paths.add("whole pixel group" if count == group_pixels else "partial pixel group")
            paths |= {"one patch tile"} if count <= 16 else set()
            if pointwise and (first + (32 if count > 16 else 16) - 1) * cin + depth <= n * h * w * cin:
                paths.add("pointwise in place")
                in_place[first - begin : first - begin + count] = True
        pixel = np.arange(begin, max(begin, end))[~in_place]
        ix0, iy0 = pixel % ow * sw - left, pixel // ow % oh * sh - top
        last_row = ((pixel // (ow * oh) * h + iy0 + (kh - 1) * dh) * w + ix0) * cin
        copied = ((dw == 1) & (ix0 >= 0) & (ix0 + kw <= w) & (iy0 >= 0) & (iy0 + (kh - 1) * dh < h)
                  & (last_row + -(-kw * cin // 64) * 64 <= n * h * w * cin))
        paths |= {"rows copied"} if copied.any() else set()
        paths |= {"gathered"} if (~copied).any() else set()
    if groups > 1:
        paths.add("several pixel groups")
    vector = cout % 8 == 0 and bool(np.all(case["shift"] <= 0))
    shares = channel_shares(case, block)
    for begin, end in shares:
        for oc0 in range(begin, end, block):
            channels = min(block, end - oc0)
            paths.add("whole channel tile" if channels == block else "narrow channel tile" if channels <= 16
                      else "partial channel tile")
            paths |= _epilogue_paths(case, vector, channels, (16, 32))
    if cout > block:
        paths.add("several channel tiles")
    return paths | _share_paths(shares)


def winograd_suits(case: dict, variant: str = "avx2") -> bool:
    """Whether the AVX2, AVX-VNNI or AVX-512 VNNI build convolves by Winograd's F(4x4, 3x3) or
    F(2x4, 3x3) (conv2d_winograd_s8.c, b8_winograd_suits): groups 1, a 3x3 kernel, stride and
    dilation 1, input channels a multiple of 16, at most 896; with VNNI only tiles of 4 rows where
    U is made once per call (at most 1.25 MB), and the AVX-512 VNNI build only on as many input
    channels as avx512_winograd_channels()."""
    variant = SAME_PATHS.get(variant, variant)
    if variant not in ("avx2", "avxvnni", "avx512vnni"):
        return False
    cout, kh, kw, cin = case["weight"].shape
    return (case["groups"] == 1 and (kh, kw) == (3, 3) and tuple(case["strides"]) == (1, 1)
            and tuple(case["dilation"]) == (1, 1) and cin % 16 == 0 and cin <= 896
            and (variant == "avx2" or (winograd_rows(cin) == 4 and _winograd_whole_u(cout, cin)))
            and (variant != "avx512vnni" or cin >= avx512_winograd_channels()))


def avx512_winograd_channels() -> float:
    """The fewest input channels of a layer that the AVX-512 VNNI build convolves by Winograd in a
    process started now (b8_winograd_fewest_inputs, decided once per process): every layer that suits
    where BYOC_INT8_WINOGRAD=1 and on AMD's family 19h (Zen 4), those on 64 channels or more on
    family 1Ah (Zen 5), none (infinity) where BYOC_INT8_WINOGRAD=0 and on other CPUs."""
    setting = os.environ.get("BYOC_INT8_WINOGRAD")
    if setting in ("0", "1"):
        return 1 if setting == "1" else math.inf
    cpuinfo = Path("/proc/cpuinfo")
    fields = {}  # the first processor's
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if fields.get("vendor_id") != "AuthenticAMD":
        return math.inf
    return {"25": 1, "26": 64}.get(fields.get("cpu family"), math.inf)


def avx512_winograd() -> bool:
    """Whether the AVX-512 VNNI build takes its Winograd path for some layers here."""
    return avx512_winograd_channels() < math.inf


def winograd_rows(cin: int) -> int:
    """The Winograd tiles' output rows (b8_winograd_rows): 4 on up to 224 input channels, else 2."""
    return 4 if cin <= 224 else 2


def _winograd_positions(cin: int) -> int:
    """The positions of a Winograd tile (b8_winograd_positions): (rows + 2) x 6."""
    return (winograd_rows(cin) + 2) * 6


def _winograd_whole_u(cout: int, cin: int) -> bool:
    """U (positions x int16 per weight) made once per call: at most 1.25 MB."""
    return 2 * _winograd_positions(cin) * -(-cout // 16) * 16 * cin <= 1280 * 1024


def _winograd_conv2d_paths(case: dict, variant: str) -> set[str]:
    """conv2d_paths of the Winograd path: its filter transformed once per
    call, or per block of tiles where U passes 1.25 MB; the rows of tiles (2 or 4 output rows x 4
    columns) that hold a call's pixels, in blocks of b8_winograd_block_tiles (several) and groups
    of 6 and 4 (the last, or last two, of 4, filled with spare tiles where not full), tiles whose
    (rows + 2) x 6 input reads padding, tiles with pixels not written (past the output's last row
    or column, or outside the call's share); blocks of 16 channels (partial, several) and their
    epilogue (whole blocks fused, two pixels at a time, in the call's estimate mode; else 8 lanes, or
    scalar), in shares of the build's channel blocks."""
    cout, _, _, cin = case["weight"].shape
    n, h, w = case["x"].shape[:3]
    oh, ow = case["out_hw"]
    top, left = case["padding"]
    whole_u = _winograd_whole_u(cout, cin)
    rows = winograd_rows(cin)
    block = min(48, max(6, (192 if whole_u else 480) * 1024 // (2 * _winograd_positions(cin) * cin) // 6 * 6))
    tiles_w, tiles_h = -(-ow // 4), -(-oh // rows)
    paths = {"winograd", f"winograd tiles of {rows} rows"} | (set() if whole_u else {"filter per tile block"})
    for begin, end in [(0, n * oh * ow)] if case.get("pixels") is None else case["pixels"]:
        begin, end = max(begin, 0), min(end, n * oh * ow)
        if begin >= end:
            continue
        first_row = begin // (oh * ow) * tiles_h + begin % (oh * ow) // ow // rows
        last_row = (end - 1) // (oh * ow) * tiles_h + (end - 1) % (oh * ow) // ow // rows
        tiles = (last_row - first_row + 1) * tiles_w
        paths |= {"several tile blocks"} if tiles > block else set()
        # The last block's groups: 6s, then one group of 4 where 3 or 4 remain (or the block has
        # 1-4 tiles), two where 1 or 2 remain after more; spare tiles fill the last group.
        count = tiles % block or block
        rest = count % 6
        fours = 0 if rest in (0, 5) else 1 if rest > 2 or count < 6 else 2
        slots = -(-(count - 4 * fours) // 6) * 6 + 4 * fours
        paths |= {"four-tile group"} if fours else set()
        paths |= {"two four-tile groups"} if fours == 2 else set()
        paths |= {"spare tiles"} if slots > count else set()
        ty = np.arange(first_row, last_row + 1) % tiles_h
        rows_padded = (rows * ty - top < 0) | (rows * ty - top + rows + 2 > h)
        columns_padded = (4 * np.arange(tiles_w) - left < 0) | (4 * np.arange(tiles_w) - left + 6 > w)
        paths |= {"padded tile"} if rows_padded.any() or columns_padded.any() else set()
        # A tile's pixels that are written: inside the output and the share.
        row_start = first_row // tiles_h * oh * ow + rows * (first_row % tiles_h) * ow
        row_end = last_row // tiles_h * oh * ow + min(rows * (last_row % tiles_h) + rows, oh) * ow
        paths |= {"tile partly written"} if oh % rows or ow % 4 or row_start != begin or row_end != end else set()
    vector = cout % 8 == 0 and bool(np.all(case["shift"] <= 0))
    shares = channel_shares(case, _channel_block(case, variant))
    for begin, end in shares:
        for oc0 in range(begin, end, 16):
            paths |= {"partial channel tile"} if end - oc0 < 16 else set()
            paths |= _epilogue_paths(case, vector, min(16, end - oc0), (16,), estimate_mode(case, 9 * cin))
    paths |= {"several channel tiles"} if cout > 16 else set()
    return paths | _share_paths(shares)


def depthwise_paths(case: dict, variant: str) -> set[str]:
    """The code paths of b8_depthwise_conv2d_s8 (runtime_c/src/depthwise_conv2d_s8.c) that a case takes in a
    kernel build, as that file chooses them: portable (any channel multiplier), or the SIMD code
    for multiplier 1 with its channel blocks (whole, masked for AVX-512, overlapping the one before
    for AVX2; before them the wide blocks of 3x3 kernels, 64 channels with AVX-512 VNNI and 16 with
    AVX2, on rows inside the input, with their stride and padded columns), the 3x3 or the general
    kernel loop, the epilogue of each block (vector, or scalar
    where a shift is > 0), runs of pixels within rows (a row split between calls) and, per output
    pixel, the interior (no check; DEPTHWISE_PIXELS neighbours at once for kernels 3 wide with
    stride 1 and no dilation across) or the checked taps (rows and / or columns in the padding)."""
    x, weight = case["x"], case["weight"]  # weight (1, KH, KW, O)
    bw = variant == "avx512bw"  # AVX2's paths, but wide blocks of 32 channels before those of 16
    variant = "avx512vnni" if variant == "amx" else SAME_PATHS.get(variant, variant)  # AMX: VNNI's depthwise
    _, kh, kw, cout = weight.shape
    n, h, w, cin = x.shape
    lanes = DEPTHWISE_LANES.get(variant)
    if lanes is None or cout != cin or (variant == "avx2" and cin < lanes) or kh * kw > DEPTHWISE_MAX_TAPS:
        return {"portable"}
    oh, ow = case["out_hw"]
    (sh, sw), (top, left), (dh, dw) = case["strides"], case["padding"], case["dilation"]
    paths = {"simd", "3x3" if (kh, kw) == (3, 3) else "other kernel"}
    # Wide blocks (3x3, stride 1 or 2 across, no dilation across) from channel 0, while more than
    # 32 channels remain (AVX-512 VNNI, 64 at a time, the last one masked) or 16 do (AVX2, 16 at a
    # time; AVX-512BW first 32 at a time while 32 do) and no shift is > 0, on the rows inside the input.
    wide_end, wide = 0, WIDE_DEPTHWISE[variant]
    if (kh, kw) == (3, 3) and dw == 1 and sw in (1, 2) and bw:
        while cout - wide_end >= 32 and not np.any(case["shift"][wide_end : wide_end + 32] > 0):
            paths.add("wide block x32")
            wide_end += 32
    if (kh, kw) == (3, 3) and dw == 1 and sw in (1, 2):
        while cout - wide_end > 32 if variant == "avx512vnni" else cout - wide_end >= wide:
            if np.any(case["shift"][wide_end : wide_end + wide] > 0):
                paths.add("wide block stopped by a shift")
                break
            paths.add("wide block" if cout - wide_end >= wide else "masked wide block")
            wide_end += wide
        if wide_end and variant != "avx512vnni":  # AVX2's wide blocks take the call's estimate mode
            paths.add(estimate_mode(case, 9))

    def blocks(first: int) -> None:  # the 16- or 8-channel blocks from channel `first`
        if cout - first > lanes:
            paths.add("several channel blocks")
        for c0 in range(first, cout, lanes):
            if c0 + lanes <= cout:
                paths.add("whole channel block")
            else:
                paths.add("masked channel block" if variant == "avx512vnni" else "overlapping channel block")
            at = c0 if variant == "avx512vnni" else min(c0, cout - lanes)
            paths.add("epilogue scalar" if np.any(case["shift"][at : at + lanes] > 0) else f"epilogue x{lanes}")

    grouped = kw == 3 and sw == 1 and dw == 1
    total = n * oh * ow
    for begin, end in [(0, total)] if case.get("pixels") is None else case["pixels"]:
        begin, end = max(begin, 0), min(end, total)
        if begin < end and (begin % ow or end % ow):
            paths.add("part of a row")
        if begin < end and (end - 1) // ow > begin // ow:
            paths.add("several rows")
        first = begin
        while first < end:  # runs within one output row, as the C walks them
            row = first // ow
            ox, ox_end = first - row * ow, min(end - row * ow, ow)
            rows_inside = [0 <= row % oh * sh - top + ky * dh < h for ky in range(kh)]
            if not any(rows_inside):
                paths.add("window rows all padded")
            if wide_end and all(rows_inside):
                paths.add(f"wide stride {sw}")
                if any(not 0 <= x * sw - left + kx < w for x in range(ox, ox_end) for kx in range(3)):
                    paths.add("wide padded columns")
            first_channel = wide_end if all(rows_inside) else 0
            if first_channel == cout:  # the whole row is the wide blocks'
                first = row * ow + ox_end
                continue
            blocks(first_channel)
            while ox < ox_end:
                ix0 = ox * sw - left
                columns_inside = ix0 >= 0 and ix0 + (kw - 1) * dw < w
                if all(rows_inside) and columns_inside:
                    if grouped and ox + DEPTHWISE_PIXELS <= ox_end and ix0 + DEPTHWISE_PIXELS + 1 < w:
                        paths.add(f"interior x{DEPTHWISE_PIXELS}")
                        ox += DEPTHWISE_PIXELS
                        continue
                    paths.add("interior")
                else:
                    paths |= ({"padded columns"} if not columns_inside else set()) | \
                             ({"padded rows"} if not all(rows_inside) else set())
                ox += 1
            first = row * ow + ox_end
    return paths


# ---- the C calls ----------------------------------------------------------------------------


def call_conv2d(lib, case: dict):
    x, weight, bias = case["x"], case["weight"], case["bias"]
    n, oh, ow, cout = x.shape[0], *case["out_hw"], weight.shape[0]
    groups = case["groups"]
    out = np.full((n, oh, ow, cout), case["fill"], np.int8)
    conv = ConvParams(*case["strides"], *case["padding"], *case["dilation"], groups, case["pad_value"])
    filter_dims = Dims(*weight.shape)
    # The rows a thread's share should come in: Winograd's tiles of 2 or 4 where the build takes it.
    rows = lib.b8_conv2d_s8_row_block(conv, filter_dims)
    expected_rows = winograd_rows(case["weight"].shape[3]) if "winograd" in conv2d_paths(case, lib.variant) else 1
    assert rows == expected_rows, f"b8_conv2d_s8_row_block {rows}, expected {expected_rows}"
    # The channel blocks its shares come in: the SIMD tiles' where the build takes them.
    block = lib.b8_conv2d_s8_channel_block(conv, filter_dims)
    expected_block = _channel_block(case, lib.variant)
    assert block == expected_block, f"b8_conv2d_s8_channel_block {block}, expected {expected_block}"
    packed = np.zeros(lib.b8_conv2d_s8_packed_size(conv, filter_dims), np.int8)
    lib.b8_conv2d_s8_pack_filter(conv, filter_dims, ptr(weight, i8), ptr(packed, i8))
    scratch = np.zeros(lib.b8_conv2d_s8_scratch_size(conv, filter_dims), np.int8)
    args = (_requant(case), Dims(*x.shape), ptr(x, i8), int(case["nonnegative"]), filter_dims, ptr(packed, i8),
            None if bias is None else ptr(bias, i32), Dims(n, oh, ow, cout), ptr(out, i8))
    for pixels in _ranges(case):
        if case.get("channel_shares") is None:
            status = lib.b8_conv2d_s8(conv, *args, pixels, ptr(scratch, i8))
        else:
            for begin, end in channel_shares(case, block):
                before = out.copy()
                status = lib.b8_conv2d_s8_channels(conv, *args, pixels, ctypes.byref(Channels(begin, end)),
                                                   ptr(scratch, i8))
                if status:
                    break
                # a share writes its own channels only
                outside = np.ones(cout, bool)
                outside[begin:end] = False
                assert np.array_equal(out[..., outside], before[..., outside]), f"channel share {begin}-{end} wrote outside it"
        if status:
            return status, out
    return 0, out


def call_depthwise_conv2d(lib, case: dict):
    x, weight, bias = case["x"], case["weight"], case["bias"]  # weight (1, KH, KW, O)
    n, oh, ow, cout = x.shape[0], *case["out_hw"], weight.shape[3]
    out = np.full((n, oh, ow, cout), case["fill"], np.int8)
    conv = ConvParams(*case["strides"], *case["padding"], *case["dilation"], x.shape[3], case["pad_value"])
    for pixels in _ranges(case):
        status = lib.b8_depthwise_conv2d_s8(conv, _requant(case), Dims(*x.shape), ptr(x, i8), Dims(*weight.shape),
                                            ptr(weight, i8), None if bias is None else ptr(bias, i32),
                                            Dims(n, oh, ow, cout), ptr(out, i8), pixels)
        if status:
            return status, out
    return 0, out


def _pool(case: dict) -> PoolParams:
    return PoolParams(*case["kernel"], *case["strides"], *case["padding"], *case.get("dilation", (1, 1)))


def call_max_pool2d(lib, case: dict):
    x = case["x"]
    n, oh, ow, c = x.shape[0], *case["out_hw"], x.shape[3]
    out = np.full((n, oh, ow, c), case["fill"], np.int8)
    for pixels in _ranges(case):
        status = lib.b8_max_pool2d_s8(_pool(case), Dims(*x.shape), ptr(x, i8), Dims(n, oh, ow, c), ptr(out, i8),
                                      pixels)
        if status:
            return status, out
    return 0, out


def call_avg_pool2d(lib, case: dict):
    x = case["x"]
    out = np.zeros((x.shape[0], *case["out_hw"], x.shape[3]), np.int8)
    status = lib.b8_avg_pool2d_s8(_pool(case), int(case["count_include_pad"]), case["pad_value"], Dims(*x.shape),
                                  ptr(x, i8), Dims(*out.shape), ptr(out, i8))
    return status, out


def call_global_avg_pool(lib, case: dict):
    x = case["x"]
    out = np.zeros((x.shape[0], x.shape[3]), np.int8)
    status = lib.b8_global_avg_pool_s8(case["multiplier"], case["shift"], case["input_zero_point"],
                                       case["output_zero_point"], Dims(*x.shape), ptr(x, i8), ptr(out, i8))
    return status, out


def call_add(lib, case: dict):
    a, b = case["a"], case["b"]
    params = AddParams(case["left_shift"], *case["input1"], *case["input2"], *case["output"], *case["act"],
                       *case["zero_points"])
    out = np.zeros(a.size, np.int8)
    return lib.b8_add_s8(params, a.size, ptr(a, i8), ptr(b, i8), ptr(out, i8)), out


def call_mul(lib, case: dict):
    x1, x2 = case["x1"], case["x2"]  # (batches, pixels, channels); x2 (batches, channels) when broadcast
    params = MulParams(case["multiplier"], case["shift"], *case["zero_points"], *case["act"])
    out = np.zeros_like(x1)
    status = lib.b8_mul_s8(ctypes.byref(params), *x1.shape, int(case["broadcast"]), ptr(x1, i8), ptr(x2, i8),
                           ptr(out, i8))
    return status, out


def call_dense(lib, case: dict):
    x, weight, bias = case["x"], case["weight"], case["bias"]
    out = np.zeros((x.shape[0], weight.shape[0]), np.int8)
    status = lib.b8_dense_s8(_requant(case), x.shape[0], x.shape[1], weight.shape[0], ptr(x, i8), ptr(weight, i8),
                             None if bias is None else ptr(bias, i32), ptr(out, i8))
    return status, out


def call_dense_double(lib, case: dict):
    x, weight, bias = case["x"], case["weight"], case["bias"]
    params = DoubleRequantParams(ptr(case["mantissa"], i64), ptr(case["exponent"], i32), *case["act"],
                                 case["output_zero_point"])
    out = np.zeros((x.shape[0], weight.shape[0]), np.int8)
    status = lib.b8_dense_s8_double_requant(params, x.shape[0], x.shape[1], weight.shape[0], ptr(x, i8),
                                            ptr(weight, i8), None if bias is None else ptr(bias, i32), ptr(out, i8))
    return status, out


def _accumulators_as_biases(case: dict) -> dict:
    """A dense layer of depth 1 over a zero input: its accumulators are exactly its biases."""
    units = case["acc"].size
    return {**case, "x": np.zeros((1, 1), np.int8), "weight": np.ones((units, 1), np.int8), "bias": case["acc"]}


def call_requantize(lib, case: dict):
    """b8_requantize on any int32 accumulators (through b8_dense_s8, see above)."""
    status, out = call_dense(lib, _accumulators_as_biases(case))
    return status, out[0]


def call_requantize_double(lib, case: dict):
    """b8_requantize_f64 on any int32 accumulators (through b8_dense_s8_double_requant)."""
    status, out = call_dense_double(lib, _accumulators_as_biases(case))
    return status, out[0]


def call_clip(lib, case: dict):
    x = case["x"]
    out = np.zeros_like(x)
    return lib.b8_clip_s8(x.size, *case["act"], ptr(x, i8), ptr(out, i8)), out


def call_lut(lib, case: dict):
    x = case["x"]
    out = np.zeros_like(x)
    return lib.b8_lut_s8(x.size, ptr(case["table"], i8), ptr(x, i8), ptr(out, i8)), out


def call_pair_lut(lib, case: dict):
    a, b = case["a"], case["b"]
    out = np.zeros_like(a)
    return lib.b8_pair_lut_s8(a.size, ptr(case["table"], i8), ptr(a, i8), ptr(b, i8), ptr(out, i8)), out


def call_concat(lib, case: dict):
    xs = case["inputs"]  # each (outer, inner_k)
    outer = case["outer"]
    inner = _i32([x.shape[1] for x in xs])
    out = np.zeros((outer, int(inner.sum())), np.int8)
    parts = (P(i8) * len(xs))(*[ptr(x, i8) for x in xs])
    status = lib.b8_concat_s8(len(xs), parts, ptr(inner, i32), ptr(case["multiplier"], i32), ptr(case["shift"], i32),
                              ptr(case["zero_points"], i32), case["output_zero_point"], outer, ptr(out, i8))
    return status, out


def call_transpose(lib, case: dict):
    x, perm = case["x"], case["perm"]
    out = np.zeros(x.size, np.int8)
    status = lib.b8_transpose_s8(x.ndim, ptr(_i32(x.shape), i32), ptr(_i32(perm), i32), ptr(x, i8), ptr(out, i8))
    return status, out


def call_slice(lib, case: dict):
    x, out_shape = case["x"], case["out_shape"]
    out = np.zeros(math.prod(out_shape), np.int8)
    status = lib.b8_slice_s8(x.ndim, ptr(_i32(x.shape), i32), ptr(_i32(case["begin"]), i32),
                             ptr(_i32(case["stride"]), i32), ptr(_i32(out_shape), i32), ptr(x, i8), ptr(out, i8))
    return status, out


def call_pad(lib, case: dict):
    x, pads = case["x"], case["pads"]  # pads: (before, after) per axis
    out = np.zeros(math.prod(d + a + b for d, (a, b) in zip(x.shape, pads)), np.int8)
    status = lib.b8_pad_s8(x.ndim, ptr(_i32(x.shape), i32), ptr(_i32([p for pair in pads for p in pair]), i32),
                           case["value"], ptr(x, i8), ptr(out, i8))
    return status, out


def call_quantize(lib, case: dict):
    x = case["x"]  # float32, NCHW when case["nchw"] (written NHWC), else flat
    dims = Dims(*(x.shape[i] for i in (0, 2, 3, 1))) if case["nchw"] else None
    out = np.zeros(x.size, np.int8)
    if case.get("rows") is None:
        status = lib.b8_quantize_f32(case["scale"], case["zero_point"], dims, x.size, ptr(x, f32), ptr(out, i8))
        return status, out
    # b8_quantize_f32_rows over these ranges of image rows, as the threads of a split run them.
    status = 0
    for begin, end in case["rows"]:
        status |= lib.b8_quantize_f32_rows(case["scale"], case["zero_point"], dims, ctypes.byref(Pixels(begin, end)),
                                           ptr(x, f32), ptr(out, i8))
    return status, out


def call_dequantize(lib, case: dict):
    x = case["x"]  # int8, NHWC when case["nchw"] (written NCHW), else flat
    dims = Dims(*x.shape) if case["nchw"] else None
    out = np.zeros(x.size, np.float32)
    status = lib.b8_dequantize_f32(case["scale"], case["zero_point"], dims, x.size, ptr(x, i8), ptr(out, f32))
    return status, out


CALLS = {
    "conv2d": call_conv2d,
    "depthwise_conv2d": call_depthwise_conv2d,
    "max_pool2d": call_max_pool2d,
    "avg_pool2d": call_avg_pool2d,
    "global_avg_pool": call_global_avg_pool,
    "add": call_add,
    "mul": call_mul,
    "dense": call_dense,
    "dense_double": call_dense_double,
    "requantize": call_requantize,
    "requantize_double": call_requantize_double,
    "clip": call_clip,
    "lut": call_lut,
    "pair_lut": call_pair_lut,
    "concat": call_concat,
    "transpose": call_transpose,
    "slice": call_slice,
    "pad": call_pad,
    "quantize": call_quantize,
    "quantize_rows": call_quantize,  # with case["rows"]: b8_quantize_f32_rows
    "dequantize": call_dequantize,
}


def run(lib, kernel: str, case: dict):
    """(status, output) of the C kernel on a case."""
    return CALLS[kernel](lib, case)


# ---- what the integer reference says --------------------------------------------------------


def _qnode(op: str, attrs: dict | None = None, params: dict | None = None, rounding: str = "tflite", inputs=1):
    from byoc_int8.graph import Node
    from byoc_int8.quantize import QNode

    return QNode(Node(op, list(range(inputs)), inputs, attrs or {}), params or {}, rounding)


def _windowed(case: dict, reference_out: np.ndarray) -> np.ndarray:
    """The output of a call over pixel ranges: the reference where written, the fill elsewhere."""
    out = np.full(reference_out.shape, case["fill"], np.int8).reshape(-1, reference_out.shape[-1])
    covered = _covered(case, out.shape[0])
    out[covered] = reference_out.reshape(out.shape)[covered]
    return out.reshape(reference_out.shape)


def expect_conv2d(case: dict, rounding: str, depthwise: bool = False):
    from byoc_int8 import reference

    x, weight = case["x"], case["weight"]
    cout = weight.shape[3] if depthwise else weight.shape[0]
    bias = np.zeros(cout, np.int32) if case["bias"] is None else case["bias"]
    attrs = {"strides": list(case["strides"]), "padding": [*case["padding"], 0, 0], "dilation": list(case["dilation"]),
             "groups": x.shape[3] if depthwise else case["groups"]}
    params = {"weight": weight, "bias": bias, "multiplier": case["multiplier"], "shift": case["shift"],
              "input_zero_point": case["pad_value"], "output_zero_point": case["output_zero_point"],
              "act_min": case["act"][0], "act_max": case["act"][1], "depthwise": depthwise}
    y = reference.conv2d(x, _qnode("conv2d", attrs, params, rounding), (x.shape[0], cout, *case["out_hw"]))
    return 0, _windowed(case, y)


def expect_depthwise_conv2d(case: dict, rounding: str):
    return expect_conv2d(case, rounding, depthwise=True)


def _pool_attrs(case: dict) -> dict:
    return {"pool_size": list(case["kernel"]), "strides": list(case["strides"]), "padding": [*case["padding"], 0, 0],
            "dilation": list(case.get("dilation", (1, 1)))}


def expect_max_pool2d(case: dict, rounding: str):
    from byoc_int8 import reference

    x = case["x"]
    y = reference.max_pool2d(x, _qnode("max_pool2d", _pool_attrs(case)), (x.shape[0], x.shape[3], *case["out_hw"]))
    return 0, _windowed(case, y)


def expect_avg_pool2d(case: dict, rounding: str):
    from byoc_int8 import reference

    x = case["x"]
    attrs = {**_pool_attrs(case), "count_include_pad": bool(case["count_include_pad"])}
    q = _qnode("avg_pool2d", attrs, {"pad_value": case["pad_value"]}, rounding)
    return 0, reference.avg_pool2d(x, q, (x.shape[0], x.shape[3], *case["out_hw"]))


def expect_global_avg_pool(case: dict, rounding: str):
    from byoc_int8 import qarith, reference

    x = case["x"]
    params = {"requant": qarith.FixedPoint(case["multiplier"], case["shift"]),
              "input_zero_point": case["input_zero_point"], "output_zero_point": case["output_zero_point"]}
    return 0, reference.global_avg_pool2d(x, _qnode("global_avg_pool2d", {}, params, rounding), x.shape[::3])


def expect_add(case: dict, rounding: str):
    from byoc_int8 import qarith, reference

    rescale = qarith.AddRescale(case["left_shift"], *(qarith.FixedPoint(*case[k]) for k in ("input1", "input2", "output")))
    z1, z2, z_out = case["zero_points"]
    params = {"rescale": rescale, "act_min": case["act"][0], "act_max": case["act"][1], "input1_zero_point": z1,
              "input2_zero_point": z2, "output_zero_point": z_out}
    return 0, reference.add(case["a"], case["b"], _qnode("add", {}, params, rounding, inputs=2))


def expect_mul(case: dict, rounding: str):
    from byoc_int8 import qarith, reference

    x1, x2 = case["x1"], case["x2"]
    if case["broadcast"]:
        x2 = x2[:, None, :]
    z1, z2, z_out = case["zero_points"]
    params = {"requant": qarith.FixedPoint(case["multiplier"], case["shift"]), "input1_zero_point": z1,
              "input2_zero_point": z2, "output_zero_point": z_out, "act_min": case["act"][0], "act_max": case["act"][1]}
    return 0, reference.mul(x1, x2, _qnode("mul", {}, params, rounding, inputs=2))


def _dense_params(case: dict) -> dict:
    units = case["weight"].shape[0]
    return {"weight": case["weight"], "bias": np.zeros(units, np.int32) if case["bias"] is None else case["bias"],
            "output_zero_point": case["output_zero_point"], "act_min": case["act"][0], "act_max": case["act"][1]}


def expect_dense(case: dict, rounding: str):
    from byoc_int8 import reference

    params = {**_dense_params(case), "multiplier": case["multiplier"], "shift": case["shift"]}
    return 0, reference.dense(case["x"], _qnode("dense", {}, params, rounding))


def expect_dense_double(case: dict, rounding: str):
    from byoc_int8 import reference

    params = {**_dense_params(case), "double_requant": (case["mantissa"], case["exponent"])}
    return 0, reference.dense(case["x"], _qnode("dense", {}, params, rounding))


def expect_requantize(case: dict, rounding: str):
    return 0, expect_dense(_accumulators_as_biases(case), rounding)[1][0]


def expect_requantize_double(case: dict, rounding: str):
    return 0, expect_dense_double(_accumulators_as_biases(case), rounding)[1][0]


def expect_clip(case: dict, rounding: str):
    from byoc_int8 import reference

    return 0, reference.clip(case["x"], _qnode("clip", {}, {"act_min": case["act"][0], "act_max": case["act"][1]}))


def expect_lut(case: dict, rounding: str):
    from byoc_int8 import reference

    return 0, reference.lut(case["x"], _qnode("lut", {}, {"table": case["table"]}))


def expect_pair_lut(case: dict, rounding: str):
    """The kernel's definition: the table's entry at (a + 128) * 256 + b + 128."""
    index = (case["a"].astype(np.int64) + 128) * 256 + case["b"].astype(np.int64) + 128
    return 0, case["table"][index]


def expect_concat(case: dict, rounding: str):
    from byoc_int8 import reference

    params = {"multiplier": case["multiplier"], "shift": case["shift"], "zero_points": case["zero_points"],
              "output_zero_point": case["output_zero_point"]}
    return 0, reference.concat(case["inputs"], _qnode("concat", {"axis": 1}, params, rounding, len(case["inputs"])))


# The layout kernels move bytes: their reference is numpy's own operation on the stored tensor.
def expect_transpose(case: dict, rounding: str):
    return 0, case["x"].transpose(case["perm"]).ravel()


def expect_slice(case: dict, rounding: str):
    index = tuple(slice(b, b + (n - 1) * s + 1 if n else b, s) for b, s, n in
                  zip(case["begin"], case["stride"], case["out_shape"]))
    return 0, case["x"][index].ravel()


def expect_pad(case: dict, rounding: str):
    return 0, np.pad(case["x"], case["pads"], constant_values=case["value"]).ravel()


def expect_quantize(case: dict, rounding: str):
    from byoc_int8 import layout, qarith

    x, scale = case["x"], np.float32(case["scale"])
    with np.errstate(divide="ignore", over="ignore"):
        usable = 0 < scale < np.inf and np.float32(1) / scale < np.inf
    if not (usable and np.all(np.isfinite(x))):
        return 1, None  # refused; the output is not specified
    with np.errstate(over="ignore", invalid="ignore"):  # x / scale beyond float32: saturates
        y = qarith.quantize_tensor(x, qarith.ActivationQuant(case["scale"], case["zero_point"]), rounding)
    return 0, (layout.to_storage(y) if case["nchw"] else y).ravel()


expect_quantize_rows = expect_quantize  # the same bytes, in ranges of rows


def expect_dequantize(case: dict, rounding: str):
    from byoc_int8 import layout, qarith

    x = layout.to_logical(case["x"]) if case["nchw"] else case["x"]
    return 0, qarith.dequantize_tensor(x, qarith.ActivationQuant(case["scale"], case["zero_point"])).ravel()


EXPECTS = {name: globals()[f"expect_{name}"] for name in CALLS}


def expected(kernel: str, case: dict, rounding: str):
    """(status, output) that the integer reference gives for a case; output None where the status
    says the kernel refuses."""
    return EXPECTS[kernel](case, rounding)


def compare(got, want) -> str | None:
    """None when (status, output) pairs agree bit for bit, else what differs."""
    (status, out), (want_status, want_out) = got, want
    if status != want_status:
        return f"status {status}, expected {want_status}"
    if want_out is None:
        return None
    out, want_out = np.asarray(out), np.asarray(want_out)
    if out.shape != want_out.shape:
        return f"output shape {out.shape}, expected {want_out.shape}"
    if out.dtype.kind == "f":  # bit patterns, so that -0.0 and NaN count
        same = out.view(np.int32) == want_out.astype(np.float32).view(np.int32)
    else:
        same = out == want_out
    if same.all():
        return None
    bad = np.flatnonzero(~same.ravel())
    first = bad[0]
    index = np.unravel_index(first, out.shape)
    return (f"{bad.size} of {out.size} outputs differ; first at {tuple(int(i) for i in index)}: "
            f"{out.ravel()[first]!r}, expected {want_out.ravel()[first]!r}")


def check(lib, kernel: str, case: dict) -> str | None:
    """None when the C kernel in `lib` equals the integer reference on the case, else why not."""
    return compare(run(lib, kernel, case), expected(kernel, case, lib.rounding))


# ---- cases as source text (the fuzzer's regression tests) -----------------------------------


def packed(text: str) -> np.ndarray:
    """An array written by `array_source` in its compact form."""
    return np.load(io.BytesIO(zlib.decompress(base64.b64decode(text))), allow_pickle=False)


def array_source(a: np.ndarray) -> str:
    if a.size <= 48 and a.dtype.kind in "iu":
        return f"np.array({a.tolist()!r}, np.{a.dtype.name}).reshape({a.shape!r})"
    buffer = io.BytesIO()
    np.save(buffer, a, allow_pickle=False)
    text = base64.b64encode(zlib.compress(buffer.getvalue(), 9)).decode()
    lines = [text[i : i + 88] for i in range(0, len(text), 88)]
    return "packed(\n" + "\n".join(f'        "{line}"' for line in lines) + ")"


def value_source(value) -> str:
    if isinstance(value, np.ndarray):
        return array_source(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        return "[" + ", ".join(value_source(v) for v in value) + "]"
    if isinstance(value, np.generic):
        return repr(value.item())
    if isinstance(value, float):
        return f"float.fromhex({value.hex()!r})" if value == value and abs(value) != math.inf else repr(value)
    return repr(value)


def case_source(case: dict) -> str:
    """The case as a Python dict literal (numpy as np, `packed` from this module)."""
    return "{\n" + "".join(f"    {key!r}: {value_source(value)},\n" for key, value in case.items()) + "}"


# ---- replaying cases in another process (sanitized kernels) ---------------------------------


def replay(cases_file: str, results_file: str, libraries: list[str]) -> None:
    """Runs pickled (kernel, case, expected) triples on libraries given as PATH:VARIANT:ROUNDING
    (each triple on the libraries of its rounding) and pickles the mismatches. Announces each case
    on stderr first, so that a sanitizer's report can be traced to the case that caused it."""
    with open(cases_file, "rb") as f:
        batches = pickle.load(f)  # {rounding: [(kernel, case, expected), ...]}
    libs = {}
    for spec in libraries:
        path, variant, rounding = spec.rsplit(":", 2)
        libs.setdefault(rounding, []).append(load(path, variant, rounding))
    failures, runs = [], 0
    for rounding, triples in batches.items():
        for index, (kernel, case, want) in enumerate(triples):
            for lib in libs.get(rounding, []):
                print(f"replay: {kernel} #{index} on {lib.variant}-{rounding}", file=sys.stderr, flush=True)
                problem = compare(run(lib, kernel, case), want)
                runs += 1
                if problem:
                    failures.append((kernel, index, f"{lib.variant}-{rounding}", problem))
    with open(results_file, "wb") as f:
        pickle.dump({"runs": runs, "failures": failures}, f)


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[1] != "replay":
        sys.exit("usage: kernel_calls.py replay CASES RESULTS PATH:VARIANT:ROUNDING...")
    replay(sys.argv[2], sys.argv[3], sys.argv[4:])
