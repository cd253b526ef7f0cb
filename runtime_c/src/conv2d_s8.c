/* 2-D convolution, NHWC int8 activations, int32 accumulation: plain and grouped (depthwise is
 * depthwise_conv2d_s8.c).
 *
 * Two implementations of b8_conv2d_s8 sit behind one signature, chosen by B8_USE_AVX2 when the
 * kernels are compiled; b8_conv2d_s8_pack_filter prepares the filter for whichever is built.
 *  - portable: per output pixel, gather the receptive field into one row, then one plain dot
 *    product per output channel (the compiler vectorizes it).
 *  - AVX2 (groups = 1): tiles of 4 output pixels x 16 output channels; vpmaddubsw multiplies
 *    unsigned by signed bytes into int16 pairs and vpmaddwd widens them to int32. Activations
 *    that may be negative multiply as |a|, so that a pair of products cannot saturate int16: by
 *    b ^ (a < 0) plus a per-pixel correction, which costs fewer instructions on the ports that
 *    multiply (b8_tile), the patches split beforehand into |a| and the mask of a < 0, two blocks
 *    of 16 channels at a time where they requantize in registers (b8_tile_pair; a layer's last
 *    24 channels as 16 and 8, b8_tile_pair_narrow); layers too
 *    small to repay the split (one block, or short patches on up to 3) by b with a's sign (the
 *    sign trick).
 *    Filters of 7-bit weights need neither: on 4 or more channel blocks the packed filter holds
 *    w + 64, the unsigned operand, and the tile takes 64 x the patch's sum off per pixel; on
 *    fewer, a + 128 is the unsigned operand.
 *    The result is exact, bit for bit the portable one.
 *    3x3 stride-1 layers on a multiple of 16 input channels (up to 896) take Winograd's
 *    F(4x4, 3x3) (up to 224 channels) or F(2x4, 3x3) instead (conv2d_winograd_s8.c): 4x or 3x
 *    fewer products, exact in integers (ResNet-18's 3x3 layers 1.4-2.5x faster on Intel by
 *    F(2x4), 1.1-1.2x more by F(4x4)); so do some with AVX-VNNI, all with AVX-512BW (512-bit), and
 *    some with AVX-512 VNNI on AMD's Zen 4 and Zen 5 (b8_winograd_suits).
 *    With AVX-VNNI (B8_USE_AVXVNNI) tiles of 6 pixels x 16 channels (b8_tile_vnni_body)
 *    multiply by 256-bit vpdpbusd, whose products and sums are exact in int32 whatever the
 *    weights: the packed filter holds w + 128 where blocks x patch bytes reach 128 (as for
 *    AVX-512 VNNI below), else signed inputs take the offset a + 128; the sign trick and the
 *    corrected form are not needed.
 *    With AVX-512 and no VNNI (B8_USE_AVX512BW, Intel's Skylake-SP) signed inputs of 8-bit
 *    weights always take the corrected form (vpsignb has no 512-bit form), whose pairs of channel
 *    blocks and last whole block run on 512-bit vectors, a block per vector (b8_tile_pair,
 *    b8_tile_block).
 *  - AVX-512 VNNI (groups = 1): the same scheme on 8 pixels x 32 channels, with vpdpbusd doing
 *    multiply, pairwise sums and accumulation in one exact instruction, whose first operand is
 *    unsigned. Where channel blocks x patch bytes reach 128 the packed filter holds w + 128, the
 *    unsigned operand, against the activations as they are, and the tile takes 128 x the patch's
 *    sum off per pixel: a step is then the broadcast and the multiplications alone. Smaller
 *    filters multiply a + 128 (signed inputs) as the unsigned operand by w, less 128 x the
 *    channel's weight sum (stored after the packed filter). Exact while the patch is at most
 *    2^15 bytes.
 *  - AMX (B8_USE_AMX, on top of AVX-512 VNNI; patches of 32 bytes or more, where Linux grants
 *    the process AMX's tile state): groups of 32 pixels' patches, gathered (1x1 stride-1 layers:
 *    read in place), times blocks of 32 channels by tdpbssd, signed times signed, into four tiles
 *    of 16 x 16 int32; each step's tiles are stored and requantized by the VNNI output stage
 *    while the next step's tiles compute (b8_conv2d_s8_amx).
 * In the SIMD tiles the accumulators start from the bias (and the pixel's term); a kernel row
 * is padded to whole 4-byte steps (zero weights) so that the tiles read it in place in the input
 * whatever the channel count; and whole channel blocks (16, or 32 / 16 for VNNI) requantize in
 * the tile's registers and pack several pixels to bytes at once, since with short patches (1x1
 * convolutions on few channels, 3-channel stems) the requantization costs as much as the
 * multiplications.
 * Large filters (deep layers: a 3x3 on 512 channels has 2.4 MB) are read per tap in place, and
 * each channel block runs over a chunk of tiles (with VNNI, prefetching the next block), so that the
 * weights come from memory once per chunk, ahead of their use; a share's last tile has code for
 * its own pixel count.
 */
#include <stdlib.h>
#include <string.h>

#include "byoc_int8.h"

#include "internal.h"

static int32_t b8_dot_s8(const int8_t* a, const int8_t* b, int32_t length) {
  int32_t acc = 0;
  for (int32_t i = 0; i < length; ++i) acc += (int32_t)a[i] * (int32_t)b[i];
  return acc;
}

/* Gathers the receptive field of output pixel (oy, ox) for one group into `row`, kernel row
 * ky at ky x row_stride (row_stride >= k_w x group_in; the bytes between are left alone); padded
 * taps read conv->pad_value. */
static void b8_gather_patch(const b8_conv_params* conv, const b8_dims* input_dims,
                            const int8_t* image, const b8_dims* filter_dims, int32_t oy, int32_t ox,
                            int32_t channel_offset, int32_t row_stride, int8_t* row) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, in_c = input_dims->c;
  const int32_t group_in = filter_dims->c, k_w = filter_dims->w;
  const int32_t ix0 = ox * conv->stride_w - conv->pad_left;
  /* Without dilation and groups, the taps inside the input, [kx_in, kx_out), are contiguous: one
   * copy between the padding's two fills (per tap, a 3-channel stem's border rows were 7 calls). */
  const int contiguous = conv->dilation_w == 1 && group_in == in_c;
  const int32_t kx_in = ix0 < 0 ? -ix0 : 0, kx_out = in_w - ix0 < k_w ? in_w - ix0 : k_w;
  for (int32_t ky = 0; ky < filter_dims->h; ++ky) {
    const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
    if (iy < 0 || iy >= in_h) {
      memset(row, conv->pad_value, (size_t)k_w * group_in);
      row += row_stride;
      continue;
    }
    const int8_t* line = image + (int64_t)iy * in_w * in_c + channel_offset;
    if (contiguous) {
      if (kx_in >= kx_out) {
        memset(row, conv->pad_value, (size_t)k_w * in_c);
      } else {
        memset(row, conv->pad_value, (size_t)kx_in * in_c);
        memcpy(row + kx_in * in_c, line + (int64_t)(ix0 + kx_in) * in_c, (size_t)(kx_out - kx_in) * in_c);
        memset(row + kx_out * in_c, conv->pad_value, (size_t)(k_w - kx_out) * in_c);
      }
      row += row_stride;
      continue;
    }
    for (int32_t kx = 0; kx < k_w; ++kx) {
      const int32_t ix = ix0 + kx * conv->dilation_w;
      if (ix < 0 || ix >= in_w) {
        memset(row + kx * group_in, conv->pad_value, (size_t)group_in);
      } else {
        memcpy(row + kx * group_in, line + (int64_t)ix * in_c, (size_t)group_in);
      }
    }
    row += row_stride;
  }
}

static b8_status b8_conv2d_check(const b8_conv_params* conv, const b8_dims* input_dims,
                                 const b8_dims* filter_dims, const b8_dims* output_dims) {
  const int32_t groups = conv->groups, in_c = input_dims->c, out_c = output_dims->c;
  if (groups < 1 || in_c % groups || out_c % groups || filter_dims->c * groups != in_c ||
      filter_dims->n != out_c || output_dims->n != input_dims->n || conv->stride_h < 1 ||
      conv->stride_w < 1 || conv->dilation_h < 1 || conv->dilation_w < 1 || conv->pad_value < -128 ||
      conv->pad_value > 127) {
    return B8_ERROR_ARGUMENT;
  }
  return B8_OK;
}

static b8_status b8_conv2d_s8_portable(const b8_conv_params* conv, const b8_requant_params* quant,
                                       const b8_dims* input_dims, const int8_t* input,
                                       const b8_dims* filter_dims, const int8_t* filter,
                                       const int32_t* bias, const b8_dims* output_dims,
                                       int8_t* output, const b8_pixels* pixels, int32_t oc_begin,
                                       int32_t oc_end, int8_t* scratch) {
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t groups = conv->groups, group_in = filter_dims->c, group_out = out_c / groups;
  const int32_t patch = filter_dims->h * filter_dims->w * group_in;
  const int64_t image_size = (int64_t)input_dims->h * input_dims->w * input_dims->c;
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  for (int64_t pixel = begin; pixel < end; ++pixel) {
    const int32_t n = (int32_t)(pixel / ((int64_t)out_h * out_w));
    const int32_t oy = (int32_t)(pixel / out_w % out_h), ox = (int32_t)(pixel % out_w);
    {
      int8_t* out = output + pixel * out_c;
      for (int32_t g = oc_begin / group_out; g < groups && g * group_out < oc_end; ++g) {
        b8_gather_patch(conv, input_dims, input + n * image_size, filter_dims, oy, ox, g * group_in,
                        filter_dims->w * group_in, scratch);
        const int32_t first = g * group_out > oc_begin ? g * group_out : oc_begin;
        const int32_t last = (g + 1) * group_out < oc_end ? (g + 1) * group_out : oc_end;
        for (int32_t oc = first; oc < last; ++oc) {
          int32_t acc = b8_dot_s8(scratch, filter + (int64_t)oc * patch, patch);
          if (bias) acc += bias[oc];
          out[oc] = b8_output_s8(acc, quant, oc);
        }
      }
    }
  }
  return B8_OK;
}

#if B8_USE_AVX2
#if B8_USE_AVX512VNNI
enum { B8_TILE_PIXELS = 8, B8_TILE_CHANNELS = 32 };
#elif B8_USE_AVXVNNI
enum { B8_TILE_PIXELS = 6, B8_TILE_CHANNELS = 16 }; /* b8_tile_vnni_body */
#else
enum { B8_TILE_PIXELS = 4, B8_TILE_CHANNELS = 16 };
#endif
/* Kernel rows or taps read in place (taller kernels gather); tiles located at once, and at most
 * one more in a range's last chunk (b8_conv2d_s8_avx2); the weight bytes above which channel
 * blocks run over chunks of tiles. */
enum { B8_MAX_SEGMENTS = 16, B8_CHUNK_TILES = 8, B8_CHUNK_MAX_TILES = B8_CHUNK_TILES + 1 };
enum { B8_CHUNK_WEIGHT_BYTES = 256 * 1024 };
/* The packed filter's last int32 (b8_conv2d_s8_pack_filter): B8_WEIGHTS_SHIFTED for weights
 * packed shifted, w + 64 (AVX2 build: every weight in [-64, 64], more than 3 blocks of channels,
 * patches of 64 bytes or more) or w + 128 (VNNI build: blocks x patch bytes of at least
 * B8_VNNI_SHIFTED_MIN, patches not gathered back to back, which it offsets as it gathers them),
 * for b8_tile_body's shifted form; else B8_WEIGHTS_7BIT where every weight
 * lies in [-64, 64], the weights as they are. */
enum { B8_WEIGHTS_7BIT = 0x37626974, B8_WEIGHTS_SHIFTED = 0x73686674 };
/* The VNNI tiles' shifted form saves an xor per pixel and step and costs a sum per pixel, shared
 * by the channel blocks: on Intel (Sapphire Rapids class) 1x1 layers of 16-64 bytes on 1-3 blocks
 * ran 0.76-0.90x shifted, 96-144 bytes on one block 1.0x, 3x3 layers 1.2-1.3x. */
enum { B8_VNNI_SHIFTED_MIN = 128 };

static int32_t b8_round_up(int32_t value, int32_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/* The SIMD layout of a patch: each kernel row's k_w x c bytes padded to whole 4-byte steps (the
 * packed filter is zero there), so that the tiles can read a kernel row in place in the input
 * for any channel count, the few bytes past its end included; or, where that padding would be
 * a tenth of the patch or more (3-channel stems: 3x3 rows of 9 bytes read as 12 make 36 bytes
 * for 27), the patch's rows back to back, gathered (b8_copy_rows), padded once at its end: 28.
 * A 7x7 stem on 3 channels: 148 bytes rather than 168. */
static int b8_patch_contiguous(const b8_dims* filter_dims) {
  const int32_t run = filter_dims->w * filter_dims->c, rows = filter_dims->h * b8_round_up(run, 4);
  return (rows - b8_round_up(filter_dims->h * run, 4)) * 10 >= rows;
}

/* A kernel row's place in the patch: `row` bytes from the previous one. */
static int32_t b8_patch_row(const b8_dims* filter_dims) {
  const int32_t run = filter_dims->w * filter_dims->c;
  return b8_patch_contiguous(filter_dims) ? run : b8_round_up(run, 4);
}

/* A patch's bytes: whole 4-byte steps. */
static int32_t b8_patch_depth(const b8_dims* filter_dims) {
  return b8_round_up(filter_dims->h * b8_patch_row(filter_dims), 4);
}

/* Gathered patches lie this far apart in the scratch: contiguous ones are copied 32 bytes at a
 * time (b8_copy_rows), writing up to 31 bytes past their last row. */
static int32_t b8_patch_stride(const b8_dims* filter_dims) {
  return b8_patch_depth(filter_dims) + (b8_patch_contiguous(filter_dims) ? 32 : 0);
}

/* Whether the tiles read every kernel tap in place (b8_conv2d_s8_avx2): input channels a multiple
 * of 4, few taps, weights of more than B8_CHUNK_WEIGHT_BYTES. */
static int b8_reads_per_tap(const b8_dims* filter_dims) {
  return filter_dims->c % 4 == 0 && filter_dims->h * filter_dims->w <= B8_MAX_SEGMENTS &&
         (int64_t)b8_round_up(filter_dims->n, B8_TILE_CHANNELS) * b8_patch_depth(filter_dims) > B8_CHUNK_WEIGHT_BYTES;
}

/* The tiles whose patches the scratch holds: a chunk's (contiguous patches are all gathered before
 * the first is read: read right after its copy, a step straddling two rows' stores waits for them
 * to reach the cache), none where every tap is read in place. */
static int32_t b8_gathered_tiles(const b8_dims* filter_dims) {
  return b8_reads_per_tap(filter_dims) ? 0 : B8_CHUNK_MAX_TILES;
}

/* The vector output stage, 8 channels at a time, of `count` pixels x `channels` (a multiple of 8)
 * from oc0: acc holds each pixel's B8_TILE_CHANNELS sums (from the bias), out its rows (out_c
 * bytes apart, from channel 0); table is b8_estimate_table's (padded_c per constant). */
static void b8_output_x8(const int32_t* acc, int32_t count, int32_t channels, int32_t oc0,
                         const b8_requant_params* quant, const float* table, int32_t padded_c, int8_t* out,
                         int32_t out_c) {
  const __m256i lo = _mm256_set1_epi32(quant->act_min), hi = _mm256_set1_epi32(quant->act_max);
  for (int32_t half = 0; half < channels; half += 8) {
    const int32_t oc = oc0 + half;
    b8_estimate_x8_params estimate;
    estimate.scale = _mm256_loadu_ps(table + oc);
    estimate.offset_nonnegative = _mm256_loadu_ps(table + padded_c + oc);
    estimate.offset_negative = _mm256_loadu_ps(table + 2 * padded_c + oc);
    for (int32_t p = 0; p < count; ++p)
      b8_output_s8x8(_mm256_loadu_si256((const __m256i*)(acc + p * B8_TILE_CHANNELS + half)), &estimate, quant, oc, lo,
                     hi, out + (int64_t)p * out_c + oc);
  }
}

/* Copies `rows` kernel rows of `run` bytes, `row_stride` bytes apart in the input, back to back
 * into patch, 32 bytes at a time, xor `flip` (0, or 0x80 for patches of a + 128): up to 31 bytes
 * past each row are read, and written where the next row then goes (or past the patch's last
 * row). */
static void b8_copy_rows(const int8_t* first_row, int64_t row_stride, int32_t rows, int32_t run, __m256i flip,
                         int8_t* patch) {
  for (int32_t ky = 0; ky < rows; ++ky, first_row += row_stride, patch += run)
    for (int32_t i = 0; i < run; i += 32)
      _mm256_storeu_si256((__m256i*)(patch + i),
                          _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(first_row + i)), flip));
}

