/* 2-D convolution, NHWC int8 activations, OHWI int8 filters, int32 accumulation. */
#include "byoc_int8.h"

B8_API int32_t b8_conv2d_s8_scratch_size(const b8_dims* filter_dims) {
  return filter_dims->h * filter_dims->w * filter_dims->c;
}

/* Dot product of two int8 rows; written as a plain loop so the compiler vectorizes it. */
static int32_t b8_dot_s8(const int8_t* a, const int8_t* b, int32_t length) {
  int32_t acc = 0;
  for (int32_t i = 0; i < length; ++i) acc += (int32_t)a[i] * (int32_t)b[i];
  return acc;
}

B8_API b8_status b8_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                              const b8_dims* input_dims, const int8_t* input,
                              const b8_dims* filter_dims, const int8_t* filter,
                              const int32_t* bias, const b8_dims* output_dims, int8_t* output,
                              int8_t* scratch) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, in_c = input_dims->c;
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  const int32_t k_h = filter_dims->h, k_w = filter_dims->w, groups = conv->groups;
  if (groups < 1 || in_c % groups || out_c % groups || filter_dims->c * groups != in_c ||
      filter_dims->n != out_c || output_dims->n != input_dims->n || conv->stride_h < 1 ||
      conv->stride_w < 1 || conv->dilation_h < 1 || conv->dilation_w < 1) {
    return B8_ERROR_ARGUMENT;
  }
  const int32_t group_in = filter_dims->c, group_out = out_c / groups;
  const int32_t patch = k_h * k_w * group_in;
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * in_h * in_w * in_c;
    for (int32_t oy = 0; oy < out_h; ++oy) {
      for (int32_t ox = 0; ox < out_w; ++ox) {
        int8_t* out = output + (((int64_t)n * out_h + oy) * out_w + ox) * out_c;
        for (int32_t g = 0; g < groups; ++g) {
          /* Gather the group's receptive field into one contiguous row. Zero points are 0, so
           * padding contributes exact zeros and the dot product needs no bounds checks. */
          int8_t* row = scratch;
          for (int32_t ky = 0; ky < k_h; ++ky) {
            const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
            for (int32_t kx = 0; kx < k_w; ++kx, row += group_in) {
              const int32_t ix = ox * conv->stride_w - conv->pad_left + kx * conv->dilation_w;
              if (iy < 0 || iy >= in_h || ix < 0 || ix >= in_w) {
                for (int32_t c = 0; c < group_in; ++c) row[c] = 0;
              } else {
                const int8_t* pixel = image + ((int64_t)iy * in_w + ix) * in_c + g * group_in;
                for (int32_t c = 0; c < group_in; ++c) row[c] = pixel[c];
              }
            }
          }
          for (int32_t oc = g * group_out; oc < (g + 1) * group_out; ++oc) {
            int32_t acc = b8_dot_s8(scratch, filter + (int64_t)oc * patch, patch);
            if (bias) acc += bias[oc];
            out[oc] = b8_clamp_s8(b8_requantize(acc, quant->multiplier[oc], quant->shift[oc]),
                                  quant->act_min, quant->act_max);
          }
        }
      }
    }
  }
  return B8_OK;
}

B8_API b8_status b8_depthwise_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                                        const b8_dims* input_dims, const int8_t* input,
                                        const b8_dims* filter_dims, const int8_t* filter,
                                        const int32_t* bias, const b8_dims* output_dims,
                                        int8_t* output) {
  const int32_t in_h = input_dims->h, in_w = input_dims->w, in_c = input_dims->c;
  const int32_t out_h = output_dims->h, out_w = output_dims->w, out_c = output_dims->c;
  if (in_c < 1 || out_c % in_c || filter_dims->c != out_c || filter_dims->n != 1 ||
      output_dims->n != input_dims->n || conv->stride_h < 1 || conv->stride_w < 1 ||
      conv->dilation_h < 1 || conv->dilation_w < 1) {
    return B8_ERROR_ARGUMENT;
  }
  const int32_t multiplier = out_c / in_c;
  for (int32_t n = 0; n < input_dims->n; ++n) {
    const int8_t* image = input + (int64_t)n * in_h * in_w * in_c;
    for (int32_t oy = 0; oy < out_h; ++oy) {
      for (int32_t ox = 0; ox < out_w; ++ox) {
        int8_t* out = output + (((int64_t)n * out_h + oy) * out_w + ox) * out_c;
        for (int32_t oc = 0; oc < out_c; ++oc) {
          int32_t acc = bias ? bias[oc] : 0;
          for (int32_t ky = 0; ky < filter_dims->h; ++ky) {
            const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
            if (iy < 0 || iy >= in_h) continue;
            for (int32_t kx = 0; kx < filter_dims->w; ++kx) {
              const int32_t ix = ox * conv->stride_w - conv->pad_left + kx * conv->dilation_w;
              if (ix < 0 || ix >= in_w) continue;
              acc += (int32_t)image[((int64_t)iy * in_w + ix) * in_c + oc / multiplier] *
                     (int32_t)filter[((int64_t)ky * filter_dims->w + kx) * out_c + oc];
            }
          }
          out[oc] = b8_clamp_s8(b8_requantize(acc, quant->multiplier[oc], quant->shift[oc]),
                                quant->act_min, quant->act_max);
        }
      }
    }
  }
  return B8_OK;
}
