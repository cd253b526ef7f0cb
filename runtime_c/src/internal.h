/* Helpers shared by the kernels (private to runtime_c: not part of the kernel interface). */
#ifndef BYOC_INT8_INTERNAL_H_
#define BYOC_INT8_INTERNAL_H_

#include <string.h>

#include "byoc_int8.h"

/* The output pixels a call computes (a thread's share, or all of them). */
B8_INLINE void b8_pixel_range(const b8_pixels* pixels, const b8_dims* output_dims, int64_t* begin,
                              int64_t* end) {
  const int64_t total = (int64_t)output_dims->n * output_dims->h * output_dims->w;
  *begin = pixels ? (pixels->begin < 0 ? 0 : pixels->begin) : 0;
  *end = pixels ? (pixels->end > total ? total : pixels->end) : total;
}

#if B8_USE_AVX2
#include <immintrin.h>

/* b8_requantize on 8 lanes (bias added first), exact while shift <= 0: the 64-bit product plus
 * rounding is offset by 2^62 to make it non-negative, shifted logically (AVX2 has no 64-bit
 * arithmetic shift), and the offset, a multiple of 2^right, is taken off again. The result then
 * fits in int32 (|acc * multiplier| < 2^62 and right >= 31). */
B8_INLINE __m256i b8_requantize_x8(__m256i acc, __m256i multiplier, __m256i right) {
  const __m256i offset = _mm256_set1_epi64x((int64_t)1 << 62), one = _mm256_set1_epi64x(1);
  const __m256i low = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i right_even = _mm256_and_si256(right, low), right_odd = _mm256_srli_epi64(right, 32);
  __m256i even = _mm256_mul_epi32(acc, multiplier);
  __m256i odd = _mm256_mul_epi32(_mm256_srli_epi64(acc, 32), _mm256_srli_epi64(multiplier, 32));
  even = _mm256_add_epi64(_mm256_add_epi64(even, offset),
                          _mm256_sllv_epi64(one, _mm256_sub_epi64(right_even, one)));
  odd = _mm256_add_epi64(_mm256_add_epi64(odd, offset),
                         _mm256_sllv_epi64(one, _mm256_sub_epi64(right_odd, one)));
  even = _mm256_sub_epi64(_mm256_srlv_epi64(even, right_even),
                          _mm256_srlv_epi64(offset, right_even));
  odd = _mm256_sub_epi64(_mm256_srlv_epi64(odd, right_odd), _mm256_srlv_epi64(offset, right_odd));
  return _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
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

/* 8 int8 values widened to int32 lanes. */
B8_INLINE __m256i b8_load_s8x8(const int8_t* in) {
  int64_t bytes;
  memcpy(&bytes, in, 8);
  return _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes));
}
#if B8_USE_AVX512VNNI
/* b8_requantize on 16 lanes, exact while shift <= 0 (the result then fits in int32); AVX-512
 * has the 64-bit arithmetic shift that AVX2 lacks. */
B8_INLINE __m512i b8_requantize_x16(__m512i acc, __m512i multiplier, __m512i right) {
  const __m512i one = _mm512_set1_epi64(1), low = _mm512_set1_epi64(0xFFFFFFFF);
  const __m512i right_even = _mm512_and_si512(right, low), right_odd = _mm512_srli_epi64(right, 32);
  __m512i even = _mm512_mul_epi32(acc, multiplier);
  __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(acc, 32), _mm512_srli_epi64(multiplier, 32));
  even = _mm512_srav_epi64(
      _mm512_add_epi64(even, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_even, one))), right_even);
  odd = _mm512_srav_epi64(
      _mm512_add_epi64(odd, _mm512_sllv_epi64(one, _mm512_sub_epi64(right_odd, one))), right_odd);
  return _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
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
#endif /* B8_USE_AVX512VNNI */
#endif /* B8_USE_AVX2 */

#endif /* BYOC_INT8_INTERNAL_H_ */
