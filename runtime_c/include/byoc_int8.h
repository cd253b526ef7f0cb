/*
 * byoc_int8 kernel interface: the int8 operations of the accelerator.
 *
 * This header is the contract between the code generator and the kernels. A vendor who ports
 * byoc_int8 to real hardware reimplements these functions with the same signatures and the
 * same integer results; nothing else in the generated code needs to change.
 *
 * Conventions
 *  - Activations are int8, symmetric (zero point 0), in NHWC layout (channels innermost).
 *  - Weights are int8 in [-127, 127], symmetric, per output channel; conv filters are OHWI.
 *  - Accumulators are int32. Every int8 result is produced by b8_requantize() followed by a
 *    clamp to [act_min, act_max] (relu is act_min = 0).
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

/* Linkage of every kernel. The code generator pastes the kernels into each generated module and
 * defines B8_API as `static` so that two modules loaded into one process cannot clash. */
#ifndef B8_API
#define B8_API
#endif

/* Kernel implementation, chosen when the kernels are compiled: B8_USE_AVX2 selects the AVX2
 * paths (x86 with AVX2), B8_USE_AVX512VNNI on top of it the AVX-512 VNNI convolution; neither
 * gives the portable C99 kernels. All give bit-identical results. */
#ifndef B8_USE_AVX512VNNI
#define B8_USE_AVX512VNNI 0
#endif
#ifndef B8_USE_AVX2
#define B8_USE_AVX2 B8_USE_AVX512VNNI
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
 * channel, then a clamp. */
typedef struct {
  const int32_t* multiplier; /* Q0.31, in [2^30, 2^31) or 0 */
  const int32_t* shift;      /* left shift, in [-31, 30]; negative shifts right */
  int32_t act_min, act_max;
} b8_requant_params;

typedef struct {
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left; /* bottom / right padding follow from the output shape */
  int32_t dilation_h, dilation_w;
  int32_t groups; /* input and output channels split into this many independent groups */
} b8_conv_params;

typedef struct {
  int32_t kernel_h, kernel_w;
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left;
  int32_t dilation_h, dilation_w;
} b8_pool_params;

/* Elementwise add of two tensors with different scales (TFLite's scheme, zero points 0):
 * each input is shifted left by left_shift, rescaled to a common scale, the two are added in
 * int32 and the sum is requantized to the output scale. */
typedef struct {
  int32_t left_shift;
  int32_t input1_multiplier, input1_shift;
  int32_t input2_multiplier, input2_shift;
  int32_t output_multiplier, output_shift;
  int32_t act_min, act_max;
} b8_add_params;

/* Helpers inlined into every kernel, even where the including file is compiled without
 * optimization flags (export_library compiles generated code that way; it sets O3 by pragma,
 * which does not make GCC inline on its own). */
#if defined(__GNUC__)
#define B8_INLINE static inline __attribute__((always_inline))
#else
#define B8_INLINE static inline
#endif

/* The fixed-point requantization: round(acc * multiplier * 2^(shift - 31)), one rounding step,
 * ties toward +infinity. See byoc_int8/qarith.py for why and how it relates to TFLite. */
B8_INLINE int64_t b8_requantize(int32_t acc, int32_t multiplier, int32_t shift) {
  const int32_t right = 31 - shift; /* in [1, 62] */
  const int64_t product = (int64_t)acc * (int64_t)multiplier;
  return (product + ((int64_t)1 << (right - 1))) >> right;
}

B8_INLINE int8_t b8_clamp_s8(int64_t value, int32_t lo, int32_t hi) {
  return (int8_t)(value < lo ? lo : (value > hi ? hi : value));
}

/* A share of a kernel's work for one thread: output pixels [begin, end), counted over the batch
 * in NHWC order (pixel = (n * output_h + y) * output_w + x). NULL means all pixels. */
typedef struct {
  int32_t begin, end;
} b8_pixels;

/* 2-D convolution (grouped or not), fused bias + requantization + activation clamp.
 * Filter dims are (out_channels, kernel_h, kernel_w, in_channels / groups), OHWI; the kernel
 * reads the filter as prepared once by b8_conv2d_s8_pack_filter (b8_conv2d_s8_packed_size bytes),
 * which lays it out for the selected implementation (portable: OHWI unchanged; AVX2 / AVX-512
 * VNNI: blocks of 16 / 32 output channels x 4 input bytes).
 * `input_nonnegative`: every input value is >= 0 (e.g. after a relu), which lets the AVX2 path
 * skip its sign handling. `scratch` is caller-owned, b8_conv2d_s8_scratch_size bytes. */
B8_API int32_t b8_conv2d_s8_packed_size(const b8_dims* filter_dims, int32_t groups);
B8_API void b8_conv2d_s8_pack_filter(const b8_dims* filter_dims, int32_t groups, const int8_t* filter,
                                     int8_t* packed);