/* b8_copy_rows for a whole tile's pixels, each `step` bytes on from the previous one in the input,
 * into patches `patch_stride` bytes apart: the pixels in the inner loop, unrolled, so that the
 * short rows of a stem (21 bytes) cost a load and a store each rather than a pass of two loops. */
static void b8_copy_tile_rows(const int8_t* first_row, int64_t step, int64_t row_stride, int32_t rows, int32_t run,
                              __m256i flip, int8_t* patch, int64_t patch_stride) {
  for (int32_t ky = 0; ky < rows; ++ky, first_row += row_stride, patch += run)
    for (int32_t i = 0; i < run; i += 32)
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
        _mm256_storeu_si256((__m256i*)(patch + p * patch_stride + i),
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(first_row + p * step + i)), flip));
}

/* The tiles: acc[p][oc] = bias[oc] + sum_k patches[p][k] * w[k][oc] over a tile of pixels and
 * a block of channels; patches are `depth` bytes (a multiple of 4) and w is packed as
 * [depth / 4][block][4]. */
#if B8_USE_AVX512VNNI
/* -shift x the sum of each of the tile's 8 pixels' patches (`segments` runs of n bytes,
 * segment[s][p]) into terms: per pixel, vpdpbusd of ones 64 bytes at a time (the bytes past a
 * run's end masked, not read) into 16 partial sums; then the 8 vectors' lanes summed together,
 * two pixels per step, so that the 16 -> 1 reduction costs 3 operations per pixel rather than 9
 * (per pixel it took 7% of a 3x3 layer's time on 64 channels). */
static void b8_patch_terms(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t n, int32_t shift,
                           int32_t* terms) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __mmask64 tail = n % 64 ? (1ull << (n % 64)) - 1 : 0;
  __m512i sums[B8_TILE_PIXELS];
  for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) sums[p] = _mm512_setzero_si512();
  for (int32_t s = 0; s < segments; ++s) { /* the pixels side by side: 8 chains of vpdpbusd, not one */
    int32_t i = 0;
    for (; i + 64 <= n; i += 64)
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
        sums[p] = _mm512_dpbusd_epi32(sums[p], ones, _mm512_loadu_si512((const void*)(segment[s][p] + i)));
    if (tail)
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
        sums[p] = _mm512_dpbusd_epi32(sums[p], ones, _mm512_maskz_loadu_epi8(tail, segment[s][p] + i));
  }
  /* Per 128-bit lane: pairs of pixels interleaved (p, q, p, q), then fours (p, q, r, s), then the
   * four lanes added: pixels 0-3 in lane 0, 4-7 in lane 2. */
  __m512i pairs[4], fours[2];
  for (int32_t i = 0; i < 4; ++i)
    pairs[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(sums[2 * i], sums[2 * i + 1]),
                                _mm512_unpackhi_epi32(sums[2 * i], sums[2 * i + 1]));
  for (int32_t i = 0; i < 2; ++i)
    fours[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2 * i], pairs[2 * i + 1]),
                                _mm512_unpackhi_epi64(pairs[2 * i], pairs[2 * i + 1]));
  const __m512i halves = _mm512_add_epi32(_mm512_shuffle_i32x4(fours[0], fours[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                          _mm512_shuffle_i32x4(fours[0], fours[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i whole = _mm512_add_epi32(halves, _mm512_shuffle_i32x4(halves, halves, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m256i eight = _mm512_castsi512_si256(_mm512_shuffle_i32x4(whole, whole, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm256_storeu_si256((__m256i*)terms, _mm256_mullo_epi32(eight, _mm256_set1_epi32(-shift)));
}

/* The tiles' loop over the patch: per segment (`run` bytes of each pixel's patch at
 * segment[s][p]), steps of 4 bytes two at a time, each the tile's B8_STEPS(k, w) for the bytes at
 * k and the weights at w; one line from `prefetch` on (where set) fetched into L2 per iteration. */
#define B8_TILE_LOOP                                                  \
  for (int32_t s = 0; s < segments; ++s) {                            \
    const int8_t* const* px = segment[s];                             \
    int32_t k = 0;                                                    \
    for (; k + 8 <= run; k += 8, w += 256) {                          \
      if (prefetch) {                                                 \
        _mm_prefetch((const char*)prefetch, _MM_HINT_T1);             \
        prefetch += 64;                                               \
      }                                                               \
      B8_STEPS(k, w);                                                 \
      B8_STEPS(k + 4, w + 128);                                       \
    }                                                                 \
    if (k < run) {                                                    \
      B8_STEPS(k, w);                                                 \
      w += 128;                                                       \
    }                                                                 \
  }

/* How the VNNI tiles multiply (`form`, a constant where inlined): weights shifted by 128 as
 * vpdpbusd's unsigned operand and the activations as they are its signed one; the activations
 * xor 0x80 (a + 128) as the unsigned operand, the weights as they are; or the activations as
 * they are, unsigned (non-negative inputs, or patches gathered as a + 128). */
enum { B8_VNNI_SHIFTED, B8_VNNI_OFFSET, B8_VNNI_UNSIGNED };

/* One step's products of the VNNI tiles, x (4 bytes of a pixel's patch, broadcast) times wv (4
 * weights for each of 16 channels), into acc, in the tile's form. */
#define B8_VNNI_MAC(acc, wv, x)                                                                       \
  (form == B8_VNNI_SHIFTED  ? _mm512_dpbusd_epi32(acc, wv, x)                                         \
   : form == B8_VNNI_OFFSET ? _mm512_dpbusd_epi32(acc, _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80)), wv) \
                            : _mm512_dpbusd_epi32(acc, x, wv))

/* acc[p][oc] for `pixels` (at most 8; a constant where inlined) pixels x 32 channels, w packed as
 * [depth / 4][32][4]: two 512-bit vectors of 16 channels x 4 bytes per step, reused by all the
 * pixels (up to 16 accumulators of the 32 registers). Shifted weights (w + 128) start the
 * accumulators from the bias plus the pixel's term, -128 x the sum of its patch (terms[p]);
 * unshifted ones from the bias (less 128 x the weight sums for inputs offset by 128). Each
 * pixel's patch is read as `segments` runs of `run` bytes: segment[s][p] is pixel p's run s.
 * With `e`, the tile requantizes its accumulators in registers and writes the `count` pixels' 32
 * channels to out (rows `stride` bytes apart); else it stores them in acc. */
B8_INLINE void b8_tile_body(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                            const int8_t* w, const int32_t* terms, const int32_t* bias,
                            int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS], const b8_block32_epilogue* e,
                            int8_t* out, int32_t stride, int32_t count, const int8_t* prefetch, const int pixels,
                            const int form) {
  const __m512i b0 = _mm512_loadu_si512((const void*)bias), b1 = _mm512_loadu_si512((const void*)(bias + 16));
#define B8_START(b, p) (form == B8_VNNI_SHIFTED ? _mm512_add_epi32(b, _mm512_set1_epi32(terms[p])) : b)
  __m512i a00 = B8_START(b0, 0), a01 = B8_START(b1, 0), a10 = B8_START(b0, 1), a11 = B8_START(b1, 1);
  __m512i a20 = B8_START(b0, 2), a21 = B8_START(b1, 2), a30 = B8_START(b0, 3), a31 = B8_START(b1, 3);
  __m512i a40 = B8_START(b0, 4), a41 = B8_START(b1, 4), a50 = B8_START(b0, 5), a51 = B8_START(b1, 5);
  __m512i a60 = B8_START(b0, 6), a61 = B8_START(b1, 6), a70 = B8_START(b0, 7), a71 = B8_START(b1, 7);
#undef B8_START
  /* Two steps per iteration, and no test of the sign inside. With shifted weights a step per
   * pixel is a broadcast, which is a load, and the two multiplications: nothing else on the ports
   * that multiply (Intel's cores have two for 512-bit vectors, where the xor of the unshifted form
   * held ResNet-18's 3x3 layers at half the peak). */
#define B8_STEP(pixel, acc0, acc1, kk)                \
  do {                                                \
    int32_t quad;                                     \
    memcpy(&quad, (pixel) + (kk), 4);                 \
    const __m512i x = _mm512_set1_epi32(quad);        \
    acc0 = B8_VNNI_MAC(acc0, w0, x);                  \
    acc1 = B8_VNNI_MAC(acc1, w1, x);                  \
  } while (0)
#define B8_STEPS(kk, wk)                                              \
  do {                                                                \
    const __m512i w0 = _mm512_loadu_si512((const void*)(wk));         \
    const __m512i w1 = _mm512_loadu_si512((const void*)((wk) + 64));  \
    B8_STEP(px[0], a00, a01, kk);                                     \
    if (pixels > 1) B8_STEP(px[1], a10, a11, kk);                     \
    if (pixels > 2) B8_STEP(px[2], a20, a21, kk);                     \
    if (pixels > 3) B8_STEP(px[3], a30, a31, kk);                     \
    if (pixels > 4) B8_STEP(px[4], a40, a41, kk);                     \
    if (pixels > 5) B8_STEP(px[5], a50, a51, kk);                     \
    if (pixels > 6) B8_STEP(px[6], a60, a61, kk);                     \
    if (pixels > 7) B8_STEP(px[7], a70, a71, kk);                     \
  } while (0)
  if (pixels == 1) {
    /* One pixel (a 7x7 output's 49th): its two accumulators alone would make two chains of
     * vpdpbusd, one step per latency; four steps at a time go to four pairs of them, summed at the
     * end (ResNet-18's 7x7 layers on 512 channels 1.02x, its 256 -> 512 stride-2 ones 1.03x). */
    a10 = a11 = a20 = a21 = a30 = a31 = _mm512_setzero_si512();
#define B8_ONE(acc0, acc1, kk, wk)                                                                 \
  do {                                                                                            \
    int32_t quad;                                                                                 \
    memcpy(&quad, px[0] + (kk), 4);                                                               \
    const __m512i x = _mm512_set1_epi32(quad);                                                    \
    acc0 = B8_VNNI_MAC(acc0, _mm512_loadu_si512((const void*)(wk)), x);                          \
    acc1 = B8_VNNI_MAC(acc1, _mm512_loadu_si512((const void*)((wk) + 64)), x);                   \
  } while (0)
    for (int32_t s = 0; s < segments; ++s) {
      const int8_t* const* px = segment[s];
      int32_t k = 0;
      for (; k + 16 <= run; k += 16, w += 512) {
        if (prefetch) {
          _mm_prefetch((const char*)prefetch, _MM_HINT_T1);
          _mm_prefetch((const char*)prefetch + 64, _MM_HINT_T1);
          prefetch += 128;
        }
        B8_ONE(a00, a01, k, w);
        B8_ONE(a10, a11, k + 4, w + 128);
        B8_ONE(a20, a21, k + 8, w + 256);
        B8_ONE(a30, a31, k + 12, w + 384);
      }
      for (; k < run; k += 4, w += 128) B8_ONE(a00, a01, k, w);
    }
#undef B8_ONE
    a00 = _mm512_add_epi32(_mm512_add_epi32(a00, a10), _mm512_add_epi32(a20, a30));
    a01 = _mm512_add_epi32(_mm512_add_epi32(a01, a11), _mm512_add_epi32(a21, a31));
  } else {
    B8_TILE_LOOP;
  }
#undef B8_STEPS
#undef B8_STEP
  if (e) { /* two pixels per 64 bytes: 32 bytes each */
#define B8_PUT(pixel, r)                                                                              \
  if (count > (pixel)) {                                                                              \
    _mm256_storeu_si256((__m256i*)(out + (int64_t)(pixel) * stride), _mm512_castsi512_si256(r));       \
    if (count > (pixel) + 1)                                                                          \
      _mm256_storeu_si256((__m256i*)(out + (int64_t)((pixel) + 1) * stride), _mm512_extracti64x4_epi64(r, 1)); \
  }
    const __m512i r0 = b8_block32_finish(e, a00, 0, a01, 1, a10, 0, a11, 1);
    const __m512i r1 = pixels > 2 ? b8_block32_finish(e, a20, 0, a21, 1, a30, 0, a31, 1) : r0;
    const __m512i r2 = pixels > 4 ? b8_block32_finish(e, a40, 0, a41, 1, a50, 0, a51, 1) : r0;
    const __m512i r3 = pixels > 6 ? b8_block32_finish(e, a60, 0, a61, 1, a70, 0, a71, 1) : r0;
    B8_PUT(0, r0);
    B8_PUT(2, r1);
    B8_PUT(4, r2);
    B8_PUT(6, r3);
#undef B8_PUT
    return;
  }
#define B8_SAVE(pixel, acc0, acc1)                           \
  _mm512_storeu_si512((void*)acc[pixel], acc0);              \
  _mm512_storeu_si512((void*)(acc[pixel] + 16), acc1)
  B8_SAVE(0, a00, a01);
  B8_SAVE(1, a10, a11);
  B8_SAVE(2, a20, a21);
  B8_SAVE(3, a30, a31);
  B8_SAVE(4, a40, a41);
  B8_SAVE(5, a50, a51);
  B8_SAVE(6, a60, a61);
  B8_SAVE(7, a70, a71);
#undef B8_SAVE
}

/* b8_tile for a block of at most 16 real channels (the narrow last block of e.g. 16 or 48
 * output channels): only the first vector of each step, half the work. With `e` (exactly 16
 * channels), four pixels per 64 bytes of output. */
B8_INLINE void b8_tile_narrow_body(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                                   const int8_t* w, const int32_t* terms, const int32_t* bias,
                                   int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS], const b8_block32_epilogue* e,
                                   int8_t* out, int32_t stride, int32_t count, const int8_t* prefetch,
                                   const int pixels, const int form) {
  const __m512i b0 = _mm512_loadu_si512((const void*)bias);
#define B8_START(p) (form == B8_VNNI_SHIFTED ? _mm512_add_epi32(b0, _mm512_set1_epi32(terms[p])) : b0)
  __m512i a0 = B8_START(0), a1 = B8_START(1), a2 = B8_START(2), a3 = B8_START(3);
  __m512i a4 = B8_START(4), a5 = B8_START(5), a6 = B8_START(6), a7 = B8_START(7);
#undef B8_START
#define B8_STEP(pixel, acc0, kk)                                   \
  do {                                                             \
    int32_t quad;                                                  \
    memcpy(&quad, (pixel) + (kk), 4);                              \
    acc0 = B8_VNNI_MAC(acc0, w0, _mm512_set1_epi32(quad));         \
  } while (0)
#define B8_STEPS(kk, wk)                                        \
  do {                                                          \
    const __m512i w0 = _mm512_loadu_si512((const void*)(wk));   \
    B8_STEP(px[0], a0, kk);                                     \
    if (pixels > 1) B8_STEP(px[1], a1, kk);                     \
    if (pixels > 2) B8_STEP(px[2], a2, kk);                     \
    if (pixels > 3) B8_STEP(px[3], a3, kk);                     \
    if (pixels > 4) B8_STEP(px[4], a4, kk);                     \
    if (pixels > 5) B8_STEP(px[5], a5, kk);                     \
    if (pixels > 6) B8_STEP(px[6], a6, kk);                     \
    if (pixels > 7) B8_STEP(px[7], a7, kk);                     \
  } while (0)
  B8_TILE_LOOP;
#undef B8_STEPS
#undef B8_STEP
  if (e) {
    const __m512i r0 = b8_block32_finish(e, a0, 0, a1, 0, a2, 0, a3, 0);
    const __m512i r1 = pixels > 4 ? b8_block32_finish(e, a4, 0, a5, 0, a6, 0, a7, 0) : r0;
#define B8_PUT(pixel, r, lane) \
  if (count > (pixel)) _mm_storeu_si128((__m128i*)(out + (int64_t)(pixel) * stride), _mm512_extracti32x4_epi32(r, lane))
    B8_PUT(0, r0, 0);
    B8_PUT(1, r0, 1);
    B8_PUT(2, r0, 2);
    B8_PUT(3, r0, 3);
    B8_PUT(4, r1, 0);
    B8_PUT(5, r1, 1);
    B8_PUT(6, r1, 2);
    B8_PUT(7, r1, 3);
#undef B8_PUT
    return;
  }
  _mm512_storeu_si512((void*)acc[0], a0);
  _mm512_storeu_si512((void*)acc[1], a1);
  _mm512_storeu_si512((void*)acc[2], a2);
  _mm512_storeu_si512((void*)acc[3], a3);
  _mm512_storeu_si512((void*)acc[4], a4);
  _mm512_storeu_si512((void*)acc[5], a5);
  _mm512_storeu_si512((void*)acc[6], a6);
  _mm512_storeu_si512((void*)acc[7], a7);
}

/* The tiles for `count` (1-8) pixels: full tiles, and a range's last few pixels (the one left
 * over of a 7x7 output's 49) in code for 1, 2 or 4 pixels, which then costs about their share
 * of a tile rather than a whole one (more sizes cost compile time of every model for little). */
#define B8_TILE_PARAMS                                                                               \
  const int8_t *(*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run, const int8_t *w,         \
      const int32_t *terms, const int32_t *bias,                                                    \
      int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS],                                                 \
      const b8_block32_epilogue *e, int8_t *out, int32_t stride, int32_t count, const int8_t *prefetch
#define B8_TILE_PASS segment, segments, run, w, terms, bias, acc, e, out, stride, count, prefetch
#define B8_TILE_ARGS(pixels) B8_TILE_PASS, pixels
#define B8_TILE_DISPATCH(name, body, form)                                                           \
  static void name##_full(B8_TILE_PARAMS) { body(B8_TILE_ARGS(8), form); }                          \
  static __attribute__((noinline)) void name##_part(B8_TILE_PARAMS) {                               \
    if (count == 1) body(B8_TILE_ARGS(1), form);                                                     \
    else if (count == 2) body(B8_TILE_ARGS(2), form);                                                \
    else body(B8_TILE_ARGS(4), form);                                                                \
  }                                                                                                  \
  B8_INLINE void name(B8_TILE_PARAMS) {                                                              \
    if (count > 4) name##_full(B8_TILE_PASS);                                                        \
    else name##_part(B8_TILE_PASS);                                                                  \
  }
B8_TILE_DISPATCH(b8_tile_shifted, b8_tile_body, B8_VNNI_SHIFTED)
B8_TILE_DISPATCH(b8_tile_offset, b8_tile_body, B8_VNNI_OFFSET)
B8_TILE_DISPATCH(b8_tile_unsigned, b8_tile_body, B8_VNNI_UNSIGNED)
B8_TILE_DISPATCH(b8_tile_narrow_shifted, b8_tile_narrow_body, B8_VNNI_SHIFTED)
B8_TILE_DISPATCH(b8_tile_narrow_offset, b8_tile_narrow_body, B8_VNNI_OFFSET)
B8_TILE_DISPATCH(b8_tile_narrow_unsigned, b8_tile_narrow_body, B8_VNNI_UNSIGNED)
#undef B8_TILE_DISPATCH
#undef B8_TILE_ARGS
#undef B8_TILE_PASS
#undef B8_TILE_PARAMS
#undef B8_TILE_LOOP
#undef B8_VNNI_MAC
#else
#if B8_USE_AVXVNNI
/* -shift x the sum of each of the tile's 6 pixels' patches (`segments` runs of n bytes,
 * segment[s][p]) into terms, for the shifted form: vpdpbusd of ones, 32 bytes at a time, the
 * pixels side by side, two chains each. The AVX2 build's sums (an xor, a vpsadbw and an add per
 * 32 bytes, one pixel at a time) took 8% of a 1x1 layer of 24 -> 144 channels here; this way
 * MobileNetV2's and SqueezeNet's 1x1 layers on 1-3 blocks of output channels run 1.03-1.10x. A
 * run's last bytes go 16 and 4 at a time, bytes up to the next multiple of 4 read (a segment's
 * seg_len) and those past n masked. */
static void b8_patch_terms(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t n, int32_t shift,
                           int32_t* terms) {
  const __m256i ones = _mm256_set1_epi8(1);
  const uint32_t last = n % 4 ? (1u << 8 * (n % 4)) - 1 : ~0u; /* the bytes of the last quad within n */
  __m256i sums[B8_TILE_PIXELS], more[B8_TILE_PIXELS]; /* two chains per pixel: 12 in flight */
  for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) sums[p] = more[p] = _mm256_setzero_si256();
  for (int32_t s = 0; s < segments; ++s) {
    const int8_t* const* px = segment[s];
    int32_t i = 0;
    for (; i + 64 <= n; i += 64)
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
        sums[p] = _mm256_dpbusd_avx_epi32(sums[p], ones, _mm256_loadu_si256((const __m256i*)(px[p] + i)));
        more[p] = _mm256_dpbusd_avx_epi32(more[p], ones, _mm256_loadu_si256((const __m256i*)(px[p] + i + 32)));
      }
    for (; i + 32 <= n; i += 32)
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
        sums[p] = _mm256_dpbusd_avx_epi32(sums[p], ones, _mm256_loadu_si256((const __m256i*)(px[p] + i)));
    if (i + 16 <= n) {
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
        sums[p] = _mm256_dpbusd_avx_epi32(sums[p], ones,
                                          _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i*)(px[p] + i))));
      i += 16;
    }
    for (; i < n; i += 4) {
      const uint32_t mask = i + 4 <= n ? ~0u : last;
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
        uint32_t quad;
        memcpy(&quad, px[p] + i, 4);
        const __m256i x = _mm256_zextsi128_si256(_mm_cvtsi32_si128((int32_t)(quad & mask)));
        sums[p] = _mm256_dpbusd_avx_epi32(sums[p], ones, x);
      }
    }
  }
  for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) /* within int32 for patches of up to 2^15 bytes */
    terms[p] = -shift * b8_sum_x8(_mm256_add_epi32(sums[p], more[p]));
}
#else
/* Splits x[0 .. n) (n a multiple of 4, no byte past it read) into |a| (magnitude) and the mask of
 * a < 0 (all ones: mask), for b8_tile_pair, and adds to the two 64-bit lanes of `sums` the sum of
 * |a| over the negative bytes: the correction of the corrected form (b8_tile) for one run of a
 * patch. Short runs (a 3-channel stem's kernel rows are 24 bytes) take 16 and 4 bytes at a time. */
