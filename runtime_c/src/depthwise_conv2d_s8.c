/* Depthwise 2-D convolution, NHWC int8 activations, int32 accumulation.
 *
 * b8_depthwise_conv2d_s8 reads its filter as given, (kernel_h, kernel_w, channels). With channel
 * multiplier 1 the AVX2 / AVX-512 builds vectorize it over channels, 8 / 16 int32 lanes of exact
 * products (b8_depthwise_run; the AVX-512 VNNI build sums the interior of 3x3 kernels with
 * vpdpbusd, three taps per lane). MobileNet's 3x3 kernels (stride 1 or 2 across) go first to the
 * wide blocks, every row of them (b8_depthwise_wide: 64 channels by vpdpbusd with AVX-512 VNNI,
 * 16 by vpmaddwd with AVX2, 32 and then 16 with AVX-512BW, the columns built by unpacks). Other
 * multipliers, and fewer than 8 channels with AVX2 (and AVX-512BW), run the portable loop.
 */
#include "byoc_int8.h"

#include "internal.h"

/* Every channel multiplier: per output pixel and channel, every tap, padded taps reading
 * pad_value. */
static void b8_depthwise_conv2d_s8_portable(const b8_conv_params* conv, const b8_requant_params* quant,
                                            const b8_dims* input_dims, const int8_t* input,
                                            const b8_dims* filter_dims, const int8_t* filter,
                                            const int32_t* bias, const b8_dims* output_dims,
                                            int8_t* output, int64_t begin, int64_t end) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, in_c = input_dims->c;
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t multiplier = out_c / in_c;
  for (int64_t pixel = begin; pixel < end; ++pixel) {
    const int32_t n = (int32_t)(pixel / ((int64_t)out_h * out_w));
    const int32_t oy = (int32_t)(pixel / out_w % out_h), ox = (int32_t)(pixel % out_w);
    const int8_t* image = input + (int64_t)n * in_h * in_w * in_c;
    int8_t* out = output + pixel * out_c;
    for (int32_t oc = 0; oc < out_c; ++oc) {
      int32_t acc = bias ? bias[oc] : 0;
      for (int32_t ky = 0; ky < filter_dims->h; ++ky) {
        const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
        for (int32_t kx = 0; kx < filter_dims->w; ++kx) {
          const int32_t ix = ox * conv->stride_w - conv->pad_left + kx * conv->dilation_w;
          const int32_t x = iy < 0 || iy >= in_h || ix < 0 || ix >= in_w
                                ? conv->pad_value
                                : image[((int64_t)iy * in_w + ix) * in_c + oc / multiplier];
          acc += x * (int32_t)filter[((int64_t)ky * filter_dims->w + kx) * out_c + oc];
        }
      }
      out[oc] = b8_output_s8(acc, quant, oc);
    }
  }
}

#if B8_USE_AVX2
/* The wide blocks' pixels [begin, end) for the channels from c0. Each build defines
 * B8_DW_LOAD_COLUMN(p0, p1, p2, v), the column of rows p0, p1, p2 into v, and
 * B8_DW_PIXEL(v0, v1, v2), one pixel from its three columns stored at o, and fills pad (one
 * column of pad_value bytes) and pad_column (its columns). A column outside the input is
 * pad_column; a kernel row outside it reads pad at every column (row[k] = pad, keep[k] = 0: its
 * offsets masked off), so that the rows at the top and bottom edges run here too (before, the
 * per-tap loop of b8_depthwise_run took them at a third of the speed: MobileNetV2's 7x7 layers
 * spent half their time on 2 of their 7 rows). Along a row, the three column sets ca, cb, cc
 * change roles from pixel to pixel (no copies: copying them cost AVX2 a third of its speed,
 * having too few registers to hold them). */
#define B8_DW_COLUMNS(ix, v)                                                                             \
  do {                                                                                                   \
    if ((ix) >= 0 && (ix) < in_w) {                                                                      \
      const int64_t offset = (int64_t)(ix) * c;                                                          \
      B8_DW_LOAD_COLUMN(row[0] + (offset & keep[0]), row[1] + (offset & keep[1]), row[2] + (offset & keep[2]), v); \
    } else {                                                                                             \
      memcpy(v, pad_column, sizeof(pad_column));                                                        \
    }                                                                                                    \
  } while (0)
#define B8_DW_ROWS(ca, cb, cc)                                                                           \
  for (int64_t first = begin; first < end;) {                                                            \
    const int64_t out_row = first / out_w;                                                               \
    const int32_t ox_begin = (int32_t)(first - out_row * out_w);                                         \
    const int32_t ox_end = end - out_row * out_w < out_w ? (int32_t)(end - out_row * out_w) : out_w;     \
    const int32_t iy0 = (int32_t)(out_row % out_h) * conv->stride_h - conv->pad_top;                     \
    const int8_t* image = input + out_row / out_h * image_size;                                          \
    first = out_row * out_w + ox_end;                                                                    \
    const int8_t* row[3];                                                                                \
    int64_t keep[3];                                                                                     \
    for (int32_t k = 0; k < 3; ++k) {                                                                    \
      const int32_t iy = iy0 + k * dh;                                                                   \
      const int inside = iy >= 0 && iy < in_h;                                                           \
      row[k] = inside ? image + (int64_t)iy * row_stride + c0 : pad;                                     \
      keep[k] = inside ? -1 : 0;                                                                         \
    }                                                                                                    \
    int8_t* o = output + (out_row * out_w + ox_begin) * c + c0;                                          \
    B8_DW_ROW(ca, cb, cc);                                                                               \
  }
