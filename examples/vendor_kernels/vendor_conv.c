/*
 * A second implementation of part of byoc_int8.h: the convolutions, written from the header's
 * contract alone, that also count what each call costs (multiply-accumulates and bytes moved)
 * and print a per-layer cost table. With the other kernels of runtime_c/src it forms a complete
 * kernel library that a model compiled with kernels="external" links (see README.md here and
 * docs/vendor.md). Results are bit-exact with the built-in kernels: same accumulation, same
 * b8_requantize, same clamp.
 */
#include <stdio.h>

#include "byoc_int8.h"

enum { VENDOR_MAX_CALLS = 4096 };

typedef struct {
  int32_t out_h, out_w, out_c, kernel_h, kernel_w, depth;
  int64_t macs, bytes;
} vendor_call;

static vendor_call calls[VENDOR_MAX_CALLS];
static int32_t num_calls;

static void vendor_count(const b8_dims* in, const b8_dims* filter, const b8_dims* out, int32_t depth, int64_t pixels) {
  vendor_call* call;
  if (num_calls >= VENDOR_MAX_CALLS) return;
  call = &calls[num_calls++];
  call->out_h = out->h;
  call->out_w = out->w;
  call->out_c = out->c;
  call->kernel_h = filter->h;
  call->kernel_w = filter->w;
  call->depth = depth;
  call->macs = pixels * out->c * filter->h * filter->w * depth;
  /* Bytes a DMA engine moves: the input once, the filter once, the output once. */
  call->bytes = (int64_t)in->n * in->h * in->w * in->c + (int64_t)filter->n * filter->h * filter->w * filter->c +
                pixels * out->c;
}

/* How many convolutions ran, and each one's cost (for a host that reads the counters). */
int32_t vendor_num_calls(void) { return num_calls; }
int64_t vendor_call_macs(int32_t i) { return i >= 0 && i < num_calls ? calls[i].macs : -1; }
void vendor_reset(void) { num_calls = 0; }

void vendor_report(void) {
  int32_t i;
  int64_t macs = 0, bytes = 0;
  printf("%5s %14s %9s %8s %12s %12s\n", "call", "output", "kernel", "depth", "MACs", "bytes");
  for (i = 0; i < num_calls; ++i) {
    const vendor_call* c = &calls[i];
    printf("%5d %4dx%4dx%4d %4dx%4d %8d %12lld %12lld\n", (int)i, (int)c->out_h, (int)c->out_w, (int)c->out_c,
           (int)c->kernel_h, (int)c->kernel_w, (int)c->depth, (long long)c->macs, (long long)c->bytes);
    macs += c->macs;
    bytes += c->bytes;
  }
  printf("total: %lld MACs, %lld bytes\n", (long long)macs, (long long)bytes);
}

/* Filters are used as the header gives them (OHWI): no packing, no scratch. */
int32_t b8_conv2d_s8_packed_size(const b8_conv_params* conv, const b8_dims* filter_dims) {
  (void)conv;
  return filter_dims->n * filter_dims->h * filter_dims->w * filter_dims->c;
}

void b8_conv2d_s8_pack_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                              int8_t* packed) {
  int32_t i, size = b8_conv2d_s8_packed_size(conv, filter_dims);
  for (i = 0; i < size; ++i) packed[i] = filter[i];
}

int32_t b8_conv2d_s8_row_block(const b8_conv_params* conv, const b8_dims* filter_dims) {
  (void)conv;
  (void)filter_dims;
  return 1;
}

/* Any share of channels: the loop below computes one channel at a time. */
int32_t b8_conv2d_s8_channel_block(const b8_conv_params* conv, const b8_dims* filter_dims) {
  (void)conv;
  (void)filter_dims;
  return 1;
}

int32_t b8_conv2d_s8_scratch_size(const b8_conv_params* conv, const b8_dims* filter_dims) {
  (void)conv;
  (void)filter_dims;
  return 1;
}

static void pixel_range(const b8_pixels* pixels, const b8_dims* out, int64_t* begin, int64_t* end) {
  *begin = pixels ? pixels->begin : 0;
  *end = pixels ? pixels->end : (int64_t)out->n * out->h * out->w;
}

static int8_t output_code(int32_t acc, const b8_requant_params* quant, int32_t channel) {
  /* No multiplier (power-of-two scales): a rounding shift by the channel's exponent. */
  const int64_t scaled = quant->multiplier ? b8_requantize(acc, quant->multiplier[channel], quant->shift[channel])
                                           : b8_requantize_pow2(acc, quant->shift[channel]);
  return b8_clamp_s8(scaled + quant->output_zero_point, quant->act_min, quant->act_max);
}