static __m128i b8_split_magnitude(const int8_t* x, int32_t n, int8_t* magnitude, int8_t* mask, __m128i sums) {
  const __m256i zero = _mm256_setzero_si256();
  int32_t i = 0;
  if (n >= 32) {
    __m256i wide = zero;
    for (; i + 32 <= n; i += 32) {
      const __m256i v = _mm256_loadu_si256((const __m256i*)(x + i));
      const __m256i negative = _mm256_cmpgt_epi8(zero, v), size = _mm256_abs_epi8(v);
      _mm256_storeu_si256((__m256i*)(magnitude + i), size);
      _mm256_storeu_si256((__m256i*)(mask + i), negative);
      wide = _mm256_add_epi64(wide, _mm256_sad_epu8(_mm256_and_si256(size, negative), zero));
    }
    sums = _mm_add_epi64(sums, _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1)));
  }
  const __m128i zero16 = _mm_setzero_si128();
#define B8_SPLIT(v, store)                                                               \
  do {                                                                                   \
    const __m128i negative = _mm_cmpgt_epi8(zero16, v), size = _mm_abs_epi8(v);          \
    store;                                                                               \
    sums = _mm_add_epi64(sums, _mm_sad_epu8(_mm_and_si128(size, negative), zero16));     \
  } while (0)
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128((const __m128i*)(x + i));
    B8_SPLIT(v, (_mm_storeu_si128((__m128i*)(magnitude + i), size), _mm_storeu_si128((__m128i*)(mask + i), negative)));
  }
  for (; i < n; i += 4) {
    int32_t quad;
    memcpy(&quad, x + i, 4);
    const __m128i v = _mm_cvtsi32_si128(quad);
    B8_SPLIT(v, (quad = _mm_cvtsi128_si32(size), memcpy(magnitude + i, &quad, 4), quad = _mm_cvtsi128_si32(negative),
                 memcpy(mask + i, &quad, 4)));
  }
#undef B8_SPLIT
  return sums;
}

/* Adds to the two 64-bit lanes of `sums` the sum of a + 128 over the bytes a of x[0 .. n). Bytes
 * up to the next multiple of 4 are read (a segment's seg_len), those past n masked. */
static __m128i b8_offset_sum(const int8_t* x, int32_t n, __m128i sums) {
  const __m256i flip = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
  int32_t i = 0;
  if (n >= 32) {
    __m256i wide = zero;
    for (; i + 32 <= n; i += 32)
      wide = _mm256_add_epi64(
          wide, _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(x + i)), flip), zero));
    sums = _mm_add_epi64(sums, _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1)));
  }
  const __m128i flip16 = _mm256_castsi256_si128(flip), zero16 = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16)
    sums = _mm_add_epi64(sums,
                         _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128((const __m128i*)(x + i)), flip16), zero16));
  for (; i < n; i += 4) {
    uint32_t quad;
    memcpy(&quad, x + i, 4);
    quad ^= 0x80808080u;
    if (n - i < 4) quad &= (1u << 8 * (n - i)) - 1;
    sums = _mm_add_epi64(sums, _mm_sad_epu8(_mm_cvtsi32_si128((int32_t)quad), zero16));
  }
  return sums;
}

/* The sum of pixel p's patch: of its `segments` runs of n bytes (segment[s][p]), for the shifted
 * form's term. */
static int32_t b8_patch_sum(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t p, int32_t n) {
  __m128i sums = _mm_setzero_si128();
  for (int32_t s = 0; s < segments; ++s) sums = b8_offset_sum(segment[s][p], n, sums);
  return (int32_t)(_mm_cvtsi128_si64(sums) + _mm_extract_epi64(sums, 1) - 128 * (int64_t)segments * n);
}
#endif /* B8_USE_AVXVNNI */

/* How the AVX2 tile multiplies: filters of 7-bit weights packed shifted (more than 3 channel
 * blocks, patches of 64 bytes or more) by their shifted form, whatever the inputs; with other
 * filters, unsigned inputs as they are, inputs that may be negative by one of three exact forms
 * (b8_tile_body). */
typedef enum { B8_FORM_UNSIGNED, B8_FORM_SHIFTED, B8_FORM_OFFSET, B8_FORM_SIGN, B8_FORM_CORRECTED } b8_sign_form;

/* acc[p][oc] = bias[oc] + the patch of pixel p times the channel's weights, for 4 pixels x 16
 * channels. With `e`, the tile requantizes in registers and writes the `count` pixels' 16
 * channels to out (rows `stride` bytes apart); else it stores the accumulators in acc.
 * vpmaddubsw multiplies unsigned by signed bytes and adds pairs in int16. Unsigned inputs are its
 * unsigned operand; the other forms are exact too:
 *  - shifted, where every weight lies in [-64, 64] (a filter quantized to 7 bits): the packed
 *    filter holds w + 64, in [0, 128], the unsigned operand, and the input a the signed one, so
 *    that a pair of products lies in [-32768, 32512]. Then sum (w + 64) a = sum w a + 64 sum a,
 *    and the tile adds, per pixel, -64 x the sum of the patch's bytes (pixel_terms[p],
 *    b8_offset_sum). The loop is the unsigned one: nothing is done to the input per step;
 *  - offset, other filters of 7-bit weights: a + 128 as unsigned times w, as the VNNI tiles do
 *    on small filters (the accumulators start from the bias less 128 x the channel's weight sum), a pair of
 *    products in [-32640, 32640]: the unsigned loop plus one xor per pixel and step, which costs
 *    less than the shifted form's term where few channel blocks share it;
 *  - the sign trick: |a| times b with a's sign (vpsignb), at most 128 x 127 per product;
 *  - corrected: |a| times b ^ m, where m is all ones for a < 0. Then |a| (b ^ m) = |a| (-b - 1) =
 *    a b - |a|, so the tile adds back, per pixel, the sum of |a| over the negative bytes it reads
 *    (pixel_terms[p]; bytes with zero weights count too, since 0 ^ m is -1). A pair of products
 *    lies in [-32768, 32512]. The patches come split into |a| and m (b8_split_magnitude, which
 *    also sums the term: the tile's one segment per pixel holds `run` bytes of |a|, then m), so
 *    that a step broadcasts both and xors the weights: the xors run on any vector port, where
 *    vpsignb competes with the multiplications for the ports that multiply. */
B8_INLINE void b8_tile_body(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                            const int8_t* w, const b8_sign_form form, const int32_t* pixel_terms,
                            const int32_t* bias, int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS],
                            const b8_block_epilogue* e, int8_t* out, int32_t stride, int32_t count) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  const __m256i b0 = _mm256_loadu_si256((const __m256i*)bias), b1 = _mm256_loadu_si256((const __m256i*)(bias + 8));
  __m256i a00 = b0, a01 = b1, a10 = b0, a11 = b1, a20 = b0, a21 = b1, a30 = b0, a31 = b1;
  if (form == B8_FORM_CORRECTED || form == B8_FORM_SHIFTED) {
#define B8_CORRECT(p, acc0, acc1)                                 \
  acc0 = _mm256_add_epi32(acc0, _mm256_set1_epi32(pixel_terms[p])); \
  acc1 = _mm256_add_epi32(acc1, _mm256_set1_epi32(pixel_terms[p]))
    B8_CORRECT(0, a00, a01);
    B8_CORRECT(1, a10, a11);
    B8_CORRECT(2, a20, a21);
    B8_CORRECT(3, a30, a31);
#undef B8_CORRECT
  }
#define B8_STEP(pixel, acc0, acc1)                                                            \
  do {                                                                                        \
    int32_t quad;                                                                             \
    memcpy(&quad, (pixel) + k, 4);                                                           \
    __m256i x = _mm256_set1_epi32(quad), v0 = w0, v1 = w1;                                    \
    if (form == B8_FORM_CORRECTED) { /* x is |a|; the mask lies run bytes on */            \
      int32_t sign;                                                                           \
      memcpy(&sign, (pixel) + run + k, 4);                                                    \
      const __m256i negative = _mm256_set1_epi32(sign);                                       \
      v0 = _mm256_xor_si256(w0, negative);                                                    \
      v1 = _mm256_xor_si256(w1, negative);                                                    \
    } else if (form == B8_FORM_OFFSET) {                                                      \
      x = _mm256_xor_si256(x, flip);                                                          \
    } else if (form == B8_FORM_SIGN) {                                                        \
      v0 = _mm256_sign_epi8(w0, x);                                                           \
      v1 = _mm256_sign_epi8(w1, x);                                                           \
      x = _mm256_abs_epi8(x);                                                                 \
    }                                                                                         \
    const __m256i m0 = form == B8_FORM_SHIFTED ? _mm256_maddubs_epi16(v0, x) : _mm256_maddubs_epi16(x, v0); \
    const __m256i m1 = form == B8_FORM_SHIFTED ? _mm256_maddubs_epi16(v1, x) : _mm256_maddubs_epi16(x, v1); \
    acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(m0, ones));                               \
    acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(m1, ones));                               \
  } while (0)
  for (int32_t s = 0; s < segments; ++s) {
    const int8_t *p0 = segment[s][0], *p1 = segment[s][1], *p2 = segment[s][2], *p3 = segment[s][3];
    for (int32_t k = 0; k < run; k += 4, w += 64) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i*)w);
      const __m256i w1 = _mm256_loadu_si256((const __m256i*)(w + 32));
      B8_STEP(p0, a00, a01);
      B8_STEP(p1, a10, a11);
      B8_STEP(p2, a20, a21);
      B8_STEP(p3, a30, a31);
    }
  }