/* One row's pixels ox_begin .. ox_end - 1 (stride sw of 1 or 2), o the first one's output. */
#define B8_DW_ROW(ca, cb, cc)                                                     \
  do {                                                                           \
    int32_t x = ox_begin * sw - conv->pad_left;                                  \
    B8_DW_COLUMNS(x, ca);                                                        \
    B8_DW_COLUMNS(x + 1, cb);                                                    \
    if (sw == 1) { /* three pixels a round */                                    \
      for (int32_t ox = ox_begin;; x += 3) {                                     \
        B8_DW_COLUMNS(x + 2, cc);                                                \
        B8_DW_PIXEL(ca, cb, cc);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
        B8_DW_COLUMNS(x + 3, ca);                                                \
        B8_DW_PIXEL(cb, cc, ca);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
        B8_DW_COLUMNS(x + 4, cb);                                                \
        B8_DW_PIXEL(cc, ca, cb);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
      }                                                                          \
    } else { /* stride 2: a pixel's last column is the next one's first */      \
      for (int32_t ox = ox_begin;; x += 6) {                                     \
        B8_DW_COLUMNS(x + 2, cc);                                                \
        B8_DW_PIXEL(ca, cb, cc);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
        B8_DW_COLUMNS(x + 3, ca);                                                \
        B8_DW_COLUMNS(x + 4, cb);                                                \
        B8_DW_PIXEL(cc, ca, cb);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
        B8_DW_COLUMNS(x + 5, cc);                                                \
        B8_DW_COLUMNS(x + 6, ca);                                                \
        B8_DW_PIXEL(cb, cc, ca);                                                 \
        o += c;                                                                  \
        if (++ox >= ox_end) break;                                               \
        B8_DW_COLUMNS(x + 7, cb); /* the next round's: ca = x + 6, cb = x + 7 */ \
      }                                                                          \
    }                                                                            \
  } while (0)

/* Channel multiplier 1 (MobileNet's), vectorized over channels: B8_DW_LANES channels at a time
 * (16 int32 lanes with AVX-512, 8 with AVX2). Each tap's int8 inputs and weights are widened to
 * int32 and multiplied and summed in int32 lanes (|x w| <= 128 x 127, exact): the accumulator is
 * the portable one (int32 sums in another order: the same bits), and so is the output stage
 * (while the block's shifts are <= 0, the float estimate of internal.h, or b8_requantize_x16 / _x8
 * where it is unsure; else b8_output_s8 lane by lane).
 * AVX-512 masks the last partial block; AVX2 runs its last block over the last 8 channels
 * (overlapping the one before: the same bytes again), and fewer than 8 channels go to the
 * portable code. */
#if B8_USE_AVX512VNNI
enum { B8_DW_LANES = 16 };
typedef __m512i b8_dw_vec;
typedef __mmask16 b8_dw_mask;
B8_INLINE b8_dw_vec b8_dw_load_s8(const int8_t* p, b8_dw_mask m) {
  return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p));
}
B8_INLINE b8_dw_vec b8_dw_load_s32(const int32_t* p, b8_dw_mask m) { return _mm512_maskz_loadu_epi32(m, p); }
B8_INLINE b8_dw_vec b8_dw_set1(int32_t v) { return _mm512_set1_epi32(v); }
B8_INLINE b8_dw_vec b8_dw_sub(b8_dw_vec a, b8_dw_vec b) { return _mm512_sub_epi32(a, b); }
B8_INLINE b8_dw_vec b8_dw_mac(b8_dw_vec acc, b8_dw_vec x, b8_dw_vec w) {
  return _mm512_add_epi32(acc, _mm512_mullo_epi32(x, w));
}
B8_INLINE int b8_dw_any_positive(b8_dw_vec v, b8_dw_mask m) {
  return _mm512_mask_cmpgt_epi32_mask(m, v, _mm512_setzero_si512()) != 0;
}
B8_INLINE void b8_dw_spill(int32_t* lanes, b8_dw_vec v) { _mm512_storeu_si512((void*)lanes, v); }
typedef b8_estimate_x16_params b8_dw_estimate;
B8_INLINE void b8_dw_estimate_prepare(b8_dw_vec multiplier, b8_dw_vec shift, int32_t zero_point, b8_dw_estimate* p) {
  b8_estimate_prepare_x16(multiplier, shift, zero_point, p);
}
/* The float estimate, or the exact path where a lane is unsure (internal.h). */
B8_INLINE void b8_dw_output(int8_t* out, b8_dw_vec acc, const b8_dw_estimate* estimate, b8_dw_vec multiplier,
                            b8_dw_vec right, b8_dw_vec zero_point, b8_dw_vec lo, b8_dw_vec hi, b8_dw_mask m) {
  __mmask16 unsure = 0;
  __m512i y = b8_estimate_x16(acc, estimate, &unsure);
  if (__builtin_expect((unsure & m) != 0, 0))
    y = b8_requantize_output_x16(acc, multiplier, right, zero_point);
  b8_store_s8x16_masked(out, y, lo, hi, m);
}
/* Three rows' bytes of 16 channels side by side in each int32 lane: byte 0 from r0, 1 from r1,
 * 2 from r2, byte 3 zero (vpdpbusd then sums one kernel column of a 3-tall kernel per lane). */
B8_INLINE __m512i b8_dw_column3(const int8_t* r0, const int8_t* r1, const int8_t* r2, __mmask16 m) {
  const __m512i a = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r0));
  const __m512i b = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r1)), 8);
  const __m512i c = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r2)), 16);
  return _mm512_ternarylogic_epi32(a, b, c, 0xFE); /* a | b | c */
}

/* Wide blocks: 64 channels of a 3x3 kernel at a time. Three rows' 64 bytes become four
 * vectors of [x0, x1, x2, 0] lanes with byte unpacks (vector q, lane j: channel
 * 16 (j / 4) + 4 q + j % 4, the order the unpacks leave within each 128-bit lane), instead of
 * widening 16 channels at a time; the per-channel int32 data is put in the same order by a 4x4
 * transpose of 128-bit blocks, and the packs of the output stage restore the natural order. */
enum { B8_DW_WIDE = 64 };

B8_INLINE void b8_dw_columns64(const int8_t* r0, const int8_t* r1, const int8_t* r2, __mmask64 m, __m512i flip,
                               __m512i out[4]) {
  const __m512i a = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, r0), flip);
  const __m512i b = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, r1), flip);
  const __m512i c = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, r2), flip);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ab_lo = _mm512_unpacklo_epi8(a, b), ab_hi = _mm512_unpackhi_epi8(a, b);
  const __m512i c_lo = _mm512_unpacklo_epi8(c, zero), c_hi = _mm512_unpackhi_epi8(c, zero);
  out[0] = _mm512_unpacklo_epi16(ab_lo, c_lo);
  out[1] = _mm512_unpackhi_epi16(ab_lo, c_lo);
  out[2] = _mm512_unpacklo_epi16(ab_hi, c_hi);
  out[3] = _mm512_unpackhi_epi16(ab_hi, c_hi);
}

