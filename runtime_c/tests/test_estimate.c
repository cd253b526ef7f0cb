/* The float estimate of the output stage (b8_estimate_x8 / _x16 in internal.h) against
 * b8_requantize: every lane it calls sure must clamp to the exact int8, over random factors,
 * shifts and zero points, accumulators over the whole int32 range, small ones, and ones placed
 * at and around every kind of tie (where the estimate must call itself unsure). It must also be
 * sure almost everywhere, or the fast path would be a slow one. The same for the add's estimate
 * (b8_add_estimate_x8 / _x16) at every pair of codes, against b8_add_s8's scalar path. */
#include <stdio.h>

#include "byoc_int8.h"
#include "internal.h"

#if B8_USE_AVX512VNNI
enum { LANES = 16 };
#else
enum { LANES = 8 };
#endif

static uint32_t state = 2463534242u;
static uint32_t next_random(void) { /* xorshift32 */
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state;
}

static int32_t clamp_s8(int64_t v) { return v < -128 ? -128 : v > 127 ? 127 : (int32_t)v; }

/* Runs the estimate on one vector; counts the lanes that are sure and wrong, and the unsure. */
static void check_vector(const int32_t* acc, const int32_t* multiplier, const int32_t* shift, int32_t zero_point,
                         long* wrong, long* unsure_lanes) {
  int32_t estimate[LANES], unsure[LANES];
#if B8_USE_AVX512VNNI
  b8_estimate_x16_params p;
  b8_estimate_prepare_x16(_mm512_loadu_si512((const void*)multiplier), _mm512_loadu_si512((const void*)shift),
                          zero_point, &p);
  __mmask16 mask = 0;
  _mm512_storeu_si512((void*)estimate, b8_estimate_x16(_mm512_loadu_si512((const void*)acc), &p, &mask));
  for (int i = 0; i < LANES; ++i) unsure[i] = (mask >> i) & 1;
#else
  b8_estimate_x8_params p;
  b8_estimate_prepare_x8(_mm256_loadu_si256((const __m256i*)multiplier), _mm256_loadu_si256((const __m256i*)shift),
                         zero_point, &p);
  __m256i mask = _mm256_setzero_si256();
  _mm256_storeu_si256((__m256i*)estimate, b8_estimate_x8(_mm256_loadu_si256((const __m256i*)acc), &p, &mask));
  _mm256_storeu_si256((__m256i*)unsure, mask);
#endif
  for (int i = 0; i < LANES; ++i) {
    if (unsure[i]) {
      ++*unsure_lanes;
      continue;
    }
    const int32_t exact = clamp_s8(b8_requantize(acc[i], multiplier[i], shift[i]) + zero_point);
    if (clamp_s8(estimate[i]) != exact) {
      if (*wrong < 10)
        fprintf(stderr, "acc %d x %d shift %d zero point %d: estimate %d, exact %d\n", acc[i], multiplier[i],
                shift[i], zero_point, estimate[i], exact);
      ++*wrong;
    }
  }
}

/* An accumulator whose real result r = acc x M / 2^(31 - shift) is close to `target` (so that
 * r + zero point lands near a tie or a TFLite boundary), plus `delta`. */
static int32_t accumulator_near(double target, int32_t multiplier, int32_t shift, int32_t delta) {
  const double acc = target * (double)(1LL << 31) / multiplier * (double)(1LL << -shift);
  const double clamped = acc > 2.1e9 ? 2.1e9 : acc < -2.1e9 ? -2.1e9 : acc;
  return (int32_t)clamped + delta;
}

/* The add's estimate at every pair of codes against b8_add_s8 one value at a time (its scalar
 * path); b8_add_s8 on all pairs at once (its vector paths) must agree too. Counts the wrong lanes
 * (fatal) and the unsure ones; returns 0 where the estimate does not apply to `params`. */
