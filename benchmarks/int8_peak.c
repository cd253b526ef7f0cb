/* The int8 multiply-accumulate peak of this machine, per ISA and thread count.
 *
 *     cc -O2 -pthread benchmarks/int8_peak.c -o int8_peak
 *     ./int8_peak [threads ...]        (default: 1)
 *
 * prints one line per ISA the CPU runs and thread count: "<isa> <threads> <GMAC/s>", where a MAC
 * is one u8 x s8 product added into an int32 accumulator (what an int8 convolution does):
 *
 *   avx2        vpmaddubsw (u8 x s8 -> pairs summed to s16) + vpmaddwd by ones (-> s32)
 *               + vpaddd: 32 MACs per 256-bit triple, 6 independent triples per iteration
 *   avx512bw    the same triple on zmm (AVX-512 without VNNI): 64 MACs per triple, 8 per iteration
 *   avxvnni     vpdpbusd ymm (VEX): 32 MACs per instruction, 12 accumulators
 *   avx512vnni  vpdpbusd zmm: 64 MACs per instruction, 16 accumulators
 *   amx         tdpbssd (AMX-INT8 tiles): 16384 MACs per instruction, 4 accumulator tiles
 *
 * Each ISA's loop is compiled for that ISA alone (function target attributes), so the binary
 * needs no -m flags and runs anywhere; an ISA the CPU lacks is skipped. The operands are
 * loop-invariant, so an empty asm statement tells the compiler they change every iteration
 * (no instruction is emitted for it): nothing is hoisted out of the loop. The AVX2 and AVX-512BW
 * loops are assembly themselves (see avx2_loop). The AMX loop keeps its operands in tiles loaded
 * once before the loop; each thread configures its own tiles, and Linux must first grant the
 * process the tile data state (arch_prctl, see has_amx), else amx is skipped. Each thread (pthreads,
 * not pinned) runs the same number of iterations; GMAC/s = all MACs / wall time from a common
 * start to the last thread's end, the best of 5 repetitions of ~0.2 s.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHANGES(v) __asm__ volatile("" : "+x"(v))
#define CHANGES_Z(v) __asm__ volatile("" : "+v"(v))

static volatile int64_t sink;

/* Accumulators are named variables (not an array), so that they stay in registers at -O2. */
#define REP4(X) X(0) X(1) X(2) X(3)
#define REP6(X) REP4(X) X(4) X(5)
#define REP8(X) REP6(X) X(6) X(7)
#define REP12(X) REP6(X) X(6) X(7) X(8) X(9) X(10) X(11)
#define REP16(X) REP12(X) X(12) X(13) X(14) X(15)

/* In the AVX2 and AVX-512BW loops' assembly: acc += vpmaddwd(vpmaddubsw(a, b), ones), through a
 * scratch register t (two, alternating: renamed, so the triples stay independent). */
#define MADD_TRIPLE(acc, a, b, t)                \
  "vpmaddubsw %[" b "], %[" a "], %%" t "\n\t" \
  "vpmaddwd %[ones], %%" t ", %%" t "\n\t"     \
  "vpaddd %%" t ", %[" acc "], %[" acc "]\n\t"

/* 6 accumulators; operands from 2 x 3 registers so that no two products are the same value.
 * The loop is written in assembly: compiled from intrinsics, GCC 12 keeps copies of some
 * operands on the stack at -O1 and reloads them every iteration, and that store-to-load chain
 * (not the multiplier) then bounds the loop at about 0.63 of the peak on Zen 4. */
__attribute__((target("avx2"))) static void avx2_loop(uint64_t iters) {
  __m256i a0 = _mm256_set1_epi8(3), a1 = _mm256_set1_epi8(5);
  __m256i b0 = _mm256_set1_epi8(-7), b1 = _mm256_set1_epi8(11), b2 = _mm256_set1_epi8(13);
  const __m256i ones = _mm256_set1_epi16(1);
#define DECL(k) __m256i c##k = _mm256_set1_epi32(k);
  REP6(DECL)
#undef DECL
  if (iters)
    __asm__ volatile("1:\n\t"
                     MADD_TRIPLE("c0", "a0", "b0", "ymm14") MADD_TRIPLE("c1", "a0", "b1", "ymm15")
                     MADD_TRIPLE("c2", "a0", "b2", "ymm14") MADD_TRIPLE("c3", "a1", "b0", "ymm15")
                     MADD_TRIPLE("c4", "a1", "b1", "ymm14") MADD_TRIPLE("c5", "a1", "b2", "ymm15")
                     "dec %[n]\n\t"
                     "jnz 1b"
                     : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4),
                       [c5] "+x"(c5), [n] "+r"(iters)
                     : [a0] "x"(a0), [a1] "x"(a1), [b0] "x"(b0), [b1] "x"(b1), [b2] "x"(b2), [ones] "x"(ones)
                     : "xmm14", "xmm15", "cc");
  __m256i s = _mm256_setzero_si256();
