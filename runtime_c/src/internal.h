/* Helpers shared by the kernels (private to runtime_c: not part of the kernel interface). */
#ifndef BYOC_INT8_INTERNAL_H_
#define BYOC_INT8_INTERNAL_H_

#include <math.h>
#include <string.h>

#include "byoc_int8.h"

/* Both AVX-512 builds: the code under it uses AVX-512F/BW/DQ/VL only, no VNNI instruction (the
 * AVX-512 helpers below, the elementwise, pooling and requantization kernels' 16- and 64-lane
 * loops). */
#define B8_USE_AVX512 (B8_USE_AVX512VNNI || B8_USE_AVX512BW)

/* The output pixels a call computes (a thread's share, or all of them). */
B8_INLINE void b8_pixel_range(const b8_pixels* pixels, const b8_dims* output_dims, int64_t* begin,
                              int64_t* end) {
  const int64_t total = (int64_t)output_dims->n * output_dims->h * output_dims->w;
  *begin = pixels ? (pixels->begin < 0 ? 0 : pixels->begin) : 0;
  *end = pixels ? (pixels->end > total ? total : pixels->end) : total;
}

/* A scalar power-of-two factor (B8_SHIFT_ONLY, exponent e) rewritten as the (multiplier, shift)
 * pair of the same integer function, (2^30, e + 1), for vector code written for multipliers. */
B8_INLINE void b8_multiplier_form(int32_t* multiplier, int32_t* shift) {
  if (*multiplier == B8_SHIFT_ONLY) {
    *multiplier = 1 << 30;
    *shift += 1;
  }
}

/* The scalar output stage: bias, requantization, output zero point, clamp. */
B8_INLINE int8_t b8_output_s8(int32_t acc, const b8_requant_params* quant, int32_t oc) {
  const int64_t scaled = quant->multiplier ? b8_requantize(acc, quant->multiplier[oc], quant->shift[oc])
                                           : b8_requantize_pow2(acc, quant->shift[oc]);
  return b8_clamp_s8(scaled + quant->output_zero_point, quant->act_min, quant->act_max);
}

/* b8_requantize(d << left_shift, multiplier, shift) for an int8 difference |d| <= 255 (an add's
 * input less its zero point), in 32-bit arithmetic. With j = 31 - left_shift, e = -shift and
 * M = high * 2^j + low, the product d * M * 2^(shift - 31 + left_shift) is d * M / 2^(j + e), so
 * floor((d * M + R) / 2^(j + e)) = ((d * high + (R >> j)) + ((d * low + R % 2^j) >> j)) >> e,
 * every term within int32 for 9 <= left_shift <= 22 and shift <= 0. The single roundings add
 * R = 2^(j + e - 1) (of |d| for ties away from zero); TFLite's two roundings (the doubling high
 * multiply, then RoundingDivideByPOT when e > 0) are one rounding with R = 2^(j + e - 1) + 2^(j - 1)
 * for d > 0 and 2^j less for d < 0 (for e = 0, R = 2^(j - 1)): `negative` is -1 then, else 0. */
typedef struct {
  int32_t high, low, round_high, round_low, negative, low_shift, shift;
} b8_small_rescale;

/* Prepares b8_small_rescale for (multiplier, shift, left_shift); 0 where the 32-bit form does not
 * apply (the caller then takes b8_requantize). */
B8_INLINE int b8_small_rescale_prepare(int32_t multiplier, int32_t shift, int32_t left_shift, b8_small_rescale* r) {
  if (left_shift < 9 || left_shift > 22 || shift > 0 || shift < -31 || multiplier < 0) return 0;
  const int32_t j = 31 - left_shift, e = -shift;
  r->high = multiplier >> j;
  r->low = multiplier & ((1 << j) - 1);
  r->low_shift = j;
  r->shift = e;
  r->negative = 0;
#if B8_ROUNDING == B8_ROUND_TFLITE
  r->round_high = e > 0 ? 1 << (e - 1) : 0;
  r->round_low = 1 << (j - 1);
  r->negative = e > 0 ? -1 : 0;
#else
  r->round_high = e > 0 ? 1 << (e - 1) : 0;
  r->round_low = e > 0 ? 0 : 1 << (j - 1);
#endif
  return 1;
}

/* The add in float, where it is provably exact, as the convolutions' output stage is
 * (b8_estimate_x8): one fused multiply-add per input, with a check that sends the vectors with a
 * lane near a rounding boundary to the integer path.
 * Why it is exact: with d = input - zero_point, each input's rescale gives s = d x a within 1 (a is
 * its factor 2^left_shift x M / 2^(31 + e); one or two roundings, each within 1/2), and the output
 * rescale of s1 + s2 plus the zero point is floor(T), T = (s1 + s2) x f + zero_point + 1/2 + nudge
 * (f = M / 2^(31 + e); the nudge, TFLite's double rounding, is +-2^-(e + 1), else 0), except where
 * T is an integer (b8_estimate_x8's argument). So T is within 2 f + |nudge| of
 * y = x1 x a1 f + x2 x a2 f + center, center = zero_point + 1/2 - z1 a1 f - z2 a2 f, for the raw
 * codes x (|x| <= 128, exact in float). In float, y's two multiply-adds, the rounding of center
 * and of the two factors, and the margin's addition below err by at most
 * 4 u bound + 128 u (a1 + a2) f (u = 2^-24, bound >= |every intermediate|). With `margin` a power
 * of two above twice the total error, below = y - 1/2 - margin and above = below + 2 margin put
 * T - 1/2 strictly between them: where both convert to the same nearest integer, that integer is
 * floor(T), and where T is an integer (a tie) they differ (b8_estimate_x8's argument).
 * (runtime_c/tests/test_estimate.c
 * checks this at every pair of codes, ties included.) For TFLite's scales (f about
 * 2^-19, factors near 1) the margin is 2^-12 or 2^-11: about one lane in 1000 is redone. */