#undef B8_STEP
  if (e) {
    const __m256i r0 = b8_block_finish(e, a00, a01, a10, a11), r1 = b8_block_finish(e, a20, a21, a30, a31);
    _mm_storeu_si128((__m128i*)out, _mm256_castsi256_si128(r0));
    if (count > 1) _mm_storeu_si128((__m128i*)(out + stride), _mm256_extracti128_si256(r0, 1));
    if (count > 2) _mm_storeu_si128((__m128i*)(out + 2 * (int64_t)stride), _mm256_castsi256_si128(r1));
    if (count > 3) _mm_storeu_si128((__m128i*)(out + 3 * (int64_t)stride), _mm256_extracti128_si256(r1, 1));
    return;
  }
  /* Lanes hold channels in packing order: each 256-bit half is 8 channels of 4 bytes. */
  _mm256_storeu_si256((__m256i*)acc[0], a00);
  _mm256_storeu_si256((__m256i*)(acc[0] + 8), a01);
  _mm256_storeu_si256((__m256i*)acc[1], a10);
  _mm256_storeu_si256((__m256i*)(acc[1] + 8), a11);
  _mm256_storeu_si256((__m256i*)acc[2], a20);
  _mm256_storeu_si256((__m256i*)(acc[2] + 8), a21);
  _mm256_storeu_si256((__m256i*)acc[3], a30);
  _mm256_storeu_si256((__m256i*)(acc[3] + 8), a31);
}

/* The tile in code for each form: unsigned inputs, shifted, offset, the sign trick, corrected.
 * Inlined: called, it cost 16-channel layers about 10% (a call per tile and block). */
#if B8_USE_AVXVNNI
/* b8_tile_body with AVX-VNNI: 6 pixels x 16 channels, the products by vpdpbusd (exact in int32),
 * in the unsigned, shifted (w + 128) or offset (a + 128) form. Two multiplications per cycle at a
 * latency of 5 need 10 accumulators in flight: 4 pixels' 8 left a fifth of the issue slots idle;
 * 6 pixels' 12 fit the 16 registers with the two weight vectors and the broadcast. With `prefetch`,
 * one line from there on is fetched into L2 per four steps. */
B8_INLINE void b8_tile_vnni_body(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                                 const int8_t* w, const b8_sign_form form, const int32_t* pixel_terms,
                                 const int32_t* bias, int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS],
                                 const b8_block_epilogue* e, int8_t* out, int32_t stride, int32_t count,
                                 const int8_t* prefetch) {
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  const __m256i b0 = _mm256_loadu_si256((const __m256i*)bias), b1 = _mm256_loadu_si256((const __m256i*)(bias + 8));
#define B8_START(b, p) (form == B8_FORM_SHIFTED ? _mm256_add_epi32(b, _mm256_set1_epi32(pixel_terms[p])) : b)
  __m256i a00 = B8_START(b0, 0), a01 = B8_START(b1, 0), a10 = B8_START(b0, 1), a11 = B8_START(b1, 1);
  __m256i a20 = B8_START(b0, 2), a21 = B8_START(b1, 2), a30 = B8_START(b0, 3), a31 = B8_START(b1, 3);
  __m256i a40 = B8_START(b0, 4), a41 = B8_START(b1, 4), a50 = B8_START(b0, 5), a51 = B8_START(b1, 5);
#undef B8_START
#define B8_STEP(pixel, acc0, acc1, kk)                              \
  do {                                                              \
    int32_t quad;                                                   \
    memcpy(&quad, (pixel) + (kk), 4);                               \
    __m256i x = _mm256_set1_epi32(quad);                            \
    if (form == B8_FORM_SHIFTED) {                                  \
      acc0 = _mm256_dpbusd_avx_epi32(acc0, w0, x);                  \
      acc1 = _mm256_dpbusd_avx_epi32(acc1, w1, x);                  \
    } else {                                                        \
      if (form == B8_FORM_OFFSET) x = _mm256_xor_si256(x, flip);    \
      acc0 = _mm256_dpbusd_avx_epi32(acc0, x, w0);                  \
      acc1 = _mm256_dpbusd_avx_epi32(acc1, x, w1);                  \
    }                                                               \
  } while (0)
#define B8_STEPS(kk, wk)                                                  \
  do {                                                                    \
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wk));          \
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)((wk) + 32));   \
    B8_STEP(p0, a00, a01, kk);                                            \
    B8_STEP(p1, a10, a11, kk);                                            \
    B8_STEP(p2, a20, a21, kk);                                            \
    B8_STEP(p3, a30, a31, kk);                                            \
    B8_STEP(p4, a40, a41, kk);                                            \
    B8_STEP(p5, a50, a51, kk);                                            \
  } while (0)
  for (int32_t s = 0; s < segments; ++s) {
    const int8_t *p0 = segment[s][0], *p1 = segment[s][1], *p2 = segment[s][2];
    const int8_t *p3 = segment[s][3], *p4 = segment[s][4], *p5 = segment[s][5];
    int32_t k = 0;
    for (; k + 16 <= run; k += 16, w += 256) {
      if (prefetch) {
        _mm_prefetch((const char*)prefetch, _MM_HINT_T1);
        prefetch += 64;
      }
      B8_STEPS(k, w);
      B8_STEPS(k + 4, w + 64);
      B8_STEPS(k + 8, w + 128);
      B8_STEPS(k + 12, w + 192);
    }
    for (; k < run; k += 4, w += 64) B8_STEPS(k, w);
  }
#undef B8_STEPS
#undef B8_STEP
  if (e) { /* two pixels per 32 bytes; the full estimate (b8_conv2d_s8_avx2's estimate_mode) */
    const __m256i r[3] = {b8_block_finish_as(e, a00, a01, a10, a11, B8_ESTIMATE_FULL),
                          b8_block_finish_as(e, a20, a21, a30, a31, B8_ESTIMATE_FULL),
                          b8_block_finish_as(e, a40, a41, a50, a51, B8_ESTIMATE_FULL)};
    for (int32_t p = 0; p < count; ++p)
      _mm_storeu_si128((__m128i*)(out + (int64_t)p * stride),
                       p % 2 ? _mm256_extracti128_si256(r[p / 2], 1) : _mm256_castsi256_si128(r[p / 2]));
    return;
  }
  /* Lanes hold channels in packing order: each 256-bit half is 8 channels of 4 bytes. */
  const __m256i all[B8_TILE_PIXELS][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
  for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
    _mm256_storeu_si256((__m256i*)acc[p], all[p][0]);
    _mm256_storeu_si256((__m256i*)(acc[p] + 8), all[p][1]);
  }
}
#endif

#if B8_USE_AVXVNNI
/* b8_tile_vnni_body for one pixel (a 7x7 output's 49th, which took a whole tile's time): four
 * steps at a time into four pairs of accumulators, summed at the end, so that the steps do not
 * wait on one chain of vpdpbusd. */
static __attribute__((noinline)) void b8_tile_vnni_one(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments,
                                                       int32_t run, const int8_t* w, const b8_sign_form form,
                                                       const int32_t* pixel_terms, const int32_t* bias,
                                                       int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS],
                                                       const b8_block_epilogue* e, int8_t* out) {
  const __m256i flip = _mm256_set1_epi8(form == B8_FORM_OFFSET ? (char)0x80 : 0);
  const __m256i term = _mm256_set1_epi32(form == B8_FORM_SHIFTED ? pixel_terms[0] : 0);
  __m256i a[4][2];
  for (int32_t i = 0; i < 4; ++i) a[i][0] = a[i][1] = _mm256_setzero_si256();
  a[0][0] = _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)bias), term);
  a[0][1] = _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)(bias + 8)), term);
#define B8_ONE(i, kk, wk)                                                                             \
  do {                                                                                                \
    int32_t quad;                                                                                     \
    memcpy(&quad, px + (kk), 4);                                                                      \
    const __m256i x = _mm256_set1_epi32(quad);                                                        \
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wk)), w1 = _mm256_loadu_si256((const __m256i*)((wk) + 32)); \
    if (form == B8_FORM_SHIFTED) {                                                                    \
      a[i][0] = _mm256_dpbusd_avx_epi32(a[i][0], w0, x);                                              \
      a[i][1] = _mm256_dpbusd_avx_epi32(a[i][1], w1, x);                                              \
    } else {                                                                                          \
      a[i][0] = _mm256_dpbusd_avx_epi32(a[i][0], _mm256_xor_si256(x, flip), w0);                      \
      a[i][1] = _mm256_dpbusd_avx_epi32(a[i][1], _mm256_xor_si256(x, flip), w1);                      \
    }                                                                                                 \
  } while (0)
  for (int32_t s = 0; s < segments; ++s) {
    const int8_t* px = segment[s][0];
    int32_t k = 0;
    for (; k + 16 <= run; k += 16, w += 256) {
      B8_ONE(0, k, w);
      B8_ONE(1, k + 4, w + 64);
      B8_ONE(2, k + 8, w + 128);
      B8_ONE(3, k + 12, w + 192);
    }
    for (; k < run; k += 4, w += 64) B8_ONE(0, k, w);
  }
#undef B8_ONE
  const __m256i low = _mm256_add_epi32(_mm256_add_epi32(a[0][0], a[1][0]), _mm256_add_epi32(a[2][0], a[3][0]));
  const __m256i high = _mm256_add_epi32(_mm256_add_epi32(a[0][1], a[1][1]), _mm256_add_epi32(a[2][1], a[3][1]));
  if (e) {
    _mm_storeu_si128((__m128i*)out, _mm256_castsi256_si128(b8_block_finish_as(e, low, high, low, high,
                                                                              B8_ESTIMATE_FULL)));
    return;
  }
  _mm256_storeu_si256((__m256i*)acc[0], low);
  _mm256_storeu_si256((__m256i*)(acc[0] + 8), high);
}
#endif

B8_INLINE void b8_tile(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run, const int8_t* w,
                       b8_sign_form form, const int32_t* pixel_terms, const int32_t* bias,
                       int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS], const b8_block_epilogue* e, int8_t* out,
                       int32_t stride, int32_t count, const int8_t* prefetch) {
#if B8_USE_AVXVNNI
  /* The sign trick and the corrected form are never chosen with AVX-VNNI. */
  if (count == 1) {
    b8_tile_vnni_one(segment, segments, run, w, form, pixel_terms, bias, acc, e, out);
    return;
  }
#define B8_TILE_FORM(f, sums) \
  b8_tile_vnni_body(segment, segments, run, w, f, sums, bias, acc, e, out, stride, count, prefetch)
  switch (form) {
    case B8_FORM_UNSIGNED: B8_TILE_FORM(B8_FORM_UNSIGNED, NULL); break;
    case B8_FORM_SHIFTED: B8_TILE_FORM(B8_FORM_SHIFTED, pixel_terms); break;
    default: B8_TILE_FORM(B8_FORM_OFFSET, NULL); break;
  }
#else
  (void)prefetch;
#define B8_TILE_FORM(f, sums) b8_tile_body(segment, segments, run, w, f, sums, bias, acc, e, out, stride, count)
  switch (form) {
    case B8_FORM_UNSIGNED: B8_TILE_FORM(B8_FORM_UNSIGNED, NULL); break;
    case B8_FORM_SHIFTED: B8_TILE_FORM(B8_FORM_SHIFTED, pixel_terms); break;
    case B8_FORM_OFFSET: B8_TILE_FORM(B8_FORM_OFFSET, NULL); break;
    case B8_FORM_SIGN: B8_TILE_FORM(B8_FORM_SIGN, NULL); break;
    case B8_FORM_CORRECTED: B8_TILE_FORM(B8_FORM_CORRECTED, pixel_terms); break;
  }
#endif
#undef B8_TILE_FORM
}

/* The corrected form (b8_tile_body) on two whole blocks at once, w's and the next one
 * (`next_block` bytes on), for two pixels of the tile, p and p + 1: each pixel's broadcast of |a|
 * and of its mask then serve four weight vectors instead of two. The patches come split
 * (b8_split_magnitude), pixel p's |a| at split + p x 2 depth and its mask `depth` bytes on: taking
 * the mask and |a| out of the steps frees the vector ports that the xors and adds share (on AMD
 * Zen 4 the multiplications have two of the four), 1.05-1.2x on ResNet-18's layers. The weights
 * are memory operands, so that the 8 accumulators and the pixel's values fit in the 16 registers.
 * Both blocks requantize in registers (e0, e1) and the pixels < count are written to out (rows
 * `stride` bytes apart). `narrow`: the second block is a layer's last 8 channels (24 left: the
 * products of its 8 channels of zero weights are not made). */
B8_INLINE void b8_tile_pair_half(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                                 const int32_t* negative_sums, const int32_t* bias, const b8_block_epilogue* e0,
                                 const b8_block_epilogue* e1, int8_t* out, int32_t stride, int32_t count, const int p,
                                 const int narrow) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i b0 = _mm256_loadu_si256((const __m256i*)bias), b1 = _mm256_loadu_si256((const __m256i*)(bias + 8));
  const __m256i b2 = _mm256_loadu_si256((const __m256i*)(bias + 16)), b3 = _mm256_loadu_si256((const __m256i*)(bias + 24));
  const __m256i c0 = _mm256_set1_epi32(negative_sums[p]), c1 = _mm256_set1_epi32(negative_sums[p + 1]);
  __m256i a00 = _mm256_add_epi32(b0, c0), a01 = _mm256_add_epi32(b1, c0);
  __m256i a02 = _mm256_add_epi32(b2, c0), a03 = _mm256_add_epi32(b3, c0);
  __m256i a10 = _mm256_add_epi32(b0, c1), a11 = _mm256_add_epi32(b1, c1);
  __m256i a12 = _mm256_add_epi32(b2, c1), a13 = _mm256_add_epi32(b3, c1);
#define B8_MAC(acc, offset)                                                                        \
  acc = _mm256_add_epi32(                                                                          \
      acc, _mm256_madd_epi16(_mm256_maddubs_epi16(                                                 \
                                 x, _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(wk + (offset))), \
                                                     negative)),                                   \
                             ones))
#define B8_STEP(pixel, acc0, acc1, acc2, acc3)                 \
  do {                                                         \
    int32_t quad, sign;                                        \
    memcpy(&quad, (pixel) + k, 4);                             \
    memcpy(&sign, (pixel) + depth + k, 4);                     \
    const __m256i x = _mm256_set1_epi32(quad), negative = _mm256_set1_epi32(sign); \
    B8_MAC(acc0, 0);                                           \
    B8_MAC(acc1, 32);                                          \
    B8_MAC(acc2, next_block);                                  \
    if (!narrow) B8_MAC(acc3, next_block + 32);                \
  } while (0)
  const int8_t *x0 = split + (int64_t)p * 2 * depth, *x1 = x0 + 2 * (int64_t)depth;
  for (int32_t k = 0; k < depth; k += 4, w += 64) {
    const int8_t* wk = w;
    B8_STEP(x0, a00, a01, a02, a03);
    B8_STEP(x1, a10, a11, a12, a13);
  }
