/*
 * B8_PROFILE builds only (benchmarks/profile_layers.py): included by a generated model's code
 * after the kernel declarations, so that each of its kernel calls appends (name, nanoseconds) to
 * the adapter's log. Never seen by the kernels' own unit, whose definitions these names would
 * rewrite.
 */
#ifndef BYOC_INT8_PROFILE_CALLS_H_
#define BYOC_INT8_PROFILE_CALLS_H_

#include "tvm_adapter.h"

/* One call timed; the comma operator orders the clock reads around it. */
#define B8_TIMED(name, call) \
  (b8_profile_start = b8_profile_now(), b8_profile_status = (int)(call), \
   b8_profile_record(name, b8_profile_start), (b8_status)b8_profile_status)
#define b8_model_conv(...) B8_TIMED("conv", b8_model_conv(__VA_ARGS__))
#define b8_model_add(...) B8_TIMED("add", b8_model_add(__VA_ARGS__))
#define b8_model_max_pool(...) B8_TIMED("max_pool", b8_model_max_pool(__VA_ARGS__))
#define b8_model_dense(...) B8_TIMED("dense", b8_model_dense(__VA_ARGS__))
#define b8_dense_s8_double_requant(...) B8_TIMED("dense", b8_dense_s8_double_requant(__VA_ARGS__))
#define b8_avg_pool2d_s8(...) B8_TIMED("avg_pool", b8_avg_pool2d_s8(__VA_ARGS__))
#define b8_global_avg_pool_s8(...) B8_TIMED("global_avg_pool", b8_global_avg_pool_s8(__VA_ARGS__))
#define b8_mul_s8(...) B8_TIMED("mul", b8_mul_s8(__VA_ARGS__))
#define b8_lut_s8(...) B8_TIMED("lut", b8_lut_s8(__VA_ARGS__))
#define b8_clip_s8(...) B8_TIMED("clip", b8_clip_s8(__VA_ARGS__))
#define b8_model_concat(...) B8_TIMED("concat", b8_model_concat(__VA_ARGS__))
#define b8_slice_s8(...) B8_TIMED("slice", b8_slice_s8(__VA_ARGS__))
#define b8_pad_s8(...) B8_TIMED("pad", b8_pad_s8(__VA_ARGS__))
#define b8_transpose_s8(...) B8_TIMED("transpose", b8_transpose_s8(__VA_ARGS__))
#define b8_model_quantize(...) B8_TIMED("quantize", b8_model_quantize(__VA_ARGS__))
#define b8_dequantize_f32(...) B8_TIMED("dequantize", b8_dequantize_f32(__VA_ARGS__))

#endif /* BYOC_INT8_PROFILE_CALLS_H_ */