typedef struct {
  float scale1, scale2, offset, twice_margin;
} b8_add_estimate;

/* The estimate's constants for parameters in multiplier form with every shift <= 0; 0 where the
 * error bound leaves no useful margin (the integer path then runs alone). */
B8_INLINE int b8_add_estimate_prepare(const b8_add_params* p, b8_add_estimate* estimate) {
  const double unit = 1.0 / 16777216.0; /* 2^-24 */
  const double f = ldexp(p->output_multiplier, p->output_shift - 31);
  const double a1 = ldexp(p->input1_multiplier, p->left_shift + p->input1_shift - 31) * f;
  const double a2 = ldexp(p->input2_multiplier, p->left_shift + p->input2_shift - 31) * f;
  const double center = p->output_zero_point - p->input1_zero_point * a1 - p->input2_zero_point * a2; /* less 1/2 */
  const double bound = 128 * (fabs(a1) + fabs(a2)) + fabs(center) + 2;
#if B8_ROUNDING == B8_ROUND_TFLITE
  const double nudge = p->output_shift < 0 ? ldexp(1.0, p->output_shift - 1) : 0;
#else
  const double nudge = 0;
#endif
  const double error = 2 * fabs(f) + nudge + 4 * unit * bound + 128 * unit * (fabs(a1) + fabs(a2));
  double margin = unit;
  while (margin <= 2 * error && margin < 1) margin *= 2;
  if (margin > 1.0 / 128 || bound > 4194304.0) return 0; /* 2^-7, 2^22 */
  estimate->scale1 = (float)a1;
  estimate->scale2 = (float)a2;
  estimate->offset = (float)(center - margin);
  estimate->twice_margin = (float)(2 * margin);
  return 1;
}

#if B8_USE_AVX2
#include <immintrin.h>

/* b8_requantize on 8 lanes, exact while shift <= 0 (the result then fits in int32), in each
 * rounding. `right` is 31 - shift. AVX2 has no 64-bit arithmetic shift: products are made
 * non-negative by an offset of 2^62 (a multiple of every 2^right, taken off after the shift), or
 * handled as magnitudes (TFLite's rounding, whose 64-bit shift is always by 31, needs neither). */
B8_INLINE __m256i b8_requantize_x8(__m256i acc, __m256i multiplier, __m256i right) {
  const __m256i one = _mm256_set1_epi64x(1), low = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i right_even = _mm256_and_si256(right, low), right_odd = _mm256_srli_epi64(right, 32);
  const __m256i multiplier_odd = _mm256_srli_epi64(multiplier, 32);
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  /* sign(acc) * ((|acc| * M + 2^(right - 1)) >> right); |INT32_MIN| is read as unsigned 2^31. */
  const __m256i magnitude = _mm256_abs_epi32(acc);
  __m256i even = _mm256_mul_epu32(magnitude, multiplier);
  __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(magnitude, 32), multiplier_odd);
  even = _mm256_srlv_epi64(_mm256_add_epi64(even, _mm256_sllv_epi64(one, _mm256_sub_epi64(right_even, one))), right_even);
  odd = _mm256_srlv_epi64(_mm256_add_epi64(odd, _mm256_sllv_epi64(one, _mm256_sub_epi64(right_odd, one))), right_odd);
  return _mm256_sign_epi32(_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA), acc);
#elif B8_ROUNDING == B8_ROUND_TFLITE
  /* high = floor((acc * M + 2^30) / 2^31), then a right shift by -shift = right - 31 that rounds
   * ties away from zero (RoundingDivideByPOT), on 32-bit lanes. high fits in int32, and the low
   * 32 bits of a right shift by 31 are bits 31-62 whether the shift is logical or arithmetic:
   * the logical one AVX2 has does, without an offset. */
  (void)right_even, (void)right_odd, (void)one;
  const __m256i half = _mm256_set1_epi64x((int64_t)1 << 30);
  const __m256i even = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(acc, multiplier), half), 31);
  const __m256i odd = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(acc, 32), multiplier_odd), half);
  const __m256i high = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 1), 0xAA); /* odd's bits 31-62 */
  const __m256i exponent = _mm256_sub_epi32(right, _mm256_set1_epi32(31));
  const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(_mm256_set1_epi32(1), exponent), _mm256_set1_epi32(1));
  const __m256i threshold = _mm256_sub_epi32(_mm256_srli_epi32(mask, 1), _mm256_srai_epi32(high, 31));
  const __m256i round_up = _mm256_cmpgt_epi32(_mm256_and_si256(high, mask), threshold);
  return _mm256_sub_epi32(_mm256_srav_epi32(high, exponent), round_up);
#else
  const __m256i offset = _mm256_set1_epi64x((int64_t)1 << 62);
  __m256i even = _mm256_add_epi64(_mm256_mul_epi32(acc, multiplier), offset);
  __m256i odd = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(acc, 32), multiplier_odd), offset);
  /* (acc * M + 2^(right - 1)) >> right: ties toward +infinity. */
  even = _mm256_add_epi64(even, _mm256_sllv_epi64(one, _mm256_sub_epi64(right_even, one)));
  odd = _mm256_add_epi64(odd, _mm256_sllv_epi64(one, _mm256_sub_epi64(right_odd, one)));
  even = _mm256_sub_epi64(_mm256_srlv_epi64(even, right_even), _mm256_srlv_epi64(offset, right_even));
  odd = _mm256_sub_epi64(_mm256_srlv_epi64(odd, right_odd), _mm256_srlv_epi64(offset, right_odd));
  return _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
#endif
}

/* b8_requantize_x8 plus the zero point, as an output stage's exact path needs it: the requantized
 * value is held within +-2^24 first, so that the sum cannot wrap where the value is near INT32_MAX
 * (a sum that large at a factor near 1); any value held there clamps to the same int8, as the
 * portable code's 64-bit sum does. */