static int check_add(const b8_add_params* params, long* wrong, long* unsure_lanes) {
  static int8_t first[65536], second[65536], exact[65536], vector[65536];
  for (int32_t i = 0; i < 65536; ++i) {
    first[i] = (int8_t)(i / 256 - 128);
    second[i] = (int8_t)(i % 256 - 128);
    b8_add_s8(params, 1, first + i, second + i, exact + i);
  }
  b8_add_s8(params, 65536, first, second, vector);
  for (int32_t i = 0; i < 65536; ++i) {
    if (vector[i] != exact[i] && ++*wrong <= 10)
      fprintf(stderr, "add of %d and %d: vector %d, scalar %d\n", first[i], second[i], vector[i], exact[i]);
  }
  b8_add_params vec = *params;
  b8_multiplier_form(&vec.input1_multiplier, &vec.input1_shift);
  b8_multiplier_form(&vec.input2_multiplier, &vec.input2_shift);
  b8_multiplier_form(&vec.output_multiplier, &vec.output_shift);
  b8_add_estimate estimate;
  if (vec.input1_shift > 0 || vec.input2_shift > 0 || vec.output_shift > 0 || !b8_add_estimate_prepare(&vec, &estimate))
    return 0;
  for (int32_t i = 0; i < 65536; i += LANES) {
    int32_t value[LANES], unsure[LANES];
#if B8_USE_AVX512VNNI
    const b8_add_estimate_x16_params p = b8_add_estimate_prepare_x16(&estimate);
    __mmask16 mask = 0;
    _mm512_storeu_si512((void*)value, b8_add_estimate_x16(b8_load_s8x16(first + i), b8_load_s8x16(second + i), &p, &mask));
    for (int k = 0; k < LANES; ++k) unsure[k] = (mask >> k) & 1;
#else
    const b8_add_estimate_x8_params p = b8_add_estimate_prepare_x8(&estimate);
    for (int k = 0; k < LANES; ++k) {
      int lane_unsure = 0; /* the vector's flag is for any lane: ask lane by lane */
      int8_t a[8], b[8];
      for (int j = 0; j < 8; ++j) a[j] = first[i + k], b[j] = second[i + k];
      int32_t lanes[8];
      _mm256_storeu_si256((__m256i*)lanes, b8_add_estimate_x8(b8_load_s8x8(a), b8_load_s8x8(b), &p, &lane_unsure));
      value[k] = lanes[0];
      unsure[k] = lane_unsure != 0;
    }
#endif
    for (int k = 0; k < LANES; ++k) {
      if (unsure[k]) {
        ++*unsure_lanes;
      } else if (b8_clamp_s8(value[k], params->act_min, params->act_max) != exact[i + k] && ++*wrong <= 10) {
        fprintf(stderr, "add of %d and %d: estimate %d, exact %d\n", first[i + k], second[i + k], value[k], exact[i + k]);
      }
    }
  }
  return 1;
}

static void test_add(long* wrong) {
  /* TFLite's rescales of scales 0.045, 0.031 and 0.052: sure almost everywhere. */
  const b8_add_params typical = {20, 1518500250, -1, 1073741824, 0, 1686629713, -19, -128, 127, -128, 7, -5};
  long unsure = 0;
  if (!check_add(&typical, wrong, &unsure) || unsure * 100 > 65536) {
    fprintf(stderr, "typical add: estimate unused or unsure at %ld of 65536 pairs\n", unsure);
    ++*wrong;
  }
  printf("add with TFLite's typical factors: unsure at %ld of 65536 pairs\n", unsure);
  /* Power-of-two factors, output (d1 + d2) / 2: a tie at every odd sum, all unsure. */
  const b8_add_params ties = {20, B8_SHIFT_ONLY, -1, B8_SHIFT_ONLY, -1, B8_SHIFT_ONLY, -20, -100, 120, 3, -4, 1};
  unsure = 0;
  if (!check_add(&ties, wrong, &unsure) || unsure < 32768) {
    fprintf(stderr, "add with ties: unsure at %ld of 65536 pairs\n", unsure);
    ++*wrong;
  }
  /* Random factors and shifts around TFLite's, and left shifts below 9 (the 64-bit rescales; with
   * so few fraction bits the sums' own rounding error exceeds the margin: no estimate). TFLite's
   * left shift of 20 must always have it. */
  long used = 0, sets = 0;
  for (long set = 0; set < 60; ++set) {
    const int32_t left_shift = set % 6 == 0 ? (int32_t)(next_random() % 9) : 20;
    const int32_t output_shift = -(left_shift - 1) + (int32_t)(next_random() % 7) - 3;
    b8_add_params random = {left_shift,
                            (int32_t)((1u << 30) + next_random() % (1u << 30)), -(int32_t)(next_random() % 4),
                            (int32_t)((1u << 30) + next_random() % (1u << 30)), -(int32_t)(next_random() % 4),
                            (int32_t)((1u << 30) + next_random() % (1u << 30)), output_shift > 0 ? 0 : output_shift,
                            -128, 127, (int32_t)(next_random() % 256) - 128, (int32_t)(next_random() % 256) - 128,
                            (int32_t)(next_random() % 256) - 128};
    unsure = 0;
    const int applies = check_add(&random, wrong, &unsure);
    if (left_shift == 20) {
      used += applies;
      ++sets;
    }
  }
  printf("add: estimate used for %ld of %ld random parameter sets with left shift 20; %ld wrong\n", used, sets, *wrong);
  if (used < sets) {
    fprintf(stderr, "add estimate rarely applies\n");
    ++*wrong;
  }
}

