/* The float estimate of the output stage (b8_estimate_x8 / _x16 in internal.h) against
 * b8_requantize: every lane it calls sure must clamp to the exact int8, over random factors,
 * shifts and zero points, accumulators over the whole int32 range, small ones, and ones placed
 * at and around every kind of tie (where the estimate must call itself unsure). It must also be
 * sure almost everywhere, or the fast path would be a slow one. */
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

int main(void) {
#if B8_USE_AVX512VNNI
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni")) {
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
  if (wrong) return 1;
  /* Sure almost everywhere at random, and unsure often where ties are. */
  if (unsure * 200 > lanes || tie_unsure * 20 < tie_lanes) {
    fprintf(stderr, "unexpected unsure rates\n");
    return 1;
  }
  return 0;
}