B8_INLINE __m256i b8_requantize_output_x8(__m256i acc, __m256i multiplier, __m256i right, __m256i zero_point) {
  const __m256i y = b8_requantize_x8(acc, multiplier, right);
  return _mm256_add_epi32(
      _mm256_min_epi32(_mm256_max_epi32(y, _mm256_set1_epi32(-(1 << 24))), _mm256_set1_epi32(1 << 24)), zero_point);
}

/* The output stage in float, where it is provably exact: b8_requantize(acc, M, shift) plus the
 * zero point, for shift <= 0, from one fused multiply-add, with a check that sends the rare lanes
 * near a rounding boundary to the integer path (about 1 in 2000; the caller redoes the vector).
 * Why it is exact: with e = -shift and r = acc x M / 2^(31 + e) (real), each rounding is
 * floor(T) for T = r + zero_point + 1/2 (+ sign(acc x M) x 2^-(e + 1) for TFLite's two roundings
 * when e >= 1: rounding h = floor(acc x M / 2^31 + 1/2) by 2^e, ties away from zero, is
 * floor(r + 1/2 + 2^-(e + 1)) for h >= 0 and floor(r + 1/2 - 2^-(e + 1)) for h < 0), except
 * where T is an integer (a tie, which the roundings break differently). In float, below =
 * acc x scale + offset is T - 1/2 - 2^-12 within 2^-13 (the rounding of acc, of scale and of the
 * sum, 2^-24 relative each, on |r| < 2^9 wherever the result is not clamped anyway; the offset's
 * own, 2^-16), and above = below + 2^-11, so T - 1/2 lies strictly between them. Both convert to
 * the nearest integer: where they give the same k, T - 1/2 lies in (k - 1/2, k + 1/2), so floor(T)
 * is k; where T is an integer, T - 1/2 is a half-integer between them and they differ. (Rounding
 * to nearest costs one instruction, where a floor on AVX2 costs a vroundps of two micro-ops on the
 * ports that also multiply, then a conversion.) Values at 2^24 and beyond are held there (they
 * clamp; 2^31 would not convert); far below -2^31 the conversion gives INT32_MIN, which clamps
 * alike. The AVX-512 code states round-to-nearest in every step; the AVX2 code takes it from MXCSR
 * (its default, which TVM and PyTorch keep). */
#define B8_ESTIMATE_MARGIN 0.000244140625f /* 2^-12 */
#define B8_ESTIMATE_LIMIT 16777216.0f      /* 2^24 */

/* The per-lane constants of the estimate: the factor M x 2^(shift - 31), and the offsets
 * zero_point - 2^-12 +- the TFLite nudge for acc >= 0 and acc < 0 (T - 1/2's). */
typedef struct {
  __m256 scale, offset_nonnegative, offset_negative;
} b8_estimate_x8_params;

B8_INLINE void b8_estimate_prepare_x8(__m256i multiplier, __m256i shift, int32_t zero_point,
                                      b8_estimate_x8_params* p) {
  /* 2^(shift - 31) as float bits (shift >= -31: a normal number) */
  const __m256i power = _mm256_slli_epi32(_mm256_add_epi32(shift, _mm256_set1_epi32(96)), 23);
  p->scale = _mm256_mul_ps(_mm256_cvtepi32_ps(multiplier), _mm256_castsi256_ps(power));
  const __m256 base = _mm256_set1_ps((float)zero_point - B8_ESTIMATE_MARGIN);
#if B8_ROUNDING == B8_ROUND_TFLITE
  /* 2^(shift - 1) with M's sign where shift <= -1, else 0 */
  const __m256i nudge_bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(shift, _mm256_set1_epi32(126)), 23),
                                             _mm256_and_si256(multiplier, _mm256_set1_epi32(INT32_MIN)));
  const __m256 nudge = _mm256_castsi256_ps(_mm256_and_si256(nudge_bits, _mm256_cmpgt_epi32(_mm256_setzero_si256(), shift)));
  p->offset_nonnegative = _mm256_add_ps(base, nudge);
  p->offset_negative = _mm256_sub_ps(base, nudge);
#else
  p->offset_nonnegative = p->offset_negative = base;
#endif
}

/* What a caller knows of a whole call's accumulators that spares the estimate steps:
 *  - B8_ESTIMATE_BOUNDED: each is at most B8_ESTIMATE_BOUND in magnitude, so that acc x scale +
 *    offset stays far below 2^31 and needs no cap before its conversion (b8_estimate_mode);
 *  - B8_ESTIMATE_CLAMPED: bounded, every multiplier positive and act_min >= the zero point (a
 *    ReLU's range): a negative accumulator's result is then at most the zero point, so act_min,
 *    whichever way it rounds, and the offset for acc >= 0 serves every lane. */
enum { B8_ESTIMATE_FULL = 0, B8_ESTIMATE_BOUNDED = 1, B8_ESTIMATE_CLAMPED = 2 };
#define B8_ESTIMATE_BOUND (1 << 30)

/* The estimate on 8 lanes as its two conversions, of below (returned) and of above (*high): a lane
 * is sure where they are equal. `mode`, a constant, is one of the above. */
B8_INLINE __m256i b8_estimate_bounds_x8(__m256i acc, const b8_estimate_x8_params* p, __m256i* high, const int mode) {
  const __m256 x = _mm256_cvtepi32_ps(acc);
  const __m256 offset = mode == B8_ESTIMATE_CLAMPED ? p->offset_nonnegative
                                                    : _mm256_blendv_ps(p->offset_nonnegative, p->offset_negative, x);
  __m256 below = _mm256_fmadd_ps(x, p->scale, offset);
  if (mode == B8_ESTIMATE_FULL) below = _mm256_min_ps(below, _mm256_set1_ps(B8_ESTIMATE_LIMIT));
  *high = _mm256_cvtps_epi32(_mm256_add_ps(below, _mm256_set1_ps(2 * B8_ESTIMATE_MARGIN)));
  return _mm256_cvtps_epi32(below);
}