b8_status b8_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant, const b8_dims* input_dims,
                       const int8_t* input, int32_t input_nonnegative, const b8_dims* filter_dims,
                       const int8_t* filter, const int32_t* bias, const b8_dims* output_dims, int8_t* output,
                       const b8_pixels* pixels, int8_t* scratch) {
  return b8_conv2d_s8_channels(conv, quant, input_dims, input, input_nonnegative, filter_dims, filter, bias,
                               output_dims, output, pixels, NULL, scratch);
}

b8_status b8_conv2d_s8_channels(const b8_conv_params* conv, const b8_requant_params* quant,
                                const b8_dims* input_dims, const int8_t* input, int32_t input_nonnegative,
                                const b8_dims* filter_dims, const int8_t* filter, const int32_t* bias,
                                const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                                const b8_channels* channels, int8_t* scratch) {
  const b8_dims* in = input_dims;
  const b8_dims* out = output_dims;
  const int32_t groups = conv->groups, depth = filter_dims->c;
  const int32_t oc_begin = channels ? channels->begin : 0, oc_end = channels ? channels->end : out->c;
  int64_t begin, end, pixel;
  (void)input_nonnegative;
  (void)scratch;
  if (groups < 1 || in->c != depth * groups || out->c != filter_dims->n || out->c % groups) return B8_ERROR_ARGUMENT;
  if (oc_begin < 0 || oc_end > out->c || oc_begin > oc_end) return B8_ERROR_ARGUMENT;
  pixel_range(pixels, out, &begin, &end);
  /* once per convolution: by the share holding its first pixel and first channel */
  if (begin == 0 && oc_begin == 0) vendor_count(in, filter_dims, out, depth, (int64_t)out->n * out->h * out->w);
  for (pixel = begin; pixel < end; ++pixel) {
    const int32_t n = (int32_t)(pixel / ((int64_t)out->h * out->w));
    const int32_t oy = (int32_t)(pixel / out->w % out->h), ox = (int32_t)(pixel % out->w);
    int32_t oc;
    for (oc = oc_begin; oc < oc_end; ++oc) {
      const int32_t group = oc / (out->c / groups);
      int32_t acc = bias ? bias[oc] : 0, ky, kx, k;
      for (ky = 0; ky < filter_dims->h; ++ky) {
        const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
        for (kx = 0; kx < filter_dims->w; ++kx) {
          const int32_t ix = ox * conv->stride_w - conv->pad_left + kx * conv->dilation_w;
          const int inside = iy >= 0 && iy < in->h && ix >= 0 && ix < in->w;
          const int8_t* x = input + (((int64_t)n * in->h + iy) * in->w + ix) * in->c + group * depth;
          const int8_t* w = filter + (((int64_t)oc * filter_dims->h + ky) * filter_dims->w + kx) * depth;
          for (k = 0; k < depth; ++k) acc += (inside ? x[k] : conv->pad_value) * w[k];
        }
      }
      output[pixel * out->c + oc] = output_code(acc, quant, oc);
    }
  }
  return B8_OK;
}

b8_status b8_depthwise_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                                 const b8_dims* input_dims, const int8_t* input, const b8_dims* filter_dims,
                                 const int8_t* filter, const int32_t* bias, const b8_dims* output_dims,
                                 int8_t* output, const b8_pixels* pixels) {
  const b8_dims* in = input_dims;
  const b8_dims* out = output_dims;
  int64_t begin, end, pixel;
  if (in->c < 1 || out->c % in->c || filter_dims->c != out->c) return B8_ERROR_ARGUMENT;
  pixel_range(pixels, out, &begin, &end);
  if (begin == 0) vendor_count(in, filter_dims, out, 1, (int64_t)out->n * out->h * out->w);
  for (pixel = begin; pixel < end; ++pixel) {
    const int32_t n = (int32_t)(pixel / ((int64_t)out->h * out->w));
    const int32_t oy = (int32_t)(pixel / out->w % out->h), ox = (int32_t)(pixel % out->w);
    int32_t oc;
    for (oc = 0; oc < out->c; ++oc) {
      int32_t acc = bias ? bias[oc] : 0, ky, kx;
      for (ky = 0; ky < filter_dims->h; ++ky) {
        const int32_t iy = oy * conv->stride_h - conv->pad_top + ky * conv->dilation_h;
        for (kx = 0; kx < filter_dims->w; ++kx) {
          const int32_t ix = ox * conv->stride_w - conv->pad_left + kx * conv->dilation_w;
          const int32_t x = iy < 0 || iy >= in->h || ix < 0 || ix >= in->w
                                ? conv->pad_value
                                : input[(((int64_t)n * in->h + iy) * in->w + ix) * in->c + oc / (out->c / in->c)];
          acc += x * filter[((int64_t)ky * filter_dims->w + kx) * out->c + oc];
        }
      }
      output[pixel * out->c + oc] = output_code(acc, quant, oc);
    }
  }
  return B8_OK;
}
