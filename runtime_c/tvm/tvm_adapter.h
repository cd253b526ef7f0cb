/*
 * Between a generated model's code and the TVM adapter (tvm_adapter.c), which are compiled as
 * two translation units and linked into one object (byoc_int8/codegen/objects.py): what a
 * region's entry point __tvm_ffi_<symbol> hands to the adapter.
 */
#ifndef BYOC_INT8_TVM_ADAPTER_H_
#define BYOC_INT8_TVM_ADAPTER_H_

#include <stdint.h>
#include <tvm/ffi/c_api.h>

/* What the entry point of one region needs to know about it. */
typedef struct {
  const char* name;              /* the symbol */
  const char* simd;              /* the kernels compiled in, for the error message */
  int32_t num_inputs, num_outputs;
  const int32_t* ndim;           /* per argument (inputs, then outputs) */
  const int64_t* const* shape;   /* per argument */
  const int32_t* is_int8;        /* per argument: int8, else float32 */
  int64_t arena_bytes;
  int32_t num_nodes;
  const char* const* node_labels; /* "node 3 (ccompiler.conv2d_bias_relu)" */
  /* The model's code: B8_MODEL_OK or a B8_MODEL_* error with `where` the node or input index. */
  int (*run)(const void* const* inputs, void* const* outputs, int8_t* arena, int32_t int8_io, int32_t* where);
} b8_region;

/* What a region's code hands b8_model_images for its b8_image_call: the region's arguments, and
 * where each image's features go (a head then runs on them all; NULL without one). */
typedef struct {
  const void* const* inputs;
  void* const* outputs;
  int8_t* features;
  int32_t int8_io;
} b8_batch_args;

/* One image of a batch run image by image: B8_MODEL_OK or a B8_MODEL_* error, `where` as for
 * b8_region.run; `arena` is the image's own. */
typedef int (*b8_image_call)(const void* context, int32_t image, int8_t* arena, int32_t* where);

/* The batch's head on images first .. first + count - 1, after b8_image_call has run on each of
 * them; returns and takes the rest as b8_image_call does. */
typedef int (*b8_share_call)(const void* context, int32_t first, int32_t count, int8_t* arena, int32_t* where);

/* Runs images 0 .. images - 1 of a batch: as many at a time as TVM's pool has threads, each thread
 * on a run of consecutive images with its own arena of `arena_bytes` (the first in `arena`; its
 * kernels unsplit), then `share` (unless NULL) on that thread's images; then the images left over
 * one at a time, each kernel split over the pool, and `share` on them. Two threads share their
 * images from both ends, one image at a time, so that the one on a slower core runs fewer. Images
 * in flight at once never share memory: each writes only its own slices of the outputs. */
int b8_model_images(int32_t images, b8_image_call call, b8_share_call share, const void* context, int8_t* arena,
                    int64_t arena_bytes, int32_t* where);

/* The body of every region's __tvm_ffi_<symbol>: checks the arguments (naming the region and the
 * argument in the error it raises), runs the region, and turns a B8_MODEL_* status into an error
 * naming the node. */
int b8_tvm_call(const b8_region* region, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);

#if defined(B8_PROFILE) && B8_PROFILE
/* The per-call log of B8_PROFILE builds (tvm_adapter.c; profile_calls.h times the calls). */
extern int64_t b8_profile_start; /* of the call in progress */
extern int b8_profile_status;
int64_t b8_profile_now(void);
int b8_profile_record(const char* name, int64_t start);
#endif

#endif /* BYOC_INT8_TVM_ADAPTER_H_ */
