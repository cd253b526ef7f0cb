/* Layout changes and the float <-> int8 conversions at region boundaries. */
#include <math.h>

#include "byoc_int8.h"

B8_API b8_status b8_transpose_s8(int32_t rank, const int32_t* input_shape, const int32_t* perm,
                                 const int8_t* input, int8_t* output) {
  if (rank < 1 || rank > B8_MAX_RANK) return B8_ERROR_ARGUMENT;
  int64_t in_stride[B8_MAX_RANK], stride[B8_MAX_RANK], shape[B8_MAX_RANK], index[B8_MAX_RANK];
  int64_t size = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    in_stride[i] = size;
    size *= input_shape[i];
  }
  for (int32_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank) return B8_ERROR_ARGUMENT;
    shape[i] = input_shape[perm[i]]; /* output shape */
    stride[i] = in_stride[perm[i]];  /* input stride along output axis i */
    index[i] = 0;
  }
  int64_t offset = 0;
  for (int64_t o = 0; o < size; ++o) {
    output[o] = input[offset];
    /* Advance the output index like an odometer, keeping the input offset in step. */
    for (int32_t i = rank - 1; i >= 0; --i) {
      offset += stride[i];
      if (++index[i] < shape[i]) break;
      offset -= stride[i] * shape[i];
      index[i] = 0;
    }
  }
  return B8_OK;
}

B8_API b8_status b8_pad_s8(int32_t rank, const int32_t* input_shape, const int32_t* pads,
                           int8_t value, const int8_t* input, int8_t* output) {
  if (rank < 1 || rank > B8_MAX_RANK) return B8_ERROR_ARGUMENT;
  int64_t out_shape[B8_MAX_RANK], out_stride[B8_MAX_RANK], index[B8_MAX_RANK], size = 1, in_size = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    if (pads[2 * i] < 0 || pads[2 * i + 1] < 0) return B8_ERROR_ARGUMENT;
    out_shape[i] = input_shape[i] + pads[2 * i] + pads[2 * i + 1];
    out_stride[i] = size;
    size *= out_shape[i];
    in_size *= input_shape[i];
  }
  for (int64_t o = 0; o < size; ++o) output[o] = value;
  for (int32_t i = 0; i < rank; ++i) index[i] = 0;
  /* Walk the input in order; each value lands at its shifted position. */
  for (int64_t in = 0; in < in_size; ++in) {
    int64_t offset = 0;
    for (int32_t i = 0; i < rank; ++i) offset += (index[i] + pads[2 * i]) * out_stride[i];
    output[offset] = input[in];
    for (int32_t i = rank - 1; i >= 0; --i) {
      if (++index[i] < input_shape[i]) break;
      index[i] = 0;
    }
  }
  return B8_OK;
}

B8_API b8_status b8_concat_s8(int32_t num_inputs, const int8_t* const* inputs, const int32_t* inner,
                              const int32_t* multiplier, const int32_t* shift, int32_t outer,
                              int8_t* output) {
  for (int32_t r = 0; r < outer; ++r) {
    for (int32_t k = 0; k < num_inputs; ++k) {
      const int8_t* row = inputs[k] + (int64_t)r * inner[k];
      for (int32_t i = 0; i < inner[k]; ++i)
        *output++ = b8_clamp_s8(b8_requantize(row[i], multiplier[k], shift[k]), -128, 127);
    }
  }
  return B8_OK;
}

/* Visits a 4-D tensor in NHWC order (index i) alongside its NCHW index j; flat when dims is NULL. */
#define B8_FOR_NHWC_NCHW(dims, size, BODY)                                                  \
  do {                                                                                     \
    if (!(dims)) {                                                                         \
      for (int64_t i = 0, j = 0; i < (size); ++i, j = i) BODY                              \
    } else {                                                                               \
      const int64_t h_ = (dims)->h, w_ = (dims)->w, c_ = (dims)->c, plane_ = h_ * w_;      \
      int64_t i = 0;                                                                       \
      for (int64_t n_ = 0; n_ < (dims)->n; ++n_)                                           \
        for (int64_t y_ = 0; y_ < h_; ++y_)                                                \
          for (int64_t x_ = 0; x_ < w_; ++x_)                                              \
            for (int64_t ch_ = 0; ch_ < c_; ++ch_, ++i) {                                  \
              const int64_t j = (n_ * c_ + ch_) * plane_ + y_ * w_ + x_;                   \
              BODY                                                                         \
            }                                                                              \
    }                                                                                      \
  } while (0)

B8_API b8_status b8_quantize_f32(float inv_scale, const b8_dims* dims, int32_t size,
                                 const float* input, int8_t* output) {
  int bad = 0;
  B8_FOR_NHWC_NCHW(dims, size, {
    const float x = input[j];
    bad |= !(x - x == 0.0f); /* NaN or infinity */
    float v = x * inv_scale;
    v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
    output[i] = (int8_t)nearbyintf(v); /* round half to even, as numpy.rint */
  });
  return bad ? B8_ERROR_ARGUMENT : B8_OK;
}

B8_API b8_status b8_dequantize_f32(float scale, const b8_dims* dims, int32_t size,
                                   const int8_t* input, float* output) {
  B8_FOR_NHWC_NCHW(dims, size, { output[j] = (float)input[i] * scale; });
  return B8_OK;
}
