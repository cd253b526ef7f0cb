/* Elementwise kernels: add with rescaling of both inputs, clip. */
#include "byoc_int8.h"

B8_API b8_status b8_add_s8(const b8_add_params* params, int32_t size, const int8_t* input1,
                           const int8_t* input2, int8_t* output) {
  if (params->left_shift < 0 || params->left_shift > 22) return B8_ERROR_ARGUMENT;
  for (int32_t i = 0; i < size; ++i) {
    /* |x| <= 128 << 22 = 2^29 and each rescale multiplies by at most 1/2 (see qarith), so
     * the two terms and their sum fit in int32. */
    const int32_t a = (int32_t)b8_requantize((int32_t)input1[i] * (1 << params->left_shift),
                                             params->input1_multiplier, params->input1_shift);
    const int32_t b = (int32_t)b8_requantize((int32_t)input2[i] * (1 << params->left_shift),
                                             params->input2_multiplier, params->input2_shift);
    output[i] = b8_clamp_s8(b8_requantize(a + b, params->output_multiplier, params->output_shift),
                            params->act_min, params->act_max);
  }
  return B8_OK;
}

B8_API b8_status b8_clip_s8(int32_t size, int32_t act_min, int32_t act_max, const int8_t* input,
                            int8_t* output) {
  if (act_min > act_max) return B8_ERROR_ARGUMENT;
  for (int32_t i = 0; i < size; ++i) output[i] = b8_clamp_s8(input[i], act_min, act_max);
  return B8_OK;
}
