/*
 * byoc_int8 kernel interface: the int8 operations of the accelerator.
 *
 * This header is the contract between the code generator and the kernels. A vendor who ports
 * byoc_int8 to real hardware reimplements these functions with the same signatures and the
 * same integer results; nothing else in the generated code needs to change.
 *
 * Conventions
 *  - Activations are int8 in NHWC layout (channels innermost), real = scale * (q - zero_point);
 *    the zero point is 0 for symmetric activations (TFLite's int8 specification).
 *  - Weights are int8 in [-127, 127], symmetric, per output channel; conv filters are OHWI.
 *  - Accumulators are int32. Every int8 result is produced by b8_requantize(), plus the output
 *    zero point, clamped to [act_min, act_max] (relu is act_min = the output zero point).
 *  - Convolution and dense kernels compute sum(x * w) + bias over their input padded with
 *    pad_value; the code generator sets pad_value to the input zero point and folds
 *    -zero_point * sum(w) into the bias, which is TFLite's sum((x - zero_point) * w) + bias.
 *  - Kernels never allocate and never abort: they return a b8_status.
 *
 * The arithmetic is defined in byoc_int8/qarith.py; b8_requantize below is its C image and
 * both are checked against each other bit for bit by the test suite.
 */
#ifndef BYOC_INT8_H_
#define BYOC_INT8_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Linkage of every kernel (a library may give it a visibility). The code generator compiles the
 * kernels with hidden visibility and makes them local to each module's object, so that two
 * modules linked or loaded together cannot clash. */
#ifndef B8_API
#define B8_API
#endif

/* Kernel implementation, chosen when the kernels are compiled: B8_USE_AVX2 selects the AVX2
 * paths (x86 with AVX2), B8_USE_AVX512VNNI on top of it the AVX-512 VNNI convolution,
 * B8_USE_AVXVNNI on top of it the AVX2 convolution multiplying by AVX-VNNI's 256-bit vpdpbusd,
 * B8_USE_AVX512BW on top of it the AVX2 convolution's exact products on 512-bit vectors and the
 * AVX-512 adds, pools and requantizations (a CPU of AVX-512 without VNNI);
 * B8_USE_AMX on top of AVX-512 VNNI the convolution on AMX tiles where the CPU has them and the
 * OS grants them (else the VNNI one); none gives the portable C99 kernels. All give bit-identical
 * results. */
#ifndef B8_USE_AVX512VNNI
#define B8_USE_AVX512VNNI 0
#endif
#ifndef B8_USE_AVXVNNI
#define B8_USE_AVXVNNI 0
#endif
#ifndef B8_USE_AVX512BW
#define B8_USE_AVX512BW 0
#endif
#ifndef B8_USE_AMX
#define B8_USE_AMX 0
#endif
#ifndef B8_USE_AVX2
#define B8_USE_AVX2 (B8_USE_AVX512VNNI || B8_USE_AVXVNNI || B8_USE_AVX512BW)
#endif

/* Rounding of every requantization, fixed when the kernels are compiled (byoc_int8/qarith.py
 * defines each exactly):
 *  B8_ROUND_SINGLE       one rounding, ties toward +infinity (= TFLITE_SINGLE_ROUNDING);
 *  B8_ROUND_TFLITE       TFLite's default double rounding (SaturatingRoundingDoublingHighMul,
 *                        then RoundingDivideByPOT);
 *  B8_ROUND_SINGLE_AWAY  one rounding, ties away from zero.
 * Average pooling's division by the window count rounds ties the same way (up for SINGLE, away
 * from zero for the other two). */
#define B8_ROUND_SINGLE 0
#define B8_ROUND_TFLITE 1
#define B8_ROUND_SINGLE_AWAY 2
#ifndef B8_ROUNDING /* the default number format's (byoc_int8.qarith.DEFAULT_FORMAT) */
#define B8_ROUNDING B8_ROUND_TFLITE
#endif

typedef enum {
  B8_OK = 0,
  B8_ERROR_ARGUMENT = 1 /* inconsistent shapes or parameters */
} b8_status;

/* A 4-D activation or filter shape. Activations: (n, h, w, c) = NHWC.
 * Conv filters: (n, h, w, c) = (out_channels, kernel_h, kernel_w, in_channels_per_group). */
typedef struct {
  int32_t n, h, w, c;
} b8_dims;

