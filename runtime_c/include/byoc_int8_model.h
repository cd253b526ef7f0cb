/*
 * What a generated model needs beyond the kernels of byoc_int8.h.
 *
 * byoc_int8's code generator writes each model as plain C99: its constants, one planned arena,
 * and a sequence of kernel calls. The kernels it may split over threads (convolution, fully
 * connected, add, max pool, concatenation, the float input's quantization) and the preparation
 * of convolution filters go through the functions below, which have two implementations:
 *  - runtime_c/model/serial.c: one thread, no heap, the portable kernels (the standalone C
 *    export, e.g. for firmware);
 *  - runtime_c/tvm/tvm_adapter.c: TVM's thread pool, and filters packed once for the SIMD
 *    kernels (the shared library TVM loads).
 */
#ifndef BYOC_INT8_MODEL_H_
#define BYOC_INT8_MODEL_H_

#include "byoc_int8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a generated model's run function returns (0 on success). */
enum {
  B8_MODEL_OK = 0,
  B8_MODEL_KERNEL_ERROR = 1,     /* a kernel refused its arguments (a code generator bug) */
  B8_MODEL_NONFINITE_INPUT = 2,  /* a float input holds NaN or infinity */
  B8_MODEL_OUT_OF_MEMORY = 3     /* packing a filter for the SIMD kernels found no memory */
};

/* One convolution (depthwise or not) over all its output pixels. */
typedef struct {
  const b8_conv_params* conv;
  const b8_requant_params* quant;
  const b8_dims *input_dims, *filter_dims, *output_dims;
  const int8_t* input;
  const int8_t* filter; /* as b8_model_filter returned it */
  const int32_t* bias;
  int8_t* output;
  int32_t input_nonnegative, depthwise;
} b8_conv_job;

/* One fully connected layer (b8_dense_s8's arguments). */
typedef struct {
  const b8_requant_params* quant;
  int32_t batches, depth, units;
  const int8_t *input, *weights;
  const int32_t* bias;
  int8_t* output;
} b8_dense_job;

/* One elementwise add of two tensors of `size` elements: b8_add_s8, or where `table` is not NULL
 * b8_pair_lut_s8 with that table of the same add's every result (for large tensors on hosts). */
typedef struct {
  const b8_add_params* params;
  int32_t size;
  const int8_t *input1, *input2;
  int8_t* output;
  const int8_t* table;
} b8_add_job;

/* One max pool over all its output pixels. */
typedef struct {
  const b8_pool_params* pool;
  const b8_dims *input_dims, *output_dims;
  const int8_t* input;
  int8_t* output;
} b8_max_pool_job;

/* One concatenation (b8_concat_s8's arguments): `outer` rows, each the rows of every input side
 * by side, rescaled to the output. */
typedef struct {
  int32_t num_inputs;
  const int8_t* const* inputs;
  const int32_t *inner, *multiplier, *shift, *zero_points;
  int32_t output_zero_point, outer;
  int8_t* output;
} b8_concat_job;

/* One region-entry conversion of a float input to int8 (b8_quantize_f32's arguments). */
typedef struct {
  float scale;
  int32_t zero_point;
  const b8_dims* dims;
  int32_t size;
  const float* input;
  int8_t* output;
} b8_quantize_job;

/* `scratch`: b8_conv2d_s8_scratch_size(conv, filter_dims) bytes of the portable kernels, from the
 * model's arena (an implementation with other kernels may use its own). */
B8_API b8_status b8_model_conv(const b8_conv_job* job, int8_t* scratch);
B8_API b8_status b8_model_dense(const b8_dense_job* job);
B8_API b8_status b8_model_add(const b8_add_job* job);
B8_API b8_status b8_model_max_pool(const b8_max_pool_job* job);
B8_API b8_status b8_model_concat(const b8_concat_job* job);
B8_API b8_status b8_model_quantize(const b8_quantize_job* job);

/* A convolution filter (OHWI) in the layout of the kernels compiled in; `cache` is one pointer
 * per filter, NULL before the first call, that an implementation may keep a packed copy in.
 * Returns NULL when packing needs memory that is not there. */
B8_API const int8_t* b8_model_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                                     const int8_t** cache);

#ifdef __cplusplus
}
#endif

#endif /* BYOC_INT8_MODEL_H_ */
