/*
 * The generated model's scheduler for one thread and no heap (byoc_int8_model.h): every kernel
 * runs whole, on the calling thread, with scratch from the model's arena. The portable kernels
 * read filters as they are (OHWI), so nothing is packed.
 */
#include "byoc_int8_model.h"

#if B8_USE_AVX2
#error "serial.c goes with the portable kernels (their filters need no packing); build without B8_USE_AVX2"
#endif

B8_API b8_status b8_model_conv(const b8_conv_job* job, int8_t* scratch) {
  const b8_dims* out = job->output_dims;
  b8_pixels pixels;
  pixels.begin = 0;
  pixels.end = out->n * out->h * out->w;
  if (job->depthwise)
    return b8_depthwise_conv2d_s8(job->conv, job->quant, job->input_dims, job->input, job->filter_dims,
                                  job->filter, job->bias, job->output_dims, job->output, &pixels);
  return b8_conv2d_s8(job->conv, job->quant, job->input_dims, job->input, job->input_nonnegative,
                      job->filter_dims, job->filter, job->bias, job->output_dims, job->output, &pixels, scratch);
}

B8_API b8_status b8_model_dense(const b8_dense_job* job) {
  return b8_dense_s8(job->quant, job->batches, job->depth, job->units, job->input, job->weights, job->bias,
                     job->output);
}

B8_API b8_status b8_model_add(const b8_add_job* job) {
  if (job->table) return b8_pair_lut_s8(job->size, job->table, job->input1, job->input2, job->output);
  return b8_add_s8(job->params, job->size, job->input1, job->input2, job->output);
}

B8_API b8_status b8_model_max_pool(const b8_max_pool_job* job) {
  const b8_dims* out = job->output_dims;
  b8_pixels pixels;
  pixels.begin = 0;
  pixels.end = out->n * out->h * out->w;
  return b8_max_pool2d_s8(job->pool, job->input_dims, job->input, job->output_dims, job->output, &pixels);
}

B8_API b8_status b8_model_concat(const b8_concat_job* job) {
  return b8_concat_s8(job->num_inputs, job->inputs, job->inner, job->multiplier, job->shift, job->zero_points,
                      job->output_zero_point, job->outer, job->output);
}

B8_API b8_status b8_model_quantize(const b8_quantize_job* job) {
  return b8_quantize_f32(job->scale, job->zero_point, job->dims, job->size, job->input, job->output);
}

B8_API const int8_t* b8_model_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                                     const int8_t** cache) {
  (void)conv;
  (void)filter_dims;
  (void)cache;
  return filter;
}