/* Output stage shared by the kernels that requantize: one (multiplier, shift) pair per output
 * channel, the output zero point, then a clamp. With power-of-two scales every factor is a power
 * of two and `multiplier` is NULL: requantization is then a rounding shift, b8_requantize_pow2
 * with exponent shift[c]. */
typedef struct {
  const int32_t* multiplier; /* Q0.31, in [2^30, 2^31) or 0; NULL: shift only */
  const int32_t* shift;      /* left shift, in [-31, 30]; negative shifts right. Shift only: the
                                exponent, in [-32, 29] */
  int32_t act_min, act_max;  /* clamp, in the output's int8 codes (zero point included) */
  int32_t output_zero_point; /* added after requantization, before the clamp */
} b8_requant_params;

typedef struct {
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left; /* bottom / right padding follow from the output shape */
  int32_t dilation_h, dilation_w;
  int32_t groups;    /* input and output channels split into this many independent groups */
  int32_t pad_value; /* what padded input positions read: the input zero point */
} b8_conv_params;

typedef struct {
  int32_t kernel_h, kernel_w;
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left;
  int32_t dilation_h, dilation_w;
} b8_pool_params;

/* A scalar multiplier that is no multiplier: the factor is exactly 2^shift, and requantizing is
 * the rounding shift b8_requantize_pow2 (power-of-two scales). Valid wherever a kernel takes a
 * scalar (multiplier, shift) pair. */
#define B8_SHIFT_ONLY (-1)

/* Elementwise add of two tensors with different scales (TFLite's scheme): each input less its
 * zero point is shifted left by left_shift and rescaled to a common scale, the two are added in
 * int32, and the sum is requantized to the output scale and offset by the output zero point.
 * Any of the three multipliers may be B8_SHIFT_ONLY. */
typedef struct {
  int32_t left_shift;
  int32_t input1_multiplier, input1_shift;
  int32_t input2_multiplier, input2_shift;
  int32_t output_multiplier, output_shift;
  int32_t act_min, act_max;
  int32_t input1_zero_point, input2_zero_point, output_zero_point;
} b8_add_params;

/* Helpers inlined into every kernel, even where the including file is compiled without
 * optimization flags (export_library compiles generated code that way; it sets O3 by pragma,
 * which does not make GCC inline on its own). */
#if defined(__GNUC__)
#define B8_INLINE static inline __attribute__((always_inline))
#else
#define B8_INLINE static inline
#endif

/* The fixed-point requantization: acc * multiplier * 2^(shift - 31), rounded as B8_ROUNDING
 * says. See byoc_int8/qarith.py for the exact definitions and how they relate to TFLite. */
B8_INLINE int64_t b8_requantize(int32_t acc, int32_t multiplier, int32_t shift) {
#if B8_ROUNDING == B8_ROUND_TFLITE
  /* x = acc << max(shift, 0) wraps in int32 as in TFLite; SaturatingRoundingDoublingHighMul is
   * floor((x * M + 2^30) / 2^31) (it saturates only for M = -2^31, never a multiplier here);
   * RoundingDivideByPOT shifts right rounding ties away from zero. */
  const int32_t x = (int32_t)((uint32_t)acc << (shift > 0 ? shift : 0));
  const int32_t high = (int32_t)(((int64_t)x * multiplier + ((int64_t)1 << 30)) >> 31);
  const int32_t exponent = shift > 0 ? 0 : -shift;
  const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
  const int32_t threshold = (mask >> 1) + (high < 0);
  return (int64_t)(high >> exponent) + ((high & mask) > threshold);
#else
  const int32_t right = 31 - shift; /* in [1, 62] */
  const int64_t product = (int64_t)acc * (int64_t)multiplier;
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  const int64_t magnitude = ((product < 0 ? -product : product) + ((int64_t)1 << (right - 1))) >> right;
  return product < 0 ? -magnitude : magnitude;
#else
  return (product + ((int64_t)1 << (right - 1))) >> right;
#endif
#endif
}

/* Requantization by a power of two, a rounding shift with no multiplier: acc * 2^exponent
 * (exponent in [-32, 29]), rounded as B8_ROUNDING says. It is the same integer function as
 * b8_requantize(acc, 2^30, exponent + 1), TFLite's form of a power-of-two factor, in every
 * rounding (byoc_int8/qarith.py: requantize_pow2; the C and Python tests check both). */
