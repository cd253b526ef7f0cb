/* Pooling, NHWC int8. */
#include "byoc_int8.h"
#include "internal.h"

#if B8_USE_AVX2
/* The SIMD maxima of one window, 64 (AVX-512) / 32 (AVX2) channels at a time: over its in-bounds
 * taps, from the lowest code. AVX-512 masks the last block; AVX2 leaves the last c % 32 channels
 * to the caller's loop, and returns the channels done. */
static int32_t b8_max_window(const b8_pool_params* pool, const int8_t* image, int32_t in_h, int32_t in_w, int32_t c,
                             int32_t y0, int32_t x0, int8_t* out) {
  int32_t ch = 0;
#if B8_USE_AVX512
  for (; ch < c; ch += 64) {
    const __mmask64 mask = c - ch >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (c - ch)) - 1);
    __m512i best = _mm512_set1_epi8(INT8_MIN);
#else
  for (; ch + 32 <= c; ch += 32) {
    __m256i best = _mm256_set1_epi8(INT8_MIN);
#endif
    for (int32_t ky = 0; ky < pool->kernel_h; ++ky) {
      const int32_t iy = y0 + ky * pool->dilation_h;
      if (iy < 0 || iy >= in_h) continue;
      for (int32_t kx = 0; kx < pool->kernel_w; ++kx) {
        const int32_t ix = x0 + kx * pool->dilation_w;
        if (ix < 0 || ix >= in_w) continue;
        const int8_t* pixel = image + ((int64_t)iy * in_w + ix) * c + ch;
#if B8_USE_AVX512
        best = _mm512_max_epi8(best, _mm512_maskz_loadu_epi8(mask, pixel));
#else
        best = _mm256_max_epi8(best, _mm256_loadu_si256((const __m256i*)pixel));
#endif
      }
    }
#if B8_USE_AVX512
    _mm512_mask_storeu_epi8(out + ch, mask, best);
#else
    _mm256_storeu_si256((__m256i*)(out + ch), best);
#endif
  }
  return ch;
}

/* b8_max_window for a window inside the input: its `count` taps at first + taps[t], no test per
 * tap (ResNet-18's 3x3 pool 1.5x faster with AVX-512, 1.6x with AVX2). */
static int32_t b8_max_inside(const int8_t* first, const int64_t* taps, int32_t count, int32_t c, int8_t* out) {
  int32_t ch = 0;
#if B8_USE_AVX512
  for (; ch < c; ch += 64) {
    const __mmask64 mask = c - ch >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (c - ch)) - 1);
    __m512i best = _mm512_maskz_loadu_epi8(mask, first + ch);
    for (int32_t t = 1; t < count; ++t)
      best = _mm512_max_epi8(best, _mm512_maskz_loadu_epi8(mask, first + taps[t] + ch));
    _mm512_mask_storeu_epi8(out + ch, mask, best);
  }
#else
  for (; ch + 32 <= c; ch += 32) {
    __m256i best = _mm256_loadu_si256((const __m256i*)(first + ch));
    for (int32_t t = 1; t < count; ++t)
      best = _mm256_max_epi8(best, _mm256_loadu_si256((const __m256i*)(first + taps[t] + ch)));
    _mm256_storeu_si256((__m256i*)(out + ch), best);
  }
#endif
  return ch;
}
#endif

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
  if (begin >= end) return B8_OK;
  const int32_t out_w = output_dims->w, out_h = output_dims->h;
  const int64_t image_size = (int64_t)in_h * in_w * c;
#if B8_USE_AVX2
  /* The taps' offsets from a window's first, for the windows inside the input (kernels of up to
   * 64 taps; larger ones take b8_max_window everywhere). */
  enum { B8_POOL_TAPS = 64 };
  int64_t taps[B8_POOL_TAPS];
  const int32_t tap_count = pool->kernel_h * pool->kernel_w <= B8_POOL_TAPS ? pool->kernel_h * pool->kernel_w : 0;
  for (int32_t t = 0; t < tap_count; ++t)
    taps[t] = ((int64_t)(t / pool->kernel_w) * pool->dilation_h * in_w + t % pool->kernel_w * pool->dilation_w) * c;
  const int32_t last_y = (pool->kernel_h - 1) * pool->dilation_h, last_x = (pool->kernel_w - 1) * pool->dilation_w;