/* The estimate on 8 lanes; lanes where it may be wrong are made nonzero in *unsure. */
B8_INLINE __m256i b8_estimate_x8_as(__m256i acc, const b8_estimate_x8_params* p, __m256i* unsure, const int mode) {
  __m256i high;
  const __m256i low = b8_estimate_bounds_x8(acc, p, &high, mode);
  *unsure = _mm256_or_si256(*unsure, _mm256_xor_si256(low, high));
  return low;
}

B8_INLINE __m256i b8_estimate_x8(__m256i acc, const b8_estimate_x8_params* p, __m256i* unsure) {
  return b8_estimate_x8_as(acc, p, unsure, B8_ESTIMATE_FULL);
}

/* The mode of a call's estimate: its accumulators are a bias plus `depth` products of two int8,
 * each at most 2^14 in magnitude. */
B8_INLINE int32_t b8_estimate_mode(const b8_requant_params* quant, const int32_t* bias, int32_t channels,
                                   int64_t depth) {
  int64_t largest_bias = 0;
  int clamped = quant->act_min >= quant->output_zero_point;
  for (int32_t c = 0; c < channels; ++c) {
    const int64_t b = bias ? bias[c] : 0;
    largest_bias = b > largest_bias ? b : -b > largest_bias ? -b : largest_bias;
    clamped &= quant->multiplier[c] > 0;
  }
  if (largest_bias + depth * 16384 > B8_ESTIMATE_BOUND) return B8_ESTIMATE_FULL;
  return clamped ? B8_ESTIMATE_CLAMPED : B8_ESTIMATE_BOUNDED;
}

/* The estimate's constants of channels [0, count) (count a multiple of 8, every shift <= 0) as
 * three float arrays, for kernels that prepare them once per call. */
B8_INLINE void b8_estimate_table(const b8_requant_params* quant, int32_t count, float* scale,
                                 float* offset_nonnegative, float* offset_negative) {
  for (int32_t oc = 0; oc < count; oc += 8) {
    b8_estimate_x8_params p;
    b8_estimate_prepare_x8(_mm256_loadu_si256((const __m256i*)(quant->multiplier + oc)),
                           _mm256_loadu_si256((const __m256i*)(quant->shift + oc)), quant->output_zero_point, &p);
    _mm256_storeu_ps(scale + oc, p.scale);
    _mm256_storeu_ps(offset_nonnegative + oc, p.offset_nonnegative);
    _mm256_storeu_ps(offset_negative + oc, p.offset_negative);
  }
}

/* Clamps 8 int32 lanes and stores them as 8 int8. */
B8_INLINE void b8_store_s8x8(int8_t* out, __m256i v, __m256i lo, __m256i hi) {
  v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
  const __m256i words = _mm256_packs_epi32(v, v);      /* per 128-bit half: 4 values, twice */
  const __m256i bytes = _mm256_packs_epi16(words, words);
  const int32_t first = _mm256_extract_epi32(bytes, 0), second = _mm256_extract_epi32(bytes, 4);
  memcpy(out, &first, 4);
  memcpy(out + 4, &second, 4);
}

/* The vector output stage of 8 channels from oc, for sums from the bias: b8_estimate_x8, the exact
 * requantization where it is unsure, the zero point, the clamp, stored as 8 int8 at out. */
B8_INLINE void b8_output_s8x8(__m256i sum, const b8_estimate_x8_params* estimate, const b8_requant_params* quant,
                              int32_t oc, __m256i lo, __m256i hi, int8_t* out) {
  __m256i unsure = _mm256_setzero_si256();
  __m256i y = b8_estimate_x8(sum, estimate, &unsure);
  if (__builtin_expect(!_mm256_testz_si256(unsure, unsure), 0)) {
    const __m256i right = _mm256_sub_epi32(_mm256_set1_epi32(31), _mm256_loadu_si256((const __m256i*)(quant->shift + oc)));
    y = b8_requantize_output_x8(sum, _mm256_loadu_si256((const __m256i*)(quant->multiplier + oc)), right,
                                _mm256_set1_epi32(quant->output_zero_point));
  }
  b8_store_s8x8(out, y, lo, hi);
}

/* The output stage of whole blocks of 16 channels, two pixels at a time, in registers: the AVX2
 * and AVX-VNNI builds' tiles and Winograd path (the AVX-512 VNNI build has its own on 16-lane
 * vectors, b8_block32_finish below).
 * b8_block_epilogue is one block's requantization, loaded once per tile: the estimate's from the
 * call's table, the exact path's from quant. */
typedef struct {
  b8_estimate_x8_params estimate[2]; /* channels 0-7 and 8-15 */
  const int32_t *multiplier, *shift;
  __m256i zero_point, lo, hi, order;
  int32_t mode; /* B8_ESTIMATE_*: the call's (b8_estimate_mode) */
} b8_block_epilogue;

B8_INLINE void b8_block_epilogue_load(const b8_requant_params* quant, const float* table, int32_t padded_c,
                                      int32_t oc0, int32_t mode, b8_block_epilogue* e) {
  for (int32_t half = 0; half < 2; ++half) {
    const int32_t oc = oc0 + 8 * half;
    e->estimate[half].scale = _mm256_loadu_ps(table + oc);
    e->estimate[half].offset_nonnegative = _mm256_loadu_ps(table + padded_c + oc);
    e->estimate[half].offset_negative = _mm256_loadu_ps(table + 2 * padded_c + oc);
  }
  e->multiplier = quant->multiplier + oc0;
  e->shift = quant->shift + oc0;
  e->zero_point = _mm256_set1_epi32(quant->output_zero_point);
  e->lo = _mm256_set1_epi8((char)quant->act_min);
  e->hi = _mm256_set1_epi8((char)quant->act_max);
  /* After the two packs, dwords 0-7 hold channels 0-3, 8-11 of pixel p, 0-3, 8-11 of pixel q,
   * then 4-7, 12-15 of p and of q. */
  e->order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  e->mode = mode;
}