int main(void) {
#if B8_USE_AVX512VNNI
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni")) {
#elif B8_USE_AVXVNNI
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avxvnni")) {
#elif B8_USE_AVX512BW
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq")) {
#else
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
#endif
    printf("skipped: this CPU lacks the instructions of this kernel build\n");
    return 77;
  }
  long wrong = 0, unsure = 0, lanes = 0, tie_unsure = 0, tie_lanes = 0;
  static const int32_t edge_multipliers[] = {1 << 30, INT32_MAX, (1 << 30) + 1, 1, 1245540515, 1 << 29, 0, -(1 << 30)};
  for (int32_t round = 0; round < 20000; ++round) {
    int32_t multiplier[LANES], shift[LANES], acc[LANES];
    const int32_t zero_point = (int32_t)(next_random() % 256) - 128;
    for (int i = 0; i < LANES; ++i) {
      const uint32_t pick = next_random();
      multiplier[i] = pick % 4 == 0 ? edge_multipliers[next_random() % 8]
                                    : (int32_t)((1u << 30) + next_random() % (1u << 30));
      shift[i] = -(int32_t)(next_random() % 32); /* 0 .. -31 */
    }
    /* Random accumulators: over all of int32, and small ones. */
    for (int i = 0; i < LANES; ++i) acc[i] = round % 2 ? (int32_t)next_random() : (int32_t)(next_random() % 8193) - 4096;
    check_vector(acc, multiplier, shift, zero_point, &wrong, &unsure);
    lanes += LANES;
    /* Near ties: r + zero point within a few steps of k + 1/2 (and of k + 1/2 +- the TFLite
     * nudge 2^(shift - 1)) for results k inside the int8 range. */
    for (int32_t delta = -3; delta <= 3; ++delta) {
      for (int i = 0; i < LANES; ++i) {
        const int32_t k = (int32_t)(next_random() % 256) - 128 - zero_point;
        const int32_t kind = (int32_t)(next_random() % 3);
        const double nudge = kind == 0 ? 0.0 : (kind == 1 ? 1.0 : -1.0) / (double)(2LL << -shift[i]);
        acc[i] = multiplier[i] > 0 ? accumulator_near(k + 0.5 + nudge, multiplier[i], shift[i], delta)
                                   : (int32_t)next_random();
      }
      check_vector(acc, multiplier, shift, zero_point, &wrong, &tie_unsure);
      tie_lanes += LANES;
    }
  }
  printf("%ld random lanes: %ld unsure (%.4f%%); %ld lanes near ties: %ld unsure; %ld wrong\n", lanes, unsure,
         100.0 * unsure / lanes, tie_lanes, tie_unsure, wrong);
  test_add(&wrong);
  if (wrong) return 1;
  /* Sure almost everywhere at random, and unsure often where ties are. */
  if (unsure * 200 > lanes || tie_unsure * 20 < tie_lanes) {
    fprintf(stderr, "unexpected unsure rates\n");
    return 1;
  }
  return 0;
}
