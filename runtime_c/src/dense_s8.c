/* Fully connected layer: the fixed-point output stage, and TFLite's reference double-precision
 * one (for bit-exactness with imported .tflite models). */
#include "byoc_int8.h"
#include "internal.h"

static int32_t b8_dense_accumulator(const int8_t* row, const int8_t* w, int32_t depth, const int32_t* bias,
                                    int32_t unit) {
  int32_t acc = bias ? bias[unit] : 0;
  int32_t k = 0;
#if B8_USE_AVX2
  /* Both operands sign-extended to int16 and multiplied in pairs (vpmaddwd; VNNI's vpdpwssd also
   * adds): exact, and the int32 sum is the scalar loop's in another order. */
#if B8_USE_AVX512VNNI
  __m512i sum = _mm512_setzero_si512();
  for (; k + 32 <= depth; k += 32) {
    const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(row + k)));
    const __m512i y = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(w + k)));
    sum = _mm512_dpwssd_epi32(sum, x, y);
  }
  acc += _mm512_reduce_add_epi32(sum);
#endif
  __m256i sum8 = _mm256_setzero_si256();
  for (; k + 16 <= depth; k += 16) {
    const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + k)));
    const __m256i y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(w + k)));
    sum8 = _mm256_add_epi32(sum8, _mm256_madd_epi16(x, y));
  }
  acc += b8_sum_x8(sum8);
#endif
  for (; k < depth; ++k) acc += (int32_t)row[k] * (int32_t)w[k];
  return acc;
}

B8_API b8_status b8_dense_s8(const b8_requant_params* quant, int32_t batches, int32_t depth,
                             int32_t units, const int8_t* input, const int8_t* weights,
                             const int32_t* bias, int8_t* output) {
  if (batches < 0 || depth < 1 || units < 1) return B8_ERROR_ARGUMENT;
  for (int32_t b = 0; b < batches; ++b) {
    for (int32_t u = 0; u < units; ++u) {
      const int32_t acc = b8_dense_accumulator(input + (int64_t)b * depth, weights + (int64_t)u * depth, depth, bias, u);
      output[(int64_t)b * units + u] = b8_output_s8(acc, quant, u);
    }
  }
  return B8_OK;
}

B8_API b8_status b8_dense_s8_double_requant(const b8_double_requant_params* quant, int32_t batches,
                                            int32_t depth, int32_t units, const int8_t* input,
                                            const int8_t* weights, const int32_t* bias, int8_t* output) {
  if (batches < 0 || depth < 1 || units < 1) return B8_ERROR_ARGUMENT;
  for (int32_t u = 0; u < units; ++u)
    if (quant->mantissa[u] < ((int64_t)1 << 52) || quant->mantissa[u] >= ((int64_t)1 << 53)) return B8_ERROR_ARGUMENT;
  for (int32_t b = 0; b < batches; ++b) {
    for (int32_t u = 0; u < units; ++u) {
      const int32_t acc = b8_dense_accumulator(input + (int64_t)b * depth, weights + (int64_t)u * depth, depth, bias, u);
      output[(int64_t)b * units + u] = b8_clamp_s8(
          b8_requantize_f64(acc, quant->mantissa[u], quant->exponent[u]) + quant->output_zero_point,
          quant->act_min, quant->act_max);
    }
  }
  return B8_OK;
}