/* The exact output stage of channels 8h .. 8h + 7 of the block, plus the zero point. */
B8_INLINE __m256i b8_block_exact(const b8_block_epilogue* e, __m256i acc, int h) {
  const __m256i right = _mm256_sub_epi32(_mm256_set1_epi32(31), _mm256_loadu_si256((const __m256i*)(e->shift + 8 * h)));
  return b8_requantize_output_x8(acc, _mm256_loadu_si256((const __m256i*)(e->multiplier + 8 * h)), right,
                                 e->zero_point);
}

/* Requantizes two pixels' 16 channels (p0, p1: pixel p's channels 0-7 and 8-15; q0, q1: q's),
 * adds the zero point and packs them into 32 int8: p's 16 channels, then q's, clamped. The float
 * estimate does it unless a lane is unsure; then the integer path redoes all four. The
 * saturating int32 -> int16 -> int8 packs are the clamp to [-128, 127]; act_min / act_max follow
 * on bytes. */
B8_INLINE __m256i b8_block_finish_as(const b8_block_epilogue* e, __m256i p0, __m256i p1, __m256i q0, __m256i q1,
                                     const int mode) {
  __m256i h0, h1, h2, h3;
  const __m256i y0 = b8_estimate_bounds_x8(p0, &e->estimate[0], &h0, mode);
  const __m256i y1 = b8_estimate_bounds_x8(p1, &e->estimate[1], &h1, mode);
  const __m256i y2 = b8_estimate_bounds_x8(q0, &e->estimate[0], &h2, mode);
  const __m256i y3 = b8_estimate_bounds_x8(q1, &e->estimate[1], &h3, mode);
  __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(y0, y1), _mm256_packs_epi32(y2, y3));
  /* The bounds compared as packed bytes, 4 instructions per 32 lanes instead of 8 (MobileNetV2's
   * 1x1 layers on 16-32 channels 1.03-1.06x faster on AMD Zen 4): the saturating packs merge
   * only values beyond [-128, 127], which clamp alike, and the exact result clamps as one of the
   * two bounds does, so where they pack to the same byte, it does too. */
  const __m256i differ =
      _mm256_xor_si256(bytes, _mm256_packs_epi16(_mm256_packs_epi32(h0, h1), _mm256_packs_epi32(h2, h3)));
  if (__builtin_expect(!_mm256_testz_si256(differ, differ), 0))
    bytes = _mm256_packs_epi16(_mm256_packs_epi32(b8_block_exact(e, p0, 0), b8_block_exact(e, p1, 1)),
                               _mm256_packs_epi32(b8_block_exact(e, q0, 0), b8_block_exact(e, q1, 1)));
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, e->order);
  return _mm256_min_epi8(_mm256_max_epi8(ordered, e->lo), e->hi);
}

/* b8_block_finish_as in the epilogue's mode (a branch that always goes the same way in a call). */
B8_INLINE __m256i b8_block_finish(const b8_block_epilogue* e, __m256i p0, __m256i p1, __m256i q0, __m256i q1) {
  switch (e->mode) {
    case B8_ESTIMATE_CLAMPED: return b8_block_finish_as(e, p0, p1, q0, q1, B8_ESTIMATE_CLAMPED);
    case B8_ESTIMATE_BOUNDED: return b8_block_finish_as(e, p0, p1, q0, q1, B8_ESTIMATE_BOUNDED);
    default: return b8_block_finish_as(e, p0, p1, q0, q1, B8_ESTIMATE_FULL);
  }
}

/* b8_block_finish for a block's first 8 channels only (a layer's last 8): p's 8 int8, then q's. */
B8_INLINE __m128i b8_block_finish_x8(const b8_block_epilogue* e, __m256i p, __m256i q) {
  __m256i unsure = _mm256_setzero_si256();
  __m256i y0 = b8_estimate_x8(p, &e->estimate[0], &unsure), y1 = b8_estimate_x8(q, &e->estimate[0], &unsure);
  if (__builtin_expect(!_mm256_testz_si256(unsure, unsure), 0)) {
    y0 = b8_block_exact(e, p, 0);
    y1 = b8_block_exact(e, q, 0);
  }
  /* After the packs, dwords 0 and 4 hold channels 0-3 and 4-7 of p, 1 and 5 those of q. */
  const __m256i words = _mm256_packs_epi32(y0, y1), bytes = _mm256_packs_epi16(words, words);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);
  const __m128i ordered = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(bytes, order));
  return _mm_min_epi8(_mm_max_epi8(ordered, _mm256_castsi256_si128(e->lo)), _mm256_castsi256_si128(e->hi));
}

/* The sum of 8 int32 lanes. */
B8_INLINE int32_t b8_sum_x8(__m256i v) {
  __m128i half = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0x4E));
  half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0xB1));
  return _mm_cvtsi128_si32(half);
}

/* 8 int8 values widened to int32 lanes. */
B8_INLINE __m256i b8_load_s8x8(const int8_t* in) {
  int64_t bytes;
  memcpy(&bytes, in, 8);
  return _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes));
}
typedef struct {
  __m256 scale1, scale2, offset, twice_margin;
} b8_add_estimate_x8_params;

B8_INLINE b8_add_estimate_x8_params b8_add_estimate_prepare_x8(const b8_add_estimate* e) {
  const b8_add_estimate_x8_params p = {_mm256_set1_ps(e->scale1), _mm256_set1_ps(e->scale2), _mm256_set1_ps(e->offset),
                                       _mm256_set1_ps(e->twice_margin)};
  return p;
}

