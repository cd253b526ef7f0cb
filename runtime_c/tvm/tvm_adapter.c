/*
 * The TVM side of a generated model (byoc_int8_model.h, tvm_adapter.h): each region's entry
 * point __tvm_ffi_<symbol> hands its region to b8_tvm_call, which checks the arguments,
 * allocates the arena and runs the model's code; the kernels it may split run over TVM's thread
 * pool. Filters are packed once, on first use, for the kernels compiled in.
 *
 * Compiled once per kernel build, in one translation unit after byoc_int8.h and the kernels
 * (byoc_int8/codegen/objects.py); the models' code is another unit, linked with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/c_api.h>
#include <tvm/runtime/c_backend_api.h>

#include "byoc_int8_model.h"
#include "tvm_adapter.h"

static int b8_fail(const char* message) {
  TVMFFIErrorSetRaisedFromCStr("ValueError", message);
  return -1;
}

static int b8_cpu_supported(void) {
#if B8_USE_AVX512VNNI
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#elif B8_USE_AVXVNNI
  return __builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#elif B8_USE_AVX512BW
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#elif B8_USE_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 1;
#endif
}

B8_API const int8_t* b8_model_filter(const b8_conv_params* conv, const b8_dims* filter_dims, const int8_t* filter,
                                     const int8_t** cache) {
  const int8_t* packed = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (packed) return packed;
  size_t size = ((size_t)b8_conv2d_s8_packed_size(conv, filter_dims) + 63) / 64 * 64;
  int8_t* fresh = (int8_t*)aligned_alloc(64, size);
  if (!fresh) return NULL;
  b8_conv2d_s8_pack_filter(conv, filter_dims, filter, fresh);
  const int8_t* expected = NULL;
  /* Two threads may pack at once: one copy wins and lives as long as the library. */
  if (!__atomic_compare_exchange_n(cache, &expected, (const int8_t*)fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    free(fresh);
    return expected;
  }
  return fresh;
}

/* Set while a task of b8_model_images runs its images: each kernel then runs on that task's
 * thread alone, the pool's threads being busy with the other images (TVM's pool does not nest
 * launches). */
static __thread int b8_in_images_task;

/* A kernel's tasks over TVM's pool, or its one task inline within an images task. */
static int b8_launch(FTVMParallelLambda task, void* job) {
  if (b8_in_images_task) {
    TVMParallelGroupEnv env = {NULL, 1};
    return task(0, &env, job);
  }
  return TVMBackendParallelLaunch(task, job, 0);
}

/* The share of `total` output pixels (or rows) for one task: shares differ by at most one. The
 * kernels take any share (the convolution's last tile of a share computes only its own pixels):
 * a 7x7 output splits 25 + 24, where whole 8-pixel tiles made 32 + 17. */
static b8_pixels b8_task_share(int task_id, int num_task, int32_t total) {
  const int32_t base = total / num_task, extra = total % num_task;
  b8_pixels pixels;
  pixels.begin = task_id * base + (task_id < extra ? task_id : extra);
  pixels.end = pixels.begin + base + (task_id < extra);
  return pixels;
}

/* A convolution's share: whole blocks of `rows` output rows where the kernel asks for them
 * (b8_conv2d_s8_row_block: the Winograd path's tiles of 2 or 4 rows; a 7x7 output split 4 + 3 rows
 * instead of 25 + 24 pixels spares one thread a row of tiles), else any pixels. */
static b8_pixels b8_conv_share(int task_id, int num_task, const b8_dims* out, int32_t rows) {
  if (rows <= 1) return b8_task_share(task_id, num_task, out->n * out->h * out->w);
  const int32_t per_image = (out->h + rows - 1) / rows;
  const b8_pixels blocks = b8_task_share(task_id, num_task, out->n * per_image);
  b8_pixels pixels;
  pixels.begin = (blocks.begin / per_image * out->h + blocks.begin % per_image * rows) * out->w;
  pixels.end = (blocks.end / per_image * out->h + blocks.end % per_image * rows) * out->w;
  return pixels;
}

/* Below this many output pixels per task a convolution splits by output channels instead; twice
 * as many on the Winograd path. */
enum { B8_CHANNEL_SPLIT_PIXELS = 64 };