/* 64 channels' int32 values (the first `lanes`, the rest zero) in the wide blocks' order. */
B8_INLINE void b8_dw_transpose64(const int32_t* values, int32_t lanes, __m512i out[4]) {
  __m512i natural[4];
  for (int32_t k = 0; k < 4; ++k) {
    const int32_t left = lanes - 16 * k;
    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
    natural[k] = _mm512_maskz_loadu_epi32(m, values + 16 * k);
  }
  const __m512i t0 = _mm512_shuffle_i32x4(natural[0], natural[1], 0x44), t1 = _mm512_shuffle_i32x4(natural[0], natural[1], 0xEE);
  const __m512i t2 = _mm512_shuffle_i32x4(natural[2], natural[3], 0x44), t3 = _mm512_shuffle_i32x4(natural[2], natural[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
  out[1] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
  out[2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
  out[3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
}

/* Output pixels [begin, end) in wide blocks from channel 0, while more than 32 channels remain and
 * the block's shifts are <= 0 (3x3 kernels, stride 1 or 2 across, no dilation across; rows and
 * columns outside the input read pad_value). Each block's weights and output stage are prepared
 * once for all its rows. Returns the channels done (a multiple of 64); b8_depthwise_run does the
 * rest. */
static int32_t b8_depthwise_wide(const b8_conv_params* conv, const b8_requant_params* quant,
                                 const b8_dims* input_dims, const int8_t* input, const int8_t* filter,
                                 const int32_t* bias, const b8_dims* output_dims, int8_t* output, int64_t begin,
                                 int64_t end) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;
  const int32_t out_h = output_dims->h, out_w = output_dims->w;
  const int32_t sw = conv->stride_w, dh = conv->dilation_h;
  const int64_t row_stride = (int64_t)in_w * c, image_size = (int64_t)in_h * row_stride;
  const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
  const __m512i flip3 = _mm512_set1_epi32(0x00808080);
  const __m512i lo = _mm512_set1_epi8((char)quant->act_min), hi = _mm512_set1_epi8((char)quant->act_max);
  const __m512i zero_point = _mm512_set1_epi32(quant->output_zero_point);
  int8_t pad[B8_DW_WIDE];
  memset(pad, conv->pad_value, sizeof(pad));
  int32_t c0 = 0;
  for (; c - c0 > 32; c0 += B8_DW_WIDE) {
    const int32_t lanes = c - c0 < B8_DW_WIDE ? c - c0 : B8_DW_WIDE;
    const __mmask64 m = lanes == 64 ? ~(__mmask64)0 : (((__mmask64)1 << lanes) - 1);
    __m512i multiplier[4], shift[4], right[4], base[4], w[3][4], pad_column[4];
    b8_dw_transpose64(quant->shift + c0, lanes, shift);
    if (_mm512_cmpgt_epi32_mask(_mm512_max_epi32(_mm512_max_epi32(shift[0], shift[1]), _mm512_max_epi32(shift[2], shift[3])),
                                zero))
      break;
    b8_dw_transpose64(quant->multiplier + c0, lanes, multiplier);
    if (bias)
      b8_dw_transpose64(bias + c0, lanes, base);
    else
      base[0] = base[1] = base[2] = base[3] = zero;
    b8_estimate_x16_params estimate[4];
    for (int32_t kx = 0; kx < 3; ++kx)
      b8_dw_columns64(filter + (int64_t)kx * c + c0, filter + (int64_t)(3 + kx) * c + c0,
                      filter + (int64_t)(6 + kx) * c + c0, m, zero, w[kx]);
    b8_dw_columns64(pad, pad, pad, m, flip, pad_column);
    for (int32_t q = 0; q < 4; ++q) {
      right[q] = _mm512_sub_epi32(_mm512_set1_epi32(31), shift[q]);
      b8_estimate_prepare_x16(multiplier[q], shift[q], quant->output_zero_point, &estimate[q]);
      /* inputs made unsigned (+128): the bias takes back 128 x each kernel column's weights */
      for (int32_t kx = 0; kx < 3; ++kx)
        base[q] = _mm512_sub_epi32(base[q], _mm512_dpbusd_epi32(zero, flip3, w[kx][q]));
    }
#define B8_DW_LOAD_COLUMN(p0, p1, p2, v) b8_dw_columns64(p0, p1, p2, m, flip, v)
    /* One output pixel from the columns at x, x + 1 and x + 2, stored at o. */
#define B8_DW_PIXEL(c0, c1, c2)                                                                               \
  do {                                                                                                        \
    __m512i y[4];                                                                                             \
    for (int32_t q = 0; q < 4; ++q) {                                                                         \
      const __m512i acc =                                                                                     \
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(base[q], c0[q], w[0][q]), c1[q], w[1][q]), \
                              c2[q], w[2][q]);                                                                \
      __mmask16 unsure = 0;                                                                                   \
      y[q] = b8_estimate_x16(acc, &estimate[q], &unsure);                                                     \
      if (__builtin_expect(unsure != 0, 0)) /* the exact path (lanes past c too: harmless) */                 \
        y[q] = b8_requantize_output_x16(acc, multiplier[q], right[q], zero_point);                            \
    }                                                                                                         \
    /* int32 -> int16 -> int8 with saturation (monotone: then clamping gives the clamp of the int32), \
     * the packs putting the channels back in order. */                                                       \
    const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(y[0], y[1]), _mm512_packs_epi32(y[2], y[3])); \
    _mm512_mask_storeu_epi8(o, m, _mm512_min_epi8(_mm512_max_epi8(bytes, lo), hi));                          \
  } while (0)
    __m512i ca[4], cb[4], cc[4];
    B8_DW_ROWS(ca, cb, cc)
#undef B8_DW_PIXEL
#undef B8_DW_LOAD_COLUMN
  }
  return c0;
}
#else
enum { B8_DW_LANES = 8 };
typedef __m256i b8_dw_vec;
typedef int b8_dw_mask; /* AVX2 blocks are whole */
B8_INLINE b8_dw_vec b8_dw_load_s8(const int8_t* p, b8_dw_mask m) {
  (void)m;
  return b8_load_s8x8(p);
}
B8_INLINE b8_dw_vec b8_dw_load_s32(const int32_t* p, b8_dw_mask m) {
  (void)m;
  return _mm256_loadu_si256((const __m256i*)p);
}
B8_INLINE b8_dw_vec b8_dw_set1(int32_t v) { return _mm256_set1_epi32(v); }
B8_INLINE b8_dw_vec b8_dw_sub(b8_dw_vec a, b8_dw_vec b) { return _mm256_sub_epi32(a, b); }
B8_INLINE b8_dw_vec b8_dw_mac(b8_dw_vec acc, b8_dw_vec x, b8_dw_vec w) {
  return _mm256_add_epi32(acc, _mm256_mullo_epi32(x, w));
}
B8_INLINE int b8_dw_any_positive(b8_dw_vec v, b8_dw_mask m) {
  (void)m;
  return _mm256_movemask_epi8(_mm256_cmpgt_epi32(v, _mm256_setzero_si256())) != 0;
}
B8_INLINE void b8_dw_spill(int32_t* lanes, b8_dw_vec v) { _mm256_storeu_si256((__m256i*)lanes, v); }
typedef b8_estimate_x8_params b8_dw_estimate;
B8_INLINE void b8_dw_estimate_prepare(b8_dw_vec multiplier, b8_dw_vec shift, int32_t zero_point, b8_dw_estimate* p) {
  b8_estimate_prepare_x8(multiplier, shift, zero_point, p);
}
B8_INLINE void b8_dw_output(int8_t* out, b8_dw_vec acc, const b8_dw_estimate* estimate, b8_dw_vec multiplier,
                            b8_dw_vec right, b8_dw_vec zero_point, b8_dw_vec lo, b8_dw_vec hi, b8_dw_mask m) {
  (void)m;
  __m256i unsure = _mm256_setzero_si256();
  __m256i y = b8_estimate_x8(acc, estimate, &unsure);
  if (__builtin_expect(!_mm256_testz_si256(unsure, unsure), 0))
    y = b8_requantize_output_x8(acc, multiplier, right, zero_point);
  b8_store_s8x8(out, y, lo, hi);
}