B8_INLINE int64_t b8_requantize_pow2(int32_t acc, int32_t exponent) {
#if B8_ROUNDING == B8_ROUND_TFLITE
  /* b8_requantize's steps with M = 2^30: the doubling high multiply halves x rounding ties up,
   * then RoundingDivideByPOT shifts right rounding ties away from zero. */
  const int32_t left = exponent + 1 > 0 ? exponent + 1 : 0, right = exponent + 1 < 0 ? -(exponent + 1) : 0;
  const int32_t x = (int32_t)((uint32_t)acc << left);
  const int32_t high = (int32_t)(((int64_t)x + 1) >> 1);
  const int32_t mask = (int32_t)(((int64_t)1 << right) - 1);
  const int32_t threshold = (mask >> 1) + (high < 0);
  return (int64_t)(high >> right) + ((high & mask) > threshold);
#else
  if (exponent >= 0) return (int64_t)acc * ((int64_t)1 << exponent); /* < 2^61: no overflow */
  const int32_t right = -exponent; /* in [1, 32] */
#if B8_ROUNDING == B8_ROUND_SINGLE_AWAY
  const int64_t magnitude = ((acc < 0 ? -(int64_t)acc : (int64_t)acc) + ((int64_t)1 << (right - 1))) >> right;
  return acc < 0 ? -magnitude : magnitude;
#else
  return ((int64_t)acc + ((int64_t)1 << (right - 1))) >> right;
#endif
#endif
}

/* A scalar (multiplier, shift) pair's requantization, B8_SHIFT_ONLY included. */
B8_INLINE int64_t b8_rescale(int32_t acc, int32_t multiplier, int32_t shift) {
  return multiplier == B8_SHIFT_ONLY ? b8_requantize_pow2(acc, shift) : b8_requantize(acc, multiplier, shift);
}

/* round(acc * mantissa * 2^exponent) as C computes round((double)acc * real) for the double
 * real = mantissa * 2^exponent (mantissa in [2^52, 2^53)): the product rounded to 53 significant
 * bits (ties to even), then to an integer (ties away from zero). This is TFLite's reference
 * FULLY_CONNECTED requantization, computed in integers. */
B8_INLINE int64_t b8_requantize_f64(int32_t acc, int64_t mantissa, int32_t exponent) {
  /* |acc| * mantissa < 2^84 as hi:lo. */
  const uint64_t a = acc < 0 ? (uint64_t)0 - (uint64_t)(int64_t)acc : (uint64_t)acc;
  const uint64_t low = a * ((uint64_t)mantissa & 0xFFFFFFFFu), mid = a * ((uint64_t)mantissa >> 32);
  const uint64_t lo = low + (mid << 32), hi = (mid >> 32) + (lo < low);
  int32_t bits = hi ? 64 : 0;
  for (uint64_t top = hi ? hi : lo; top; top >>= 1) ++bits;
  /* Keep 53 significant bits (cut <= 31), rounding the rest to nearest, ties to even. */
  const int32_t cut = bits > 53 ? bits - 53 : 0;
  uint64_t kept = lo, magnitude;
  if (cut > 0) {
    const uint64_t rest = lo & (((uint64_t)1 << cut) - 1), half = (uint64_t)1 << (cut - 1);
    kept = (lo >> cut) | (hi << (64 - cut));
    kept += rest > half || (rest == half && (kept & 1));
  }
  const int32_t scale = cut + exponent; /* the value is kept * 2^scale */
  if (scale >= 0) {
    magnitude = scale > 10 ? (uint64_t)1 << 62 : kept << scale; /* far beyond int8: saturates */
  } else if (scale < -62) {
    magnitude = 0;
  } else {
    magnitude = (kept + ((uint64_t)1 << (-scale - 1))) >> -scale; /* ties away from zero */
  }
  return acc < 0 ? -(int64_t)magnitude : (int64_t)magnitude;
}

/* total / count (count >= 1) to the nearest integer, ties as B8_ROUNDING rounds them. */
B8_INLINE int32_t b8_rounding_divide(int32_t total, int32_t count) {
#if B8_ROUNDING == B8_ROUND_SINGLE
  const int64_t twice = 2 * (int64_t)total + count, denominator = 2 * (int64_t)count;
  return (int32_t)(twice >= 0 ? twice / denominator : -((-twice + denominator - 1) / denominator));
#else
  return total >= 0 ? (total + count / 2) / count : -((-total + count / 2) / count);
#endif
}

B8_INLINE int8_t b8_clamp_s8(int64_t value, int32_t lo, int32_t hi) {
  return (int8_t)(value < lo ? lo : (value > hi ? hi : value));
}