B8_API int32_t b8_conv2d_s8_scratch_size(const b8_dims* filter_dims);
B8_API b8_status b8_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                              const b8_dims* input_dims, const int8_t* input,
                              int32_t input_nonnegative, const b8_dims* filter_dims,
                              const int8_t* packed_filter, const int32_t* bias,
                              const b8_dims* output_dims, int8_t* output, const b8_pixels* pixels,
                              int8_t* scratch);

/* Depthwise convolution: output channel o reads input channel o / multiplier only, with
 * multiplier = output_dims->c / input_dims->c. Filter layout (kernel_h, kernel_w, out_channels)
 * (filter_dims n = 1, c = out_channels), so that the inner loop runs over contiguous channels. */
B8_API b8_status b8_depthwise_conv2d_s8(const b8_conv_params* conv, const b8_requant_params* quant,
                                        const b8_dims* input_dims, const int8_t* input,
                                        const b8_dims* filter_dims, const int8_t* filter,
                                        const int32_t* bias, const b8_dims* output_dims,
                                        int8_t* output, const b8_pixels* pixels);

/* Max pooling over `pixels` (NULL: all); padded positions never win. The output keeps the input's
 * scale. */
B8_API b8_status b8_max_pool2d_s8(const b8_pool_params* pool, const b8_dims* input_dims,
                                  const int8_t* input, const b8_dims* output_dims,
                                  int8_t* output, const b8_pixels* pixels);

/* Average pooling: the int32 sum of each window is requantized with the (multiplier, shift) pair
 * for the window's divisor (index 1 .. kernel_h * kernel_w; the factors fold in 1 / divisor and
 * the rescale). The divisor counts the in-bounds positions, or with count_include_pad the
 * positions inside the padded input (PyTorch's rule). */
B8_API b8_status b8_avg_pool2d_s8(const b8_pool_params* pool, int32_t count_include_pad,
                                  const int32_t* multiplier_by_count, const int32_t* shift_by_count,
                                  const b8_dims* input_dims, const int8_t* input,
                                  const b8_dims* output_dims, int8_t* output);

/* Mean over H and W: int32 sum, then one requantization (multiplier folds in 1 / (H * W)). */
B8_API b8_status b8_global_avg_pool_s8(int32_t multiplier, int32_t shift,
                                       const b8_dims* input_dims, const int8_t* input,
                                       int8_t* output);

/* out = requant(in1, in2), elementwise over `size` values. */
B8_API b8_status b8_add_s8(const b8_add_params* params, int32_t size, const int8_t* input1,
                           const int8_t* input2, int8_t* output);

/* Fully connected: input (batches, depth), weights (units, depth), per-unit requantization. */
B8_API b8_status b8_dense_s8(const b8_requant_params* quant, int32_t batches, int32_t depth,
                             int32_t units, const int8_t* input, const int8_t* weights,
                             const int32_t* bias, int8_t* output);

/* Clamp to [act_min, act_max] (a relu or clip on its own); the scale is unchanged. */
B8_API b8_status b8_clip_s8(int32_t size, int32_t act_min, int32_t act_max, const int8_t* input,
                            int8_t* output);

/* Concatenation along one axis: the tensors are viewed as (outer, inner_i) and output row r is
 * the rows r of every input side by side, each requantized to the output scale. */
B8_API b8_status b8_concat_s8(int32_t num_inputs, const int8_t* const* inputs, const int32_t* inner,
                              const int32_t* multiplier, const int32_t* shift, int32_t outer,
                              int8_t* output);

/* Transpose of a tensor of rank <= 6: output axis i is input axis perm[i]. */
#define B8_MAX_RANK 6
B8_API b8_status b8_transpose_s8(int32_t rank, const int32_t* input_shape, const int32_t* perm,
                                 const int8_t* input, int8_t* output);

/* Constant padding of a tensor of rank <= 6: pads[2 i], pads[2 i + 1] values before / after
 * along axis i, filled with `value` (already quantized). */
B8_API b8_status b8_pad_s8(int32_t rank, const int32_t* input_shape, const int32_t* pads,
                           int8_t value, const int8_t* input, int8_t* output);

/* Region boundary conversions (the host side of the accelerator's DMA).
 * Quantize: q = clamp(round_half_even(x * inv_scale), -128, 127). With `dims` (the tensor's
 * n, h, w, c) the float input is read in NCHW order and written in NHWC; with NULL both are flat.
 * Returns B8_ERROR_ARGUMENT on NaN or infinity. */
B8_API b8_status b8_quantize_f32(float inv_scale, const b8_dims* dims, int32_t size,
                                 const float* input, int8_t* output);
/* Dequantize: x = (float)q * scale; with `dims`, read in NHWC order and written in NCHW. */
B8_API b8_status b8_dequantize_f32(float scale, const b8_dims* dims, int32_t size,
                                   const int8_t* input, float* output);

#ifdef __cplusplus
}
#endif

#endif /* BYOC_INT8_H_ */
