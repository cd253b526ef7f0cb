/* Fully connected layer: the fixed-point output stage, and TFLite's reference double-precision
 * one (for bit-exactness with imported .tflite models). */
#include "byoc_int8.h"
#include "internal.h"

/* The accumulators are computed a block at a time: B8_DENSE_IMAGES images x B8_DENSE_UNITS units,
 * each image's bytes and each unit's weights loaded once per step for the whole block. Blocks run
 * unit-block by unit-block over every image, so that a block's weights (4 x depth bytes) stay in
 * L1 across the batch: as a GEMV per image, MobileNetV2's 1280 x 1000 weights came from L2 or
 * memory once per image (at batch 8, 2.7x ONNX Runtime's time per image). */
enum { B8_DENSE_IMAGES = 2, B8_DENSE_UNITS = 4 };

/* acc[i][j] = bias[unit j] + image i . unit j's weights, for `images` images (rows `depth` bytes
 * apart from `input`; a constant where this is inlined) and 4 units from `weights` (those past
 * `units` repeat the last one, so that the loops have fixed bounds; their sums are not used).
 * Both operands are sign-extended to int16 and multiplied in pairs (vpmaddwd, on 512-bit vectors
 * in the AVX-512 builds; AVX-512 VNNI's vpdpwssd also adds): exact, and the int32 sums are the
 * scalar loop's in another order.
 * With `ahead` (4 x depth bytes of weights, SIMD builds), its lines are fetched into L1 at the pace
 * the block reads its own: a unit block of one image reads as much as it multiplies, and the
 * stream of rows, left to the hardware, came at 7.5 GB/s (MobileNetV2's 1280 x 1000 on one Zen 4
 * core: 0.171 ms; 0.058 with the fetch of the block two on). */
B8_INLINE void b8_dense_block(const int8_t* input, int32_t images, const int8_t* weights, int32_t units, int32_t depth,
                              const int32_t* bias, const int8_t* ahead, int32_t acc[B8_DENSE_IMAGES][B8_DENSE_UNITS]) {
  const int8_t *x[B8_DENSE_IMAGES], *w[B8_DENSE_UNITS];
  for (int32_t i = 0; i < images; ++i) x[i] = input + (int64_t)i * depth;
  for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) w[j] = weights + (int64_t)(j < units ? j : units - 1) * depth;
  for (int32_t i = 0; i < images; ++i)
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) acc[i][j] = bias ? bias[j < units ? j : units - 1] : 0;
  int32_t k = 0;
#if !B8_USE_AVX2
  (void)ahead;
#endif
#if B8_USE_AVX512
  __m512i wide[B8_DENSE_IMAGES][B8_DENSE_UNITS];
  for (int32_t i = 0; i < images; ++i)
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) wide[i][j] = _mm512_setzero_si512();
  for (; k + 32 <= depth; k += 32) {
    if (ahead) {
      _mm_prefetch((const char*)(ahead + 4 * k), _MM_HINT_T0);
      _mm_prefetch((const char*)(ahead + 4 * k + 64), _MM_HINT_T0);
    }
    __m512i xv[B8_DENSE_IMAGES];
    for (int32_t i = 0; i < images; ++i)
      xv[i] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(x[i] + k)));
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) {
      const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(w[j] + k)));
      for (int32_t i = 0; i < images; ++i)
#if B8_USE_AVX512VNNI
        wide[i][j] = _mm512_dpwssd_epi32(wide[i][j], xv[i], wv);
#else
        wide[i][j] = _mm512_add_epi32(wide[i][j], _mm512_madd_epi16(xv[i], wv));