/* A share of a kernel's work for one thread: output pixels [begin, end), counted over the batch
 * in NHWC order (pixel = (n * output_h + y) * output_w + x). NULL means all pixels. */
typedef struct {
  int32_t begin, end;
} b8_pixels;

/* A share of a convolution's output channels [begin, end) (b8_conv2d_s8_channels). */
typedef struct {
  int32_t begin, end;
} b8_channels;

/* 2-D convolution (grouped or not), fused bias + requantization + activation clamp.
 * Filter dims are (out_channels, kernel_h, kernel_w, in_channels / groups), OHWI; the kernel
 * reads the filter as prepared once by b8_conv2d_s8_pack_filter (b8_conv2d_s8_packed_size bytes)
 * for the convolution `conv` (its groups, strides and dilations choose the layout), which lays
 * it out for the selected implementation: portable, OHWI unchanged; AVX2, AVX-VNNI / AVX-512
 * VNNI, blocks of 16 / 32 output channels x 4 input bytes, each kernel row's kernel_w x
 * in_channels bytes padded with zero weights to a multiple of 4, or, where that padding would be
 * a tenth of the patch or more, the rows back to back and the patch padded once; then the weight
 * sums, and whether every weight lies in [-64, 64], which gives AVX2 faster exact paths: for
 * such filters on 4 or more blocks the AVX2 layout holds w + 64; the AVX-512 VNNI and AVX-VNNI
 * layouts hold w + 128 where blocks x padded patch bytes reach 128. The AVX2 and AVX-VNNI
 * builds, for the 3x3 stride-1 layers they run by Winograd (up to 896 input channels, a
 * multiple of 16): blocks of 16 output channels x 9 taps per pair of input channels, int8, which
 * each call transforms. The AMX build, for patches of 32 bytes or more where the process may use AMX:
 * blocks of 32 channels x 4 bytes of the patch's rows back to back, padded with zero weights to a
 * multiple of 64, the weights as they are.
 * `input_nonnegative`: every input value is >= 0 (e.g. after a relu), which lets the AVX2 path
 * skip its sign handling. `scratch` is caller-owned, b8_conv2d_s8_scratch_size bytes for each
 * call running at once. The AVX-512 VNNI, AVX-VNNI and AMX builds return B8_ERROR_ARGUMENT for
 * patches (kernel_h x kernel_w x in_channels / groups) of more than 2^15 bytes, past which an
 * int32 accumulator could overflow anyway. */
B8_API int32_t b8_conv2d_s8_packed_size(const b8_conv_params* conv, const b8_dims* filter_dims);
B8_API void b8_conv2d_s8_pack_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                                     int8_t* packed);
B8_API int32_t b8_conv2d_s8_scratch_size(const b8_conv_params* conv, const b8_dims* filter_dims);
/* The output rows whose multiples the kernel computes best in one call: work split over threads
 * in whole blocks of them (counted from each image's first row) avoids computing rows twice.
 * 1 for most convolutions; 2 or 4 for the Winograd path (its tiles' rows) of the AVX2 and AVX-VNNI
 * builds, and of the AVX-512 VNNI build where it takes it (AMD Zen 4, or BYOC_INT8_WINOGRAD=1). */
B8_API int32_t b8_conv2d_s8_row_block(const b8_conv_params* conv, const b8_dims* filter_dims);
B8_API b8_status b8_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                              const b8_dims* input_dims, const int8_t* input,
                              int32_t input_nonnegative, const b8_dims* filter_dims,
                              const int8_t* packed_filter, const int32_t* bias,
                              const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                              int8_t* scratch);
/* The output channels that the kernel computes in whole blocks (its tiles' channel blocks: 16 or 32
 * for the SIMD builds' groups-1 convolutions, 1 elsewhere): b8_conv2d_s8_channels takes shares
 * that start at a multiple of it and end at one or at the last channel. */
B8_API int32_t b8_conv2d_s8_channel_block(const b8_conv_params* conv, const b8_dims* filter_dims);
/* b8_conv2d_s8 on output channels `channels` (NULL: all) of the pixels `pixels` only, so that a
 * caller can split a convolution of few pixels (a 7x7 output) over threads by channels: each thread
 * then reads only its channels' weights and computes no partial tile of pixels. A share that is
 * not whole blocks (b8_conv2d_s8_channel_block) or not inside [0, out_channels] gives
 * B8_ERROR_ARGUMENT. */