/* The add's estimate on 8 lanes of codes; *unsure is set where a lane may be wrong. Round to
 * nearest comes from MXCSR (its default, which TVM and PyTorch keep). */
B8_INLINE __m256i b8_add_estimate_x8(__m256i input1, __m256i input2, const b8_add_estimate_x8_params* p, int* unsure) {
  const __m256 below = _mm256_fmadd_ps(_mm256_cvtepi32_ps(input1), p->scale1,
                                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(input2), p->scale2, p->offset));
  const __m256i low = _mm256_cvtps_epi32(below), high = _mm256_cvtps_epi32(_mm256_add_ps(below, p->twice_margin));
  *unsure |= !_mm256_testz_si256(_mm256_xor_si256(low, high), _mm256_xor_si256(low, high));
  return low;
}

/* b8_small_rescale on 8 lanes of differences. */
B8_INLINE __m256i b8_small_rescale_x8(__m256i d, const b8_small_rescale* r) {
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  const __m256i x = _mm256_abs_epi32(d);
#else
  const __m256i x = d;
#endif
  __m256i high = _mm256_add_epi32(_mm256_mullo_epi32(x, _mm256_set1_epi32(r->high)), _mm256_set1_epi32(r->round_high));
#if B8_ROUNDING == B8_ROUND_TFLITE
  high = _mm256_add_epi32(high, _mm256_and_si256(_mm256_srai_epi32(x, 31), _mm256_set1_epi32(r->negative)));
#endif
  const __m256i low = _mm256_sra_epi32(
      _mm256_add_epi32(_mm256_mullo_epi32(x, _mm256_set1_epi32(r->low)), _mm256_set1_epi32(r->round_low)),
      _mm_cvtsi32_si128(r->low_shift));
  const __m256i y = _mm256_sra_epi32(_mm256_add_epi32(high, low), _mm_cvtsi32_si128(r->shift));
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  return _mm256_sign_epi32(y, d);
#else
  return y;
#endif
}

#if B8_USE_AVX512
/* The low 32 bits of each 64-bit lane of `even` in the even int32 lanes and those of `odd` in the
 * odd ones: one vpshufd that swaps odd's halves, merged under a mask (a shift and a blend
 * otherwise). */
B8_INLINE __m512i b8_interleave_low_x16(__m512i even, __m512i odd) {
  return _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CDAB);
}

/* b8_requantize on 16 lanes, exact while shift <= 0 (the result then fits in int32), in each
 * rounding; AVX-512 has the 64-bit arithmetic shift that AVX2 lacks. `right` is 31 - shift. */
B8_INLINE __m512i b8_requantize_x16(__m512i acc, __m512i multiplier, __m512i right) {
  const __m512i one = _mm512_set1_epi64(1), low = _mm512_set1_epi64(0xFFFFFFFF);
  const __m512i right_even = _mm512_and_si512(right, low), right_odd = _mm512_srli_epi64(right, 32);
  const __m512i multiplier_odd = _mm512_srli_epi64(multiplier, 32);
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  const __m512i magnitude = _mm512_abs_epi32(acc);
  __m512i even = _mm512_mul_epu32(magnitude, multiplier);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(magnitude, 32), multiplier_odd);
  even = _mm512_srlv_epi64(_mm512_add_epi64(even, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_even, one))), right_even);
  odd = _mm512_srlv_epi64(_mm512_add_epi64(odd, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_odd, one))), right_odd);
  const __m512i result = b8_interleave_low_x16(even, odd);
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_mask_sub_epi32(result, _mm512_cmplt_epi32_mask(acc, zero), zero, result);
#else
  __m512i even = _mm512_mul_epi32(acc, multiplier);
  __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(acc, 32), multiplier_odd);
#if B8_ROUNDING == B8_ROUND_TFLITE
  (void)right_even, (void)right_odd, (void)one;
  const __m512i half = _mm512_set1_epi64((int64_t)1 << 30);
  even = _mm512_srai_epi64(_mm512_add_epi64(even, half), 31);
  odd = _mm512_srai_epi64(_mm512_add_epi64(odd, half), 31);
  const __m512i high = b8_interleave_low_x16(even, odd);
  const __m512i exponent = _mm512_sub_epi32(right, _mm512_set1_epi32(31));
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(_mm512_set1_epi32(1), exponent), _mm512_set1_epi32(1));
  const __m512i threshold = _mm512_sub_epi32(_mm512_srli_epi32(mask, 1), _mm512_srai_epi32(high, 31));
  const __mmask16 round_up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, mask), threshold);
  const __m512i shifted = _mm512_srav_epi32(high, exponent);
  return _mm512_mask_add_epi32(shifted, round_up, shifted, _mm512_set1_epi32(1));
#else
  even = _mm512_srav_epi64(
      _mm512_add_epi64(even, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_even, one))), right_even);
  odd = _mm512_srav_epi64(
      _mm512_add_epi64(odd, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_odd, one))), right_odd);
  return b8_interleave_low_x16(even, odd);
#endif
#endif
}

/* b8_requantize_output_x8 on 16 lanes. */
B8_INLINE __m512i b8_requantize_output_x16(__m512i acc, __m512i multiplier, __m512i right, __m512i zero_point) {
  const __m512i y = b8_requantize_x16(acc, multiplier, right);
  return _mm512_add_epi32(
      _mm512_min_epi32(_mm512_max_epi32(y, _mm512_set1_epi32(-(1 << 24))), _mm512_set1_epi32(1 << 24)), zero_point);
}

/* b8_estimate_x8's constants and estimate on 16 lanes. */
typedef struct {
  __m512 scale, offset_nonnegative, offset_negative;
} b8_estimate_x16_params;

