/* 2-D convolution, NHWC int8 activations, int32 accumulation: plain and grouped (depthwise is
 * depthwise_conv2d_s8.c).
 *
 * Two implementations of b8_conv2d_s8 sit behind one signature, chosen by B8_USE_AVX2 when the
 * kernels are compiled; b8_conv2d_s8_pack_filter prepares the filter for whichever is built.
 *  - portable: per output pixel, gather the receptive field into one row, then one plain dot
 *    product per output channel (the compiler vectorizes it).
 *  - AVX2 (groups = 1): tiles of 4 output pixels x 16 output channels; vpmaddubsw multiplies
 *    unsigned by signed bytes into int16 pairs and vpmaddwd widens them to int32. Activations
 *    that may be negative go through the sign trick (|a| times b with a's sign), so the unsigned
 *    operand is at most 128 and a pair of products (at most 2 x 128 x 127 = 32512) cannot
 *    saturate int16: the result is exact, bit for bit the portable one.
 *  - AVX-512 VNNI (groups = 1): the same scheme on 8 pixels x 32 channels, with vpdpbusd doing
 *    multiply, pairwise sums and accumulation in one exact instruction. Signed activations use
 *    an offset instead of the sign trick: (a + 128) times b, minus 128 x the channel's weight
 *    sum (stored after the packed filter), exact while the patch is at most 2^15 bytes.

 */
#include <string.h>

#include "byoc_int8.h"

#include "internal.h"

static int32_t b8_dot_s8(const int8_t* a, const int8_t* b, int32_t length) {
  int32_t acc = 0;
  for (int32_t i = 0; i < length; ++i) acc += (int32_t)a[i] * (int32_t)b[i];
  return acc;
}

/* Gathers the receptive field of output pixel (oy, ox) for one group into `row` (patch bytes);
 * padded taps read conv->pad_value. Without dilation and groups, the taps of one kernel row are
 * contiguous in the input: one copy per kernel row when fully inside. */
