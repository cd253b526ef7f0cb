/* Layout changes and the float <-> int8 conversions at region boundaries. */
#include <float.h>
#include <math.h>

#include "byoc_int8.h"
#include "internal.h"

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

B8_API b8_status b8_slice_s8(int32_t rank, const int32_t* input_shape, const int32_t* begin,
                             const int32_t* stride, const int32_t* output_shape, const int8_t* input,
                             int8_t* output) {
  if (rank < 1 || rank > B8_MAX_RANK) return B8_ERROR_ARGUMENT;
  int64_t in_stride[B8_MAX_RANK], index[B8_MAX_RANK], size = 1, step = 1, offset = 0;
  for (int32_t i = rank - 1; i >= 0; --i) {
    if (begin[i] < 0 || stride[i] < 1 || output_shape[i] < 0 ||
        (output_shape[i] > 0 && begin[i] + (int64_t)(output_shape[i] - 1) * stride[i] >= input_shape[i])) {
      return B8_ERROR_ARGUMENT;
    }
    in_stride[i] = step * stride[i]; /* input distance between neighbours along output axis i */
    offset += begin[i] * step;
    step *= input_shape[i];
    size *= output_shape[i];
    index[i] = 0;
  }
  for (int64_t o = 0; o < size; ++o) {
    output[o] = input[offset];
    for (int32_t i = rank - 1; i >= 0; --i) { /* odometer over the output, input offset in step */
      offset += in_stride[i];
      if (++index[i] < output_shape[i]) break;
      offset -= in_stride[i] * output_shape[i];
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

/* Whether a concat input is copied as it is: its factor exactly 1 and its zero point the
 * output's (it already has the output's scale and zero point). */
static int b8_rescale_is_copy(int32_t zero_point, int32_t factor, int32_t exponent, int32_t output_zero_point) {
  int32_t multiplier = factor, shift = exponent;
  b8_multiplier_form(&multiplier, &shift);
  return multiplier == (1 << 30) && shift == 1 && zero_point == output_zero_point;
}

/* One run of a concat input rescaled to the output: requant(x - zero_point) + output_zero_point,
 * clamped to int8. `factor` and `exponent` may be B8_SHIFT_ONLY and an exponent; the vector code
 * runs that in its multiplier form (the same function). */
static void b8_rescale_run(const int8_t* in, int32_t count, int32_t zero_point, int32_t factor, int32_t exponent,
                           int32_t output_zero_point, int8_t* out) {
  if (b8_rescale_is_copy(zero_point, factor, exponent, output_zero_point)) {
    memcpy(out, in, (size_t)count);
    return;
  }
  int32_t i = 0, multiplier = factor, shift = exponent;
  b8_multiplier_form(&multiplier, &shift);
#if B8_USE_AVX2
  /* |x - zero_point| <= 255, so the vector requantizations are exact: with TFLite's rounding a
   * left shift is applied to the int32 value first (wrapping as b8_requantize's does), leaving a
   * factor below 1; the single roundings take right = 31 - shift as long as the result fits in
   * int32 (255 * 2^22 does). The wrapped value can requantize to nearly +-2^31, so the result is
   * clamped to [-128, 127] less the output zero point before that is added (in int32 the sum
   * could wrap; b8_requantize's is int64). */
#if B8_ROUNDING == B8_ROUND_TFLITE
  const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 31 : 31 - shift;
  const int vector = 1;
#else
  const int32_t left = 0, right = 31 - shift;
  const int vector = shift <= 22;
#endif
  if (vector) {
    const __m128i left_count = _mm_cvtsi32_si128(left);
#if B8_USE_AVX512
    const __m512i zx = _mm512_set1_epi32(zero_point), mx = _mm512_set1_epi32(multiplier);
    const __m512i rx = _mm512_set1_epi32(right), ozx = _mm512_set1_epi32(output_zero_point);
    const __m512i lox = _mm512_set1_epi32(-128 - output_zero_point), hix = _mm512_set1_epi32(127 - output_zero_point);
    for (; i < count; i += 16) {
      /* The last vector is masked: no byte past the run is read or written. */
      const __mmask16 mask = count - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (count - i)) - 1);
      const __m512i x = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, in + i));
      const __m512i acc = _mm512_sll_epi32(_mm512_sub_epi32(x, zx), left_count);
      const __m512i y = _mm512_min_epi32(_mm512_max_epi32(b8_requantize_x16(acc, mx, rx), lox), hix);
      _mm512_mask_cvtepi32_storeu_epi8(out + i, mask, _mm512_add_epi32(y, ozx));
    }
#else
    const __m256i z = _mm256_set1_epi32(zero_point), m = _mm256_set1_epi32(multiplier);
    const __m256i r = _mm256_set1_epi32(right), oz = _mm256_set1_epi32(output_zero_point);
    const __m256i lo = _mm256_set1_epi32(-128 - output_zero_point), hi = _mm256_set1_epi32(127 - output_zero_point);
    const __m256i lo8 = _mm256_set1_epi32(-128), hi8 = _mm256_set1_epi32(127);
    for (; i + 8 <= count; i += 8) {
      const __m256i acc = _mm256_sll_epi32(_mm256_sub_epi32(b8_load_s8x8(in + i), z), left_count);
      const __m256i y = _mm256_min_epi32(_mm256_max_epi32(b8_requantize_x8(acc, m, r), lo), hi);
      b8_store_s8x8(out + i, _mm256_add_epi32(y, oz), lo8, hi8); /* already in range */
    }
#endif
  }