/* The 16-lane constants: b8_estimate_prepare_x8 on each half (one definition of them). */
B8_INLINE void b8_estimate_prepare_x16(__m512i multiplier, __m512i shift, int32_t zero_point,
                                       b8_estimate_x16_params* p) {
  b8_estimate_x8_params low, high;
  b8_estimate_prepare_x8(_mm512_castsi512_si256(multiplier), _mm512_castsi512_si256(shift), zero_point, &low);
  b8_estimate_prepare_x8(_mm512_extracti64x4_epi64(multiplier, 1), _mm512_extracti64x4_epi64(shift, 1), zero_point,
                         &high);
#define B8_JOIN(a, b) \
  _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castps_si256(a)), _mm256_castps_si256(b), 1))
  p->scale = B8_JOIN(low.scale, high.scale);
  p->offset_nonnegative = B8_JOIN(low.offset_nonnegative, high.offset_nonnegative);
  p->offset_negative = B8_JOIN(low.offset_negative, high.offset_negative);
#undef B8_JOIN
}

/* The estimate on 16 lanes in `mode` (a constant: b8_estimate_bounds_x8's); lanes where it may be
 * wrong are set in *unsure. */
B8_INLINE __m512i b8_estimate_x16_as(__m512i acc, const b8_estimate_x16_params* p, __mmask16* unsure, const int mode) {
  const __m512 x = _mm512_cvt_roundepi32_ps(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 offset = mode == B8_ESTIMATE_CLAMPED
                            ? p->offset_nonnegative
                            : _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(acc, _mm512_setzero_si512()),
                                                   p->offset_nonnegative, p->offset_negative);
  __m512 below = _mm512_fmadd_round_ps(x, p->scale, offset, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  if (mode == B8_ESTIMATE_FULL) below = _mm512_min_ps(below, _mm512_set1_ps(B8_ESTIMATE_LIMIT));
  const __m512 above = _mm512_add_ps(below, _mm512_set1_ps(2 * B8_ESTIMATE_MARGIN));
  const __m512i low = _mm512_cvt_roundps_epi32(below, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i high = _mm512_cvt_roundps_epi32(above, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  *unsure = (__mmask16)(*unsure | _mm512_cmpneq_epi32_mask(low, high));
  return low;
}

B8_INLINE __m512i b8_estimate_x16(__m512i acc, const b8_estimate_x16_params* p, __mmask16* unsure) {
  return b8_estimate_x16_as(acc, p, unsure, B8_ESTIMATE_FULL);
}

/* The output stage of the AVX-512 VNNI build's tiles (conv2d_s8.c: blocks of 32 channels, or 16),
 * and of its Winograd path (blocks of 16), and of the AVX-512BW build's pairs of 16-channel blocks,
 * four vectors of 16 channels at a time, in registers.
 * b8_block32_epilogue is one block's requantization, its parameters loaded once for all the pixels
 * of a tile: the estimate's from the call's table (b8_estimate_table), the exact path's from
 * quant. */
typedef struct {
  b8_estimate_x16_params estimate[2]; /* channels 0-15 and 16-31 of the block */
  const int32_t *multiplier[2], *shift[2];
  __m512i zero_point, lo, hi, order;
} b8_block32_epilogue;

B8_INLINE void b8_block32_epilogue_load(const b8_requant_params* quant, const float* table, int32_t padded_c,
                                        int32_t oc0, int32_t channels, b8_block32_epilogue* e) {
  for (int32_t half = 0; half < 2; ++half) {
    const int32_t oc = oc0 + (half * 16 < channels ? half * 16 : 0); /* a narrow block repeats its 16 */
    e->estimate[half].scale = _mm512_loadu_ps(table + oc);
    e->estimate[half].offset_nonnegative = _mm512_loadu_ps(table + padded_c + oc);
    e->estimate[half].offset_negative = _mm512_loadu_ps(table + 2 * padded_c + oc);
    e->multiplier[half] = quant->multiplier + oc;
    e->shift[half] = quant->shift + oc;
  }
  e->zero_point = _mm512_set1_epi32(quant->output_zero_point);
  e->lo = _mm512_set1_epi8((char)quant->act_min);
  e->hi = _mm512_set1_epi8((char)quant->act_max);
  /* After two packs each 128-bit lane i holds dword i of four vectors (A B C D); this gathers
   * A's four dwords, then B's, C's and D's. */
  e->order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
}

/* The exact output stage of 16 accumulators of half h of the block, plus the zero point. */
B8_INLINE __m512i b8_block32_exact(const b8_block32_epilogue* e, __m512i acc, int h) {
  const __m512i right = _mm512_sub_epi32(_mm512_set1_epi32(31), _mm512_loadu_si512((const void*)e->shift[h]));
  return b8_requantize_output_x16(acc, _mm512_loadu_si512((const void*)e->multiplier[h]), right, e->zero_point);
}

/* Requantizes four vectors of accumulators (a, b, c, d: channels of `which` halves), adds the
 * zero point and packs them into 64 int8 in the order a, b, c, d, clamped. The float estimate
 * does it unless a lane is unsure; then the integer path redoes all four. The int32 -> int16 ->
 * int8 packs saturate, which is the clamp to [-128, 127]; act_min / act_max follow on bytes. */
B8_INLINE __m512i b8_block32_finish_as(const b8_block32_epilogue* e, __m512i a, int ha, __m512i b, int hb,
                                       __m512i c, int hc, __m512i d, int hd, const int mode) {
  __mmask16 unsure = 0;
  __m512i ya = b8_estimate_x16_as(a, &e->estimate[ha], &unsure, mode);
  __m512i yb = b8_estimate_x16_as(b, &e->estimate[hb], &unsure, mode);
  __m512i yc = b8_estimate_x16_as(c, &e->estimate[hc], &unsure, mode);
  __m512i yd = b8_estimate_x16_as(d, &e->estimate[hd], &unsure, mode);
  if (__builtin_expect(unsure != 0, 0)) {
    ya = b8_block32_exact(e, a, ha);
    yb = b8_block32_exact(e, b, hb);
    yc = b8_block32_exact(e, c, hc);
    yd = b8_block32_exact(e, d, hd);
  }
  const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(ya, yb), _mm512_packs_epi32(yc, yd));
  const __m512i ordered = _mm512_permutexvar_epi32(e->order, bytes);
  return _mm512_min_epi8(_mm512_max_epi8(ordered, e->lo), e->hi);
}

B8_INLINE __m512i b8_block32_finish(const b8_block32_epilogue* e, __m512i a, int ha, __m512i b, int hb,
                                    __m512i c, int hc, __m512i d, int hd) {
  return b8_block32_finish_as(e, a, ha, b, hb, c, hc, d, hd, B8_ESTIMATE_FULL);
}

/* b8_small_rescale on 16 lanes of differences. */
B8_INLINE __m512i b8_small_rescale_x16(__m512i d, const b8_small_rescale* r) {
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  const __m512i x = _mm512_abs_epi32(d);
#else
  const __m512i x = d;
#endif
  __m512i high = _mm512_add_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(r->high)), _mm512_set1_epi32(r->round_high));
#if B8_ROUNDING == B8_ROUND_TFLITE
  high = _mm512_add_epi32(high, _mm512_and_si512(_mm512_srai_epi32(x, 31), _mm512_set1_epi32(r->negative)));
#endif
  const __m512i low = _mm512_sra_epi32(
      _mm512_add_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(r->low)), _mm512_set1_epi32(r->round_low)),
      _mm_cvtsi32_si128(r->low_shift));
  const __m512i y = _mm512_sra_epi32(_mm512_add_epi32(high, low), _mm_cvtsi32_si128(r->shift));
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  return _mm512_mask_sub_epi32(y, _mm512_cmplt_epi32_mask(d, _mm512_setzero_si512()), _mm512_setzero_si512(), y);
#else
  return y;
