/* Elementwise kernels: add with rescaling of both inputs, table lookups of one value or a pair,
 * product, clip. */
#include "byoc_int8.h"
#include "internal.h"

#if B8_USE_AVX2
/* 8 sums exactly: the inputs' rescales (in 32-bit arithmetic where `small`), then the output's. */
B8_INLINE void b8_add_exact_x8(const b8_add_params* p, int small, const b8_small_rescale* s1,
                               const b8_small_rescale* s2, const int8_t* input1, const int8_t* input2,
                               int8_t* output) {
  const __m256i d1 = _mm256_sub_epi32(b8_load_s8x8(input1), _mm256_set1_epi32(p->input1_zero_point));
  const __m256i d2 = _mm256_sub_epi32(b8_load_s8x8(input2), _mm256_set1_epi32(p->input2_zero_point));
  __m256i sum;
  if (small) {
    sum = _mm256_add_epi32(b8_small_rescale_x8(d1, s1), b8_small_rescale_x8(d2, s2));
  } else {
    const __m128i left = _mm_cvtsi32_si128(p->left_shift);
    sum = _mm256_add_epi32(b8_requantize_x8(_mm256_sll_epi32(d1, left), _mm256_set1_epi32(p->input1_multiplier),
                                            _mm256_set1_epi32(31 - p->input1_shift)),
                           b8_requantize_x8(_mm256_sll_epi32(d2, left), _mm256_set1_epi32(p->input2_multiplier),
                                            _mm256_set1_epi32(31 - p->input2_shift)));
  }
  const __m256i scaled = b8_requantize_x8(sum, _mm256_set1_epi32(p->output_multiplier),
                                          _mm256_set1_epi32(31 - p->output_shift));
  b8_store_s8x8(output, _mm256_add_epi32(scaled, _mm256_set1_epi32(p->output_zero_point)),
                _mm256_set1_epi32(p->act_min), _mm256_set1_epi32(p->act_max));
}

