/* Layout changes and the float <-> int8 conversions at region boundaries. */
#include <math.h>

#include "byoc_int8.h"

B8_API b8_status b8_nhwc_to_nchw_s8(const b8_dims* dims, const int8_t* input, int8_t* output) {
  const int32_t h = dims->h, w = dims->w, c = dims->c;
  for (int32_t n = 0; n < dims->n; ++n)
    for (int32_t y = 0; y < h; ++y)
      for (int32_t x = 0; x < w; ++x)
        for (int32_t ch = 0; ch < c; ++ch)
          output[(((int64_t)n * c + ch) * h + y) * w + x] =
              input[(((int64_t)n * h + y) * w + x) * c + ch];
  return B8_OK;
}

/* Index in NCHW order of the i-th value in NHWC order; identity when dims is NULL. */
static int64_t b8_nchw_index(const b8_dims* dims, int64_t i) {
  if (!dims) return i;
  const int64_t c = i % dims->c, x = (i / dims->c) % dims->w;
  const int64_t y = (i / ((int64_t)dims->c * dims->w)) % dims->h;
  const int64_t n = i / ((int64_t)dims->c * dims->w * dims->h);
  return ((n * dims->c + c) * dims->h + y) * dims->w + x;
}

B8_API b8_status b8_quantize_f32(float inv_scale, const b8_dims* dims, int32_t size,
                                 const float* input, int8_t* output) {
  for (int32_t i = 0; i < size; ++i) {
    const float x = input[b8_nchw_index(dims, i)];
    if (!(x - x == 0.0f)) return B8_ERROR_ARGUMENT; /* NaN or infinity */
    float v = x * inv_scale;
    v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
    output[i] = (int8_t)nearbyintf(v); /* round half to even, as numpy.rint */
  }
  return B8_OK;
}

B8_API b8_status b8_dequantize_f32(float scale, const b8_dims* dims, int32_t size,
                                   const int8_t* input, float* output) {
  for (int32_t i = 0; i < size; ++i) output[b8_nchw_index(dims, i)] = (float)input[i] * scale;
  return B8_OK;
}