#endif
    }
  }
  for (int32_t i = 0; i < images; ++i)
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) acc[i][j] += _mm512_reduce_add_epi32(wide[i][j]);
#endif
#if B8_USE_AVX2
  __m256i sum[B8_DENSE_IMAGES][B8_DENSE_UNITS];
  for (int32_t i = 0; i < images; ++i)
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) sum[i][j] = _mm256_setzero_si256();
  for (; k + 16 <= depth; k += 16) {
    if (ahead) _mm_prefetch((const char*)(ahead + 4 * k), _MM_HINT_T0);
    __m256i xv[B8_DENSE_IMAGES];
    for (int32_t i = 0; i < images; ++i)
      xv[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(x[i] + k)));
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) {
      const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(w[j] + k)));
      for (int32_t i = 0; i < images; ++i) sum[i][j] = _mm256_add_epi32(sum[i][j], _mm256_madd_epi16(xv[i], wv));
    }
  }
  for (int32_t i = 0; i < images; ++i)
    for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) acc[i][j] += b8_sum_x8(sum[i][j]);
#endif
  for (; k < depth; ++k)
    for (int32_t i = 0; i < images; ++i)
      for (int32_t j = 0; j < B8_DENSE_UNITS; ++j) acc[i][j] += (int32_t)x[i][k] * (int32_t)w[j][k];
}

/* Every block of a dense layer, unit blocks outer; `finish` writes the block's outputs. The first
 * image block of each unit block fetches the unit block two on, where there is a whole one. */
#define B8_DENSE_BLOCKS(finish)                                                                         \
  for (int32_t u0 = 0; u0 < units; u0 += B8_DENSE_UNITS) {                                                \
    const int32_t block_units = units - u0 < B8_DENSE_UNITS ? units - u0 : B8_DENSE_UNITS;               \
    const int8_t* ahead =                                                                                \
        u0 + 3 * B8_DENSE_UNITS <= units ? weights + (int64_t)(u0 + 2 * B8_DENSE_UNITS) * depth : NULL;    \
    for (int32_t b0 = 0; b0 < batches; b0 += B8_DENSE_IMAGES) {                                         \
      const int32_t block_images = batches - b0 < B8_DENSE_IMAGES ? batches - b0 : B8_DENSE_IMAGES;      \
      int32_t acc[B8_DENSE_IMAGES][B8_DENSE_UNITS];                                                      \
      const int8_t *x = input + (int64_t)b0 * depth, *w = weights + (int64_t)u0 * depth;                 \
      const int8_t* fetch = b0 == 0 ? ahead : NULL;                                                      \
      if (block_images == B8_DENSE_IMAGES)                                                               \
        b8_dense_block(x, B8_DENSE_IMAGES, w, block_units, depth, bias ? bias + u0 : NULL, fetch, acc);  \
      else                                                                                               \
        b8_dense_block(x, 1, w, block_units, depth, bias ? bias + u0 : NULL, fetch, acc);                \
      for (int32_t i = 0; i < block_images; ++i)                                                         \
        for (int32_t j = 0; j < block_units; ++j) {                                                      \
          const int32_t b = b0 + i, u = u0 + j;                                                          \
          output[(int64_t)b * units + u] = (finish);                                                     \
        }                                                                                                \
    }                                                                                                    \
  }

B8_API b8_status b8_dense_s8(const b8_requant_params* quant, int32_t batches, int32_t depth,
                             int32_t units, const int8_t* input, const int8_t* weights,
                             const int32_t* bias, int8_t* output) {
  if (batches < 0 || depth < 1 || units < 1) return B8_ERROR_ARGUMENT;
  B8_DENSE_BLOCKS(b8_output_s8(acc[i][j], quant, u));
  return B8_OK;
}

B8_API b8_status b8_dense_s8_double_requant(const b8_double_requant_params* quant, int32_t batches,
                                            int32_t depth, int32_t units, const int8_t* input,
                                            const int8_t* weights, const int32_t* bias, int8_t* output) {
  if (batches < 0 || depth < 1 || units < 1) return B8_ERROR_ARGUMENT;
  for (int32_t u = 0; u < units; ++u)
    if (quant->mantissa[u] < ((int64_t)1 << 52) || quant->mantissa[u] >= ((int64_t)1 << 53)) return B8_ERROR_ARGUMENT;
  B8_DENSE_BLOCKS(b8_clamp_s8(b8_requantize_f64(acc[i][j], quant->mantissa[u], quant->exponent[u]) +
                                  quant->output_zero_point,
                              quant->act_min, quant->act_max));
  return B8_OK;
}