#endif
}

typedef struct {
  __m512 scale1, scale2, offset, twice_margin;
} b8_add_estimate_x16_params;

B8_INLINE b8_add_estimate_x16_params b8_add_estimate_prepare_x16(const b8_add_estimate* e) {
  const b8_add_estimate_x16_params p = {_mm512_set1_ps(e->scale1), _mm512_set1_ps(e->scale2),
                                        _mm512_set1_ps(e->offset), _mm512_set1_ps(e->twice_margin)};
  return p;
}

/* b8_add_estimate_x8 on 16 lanes (the rounding stated in each step). */
B8_INLINE __m512i b8_add_estimate_x16(__m512i input1, __m512i input2, const b8_add_estimate_x16_params* p,
                                      __mmask16* unsure) {
  const int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 below = _mm512_fmadd_round_ps(
      _mm512_cvtepi32_ps(input1), p->scale1,
      _mm512_fmadd_round_ps(_mm512_cvtepi32_ps(input2), p->scale2, p->offset, nearest), nearest);
  const __m512i low = _mm512_cvt_roundps_epi32(below, nearest);
  const __m512i high = _mm512_cvt_roundps_epi32(_mm512_add_round_ps(below, p->twice_margin, nearest), nearest);
  *unsure = (__mmask16)(*unsure | _mm512_cmpneq_epi32_mask(low, high));
  return low;
}

/* 16 int8 values widened to int32 lanes. */
B8_INLINE __m512i b8_load_s8x16(const int8_t* in) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)in));
}

/* Clamps 16 int32 lanes and stores them as 16 int8. */
B8_INLINE void b8_store_s8x16(int8_t* out, __m512i v, __m512i lo, __m512i hi) {
  v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
  _mm_storeu_si128((__m128i*)out, _mm512_cvtepi32_epi8(v));
}
/* Clamps 16 int32 lanes and stores those in `mask` as int8 (the others are not written). */
B8_INLINE void b8_store_s8x16_masked(int8_t* out, __m512i v, __m512i lo, __m512i hi, __mmask16 mask) {
  v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
  _mm512_mask_cvtepi32_storeu_epi8(out, mask, v);
}
#endif /* B8_USE_AVX512 */
#endif /* B8_USE_AVX2 */

/* 3x3 stride-1 convolutions by Winograd's F(4x4, 3x3) or F(2x4, 3x3) (conv2d_winograd_s8.c):
 * the AVX2 and AVX-VNNI builds', and the AVX-512 VNNI build's on CPUs that multiply 512-bit
 * vectors at half the rate of 256-bit ones (b8_winograd_suits; not the AMX build, whose CPUs do
 * not). b8_conv2d_s8 takes it where b8_winograd_suits says so, in tiles of b8_winograd_rows rows,
 * and the packing, scratch and packed sizes follow. */
#define B8_WINOGRAD (B8_USE_AVX2 && !B8_USE_AMX)
#if B8_WINOGRAD
int b8_winograd_suits(const b8_conv_params* conv, const b8_dims* filter_dims);
int32_t b8_winograd_packed_size(const b8_dims* filter_dims);
void b8_winograd_pack_filter(const b8_dims* filter_dims, const int8_t* filter, int8_t* packed);
int32_t b8_winograd_scratch_size(const b8_dims* filter_dims);
int32_t b8_winograd_rows(const b8_dims* filter_dims);
b8_status b8_conv2d_s8_winograd(const b8_conv_params* conv, const b8_requant_params* quant,
                                const b8_dims* input_dims, const int8_t* input, const b8_dims* filter_dims,
                                const int8_t* packed, const int32_t* bias, const b8_dims* output_dims,
                                int8_t* output, const b8_pixels* pixels, int32_t oc_begin, int32_t oc_end,
                                int8_t* scratch);
#endif

#endif /* BYOC_INT8_INTERNAL_H_ */