#if B8_USE_AVX512
/* b8_add_exact_x8 on 16 lanes. */
B8_INLINE void b8_add_exact_x16(const b8_add_params* p, int small, const b8_small_rescale* s1,
                                const b8_small_rescale* s2, const int8_t* input1, const int8_t* input2,
                                int8_t* output) {
  const __m512i d1 = _mm512_sub_epi32(b8_load_s8x16(input1), _mm512_set1_epi32(p->input1_zero_point));
  const __m512i d2 = _mm512_sub_epi32(b8_load_s8x16(input2), _mm512_set1_epi32(p->input2_zero_point));
  __m512i sum;
  if (small) {
    sum = _mm512_add_epi32(b8_small_rescale_x16(d1, s1), b8_small_rescale_x16(d2, s2));
  } else {
    const __m128i left = _mm_cvtsi32_si128(p->left_shift);
    sum = _mm512_add_epi32(b8_requantize_x16(_mm512_sll_epi32(d1, left), _mm512_set1_epi32(p->input1_multiplier),
                                             _mm512_set1_epi32(31 - p->input1_shift)),
                           b8_requantize_x16(_mm512_sll_epi32(d2, left), _mm512_set1_epi32(p->input2_multiplier),
                                             _mm512_set1_epi32(31 - p->input2_shift)));
  }
  const __m512i scaled = b8_requantize_x16(sum, _mm512_set1_epi32(p->output_multiplier),
                                           _mm512_set1_epi32(31 - p->output_shift));
  b8_store_s8x16(output, _mm512_add_epi32(scaled, _mm512_set1_epi32(p->output_zero_point)),
                 _mm512_set1_epi32(p->act_min), _mm512_set1_epi32(p->act_max));
}
#endif
#endif

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
  /* Vectors while every factor is below 1 (shifts <= 0), which b8_requantize_x8 needs; TFLite's
   * scheme gives that for any scales. The tail and other cases go one by one. */
  if (vec.input1_shift <= 0 && vec.input2_shift <= 0 && vec.output_shift <= 0) {
    b8_small_rescale s1, s2;
    const int small = b8_small_rescale_prepare(vec.input1_multiplier, vec.input1_shift, vec.left_shift, &s1) &&
                      b8_small_rescale_prepare(vec.input2_multiplier, vec.input2_shift, vec.left_shift, &s2);
    b8_add_estimate estimate;
    if (b8_add_estimate_prepare(&vec, &estimate)) { /* the float path, with the exact one where unsure */
#if B8_USE_AVX512
      const b8_add_estimate_x16_params e16 = b8_add_estimate_prepare_x16(&estimate);
      const __m512i lo = _mm512_set1_epi32(vec.act_min), hi = _mm512_set1_epi32(vec.act_max);
      /* Four vectors per iteration: one test of their estimates, then the saturating packs (the
       * clamp to int8) and one byte clamp to [act_min, act_max] for all 64 sums (a 56x56x256
       * add on one Zen 4 core: 1.2-1.3x). */
      const __m512i lo_x64 = _mm512_set1_epi8((char)vec.act_min), hi_x64 = _mm512_set1_epi8((char)vec.act_max);
      const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
      for (; i + 64 <= size; i += 64) {
        __mmask16 unsure = 0;
        __m512i y[4];
        for (int32_t j = 0; j < 4; ++j)
          y[j] = b8_add_estimate_x16(b8_load_s8x16(input1 + i + 16 * j), b8_load_s8x16(input2 + i + 16 * j), &e16,
                                     &unsure);
        if (unsure) {
          for (int32_t j = 0; j < 64; j += 16)
            b8_add_exact_x16(&vec, small, &s1, &s2, input1 + i + j, input2 + i + j, output + i + j);
          continue;
        }
        /* after the two packs, 128-bit lane l holds dword l of each of the four: `order` gathers them */
        const __m512i bytes = _mm512_permutexvar_epi32(
            order, _mm512_packs_epi16(_mm512_packs_epi32(y[0], y[1]), _mm512_packs_epi32(y[2], y[3])));
        _mm512_storeu_si512((void*)(output + i), _mm512_min_epi8(_mm512_max_epi8(bytes, lo_x64), hi_x64));
      }
      for (; i + 16 <= size; i += 16) {
        __mmask16 unsure = 0;
        const __m512i sum = b8_add_estimate_x16(b8_load_s8x16(input1 + i), b8_load_s8x16(input2 + i), &e16, &unsure);
        if (unsure)
          b8_add_exact_x16(&vec, small, &s1, &s2, input1 + i, input2 + i, output + i);
        else
          b8_store_s8x16(output + i, sum, lo, hi);
      }
#endif
      const b8_add_estimate_x8_params e8 = b8_add_estimate_prepare_x8(&estimate);
      const __m256i lo_x8 = _mm256_set1_epi32(vec.act_min), hi_x8 = _mm256_set1_epi32(vec.act_max);
#if !B8_USE_AVX512
      /* As above, four vectors (32 sums) per iteration (the 56x56x256 add: 1.3x). */
      const __m256i lo_x32 = _mm256_set1_epi8((char)vec.act_min), hi_x32 = _mm256_set1_epi8((char)vec.act_max);
      const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
      for (; i + 32 <= size; i += 32) {
        int unsure = 0;
        __m256i y[4];
        for (int32_t j = 0; j < 4; ++j)
          y[j] = b8_add_estimate_x8(b8_load_s8x8(input1 + i + 8 * j), b8_load_s8x8(input2 + i + 8 * j), &e8, &unsure);
        if (unsure) {
          for (int32_t j = 0; j < 32; j += 8)
            b8_add_exact_x8(&vec, small, &s1, &s2, input1 + i + j, input2 + i + j, output + i + j);
          continue;
        }
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(y[0], y[1]), _mm256_packs_epi32(y[2], y[3])), order);
        _mm256_storeu_si256((__m256i*)(output + i), _mm256_min_epi8(_mm256_max_epi8(bytes, lo_x32), hi_x32));
      }
#endif
      for (; i + 8 <= size; i += 8) {
        int unsure = 0;
        const __m256i sum = b8_add_estimate_x8(b8_load_s8x8(input1 + i), b8_load_s8x8(input2 + i), &e8, &unsure);
        if (unsure)
          b8_add_exact_x8(&vec, small, &s1, &s2, input1 + i, input2 + i, output + i);
        else
          b8_store_s8x8(output + i, sum, lo_x8, hi_x8);
      }
    }
#if B8_USE_AVX512
    for (; i + 16 <= size; i += 16) b8_add_exact_x16(&vec, small, &s1, &s2, input1 + i, input2 + i, output + i);
#endif
    for (; i + 8 <= size; i += 8) b8_add_exact_x8(&vec, small, &s1, &s2, input1 + i, input2 + i, output + i);
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