#endif
  /* The pixel's coordinates are stepped along, not divided out per pixel (ResNet-18's max pool,
   * one Zen 4 core: 1.06x with AVX-512, 1.15x with AVX2). */
  int32_t ox = (int32_t)(begin % out_w), oy = (int32_t)(begin / out_w % out_h);
  const int8_t* image = input + begin / out_w / out_h * image_size;
  for (int64_t index = begin; index < end; ++index) {
    const int32_t y0 = oy * pool->stride_h - pool->pad_top, x0 = ox * pool->stride_w - pool->pad_left;
    /* The maximum over the in-bounds taps only, from the lowest code (TFLite's rule): a window
     * entirely in the padding (possible with dilation) gives -128. */
    int8_t* out = output + index * c;
    int32_t ch = 0;
#if B8_USE_AVX2
    if (tap_count && y0 >= 0 && y0 + last_y < in_h && x0 >= 0 && x0 + last_x < in_w)
      ch = b8_max_inside(image + ((int64_t)y0 * in_w + x0) * c, taps, tap_count, c, out);
    else
      ch = b8_max_window(pool, image, in_h, in_w, c, y0, x0, out);
#endif
    for (int32_t k = ch; k < c; ++k) out[k] = INT8_MIN;
    for (int32_t ky = 0; ky < pool->kernel_h && ch < c; ++ky) {
      const int32_t iy = y0 + ky * pool->dilation_h;
      if (iy < 0 || iy >= in_h) continue;
      for (int32_t kx = 0; kx < pool->kernel_w; ++kx) {
        const int32_t ix = x0 + kx * pool->dilation_w;
        if (ix < 0 || ix >= in_w) continue;
        const int8_t* pixel = image + ((int64_t)iy * in_w + ix) * c;
        for (int32_t k = ch; k < c; ++k) out[k] = pixel[k] > out[k] ? pixel[k] : out[k];
      }
    }
    if (++ox == out_w) {
      ox = 0;
      if (++oy == out_h) {
        oy = 0;
        image += image_size;
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
    int32_t ch = 0;
#if B8_USE_AVX2
    /* 32 channels at a time: their sums in int32 lanes, reading every pixel's channels in
     * order (the scalar loop strides by c); then the per-channel output stage. */
    for (; ch + 32 <= c; ch += 32) {
      int32_t sums[32];
#if B8_USE_AVX512
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int32_t p = 0; p < plane; ++p) {
        const int8_t* pixel = image + (int64_t)p * c + ch;
        s0 = _mm512_add_epi32(s0, b8_load_s8x16(pixel));
        s1 = _mm512_add_epi32(s1, b8_load_s8x16(pixel + 16));
      }
      _mm512_storeu_si512((void*)sums, s0);
      _mm512_storeu_si512((void*)(sums + 16), s1);
#else
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
      for (int32_t p = 0; p < plane; ++p) {
        const int8_t* pixel = image + (int64_t)p * c + ch;
        s0 = _mm256_add_epi32(s0, b8_load_s8x8(pixel));
        s1 = _mm256_add_epi32(s1, b8_load_s8x8(pixel + 8));
        s2 = _mm256_add_epi32(s2, b8_load_s8x8(pixel + 16));
        s3 = _mm256_add_epi32(s3, b8_load_s8x8(pixel + 24));
      }
      _mm256_storeu_si256((__m256i*)sums, s0);
      _mm256_storeu_si256((__m256i*)(sums + 8), s1);
      _mm256_storeu_si256((__m256i*)(sums + 16), s2);
      _mm256_storeu_si256((__m256i*)(sums + 24), s3);
#endif
      for (int32_t k = 0; k < 32; ++k)
        output[(int64_t)n * c + ch + k] = b8_clamp_s8(
            b8_rescale(sums[k] - plane * input_zero_point, multiplier, shift) + output_zero_point, -128, 127);
    }
#endif
    for (; ch < c; ++ch) {
      int32_t sum = -plane * input_zero_point;
      for (int32_t p = 0; p < plane; ++p) sum += image[(int64_t)p * c + ch];
      output[(int64_t)n * c + ch] =
          b8_clamp_s8(b8_rescale(sum, multiplier, shift) + output_zero_point, -128, 127);
    }
  }
  return B8_OK;
}