#undef B8_STEP
#undef B8_MAC
  const __m256i r0 = b8_block_finish(e0, a00, a01, a10, a11);
  if (narrow) {
    const __m128i r1 = b8_block_finish_x8(e1, a02, a12);
    if (count > p) {
      _mm_storeu_si128((__m128i*)(out + (int64_t)p * stride), _mm256_castsi256_si128(r0));
      _mm_storel_epi64((__m128i*)(out + (int64_t)p * stride + 16), r1);
    }
    if (count > p + 1) {
      _mm_storeu_si128((__m128i*)(out + (int64_t)(p + 1) * stride), _mm256_extracti128_si256(r0, 1));
      _mm_storel_epi64((__m128i*)(out + (int64_t)(p + 1) * stride + 16), _mm_unpackhi_epi64(r1, r1));
    }
    return;
  }
  const __m256i r1 = b8_block_finish(e1, a02, a03, a12, a13);
  if (count > p) {
    _mm_storeu_si128((__m128i*)(out + (int64_t)p * stride), _mm256_castsi256_si128(r0));
    _mm_storeu_si128((__m128i*)(out + (int64_t)p * stride + 16), _mm256_castsi256_si128(r1));
  }
  if (count > p + 1) {
    _mm_storeu_si128((__m128i*)(out + (int64_t)(p + 1) * stride), _mm256_extracti128_si256(r0, 1));
    _mm_storeu_si128((__m128i*)(out + (int64_t)(p + 1) * stride + 16), _mm256_extracti128_si256(r1, 1));
  }
}

#if B8_USE_AVX512BW
/* Pixel p's 4 bytes of |a| at step k of its split patch (b8_split_magnitude: |a| at split + p x 2
 * depth, the mask `depth` bytes on), and those of its mask, each broadcast to every lane. */
B8_INLINE void b8_split_broadcast(const int8_t* split, int32_t depth, int32_t p, int32_t k, __m512i* x,
                                  __m512i* negative) {
  int32_t quad, sign;
  memcpy(&quad, split + (int64_t)p * 2 * depth + k, 4);
  memcpy(&sign, split + (int64_t)p * 2 * depth + depth + k, 4);
  *x = _mm512_set1_epi32(quad);
  *negative = _mm512_set1_epi32(sign);
}

/* b8_tile_pair_half on 512-bit vectors, for the tile's 4 pixels at once: a block's 16 channels of
 * a step are its 64 packed bytes, one vector, so that each of the 8 accumulators is a pixel's
 * block and each step's broadcasts of |a| and of its mask serve both blocks. Twice the products
 * per instruction of the 256-bit form, with the same exact arithmetic (one AMD Zen 5 core: the
 * 1x1 layers of ResNet-50 1.5-1.8x faster, of MobileNetV2 1.3-1.7x, least on 16-32 input channels,
 * where the output stage weighs most). The two blocks requantize as one of 32 channels on 16-lane
 * vectors (`e`, the AVX-512 VNNI build's output stage). */
B8_INLINE void b8_tile_pair_as(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                               const int32_t* negative_sums, const int32_t* bias, const b8_block32_epilogue* e,
                               int8_t* out, int32_t stride, int32_t count, const int mode) {
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i b0 = _mm512_loadu_si512((const void*)bias), b1 = _mm512_loadu_si512((const void*)(bias + 16));
  /* Named accumulators, not an array indexed by pixel: indexed, they were kept in memory between
   * the loop and the output stage, and copied register to register every step (named, MobileNetV2's
   * 1x1 layers on pairs of blocks 1.07-1.15x faster on a Zen 5 core). */
#define B8_START(p, acc0, acc1)                                    \
  const __m512i term##p = _mm512_set1_epi32(negative_sums[p]);    \
  __m512i acc0 = _mm512_add_epi32(b0, term##p), acc1 = _mm512_add_epi32(b1, term##p)
  B8_START(0, a00, a01);
  B8_START(1, a10, a11);
  B8_START(2, a20, a21);
  B8_START(3, a30, a31);
#undef B8_START
#define B8_MAC(acc, wv) \
  acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(x, _mm512_xor_si512(wv, negative)), ones))
#define B8_STEP(p, acc0, acc1)                               \
  do {                                                       \
    __m512i x, negative;                                     \
    b8_split_broadcast(split, depth, p, k, &x, &negative);   \
    B8_MAC(acc0, w0);                                        \
    B8_MAC(acc1, w1);                                        \
  } while (0)
  for (int32_t k = 0; k < depth; k += 4, w += 64) {
    const __m512i w0 = _mm512_loadu_si512((const void*)w), w1 = _mm512_loadu_si512((const void*)(w + next_block));
    B8_STEP(0, a00, a01);
    B8_STEP(1, a10, a11);
    B8_STEP(2, a20, a21);
    B8_STEP(3, a30, a31);
  }
#undef B8_STEP
#undef B8_MAC
  /* pixel p's 32 channels, then pixel p + 1's (a tile's last pixels past count: computed, not stored) */
  const __m512i r0 = b8_block32_finish_as(e, a00, 0, a01, 1, a10, 0, a11, 1, mode);
  const __m512i r1 = b8_block32_finish_as(e, a20, 0, a21, 1, a30, 0, a31, 1, mode);
  _mm256_storeu_si256((__m256i*)out, _mm512_castsi512_si256(r0));
  if (count > 1) _mm256_storeu_si256((__m256i*)(out + stride), _mm512_extracti64x4_epi64(r0, 1));
  if (count > 2) _mm256_storeu_si256((__m256i*)(out + 2 * (int64_t)stride), _mm512_castsi512_si256(r1));
  if (count > 3) _mm256_storeu_si256((__m256i*)(out + 3 * (int64_t)stride), _mm512_extracti64x4_epi64(r1, 1));
}

/* b8_tile_pair_as in the call's estimate mode (a branch that always goes the same way in a call;
 * on a Zen 5 core the 1x1 layers on 16-64 input channels 1.03-1.08x faster than in the full mode,
 * the others 1.0x). */
static void b8_tile_pair(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                         const int32_t* negative_sums, const int32_t* bias, const b8_block32_epilogue* e,
                         int8_t* out, int32_t stride, int32_t count, int32_t mode) {
  switch (mode) {
    case B8_ESTIMATE_CLAMPED:
      b8_tile_pair_as(split, depth, w, next_block, negative_sums, bias, e, out, stride, count, B8_ESTIMATE_CLAMPED);
      return;
    case B8_ESTIMATE_BOUNDED:
      b8_tile_pair_as(split, depth, w, next_block, negative_sums, bias, e, out, stride, count, B8_ESTIMATE_BOUNDED);
      return;
    default:
      b8_tile_pair_as(split, depth, w, next_block, negative_sums, bias, e, out, stride, count, B8_ESTIMATE_FULL);
  }
}

/* A layer's last whole block of 16 channels on the 512-bit form of b8_tile_pair, alone or, where
 * `narrow`, with the layer's last 8 channels beside it on 256-bit vectors (24 left): 4 pixel
 * accumulators of the block (and 4 of the 8 channels), each pixel's broadcasts of |a| and of its
 * mask serving both. The block requantizes on 16-lane vectors (`e`, loaded for 16 channels), the
 * 8 channels as b8_tile_pair_narrow's do (`e8`). */
B8_INLINE void b8_tile_block_body(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                                  const int32_t* negative_sums, const int32_t* bias, const b8_block32_epilogue* e,
                                  const b8_block_epilogue* e8, int8_t* out, int32_t stride, int32_t count,
                                  const int narrow) {
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i b0 = _mm512_loadu_si512((const void*)bias);
  const __m256i b1 = narrow ? _mm256_loadu_si256((const __m256i*)(bias + 16)) : _mm256_setzero_si256();
#define B8_START(p, acc, acc8)                                    \
  const __m512i term##p = _mm512_set1_epi32(negative_sums[p]);    \
  __m512i acc = _mm512_add_epi32(b0, term##p);                    \
  __m256i acc8 = _mm256_add_epi32(b1, _mm512_castsi512_si256(term##p))
  B8_START(0, a0, n0);
  B8_START(1, a1, n1);
  B8_START(2, a2, n2);
  B8_START(3, a3, n3);
#undef B8_START
#define B8_STEP(p, acc, acc8)                                                                                \
  do {                                                                                                       \
    __m512i x, negative;                                                                                     \
    b8_split_broadcast(split, depth, p, k, &x, &negative);                                                   \
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(x, _mm512_xor_si512(w0, negative)), ones)); \
    if (narrow)                                                                                              \
      acc8 = _mm256_add_epi32(                                                                               \
          acc8, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm512_castsi512_si256(x),                            \
                                                       _mm256_xor_si256(w1, _mm512_castsi512_si256(negative))), \
                                  _mm512_castsi512_si256(ones)));                                            \
  } while (0)
  for (int32_t k = 0; k < depth; k += 4, w += 64) {
    const __m512i w0 = _mm512_loadu_si512((const void*)w);
    const __m256i w1 = narrow ? _mm256_loadu_si256((const __m256i*)(w + next_block)) : _mm256_setzero_si256();
    B8_STEP(0, a0, n0);
    B8_STEP(1, a1, n1);
    B8_STEP(2, a2, n2);
    B8_STEP(3, a3, n3);
  }
#undef B8_STEP
  const __m512i r = b8_block32_finish(e, a0, 0, a1, 0, a2, 0, a3, 0); /* pixel p's 16 bytes in lane p */
  _mm_storeu_si128((__m128i*)out, _mm512_castsi512_si128(r));
  if (count > 1) _mm_storeu_si128((__m128i*)(out + stride), _mm512_extracti32x4_epi32(r, 1));
  if (count > 2) _mm_storeu_si128((__m128i*)(out + 2 * (int64_t)stride), _mm512_extracti32x4_epi32(r, 2));
  if (count > 3) _mm_storeu_si128((__m128i*)(out + 3 * (int64_t)stride), _mm512_extracti32x4_epi32(r, 3));
  if (!narrow) return;
  const __m128i r01 = b8_block_finish_x8(e8, n0, n1), r23 = b8_block_finish_x8(e8, n2, n3); /* p's 8, q's 8 */
  _mm_storel_epi64((__m128i*)(out + 16), r01);
  if (count > 1) _mm_storel_epi64((__m128i*)(out + stride + 16), _mm_unpackhi_epi64(r01, r01));
  if (count > 2) _mm_storel_epi64((__m128i*)(out + 2 * (int64_t)stride + 16), r23);
  if (count > 3) _mm_storel_epi64((__m128i*)(out + 3 * (int64_t)stride + 16), _mm_unpackhi_epi64(r23, r23));
}

static void b8_tile_block(const int8_t* split, int32_t depth, const int8_t* w, const int32_t* negative_sums,
                          const int32_t* bias, const b8_block32_epilogue* e, int8_t* out, int32_t stride,
                          int32_t count) {
  b8_tile_block_body(split, depth, w, 0, negative_sums, bias, e, NULL, out, stride, count, 0);
}

static void b8_tile_block_narrow(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                                 const int32_t* negative_sums, const int32_t* bias, const b8_block32_epilogue* e,
                                 const b8_block_epilogue* e8, int8_t* out, int32_t stride, int32_t count) {
  b8_tile_block_body(split, depth, w, next_block, negative_sums, bias, e, e8, out, stride, count, 1);
}
#else
static void b8_tile_pair(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                         const int32_t* negative_sums, const int32_t* bias, const b8_block_epilogue* e0,
                         const b8_block_epilogue* e1, int8_t* out, int32_t stride, int32_t count) {
  b8_tile_pair_half(split, depth, w, next_block, negative_sums, bias, e0, e1, out, stride, count, 0, 0);
  if (count > 2) b8_tile_pair_half(split, depth, w, next_block, negative_sums, bias, e0, e1, out, stride, count, 2, 0);
}

/* b8_tile_pair on a whole block and a layer's last 8 channels. */
static void b8_tile_pair_narrow(const int8_t* split, int32_t depth, const int8_t* w, int64_t next_block,
                                const int32_t* negative_sums, const int32_t* bias, const b8_block_epilogue* e0,
                                const b8_block_epilogue* e1, int8_t* out, int32_t stride, int32_t count) {
  b8_tile_pair_half(split, depth, w, next_block, negative_sums, bias, e0, e1, out, stride, count, 0, 1);
  if (count > 2) b8_tile_pair_half(split, depth, w, next_block, negative_sums, bias, e0, e1, out, stride, count, 2, 1);
}
#endif /* B8_USE_AVX512BW */
#endif

static b8_status b8_conv2d_s8_avx2(const b8_conv_params* conv, const b8_requant_params* quant,
                                   const b8_dims* input_dims, const int8_t* input,
                                   int32_t input_nonnegative, const b8_dims* filter_dims,
                                   const int8_t* packed, const int32_t* bias,
                                   const b8_dims* output_dims, int8_t* output,
                                   const b8_pixels* pixels, int32_t oc_begin, int32_t oc_end,
                                   int8_t* scratch) {
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t row_len = b8_patch_row(filter_dims), depth = b8_patch_depth(filter_dims);
  const int32_t patch_stride = b8_patch_stride(filter_dims);
  const int contiguous = b8_patch_contiguous(filter_dims);
  const int64_t image_size = (int64_t)input_dims->h * input_dims->w * input_dims->c;
  int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS];
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  /* Scratch: gathered patches, `patch_stride` bytes apart, a tile's (a chunk's for contiguous
   * patches; zero past each kernel row, where packed weights are zero too), then `depth` bytes of
   * the pad value, read in place of padding rows. */
  const int32_t gathered = b8_gathered_tiles(filter_dims) * B8_TILE_PIXELS; /* patches in the scratch */
  memset(scratch, 0, (size_t)gathered * patch_stride);
  memset(scratch + (int64_t)gathered * patch_stride, conv->pad_value, (size_t)depth);
  const int8_t* padding = scratch + (int64_t)gathered * patch_stride;
  /* Where a tile reads its pixels' patches: `segments` runs of `seg_len` bytes per pixel, in place
   * in the input where possible:
   *  - per tap (channels a multiple of 4, few taps, weights of more than B8_CHUNK_WEIGHT_BYTES):
   *    one run of c bytes per kernel tap, the pad value's bytes for taps outside the input, so
   *    nothing is ever copied;
   *  - else per kernel row (no dilation): a row's k_w x c input bytes, read as row_len bytes (past
   *    the run's end, where the weights are zero) for windows inside the input horizontally unless
   *    that read would pass the end of the input;
   *  - else a patch gathered into scratch.
   * Tiles come in chunks of B8_CHUNK_TILES, and each channel block runs over a whole chunk: its
   * weights are then fetched once per chunk rather than once per tile, from memory where they
   * exceed L2 (a 3x3 convolution on 512 channels has 2.4 MB of them), from L2 where a block's fit
   * in L1 (36 KB per 32 channels on 128: ResNet-18's 28x28 layers 1.06x faster with AVX-512
   * VNNI), and the block's set-up (its epilogue's constants) serves the chunk (MobileNetV2's 1x1
   * layers on 16-32 channels: 1.2-1.3x with VNNI, 1.1x with AVX2). */
  const int32_t k_h = filter_dims->h, k_w = filter_dims->w, in_c = input_dims->c, in_w = input_dims->w;
  const int8_t* input_end = input + (int64_t)input_dims->n * image_size;
  const int per_tap = b8_reads_per_tap(filter_dims);
  const int per_row = !per_tap && !contiguous && conv->dilation_w == 1 && k_h <= B8_MAX_SEGMENTS;
  const int copy_rows = contiguous && conv->dilation_w == 1; /* b8_copy_rows where windows are inside */
  const int32_t segments = per_tap ? k_h * k_w : per_row ? k_h : 1;
  const int32_t seg_len = per_tap ? in_c : per_row ? row_len : depth;
  /* 1x1, stride 1, no padding (most of MobileNet's convolutions): pixel p's patch is the input's
   * pixel p, whatever its coordinates (in_c a multiple of 4: no read past the input). */
  const int pointwise = k_h == 1 && k_w == 1 && conv->stride_h == 1 && conv->stride_w == 1 && conv->pad_top == 0 &&
                        conv->pad_left == 0 && input_dims->h == out_h && input_dims->w == out_w && in_c % 4 == 0;
  const int32_t last_row_offset = (k_h - 1) * conv->dilation_h; /* of a window's last row, in input rows */
  const int64_t row_stride = (int64_t)conv->dilation_h * in_w * in_c;
  const int8_t* segment[B8_CHUNK_MAX_TILES][B8_MAX_SEGMENTS][B8_TILE_PIXELS];
  const int32_t padded_c = b8_round_up(out_c, B8_TILE_CHANNELS);
  const int32_t* weight_sums = (const int32_t*)(packed + (int64_t)padded_c * depth);
  /* Per pixel of a chunk, the term that its tiles' accumulators start from (tiles of shifted
   * weights, the AVX2 corrected form). */
  int32_t pixel_terms[B8_CHUNK_MAX_TILES][B8_TILE_PIXELS];
  /* A segment's bytes that the filter weighs (the rest of seg_len has zero weights). */
  const int32_t seg_real = per_tap ? in_c : per_row ? k_w * in_c : contiguous ? k_h * k_w * in_c : depth;
  const int32_t weight_range = weight_sums[padded_c];
  /* The VNNI builds gather the contiguous patches of signed inputs as a + 128 (their filters are
   * never packed shifted): the tiles take them as unsigned inputs, the accumulators start from
   * the bias less 128 x the weight sums, and neither the offset form's xor per pixel and step
   * nor the shifted form's sum per pixel remains (ResNet-18's 7x7 stem on 3 channels 1.03x
   * faster with AVX-512 VNNI, 1.09x with AVX-VNNI). */
  const int flip_patches = (B8_USE_AVX512VNNI || B8_USE_AVXVNNI) && contiguous && !input_nonnegative;
  const __m256i patch_flip = _mm256_set1_epi8(flip_patches ? (char)0x80 : 0);