/* Wide blocks with AVX2: 16 channels of a 3x3 kernel at a time by vpmaddwd, two taps per
 * instruction (the AVX-512BW build first takes 32 at a time on 512-bit vectors). A column's three
 * rows are sign-extended to int16 and interleaved into pairs (row 0, row 1) and (row 2, 0) per
 * int32 lane, in the order the unpacks leave within each 128-bit lane: with 16 channels vector
 * "low" holds channels 0-3 and 8-11, "high" 4-7 and 12-15; with 32, "low" 0-3, 8-11, 16-19 and
 * 24-27. The kernel's columns are paired the same way, the per-channel int32 data is put in that
 * order by moving 128-bit blocks, and the packs of the output stage restore the natural order.
 * Products and sums are exact int32, in another order: the portable accumulator.
 * Each width has the same helpers (b8_dw16_*, b8_dw32_*), which the loop of B8_DW_WIDE_FUNCTION
 * runs. */

/* The column of rows r0, r1, r2 (16 channels each): out[0] = (r0, r1) low, out[1] = (r2, 0) low,
 * out[2] = (r0, r1) high, out[3] = (r2, 0) high. */
B8_INLINE void b8_dw16_columns(const int8_t* r0, const int8_t* r1, const int8_t* r2, __m256i out[4]) {
  const __m256i a = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)r0));
  const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)r1));
  const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)r2));
  const __m256i zero = _mm256_setzero_si256();
  out[0] = _mm256_unpacklo_epi16(a, b);
  out[1] = _mm256_unpacklo_epi16(c, zero);
  out[2] = _mm256_unpackhi_epi16(a, b);
  out[3] = _mm256_unpackhi_epi16(c, zero);
}

/* 16 channels' int32 values in the wide blocks' order: out[0] low, out[1] high. */
B8_INLINE void b8_dw16_halves(const int32_t* values, __m256i out[2]) {
  const __m256i first = _mm256_loadu_si256((const __m256i*)values);
  const __m256i second = _mm256_loadu_si256((const __m256i*)(values + 8));
  out[0] = _mm256_permute2x128_si256(first, second, 0x20);
  out[1] = _mm256_permute2x128_si256(first, second, 0x31);
}

/* A block's weights, bias and output stage, in the blocks' order. */
typedef __m256i b8_dw16_vec;
typedef struct {
  __m256i w[3][4], base[2], multiplier[2], right[2], zero_point;
  b8_estimate_x8_params estimate[2];
  __m128i lo, hi;
} b8_dw16_block;

/* Loads the block of channels c0 .. c0 + 15; 0 where a shift is > 0 (the blocks stop there). */
B8_INLINE int b8_dw16_block_load(const b8_requant_params* quant, const int8_t* filter, const int32_t* bias, int32_t c,
                                 int32_t c0, b8_dw16_block* b) {
  __m256i shift[2];
  b8_dw16_halves(quant->shift + c0, shift);
  if (!_mm256_testz_si256(_mm256_cmpgt_epi32(_mm256_max_epi32(shift[0], shift[1]), _mm256_setzero_si256()),
                          _mm256_set1_epi32(-1)))
    return 0;
  b8_dw16_halves(quant->multiplier + c0, b->multiplier);
  if (bias)
    b8_dw16_halves(bias + c0, b->base);
  else
    b->base[0] = b->base[1] = _mm256_setzero_si256();
  for (int32_t h = 0; h < 2; ++h) {
    b->right[h] = _mm256_sub_epi32(_mm256_set1_epi32(31), shift[h]);
    b8_estimate_prepare_x8(b->multiplier[h], shift[h], quant->output_zero_point, &b->estimate[h]);
  }
  for (int32_t kx = 0; kx < 3; ++kx)
    b8_dw16_columns(filter + (int64_t)kx * c + c0, filter + (int64_t)(3 + kx) * c + c0,
                    filter + (int64_t)(6 + kx) * c + c0, b->w[kx]);
  b->zero_point = _mm256_set1_epi32(quant->output_zero_point);
  b->lo = _mm_set1_epi8((char)quant->act_min);
  b->hi = _mm_set1_epi8((char)quant->act_max);
  return 1;
}

