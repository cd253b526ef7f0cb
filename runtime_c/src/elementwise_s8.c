/* Elementwise kernels: add with rescaling of both inputs, table lookups of one value or a pair,
 * product, clip. */
#include "byoc_int8.h"
#include "internal.h"

B8_API b8_status b8_add_s8(const b8_add_params* params, int32_t size, const int8_t* input1,
                           const int8_t* input2, int8_t* output) {
  if (params->left_shift < 0 || params->left_shift > 22 || params->input1_zero_point < -128 ||
      params->input1_zero_point > 127 || params->input2_zero_point < -128 || params->input2_zero_point > 127) {
    return B8_ERROR_ARGUMENT;
  }
  int32_t i = 0;
#if B8_USE_AVX2
  /* Power-of-two factors (B8_SHIFT_ONLY) run here in their multiplier form, the same function. */
  b8_add_params vec = *params;
  b8_multiplier_form(&vec.input1_multiplier, &vec.input1_shift);
  b8_multiplier_form(&vec.input2_multiplier, &vec.input2_shift);
  b8_multiplier_form(&vec.output_multiplier, &vec.output_shift);
  /* Eight at a time while every factor is below 1 (shifts <= 0), which b8_requantize_x8 needs;
   * TFLite's scheme gives that for any scales. The tail and other cases go one by one. */
  if (vec.input1_shift <= 0 && vec.input2_shift <= 0 && vec.output_shift <= 0) {
    const __m256i m1 = _mm256_set1_epi32(vec.input1_multiplier);
    const __m256i m2 = _mm256_set1_epi32(vec.input2_multiplier);
    const __m256i mo = _mm256_set1_epi32(vec.output_multiplier);
    const __m256i r1 = _mm256_set1_epi32(31 - vec.input1_shift);
    const __m256i r2 = _mm256_set1_epi32(31 - vec.input2_shift);
    const __m256i ro = _mm256_set1_epi32(31 - vec.output_shift);
    const __m256i lo = _mm256_set1_epi32(vec.act_min), hi = _mm256_set1_epi32(vec.act_max);
    const __m128i left = _mm_cvtsi32_si128(vec.left_shift);
    const __m256i z1 = _mm256_set1_epi32(vec.input1_zero_point);
    const __m256i z2 = _mm256_set1_epi32(vec.input2_zero_point);
    const __m256i zo = _mm256_set1_epi32(vec.output_zero_point);
    b8_small_rescale s1, s2;
    const int small = b8_small_rescale_prepare(vec.input1_multiplier, vec.input1_shift, vec.left_shift, &s1) &&
                      b8_small_rescale_prepare(vec.input2_multiplier, vec.input2_shift, vec.left_shift, &s2);
#if B8_USE_AVX512VNNI
    const __m512i m1x = _mm512_set1_epi32(vec.input1_multiplier);
    const __m512i m2x = _mm512_set1_epi32(vec.input2_multiplier);
    const __m512i mox = _mm512_set1_epi32(vec.output_multiplier);
    const __m512i r1x = _mm512_set1_epi32(31 - vec.input1_shift);
    const __m512i r2x = _mm512_set1_epi32(31 - vec.input2_shift);
    const __m512i rox = _mm512_set1_epi32(31 - vec.output_shift);
    const __m512i lox = _mm512_set1_epi32(vec.act_min), hix = _mm512_set1_epi32(vec.act_max);
    const __m512i z1x = _mm512_set1_epi32(vec.input1_zero_point);
    const __m512i z2x = _mm512_set1_epi32(vec.input2_zero_point);
    const __m512i zox = _mm512_set1_epi32(vec.output_zero_point);
    if (small) /* the inputs' rescales in 32-bit arithmetic (most adds: TFLite's left shift is 20) */
      for (; i + 16 <= size; i += 16) {
        const __m512i sum = _mm512_add_epi32(b8_small_rescale_x16(_mm512_sub_epi32(b8_load_s8x16(input1 + i), z1x), &s1),
                                             b8_small_rescale_x16(_mm512_sub_epi32(b8_load_s8x16(input2 + i), z2x), &s2));
        b8_store_s8x16(output + i, _mm512_add_epi32(b8_requantize_x16(sum, mox, rox), zox), lox, hix);
      }
    for (; i + 16 <= size; i += 16) {
      const __m512i x1 = _mm512_sll_epi32(_mm512_sub_epi32(b8_load_s8x16(input1 + i), z1x), left);
      const __m512i x2 = _mm512_sll_epi32(_mm512_sub_epi32(b8_load_s8x16(input2 + i), z2x), left);
      const __m512i sum = _mm512_add_epi32(b8_requantize_x16(x1, m1x, r1x), b8_requantize_x16(x2, m2x, r2x));
      b8_store_s8x16(output + i, _mm512_add_epi32(b8_requantize_x16(sum, mox, rox), zox), lox, hix);
    }
#endif
    if (small)
      for (; i + 8 <= size; i += 8) {
        const __m256i sum = _mm256_add_epi32(b8_small_rescale_x8(_mm256_sub_epi32(b8_load_s8x8(input1 + i), z1), &s1),
                                             b8_small_rescale_x8(_mm256_sub_epi32(b8_load_s8x8(input2 + i), z2), &s2));
        b8_store_s8x8(output + i, _mm256_add_epi32(b8_requantize_x8(sum, mo, ro), zo), lo, hi);
      }
    for (; i + 8 <= size; i += 8) {
      const __m256i x1 = _mm256_sll_epi32(_mm256_sub_epi32(b8_load_s8x8(input1 + i), z1), left);
      const __m256i x2 = _mm256_sll_epi32(_mm256_sub_epi32(b8_load_s8x8(input2 + i), z2), left);
      const __m256i sum = _mm256_add_epi32(b8_requantize_x8(x1, m1, r1), b8_requantize_x8(x2, m2, r2));
      b8_store_s8x8(output + i, _mm256_add_epi32(b8_requantize_x8(sum, mo, ro), zo), lo, hi);
    }
  }
#endif
  for (; i < size; ++i) {
    /* |x - zero_point| <= 255 << 22 < 2^30 and each rescale multiplies by at most 1/2 (see
     * qarith), so the two terms and their sum fit in int32. */
    const int32_t a = (int32_t)b8_rescale((input1[i] - params->input1_zero_point) * (1 << params->left_shift),
                                          params->input1_multiplier, params->input1_shift);
    const int32_t b = (int32_t)b8_rescale((input2[i] - params->input2_zero_point) * (1 << params->left_shift),
                                          params->input2_multiplier, params->input2_shift);
    output[i] = b8_clamp_s8(
        b8_rescale(a + b, params->output_multiplier, params->output_shift) + params->output_zero_point,
        params->act_min, params->act_max);
  }
  return B8_OK;
}