static int b8_conv_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_conv_job* job = (const b8_conv_job*)data;
  const b8_dims* out = job->output_dims;
  if (job->depthwise) {
    b8_pixels pixels = b8_task_share(task_id, env->num_task, out->n * out->h * out->w);
    if (pixels.begin >= pixels.end) return 0;
    return b8_depthwise_conv2d_s8(job->conv, job->quant, job->input_dims, job->input, job->filter_dims,
                                  job->filter, job->bias, job->output_dims, job->output, &pixels) == B8_OK ? 0 : -1;
  }
  /* Few pixels (a 7x7 output: 25 + 24 on two tasks): whole blocks of output channels per task,
   * over all pixels, where there are blocks enough; then no task computes a partial row of tiles,
   * and each reads only its channels' weights: ResNet-18's 7x7 layers 1.1x on two threads (AVX-VNNI
   * build). On the Winograd path (tiles of 2 or 4 rows), where each task transforms the filter for
   * its own tiles, up to twice as many: its 14x14 x 256 layers 1.13x (AVX2 build). More pixels split
   * by pixels: the input's transform, or the patches, would be made by every task, and the next
   * operation (an add, by bytes) would read more of what the other core wrote; so do blocks that
   * split unevenly (MobileNetV2's 160 channels, 5 blocks of 32: 3 + 2 would be more work per task
   * than 25 + 24 pixels). Tiles of several rows are split whole, so that where their rows split
   * less evenly than the blocks, any pixel count splits by channels (the 28x28 x 128 layers' 7 rows
   * of 4-row Winograd tiles, 4 + 3 on two tasks: 1.07x, AVX-VNNI build). */
  const int32_t total = out->n * out->h * out->w, block = b8_conv2d_s8_channel_block(job->conv, job->filter_dims);
  const int32_t blocks = (out->c + block - 1) / block;
  const int32_t rows = b8_conv2d_s8_row_block(job->conv, job->filter_dims);
  b8_pixels pixels = {0, total};
  b8_channels channels = {0, out->c};
  const int32_t tasks = env->num_task;
  /* The most output pixels x channel blocks a task computes either way (with tiles of rows, the
   * tiles' pixels, the pixel split in whole rows of tiles). */
  const int64_t tile_rows = (int64_t)out->n * ((out->h + rows - 1) / rows), row_pixels = (int64_t)rows * out->w;
  const int64_t channel_share = (int64_t)(blocks + tasks - 1) / tasks * (rows > 1 ? tile_rows * row_pixels : total);
  const int64_t pixel_share = (rows > 1 ? (tile_rows + tasks - 1) / tasks * row_pixels
                                        : (int64_t)(total + tasks - 1) / tasks) * blocks;
  if ((total < (rows > 1 ? 2 : 1) * B8_CHANNEL_SPLIT_PIXELS * tasks && channel_share <= pixel_share) ||
      (rows > 1 && channel_share < pixel_share)) {
    const b8_pixels share = b8_task_share(task_id, tasks, blocks);
    channels.begin = share.begin * block;
    channels.end = share.end * block < out->c ? share.end * block : out->c;
  } else {
    pixels = b8_conv_share(task_id, tasks, out, rows);
  }
  if (pixels.begin >= pixels.end || channels.begin >= channels.end) return 0;
  /* Each task its own scratch, sized for the kernels compiled in. */
  int8_t* scratch = (int8_t*)malloc((size_t)b8_conv2d_s8_scratch_size(job->conv, job->filter_dims));
  if (!scratch) return -1;
  b8_status status = b8_conv2d_s8_channels(job->conv, job->quant, job->input_dims, job->input, job->input_nonnegative,
                                           job->filter_dims, job->filter, job->bias, job->output_dims, job->output,
                                           &pixels, &channels, scratch);
  free(scratch);
  return status == B8_OK ? 0 : -1;
}