B8_API b8_status b8_conv2d_s8_channels(const b8_conv_params* conv, const b8_requant_params* quant,
                                       const b8_dims* input_dims, const int8_t* input,
                                       int32_t input_nonnegative, const b8_dims* filter_dims,
                                       const int8_t* packed_filter, const int32_t* bias,
                                       const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                                       const b8_channels* channels, int8_t* scratch);

/* Depthwise convolution: output channel o reads input channel o / multiplier only, with
 * multiplier = output_dims->c / input_dims->c. Filter layout (kernel_h, kernel_w, out_channels)
 * (filter_dims n = 1, c = out_channels), so that the inner loop runs over contiguous channels. */
B8_API b8_status b8_depthwise_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                                        const b8_dims* input_dims, const int8_t* input,
                                        const b8_dims* filter_dims, const int8_t* filter,
                                        const int32_t* bias, const b8_dims* output_dims,
                                        int8_t* output, const b8_pixels* pixels);

/* Max pooling over `pixels` (NULL: all): the largest in-bounds tap of each window, padded
 * positions never win; a window with no tap inside the input (dilated windows can have none)
 * gives -128, the maximum over no values starting from the lowest code (TFLite's rule). The output
 * keeps the input's scale and zero point. */
B8_API b8_status b8_max_pool2d_s8(const b8_pool_params* pool, const b8_dims* input_dims,
                                  const int8_t* input, const b8_dims* output_dims,
                                  int8_t* output, const b8_pixels* pixels);

/* Average pooling: the int32 sum of each window divided by the window's count with
 * b8_rounding_divide; the output keeps the input's scale and zero point (TFLite's AVERAGE_POOL_2D).
 * The count is the in-bounds positions, or with count_include_pad the positions inside the
 * padded input (PyTorch's rule), which then add pad_value (the zero point) to the sum. */
B8_API b8_status b8_avg_pool2d_s8(const b8_pool_params* pool, int32_t count_include_pad,
                                  int32_t pad_value, const b8_dims* input_dims, const int8_t* input,
                                  const b8_dims* output_dims, int8_t* output);

/* Mean over H and W: the int32 sum of (x - input_zero_point), one requantization (the multiplier
 * folds in 1 / (H * W) and the rescale; it may be B8_SHIFT_ONLY), plus output_zero_point. */
B8_API b8_status b8_global_avg_pool_s8(int32_t multiplier, int32_t shift, int32_t input_zero_point,
                                       int32_t output_zero_point, const b8_dims* input_dims,
                                       const int8_t* input, int8_t* output);

/* out = requant(in1, in2), elementwise over `size` values. */
B8_API b8_status b8_add_s8(const b8_add_params* params, int32_t size, const int8_t* input1,
                           const int8_t* input2, int8_t* output);

/* Any elementwise function of two int8 tensors by a table of its value at every input pair
 * (an add with its rescales and clamp, built at compile time from b8_add_s8's arithmetic):
 * output[i] = table[(input1[i] + 128) * 256 + input2[i] + 128]. The table is B8_PAIR_TABLE_BYTES
 * long: its 65536 entries, then 3 bytes of any value, which the SIMD paths read (each lookup
 * loads 4 bytes and keeps the first). */
#define B8_PAIR_TABLE_BYTES (65536 + 3)
B8_API b8_status b8_pair_lut_s8(int32_t size, const int8_t* table, const int8_t* input1,
                                const int8_t* input2, int8_t* output);

/* Fully connected: input (batches, depth), weights (units, depth), per-unit requantization. */
B8_API b8_status b8_dense_s8(const b8_requant_params* quant, int32_t batches, int32_t depth,
                             int32_t units, const int8_t* input, const int8_t* weights,
                             const int32_t* bias, int8_t* output);

/* TFLite's reference FULLY_CONNECTED output stage: per unit, the accumulator times the double
 * mantissa[u] * 2^exponent[u], rounded by b8_requantize_f64, plus the output zero point, clamped. */
typedef struct {
  const int64_t* mantissa; /* in [2^52, 2^53) */
  const int32_t* exponent;
  int32_t act_min, act_max;
  int32_t output_zero_point;
} b8_double_requant_params;

/* Fully connected with that output stage (imported .tflite models; everything else uses
 * b8_dense_s8). */
B8_API b8_status b8_dense_s8_double_requant(const b8_double_requant_params* quant, int32_t batches,
                                            int32_t depth, int32_t units, const int8_t* input,
                                            const int8_t* weights, const int32_t* bias, int8_t* output);