/* One output pixel of the block from its columns x0, x1, x2, stored at o; the estimate in `mode` (a
 * constant: b8_estimate_mode's for the call). */
B8_INLINE void b8_dw16_pixel(int8_t* o, const __m256i x0[4], const __m256i x1[4], const __m256i x2[4],
                             const b8_dw16_block* b, const int mode) {
  __m256i y[2];
  for (int32_t h = 0; h < 2; ++h) {
    __m256i acc = b->base[h];
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x0[2 * h], b->w[0][2 * h]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x0[2 * h + 1], b->w[0][2 * h + 1]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x1[2 * h], b->w[1][2 * h]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x1[2 * h + 1], b->w[1][2 * h + 1]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x2[2 * h], b->w[2][2 * h]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x2[2 * h + 1], b->w[2][2 * h + 1]));
    __m256i unsure = _mm256_setzero_si256();
    y[h] = b8_estimate_x8_as(acc, &b->estimate[h], &unsure, mode);
    if (__builtin_expect(!_mm256_testz_si256(unsure, unsure), 0))
      y[h] = b8_requantize_output_x8(acc, b->multiplier[h], b->right[h], b->zero_point);
  }
  /* int32 -> int16 -> int8 with saturation (monotone: then clamping gives the clamp of the int32);
   * the packs put the channels back in order, 0-7 and 8-15 in the two halves. */
  const __m256i words = _mm256_packs_epi32(y[0], y[1]);
  const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(words, words), 0x08);
  _mm_storeu_si128((__m128i*)o, _mm_min_epi8(_mm_max_epi8(_mm256_castsi256_si128(bytes), b->lo), b->hi));
}

#if B8_USE_AVX512BW
/* The same on 32 channels, 512-bit vectors (on one Zen 5 core MobileNetV2's depthwise layers 1.8x
 * the speed of the blocks of 16). */
B8_INLINE void b8_dw32_columns(const int8_t* r0, const int8_t* r1, const int8_t* r2, __m512i out[4]) {
  const __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)r0));
  const __m512i b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)r1));
  const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)r2));
  const __m512i zero = _mm512_setzero_si512();
  out[0] = _mm512_unpacklo_epi16(a, b);
  out[1] = _mm512_unpacklo_epi16(c, zero);
  out[2] = _mm512_unpackhi_epi16(a, b);
  out[3] = _mm512_unpackhi_epi16(c, zero);
}

B8_INLINE void b8_dw32_halves(const int32_t* values, __m512i out[2]) {
  const __m512i first = _mm512_loadu_si512((const void*)values);
  const __m512i second = _mm512_loadu_si512((const void*)(values + 16));
  out[0] = _mm512_shuffle_i32x4(first, second, 0x88); /* 128-bit blocks 0 and 2 of each */
  out[1] = _mm512_shuffle_i32x4(first, second, 0xDD); /* 1 and 3 */
}

typedef __m512i b8_dw32_vec;
typedef struct {
  __m512i w[3][4], base[2], multiplier[2], right[2], zero_point;
  b8_estimate_x16_params estimate[2];
  __m256i lo, hi;
} b8_dw32_block;

B8_INLINE int b8_dw32_block_load(const b8_requant_params* quant, const int8_t* filter, const int32_t* bias, int32_t c,
                                 int32_t c0, b8_dw32_block* b) {
  __m512i shift[2];
  b8_dw32_halves(quant->shift + c0, shift);
  if (_mm512_cmpgt_epi32_mask(_mm512_max_epi32(shift[0], shift[1]), _mm512_setzero_si512())) return 0;
  b8_dw32_halves(quant->multiplier + c0, b->multiplier);
  if (bias)
    b8_dw32_halves(bias + c0, b->base);
  else
    b->base[0] = b->base[1] = _mm512_setzero_si512();
  for (int32_t h = 0; h < 2; ++h) {
    b->right[h] = _mm512_sub_epi32(_mm512_set1_epi32(31), shift[h]);
    b8_estimate_prepare_x16(b->multiplier[h], shift[h], quant->output_zero_point, &b->estimate[h]);
  }
  for (int32_t kx = 0; kx < 3; ++kx)
    b8_dw32_columns(filter + (int64_t)kx * c + c0, filter + (int64_t)(3 + kx) * c + c0,
                    filter + (int64_t)(6 + kx) * c + c0, b->w[kx]);
  b->zero_point = _mm512_set1_epi32(quant->output_zero_point);
  b->lo = _mm256_set1_epi8((char)quant->act_min);
  b->hi = _mm256_set1_epi8((char)quant->act_max);
  return 1;
}

B8_INLINE void b8_dw32_pixel(int8_t* o, const __m512i x0[4], const __m512i x1[4], const __m512i x2[4],
                             const b8_dw32_block* b, const int mode) {
  __m512i y[2];
  for (int32_t h = 0; h < 2; ++h) {
    __m512i acc = b->base[h];
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x0[2 * h], b->w[0][2 * h]));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x0[2 * h + 1], b->w[0][2 * h + 1]));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x1[2 * h], b->w[1][2 * h]));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x1[2 * h + 1], b->w[1][2 * h + 1]));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x2[2 * h], b->w[2][2 * h]));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x2[2 * h + 1], b->w[2][2 * h + 1]));
    __mmask16 unsure = 0;
    y[h] = b8_estimate_x16_as(acc, &b->estimate[h], &unsure, mode);
    if (__builtin_expect(unsure != 0, 0))
      y[h] = b8_requantize_output_x16(acc, b->multiplier[h], b->right[h], b->zero_point);
  }
  /* The pack puts each 128-bit lane's 8 channels in order, vpmovswb the lanes' bytes side by side. */
  const __m256i bytes = _mm512_cvtsepi16_epi8(_mm512_packs_epi32(y[0], y[1]));
  _mm256_storeu_si256((__m256i*)o, _mm256_min_epi8(_mm256_max_epi8(bytes, b->lo), b->hi));
}
#endif