#endif
  for (; i < count; ++i)
    out[i] = b8_clamp_s8(b8_rescale(in[i] - zero_point, factor, exponent) + output_zero_point, -128, 127);
}

B8_API b8_status b8_concat_s8(int32_t num_inputs, const int8_t* const* inputs, const int32_t* inner,
                              const int32_t* multiplier, const int32_t* shift,
                              const int32_t* zero_points, int32_t output_zero_point, int32_t outer,
                              int8_t* output) {
  int copies = 1;
  for (int32_t k = 0; k < num_inputs; ++k)
    copies &= b8_rescale_is_copy(zero_points[k], multiplier ? multiplier[k] : B8_SHIFT_ONLY, shift[k],
                                 output_zero_point);
  if (copies) { /* every input as it is (the usual concat): no per-row checks */
    for (int32_t r = 0; r < outer; ++r)
      for (int32_t k = 0; k < num_inputs; ++k) {
        memcpy(output, inputs[k] + (int64_t)r * inner[k], (size_t)inner[k]);
        output += inner[k];
      }
    return B8_OK;
  }
  for (int32_t r = 0; r < outer; ++r) {
    for (int32_t k = 0; k < num_inputs; ++k) {
      b8_rescale_run(inputs[k] + (int64_t)r * inner[k], inner[k], zero_points[k],
                     multiplier ? multiplier[k] : B8_SHIFT_ONLY, shift[k], output_zero_point, output);
      output += inner[k];
    }
  }
  return B8_OK;
}

/* float -> int8 of one contiguous run; returns nonzero on NaN or infinity. Reads and writes are
 * contiguous, so the arithmetic vectorizes. */
static int b8_quantize_run(float scale, int32_t zero_point, int64_t count, const float* input,
                           int8_t* output) {
  /* Clamping before rounding to the integer bounds gives the same as clamping after. */
  const float lo = (float)(-128 - zero_point), hi = (float)(127 - zero_point);
#if B8_ROUNDING == B8_ROUND_SINGLE
  const float inv_scale = 1.0f / scale;
#endif
  int bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float x = input[i];
    bad |= !(x - x == 0.0f); /* NaN or infinity */
#if B8_ROUNDING == B8_ROUND_SINGLE
    float v = x * inv_scale;
    v = v >= lo ? (v <= hi ? v : hi) : lo; /* a NaN becomes lo: converting it would be undefined */
    v = nearbyintf(v); /* ties to even, as numpy.rint */
#else
    /* TFLite's AffineQuantize: a float division, rounded half away from zero (roundf, written
     * with truncf so that it vectorizes; v - truncf(v) is exact). */
    float v = x / scale;
    v = v >= lo ? (v <= hi ? v : hi) : lo; /* a NaN becomes lo: converting it would be undefined */
    const float whole = truncf(v);
    v = whole + (v - whole >= 0.5f ? 1.0f : (v - whole <= -0.5f ? -1.0f : 0.0f));
#endif
    output[i] = (int8_t)((int32_t)v + zero_point);
  }
  return bad;
}

#if B8_USE_AVX2
/* For 16 RGB pixels = 48 bytes in 3 parts of 16: per part and channel, the byte of that
 * channel's row each output byte takes (byte j of part p is channel (16 p + j) % 3 of pixel
 * (16 p + j) / 3), or -128 (pshufb writes 0) where another channel's goes. */