#define SUM(k) s = _mm256_add_epi32(s, c##k);
  REP6(SUM)
#undef SUM
  sink += _mm256_extract_epi32(s, 0);
}

/* avx2_loop on zmm: 8 accumulators, operands from 2 x 4 registers, in assembly for the same reason. */
__attribute__((target("avx512f,avx512bw"))) static void avx512bw_loop(uint64_t iters) {
  __m512i a0 = _mm512_set1_epi8(3), a1 = _mm512_set1_epi8(5);
  __m512i b0 = _mm512_set1_epi8(-7), b1 = _mm512_set1_epi8(11), b2 = _mm512_set1_epi8(13), b3 = _mm512_set1_epi8(17);
  const __m512i ones = _mm512_set1_epi16(1);
#define DECL(k) __m512i c##k = _mm512_set1_epi32(k);
  REP8(DECL)
#undef DECL
  if (iters)
    __asm__ volatile("1:\n\t"
                     MADD_TRIPLE("c0", "a0", "b0", "zmm30") MADD_TRIPLE("c1", "a0", "b1", "zmm31")
                     MADD_TRIPLE("c2", "a0", "b2", "zmm30") MADD_TRIPLE("c3", "a0", "b3", "zmm31")
                     MADD_TRIPLE("c4", "a1", "b0", "zmm30") MADD_TRIPLE("c5", "a1", "b1", "zmm31")
                     MADD_TRIPLE("c6", "a1", "b2", "zmm30") MADD_TRIPLE("c7", "a1", "b3", "zmm31")
                     "dec %[n]\n\t"
                     "jnz 1b"
                     : [c0] "+v"(c0), [c1] "+v"(c1), [c2] "+v"(c2), [c3] "+v"(c3), [c4] "+v"(c4),
                       [c5] "+v"(c5), [c6] "+v"(c6), [c7] "+v"(c7), [n] "+r"(iters)
                     : [a0] "v"(a0), [a1] "v"(a1), [b0] "v"(b0), [b1] "v"(b1), [b2] "v"(b2), [b3] "v"(b3),
                       [ones] "v"(ones)
                     : "xmm30", "xmm31", "cc");
  __m512i s = _mm512_setzero_si512();
#define SUM(k) s = _mm512_add_epi32(s, c##k);
  REP8(SUM)
#undef SUM
  sink += _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2,avxvnni"))) static void avxvnni_loop(uint64_t iters) {
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-7);
#define DECL(k) __m256i c##k = _mm256_set1_epi32(k);
  REP12(DECL)
#undef DECL
  for (uint64_t i = 0; i < iters; ++i) {
    CHANGES(a); CHANGES(b);
#define MAC(k) c##k = _mm256_dpbusd_avx_epi32(c##k, a, b);
    REP12(MAC)
#undef MAC
  }
  __m256i s = _mm256_setzero_si256();
#define SUM(k) s = _mm256_add_epi32(s, c##k);
  REP12(SUM)
#undef SUM
  sink += _mm256_extract_epi32(s, 0);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void avx512vnni_loop(uint64_t iters) {
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-7);
#define DECL(k) __m512i c##k = _mm512_set1_epi32(k);
  REP16(DECL)
#undef DECL
  for (uint64_t i = 0; i < iters; ++i) {
    CHANGES_Z(a); CHANGES_Z(b);
#define MAC(k) c##k = _mm512_dpbusd_epi32(c##k, a, b);
    REP16(MAC)
#undef MAC
  }
  __m512i s = _mm512_setzero_si512();
#define SUM(k) s = _mm512_add_epi32(s, c##k);
  REP16(SUM)
#undef SUM
  sink += _mm512_reduce_add_epi32(s);
}

/* Tile configuration, palette 1 (the 64-byte operand of ldtilecfg). */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
} tilecfg_t;

/* 2 x 2 independent tdpbssd (s8 x s8 products, 16 x 16 x 64 MACs each): accumulators tmm0-3,
 * A operands tmm4-5 and B operands tmm6-7, all 16 rows x 64 bytes. The tile intrinsics are
 * volatile (GCC: asm volatile; clang: side effects), so nothing is hoisted out of the loop. The
 * tile configuration is per-thread state: every call (every thread) loads it, and releases the
 * tiles at the end. */