B8_API b8_status b8_pair_lut_s8(int32_t size, const int8_t* table, const int8_t* input1,
                                const int8_t* input2, int8_t* output) {
  if (size < 0) return B8_ERROR_ARGUMENT;
  int32_t i = 0;
#if B8_USE_AVX2
  /* A gather fetches one lookup per lane: the 4 bytes at the entry's address, of which the low
   * byte is the entry. 8 lanes in the AVX-512 build too: 16-lane gathers were slower (AMD Zen 4). */
  const __m256i origin = _mm256_set1_epi32(128 * 256 + 128);
  const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                             0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (; i + 8 <= size; i += 8) {
    const __m256i row = _mm256_slli_epi32(b8_load_s8x8(input1 + i), 8);
    const __m256i index = _mm256_add_epi32(_mm256_add_epi32(row, b8_load_s8x8(input2 + i)), origin);
    const __m256i entries = _mm256_shuffle_epi8(_mm256_i32gather_epi32((const int*)table, index, 1), low_bytes);
    const int32_t first = _mm256_extract_epi32(entries, 0), second = _mm256_extract_epi32(entries, 4);
    memcpy(output + i, &first, 4);
    memcpy(output + i + 4, &second, 4);
  }
#endif
  for (; i < size; ++i) output[i] = table[(input1[i] + 128) * 256 + input2[i] + 128];
  return B8_OK;
}

B8_API b8_status b8_clip_s8(int32_t size, int32_t act_min, int32_t act_max, const int8_t* input,
                            int8_t* output) {
  if (act_min > act_max) return B8_ERROR_ARGUMENT;
  for (int32_t i = 0; i < size; ++i) output[i] = b8_clamp_s8(input[i], act_min, act_max);
  return B8_OK;
}

B8_API b8_status b8_lut_s8(int32_t size, const int8_t* table, const int8_t* input, int8_t* output) {
  if (size < 0) return B8_ERROR_ARGUMENT;
  for (int32_t i = 0; i < size; ++i) output[i] = table[(int32_t)input[i] + 128];
  return B8_OK;
}

B8_API b8_status b8_mul_s8(const b8_mul_params* params, int32_t batches, int32_t pixels,
                           int32_t channels, int32_t broadcast, const int8_t* input1,
                           const int8_t* input2, int8_t* output) {
  if (batches < 0 || pixels < 0 || channels < 0 || params->act_min > params->act_max) return B8_ERROR_ARGUMENT;
  for (int32_t n = 0; n < batches; ++n) {
    for (int32_t p = 0; p < pixels; ++p) {
      const int64_t at = ((int64_t)n * pixels + p) * channels;
      const int8_t* gate = input2 + (broadcast ? (int64_t)n * channels : at);
      for (int32_t c = 0; c < channels; ++c) {
        /* |product| <= 255 * 255: no overflow. */
        const int32_t product = (input1[at + c] - params->input1_zero_point) * (gate[c] - params->input2_zero_point);
        output[at + c] = b8_clamp_s8(
            b8_rescale(product, params->multiplier, params->shift) + params->output_zero_point,
            params->act_min, params->act_max);
      }
    }
  }
  return B8_OK;
}