static const int8_t b8_rgb_picks[3][3][16] = {
    {{0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128, -128, 5},
     {-128, 0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128, -128},
     {-128, -128, 0, -128, -128, 1, -128, -128, 2, -128, -128, 3, -128, -128, 4, -128}},
    {{-128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128, 10, -128},
     {5, -128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128, 10},
     {-128, 5, -128, -128, 6, -128, -128, 7, -128, -128, 8, -128, -128, 9, -128, -128}},
    {{-128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15, -128, -128},
     {-128, -128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15, -128},
     {10, -128, -128, 11, -128, -128, 12, -128, -128, 13, -128, -128, 14, -128, -128, 15}}};

/* Writes 16 RGB pixels (48 bytes) to out from the codes of their three channels: output byte j
 * is channel j % 3 of pixel j / 3. */
B8_INLINE void b8_store_rgb16(__m128i r, __m128i g, __m128i b, int8_t* out) {
  for (int32_t part = 0; part < 3; ++part) {
    const int8_t(*pick)[16] = b8_rgb_picks[part];
    const __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(r, _mm_loadu_si128((const __m128i*)pick[0])),
                                                _mm_shuffle_epi8(g, _mm_loadu_si128((const __m128i*)pick[1]))),
                                   _mm_shuffle_epi8(b, _mm_loadu_si128((const __m128i*)pick[2])));
    _mm_storeu_si128((__m128i*)(out + 16 * part), v);
  }
}

/* The constants of b8_quantize_x16. */
typedef struct {
  float factor; /* 1 / scale (single rounding), else scale: a divisor */
  float lo, hi; /* the clamp, before the zero point */
  int32_t zero_point;
} b8_quantize_consts;

/* b8_quantize_x16 on 8 of the floats, as int32 codes. */
B8_INLINE __m256i b8_quantize_x8(const float* x, const b8_quantize_consts* k, int* bad) {
  const __m256 v = _mm256_loadu_ps(x);
  *bad |= _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
  const __m256 lo = _mm256_set1_ps(k->lo), hi = _mm256_set1_ps(k->hi);
#if B8_ROUNDING == B8_ROUND_SINGLE
  const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, _mm256_set1_ps(k->factor)), lo), hi);
  const __m256i q = _mm256_cvtps_epi32(t);
#else
  const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v, _mm256_set1_ps(k->factor)), lo), hi);
  const __m256 whole = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 fraction = _mm256_sub_ps(t, whole); /* exact */
  /* compares give -1 where true: subtracting the first adds 1, adding the second subtracts 1 */
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
  const __m256i down = _mm256_castps_si256(_mm256_cmp_ps(fraction, _mm256_set1_ps(-0.5f), _CMP_LE_OQ));
  const __m256i q = _mm256_add_epi32(_mm256_sub_epi32(_mm256_cvttps_epi32(whole), up), down);
#endif
  return _mm256_add_epi32(q, _mm256_set1_epi32(k->zero_point));
}

/* The codes of 16 floats, by b8_quantize_run's arithmetic (the definition): the same roundings,
 * the same clamp before rounding, where max(NaN, lo) is lo; NaN and infinity set *bad. The
 * rounding to nearest takes MXCSR's mode, as nearbyintf does. One version for both SIMD builds:
 * a 512-bit one saved 6 us of 44 on ResNet-18's input (Zen 4), not worth a second definition. */
B8_INLINE __m128i b8_quantize_x16(const float* x, const b8_quantize_consts* k, int* bad) {
  /* int32 codes in [-128, 127]: the saturating packs keep them; packing two vectors interleaves
   * their 128-bit halves, which the permute puts back in order. */
  const __m256i words = _mm256_permute4x64_epi64(
      _mm256_packs_epi32(b8_quantize_x8(x, k, bad), b8_quantize_x8(x + 8, k, bad)), 0xD8);
  return _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}
#endif

/* The scale must be positive and finite, and so must its reciprocal (below 2^-128 it is not, and
 * 0 * (1 / scale) would be NaN). */
static int b8_quantize_args_ok(float scale, int32_t zero_point) {
  return zero_point >= -128 && zero_point <= 127 && scale > 0.0f && scale <= FLT_MAX && 1.0f / scale <= FLT_MAX;
}