/* The wide blocks of W channels from c0 while W remain and the block's shifts are <= 0, with the
 * helpers B8_DWW(name) names (b8_dw16_*, b8_dw32_*); returns the first channel not done. */
#define B8_DW_LOAD_COLUMN(p0, p1, p2, v) B8_DWW(columns)(p0, p1, p2, v)
#define B8_DW_PIXEL(x0, x1, x2) B8_DWW(pixel)(o, x0, x1, x2, &block, mode)
#define B8_DW_WIDE_FUNCTION(W)                                                                               \
  B8_INLINE int32_t b8_depthwise_wide##W##_as(const b8_conv_params* conv, const b8_requant_params* quant,    \
                                              const b8_dims* input_dims, const int8_t* input,               \
                                              const int8_t* filter, const int32_t* bias,                    \
                                              const b8_dims* output_dims, int8_t* output, int64_t begin,    \
                                              int64_t end, int32_t c0, const int mode) {                    \
    const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;                            \
    const int32_t out_h = output_dims->h, out_w = output_dims->w;                                           \
    const int32_t sw = conv->stride_w, dh = conv->dilation_h;                                               \
    const int64_t row_stride = (int64_t)in_w * c, image_size = (int64_t)in_h * row_stride;                   \
    int8_t pad[W];                                                                                          \
    memset(pad, conv->pad_value, sizeof(pad));                                                              \
    for (; c - c0 >= (W); c0 += (W)) {                                                                      \
      B8_DWW(block) block;                                                                                  \
      if (!B8_DWW(block_load)(quant, filter, bias, c, c0, &block)) break;                                   \
      B8_DWW(vec) pad_column[4], ca[4], cb[4], cc[4];                                                       \
      B8_DWW(columns)(pad, pad, pad, pad_column);                                                           \
      B8_DW_ROWS(ca, cb, cc)                                                                                \
    }                                                                                                       \
    return c0;                                                                                              \
  }
#define B8_DWW(name) b8_dw16_##name
B8_DW_WIDE_FUNCTION(16)
#undef B8_DWW
#if B8_USE_AVX512BW
#define B8_DWW(name) b8_dw32_##name
B8_DW_WIDE_FUNCTION(32)
#undef B8_DWW
#endif
#undef B8_DW_WIDE_FUNCTION
#undef B8_DW_PIXEL
#undef B8_DW_LOAD_COLUMN

/* The AVX2 build's b8_depthwise_wide: blocks of 16 channels while 16 remain (else as above), after
 * the AVX-512BW build's of 32 while 32 remain; the estimate in `mode` (a constant: b8_estimate_mode's
 * for the call). */
B8_INLINE int32_t b8_depthwise_wide_as(const b8_conv_params* conv, const b8_requant_params* quant,
                                       const b8_dims* input_dims, const int8_t* input, const int8_t* filter,
                                       const int32_t* bias, const b8_dims* output_dims, int8_t* output, int64_t begin,
                                       int64_t end, const int mode) {
#if B8_USE_AVX512BW
  const int32_t c0 =
      b8_depthwise_wide32_as(conv, quant, input_dims, input, filter, bias, output_dims, output, begin, end, 0, mode);
#else
  const int32_t c0 = 0;
#endif
  return b8_depthwise_wide16_as(conv, quant, input_dims, input, filter, bias, output_dims, output, begin, end, c0,
                                mode);
}

static int32_t b8_depthwise_wide(const b8_conv_params* conv, const b8_requant_params* quant,
                                 const b8_dims* input_dims, const int8_t* input, const int8_t* filter,
                                 const int32_t* bias, const b8_dims* output_dims, int8_t* output, int64_t begin,
                                 int64_t end) {
#define B8_DW_WIDE_AS(mode) \
  b8_depthwise_wide_as(conv, quant, input_dims, input, filter, bias, output_dims, output, begin, end, mode)
  switch (b8_estimate_mode(quant, bias, input_dims->c, 9)) { /* 3x3 kernels: 9 products per sum */
    case B8_ESTIMATE_CLAMPED: return B8_DW_WIDE_AS(B8_ESTIMATE_CLAMPED);
    case B8_ESTIMATE_BOUNDED: return B8_DW_WIDE_AS(B8_ESTIMATE_BOUNDED);
    default: return B8_DW_WIDE_AS(B8_ESTIMATE_FULL);
  }
#undef B8_DW_WIDE_AS
}
#endif
enum { B8_DW_MAX_TAPS = 64 }; /* kernels up to this many taps keep the block's weights widened */
enum { B8_DW_PIXELS = 4 };    /* interior pixels computed together (3 wide kernels, stride 1) */

/* The output stage of a block of channels. */
typedef struct {
  b8_dw_estimate estimate;
  b8_dw_vec multiplier, right, zero_point, lo, hi;
  b8_dw_mask mask;
  int32_t oc, lanes; /* the block's first channel and how many it writes */
  int vector;        /* every shift of the block <= 0: the estimate and b8_requantize_x16 / _x8 apply */
} b8_dw_block;

B8_INLINE void b8_depthwise_output(const b8_dw_block* block, const b8_requant_params* quant, b8_dw_vec acc,
                                   int8_t* out) {
  if (block->vector) {
    b8_dw_output(out, acc, &block->estimate, block->multiplier, block->right, block->zero_point, block->lo,
                 block->hi, block->mask);
  } else {
    int32_t sums[B8_DW_LANES];
    b8_dw_spill(sums, acc);
    for (int32_t j = 0; j < block->lanes; ++j) out[j] = b8_output_s8(sums[j], quant, block->oc + j);
  }
}

/* Output pixels ox_begin .. ox_end - 1 of row oy (one image), every channel; `out` is the first
 * one's output. Per block of channels: the weights widened once, the bias plus what the window's
 * rows outside the input add (pad_value x their weights), then per pixel the taps of the rows
 * inside. Pixels whose window lies inside the input (the interior) read every tap without a
 * check: with kernels 3 wide, stride 1 and no dilation across, B8_DW_PIXELS neighbours at a time,
 * which share their input columns (each loaded and widened once for all of them); the other
 * pixels check each column. Inlined with k_h = k_w = 3 constant too. */
