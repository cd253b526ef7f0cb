/* Pooling, NHWC int8. */
#include "byoc_int8.h"

B8_API b8_status b8_max_pool2d_s8(const b8_pool_params* pool, const b8_dims* input_dims,
                                  const int8_t* input, const b8_dims* output_dims,
                                  int8_t* output) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;
  if (output_dims->c != c || output_dims->n != input_dims->n || pool->stride_h < 1 ||
      pool->stride_w < 1 || pool->kernel_h < 1 || pool->kernel_w < 1) {
    return B8_ERROR_ARGUMENT;
  }
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * in_h * in_w * c;
    for (int32_t oy = 0; oy < output_dims->h; ++oy) {
      for (int32_t ox = 0; ox < output_dims->w; ++ox) {
        int8_t* out = output + (((int64_t)n * output_dims->h + oy) * output_dims->w + ox) * c;
        for (int32_t ch = 0; ch < c; ++ch) out[ch] = INT8_MIN;
        int32_t seen = 0;
        for (int32_t ky = 0; ky < pool->kernel_h; ++ky) {
          const int32_t iy = oy * pool->stride_h - pool->pad_top + ky * pool->dilation_h;
          if (iy < 0 || iy >= in_h) continue;
          for (int32_t kx = 0; kx < pool->kernel_w; ++kx) {
            const int32_t ix = ox * pool->stride_w - pool->pad_left + kx * pool->dilation_w;
            if (ix < 0 || ix >= in_w) continue;
            const int8_t* pixel = image + ((int64_t)iy * in_w + ix) * c;
            for (int32_t ch = 0; ch < c; ++ch) out[ch] = pixel[ch] > out[ch] ? pixel[ch] : out[ch];
            seen = 1;
          }
        }
        if (!seen) return B8_ERROR_ARGUMENT; /* a window entirely in the padding */
      }
    }
  }
  return B8_OK;
}

B8_API b8_status b8_global_avg_pool_s8(int32_t multiplier, int32_t shift,
                                       const b8_dims* input_dims, const int8_t* input,
                                       int8_t* output) {
  const int32_t c = input_dims->c, plane = input_dims->h * input_dims->w;
  if (plane < 1 || plane > (1 << 23)) return B8_ERROR_ARGUMENT; /* the int32 sum must not wrap */
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * plane * c;
    for (int32_t ch = 0; ch < c; ++ch) {
      int32_t sum = 0;
      for (int32_t p = 0; p < plane; ++p) sum += image[(int64_t)p * c + ch];
      output[(int64_t)n * c + ch] = b8_clamp_s8(b8_requantize(sum, multiplier, shift), -128, 127);
    }
  }
  return B8_OK;
}