#if B8_USE_AVX512VNNI
  /* Weights packed shifted (b8_tile_body) take a term per pixel; unshifted ones on signed inputs
   * the offset a + 128. */
  const int shifted = weight_range == B8_WEIGHTS_SHIFTED;
  const int32_t shift = shifted ? 128 : 0;
  const int offset = !shifted && !input_nonnegative;
  const int nonnegative = input_nonnegative || flip_patches;
#else
  /* Filters packed shifted take b8_tile's shifted form; signed inputs the offset form where the
   * weights are 7-bit, else the corrected form where the channel blocks repay the split of each
   * pixel's patch (b8_split_magnitude): 4 blocks or more, or 128 bytes of patch times blocks (on
   * Zen 4, 1.1-1.3x the sign trick's speed on MobileNetV2's and SqueezeNet's 1x1 layers of 16-48
   * channels; 0.9x on a 1x1 layer of 32 -> 16 channels and on a 3-channel stem of 32), else the
   * sign trick. With AVX-512BW always the corrected form, on 512-bit vectors (on Zen 5, against the
   * sign trick on 256-bit ones: MobileNetV2's 3-channel stem of 32 1.14x, SqueezeNet's 1x1 layer
   * of 64 -> 16 channels 1.25x, MobileNetV2's of 32 -> 16 1.0x). */
  const int32_t blocks = padded_c / B8_TILE_CHANNELS;
  /* With AVX-VNNI every product is exact in int32 (vpdpbusd): the offset form serves signed
   * inputs whatever the weights. */
  const int offset = !input_nonnegative && weight_range != B8_WEIGHTS_SHIFTED &&
                     (B8_USE_AVXVNNI || (weight_range == B8_WEIGHTS_7BIT && depth <= (1 << 15)));
  const b8_sign_form form = weight_range == B8_WEIGHTS_SHIFTED ? B8_FORM_SHIFTED
                            : input_nonnegative || flip_patches ? B8_FORM_UNSIGNED : offset ? B8_FORM_OFFSET
                            : B8_USE_AVX512BW || blocks > 3 || blocks * depth >= 128 ? B8_FORM_CORRECTED : B8_FORM_SIGN;
  /* Never with AVX-VNNI (its tiles of 6 pixels have no corrected or pair form, and its scratch
   * no split patches): a constant there, so that that code is not even compiled in. */
  const int corrected = !B8_USE_AVXVNNI && form == B8_FORM_CORRECTED;
  const int32_t shift = form != B8_FORM_SHIFTED ? 0 : B8_USE_AVXVNNI ? 128 : 64;
#endif
  /* The bias of every channel block, zero past the last channel, where the tiles' accumulators
   * start (the offset forms: less 128 x the weight sum). */
  int32_t* start = (int32_t*)(padding + depth);
  for (int32_t oc = 0; oc < padded_c; ++oc) start[oc] = bias && oc < out_c ? bias[oc] : 0;
  if (offset)
    for (int32_t oc = 0; oc < out_c; ++oc) start[oc] -= 128 * weight_sums[oc];
  /* The vector epilogue needs every shift <= 0 (factors below 1, the usual case); its estimate's
   * constants are prepared here for the whole call. Shift-only requantization (multiplier NULL:
   * power-of-two scales) takes the scalar epilogue. */
  int vector_epilogue = quant->multiplier != NULL && out_c % 8 == 0;
  for (int32_t oc = 0; oc < out_c; ++oc) vector_epilogue &= quant->shift[oc] <= 0;
  float* table = (float*)(start + padded_c); /* scale, then the two offsets, padded_c each */
#if !B8_USE_AVX512VNNI
  /* The corrected form's patches, a chunk's, split into |a| and the mask of a < 0 (b8_tile_body,
   * b8_tile_pair_half). */
  int8_t* split = (int8_t*)(table + 3 * padded_c);
  /* Each sum: the bias and k_h x k_w x c products (the padding's weights are zero). The AVX-VNNI
   * tiles keep the full estimate: on an Intel core (Emerald Rapids) a mode chosen in their output
   * stage ran ResNet-18's 3x3 layers 0.83-0.84x and MobileNetV2's 7x7 ones 0.88-0.90x, where the
   * AVX2 tiles gained (bench_conv.py: MobileNetV2's convolutions 1.04x there, 1.02x on AMD Zen 4). */
  const int32_t estimate_mode = vector_epilogue && !B8_USE_AVXVNNI
                                    ? b8_estimate_mode(quant, bias, out_c, (int64_t)k_h * k_w * in_c)
                                    : B8_ESTIMATE_FULL;
#endif
  if (vector_epilogue) b8_estimate_table(quant, out_c, table, table + padded_c, table + 2 * padded_c);
  /* Tiles run over the output pixels in order, across row ends (a 7-wide output would otherwise
   * waste part of every tile). The coordinates of the next pixel are stepped along instead of
   * divided out per pixel (the divisions cost as much as the arithmetic of a small-patch tile). */
  int32_t ox = (int32_t)(begin % out_w), oy = (int32_t)(begin / out_w % out_h);
  const int8_t* image = input + begin / out_w / out_h * image_size;
  const int64_t chunk_pixels = (int64_t)B8_CHUNK_TILES * B8_TILE_PIXELS;
  for (int64_t chunk = begin, chunk_end; chunk < end; chunk = chunk_end) {
    /* The last chunk takes one tile more rather than leave it to a chunk of its own, which would
     * fetch every block's weights again for its few pixels (a 7x7 output's 49th with AVX-VNNI's
     * 6-pixel tiles: ResNet-18's 7x7 x 512 layers, 2.4 MB of weights, 1.02-1.05x faster). */
    chunk_end = end - chunk <= chunk_pixels + B8_TILE_PIXELS ? end : chunk + chunk_pixels;
    const int32_t tiles = (int32_t)((chunk_end - chunk + B8_TILE_PIXELS - 1) / B8_TILE_PIXELS);
    for (int32_t t = 0; t < tiles; ++t) {
      const int8_t* (*tile_segment)[B8_TILE_PIXELS] = segment[t];
      if (pointwise) {
        const int64_t first = chunk + t * B8_TILE_PIXELS;
        for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
          tile_segment[0][p] = first + p < chunk_end ? input + (first + p) * in_c : padding;
        continue;
      }
      if ((per_row || copy_rows) && ox + B8_TILE_PIXELS <= out_w && chunk + (t + 1) * B8_TILE_PIXELS <= chunk_end) {
        /* A whole tile in one output row, every window inside the input (most tiles of a layer
         * with wide rows): each pixel's rows are the previous pixel's, stride_w x c bytes on (read
         * there, or copied for contiguous patches). Its pixels then cost no tests (per pixel they
         * took 16% of a 7x7 stem's time). */
        const int32_t ix0 = ox * conv->stride_w - conv->pad_left, iy0 = oy * conv->stride_h - conv->pad_top;
        const int64_t step = (int64_t)conv->stride_w * in_c;
        if (ix0 >= 0 && ix0 + (B8_TILE_PIXELS - 1) * conv->stride_w + k_w <= in_w && iy0 >= 0 &&
            iy0 + last_row_offset < input_dims->h) {
          const int8_t* first_row = image + ((int64_t)iy0 * in_w + ix0) * in_c;
          const int8_t* last_row = first_row + (B8_TILE_PIXELS - 1) * step + (int64_t)last_row_offset * in_w * in_c;
          if ((copy_rows ? b8_round_up(row_len, 32) : row_len) <= input_end - last_row) {
            if (copy_rows) {
              int8_t* patch = scratch + (int64_t)t * B8_TILE_PIXELS * patch_stride;
              b8_copy_tile_rows(first_row, step, row_stride, k_h, row_len, patch_flip, patch, patch_stride);
              for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) tile_segment[0][p] = patch + p * patch_stride;
            } else
              for (int32_t ky = 0; ky < k_h; ++ky)
                for (int32_t p = 0; p < B8_TILE_PIXELS; ++p)
                  tile_segment[ky][p] = first_row + ky * row_stride + p * step;
            if ((ox += B8_TILE_PIXELS) == out_w) {
              ox = 0;
              if (++oy == out_h) {
                oy = 0;
                image += image_size;
              }
            }
            continue;
          }
        }
      }
      for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
        if (chunk + t * B8_TILE_PIXELS + p >= chunk_end) { /* past the last pixel: any readable bytes do */
          for (int32_t s = 0; s < segments; ++s) tile_segment[s][p] = padding;
          continue;
        }
        const int32_t ix0 = ox * conv->stride_w - conv->pad_left;
        if (per_tap) {
          for (int32_t ky = 0; ky < k_h; ++ky) {
            const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
            for (int32_t kx = 0; kx < k_w; ++kx) {
              const int32_t ix = ix0 + kx * conv->dilation_w;
              const int inside = iy >= 0 && iy < input_dims->h && ix >= 0 && ix < in_w;
              tile_segment[ky * k_w + kx][p] = inside ? image + ((int64_t)iy * in_w + ix) * in_c : padding;
            }
          }
        } else {
          int inside = per_row && ix0 >= 0 && ix0 + k_w <= in_w;
          const int32_t iy0 = oy * conv->stride_h - conv->pad_top;
          const int8_t* first_row = image + ((int64_t)iy0 * in_w + ix0) * in_c;
          if (inside && iy0 >= 0 && iy0 + last_row_offset < input_dims->h &&
              row_len <= input_end - (first_row + (int64_t)last_row_offset * in_w * in_c)) {
            /* Every row inside the input (most pixels): rows a fixed stride apart. */
            for (int32_t ky = 0; ky < k_h; ++ky) tile_segment[ky][p] = first_row + ky * row_stride;
          } else if (inside) {
            for (int32_t ky = 0; ky < k_h; ++ky) {
              const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
              const int8_t* at = image + ((int64_t)iy * in_w + ix0) * in_c;
              tile_segment[ky][p] = iy < 0 || iy >= input_dims->h ? padding : at;
              if (tile_segment[ky][p] == at && row_len > input_end - at) inside = 0; /* the last pixels */
            }
          }
          if (!inside) { /* the scratch holds the chunk's patches (chunks of one tile unless contiguous) */
            int8_t* patch = scratch + (int64_t)(t * B8_TILE_PIXELS + p) * patch_stride;
            if (copy_rows && ix0 >= 0 && ix0 + k_w <= in_w && iy0 >= 0 &&
                iy0 + last_row_offset < input_dims->h &&
                b8_round_up(row_len, 32) <= input_end - (first_row + (int64_t)last_row_offset * in_w * in_c))
              b8_copy_rows(first_row, row_stride, k_h, row_len, patch_flip, patch); /* the window inside the input */
            else {
              b8_gather_patch(conv, input_dims, image, filter_dims, oy, ox, 0, row_len, patch);
              for (int32_t i = 0; flip_patches && i < depth; i += 32) /* within patch_stride: depth + 32 */
                _mm256_storeu_si256((__m256i*)(patch + i),
                                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(patch + i)), patch_flip));
            }
            for (int32_t s = 0; s < segments; ++s) tile_segment[s][p] = patch + s * seg_len;
          }
        }
        if (++ox == out_w) {
          ox = 0;
          if (++oy == out_h) {
            oy = 0;
            image += image_size;
          }
        }
      }
    }
    /* Per pixel, the term of tiles of shifted weights (-shift x the sum of the patch's real
     * bytes: a segment's first seg_real, the rest has zero weights) or of the AVX2 corrected form
     * (the sum of |a| over every negative byte it reads, while the patch is split into the |a| and
     * the mask that its tiles read). */
#if B8_USE_AVX512VNNI || B8_USE_AVXVNNI
    if (shift)
      for (int32_t t = 0; t < tiles; ++t) b8_patch_terms(segment[t], segments, seg_real, shift, pixel_terms[t]);
#else
    if (shift || corrected)
      for (int32_t t = 0; t < tiles; ++t)
        for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
          if (corrected) {
            __m128i sums = _mm_setzero_si128();
            int8_t* magnitude = split + (int64_t)(t * B8_TILE_PIXELS + p) * 2 * depth;
            for (int32_t s = 0; s < segments; ++s)
              sums = b8_split_magnitude(segment[t][s][p], seg_len, magnitude + s * seg_len,
                                        magnitude + depth + s * seg_len, sums);
            pixel_terms[t][p] = (int32_t)(_mm_cvtsi128_si64(sums) + _mm_extract_epi64(sums, 1));
            continue;
          }
          /* within int32 for patches of up to 2^15 bytes */
          pixel_terms[t][p] = -shift * b8_patch_sum(segment[t], segments, p, seg_real);
        }