B8_INLINE void b8_depthwise_run(const b8_conv_params* conv, const b8_requant_params* quant,
                                const b8_dims* input_dims, const int8_t* image, const int8_t* filter,
                                const int32_t* bias, int32_t oy, int32_t ox_begin, int32_t ox_end,
                                int8_t* out, int32_t k_h, int32_t k_w, int32_t wide_channels) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;
  const int32_t dh = conv->dilation_h, dw = conv->dilation_w, sw = conv->stride_w;
  const int64_t row_stride = (int64_t)in_w * c;
  const int32_t iy0 = oy * conv->stride_h - conv->pad_top;
  /* The kernel rows inside the input: ky_lo .. ky_hi - 1 (iy grows with ky). */
  int32_t ky_lo = 0, ky_hi;
  while (ky_lo < k_h && iy0 + ky_lo * dh < 0) ++ky_lo;
  for (ky_hi = ky_lo; ky_hi < k_h && iy0 + ky_hi * dh < in_h;) ++ky_hi;
  const int all_rows = ky_lo == 0 && ky_hi == k_h;
  const int grouped = k_w == 3 && sw == 1 && dw == 1;
  const b8_dw_vec pad = b8_dw_set1(conv->pad_value), thirty_one = b8_dw_set1(31);
  b8_dw_vec w[B8_DW_MAX_TAPS];
  b8_dw_block block;
  block.lo = b8_dw_set1(quant->act_min);
  block.hi = b8_dw_set1(quant->act_max);
  block.zero_point = b8_dw_set1(quant->output_zero_point);
  /* (the first wide_channels are b8_depthwise_wide's) */
  for (int32_t c0 = wide_channels; c0 < c; c0 += B8_DW_LANES) {
#if B8_USE_AVX512VNNI
    block.oc = c0;
    block.lanes = c - c0 < B8_DW_LANES ? c - c0 : B8_DW_LANES;
    block.mask = (b8_dw_mask)((1u << block.lanes) - 1);
#else
    block.oc = c0 + B8_DW_LANES <= c ? c0 : c - B8_DW_LANES; /* the last block overlaps */
    block.lanes = B8_DW_LANES;
    block.mask = 0;
#endif
    const int32_t oc = block.oc;
    const b8_dw_mask mask = block.mask;
    b8_dw_vec base = bias ? b8_dw_load_s32(bias + oc, mask) : b8_dw_set1(0);
    for (int32_t t = 0; t < k_h * k_w; ++t) w[t] = b8_dw_load_s8(filter + (int64_t)t * c + oc, mask);
    for (int32_t ky = 0; ky < k_h; ++ky)
      if (ky < ky_lo || ky >= ky_hi)
        for (int32_t kx = 0; kx < k_w; ++kx) base = b8_dw_mac(base, pad, w[ky * k_w + kx]);
    const b8_dw_vec shift = b8_dw_load_s32(quant->shift + oc, mask);
    block.multiplier = b8_dw_load_s32(quant->multiplier + oc, mask);
    block.right = b8_dw_sub(thirty_one, shift);
    block.vector = !b8_dw_any_positive(shift, mask);
    b8_dw_estimate_prepare(block.multiplier, shift, quant->output_zero_point, &block.estimate); /* used if vector */
#if B8_USE_AVX512VNNI
    /* 3x3 kernels (any row dilation), stride 1 or 2 across, every row inside the input: the
     * interior pixels by vpdpbusd, 4 bytes per lane. Each input column of the three rows is
     * gathered once into lanes [x0, x1, x2, 0] made unsigned (x + 128, by flipping the sign
     * bits), and each kernel column into [w0, w1, w2, 0]: a pixel is 3 instructions on the
     * columns it spans, and the bias less 128 x (the sum of the weights) takes the +128 back.
     * Integer sums in another order: the portable accumulator exactly. */
    __m512i wcol[3] = {base, base, base}, base_u = base; /* (set below when used) */
    const int columns3 = k_h == 3 && k_w == 3 && dw == 1 && (sw == 1 || sw == 2) && all_rows;
    if (columns3) {
      const __m512i flip = _mm512_set1_epi32(0x00808080);
      for (int32_t kx = 0; kx < 3; ++kx) {
        wcol[kx] = b8_dw_column3(filter + (int64_t)kx * c + oc, filter + (int64_t)(3 + kx) * c + oc,
                                 filter + (int64_t)(6 + kx) * c + oc, mask);
        base_u = _mm512_sub_epi32(base_u, _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, wcol[kx]));
      }
    }
