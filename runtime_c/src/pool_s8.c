/* Pooling, NHWC int8. */
#include "byoc_int8.h"
#include "internal.h"

B8_API b8_status b8_max_pool2d_s8(const b8_pool_params* pool, const b8_dims* input_dims,
                                  const int8_t* input, const b8_dims* output_dims,
                                  int8_t* output, const b8_pixels* pixels) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;
  if (output_dims->c != c || output_dims->n != input_dims->n || pool->stride_h < 1 ||
      pool->stride_w < 1 || pool->kernel_h < 1 || pool->kernel_w < 1 || pool->dilation_h < 1 ||
      pool->dilation_w < 1) {
    return B8_ERROR_ARGUMENT;
  }
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  const int64_t out_w = output_dims->w, out_plane = (int64_t)output_dims->h * out_w;
  for (int64_t index = begin; index < end; ++index) {
    const int8_t* image = input + index / out_plane * in_h * in_w * c;
    const int32_t oy = (int32_t)(index % out_plane / out_w), ox = (int32_t)(index % out_w);
    {
      {
        /* The maximum over the in-bounds taps only, from the lowest code (TFLite's rule): a
         * window entirely in the padding (possible with dilation) gives -128. */
        int8_t* out = output + index * c;
        for (int32_t ch = 0; ch < c; ++ch) out[ch] = INT8_MIN;
        for (int32_t ky = 0; ky < pool->kernel_h; ++ky) {
          const int32_t iy = oy * pool->stride_h - pool->pad_top + ky * pool->dilation_h;
          if (iy < 0 || iy >= in_h) continue;
          for (int32_t kx = 0; kx < pool->kernel_w; ++kx) {
            const int32_t ix = ox * pool->stride_w - pool->pad_left + kx * pool->dilation_w;
            if (ix < 0 || ix >= in_w) continue;
            const int8_t* pixel = image + ((int64_t)iy * in_w + ix) * c;
            for (int32_t ch = 0; ch < c; ++ch) out[ch] = pixel[ch] > out[ch] ? pixel[ch] : out[ch];
          }
        }
      }
    }
  }
  return B8_OK;
}

B8_API b8_status b8_avg_pool2d_s8(const b8_pool_params* pool, int32_t count_include_pad,
                                  int32_t pad_value, const b8_dims* input_dims, const int8_t* input,
                                  const b8_dims* output_dims, int8_t* output) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, c = input_dims->c;
  if (output_dims->c != c || output_dims->n != input_dims->n || pool->stride_h < 1 ||
      pool->stride_w < 1 || pool->kernel_h < 1 || pool->kernel_w < 1 || pool->dilation_h != 1 ||
      pool->dilation_w != 1 || (int64_t)pool->kernel_h * pool->kernel_w > (1 << 23)) {
    return B8_ERROR_ARGUMENT;
  }
  /* The padded extent: bottom / right padding mirror top / left, as in PyTorch. */
  const int32_t padded_h = in_h + 2 * pool->pad_top, padded_w = in_w + 2 * pool->pad_left;
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * in_h * in_w * c;
    for (int32_t oy = 0; oy < output_dims->h; ++oy) {
      const int32_t y0 = oy * pool->stride_h - pool->pad_top;
      const int32_t y1 = y0 + pool->kernel_h < padded_h - pool->pad_top ? y0 + pool->kernel_h
                                                                          : padded_h - pool->pad_top;
      const int32_t ys = y0 < 0 ? 0 : y0, ye = y1 < in_h ? y1 : in_h;
      for (int32_t ox = 0; ox < output_dims->w; ++ox) {
        const int32_t x0 = ox * pool->stride_w - pool->pad_left;
        const int32_t x1 = x0 + pool->kernel_w < padded_w - pool->pad_left
                               ? x0 + pool->kernel_w
                               : padded_w - pool->pad_left;
        const int32_t xs = x0 < 0 ? 0 : x0, xe = x1 < in_w ? x1 : in_w;
        const int32_t inside = (ye - ys) * (xe - xs);
        const int32_t count = count_include_pad ? (y1 - y0) * (x1 - x0) : inside;
        if (count < 1 || count > pool->kernel_h * pool->kernel_w) return B8_ERROR_ARGUMENT;
        int8_t* out = output + (((int64_t)n * output_dims->h + oy) * output_dims->w + ox) * c;
        for (int32_t ch = 0; ch < c; ++ch) {
          int32_t sum = (count - inside) * pad_value;
          for (int32_t y = ys; y < ye; ++y)
            for (int32_t x = xs; x < xe; ++x) sum += image[((int64_t)y * in_w + x) * c + ch];
          out[ch] = b8_clamp_s8(b8_rounding_divide(sum, count), -128, 127);
        }
      }
    }
  }
  return B8_OK;
}

B8_API b8_status b8_global_avg_pool_s8(int32_t multiplier, int32_t shift, int32_t input_zero_point,
                                       int32_t output_zero_point, const b8_dims* input_dims,
                                       const int8_t* input, int8_t* output) {
  const int32_t c = input_dims->c, plane = input_dims->h * input_dims->w;
  if (plane < 1 || plane > (1 << 23)) return B8_ERROR_ARGUMENT; /* the int32 sum must not wrap */
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * plane * c;
    for (int32_t ch = 0; ch < c; ++ch) {
      int32_t sum = -plane * input_zero_point;
      for (int32_t p = 0; p < plane; ++p) sum += image[(int64_t)p * c + ch];
      output[(int64_t)n * c + ch] =
          b8_clamp_s8(b8_rescale(sum, multiplier, shift) + output_zero_point, -128, 127);
    }
  }
  return B8_OK;
}