#endif
    for (int32_t oc0 = oc_begin, step; oc0 < oc_end; oc0 += step) {
      const int32_t channels = oc_end - oc0 < B8_TILE_CHANNELS ? oc_end - oc0 : B8_TILE_CHANNELS;
      step = B8_TILE_CHANNELS;
      const int8_t* w = packed + (int64_t)oc0 * depth;
#if B8_USE_AVX512VNNI
      /* Whole blocks of 32 (or a last block of exactly 16) channels requantize in registers. */
      const int fused = vector_epilogue && (channels == 32 || channels == 16);
      b8_block32_epilogue e;
      if (fused) b8_block32_epilogue_load(quant, table, padded_c, oc0, channels, &e);
#else
      /* Whole blocks of 16 channels requantize in registers. */
      const int fused = vector_epilogue && channels == 16;
      b8_block_epilogue e;
      if (fused) b8_block_epilogue_load(quant, table, padded_c, oc0, estimate_mode, &e);
      /* The corrected form takes two whole blocks at a time (b8_tile_pair) while two remain, and
       * the last 24 channels as a whole block and a narrow one (b8_tile_pair_narrow; MobileNetV2's
       * 1x1 layers to 24 channels 1.24x faster than by a whole block, then one of 8 channels and 8
       * of zero weights, each by b8_tile). */
      const int narrow = corrected && fused && oc_end - oc0 == B8_TILE_CHANNELS + 8;
      const int pair = corrected && fused && (oc_end - oc0 >= 2 * B8_TILE_CHANNELS || narrow);
      b8_block_epilogue next;
      if (pair) {
        b8_block_epilogue_load(quant, table, padded_c, oc0 + B8_TILE_CHANNELS, estimate_mode, &next);
        step = 2 * B8_TILE_CHANNELS;
      }
#if B8_USE_AVX512BW
      /* On 512-bit vectors the corrected form takes a layer's last whole block alone too
       * (b8_tile_block). Those tiles requantize on 16-lane vectors: a whole pair as one block of 32
       * channels, a last block of 16 (alone, or beside the last 8) as one of 16. */
      const int single = corrected && fused && !pair;
      b8_block32_epilogue wide_epilogue;
      if (pair || single)
        b8_block32_epilogue_load(quant, table, padded_c, oc0, pair && !narrow ? 2 * B8_TILE_CHANNELS : B8_TILE_CHANNELS,
                                 &wide_epilogue);
#endif
#endif
      for (int32_t t = 0; t < tiles; ++t) {
        const int64_t first = chunk + t * B8_TILE_PIXELS;
        const int32_t count = chunk_end - first < B8_TILE_PIXELS ? (int32_t)(chunk_end - first) : B8_TILE_PIXELS;
        int8_t* out = output + first * out_c;
        /* Large filters (read per tap), VNNI builds: a chunk's first four tiles also fetch the
         * next block's weights into L2, a quarter each (one line per four lines of their own), so
         * that they do not come from memory at the pace of the multiplications. In a model the
         * other layers' weights evict a layer's between two images: with AVX-VNNI, ResNet-18 ran
         * 1.14x / 1.11x faster whole at 1 / 2 threads, ResNet-50 1.06-1.08x (with the Winograd
         * tiles' prefetch of U), where a layer timed alone, its weights left in L2, gains
         * 1.0-1.1x. The other tiles fetch nothing (made to fetch their own weights' lines, the
         * 14x14 layers ran 0.8x). The AVX2 tiles, at half the rate, gained nothing by it. */
        const int8_t* prefetch = (B8_USE_AVX512VNNI || B8_USE_AVXVNNI) && per_tap && t < 4 &&
                                         oc0 + B8_TILE_CHANNELS < oc_end
                                     ? w + (int64_t)(4 + t) * B8_TILE_CHANNELS * depth / 4
                                     : NULL;
#if B8_USE_AVX512VNNI
#define B8_VNNI_TILE(tile) \
  tile(segment[t], segments, seg_len, w, pixel_terms[t], start + oc0, acc, fused ? &e : NULL, out + oc0, out_c, \
       count, prefetch)
        if (channels <= 16) {
          if (shifted) B8_VNNI_TILE(b8_tile_narrow_shifted);
          else if (nonnegative) B8_VNNI_TILE(b8_tile_narrow_unsigned);
          else B8_VNNI_TILE(b8_tile_narrow_offset);
        } else {
          if (shifted) B8_VNNI_TILE(b8_tile_shifted);
          else if (nonnegative) B8_VNNI_TILE(b8_tile_unsigned);
          else B8_VNNI_TILE(b8_tile_offset);
        }
#undef B8_VNNI_TILE
#else
        /* The tile's split patches (b8_split_magnitude), the corrected tiles' one run of depth bytes. */
        const int8_t* magnitude = split + (int64_t)t * B8_TILE_PIXELS * 2 * depth;
        if (pair) {
          const int64_t next_block = (int64_t)B8_TILE_CHANNELS * depth;
#if B8_USE_AVX512BW
          if (!narrow)
            b8_tile_pair(magnitude, depth, w, next_block, pixel_terms[t], start + oc0, &wide_epilogue, out + oc0,
                         out_c, count, estimate_mode);
          else
            b8_tile_block_narrow(magnitude, depth, w, next_block, pixel_terms[t], start + oc0, &wide_epilogue, &next,
                                 out + oc0, out_c, count);
#else
          (narrow ? b8_tile_pair_narrow : b8_tile_pair)(magnitude, depth, w, next_block, pixel_terms[t], start + oc0,
                                                        &e, &next, out + oc0, out_c, count);
#endif
          continue;
        }
#if B8_USE_AVX512BW
        if (single) {
          b8_tile_block(magnitude, depth, w, pixel_terms[t], start + oc0, &wide_epilogue, out + oc0, out_c, count);
          continue;
        }
#endif
        if (corrected) {
          const int8_t* split_segment[1][B8_TILE_PIXELS] = {
              {magnitude, magnitude + 2 * depth, magnitude + 4 * depth, magnitude + 6 * depth}};
          b8_tile(split_segment, 1, depth, w, form, pixel_terms[t], start + oc0, acc, fused ? &e : NULL, out + oc0,
                  out_c, count, prefetch);
        } else {
          b8_tile(segment[t], segments, seg_len, w, form, pixel_terms[t], start + oc0, acc, fused ? &e : NULL,
                  out + oc0, out_c, count, prefetch);
        }
#endif
        if (fused) continue;
        if (vector_epilogue) {
          b8_output_x8(acc[0], count, channels, oc0, quant, table, padded_c, out, out_c);
          continue;
        }
        for (int32_t p = 0; p < count; ++p)
          for (int32_t c = 0; c < channels; ++c)
            out[(int64_t)p * out_c + oc0 + c] = b8_output_s8(acc[p][c], quant, oc0 + c);
      }
    }
  }
  return B8_OK;
}
#if B8_USE_AMX
/* AMX (Intel's tile matrix unit, Sapphire Rapids on): tdpbssd multiplies a tile of 16 pixels x
 * 64 patch bytes (signed) by a tile of 16 x 4-byte steps x 16 channels (signed) into 16 x 16
 * int32 accumulators, exactly, in the unit beside the vector ports; one instruction does 16384
 * products, a 512-bit vpdpbusd 64. Patches are gathered into the scratch, rows back to back
 * (b8_amx_depth), 32 pixels at a time (two A tiles; 1x1 stride-1 layers read the input in place);
 * each pair of 16-channel blocks (B tiles) runs over them into four accumulator tiles started from
 * the bias, stored to the scratch and requantized with the VNNI tiles' epilogue. No offsets,
 * shifts or sums: signed times signed. */
enum { B8_AMX_PIXELS = 32, B8_WEIGHTS_AMX = 0x616d7831 };
/* Filters larger than a core's L2 cache (2 MB on Sapphire Rapids; a 3x3 on 512 channels has
 * 2.4 MB) run in chunks of groups, up to B8_AMX_CHUNK_BYTES of patches (at most
 * B8_AMX_CHUNK_GROUPS groups), each pair of channel blocks over a whole chunk: its weights then
 * come from memory once per chunk, not once per group (ResNet-18's 7x7 layers 1.1x). Smaller
 * filters stay in L2 and run group by group, their patches in L1 (3x3 layers of 64-256 channels
 * 1.05-1.2x faster than in chunks). */
enum { B8_AMX_CHUNK_FILTER = 2 << 20, B8_AMX_CHUNK_BYTES = 512 * 1024, B8_AMX_CHUNK_GROUPS = 8 };

/* A patch's bytes for the AMX tiles: its kernel rows back to back, padded to whole 64-byte
 * tile columns (zero weights). */
static int32_t b8_amx_depth(const b8_dims* filter_dims) {
  return b8_round_up(filter_dims->h * filter_dims->w * filter_dims->c, 64);
}

static int32_t b8_amx_chunk_groups(const b8_dims* filter_dims) {
  const int64_t filter_bytes = (int64_t)b8_round_up(filter_dims->n, B8_TILE_CHANNELS) * b8_amx_depth(filter_dims);
  if (filter_bytes <= B8_AMX_CHUNK_FILTER) return 1;
  const int32_t groups = B8_AMX_CHUNK_BYTES / (B8_AMX_PIXELS * b8_amx_depth(filter_dims));
  return groups < 1 ? 1 : groups > B8_AMX_CHUNK_GROUPS ? B8_AMX_CHUNK_GROUPS : groups;
}

static int32_t b8_amx_scratch_size(const b8_dims* filter_dims) {
  /* up to 63 bytes to the first cache line, a chunk's patches (+64 bytes: b8_amx_copy_rows's
   * overrun of the last), two steps' accumulators (32 pixels x 32 channels), per channel the bias
   * and the estimate's three floats */
  return 64 + b8_amx_chunk_groups(filter_dims) * B8_AMX_PIXELS * b8_amx_depth(filter_dims) + 64 +
         2 * B8_AMX_PIXELS * B8_TILE_CHANNELS * 4 + 16 * b8_round_up(filter_dims->n, B8_TILE_CHANNELS);
}

/* b8_copy_rows 64 bytes at a time: up to 63 bytes past each row are read, and written where the
 * next row then goes (or past the patch's last row). */
static void b8_amx_copy_rows(const int8_t* first_row, int64_t row_stride, int32_t rows, int32_t run, int8_t* patch) {
  for (int32_t ky = 0; ky < rows; ++ky, first_row += row_stride, patch += run)
    for (int32_t i = 0; i < run; i += 64)
      _mm512_storeu_si512((void*)(patch + i), _mm512_loadu_si512((const void*)(first_row + i)));
}

/* Whether this process uses AMX, decided once: the CPU has it, the environment does not turn it
 * off (BYOC_INT8_AMX=0, read at the first convolution or packing: the VNNI tiles then run, as on
 * a CPU or OS without AMX), and Linux grants the tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: 0x1023, 18). Else the VNNI tiles run, and filters are
 * packed for them. */
static int b8_amx_permitted(void) {
  static int state; /* 0: not asked yet, 1: granted, -1: not */
  int granted = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
  if (!granted) {
    long status = -1;
    const char* setting = getenv("BYOC_INT8_AMX");
    if (!(setting && strcmp(setting, "0") == 0) && __builtin_cpu_supports("amx-tile") &&
        __builtin_cpu_supports("amx-int8"))
      __asm__ volatile("syscall"
                       : "=a"(status)
                       : "0"(158L /* arch_prctl */), "D"(0x1023L), "S"(18L)
                       : "rcx", "r11", "memory");
    granted = status == 0 ? 1 : -1;
    __atomic_store_n(&state, granted, __ATOMIC_RELEASE);
  }
  return granted > 0;
}

/* GCC's tile intrinsics (12) are asm statements that do not name the memory ldtilecfg and
 * tileloadd read: this barrier makes the stores before it (the configuration, the gathered
 * patches, the bias) happen before the tile instructions after it. */
#define B8_AMX_STORES_DONE() __asm__ volatile("" : : : "memory")

/* Whether a plain (groups = 1) convolution with this filter runs on the AMX tiles: AMX is
 * granted, and patches have 32 bytes or more (a tile's row is 64: shorter ones are padded to it;
 * the VNNI tiles ran MobileNetV2's 1x1 layer on 16 input channels and its 3-channel stem 1.1-1.2x
 * faster, the AMX tiles its 1x1 layers on 32 channels 1.0-1.2x). Its filter is packed for the
 * path that runs it. */
static int b8_amx_suits(const b8_dims* filter_dims) {
  return filter_dims->h * filter_dims->w * filter_dims->c >= 32 && b8_amx_permitted();
}

/* The tile configuration (palette 1): tiles 0-3 accumulators, 4-5 patches, 6-7 weights, each 16
 * rows of 64 bytes. */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
} b8_amx_config;

/* The accumulator tiles of one step: `count` (1-32) pixels' patches (`stride` bytes apart, `depth`
 * bytes read from each) times a block of `channels` (1-32) of w ([depth / 4][32][4]: a B tile's
 * rows 128 bytes apart), from the bias (each accumulator row read from one address: stride 0).
 * Tiles 0 and 1 hold pixels 0-15, channels 0-15 and 16-31; tiles 2 and 3 pixels 16-31. */
B8_INLINE void b8_amx_tiles(const int8_t* patches, int64_t stride, int32_t depth, const int8_t* w,
                            const int32_t* bias, int32_t channels, int32_t count) {
  _tile_loadd(0, bias, 0);
  _tile_loadd(1, bias + 16, 0);
  _tile_loadd(2, bias, 0);
  _tile_loadd(3, bias + 16, 0);
  for (int32_t k = 0; k < depth; k += 64) {
    _tile_loadd(4, patches + k, stride);
    _tile_loadd(6, w + (int64_t)k * 32, 128);
    _tile_dpbssd(0, 4, 6);
    if (channels > 16) {
      _tile_loadd(7, w + (int64_t)k * 32 + 64, 128);
      _tile_dpbssd(1, 4, 7);
    }
    if (count > 16) {
      _tile_loadd(5, patches + 16 * stride + k, stride);
      _tile_dpbssd(2, 5, 6);
      if (channels > 16) _tile_dpbssd(3, 5, 7);
    }
  }
}

/* A step of the AMX tiles: `count` pixels x `channels` (a block of up to 32 from oc0) of acc
 * ([32 pixels][32 channels], from the bias), to requantize into out (rows out_c bytes apart). */
typedef struct {
  const int32_t* acc;
  int8_t* out;
  int32_t oc0, channels, count;
} b8_amx_step;

/* A step's output stage: in registers for blocks of exactly 32 or 16 channels (b8_block32_finish,
 * two or four pixels per 64 bytes), 8 channels at a time for other multiples of 8
 * (b8_output_x8: MobileNetV2's 24-channel layers ran 15-17x slower scalar), else scalar. */
static void b8_amx_finish(const b8_amx_step* step, const b8_requant_params* quant, const float* table,
                          int32_t padded_c, int32_t out_c, int vector_epilogue) {
  const int32_t* acc = step->acc;
  const int32_t channels = step->channels, count = step->count;
  int8_t* out = step->out;
  if (vector_epilogue && (channels == 32 || channels == 16)) {
    b8_block32_epilogue e;
    b8_block32_epilogue_load(quant, table, padded_c, step->oc0, channels, &e);
#define B8_ACC(p, half) _mm512_loadu_si512((const void*)(acc + (p) * B8_TILE_CHANNELS + 16 * (half)))
    if (channels == 32) {
      for (int32_t p = 0; p < count; p += 2) {
        const __m512i r =
            b8_block32_finish(&e, B8_ACC(p, 0), 0, B8_ACC(p, 1), 1, B8_ACC(p + 1, 0), 0, B8_ACC(p + 1, 1), 1);
        _mm256_storeu_si256((__m256i*)(out + (int64_t)p * out_c), _mm512_castsi512_si256(r));
        if (p + 1 < count)
          _mm256_storeu_si256((__m256i*)(out + (int64_t)(p + 1) * out_c), _mm512_extracti64x4_epi64(r, 1));
      }
    } else {
      for (int32_t p = 0; p < count; p += 4) {
        int8_t bytes[64];
        _mm512_storeu_si512((void*)bytes, b8_block32_finish(&e, B8_ACC(p, 0), 0, B8_ACC(p + 1, 0), 0, B8_ACC(p + 2, 0),
                                                            0, B8_ACC(p + 3, 0), 0));
        for (int32_t q = 0; q < 4 && p + q < count; ++q) memcpy(out + (int64_t)(p + q) * out_c, bytes + 16 * q, 16);
      }
    }
#undef B8_ACC
    return;
  }
  if (vector_epilogue) {
    b8_output_x8(acc, count, channels, step->oc0, quant, table, padded_c, out - step->oc0, out_c);
    return;
  }
  for (int32_t p = 0; p < count; ++p)
    for (int32_t c = 0; c < channels; ++c)
      out[(int64_t)p * out_c + c] = b8_output_s8(acc[p * B8_TILE_CHANNELS + c], quant, step->oc0 + c);
}