B8_API b8_status b8_model_conv(const b8_conv_job* job, int8_t* scratch) {
  (void)scratch;
  return b8_launch(b8_conv_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

/* A fully connected layer split over its images (where a region runs a batch's together), or for
 * one image over its units: each task then reads only its units' rows of the weights, which is
 * where one image's time goes (ResNet-18's 512 x 1000 on one thread: 27 GMAC/s, its 0.5 MB of
 * weights at 27 GB/s). Small ones run whole, here: waking the pool would cost more than the
 * work. */
enum { B8_DENSE_SPLIT_MACS = 128 << 10 };

static int b8_dense_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_dense_job* job = (const b8_dense_job*)data;
  const int32_t depth = job->depth, units = job->units;
  if (job->batches > 1) {
    const b8_pixels images = b8_task_share(task_id, env->num_task, job->batches);
    if (images.begin >= images.end) return 0;
    return b8_dense_s8(job->quant, images.end - images.begin, depth, units, job->input + (int64_t)images.begin * depth,
                       job->weights, job->bias, job->output + (int64_t)images.begin * units) == B8_OK ? 0 : -1;
  }
  const b8_pixels share = b8_task_share(task_id, env->num_task, units);
  if (share.begin >= share.end) return 0;
  b8_requant_params quant = *job->quant; /* the share's units' factors */
  if (quant.multiplier) quant.multiplier += share.begin;
  quant.shift += share.begin;
  return b8_dense_s8(&quant, 1, depth, share.end - share.begin, job->input, job->weights + (int64_t)share.begin * depth,
                     job->bias ? job->bias + share.begin : NULL, job->output + share.begin) == B8_OK ? 0 : -1;
}

B8_API b8_status b8_model_dense(const b8_dense_job* job) {
  if ((int64_t)job->batches * job->units * job->depth < B8_DENSE_SPLIT_MACS)
    return b8_dense_s8(job->quant, job->batches, job->depth, job->units, job->input, job->weights, job->bias,
                       job->output);
  return b8_launch(b8_dense_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

/* An add, split in chunks of whole cache lines. */
static int b8_add_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_add_job* job = (const b8_add_job*)data;
  const int32_t share = ((job->size + env->num_task - 1) / env->num_task + 63) / 64 * 64;
  const int32_t begin = task_id * share;
  const int32_t end = begin + share < job->size ? begin + share : job->size;
  if (begin >= end) return 0;
  const b8_status status =
      job->table ? b8_pair_lut_s8(end - begin, job->table, job->input1 + begin, job->input2 + begin, job->output + begin)
                 : b8_add_s8(job->params, end - begin, job->input1 + begin, job->input2 + begin, job->output + begin);
  return status == B8_OK ? 0 : -1;
}

B8_API b8_status b8_model_add(const b8_add_job* job) {
  return b8_launch(b8_add_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

static int b8_max_pool_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_max_pool_job* job = (const b8_max_pool_job*)data;
  const b8_dims* out = job->output_dims;
  b8_pixels pixels = b8_task_share(task_id, env->num_task, out->n * out->h * out->w);
  if (pixels.begin >= pixels.end) return 0;
  return b8_max_pool2d_s8(job->pool, job->input_dims, job->input, out, job->output, &pixels) == B8_OK ? 0 : -1;
}

B8_API b8_status b8_model_max_pool(const b8_max_pool_job* job) {
  return b8_launch(b8_max_pool_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

/* A concatenation split over its rows: each task rescales whole rows of every input. */
enum { B8_CONCAT_SPLIT_INPUTS = 32, B8_CONCAT_SPLIT_BYTES = 32 << 10 };

static b8_status b8_concat_rows(const b8_concat_job* job, int32_t begin, int32_t end) {
  const int8_t* parts[B8_CONCAT_SPLIT_INPUTS];
  int64_t row = 0;
  for (int32_t k = 0; k < job->num_inputs; ++k) {
    parts[k] = job->inputs[k] + (int64_t)begin * job->inner[k];
    row += job->inner[k];
  }
  return b8_concat_s8(job->num_inputs, parts, job->inner, job->multiplier, job->shift, job->zero_points,
                      job->output_zero_point, end - begin, job->output + begin * row);
}

static int b8_concat_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_concat_job* job = (const b8_concat_job*)data;
  b8_pixels rows = b8_task_share(task_id, env->num_task, job->outer);
  if (rows.begin >= rows.end) return 0;
  return b8_concat_rows(job, rows.begin, rows.end) == B8_OK ? 0 : -1;
}

B8_API b8_status b8_model_concat(const b8_concat_job* job) {
  int64_t bytes = 0;
  for (int32_t k = 0; k < job->num_inputs; ++k) bytes += (int64_t)job->outer * job->inner[k];
  /* Small ones (or with more inputs than a task's pointer array holds) run whole, here: waking
   * the pool would cost more. */
  if (bytes < B8_CONCAT_SPLIT_BYTES || job->num_inputs > B8_CONCAT_SPLIT_INPUTS || job->outer < 2)
    return b8_concat_s8(job->num_inputs, job->inputs, job->inner, job->multiplier, job->shift, job->zero_points,
                        job->output_zero_point, job->outer, job->output);
  return b8_launch(b8_concat_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

/* The float input's conversion, split over image rows: with TFLite's rounding it divides every
 * element, which on one thread was 4-10% of a small model's time. Small inputs and flat ones
 * (no transposition, no rows) run whole. */
enum { B8_QUANTIZE_SPLIT_ELEMENTS = 16 << 10 };

static int b8_quantize_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  const b8_quantize_job* job = (const b8_quantize_job*)data;
  b8_pixels rows = b8_task_share(task_id, env->num_task, job->dims->n * job->dims->h);
  if (rows.begin >= rows.end) return 0;
  return b8_quantize_f32_rows(job->scale, job->zero_point, job->dims, &rows, job->input, job->output) == B8_OK ? 0
                                                                                                             : -1;
}

B8_API b8_status b8_model_quantize(const b8_quantize_job* job) {
  if (!job->dims || job->size < B8_QUANTIZE_SPLIT_ELEMENTS || job->dims->n * job->dims->h < 2)
    return b8_quantize_f32(job->scale, job->zero_point, job->dims, job->size, job->input, job->output);
  return b8_launch(b8_quantize_task, (void*)job) == 0 ? B8_OK : B8_ERROR_ARGUMENT;
}

/* The DLTensor behind an argument, which arrives as a raw DLTensor pointer or a Tensor object. */
static DLTensor* b8_tensor_arg(const TVMFFIAny* arg) {
  if (arg->type_index == kTVMFFIDLTensorPtr) return (DLTensor*)arg->v_ptr;
  if (arg->type_index == kTVMFFITensor) return (DLTensor*)((char*)arg->v_obj + sizeof(TVMFFIObject));
  return NULL;
}

/* A compact CPU tensor of the region's dtype and shape for argument i, or NULL with the error
 * set (naming the region and the argument). */
static void* b8_checked_data(const b8_region* region, const TVMFFIAny* arg, int32_t i) {
  char name[32], message[512];
  const int32_t ndim = region->ndim[i], is_int8 = region->is_int8[i];
  const int64_t* shape = region->shape[i];
  if (i < region->num_inputs)
    snprintf(name, sizeof name, "input %d", (int)i);
  else
    snprintf(name, sizeof name, "output %d", (int)(i - region->num_inputs));
  DLTensor* t = b8_tensor_arg(arg);
  if (!t) {
    snprintf(message, sizeof message, "%s: argument %s is not a tensor (type index %d)", region->name, name,
             (int)arg->type_index);
    b8_fail(message);
    return NULL;
  }
  if (t->dtype.code != (is_int8 ? kDLInt : kDLFloat) || t->dtype.bits != (is_int8 ? 8 : 32) || t->dtype.lanes != 1) {
    snprintf(message, sizeof message, "%s: %s must be %s (dtype code %d, %d bits)", region->name, name,
             is_int8 ? "int8" : "float32", (int)t->dtype.code, (int)t->dtype.bits);
    b8_fail(message);
    return NULL;
  }
  if (t->device.device_type != kDLCPU) {
    snprintf(message, sizeof message, "%s: %s must be on the CPU", region->name, name);
    b8_fail(message);
    return NULL;
  }
  int ok = t->ndim == ndim;
  int64_t expected_stride = 1;
  for (int32_t d = ndim - 1; ok && d >= 0; --d) {
    ok = t->shape[d] == shape[d] && (!t->strides || t->shape[d] == 1 || t->strides[d] == expected_stride);
    expected_stride *= shape[d];
  }
  if (!ok) {
    int n = snprintf(message, sizeof message, "%s: %s must be a compact tensor of shape (", region->name, name);
    for (int32_t d = 0; d < ndim && n < 400; ++d)
      n += snprintf(message + n, sizeof message - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    snprintf(message + n, sizeof message - n, ")");
    b8_fail(message);
    return NULL;
  }
  return (char*)t->data + t->byte_offset;
}

#if defined(B8_PROFILE) && B8_PROFILE
/* Opt-in per-call timing (benchmarks/profile_layers.py compiles a model with B8_PROFILE=1; other
 * builds have none of this). Every kernel call of the generated code, and each region's entry,
 * appends (name, nanoseconds) to one process-wide log that b8_profile_read hands out through
 * ctypes; the script maps the calls back to the region's nodes by their order. Regions run one
 * at a time on the calling thread, so the log needs no lock. */
#include <time.h>
enum { B8_PROFILE_CAPACITY = 1 << 16 };
static const char* b8_profile_names[B8_PROFILE_CAPACITY];
static int64_t b8_profile_ns[B8_PROFILE_CAPACITY];
static int32_t b8_profile_count;
int64_t b8_profile_start;
int b8_profile_status;

int64_t b8_profile_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int b8_profile_record(const char* name, int64_t start) {
  const int64_t ns = b8_profile_now() - start;
  if (b8_profile_count < B8_PROFILE_CAPACITY) {
    b8_profile_names[b8_profile_count] = name;
    b8_profile_ns[b8_profile_count++] = ns;
  }
  return 0;
}

/* Copies up to `capacity` records (the oldest first) and empties the log; returns how many. */
__attribute__((visibility("default"))) int32_t b8_profile_read(const char** names, int64_t* ns, int32_t capacity) {
  const int32_t count = b8_profile_count < capacity ? b8_profile_count : capacity;
  for (int32_t i = 0; i < count; ++i) {
    names[i] = b8_profile_names[i];
    ns[i] = b8_profile_ns[i];
  }
  b8_profile_count = 0;
  return count;
}

#endif /* B8_PROFILE */

/* b8_model_images: the images [0, whole) split over the pool's tasks, each with its own arena,
 * each task's head on its own images; the first error to be seen is kept (any image's: the errors
 * name a node or an input). Tasks 2p and 2p + 1 share the images of both their shares: the first
 * takes them one at a time from the front, the second from the back, until none is left (a count
 * of those taken per pair), so that a task whose core runs slower (another process on it, a
 * smaller core) takes fewer, and each still holds consecutive images for its head. */
enum { B8_IMAGE_PAIRS = 64 }; /* tasks beyond 2 x this many keep their shares */

typedef struct {
  b8_image_call call;
  b8_share_call share;
  const void* context;
  int32_t images, whole; /* whole: a multiple of the tasks, set by the tasks */
  int64_t arena_bytes;
  int8_t* arena; /* task 0's; the others allocate theirs */
  int status;
  int32_t where;
  int32_t taken[B8_IMAGE_PAIRS]; /* of each pair's images */
} b8_images_job;

static int b8_images_task(int task_id, TVMParallelGroupEnv* env, void* data) {
  b8_images_job* job = (b8_images_job*)data;
  const int32_t tasks = env->num_task, whole = job->images - job->images % tasks;
  if (task_id == 0) job->whole = whole;
  const int32_t pair = task_id / 2;
  const int paired = pair < B8_IMAGE_PAIRS && (task_id ^ 1) < tasks;
  /* The pair's images: both its tasks' shares (a task without a partner: its own). */
  const int32_t low = paired ? task_id & ~1 : task_id, high = paired ? task_id | 1 : task_id;
  const b8_pixels range = {b8_task_share(low, tasks, whole).begin, b8_task_share(high, tasks, whole).end};
  if (range.begin >= range.end) return 0;
  const int from_back = paired && task_id % 2;
  int8_t* arena = task_id == 0 ? job->arena : (int8_t*)aligned_alloc(64, (size_t)job->arena_bytes);
  int status = arena ? B8_MODEL_OK : B8_MODEL_OUT_OF_MEMORY;
  int32_t where = 0, mine = 0; /* images taken: range.begin + i, or range.end - 1 - i */
  b8_in_images_task = 1;
  while (status == B8_MODEL_OK &&
         (paired ? __atomic_fetch_add(&job->taken[pair], 1, __ATOMIC_RELAXED) < range.end - range.begin
                 : mine < range.end - range.begin)) {
    status = job->call(job->context, from_back ? range.end - 1 - mine : range.begin + mine, arena, &where);
    ++mine;
  }
  if (status == B8_MODEL_OK && job->share && mine > 0)
    status = job->share(job->context, from_back ? range.end - mine : range.begin, mine, arena, &where);
  b8_in_images_task = 0;
  if (task_id != 0) free(arena);
  int ok = B8_MODEL_OK;
  if (status != B8_MODEL_OK &&
      __atomic_compare_exchange_n(&job->status, &ok, status, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    job->where = where; /* read after the launch has joined every task */
  return 0;
}

int b8_model_images(int32_t images, b8_image_call call, b8_share_call share, const void* context, int8_t* arena,
                    int64_t arena_bytes, int32_t* where) {
  b8_images_job job = {call, share, context, images, 0, arena_bytes, arena, B8_MODEL_OK, 0, {0}};
#if defined(B8_PROFILE) && B8_PROFILE
  /* The profile's log is one sequence: the images one after another, each kernel over the pool. */
  (void)b8_images_task;
#else
  if (images > 1 && TVMBackendParallelLaunch(b8_images_task, &job, 0) != 0) {
    *where = -1;
    return B8_MODEL_KERNEL_ERROR;
  }
  if (job.status != B8_MODEL_OK) {
    *where = job.where;
    return job.status;
  }
#endif
  /* The images left over (fewer than the tasks; all of them in B8_PROFILE builds): one at a time,
   * each kernel split over the pool. */
  for (int32_t image = job.whole; image < images; ++image) {
    const int status = call(context, image, arena, where);
    if (status != B8_MODEL_OK) return status;
  }
  return share && images > job.whole ? share(context, job.whole, images - job.whole, arena, where) : B8_MODEL_OK;
}

int b8_tvm_call(const b8_region* region, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
#if defined(B8_PROFILE) && B8_PROFILE
  const int64_t region_start = b8_profile_now();
#endif
  char message[512];
  enum { B8_MAX_ARGS = 64 };
  void* tensors[B8_MAX_ARGS];
  const int32_t count = region->num_inputs + region->num_outputs;
  if (!b8_cpu_supported()) {
    snprintf(message, sizeof message, "%s: compiled for instructions (%s) this CPU does not have", region->name,
             region->simd);
    return b8_fail(message);
  }
  if (num_args != count || count > B8_MAX_ARGS) {
    snprintf(message, sizeof message, "%s: expected %d inputs and %d outputs", region->name,
             (int)region->num_inputs, (int)region->num_outputs);
    return b8_fail(message);
  }
  for (int32_t i = 0; i < count; ++i)
    if (!(tensors[i] = b8_checked_data(region, &args[i], i))) return -1;
  int8_t* arena = (int8_t*)aligned_alloc(64, (size_t)region->arena_bytes);
  if (!arena) {
    snprintf(message, sizeof message, "%s: out of memory (%lld bytes)", region->name, (long long)region->arena_bytes);
    return b8_fail(message);
  }
  int32_t where = 0;
#if defined(B8_PROFILE) && B8_PROFILE
  /* The region's name opens its calls; its total (checks and arena included) closes them. */
  b8_profile_record(region->name, b8_profile_now());
#endif
  const int status = region->run((const void* const*)tensors, tensors + region->num_inputs, arena, 0, &where);
  free(arena);
#if defined(B8_PROFILE) && B8_PROFILE
  b8_profile_record("region_total", region_start);
#endif
  if (status != B8_MODEL_OK) {
    if (status == B8_MODEL_NONFINITE_INPUT)
      snprintf(message, sizeof message, "%s: input %d contains NaN or infinity", region->name, (int)where);
    else
      snprintf(message, sizeof message, "%s: %s: %s", region->name,
               where >= 0 && where < region->num_nodes ? region->node_labels[where] : "?",
               status == B8_MODEL_OUT_OF_MEMORY ? "out of memory for the filter" : "kernel refused its arguments");
    return b8_fail(message);
  }
  if (result) {
    result->type_index = kTVMFFINone;
    result->zero_padding = 0;
    result->v_int64 = 0;
  }
  return 0;
}