B8_API b8_status b8_quantize_f32(float scale, int32_t zero_point, const b8_dims* dims,
                                 int32_t size, const float* input, int8_t* output) {
  if (dims) return b8_quantize_f32_rows(scale, zero_point, dims, NULL, input, output);
  if (!b8_quantize_args_ok(scale, zero_point)) return B8_ERROR_ARGUMENT;
  return b8_quantize_run(scale, zero_point, size, input, output) ? B8_ERROR_ARGUMENT : B8_OK;
}

B8_API b8_status b8_quantize_f32_rows(float scale, int32_t zero_point, const b8_dims* dims,
                                      const b8_pixels* rows, const float* input, int8_t* output) {
  if (!dims || !b8_quantize_args_ok(scale, zero_point)) return B8_ERROR_ARGUMENT;
  int bad = 0;
  const int64_t h = dims->h, w = dims->w, c = dims->c;
  const int64_t first = rows && rows->begin > 0 ? rows->begin : 0;
  const int64_t last = rows && rows->end < dims->n * h ? rows->end : dims->n * h;
  /* NCHW input into NHWC: per image row (n, y), B8_QUANTIZE_COLUMNS columns of up to
   * B8_QUANTIZE_CHANNELS channels at a time are quantized row by row into `codes` (contiguous:
   * vectorized), then interleaved into the output's pixels (writing element x of channel ch's row
   * x * c further one byte at a time was the cost). RGB images go 16 pixels at a time from the
   * three rows to the output in registers (through `codes`, ResNet-18's input took 2x as long on
   * AMD Zen 4), and `codes` takes a row's last w % 16 columns. */
  enum { B8_QUANTIZE_COLUMNS = 64, B8_QUANTIZE_CHANNELS = 16 };
  int8_t codes[B8_QUANTIZE_CHANNELS][B8_QUANTIZE_COLUMNS];
#if B8_USE_AVX2
#if B8_ROUNDING == B8_ROUND_SINGLE
  const float factor = 1.0f / scale;
#else
  const float factor = scale;
#endif
  const b8_quantize_consts consts = {factor, (float)(-128 - zero_point), (float)(127 - zero_point), zero_point};
#endif
  for (int64_t row = first; row < last; ++row) {
    const int64_t n = row / h, y = row % h;
    int64_t x0 = 0;
#if B8_USE_AVX2
    if (c == 3) {
      const float* red = input + (n * c * h + y) * w;
      int8_t* out = output + (n * h + y) * w * c;
      for (; x0 + 16 <= w; x0 += 16)
        b8_store_rgb16(b8_quantize_x16(red + x0, &consts, &bad), b8_quantize_x16(red + h * w + x0, &consts, &bad),
                       b8_quantize_x16(red + 2 * h * w + x0, &consts, &bad), out + x0 * 3);
    }
#endif
    for (; x0 < w; x0 += B8_QUANTIZE_COLUMNS) {
      const int64_t columns = w - x0 < B8_QUANTIZE_COLUMNS ? w - x0 : B8_QUANTIZE_COLUMNS;
      for (int64_t c0 = 0; c0 < c; c0 += B8_QUANTIZE_CHANNELS) {
        const int64_t channels = c - c0 < B8_QUANTIZE_CHANNELS ? c - c0 : B8_QUANTIZE_CHANNELS;
        for (int64_t k = 0; k < channels; ++k)
          bad |= b8_quantize_run(scale, zero_point, columns, input + ((n * c + c0 + k) * h + y) * w + x0, codes[k]);
        int8_t* out = output + ((n * h + y) * w + x0) * c + c0;
        for (int64_t x = 0; x < columns; ++x)
          for (int64_t k = 0; k < channels; ++k) out[x * c + k] = codes[k][x];
      }
    }
  }
  return bad ? B8_ERROR_ARGUMENT : B8_OK;
}

B8_API b8_status b8_dequantize_f32(float scale, int32_t zero_point, const b8_dims* dims,
                                   int32_t size, const int8_t* input, float* output) {
  if (!dims) {
    for (int32_t i = 0; i < size; ++i) output[i] = (float)(input[i] - zero_point) * scale;
    return B8_OK;
  }
  const int64_t h = dims->h, w = dims->w, c = dims->c;
  for (int64_t n = 0; n < dims->n; ++n)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y) {
        const int8_t* in = input + ((n * h + y) * w) * c + ch;
        float* out = output + ((n * c + ch) * h + y) * w;
        for (int64_t x = 0; x < w; ++x) out[x] = (float)(in[x * c] - zero_point) * scale;
      }
  return B8_OK;
}