static b8_status b8_conv2d_s8_amx(const b8_conv_params* conv, const b8_requant_params* quant,
                                  const b8_dims* input_dims, const int8_t* input, const b8_dims* filter_dims,
                                  const int8_t* packed, const int32_t* bias, const b8_dims* output_dims,
                                  int8_t* output, const b8_pixels* pixels, int32_t oc_begin, int32_t oc_end,
                                  int8_t* scratch) {
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t k_h = filter_dims->h, k_w = filter_dims->w, in_c = input_dims->c, in_w = input_dims->w;
  const int32_t run = k_w * in_c, depth = b8_amx_depth(filter_dims), padded_c = b8_round_up(out_c, B8_TILE_CHANNELS);
  const int64_t image_size = (int64_t)input_dims->h * in_w * in_c;
  const int8_t* input_end = input + (int64_t)input_dims->n * image_size;
  const int32_t last_row_offset = (k_h - 1) * conv->dilation_h;
  const int64_t row_stride = (int64_t)conv->dilation_h * in_w * in_c;
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  /* 1x1, stride 1, no padding (ResNet-50's and MobileNetV2's 1x1 layers): pixel p's patch is the
   * input's pixel p, so a group's tiles read the input in place, rows in_c bytes apart (the bytes
   * past a pixel's in_c are the next pixel's, against zero weights), where those reads stay inside
   * the input; else its pixels are copied. */
  const int pointwise = k_h == 1 && k_w == 1 && conv->stride_h == 1 && conv->stride_w == 1 && conv->pad_top == 0 &&
                        conv->pad_left == 0 && input_dims->h == out_h && input_dims->w == out_w;
#define B8_AMX_IN_PLACE(first, count) \
  (pointwise && ((first) + ((count) > 16 ? 32 : 16) - 1) * in_c + depth <= input_end - input)
  const int32_t chunk_pixels = b8_amx_chunk_groups(filter_dims) * B8_AMX_PIXELS;
  /* Tile rows start on cache lines (a row across two lines costs two loads). */
  int8_t* patches = scratch + (-(uintptr_t)scratch & 63);
  /* two steps' accumulators, [32 pixels][32 channels] each */
  int32_t* acc = (int32_t*)(patches + (int64_t)chunk_pixels * depth + 64);
  int32_t* start = acc + 2 * B8_AMX_PIXELS * B8_TILE_CHANNELS;
  float* table = (float*)(start + padded_c);
  /* Pixels past a chunk's last one multiply whatever their patch holds: initialized bytes. */
  memset(patches, 0, (size_t)chunk_pixels * depth + 64);
  for (int32_t oc = 0; oc < padded_c; ++oc) start[oc] = bias && oc < out_c ? bias[oc] : 0;
  int vector_epilogue = quant->multiplier != NULL && out_c % 8 == 0;
  for (int32_t oc = 0; oc < out_c; ++oc) vector_epilogue &= quant->shift[oc] <= 0;
  if (vector_epilogue) b8_estimate_table(quant, out_c, table, table + padded_c, table + 2 * padded_c);
  b8_amx_config config;
  memset(&config, 0, sizeof config);
  config.palette = 1;
  for (int tile = 0; tile < 8; ++tile) {
    config.bytes_per_row[tile] = 64;
    config.rows[tile] = 16;
  }
  B8_AMX_STORES_DONE();
  _tile_loadconfig(&config);
  int32_t ox = (int32_t)(begin % out_w), oy = (int32_t)(begin / out_w % out_h);
  const int8_t* image = input + begin / out_w / out_h * image_size;
  b8_amx_step pending = {NULL, NULL, 0, 0, 0}; /* computed, not yet requantized */
  int buffer = 0;
  for (int64_t chunk = begin; chunk < end; chunk += chunk_pixels) {
    const int32_t chunk_count = end - chunk < chunk_pixels ? (int32_t)(end - chunk) : chunk_pixels;
    for (int32_t p = 0; p < chunk_count; ++p) {
      const int32_t first = p / B8_AMX_PIXELS * B8_AMX_PIXELS; /* of the pixel's group */
      if (!B8_AMX_IN_PLACE(chunk + first, chunk_count - first)) { /* else only its coordinates */
        int8_t* patch = patches + (int64_t)p * depth;
        const int32_t ix0 = ox * conv->stride_w - conv->pad_left, iy0 = oy * conv->stride_h - conv->pad_top;
        const int8_t* first_row = image + ((int64_t)iy0 * in_w + ix0) * in_c;
        if (conv->dilation_w == 1 && ix0 >= 0 && ix0 + k_w <= in_w && iy0 >= 0 &&
            iy0 + last_row_offset < input_dims->h &&
            b8_round_up(run, 64) <= input_end - (first_row + (int64_t)last_row_offset * in_w * in_c))
          b8_amx_copy_rows(first_row, row_stride, k_h, run, patch); /* the window inside the input */
        else
          b8_gather_patch(conv, input_dims, image, filter_dims, oy, ox, 0, run, patch);
      }
      if (++ox == out_w) {
        ox = 0;
        if (++oy == out_h) {
          oy = 0;
          image += image_size;
        }
      }
    }
    B8_AMX_STORES_DONE();
    for (int32_t oc0 = oc_begin; oc0 < oc_end; oc0 += B8_TILE_CHANNELS) {
      const int32_t channels = oc_end - oc0 < B8_TILE_CHANNELS ? oc_end - oc0 : B8_TILE_CHANNELS;
      for (int32_t g = 0; g < chunk_count; g += B8_AMX_PIXELS) {
        const int32_t count = chunk_count - g < B8_AMX_PIXELS ? chunk_count - g : B8_AMX_PIXELS;
        const int8_t* w = packed + (int64_t)oc0 * depth;
        if (B8_AMX_IN_PLACE(chunk + g, count))
          b8_amx_tiles(input + (chunk + g) * in_c, in_c, depth, w, start + oc0, channels, count);
        else
          b8_amx_tiles(patches + (int64_t)g * depth, depth, depth, w, start + oc0, channels, count);
        /* The previous step's output while the tile unit computes this one's (the deeper layers
         * of ResNet-18 1.12x). */
        if (pending.acc) b8_amx_finish(&pending, quant, table, padded_c, out_c, vector_epilogue);
        int32_t* step_acc = acc + buffer * B8_AMX_PIXELS * B8_TILE_CHANNELS;
        buffer ^= 1;
        _tile_stored(0, step_acc, 4 * B8_TILE_CHANNELS);
        _tile_stored(1, step_acc + 16, 4 * B8_TILE_CHANNELS);
        _tile_stored(2, step_acc + 16 * B8_TILE_CHANNELS, 4 * B8_TILE_CHANNELS);
        _tile_stored(3, step_acc + 16 * B8_TILE_CHANNELS + 16, 4 * B8_TILE_CHANNELS);
        pending.acc = step_acc;
        pending.out = output + (chunk + g) * out_c + oc0;
        pending.oc0 = oc0;
        pending.channels = channels;
        pending.count = count;
      }
    }
  }
  if (pending.acc) b8_amx_finish(&pending, quant, table, padded_c, out_c, vector_epilogue);
  _tile_release();
  return B8_OK;
#undef B8_AMX_IN_PLACE
}
#undef B8_AMX_STORES_DONE
#endif /* B8_USE_AMX */

#endif /* B8_USE_AVX2 */

B8_API int32_t b8_conv2d_s8_scratch_size(const b8_conv_params* conv, const b8_dims* filter_dims) {
#if B8_WINOGRAD
  if (b8_winograd_suits(conv, filter_dims)) return b8_winograd_scratch_size(filter_dims);
#endif
  (void)conv;
#if B8_USE_AVX2
  /* The gathered patches (b8_conv2d_s8_avx2), a patch of the pad value, per channel the tiles'
   * starting bias and the output stage's three float constants, and for AVX2 a chunk's patches
   * split for the corrected form. */
  const int32_t depth = b8_patch_depth(filter_dims);
  const int32_t tiles = b8_gathered_tiles(filter_dims) * B8_TILE_PIXELS * b8_patch_stride(filter_dims) + depth +
                        16 * b8_round_up(filter_dims->n, B8_TILE_CHANNELS) +
                        (B8_USE_AVX512VNNI || B8_USE_AVXVNNI ? 0 : B8_CHUNK_MAX_TILES * B8_TILE_PIXELS * 2 * depth);
#if B8_USE_AMX
  /* either path's: which one runs is known only where the process asks for AMX */
  const int32_t amx = b8_amx_scratch_size(filter_dims);
  return amx > tiles ? amx : tiles;
#else
  return tiles;
#endif
#else
  return filter_dims->h * filter_dims->w * filter_dims->c;
#endif
}

B8_API int32_t b8_conv2d_s8_row_block(const b8_conv_params* conv, const b8_dims* filter_dims) {
#if B8_WINOGRAD
  if (b8_winograd_suits(conv, filter_dims)) return b8_winograd_rows(filter_dims);
#endif
  (void)conv;
  (void)filter_dims;
  return 1;
}

B8_API int32_t b8_conv2d_s8_channel_block(const b8_conv_params* conv, const b8_dims* filter_dims) {
#if B8_USE_AMX
  if (conv->groups == 1 && b8_amx_suits(filter_dims)) return B8_TILE_CHANNELS;
#endif
#if B8_USE_AVX2
  if (conv->groups == 1) return B8_TILE_CHANNELS; /* the Winograd path's blocks are 16 channels too */
#endif
  (void)conv;
  (void)filter_dims;
  return 1;
}

B8_API int32_t b8_conv2d_s8_packed_size(const b8_conv_params* conv, const b8_dims* filter_dims) {
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c, groups = conv->groups;
#if B8_WINOGRAD
  if (b8_winograd_suits(conv, filter_dims)) return b8_winograd_packed_size(filter_dims);
#endif
#if B8_USE_AVX2
  /* The blocked filter, one int32 weight sum per (padded) output channel, then the filter's
   * weight range (B8_WEIGHTS_7BIT or 0). */
  const int32_t channels = b8_round_up(filter_dims->n, B8_TILE_CHANNELS);
  if (groups == 1) {
    const int32_t tiles = channels * b8_patch_depth(filter_dims) + channels * 4 + 4;
#if B8_USE_AMX
    /* Or the AMX layout, then B8_WEIGHTS_AMX: which one is known only where the process asks
     * for AMX, so room for either. */
    const int32_t amx = channels * b8_amx_depth(filter_dims) + 4;
    return amx > tiles ? amx : tiles;
#else
    return tiles;
#endif
  }
#endif
  (void)groups;
  return filter_dims->n * patch;
}

B8_API void b8_conv2d_s8_pack_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                                     int8_t* packed) {
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c, groups = conv->groups;
#if B8_WINOGRAD
  if (b8_winograd_suits(conv, filter_dims)) {
    b8_winograd_pack_filter(filter_dims, filter, packed);
    return;
  }
#endif
#if B8_USE_AMX
  if (groups == 1 && b8_amx_suits(filter_dims)) {
    /* [out_c / 32][depth / 4][32][4] with depth = b8_amx_depth (the patch's bytes back to back),
     * zero-filled past the real channels and bytes, then B8_WEIGHTS_AMX. */
    const int32_t t = B8_TILE_CHANNELS, depth = b8_amx_depth(filter_dims), channels = b8_round_up(filter_dims->n, t);
    memset(packed, 0, (size_t)channels * depth);
    for (int32_t oc = 0; oc < filter_dims->n; ++oc)
      for (int32_t k = 0; k < patch; ++k)
        packed[(((int64_t)(oc / t) * (depth / 4) + k / 4) * t + oc % t) * 4 + k % 4] = filter[(int64_t)oc * patch + k];
    const int32_t marker = B8_WEIGHTS_AMX;
    memcpy(packed + (int64_t)channels * depth, &marker, 4);
    return;
  }
#endif
#if B8_USE_AVX2
  if (groups == 1) {
    /* [out_c / T][depth / 4][T][4] with T = B8_TILE_CHANNELS and depth = b8_patch_depth (kernel
     * row ky at ky x row), zero-filled past the real channels and row bytes. */
    const int32_t t = B8_TILE_CHANNELS, run = filter_dims->w * filter_dims->c, row = b8_patch_row(filter_dims);
    const int32_t depth = b8_patch_depth(filter_dims), blocks = b8_round_up(filter_dims->n, t) / t;
    int32_t* sums = (int32_t*)(packed + (int64_t)blocks * t * depth);
    int narrow = 1;
    for (int32_t oc = 0; oc < blocks * t; ++oc) {
      int32_t sum = 0;
      for (int32_t k = 0; oc < filter_dims->n && k < patch; ++k) {
        const int8_t weight = filter[(int64_t)oc * patch + k];
        sum += weight;
        narrow &= weight >= -64 && weight <= 64;
      }
      sums[oc] = sum;
    }
    /* The shifted form's per-pixel term pays where enough channel blocks share it over a long
     * enough patch; elsewhere the offset form's xor per step costs less (AVX2 on Zen 4: a 3x3
     * stem on 3 channels, 64 of them, ran 0.91x shifted; 3x3 layers of 64-512 channels
     * 1.01-1.04x). */
    const int dpbusd = B8_USE_AVX512VNNI || B8_USE_AVXVNNI;
    const int shifted = dpbusd ? blocks * depth >= B8_VNNI_SHIFTED_MIN && !b8_patch_contiguous(filter_dims)
                               : narrow && blocks > 3 && depth >= 64;
    sums[blocks * t] = shifted ? B8_WEIGHTS_SHIFTED : narrow ? B8_WEIGHTS_7BIT : 0;
    const int32_t shift = !shifted ? 0 : dpbusd ? 128 : 64;
    memset(packed, 0, (size_t)blocks * t * depth);
    for (int32_t oc = 0; oc < filter_dims->n; ++oc)
      for (int32_t k = 0; k < patch; ++k) {
        const int32_t at = k / run * row + k % run; /* the byte's place in the padded patch */
        packed[(((int64_t)(oc / t) * (depth / 4) + at / 4) * t + oc % t) * 4 + at % 4] =
            (int8_t)(uint8_t)(filter[(int64_t)oc * patch + k] + shift);
      }
    return;
  }
#endif
  (void)groups;
  memcpy(packed, filter, (size_t)filter_dims->n * patch);
}

B8_API b8_status b8_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                              const b8_dims* input_dims, const int8_t* input,
                              int32_t input_nonnegative, const b8_dims* filter_dims,
                              const int8_t* packed_filter, const int32_t* bias,
                              const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                              int8_t* scratch) {
  return b8_conv2d_s8_channels(conv, quant, input_dims, input, input_nonnegative, filter_dims, packed_filter, bias,
                               output_dims, output, pixels, NULL, scratch);
}

B8_API b8_status b8_conv2d_s8_channels(const b8_conv_params* conv, const b8_requant_params* quant,
                                       const b8_dims* input_dims, const int8_t* input,
                                       int32_t input_nonnegative, const b8_dims* filter_dims,
                                       const int8_t* packed_filter, const int32_t* bias,
                                       const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                                       const b8_channels* channels, int8_t* scratch) {
  if (b8_conv2d_check(conv, input_dims, filter_dims, output_dims) != B8_OK) return B8_ERROR_ARGUMENT;
  const int32_t out_c = output_dims->c, block = b8_conv2d_s8_channel_block(conv, filter_dims);
  const int32_t oc_begin = channels ? channels->begin : 0, oc_end = channels ? channels->end : out_c;
  if (oc_begin < 0 || oc_end > out_c || oc_begin > oc_end || oc_begin % block || (oc_end % block && oc_end != out_c))
    return B8_ERROR_ARGUMENT;
#if B8_USE_AVX512VNNI || B8_USE_AVXVNNI
  /* The shifted weights' products and terms stay within int32 for patches up to 2^15 bytes (the
   * quantizer's limit). */
  if (filter_dims->h * filter_dims->w * filter_dims->c > (1 << 15)) return B8_ERROR_ARGUMENT;
#endif
  if (oc_begin == oc_end) return B8_OK; /* an empty share, once the call is known valid */
#if B8_USE_AMX
  if (conv->groups == 1 && b8_amx_suits(filter_dims)) {
    int32_t marker;
    const int64_t filter_bytes = (int64_t)b8_round_up(filter_dims->n, B8_TILE_CHANNELS) * b8_amx_depth(filter_dims);
    memcpy(&marker, packed_filter + filter_bytes, 4);
    if (marker != B8_WEIGHTS_AMX) return B8_ERROR_ARGUMENT; /* not packed by this build for AMX */
    return b8_conv2d_s8_amx(conv, quant, input_dims, input, filter_dims, packed_filter, bias, output_dims, output,
                            pixels, oc_begin, oc_end, scratch);
  }
#endif
#if B8_WINOGRAD
  if (b8_winograd_suits(conv, filter_dims))
    return b8_conv2d_s8_winograd(conv, quant, input_dims, input, filter_dims, packed_filter, bias, output_dims, output,
                                 pixels, oc_begin, oc_end, scratch);
#endif
#if B8_USE_AVX2
  /* Padded taps are read too: they must be non-negative as well to skip the sign handling. */
  if (conv->groups == 1)
    return b8_conv2d_s8_avx2(conv, quant, input_dims, input, input_nonnegative && conv->pad_value >= 0,
                             filter_dims, packed_filter, bias, output_dims, output, pixels, oc_begin, oc_end,
                             scratch);
#endif
  (void)input_nonnegative;
  return b8_conv2d_s8_portable(conv, quant, input_dims, input, filter_dims, packed_filter, bias,
                               output_dims, output, pixels, oc_begin, oc_end, scratch);
}
