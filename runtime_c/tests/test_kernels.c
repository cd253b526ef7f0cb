/* Unit tests of the kernels on cases small enough to work out by hand. The randomized
 * comparisons against the integer reference live in tests/test_kernels_vs_reference.py. */
#include <stdio.h>
#include <string.h>

#include "byoc_int8.h"

static int failures = 0;

#define EXPECT_EQ(actual, expected)                                                      \
  do {                                                                                   \
    long long a_ = (long long)(actual), e_ = (long long)(expected);                      \
    if (a_ != e_) {                                                                      \
      fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #actual, \
              a_, e_);                                                                   \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

#if B8_ROUNDING == B8_ROUND_SINGLE
#define B8_TIES_AWAY 0
#else
#define B8_TIES_AWAY 1
#endif

/* 2^30 with shift 1 is exactly x1.0; 2^30 with shift 0 is x0.5. */
static void test_requantize(void) {
  EXPECT_EQ(b8_requantize(100, 1 << 30, 1), 100);
  EXPECT_EQ(b8_requantize(5, 1 << 30, 0), 3); /* 2.5 -> 3 */
  /* -2.5: ties up in SINGLE and in TFLite's first rounding (the second has no remainder). */
  EXPECT_EQ(b8_requantize(-5, 1 << 30, 0), B8_ROUNDING == B8_ROUND_SINGLE_AWAY ? -3 : -2);
  /* 5 x 0.58 / 2 = 1.45: TFLite rounds 2.9 to 3 first, then 1.5 away from zero to 2. */
  EXPECT_EQ(b8_requantize(5, 1245540515, -1), B8_ROUNDING == B8_ROUND_TFLITE ? 2 : 1);
  EXPECT_EQ(b8_requantize(-5, 1245540515, -1), B8_ROUNDING == B8_ROUND_TFLITE ? -2 : -1);
  EXPECT_EQ(b8_rounding_divide(10, 4), 3);                    /* 2.5 */
  EXPECT_EQ(b8_rounding_divide(-10, 4), B8_TIES_AWAY ? -3 : -2); /* -2.5 */
  EXPECT_EQ(b8_rounding_divide(-7, 3), -2);
  EXPECT_EQ(b8_requantize(7, 1 << 30, -2), 1);   /* 0.875 -> 1 */
  EXPECT_EQ(b8_requantize(-7, 1 << 30, -2), -1); /* -0.875 -> -1 */
  EXPECT_EQ(b8_requantize(3, 1 << 30, 3), 12);   /* left shift: x4 */
  EXPECT_EQ(b8_requantize(INT32_MAX, INT32_MAX, 0), 2147483646); /* product needs 62 bits */
  EXPECT_EQ(b8_requantize(INT32_MIN, INT32_MAX, -31), -1);
  EXPECT_EQ(b8_clamp_s8(1000, -128, 127), 127);
  EXPECT_EQ(b8_clamp_s8(-1000, 0, 127), 0);
}

/* Power-of-two requantization is a rounding shift, the same integer function as the multiplier
 * form (2^30, exponent + 1) in every rounding: edge accumulators and a pseudo-random sweep over
 * every exponent; then a shift-only add and dense equal their multiplier-form calls. */
static void test_requantize_pow2(void) {
  static const int32_t edges[] = {0, 1, -1, 2, -2, 3, -3, 5, -5, 127, -128, 1 << 20, -(1 << 20),
                                  INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1};
  uint32_t state = 12345u;
  for (int32_t exponent = -32; exponent <= 29; ++exponent) {
    for (int32_t i = 0; i < 4000; ++i) {
      int32_t acc;
      if (i < (int32_t)(sizeof edges / sizeof edges[0])) {
        acc = edges[i];
      } else {
        state = state * 1664525u + 1013904223u;
        acc = (int32_t)(state >> (i % 31)) * (i % 2 ? -1 : 1);
      }
      if (b8_requantize_pow2(acc, exponent) != b8_requantize(acc, 1 << 30, exponent + 1)) {
        fprintf(stderr, "pow2 requantize differs: acc %ld exponent %ld\n", (long)acc, (long)exponent);
        ++failures;
        return;
      }
    }
  }
  EXPECT_EQ(b8_requantize_pow2(12, -3), 2); /* 1.5 -> 2 */
  EXPECT_EQ(b8_requantize_pow2(3, 2), 12);

  int8_t a[40], b[40], shift_only[40], multiplied[40];
  for (int32_t i = 0; i < 40; ++i) {
    a[i] = (int8_t)(i * 37 - 128);
    b[i] = (int8_t)(100 - i * 11);
  }
  const b8_add_params pow2 = {20, B8_SHIFT_ONLY, -1, B8_SHIFT_ONLY, -2, B8_SHIFT_ONLY, -19, -128, 127, 3, -4, 1};
  const b8_add_params mult = {20, 1 << 30, 0, 1 << 30, -1, 1 << 30, -18, -128, 127, 3, -4, 1};
  EXPECT_EQ(b8_add_s8(&pow2, 40, a, b, shift_only), B8_OK);
  EXPECT_EQ(b8_add_s8(&mult, 40, a, b, multiplied), B8_OK);
  EXPECT_EQ(memcmp(shift_only, multiplied, 40), 0);

  const int32_t bias[2] = {7, -300}, shift[2] = {-4, -6}, shift_plus_one[2] = {-3, -5}, ones[2] = {1 << 30, 1 << 30};
  const b8_requant_params pow2_quant = {NULL, shift, -128, 127, 2};
  const b8_requant_params mult_quant = {ones, shift_plus_one, -128, 127, 2};
  EXPECT_EQ(b8_dense_s8(&pow2_quant, 20, 2, 2, a, b, bias, shift_only), B8_OK);
  EXPECT_EQ(b8_dense_s8(&mult_quant, 20, 2, 2, a, b, bias, multiplied), B8_OK);
  EXPECT_EQ(memcmp(shift_only, multiplied, 40), 0);

  /* Concat (a NULL multiplier array: both inputs' factors are powers of two, one of them 1 with
   * another zero point) and the mean. */
  int8_t cat_pow2[80], cat_mult[80];
  const int8_t* const parts[2] = {a, b};
  const int32_t inner[2] = {20, 20}, cat_shift[2] = {-1, 0}, cat_shift_mult[2] = {0, 1}, zero_points[2] = {3, -2};
  EXPECT_EQ(b8_concat_s8(2, parts, inner, NULL, cat_shift, zero_points, -2, 2, cat_pow2), B8_OK);
  EXPECT_EQ(b8_concat_s8(2, parts, inner, ones, cat_shift_mult, zero_points, -2, 2, cat_mult), B8_OK);
  EXPECT_EQ(memcmp(cat_pow2, cat_mult, 80), 0);
  const b8_dims plane = {1, 2, 1, 40}; /* two pixels of 40 channels, a and b: 32 vector, 8 scalar */
  int8_t image[80], mean_pow2[40], mean_mult[40];
  memcpy(image, a, 40);
  memcpy(image + 40, b, 40);
  EXPECT_EQ(b8_global_avg_pool_s8(B8_SHIFT_ONLY, -1, 5, -7, &plane, image, mean_pow2), B8_OK);
  EXPECT_EQ(b8_global_avg_pool_s8(1 << 30, 0, 5, -7, &plane, image, mean_mult), B8_OK);
  EXPECT_EQ(memcmp(mean_pow2, mean_mult, 40), 0);
}

/* 3x3 input, one channel, 2x2 filter of ones, padding 1 on top/left, stride 2: each output is the
 * sum of the window's in-bounds values. */
static void test_conv2d_padding_and_stride(void) {
  const int8_t input[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int8_t filter[4] = {1, 1, 1, 1};
  const int32_t bias[1] = {10}, multiplier[1] = {1 << 30}, shift[1] = {1};
  const b8_conv_params conv = {2, 2, 1, 1, 1, 1, 1, 0};
  const b8_requant_params quant = {multiplier, shift, -128, 127, 0};
  const b8_dims in_dims = {1, 3, 3, 1}, filter_dims = {1, 2, 2, 1}, out_dims = {1, 2, 2, 1};
  /* (VNNI: 32 channels per block and their weight sums; the SIMD builds gather a chunk of
   * tiles' patches of this filter, its rows back to back; AMX two steps of 32 x 32 accumulators and
   * 64-byte patches.) */
  int8_t output[4], scratch[16384], packed[4096];
  if (b8_conv2d_s8_scratch_size(&conv, &filter_dims) > 16384 || b8_conv2d_s8_packed_size(&conv, &filter_dims) > 4096) {
    fprintf(stderr, "conv2d buffers larger than expected\n");
    ++failures;
    return;
  }
  b8_conv2d_s8_pack_filter(&conv, &filter_dims, filter, packed);
  EXPECT_EQ(b8_conv2d_s8(&conv, &quant, &in_dims, input, 1, &filter_dims, packed, bias, &out_dims,
                         output, NULL, scratch), B8_OK);
  EXPECT_EQ(output[0], 10 + 1);
  EXPECT_EQ(output[1], 10 + 2 + 3);
  EXPECT_EQ(output[2], 10 + 4 + 7);
  EXPECT_EQ(output[3], 10 + 5 + 6 + 8 + 9);
  /* A filter whose input channels do not match is refused, not read out of bounds. */
  const b8_dims bad_filter = {1, 2, 2, 2};
  EXPECT_EQ(b8_conv2d_s8(&conv, &quant, &in_dims, input, 1, &bad_filter, packed, bias, &out_dims,
                         output, NULL, scratch), B8_ERROR_ARGUMENT);
  /* Only the pixels asked for are written: the second output row. */
  const b8_pixels second_row = {2, 4};
  int8_t partial[4] = {0, 0, 0, 0};
  EXPECT_EQ(b8_conv2d_s8(&conv, &quant, &in_dims, input, 1, &filter_dims, packed, bias, &out_dims,
                         partial, &second_row, scratch), B8_OK);
  EXPECT_EQ(partial[0], 0);
  EXPECT_EQ(partial[2], 10 + 4 + 7);
  /* Padded taps read pad_value (an input zero point of 3); the output zero point is added. */
  const b8_conv_params padded = {2, 2, 1, 1, 1, 1, 1, 3};
  const b8_requant_params offset = {multiplier, shift, -128, 127, -5};
  EXPECT_EQ(b8_conv2d_s8(&padded, &offset, &in_dims, input, 1, &filter_dims, packed, bias, &out_dims,
                         output, NULL, scratch), B8_OK);
  EXPECT_EQ(output[0], 10 + 3 + 3 + 3 + 1 - 5);
  EXPECT_EQ(output[3], 10 + 5 + 6 + 8 + 9 - 5);
}

/* 1x1 convolution, 4 input channels to 40 output channels on 3 pixels: the channel shares of
 * b8_conv2d_s8_channels (whole blocks, the last one ending at channel 40) write what one call
 * writes, and only their channels; shares off the blocks or past the channels are refused. */
static void test_conv2d_channel_shares(void) {
  enum { PIXELS = 3, IN_C = 4, OUT_C = 40 };
  int8_t input[PIXELS * IN_C], filter[OUT_C * IN_C], whole[PIXELS * OUT_C], shared[PIXELS * OUT_C];
  int32_t bias[OUT_C], multiplier[OUT_C], shift[OUT_C];
  for (int32_t i = 0; i < PIXELS * IN_C; ++i) input[i] = (int8_t)(i * 37 % 251 - 125);
  for (int32_t i = 0; i < OUT_C * IN_C; ++i) filter[i] = (int8_t)(i * 53 % 255 - 127);
  for (int32_t oc = 0; oc < OUT_C; ++oc) {
    bias[oc] = oc * 101 - 2000;
    multiplier[oc] = (1 << 30) + oc * 12345;
    shift[oc] = -6;
  }
  const b8_conv_params conv = {1, 1, 0, 0, 1, 1, 1, 0};
  const b8_requant_params quant = {multiplier, shift, -128, 127, 3};
  const b8_dims in_dims = {1, 1, PIXELS, IN_C}, filter_dims = {OUT_C, 1, 1, IN_C}, out_dims = {1, 1, PIXELS, OUT_C};
  int8_t scratch[32768], packed[8192];
  if (b8_conv2d_s8_scratch_size(&conv, &filter_dims) > 32768 || b8_conv2d_s8_packed_size(&conv, &filter_dims) > 8192) {
    fprintf(stderr, "conv2d buffers larger than expected\n");
    ++failures;
    return;
  }
  b8_conv2d_s8_pack_filter(&conv, &filter_dims, filter, packed);
  EXPECT_EQ(b8_conv2d_s8(&conv, &quant, &in_dims, input, 0, &filter_dims, packed, bias, &out_dims, whole, NULL, scratch),
            B8_OK);
  const int32_t block = b8_conv2d_s8_channel_block(&conv, &filter_dims);
  EXPECT_EQ(block == 1 || block == 16 || block == 32, 1);
  memset(shared, 0x55, sizeof shared);
  for (int32_t begin = 0; begin < OUT_C; begin += block) {
    const b8_channels share = {begin, begin + block < OUT_C ? begin + block : OUT_C};
    EXPECT_EQ(b8_conv2d_s8_channels(&conv, &quant, &in_dims, input, 0, &filter_dims, packed, bias, &out_dims, shared,
                                    NULL, &share, scratch), B8_OK);
    if (begin == 0) { /* the first share alone: its channels written, the others not yet */
      EXPECT_EQ(memcmp(shared, whole, (size_t)share.end), 0);
      EXPECT_EQ(share.end == OUT_C || shared[share.end] == 0x55, 1);
    }
  }
  EXPECT_EQ(memcmp(shared, whole, sizeof whole), 0);
  if (block > 1) {
    const b8_channels off_block = {1, OUT_C};
    EXPECT_EQ(b8_conv2d_s8_channels(&conv, &quant, &in_dims, input, 0, &filter_dims, packed, bias, &out_dims, shared,
                                    NULL, &off_block, scratch), B8_ERROR_ARGUMENT);
  }
  const b8_channels past_end = {0, OUT_C + 1}, reversed = {OUT_C, 0};
  EXPECT_EQ(b8_conv2d_s8_channels(&conv, &quant, &in_dims, input, 0, &filter_dims, packed, bias, &out_dims, shared,
                                  NULL, &past_end, scratch), B8_ERROR_ARGUMENT);
  EXPECT_EQ(b8_conv2d_s8_channels(&conv, &quant, &in_dims, input, 0, &filter_dims, packed, bias, &out_dims, shared,
                                  NULL, &reversed, scratch), B8_ERROR_ARGUMENT);
}

static void test_max_pool_ignores_padding(void) {
  const int8_t input[4] = {-100, -90, -80, -70};
  const b8_pool_params pool = {2, 2, 2, 2, 1, 1, 1, 1};
  const b8_dims in_dims = {1, 2, 2, 1}, out_dims = {1, 2, 2, 1};
  int8_t output[4];
  EXPECT_EQ(b8_max_pool2d_s8(&pool, &in_dims, input, &out_dims, output, NULL), B8_OK);
  EXPECT_EQ(output[0], -100);
  EXPECT_EQ(output[1], -90);
  EXPECT_EQ(output[2], -80);
  EXPECT_EQ(output[3], -70);
  /* Dilation 4 on a 3x3 input, padding 1: the one window's taps (-1 and 3 on each axis) all lie
   * in the padding. Its maximum over no values is the lowest code. */
  const int8_t square[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const b8_pool_params dilated = {2, 2, 1, 1, 1, 1, 4, 4};
  const b8_dims square_dims = {1, 3, 3, 1}, one = {1, 1, 1, 1};
  output[0] = 0;
  EXPECT_EQ(b8_max_pool2d_s8(&dilated, &square_dims, square, &one, output, NULL), B8_OK);
  EXPECT_EQ(output[0], -128);
  /* Padding 0: the taps (0, 0), (0, 4), (4, 0), (4, 4) leave one inside. */
  const b8_pool_params corner = {2, 2, 1, 1, 0, 0, 4, 4};
  EXPECT_EQ(b8_max_pool2d_s8(&corner, &square_dims, square, &one, output, NULL), B8_OK);
  EXPECT_EQ(output[0], 1);
  const b8_pool_params no_dilation = {2, 2, 1, 1, 0, 0, 0, 1};
  EXPECT_EQ(b8_max_pool2d_s8(&no_dilation, &square_dims, square, &one, output, NULL), B8_ERROR_ARGUMENT);
}

static void test_add_saturates(void) {
  /* Equal scales: each input is rescaled by 1/2 after the shift by 20; the output factor is
   * 2 / 2^20 = 2^30 * 2^(-18 - 31). */
  const b8_add_params params = {20, 1 << 30, 0, 1 << 30, 0, 1 << 30, -18, -128, 127, 0, 0, 0};
  const int8_t a[3] = {100, -100, 3}, b[3] = {100, -100, -4};
  int8_t out[3];
  EXPECT_EQ(b8_add_s8(&params, 3, a, b, out), B8_OK);
  EXPECT_EQ(out[0], 127);
  EXPECT_EQ(out[1], -128);
  EXPECT_EQ(out[2], -1);
  /* Zero points: (3 - 10) + (-4 - (-20)) = 9, plus the output zero point -100. */
  const b8_add_params offsets = {20, 1 << 30, 0, 1 << 30, 0, 1 << 30, -18, -128, 127, 10, -20, -100};
  EXPECT_EQ(b8_add_s8(&offsets, 3, a, b, out), B8_OK);
  EXPECT_EQ(out[2], -91);
}

/* b8_pair_lut_s8 with a table of b8_add_s8 at every input pair gives b8_add_s8's results, at
 * every length (SIMD steps and tails) and with the table's padding bytes set to anything. */
static void test_pair_table_equals_the_add(void) {
  static int8_t first[65536], second[65536], table[B8_PAIR_TABLE_BYTES];
  for (int32_t i = 0; i < 65536; ++i) {
    first[i] = (int8_t)(i / 256 - 128);
    second[i] = (int8_t)(i % 256 - 128);
  }
  const b8_add_params params = {20, 1518500250, -1, 1073741824, 0, 1686629713, -19, -100, 120, -128, 7, -5};
  EXPECT_EQ(b8_add_s8(&params, 65536, first, second, table), B8_OK);
  memset(table + 65536, 0x5a, 3);
  int8_t a[203], b[203], by_table[204], by_add[203];
  unsigned state = 12345;
  for (int32_t i = 0; i < 203; ++i) {
    state = state * 1103515245u + 12345u;
    a[i] = (int8_t)(state >> 16);
    b[i] = (int8_t)(state >> 24);
  }
  a[0] = b[0] = 127; /* the last entry, next to the padding */
  a[1] = b[1] = -128;
  for (int32_t size = 0; size <= 203; size += 29) {
    memset(by_table, 0, sizeof(by_table));
    EXPECT_EQ(b8_pair_lut_s8(size, table, a, b, by_table), B8_OK);
    EXPECT_EQ(b8_add_s8(&params, size, a, b, by_add), B8_OK);
    EXPECT_EQ(memcmp(by_table, by_add, (size_t)size), 0);
    EXPECT_EQ(by_table[size], 0); /* nothing written past the end */
  }
  EXPECT_EQ(b8_pair_lut_s8(-1, table, a, b, by_table), B8_ERROR_ARGUMENT);
}

static void test_global_avg_pool(void) {
  const int8_t input[8] = {1, 10, 2, 20, 3, 30, 5, 40}; /* 2x2 pixels, 2 channels */
  const b8_dims dims = {1, 2, 2, 2};
  int8_t out[2];
  /* x1/4 = 2^30 * 2^(-1 - 31) */
  EXPECT_EQ(b8_global_avg_pool_s8(1 << 30, -1, 0, 0, &dims, input, out), B8_OK);
  EXPECT_EQ(out[0], 3);  /* 11 / 4 = 2.75 */
  EXPECT_EQ(out[1], 25); /* 100 / 4 */
  /* Input zero point 1, output zero point -7: (11 - 4) / 4 = 1.75 -> 2, then -7. */
  EXPECT_EQ(b8_global_avg_pool_s8(1 << 30, -1, 1, -7, &dims, input, out), B8_OK);
  EXPECT_EQ(out[0], -5);
}

/* 2x2 windows, stride 2, padding 1 on a 2x2 input: each window holds one input value. */
static void test_avg_pool_counts(void) {
  const int8_t input[4] = {9, -9, 6, 7};
  const b8_pool_params pool = {2, 2, 2, 2, 1, 1, 1, 1};
  const b8_dims dims = {1, 2, 2, 1};
  int8_t out[4];
  EXPECT_EQ(b8_avg_pool2d_s8(&pool, 0, 0, &dims, input, &dims, out), B8_OK);
  EXPECT_EQ(out[0], 9);
  EXPECT_EQ(out[1], -9);
  /* Counting the padding, which holds the zero point 1: (-9 + 3) / 4 = -1.5. */
  EXPECT_EQ(b8_avg_pool2d_s8(&pool, 1, 1, &dims, input, &dims, out), B8_OK);
  EXPECT_EQ(out[0], 3); /* (9 + 3) / 4 */
  EXPECT_EQ(out[1], B8_TIES_AWAY ? -2 : -1);
}

static void test_dense_and_layout(void) {
  const int8_t input[3] = {1, -2, 3}, weights[6] = {1, 1, 1, 2, 0, -1};
  const int32_t bias[2] = {0, 5}, multiplier[2] = {1 << 30, 1 << 30}, shift[2] = {1, 1};
  const b8_requant_params quant = {multiplier, shift, 0, 127, 0}; /* relu */
  int8_t out[2];
  EXPECT_EQ(b8_dense_s8(&quant, 1, 3, 2, input, weights, bias, out), B8_OK);
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 4);

  const int8_t nhwc[6] = {1, 2, 3, 4, 5, 6}; /* h=1, w=3, c=2 */
  const int32_t shape[4] = {1, 1, 3, 2}, to_nchw[4] = {0, 3, 1, 2};
  int8_t nchw[6];
  EXPECT_EQ(b8_transpose_s8(4, shape, to_nchw, nhwc, nchw), B8_OK);
  const int8_t expected[6] = {1, 3, 5, 2, 4, 6};
  EXPECT_EQ(memcmp(nchw, expected, 6), 0);

  /* Pad a 2x2 by one row above and one column after, with 9. */
  const int8_t square[4] = {1, 2, 3, 4};
  const int32_t square_shape[2] = {2, 2}, pads[4] = {1, 0, 0, 1};
  int8_t padded[9];
  EXPECT_EQ(b8_pad_s8(2, square_shape, pads, 9, square, padded), B8_OK);
  const int8_t expected_pad[9] = {9, 9, 9, 1, 2, 9, 3, 4, 9};
  EXPECT_EQ(memcmp(padded, expected_pad, 9), 0);

  int8_t clipped[4];
  EXPECT_EQ(b8_clip_s8(4, 2, 3, square, clipped), B8_OK);
  EXPECT_EQ(clipped[0], 2);
  EXPECT_EQ(clipped[3], 3);
}

/* Depthwise 1x1 with channel multiplier 2: output channels 0, 1 read input 0; 2, 3 read input 1. */
static void test_depthwise_multiplier(void) {
  const int8_t input[2] = {10, -20};
  const int8_t filter[4] = {1, 2, 3, -1}; /* (1, 1, 4) */
  const int32_t multiplier[4] = {1 << 30, 1 << 30, 1 << 30, 1 << 30}, shift[4] = {1, 1, 1, 1};
  const b8_conv_params conv = {1, 1, 0, 0, 1, 1, 2, 0};
  const b8_requant_params quant = {multiplier, shift, -128, 127, 0};
  const b8_dims in_dims = {1, 1, 1, 2}, filter_dims = {1, 1, 1, 4}, out_dims = {1, 1, 1, 4};
  int8_t out[4];
  EXPECT_EQ(b8_depthwise_conv2d_s8(&conv, &quant, &in_dims, input, &filter_dims, filter, NULL,
                                   &out_dims, out, NULL), B8_OK);
  EXPECT_EQ(out[0], 10);
  EXPECT_EQ(out[1], 20);
  EXPECT_EQ(out[2], -60);
  EXPECT_EQ(out[3], 20);
}

/* Depthwise 3x3, multiplier 1, stride 1, padding 1 on a 4x9 input of 20 channels: AVX-512 runs a
 * block of 16 channels and a masked one of 4, AVX2 two of 8 and a last one over channels 12-19,
 * through every edge and the interior (four pixels at once, then one by one). Each output is
 * checked against its sum worked out tap by tap (padded taps read the pad value -3) through
 * b8_requantize; then with one channel shifted left (its block's scalar output stage), and over
 * pixels 10-14 alone (a run that starts and ends mid-row: nothing else is written). */
enum { B8_DW_H = 4, B8_DW_W = 9, B8_DW_C = 20 };

static void check_depthwise_outputs(const int8_t* input, const int8_t* filter, const int32_t* bias,
                                    const b8_requant_params* quant, const int8_t* output, int32_t begin,
                                    int32_t end, int8_t fill) {
  for (int32_t pixel = 0; pixel < B8_DW_H * B8_DW_W; ++pixel) {
    const int32_t oy = pixel / B8_DW_W, ox = pixel % B8_DW_W;
    for (int32_t c = 0; c < B8_DW_C; ++c) {
      int32_t acc = bias[c];
      for (int32_t ky = 0; ky < 3; ++ky)
        for (int32_t kx = 0; kx < 3; ++kx) {
          const int32_t iy = oy - 1 + ky, ix = ox - 1 + kx;
          const int inside = iy >= 0 && iy < B8_DW_H && ix >= 0 && ix < B8_DW_W;
          const int32_t x = inside ? input[(iy * B8_DW_W + ix) * B8_DW_C + c] : -3;
          acc += x * filter[(ky * 3 + kx) * B8_DW_C + c];
        }
      const int8_t want = pixel < begin || pixel >= end
                              ? fill
                              : b8_clamp_s8(b8_requantize(acc, quant->multiplier[c], quant->shift[c]) +
                                                quant->output_zero_point, quant->act_min, quant->act_max);
      EXPECT_EQ(output[pixel * B8_DW_C + c], want);
    }
  }
}

static void test_depthwise_channel_blocks(void) {
  int8_t input[B8_DW_H * B8_DW_W * B8_DW_C], filter[9 * B8_DW_C], output[B8_DW_H * B8_DW_W * B8_DW_C];
  int32_t bias[B8_DW_C], multiplier[B8_DW_C], shift[B8_DW_C];
  for (int32_t i = 0; i < B8_DW_H * B8_DW_W * B8_DW_C; ++i) input[i] = (int8_t)((i * 37) % 256 - 128);
  for (int32_t i = 0; i < 9 * B8_DW_C; ++i) filter[i] = (int8_t)((i * 53) % 255 - 127);
  for (int32_t c = 0; c < B8_DW_C; ++c) {
    bias[c] = 100 * c - 1000;
    multiplier[c] = (1 << 30) + c * 12345;
    shift[c] = -8;
  }
  const b8_conv_params conv = {1, 1, 1, 1, 1, 1, B8_DW_C, -3};
  const b8_requant_params quant = {multiplier, shift, -128, 127, 4};
  const b8_dims in_dims = {1, B8_DW_H, B8_DW_W, B8_DW_C}, filter_dims = {1, 3, 3, B8_DW_C};
  const b8_dims out_dims = {1, B8_DW_H, B8_DW_W, B8_DW_C};
  EXPECT_EQ(b8_depthwise_conv2d_s8(&conv, &quant, &in_dims, input, &filter_dims, filter, bias, &out_dims,
                                   output, NULL), B8_OK);
  check_depthwise_outputs(input, filter, bias, &quant, output, 0, B8_DW_H * B8_DW_W, 0);
  shift[13] = 2;
  EXPECT_EQ(b8_depthwise_conv2d_s8(&conv, &quant, &in_dims, input, &filter_dims, filter, bias, &out_dims,
                                   output, NULL), B8_OK);
  check_depthwise_outputs(input, filter, bias, &quant, output, 0, B8_DW_H * B8_DW_W, 0);
  shift[13] = -8;
  const b8_pixels mid_row = {10, 15};
  memset(output, 0x55, sizeof output);
  EXPECT_EQ(b8_depthwise_conv2d_s8(&conv, &quant, &in_dims, input, &filter_dims, filter, bias, &out_dims,
                                   output, &mid_row), B8_OK);
  check_depthwise_outputs(input, filter, bias, &quant, output, 10, 15, 0x55);
}

static void test_boundary_conversions(void) {
  const float x[4] = {0.25f, -0.75f, 100.0f, 1.25f};
  int8_t q[4];
  float back[4];
  EXPECT_EQ(b8_quantize_f32(0.5f, 0, NULL, 4, x, q), B8_OK);
  EXPECT_EQ(q[0], B8_TIES_AWAY ? 1 : 0);   /* 0.5: half to even, or away from zero */
  EXPECT_EQ(q[1], -2);                     /* -1.5 -> -2 either way */
  EXPECT_EQ(q[2], 127);                    /* saturates */
  EXPECT_EQ(q[3], B8_TIES_AWAY ? 3 : 2);   /* 2.5 */
  EXPECT_EQ(b8_dequantize_f32(0.5f, 0, NULL, 4, q, back), B8_OK);
  EXPECT_EQ(back[1] == -1.0f, 1);
  /* With a zero point of -128: real 0 is -128, and the top saturates 128 codes higher. */
  EXPECT_EQ(b8_quantize_f32(0.5f, -128, NULL, 4, x, q), B8_OK);
  EXPECT_EQ(q[0], B8_TIES_AWAY ? -127 : -128);
  EXPECT_EQ(q[1], -128); /* clamped below */
  EXPECT_EQ(q[3], B8_TIES_AWAY ? -125 : -126);
  EXPECT_EQ(b8_dequantize_f32(0.5f, -128, NULL, 4, q, back), B8_OK);
  EXPECT_EQ(back[3] == (B8_TIES_AWAY ? 1.5f : 1.0f), 1);
  const float bad[2] = {1.0f, 0.0f / 0.0f};
  EXPECT_EQ(b8_quantize_f32(1.0f, 0, NULL, 2, bad, q), B8_ERROR_ARGUMENT);
  EXPECT_EQ(b8_quantize_f32(1.0f, -128, NULL, 2, bad, q), B8_ERROR_ARGUMENT); /* no overflow either */
  EXPECT_EQ(b8_quantize_f32(1e-45f, 0, NULL, 2, x, q), B8_ERROR_ARGUMENT); /* 1 / scale overflows */
  EXPECT_EQ(b8_quantize_f32(1.0f / 0.0f, 0, NULL, 2, x, q), B8_ERROR_ARGUMENT);
  /* NCHW (1 image, 2 channels, 3 rows of 2) into NHWC, whole and as two ranges of rows. */
  const float image[12] = {0, 1, 2, 3, 4, 5, -1, -2, -3, -4, -5, -6};
  const b8_dims dims = {1, 3, 2, 2};
  const b8_pixels top = {0, 1}, rest = {1, 3};
  int8_t whole[12], split[12];
  EXPECT_EQ(b8_quantize_f32(1.0f, 0, &dims, 12, image, whole), B8_OK);
  EXPECT_EQ(whole[0] == 0 && whole[1] == -1 && whole[2] == 1 && whole[3] == -2, 1); /* pixel (0, 0), (0, 1) */
  memset(split, 0x55, sizeof split);
  EXPECT_EQ(b8_quantize_f32_rows(1.0f, 0, &dims, &top, image, split), B8_OK);
  EXPECT_EQ(memcmp(split, whole, 4) == 0 && split[4] == 0x55, 1); /* row 0 alone */
  EXPECT_EQ(b8_quantize_f32_rows(1.0f, 0, &dims, &rest, image, split), B8_OK);
  EXPECT_EQ(memcmp(split, whole, sizeof whole), 0);
  EXPECT_EQ(b8_quantize_f32_rows(1.0f, 0, NULL, &top, image, split), B8_ERROR_ARGUMENT); /* rows need dims */
}

/* Whether this CPU runs the instructions the kernels were compiled for; the build is tested only
 * where it does (exit code 77: ctest reports the test as skipped; its output says why). */
static int b8_cpu_runs_this_build(void) {
#if B8_USE_AVX512VNNI
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#elif B8_USE_AVXVNNI
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avxvnni");
#elif B8_USE_AVX512BW
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#elif B8_USE_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 1;
#endif
}

int main(void) {
  if (!b8_cpu_runs_this_build()) {
    printf("skipped: this CPU lacks the instructions of this kernel build (%s)\n",
           B8_USE_AVX512VNNI ? "AVX-512 VNNI"
           : B8_USE_AVXVNNI  ? "AVX-VNNI"
           : B8_USE_AVX512BW ? "AVX-512BW"
                             : "AVX2 + FMA");
    return 77;
  }
  test_requantize();
  test_requantize_pow2();
  test_conv2d_padding_and_stride();
  test_conv2d_channel_shares();
  test_max_pool_ignores_padding();
  test_add_saturates();
  test_pair_table_equals_the_add();
  test_global_avg_pool();
  test_avg_pool_counts();
  test_dense_and_layout();
  test_depthwise_multiplier();
  test_depthwise_channel_blocks();
  test_boundary_conversions();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all kernel checks passed\n");
  return 0;
}