#endif
    for (int32_t ox = ox_begin; ox < ox_end; ++ox) {
      const int32_t ix0 = ox * sw - conv->pad_left;
      int8_t* o = out + (int64_t)(ox - ox_begin) * c + oc;
#if B8_USE_AVX512VNNI
      if (columns3 && ix0 >= 0 && ix0 + 2 < in_w) {
        /* The interior run from here: pixels whose window ends inside the row. */
        const int32_t last = (in_w - 3 + conv->pad_left) / sw; /* the last interior pixel */
        const int32_t stop = last + 1 < ox_end ? last + 1 : ox_end;
        const int8_t* r0 = image + (int64_t)iy0 * row_stride + oc;
        const int8_t* r1 = r0 + dh * row_stride;
        const int8_t* r2 = r1 + dh * row_stride;
        const __m512i flip = _mm512_set1_epi32(0x00808080);
#define B8_DW_COLUMN(ix) \
  _mm512_xor_si512(b8_dw_column3(r0 + (int64_t)(ix) * c, r1 + (int64_t)(ix) * c, r2 + (int64_t)(ix) * c, mask), flip)
        __m512i c0 = B8_DW_COLUMN(ix0), c1 = B8_DW_COLUMN(ix0 + 1);
        for (int32_t x = ix0;;) {
          const __m512i c2 = B8_DW_COLUMN(x + 2);
          __m512i acc = _mm512_dpbusd_epi32(base_u, c0, wcol[0]);
          acc = _mm512_dpbusd_epi32(acc, c1, wcol[1]);
          acc = _mm512_dpbusd_epi32(acc, c2, wcol[2]);
          b8_depthwise_output(&block, quant, acc, o);
          if (++ox >= stop) break;
          o += c;
          x += sw;
          if (sw == 1) {
            c0 = c1;
            c1 = c2;
          } else {
            c0 = c2;
            c1 = B8_DW_COLUMN(x + 1);
          }
        }
#undef B8_DW_COLUMN
        --ox; /* the loop's increment moves past the run */
        continue;
      }
#endif
      if (all_rows && ix0 >= 0 && ix0 + (k_w - 1) * dw < in_w) {
        const int8_t* window = image + (int64_t)iy0 * row_stride + (int64_t)ix0 * c + oc;
        if (grouped && ox + B8_DW_PIXELS <= ox_end && ix0 + B8_DW_PIXELS + 1 < in_w) {
          b8_dw_vec acc[B8_DW_PIXELS], column[B8_DW_PIXELS + 2];
          for (int32_t p = 0; p < B8_DW_PIXELS; ++p) acc[p] = base;
          for (int32_t ky = 0; ky < k_h; ++ky) {
            for (int32_t j = 0; j < B8_DW_PIXELS + 2; ++j)
              column[j] = b8_dw_load_s8(window + ky * dh * row_stride + (int64_t)j * c, mask);
            for (int32_t kx = 0; kx < 3; ++kx)
              for (int32_t p = 0; p < B8_DW_PIXELS; ++p)
                acc[p] = b8_dw_mac(acc[p], column[p + kx], w[ky * 3 + kx]);
          }
          for (int32_t p = 0; p < B8_DW_PIXELS; ++p)
            b8_depthwise_output(&block, quant, acc[p], o + (int64_t)p * c);
          ox += B8_DW_PIXELS - 1;
          continue;
        }
        b8_dw_vec acc = base;
        for (int32_t ky = 0; ky < k_h; ++ky)
          for (int32_t kx = 0; kx < k_w; ++kx)
            acc = b8_dw_mac(acc, b8_dw_load_s8(window + ky * dh * row_stride + (int64_t)kx * dw * c, mask),
                            w[ky * k_w + kx]);
        b8_depthwise_output(&block, quant, acc, o);
        continue;
      }
      b8_dw_vec acc = base;
      for (int32_t ky = ky_lo; ky < ky_hi; ++ky) {
        const int8_t* line = image + (int64_t)(iy0 + ky * dh) * row_stride + oc;
        for (int32_t kx = 0; kx < k_w; ++kx) {
          const int32_t ix = ix0 + kx * dw;
          const b8_dw_vec x = ix >= 0 && ix < in_w ? b8_dw_load_s8(line + (int64_t)ix * c, mask) : pad;
          acc = b8_dw_mac(acc, x, w[ky * k_w + kx]);
        }
      }
      b8_depthwise_output(&block, quant, acc, o);
    }
  }
}

/* Output pixels [begin, end) by runs within one output row. */
static void b8_depthwise_conv2d_s8_simd(const b8_conv_params* conv, const b8_requant_params* quant,
                                        const b8_dims* input_dims, const int8_t* input,
                                        const b8_dims* filter_dims, const int8_t* filter,
                                        const int32_t* bias, const b8_dims* output_dims,
                                        int8_t* output, int64_t begin, int64_t end) {
  const int32_t out_h = output_dims->h, out_w = output_dims->w, c = output_dims->c;
  const int32_t k_h = filter_dims->h, k_w = filter_dims->w;
  const int64_t image_size = (int64_t)input_dims->h * input_dims->w * c;
  int32_t wide = 0;
  if (k_h == 3 && k_w == 3 && conv->dilation_w == 1 && (conv->stride_w == 1 || conv->stride_w == 2))
    wide = b8_depthwise_wide(conv, quant, input_dims, input, filter, bias, output_dims, output, begin, end);
  for (int64_t first = begin; first < end;) {
    const int64_t row = first / out_w;
    const int32_t ox_begin = (int32_t)(first - row * out_w);
    const int32_t ox_end = end - row * out_w < out_w ? (int32_t)(end - row * out_w) : out_w;
    const int8_t* image = input + row / out_h * image_size;
    const int32_t oy = (int32_t)(row % out_h);
    int8_t* out = output + first * c;
    if (k_h == 3 && k_w == 3)
      b8_depthwise_run(conv, quant, input_dims, image, filter, bias, oy, ox_begin, ox_end, out, 3, 3, wide);
    else
      b8_depthwise_run(conv, quant, input_dims, image, filter, bias, oy, ox_begin, ox_end, out, k_h, k_w, 0);
    first = row * out_w + ox_end;
  }
}
#endif /* B8_USE_AVX2 */

B8_API b8_status b8_depthwise_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                                        const b8_dims* input_dims, const int8_t* input,
                                        const b8_dims* filter_dims, const int8_t* filter,
                                        const int32_t* bias, const b8_dims* output_dims,
                                        int8_t* output, const b8_pixels* pixels) {
  const int32_t in_c = input_dims->c, out_c = output_dims->c;
  if (in_c < 1 || out_c % in_c || filter_dims->c != out_c || filter_dims->n != 1 ||
      output_dims->n != input_dims->n || conv->stride_h < 1 || conv->stride_w < 1 ||
      conv->dilation_h < 1 || conv->dilation_w < 1 || conv->pad_value < -128 || conv->pad_value > 127) {
    return B8_ERROR_ARGUMENT;
  }
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
#if B8_USE_AVX2
  /* Shift-only requantization (multiplier NULL: power-of-two scales) runs the portable loop. */
  if (quant->multiplier && out_c == in_c && (B8_USE_AVX512VNNI || in_c >= B8_DW_LANES) && filter_dims->h >= 0 &&
      filter_dims->w >= 0 && (int64_t)filter_dims->h * filter_dims->w <= B8_DW_MAX_TAPS) {
    b8_depthwise_conv2d_s8_simd(conv, quant, input_dims, input, filter_dims, filter, bias, output_dims,
                                output, begin, end);
    return B8_OK;
  }
#endif
  b8_depthwise_conv2d_s8_portable(conv, quant, input_dims, input, filter_dims, filter, bias, output_dims,
                                  output, begin, end);
  return B8_OK;
}
