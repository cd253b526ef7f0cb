/* Fully connected layer. */
#include "byoc_int8.h"

B8_API b8_status b8_dense_s8(const b8_requant_params* quant, int32_t batches, int32_t depth,
                             int32_t units, const int8_t* input, const int8_t* weights,
                             const int32_t* bias, int8_t* output) {
  if (batches < 0 || depth < 1 || units < 1) return B8_ERROR_ARGUMENT;
  for (int32_t b = 0; b < batches; ++b) {
    const int8_t* row = input + (int64_t)b * depth;
    for (int32_t u = 0; u < units; ++u) {
      const int8_t* w = weights + (int64_t)u * depth;
      int32_t acc = bias ? bias[u] : 0;
      for (int32_t k = 0; k < depth; ++k) acc += (int32_t)row[k] * (int32_t)w[k];
      output[(int64_t)b * units + u] = b8_clamp_s8(
          b8_requantize(acc, quant->multiplier[u], quant->shift[u]), quant->act_min, quant->act_max);
    }
  }
  return B8_OK;
}