__attribute__((target("amx-tile,amx-int8"))) static void amx_loop(uint64_t iters) {
  tilecfg_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  int8_t ab[4][16][64]; /* tmm4, tmm5, tmm6, tmm7 */
  memset(ab[0], 3, sizeof ab[0]);
  memset(ab[1], 5, sizeof ab[1]);
  memset(ab[2], -7, sizeof ab[2]);
  memset(ab[3], 11, sizeof ab[3]);
  /* GCC's ldtilecfg and tileloadd statements name only the first 8 bytes and the address (not
   * the memory they read): this makes all of cfg and ab be written before them. */
  __asm__ volatile("" : : "m"(cfg), "m"(ab));
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab[0], 64);
  _tile_loadd(5, ab[1], 64);
  _tile_loadd(6, ab[2], 64);
  _tile_loadd(7, ab[3], 64);
  for (uint64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  int32_t c[4][16][16];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  _tile_release();
  sink += c[0][0][0] + c[1][0][0] + c[2][0][0] + c[3][0][0];
}

typedef struct {
  const char *name;
  int (*supported)(void);
  void (*loop)(uint64_t);
  double macs_per_iter;
} isa_t;

static int has_avx2(void) { return __builtin_cpu_supports("avx2"); }
static int has_avxvnni(void) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  return __builtin_cpu_supports("avxvnni");
#else
  unsigned a, b, c, d; /* CPUID.(EAX=7,ECX=1):EAX[4] */
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
  return has_avx2() && ((a >> 4) & 1);
#endif
}
static int has_avx512bw(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
static int has_avx512vnni(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}
/* Linux (5.16+) gives a process the AMX tile data state only on request, once per process and
 * before the first tile instruction (else SIGILL): arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023,
 * XFEATURE_XTILEDATA = 18). */
static int has_amx(void) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  int cpu = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8");
#else
  unsigned a, b, c, d; /* CPUID.(EAX=7,ECX=0):EDX[24] AMX-TILE, EDX[25] AMX-INT8 */
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  int cpu = ((d >> 24) & 1) && ((d >> 25) & 1);
#endif
  if (!cpu) return 0;
#ifdef SYS_arch_prctl
  if (syscall(SYS_arch_prctl, 0x1023, 18) == 0) return 1;
#endif
  fprintf(stderr, "amx: the CPU has AMX but the OS does not grant the tile data state; skipped\n");
  return 0;
}

static const isa_t ISAS[] = {
    {"avx2", has_avx2, avx2_loop, 6 * 32},
    {"avxvnni", has_avxvnni, avxvnni_loop, 12 * 32},
    {"avx512bw", has_avx512bw, avx512bw_loop, 8 * 64},
    {"avx512vnni", has_avx512vnni, avx512vnni_loop, 16 * 64},
    {"amx", has_amx, amx_loop, 4 * 16 * 16 * 64},
};

typedef struct {
  const isa_t *isa;
  uint64_t iters;
  pthread_barrier_t *start;
} job_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *worker(void *arg) {
  job_t *job = arg;
  pthread_barrier_wait(job->start);
  job->isa->loop(job->iters);
  return NULL;
}

/* Seconds for `threads` threads to run `iters` iterations each. */
static double timed(const isa_t *isa, int threads, uint64_t iters) {
  pthread_t *ids = calloc(threads, sizeof *ids);
  job_t *jobs = calloc(threads, sizeof *jobs);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (int t = 0; t < threads; ++t) {
    jobs[t] = (job_t){isa, iters, &start};
    pthread_create(&ids[t], NULL, worker, &jobs[t]);
  }
  pthread_barrier_wait(&start);
  double begin = now();
  for (int t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
  double seconds = now() - begin;
  pthread_barrier_destroy(&start);
  free(ids);
  free(jobs);
  return seconds;
}

int main(int argc, char **argv) {
  int counts[64], n = 0;
  for (int i = 1; i < argc && n < 64; ++i) {
    counts[n] = atoi(argv[i]);
    if (counts[n] < 1) {
      fprintf(stderr, "usage: %s [threads ...]\n", argv[0]);
      return 2;
    }
    ++n;
  }
  if (n == 0) counts[n++] = 1;
  for (size_t k = 0; k < sizeof ISAS / sizeof ISAS[0]; ++k) {
    const isa_t *isa = &ISAS[k];
    if (!isa->supported()) continue;
    /* Iterations for ~0.2 s on one thread (each thread runs as many). */
    uint64_t iters = 1 << 16;
    double seconds;
    while ((seconds = timed(isa, 1, iters)) < 0.05) iters *= 2;
    iters = (uint64_t)(iters * 0.2 / seconds) + 1;
    for (int i = 0; i < n; ++i) {
      double best = 0;
      for (int rep = 0; rep < 5; ++rep) {
        double gmacs = isa->macs_per_iter * iters * counts[i] / timed(isa, counts[i], iters) / 1e9;
        if (gmacs > best) best = gmacs;
      }
      printf("%s %d %.1f\n", isa->name, counts[i], best);
      fflush(stdout);
    }
  }
  return 0;
}