static void b8_gather_patch(const b8_conv_params* conv, const b8_dims* input_dims,
                            const int8_t* image, const b8_dims* filter_dims, int32_t oy, int32_t ox,
                            int32_t channel_offset, int8_t* row) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, in_c = input_dims->c;
  const int32_t group_in = filter_dims->c, k_w = filter_dims->w;
  const int32_t ix0 = ox * conv->stride_w - conv->pad_left;
  const int contiguous = conv->dilation_w == 1 && group_in == in_c && ix0 >= 0 && ix0 + k_w <= in_w;
  for (int32_t ky = 0; ky < filter_dims->h; ++ky) {
    const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
    if (iy < 0 || iy >= in_h) {
      memset(row, conv->pad_value, (size_t)k_w * group_in);
      row += k_w * group_in;
      continue;
    }
    const int8_t* line = image + (int64_t)iy * in_w * in_c + channel_offset;
    if (contiguous) {
      memcpy(row, line + (int64_t)ix0 * in_c, (size_t)k_w * in_c);
      row += k_w * in_c;
      continue;
    }
    for (int32_t kx = 0; kx < k_w; ++kx, row += group_in) {
      const int32_t ix = ix0 + kx * conv->dilation_w;
      if (ix < 0 || ix >= in_w) {
        memset(row, conv->pad_value, (size_t)group_in);
      } else {
        memcpy(row, line + (int64_t)ix * in_c, (size_t)group_in);
      }
    }
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
                                       int8_t* output, const b8_pixels* pixels, int8_t* scratch) {
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
      for (int32_t g = 0; g < groups; ++g) {
        b8_gather_patch(conv, input_dims, input + n * image_size, filter_dims, oy, ox, g * group_in,
                        scratch);
        for (int32_t oc = g * group_out; oc < (g + 1) * group_out; ++oc) {
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
#else
enum { B8_TILE_PIXELS = 4, B8_TILE_CHANNELS = 16 };
#endif
enum { B8_MAX_SEGMENTS = 16 }; /* kernel rows read in place; taller kernels gather */

static int32_t b8_round_up(int32_t value, int32_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/* acc[p][oc] = sum_k patches[p][k] * w[k][oc] for 4 pixels x 16 channels; patch rows are
 * `depth` bytes (a multiple of 4) and w is packed as [depth / 4][16][4]. */
#if B8_USE_AVX512VNNI
/* acc[p][oc] for 8 pixels x 32 channels, w packed as [depth / 4][32][4]: two 512-bit vectors of
 * 16 channels x 4 bytes per step, reused by all 8 pixels (16 accumulators of the 32 registers).
 * Each pixel's patch is read as `segments` runs of `run` bytes: segment[s][p] is pixel p's run s. */
static void b8_tile(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                    const int8_t* w, int nonnegative, int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS]) {
  const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8((char)0x80);
  __m512i a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero, a21 = zero;
  __m512i a30 = zero, a31 = zero, a40 = zero, a41 = zero, a50 = zero, a51 = zero;
  __m512i a60 = zero, a61 = zero, a70 = zero, a71 = zero;
#define B8_STEP(pixel, acc0, acc1)                                                   \
  do {                                                                               \
    int32_t quad;                                                                    \
    memcpy(&quad, (pixel) + k, 4);                                                  \
    __m512i x = _mm512_set1_epi32(quad);                                             \
    if (!nonnegative) x = _mm512_xor_si512(x, offset); /* a + 128, as unsigned */   \
    acc0 = _mm512_dpbusd_epi32(acc0, x, w0);                                         \
    acc1 = _mm512_dpbusd_epi32(acc1, x, w1);                                         \
  } while (0)
  for (int32_t s = 0; s < segments; ++s) {
    const int8_t* const* px = segment[s];
    for (int32_t k = 0; k < run; k += 4, w += 128) {
      const __m512i w0 = _mm512_loadu_si512((const void*)w);
      const __m512i w1 = _mm512_loadu_si512((const void*)(w + 64));
      B8_STEP(px[0], a00, a01);
      B8_STEP(px[1], a10, a11);
      B8_STEP(px[2], a20, a21);
      B8_STEP(px[3], a30, a31);
      B8_STEP(px[4], a40, a41);
      B8_STEP(px[5], a50, a51);
      B8_STEP(px[6], a60, a61);
      B8_STEP(px[7], a70, a71);
    }
  }
#undef B8_STEP
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
#else
static void b8_tile(const int8_t* (*segment)[B8_TILE_PIXELS], int32_t segments, int32_t run,
                    const int8_t* w, int nonnegative, int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00;
  __m256i a20 = a00, a21 = a00, a30 = a00, a31 = a00;
#define B8_STEP(pixel, acc0, acc1)                                                        \
  do {                                                                                    \
    int32_t quad;                                                                         \
    memcpy(&quad, (pixel) + k, 4);                                                        \
    __m256i x = _mm256_set1_epi32(quad), v0 = w0, v1 = w1;                                \
    if (!nonnegative) {                                                                   \
      v0 = _mm256_sign_epi8(w0, x);                                                       \
      v1 = _mm256_sign_epi8(w1, x);                                                       \
      x = _mm256_abs_epi8(x);                                                             \
    }                                                                                     \
    acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(x, v0), ones));  \
    acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(x, v1), ones));  \
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
#endif

static b8_status b8_conv2d_s8_avx2(const b8_conv_params* conv, const b8_requant_params* quant,
                                   const b8_dims* input_dims, const int8_t* input,
                                   int32_t input_nonnegative, const b8_dims* filter_dims,
                                   const int8_t* packed, const int32_t* bias,
                                   const b8_dims* output_dims, int8_t* output,
                                   const b8_pixels* pixels, int8_t* scratch) {
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c;
  const int32_t depth = b8_round_up(patch, 4);
  const int64_t image_size = (int64_t)input_dims->h * input_dims->w * input_dims->c;
  int32_t acc[B8_TILE_PIXELS][B8_TILE_CHANNELS];
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  /* Scratch: a tile of gathered patches (zero past the patch, where packed weights are zero too),
   * then `depth` bytes of the pad value, read in place of padding rows. */
  memset(scratch, 0, (size_t)B8_TILE_PIXELS * depth);
  memset(scratch + B8_TILE_PIXELS * depth, conv->pad_value, (size_t)depth);
  const int8_t* padding = scratch + B8_TILE_PIXELS * depth;
  /* Without dilation, each kernel row of a pixel whose window lies inside the input horizontally
   * is one contiguous run of k_w * c input bytes: the tile reads those in place instead of a
   * copied patch (runs must be whole 4-byte steps). */
  const int32_t k_h = filter_dims->h, k_w = filter_dims->w, in_c = input_dims->c, in_w = input_dims->w;
  const int32_t run = k_w * in_c;
  const int in_place = conv->dilation_w == 1 && run % 4 == 0 && k_h <= B8_MAX_SEGMENTS;
  const int32_t segments = in_place ? k_h : 1, seg_len = in_place ? run : depth;
  const int8_t* segment[B8_MAX_SEGMENTS][B8_TILE_PIXELS];
#if B8_USE_AVX512VNNI
  /* Signed inputs: fold the offset correction (-128 x weight sum) into the bias, kept in scratch. */
  if (!input_nonnegative) {
    const int32_t blocks = b8_round_up(out_c, B8_TILE_CHANNELS) / B8_TILE_CHANNELS;
    const int32_t* sums = (const int32_t*)(packed + (int64_t)blocks * B8_TILE_CHANNELS * depth);
    int32_t* adjusted = (int32_t*)(scratch + (B8_TILE_PIXELS + 1) * depth);
    for (int32_t oc = 0; oc < out_c; ++oc) adjusted[oc] = (bias ? bias[oc] : 0) - 128 * sums[oc];
    bias = adjusted;
  }
#endif
  /* The vector epilogue needs every shift <= 0 (factors below 1, the usual case). */
  /* Shift-only requantization (multiplier NULL: power-of-two scales) takes the scalar epilogue. */
  int vector_epilogue = quant->multiplier != NULL && out_c % 8 == 0;
  for (int32_t oc = 0; oc < out_c; ++oc) vector_epilogue &= quant->shift[oc] <= 0;
  const __m256i lo = _mm256_set1_epi32(quant->act_min), hi = _mm256_set1_epi32(quant->act_max);
  const __m256i thirty_one = _mm256_set1_epi32(31), zero_point = _mm256_set1_epi32(quant->output_zero_point);
  /* Tiles run over the output pixels in order, across row ends (a 7-wide output would otherwise
   * waste part of every tile). */
  for (int64_t first = begin; first < end; first += B8_TILE_PIXELS) {
    const int32_t count = end - first < B8_TILE_PIXELS ? (int32_t)(end - first) : B8_TILE_PIXELS;
    for (int32_t p = 0; p < B8_TILE_PIXELS; ++p) {
      if (p >= count) { /* past the last pixel: any readable bytes do */
        for (int32_t s = 0; s < segments; ++s) segment[s][p] = padding;
        continue;
      }
      const int64_t pixel = first + p, row = pixel / out_w;
      const int32_t oy = (int32_t)(row % out_h), ox = (int32_t)(pixel % out_w);
      const int8_t* image = input + (row / out_h) * image_size;
      const int32_t ix0 = ox * conv->stride_w - conv->pad_left;
      if (in_place && ix0 >= 0 && ix0 + k_w <= in_w) {
        for (int32_t ky = 0; ky < k_h; ++ky) {
          const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
          segment[ky][p] = iy < 0 || iy >= input_dims->h ? padding
                                                         : image + ((int64_t)iy * in_w + ix0) * in_c;
        }
      } else {
        int8_t* patch = scratch + p * depth;
        b8_gather_patch(conv, input_dims, image, filter_dims, oy, ox, 0, patch);
        for (int32_t s = 0; s < segments; ++s) segment[s][p] = patch + s * seg_len;
      }
    }
    {
      int8_t* out = output + first * out_c;
      for (int32_t oc0 = 0; oc0 < out_c; oc0 += B8_TILE_CHANNELS) {
        b8_tile(segment, segments, seg_len, packed + (int64_t)oc0 * depth, input_nonnegative, acc);
        const int32_t channels = out_c - oc0 < B8_TILE_CHANNELS ? out_c - oc0 : B8_TILE_CHANNELS;
#if B8_USE_AVX512VNNI
        if (vector_epilogue && channels % 16 == 0) {
          const __m512i lo16 = _mm512_set1_epi32(quant->act_min), hi16 = _mm512_set1_epi32(quant->act_max);
          const __m512i zero_point16 = _mm512_set1_epi32(quant->output_zero_point);
          for (int32_t half = 0; half < channels; half += 16) {
            const int32_t oc = oc0 + half;
            const __m512i mult = _mm512_loadu_si512((const void*)(quant->multiplier + oc));
            const __m512i right = _mm512_sub_epi32(_mm512_set1_epi32(31),
                                                   _mm512_loadu_si512((const void*)(quant->shift + oc)));
            const __m512i b = bias ? _mm512_loadu_si512((const void*)(bias + oc)) : _mm512_setzero_si512();
            for (int32_t p = 0; p < count; ++p) {
              const __m512i sum = _mm512_add_epi32(_mm512_loadu_si512((const void*)(acc[p] + half)), b);
              b8_store_s8x16(out + (int64_t)p * out_c + oc,
                             _mm512_add_epi32(b8_requantize_x16(sum, mult, right), zero_point16), lo16, hi16);
            }
          }
          continue;
        }
#endif
        if (vector_epilogue) {
          for (int32_t half = 0; half < channels; half += 8) {
            const int32_t oc = oc0 + half;
            const __m256i mult = _mm256_loadu_si256((const __m256i*)(quant->multiplier + oc));
            const __m256i right = _mm256_sub_epi32(
                thirty_one, _mm256_loadu_si256((const __m256i*)(quant->shift + oc)));
            const __m256i b = bias ? _mm256_loadu_si256((const __m256i*)(bias + oc))
                                   : _mm256_setzero_si256();
            for (int32_t p = 0; p < count; ++p) {
              const __m256i sum = _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)(acc[p] + half)), b);
              b8_store_s8x8(out + (int64_t)p * out_c + oc,
                            _mm256_add_epi32(b8_requantize_x8(sum, mult, right), zero_point), lo, hi);
            }
          }
          continue;
        }
        for (int32_t p = 0; p < count; ++p) {
          for (int32_t c = 0; c < channels; ++c) {
            const int32_t oc = oc0 + c;
            out[(int64_t)p * out_c + oc] = b8_output_s8(acc[p][c] + (bias ? bias[oc] : 0), quant, oc);
          }
        }
      }
    }
  }
  return B8_OK;
}
#endif /* B8_USE_AVX2 */