/* Clamp to [act_min, act_max] (a relu or clip on its own); the scale is unchanged. */
B8_API b8_status b8_clip_s8(int32_t size, int32_t act_min, int32_t act_max, const int8_t* input,
                            int8_t* output);

/* Elementwise product (TFLite's MUL): requant((in1 - z1) * (in2 - z2)) + output zero point,
 * clamped; the multiplier folds in s1 * s2 / s_out (it may be B8_SHIFT_ONLY). */
typedef struct {
  int32_t multiplier, shift;
  int32_t input1_zero_point, input2_zero_point, output_zero_point;
  int32_t act_min, act_max;
} b8_mul_params;

/* in1 is (batches, pixels, channels); in2 is the same, or with `broadcast` one value per (batch,
 * channel) for every pixel (squeeze-and-excitation's gate). */
B8_API b8_status b8_mul_s8(const b8_mul_params* params, int32_t batches, int32_t pixels,
                           int32_t channels, int32_t broadcast, const int8_t* input1,
                           const int8_t* input2, int8_t* output);

/* An elementwise function of one tensor (sigmoid, hardswish, GELU, ...) as a 256-entry table
 * built at compile time from both encodings: output[i] = table[input[i] + 128]. */
B8_API b8_status b8_lut_s8(int32_t size, const int8_t* table, const int8_t* input, int8_t* output);

/* Concatenation along one axis: the tensors are viewed as (outer, inner_i) and output row r is
 * the rows r of every input side by side, each requantized to the output scale:
 * requant(x - zero_points[i]) + output_zero_point; `multiplier` NULL: shift only, as in
 * b8_requant_params. */
B8_API b8_status b8_concat_s8(int32_t num_inputs, const int8_t* const* inputs, const int32_t* inner,
                              const int32_t* multiplier, const int32_t* shift,
                              const int32_t* zero_points, int32_t output_zero_point, int32_t outer,
                              int8_t* output);

/* Transpose of a tensor of rank <= 6: output axis i is input axis perm[i]. */
#define B8_MAX_RANK 6
B8_API b8_status b8_transpose_s8(int32_t rank, const int32_t* input_shape, const int32_t* perm,
                                 const int8_t* input, int8_t* output);

/* Strided slice of a tensor of rank <= 6: output element idx reads input element
 * begin + idx * stride on every axis (output_shape gives the extent). */
B8_API b8_status b8_slice_s8(int32_t rank, const int32_t* input_shape, const int32_t* begin,
                             const int32_t* stride, const int32_t* output_shape, const int8_t* input,
                             int8_t* output);

/* Constant padding of a tensor of rank <= 6: pads[2 i], pads[2 i + 1] values before / after
 * along axis i, filled with `value` (already quantized). */
B8_API b8_status b8_pad_s8(int32_t rank, const int32_t* input_shape, const int32_t* pads,
                           int8_t value, const int8_t* input, int8_t* output);

/* Region boundary conversions (the host side of the accelerator's DMA).
 * Quantize: q = clamp(round(x / scale) + zero_point, -128, 127), in float32: with
 * B8_ROUND_SINGLE x * (1 / scale) rounded half to even, otherwise TFLite's x / scale rounded half
 * away from zero. With `dims` (the tensor's n, h, w, c) the float input is read in NCHW order and
 * written in NHWC; with NULL both are flat. Returns B8_ERROR_ARGUMENT on NaN or infinity (the
 * output is then unspecified), or for a scale that is not positive and finite with a finite
 * reciprocal. */
B8_API b8_status b8_quantize_f32(float scale, int32_t zero_point, const b8_dims* dims,
                                 int32_t size, const float* input, int8_t* output);
/* b8_quantize_f32 with `dims` for the image rows [rows->begin, rows->end) of the n x h rows (NULL:
 * all): those rows' output bytes only, so that a caller can split one conversion over threads. */
B8_API b8_status b8_quantize_f32_rows(float scale, int32_t zero_point, const b8_dims* dims,
                                      const b8_pixels* rows, const float* input, int8_t* output);
/* Dequantize: x = (float)(q - zero_point) * scale; with `dims`, read in NHWC order and written
 * in NCHW. */
B8_API b8_status b8_dequantize_f32(float scale, int32_t zero_point, const b8_dims* dims,
                                   int32_t size, const int8_t* input, float* output);

#ifdef __cplusplus
}
#endif

#endif /* BYOC_INT8_H_ */