B8_API int32_t b8_conv2d_s8_scratch_size(const b8_dims* filter_dims) {
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c;
#if B8_USE_AVX2
  /* A tile of patches, a run of zeros, and (VNNI) the offset-corrected bias. */
  return (B8_TILE_PIXELS + 1) * b8_round_up(patch, 4) +
         4 * b8_round_up(filter_dims->n, B8_TILE_CHANNELS);
#else
  return patch;
#endif
}

B8_API int32_t b8_conv2d_s8_packed_size(const b8_dims* filter_dims, int32_t groups) {
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c;
#if B8_USE_AVX2
  /* The blocked filter, then one int32 weight sum per (padded) output channel. */
  const int32_t channels = b8_round_up(filter_dims->n, B8_TILE_CHANNELS);
  if (groups == 1) return channels * b8_round_up(patch, 4) + channels * 4;
#endif
  (void)groups;
  return filter_dims->n * patch;
}

B8_API void b8_conv2d_s8_pack_filter(const b8_dims* filter_dims, int32_t groups, const int8_t* filter,
                                     int8_t* packed) {
  const int32_t patch = filter_dims->h * filter_dims->w * filter_dims->c;
#if B8_USE_AVX2
  if (groups == 1) {
    /* [out_c / T][depth / 4][T][4] with T = B8_TILE_CHANNELS, zero-filled past the real
     * channels and patch bytes. */
    const int32_t t = B8_TILE_CHANNELS, depth = b8_round_up(patch, 4);
    const int32_t blocks = b8_round_up(filter_dims->n, t) / t;
    memset(packed, 0, (size_t)blocks * t * depth);
    for (int32_t oc = 0; oc < filter_dims->n; ++oc)
      for (int32_t k = 0; k < patch; ++k)
        packed[(((int64_t)(oc / t) * (depth / 4) + k / 4) * t + oc % t) * 4 + k % 4] =
            filter[(int64_t)oc * patch + k];
    int32_t* sums = (int32_t*)(packed + (int64_t)blocks * t * depth);
    for (int32_t oc = 0; oc < blocks * t; ++oc) {
      int32_t sum = 0;
      for (int32_t k = 0; oc < filter_dims->n && k < patch; ++k) sum += filter[(int64_t)oc * patch + k];
      sums[oc] = sum;
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
  if (b8_conv2d_check(conv, input_dims, filter_dims, output_dims) != B8_OK) return B8_ERROR_ARGUMENT;
#if B8_USE_AVX512VNNI
  /* The offset for signed inputs is exact for patches up to 2^15 bytes (the quantizer's limit). */
  if (!input_nonnegative && filter_dims->h * filter_dims->w * filter_dims->c > (1 << 15))
    return B8_ERROR_ARGUMENT;
#endif
#if B8_USE_AVX2
  /* Padded taps are read too: they must be non-negative as well to skip the sign handling. */
  if (conv->groups == 1)
    return b8_conv2d_s8_avx2(conv, quant, input_dims, input, input_nonnegative && conv->pad_value >= 0,
                             filter_dims, packed_filter, bias, output_dims, output, pixels, scratch);
#endif
  (void)input_nonnegative;
  return b8_conv2d_s8_portable(conv, quant, input_dims, input, filter_dims, packed_filter, bias,
                               output_dims, output, pixels, scratch);
}
