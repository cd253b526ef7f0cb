/* 3x3 stride-1 convolution by Winograd's F(4x4, 3x3) or F(2x4, 3x3) in exact integer arithmetic:
 * b8_conv2d_s8's path in the AVX2, AVX-VNNI, AVX-512BW and AVX-512 VNNI builds (B8_WINOGRAD), for
 * the layers b8_winograd_suits names.
 *
 * Why. Without VNNI, AVX2 multiplies bytes by vpmaddubsw (unsigned x signed, pairs summed in
 * int16), then vpmaddwd: for 8-bit activations that may be negative (asymmetric ones after a
 * relu) that is exact only with a correction (conv2d_s8.c), four vector operations per 32
 * products where Intel's cores issue three per cycle. F(4x4, 3x3) makes a block of 4 x 4 output
 * pixels from a 6 x 6 block of input with 36 products per input channel instead of 144, on int16
 * operands whose pairs vpmaddwd multiplies and sums exactly in int32: 4x fewer products for the
 * same count of multiplying instructions per product; F(2x4, 3x3) a block of 2 x 4 from 4 x 6
 * with 24 instead of 72, 3x fewer, and a larger bound on the input channels (below).
 * (F(2x2, 3x3), 2.25x fewer, ran ResNet-18's 3x3 layers 1.2x slower than F(2x4); F(4x4) runs its
 * layers on 64 and 128 channels 1.1-1.2x faster than F(2x4).)
 *
 * The arithmetic, per input channel, d the (rows + 2) x 6 input block (padded positions read
 * pad_value) and g the 3x3 filter: F(rows, 3) down the columns, F(4, 3) along the rows,
 *   V = B^T d B4,  U = G g G4^T,  Y = A^T (sum over channels of U . V) A4,
 * with, for tiles of 2 rows (B, G, A = B2, G2, A2),
 *   B2^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G2 = [2 0 0; 1 1 1; 1 -1 1; 0 0 2],
 *   A2^T = [1 1 1 0; 0 1 -1 -1],
 *   B4^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
 *   G4 = [6 0 0; -4 -4 -4; -4 4 -4; 1 2 4; 1 -2 4; 0 0 24],
 *   A4^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1];
 * |V| <= 2 x 10 x 128 = 2560 and |U| <= 3 x 24 x 128 = 9216 fit int16. G2 and G4 are 2 and 24
 * times the textbook's (whose entries are fractions), so Y is 48 x the 2 x 4 block of sum(x * w).
 * For tiles of 4 rows, F(4, 3) both ways, but 24 x 24 x 128 would not fit int16: G4's last row is
 * [0 0 12] there (12, not 24, x the textbook's), A4^T's last column (0 0 0 2) to make up for it, so
 * |U| <= 12 x 12 x 128 = 18432 (the row sums of G4 are 6, 12, 12, 7, 7, 12), |V| <= 10 x 10 x 128 =
 * 12800, and Y is 576 x the 4 x 4 block of sum(x * w).
 * Every step adds and multiplies integers, so Y is exact modulo 2^32 whatever the intermediate
 * sums wrap to. With 48 x sum, Y times the inverse of 3 modulo 2^32 is 16 x sum modulo 2^32,
 * which is 16 x sum itself in int32 while |sum| < 2^27 (9 x c x 128 x 128 for c <= 896 input
 * channels), and an arithmetic shift by 4 leaves the sum. With 576 x sum, the inverse of 9 gives
 * 64 x sum, exact while |sum| < 2^25 (c <= 224), and a shift by 6 the sum. Bit for bit the direct
 * convolution's sum.
 *
 * Work. The packed filter is the int8 one, 16 output channels x 9 taps per pair of input
 * channels (vpmaddwd's order once widened), transformed into U (int16, [positions][c / 2]
 * [16 channels][2]: vpmaddwd's pairs): where U is small (b8_winograd_whole_u), all of it once, by
 * the packing, after the int8 filter; else by each call, 16 output x 32 input channels at a time
 * (B8_WG_PIECE) for each block of tiles: U is 24 / 9 x 2 bytes per weight for tiles of 2 rows
 * (36 / 9 x 2 for 4), 5.3x the filter, and read from memory it made a 3x3 layer on 512 channels at
 * 7x7 pixels wait on the memory. Tiles of rows x 4 output
 * pixels in blocks of up to b8_winograd_block_tiles: a block's V (int16, [positions][tiles][c]) is
 * made once; then, per 16 output channels (32 with AVX-512), per position, V times that
 * position's U by 6 tiles x 16 (or 32) channels at a time (12 accumulators), into M ([positions]
 * [tiles][16] int32 per 16 channels); then per tile A^T M A4, the division, the bias and the
 * convolutions' output stage (b8_block_finish: two pixels' 16 channels at a time; with AVX-512,
 * b8_block32_finish, four). The AVX-512 builds' transforms work on 512-bit vectors (b8_wg_vec). */
#include <stdlib.h>
#include <string.h>

#include "byoc_int8.h"

#include "internal.h"

#if B8_USE_AVX512VNNI
#include <cpuid.h> /* b8_winograd_fewest_inputs */
#endif

#if B8_WINOGRAD
/* Tiles per GEMM step; output channels per block; the bytes of V a block may take (192 KB: the
 * 128-channel layers' tiles of 4 rows 1.04x faster than with 96), and the most tiles a block has;
 * the U that the packing transforms whole (1.25 MB: ResNet's 128-channel layers' 1.18 MB for tiles
 * of 4 rows, 1.07x faster than made per block when each call transformed it whole; on 256
 * channels, tiles of 2 rows, its 3.1 MB whole ran 1.03-1.07x with AVX2 for that much more memory
 * per layer, and AVX-VNNI's direct tiles stayed faster), and the V budget then used for U made
 * per block (fewer blocks, fewer transforms); the packed filter's marker. */
enum { B8_WG_GROUP = 6, B8_WG_CHANNELS = 16, B8_WG_V_BYTES = 192 * 1024, B8_WG_MAX_TILES = 48 };
enum { B8_WG_U_WHOLE = 1280 * 1024, B8_WG_V_BIG = 480 * 1024 };
/* A tile's most output pixels (4 x 4); input channels at most (the exact division's bound), and
 * at most for tiles of 4 rows. */
enum { B8_WG_MAX_PIXELS = 16, B8_WG_MAX_C = 896, B8_WG4_MAX_C = 224 };
/* Input channels per piece of U where it is made per block: 24 KB of U, in L1 while the GEMM
 * reads it (a whole block's U, 393 KB on 512 channels, went to L2 and back: 1.5x the time). */
enum { B8_WG_PIECE = 32 };
enum { B8_WEIGHTS_WINOGRAD = 0x77673233 };
/* Blocks of 16 output channels per GEMM call at most (b8_winograd_gemm_tiles), each with its M. */
#if B8_USE_AVX512
enum { B8_WG_BLOCKS = 2 };
#else
enum { B8_WG_BLOCKS = 1 };
#endif

static int32_t b8_winograd_channels(const b8_dims* filter_dims) {
  return (filter_dims->n + B8_WG_CHANNELS - 1) / B8_WG_CHANNELS * B8_WG_CHANNELS;
}

/* The positions of a tile of `rows` output rows: (rows + 2) x 6. */
static int32_t b8_winograd_positions(int32_t rows) { return (rows + 2) * 6; }

/* U's bytes for tiles of `rows`: positions x c x 2 bytes per output channel. */
static int64_t b8_winograd_u_bytes(const b8_dims* filter_dims, int32_t rows) {
  return (int64_t)2 * b8_winograd_positions(rows) * b8_winograd_channels(filter_dims) * filter_dims->c;
}

/* Output rows per tile: 4 (F(4x4, 3x3)) on up to 224 input channels, where the division of 576 x
 * the sum modulo 2^32 is exact (see the top of the file), else 2 (F(2x4, 3x3)). */
int32_t b8_winograd_rows(const b8_dims* filter_dims) {
  return filter_dims->c <= B8_WG4_MAX_C ? 4 : 2;
}

/* Whether the packing transforms the whole filter once (else each call, a piece of B8_WG_PIECE
 * input channels at a time, for each block of tiles and of 16 output channels). */
static int b8_winograd_whole_u(const b8_dims* filter_dims) {
  return b8_winograd_u_bytes(filter_dims, b8_winograd_rows(filter_dims)) <= B8_WG_U_WHOLE;
}

#if B8_USE_AVX512VNNI
/* The fewest input channels of a layer that the AVX-512 VNNI build convolves by Winograd (of those
 * that suit), decided once per process: BYOC_INT8_WINOGRAD=1 (any) or 0 (none) where set (read at
 * the first convolution or packing), else by the CPU. AMD's family 19h (Zen 4: Zen 3, also 19h,
 * has no AVX-512), any: its cores run a 512-bit operation as two 256-bit halves, so that vpdpbusd
 * multiplies 64 bytes a cycle and vpdpwssd 32 Winograd products, 128 direct ones' worth: ResNet-18's
 * 3x3 layers on 64 and 128 channels ran 1.45x and 1.6x faster than on the direct tiles (one Zen 4
 * core, bench_conv.py, vpdpwssd on 256-bit vectors then), those on 256 and 512 0.94x and 0.57x (by
 * tiles of 2 rows, as with AVX-VNNI below). Family 1Ah (Zen 5), 64: its server and desktop cores
 * run 512-bit operations whole, twice as fast (its mobile ones split them as Zen 4 does: not
 * measured); there Winograd ran 64 -> 64 channels at 56x56 1.10x, 128 -> 128 at 28x28 1.18x,
 * 64 -> 192 and 96 -> 128 (GoogLeNet) 1.2x, but layers on 16-48 input channels 0.74-0.93x
 * (SqueezeNet's, GoogLeNet's: the transforms weigh more per product), and SqueezeNet's 64 -> 256
 * at 13x13 0.74x (4x4 tiles cover 16x16; the packing, which decides, does not know the size). Intel's cores with AVX-512 multiply 512-bit vectors as fast as 256-bit ones: none (F(2x4)
 * on 512-bit vectors: 0.81x the direct tiles, README). */
static int32_t b8_winograd_fewest_inputs(void) {
  static int32_t fewest; /* 0: not asked yet */
  int32_t channels = __atomic_load_n(&fewest, __ATOMIC_ACQUIRE);
  if (!channels) {
    const char* setting = getenv("BYOC_INT8_WINOGRAD");
    if (setting && (strcmp(setting, "0") == 0 || strcmp(setting, "1") == 0))
      channels = setting[0] == '1' ? 1 : INT32_MAX;
    else {
      /* the family: CPUID 1's base family, plus its extended family where the base is 0xF */
      unsigned int eax = 0, ebx, ecx, edx, family = 0;
      if (__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        family = (eax >> 8 & 0xF) == 0xF ? 0xF + (eax >> 20 & 0xFF) : eax >> 8 & 0xF;
      channels = !__builtin_cpu_is("amd") ? INT32_MAX : family == 0x19 ? 1 : family == 0x1A ? 64 : INT32_MAX;
    }
    __atomic_store_n(&fewest, channels, __ATOMIC_RELEASE);
  }
  return channels;
}
#endif

/* 3x3, stride 1, no dilation, groups 1, input channels a multiple of 16 up to 896. With VNNI
 * (vpdpbusd does the direct path's 32 products per instruction, vpdpwssd Winograd's 16 for 64)
 * only tiles of 4 rows where U is made once per call: with AVX-VNNI, ResNet-18's 3x3 layers on 64
 * and 128 channels 1.12-1.2x faster than the direct tiles by tiles of 2 rows, and tiles of 4 (U
 * whole) 1.21x and 1.14x faster again; on 256 0.98x by tiles of 2, 0.93x by tiles of 4, on 512 at
 * 7x7 0.72x and 0.70x. The AVX-512 VNNI build only on b8_winograd_fewest_inputs or more; the
 * AVX-512BW build, whose direct tiles have no VNNI either, on every layer that suits, as AVX2. */
int b8_winograd_suits(const b8_conv_params* conv, const b8_dims* filter_dims) {
  if (!(conv->groups == 1 && filter_dims->h == 3 && filter_dims->w == 3 && conv->stride_h == 1 &&
        conv->stride_w == 1 && conv->dilation_h == 1 && conv->dilation_w == 1 && filter_dims->c % 16 == 0 &&
        filter_dims->c <= B8_WG_MAX_C))
    return 0;
#if B8_USE_AVXVNNI || B8_USE_AVX512VNNI
  if (!(b8_winograd_rows(filter_dims) == 4 && b8_winograd_whole_u(filter_dims))) return 0;
#endif
#if B8_USE_AVX512VNNI
  return filter_dims->c >= b8_winograd_fewest_inputs();
#else
  return 1;
#endif
}

/* Tiles per block: V takes 2 x positions x c bytes per tile. */
static int32_t b8_winograd_block_tiles(const b8_dims* filter_dims) {
  const int32_t c = filter_dims->c, budget = b8_winograd_whole_u(filter_dims) ? B8_WG_V_BYTES : B8_WG_V_BIG;
  const int32_t positions = b8_winograd_positions(b8_winograd_rows(filter_dims));
  const int32_t tiles = budget / (2 * positions * c) / B8_WG_GROUP * B8_WG_GROUP;
  return tiles < B8_WG_GROUP ? B8_WG_GROUP : tiles > B8_WG_MAX_TILES ? B8_WG_MAX_TILES : tiles;
}

/* The int8 filter's bytes in the packed filter (a multiple of 64), the marker at their end. */
static int64_t b8_winograd_int8_bytes(const b8_dims* filter_dims) {
  return (int64_t)9 * b8_winograd_channels(filter_dims) * filter_dims->c;
}

/* Where U transformed whole lies in the packed filter: the next 64 bytes after the int8 filter
 * and its marker. */
static int64_t b8_winograd_u_offset(const b8_dims* filter_dims) { return b8_winograd_int8_bytes(filter_dims) + 64; }

int32_t b8_winograd_packed_size(const b8_dims* filter_dims) {
  if (!b8_winograd_whole_u(filter_dims)) return (int32_t)(b8_winograd_int8_bytes(filter_dims) + 4);
  return (int32_t)(b8_winograd_u_offset(filter_dims) + b8_winograd_u_bytes(filter_dims, b8_winograd_rows(filter_dims)));
}

int32_t b8_winograd_scratch_size(const b8_dims* filter_dims) {
  /* V, M, a piece's U (where U is not in the packed filter), the bias per channel and the output
   * stage's three float constants, 64 bytes to align. */
  const int32_t tiles = b8_winograd_block_tiles(filter_dims), c = filter_dims->c;
  const int32_t rows = b8_winograd_rows(filter_dims), positions = b8_winograd_positions(rows);
  const int64_t u = b8_winograd_whole_u(filter_dims) ? 0 : 2 * positions * B8_WG_CHANNELS * B8_WG_PIECE;
  return (int32_t)(2 * positions * tiles * c + B8_WG_BLOCKS * positions * tiles * B8_WG_CHANNELS * 4 + u +
                   16 * b8_winograd_channels(filter_dims) + 64);
}

static void b8_winograd_filter(const int8_t* g, int32_t pairs, int16_t* u, int64_t position, int32_t rows);

/* [out_c / 16][c / 2][9 taps][16 channels][2 input channels], zero past the last channel, then
 * B8_WEIGHTS_WINOGRAD: 16 bytes of a tap widen to int16 in vpmaddwd's order (each output
 * channel's pair of input channels), so that the transform's results need no shuffles. Where U is
 * transformed whole (b8_winograd_whole_u), it is transformed here, once, into the packed filter
 * after the int8 one: [out_c / 16][positions][c / 2][16 channels][2]. Transformed by each call
 * instead (by each thread, into its scratch), ResNet-18's layers on 64 and 128 channels ran 1.05x
 * and 1.15x slower with AVX2, 1.02x and 1.12x with AVX-VNNI. */
void b8_winograd_pack_filter(const b8_dims* filter_dims, const int8_t* filter, int8_t* packed) {
  const int32_t c = filter_dims->c, channels = b8_winograd_channels(filter_dims);
  const int64_t int8_bytes = b8_winograd_int8_bytes(filter_dims);
  memset(packed, 0, (size_t)int8_bytes);
  for (int32_t oc = 0; oc < filter_dims->n; ++oc)
    for (int32_t tap = 0; tap < 9; ++tap)
      for (int32_t ic = 0; ic < c; ++ic)
        packed[((((int64_t)(oc / B8_WG_CHANNELS) * (c / 2) + ic / 2) * 9 + tap) * B8_WG_CHANNELS + oc % B8_WG_CHANNELS) * 2 +
               ic % 2] = filter[((int64_t)oc * 9 + tap) * c + ic];
  const int32_t marker = B8_WEIGHTS_WINOGRAD;
  memcpy(packed + int8_bytes, &marker, 4);
  if (!b8_winograd_whole_u(filter_dims)) return;
  const int32_t rows = b8_winograd_rows(filter_dims), positions = b8_winograd_positions(rows);
  int16_t* u = (int16_t*)(packed + b8_winograd_u_offset(filter_dims));
  for (int32_t oc0 = 0; oc0 < channels; oc0 += B8_WG_CHANNELS)
    b8_winograd_filter(packed + (int64_t)oc0 * 9 * c, c / 2, u + (int64_t)oc0 * positions * c,
                       (int64_t)c * B8_WG_CHANNELS, rows);
}

/* G2 x (x0, x1, x2): 2 x F(2, 3)'s filter transform, 4 values. */
B8_INLINE void b8_wg_g2(__m256i x0, __m256i x1, __m256i x2, __m256i r[4]) {
  const __m256i outer = _mm256_add_epi16(x0, x2);
  r[0] = _mm256_add_epi16(x0, x0);
  r[1] = _mm256_add_epi16(outer, x1);
  r[2] = _mm256_sub_epi16(outer, x1);
  r[3] = _mm256_add_epi16(x2, x2);
}

/* G4 x (x0, x1, x2): 24 x F(4, 3)'s filter transform, 6 values, the last `last` x x2 (24, or 12
 * for tiles of 4 rows, where 24 x 24 would pass int16). */
B8_INLINE void b8_wg_g4(__m256i x0, __m256i x1, __m256i x2, int16_t last, __m256i r[6]) {
  const __m256i outer = _mm256_add_epi16(x0, x2);                    /* x0 + x2 */
  const __m256i near = _mm256_add_epi16(x0, _mm256_slli_epi16(x2, 2)); /* x0 + 4 x2 */
  const __m256i twice = _mm256_add_epi16(x1, x1);                    /* 2 x1 */
  r[0] = _mm256_mullo_epi16(x0, _mm256_set1_epi16(6));
  r[1] = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_add_epi16(outer, x1)), 2);
  r[2] = _mm256_slli_epi16(_mm256_sub_epi16(x1, outer), 2);
  r[3] = _mm256_add_epi16(near, twice);
  r[4] = _mm256_sub_epi16(near, twice);
  r[5] = _mm256_mullo_epi16(x2, _mm256_set1_epi16(last));
}

/* U = G g G4^T of one pair of input channels for 16 output channels (g: 9 taps, 32 bytes apart,
 * of 16 x 2 int8), in int16, position r x 6 + s at u + (r x 6 + s) x position (32 int16: channels
 * 0-7, then 8-15): G over the kernel's rows (G2, or G4 for tiles of 4 rows), then G4's six rows
 * along them. A position's 64 bytes are stored together: written half by half, the lines of U
 * (which exceed L1) were fetched twice, and the transform took 1.5x as long. */
B8_INLINE void b8_winograd_filter_pair(const int8_t* g, int16_t* u, int64_t position, const int32_t rows) {
  const int16_t last = rows == 4 ? 12 : 24;
  __m256i a[2][6][3];
  for (int32_t h = 0; h < 2; ++h)
    for (int32_t kx = 0; kx < 3; ++kx) {
#define B8_WG_TAP(ky) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(g + 32 * (3 * (ky) + kx) + 16 * h)))
      const __m256i top = B8_WG_TAP(0), middle = B8_WG_TAP(1), bottom = B8_WG_TAP(2);
#undef B8_WG_TAP
      __m256i column[6];
      if (rows == 4)
        b8_wg_g4(top, middle, bottom, last, column);
      else
        b8_wg_g2(top, middle, bottom, column);
      for (int32_t r = 0; r < rows + 2; ++r) a[h][r][kx] = column[r];
    }
  for (int32_t r = 0; r < rows + 2; ++r) {
    __m256i row[2][6];
    for (int32_t h = 0; h < 2; ++h) b8_wg_g4(a[h][r][0], a[h][r][1], a[h][r][2], last, row[h]);
    for (int32_t s = 0; s < 6; ++s) {
      int16_t* out = u + (6 * r + s) * position;
      _mm256_storeu_si256((__m256i*)out, row[0][s]);
      _mm256_storeu_si256((__m256i*)(out + 16), row[1][s]);
    }
  }
}

/* U of `pairs` pairs of input channels of one block of 16 output channels (from its packed filter
 * g) into u: per position (`position` int16 apart), per pair, output channels 0-7 then 8-15, each
 * a (channel, pair) int16 pair: vpmaddwd's operand. */
static void b8_winograd_filter(const int8_t* g, int32_t pairs, int16_t* u, int64_t position, int32_t rows) {
  for (int32_t pair = 0; pair < pairs; ++pair) {
    const int8_t* from = g + (int64_t)pair * 9 * 2 * B8_WG_CHANNELS;
    int16_t* to = u + (int64_t)pair * 2 * B8_WG_CHANNELS;
    if (rows == 4)
      b8_winograd_filter_pair(from, to, position, 4);
    else
      b8_winograd_filter_pair(from, to, position, 2);
  }
}

/* The input and output transforms' vectors: 512-bit in the AVX-512 builds (32 input channels
 * of int16, 16 output channels of int32: a block's in one), else 256-bit (16 and 8). The masks
 * load and store the input transform's first 16 channels only (a layer on 32k + 16 channels). */
#if B8_USE_AVX512
typedef __m512i b8_wg_vec;
typedef __mmask32 b8_wg_mask;
enum { B8_WG_LANES = 16 };
#define B8_WG_ADD16 _mm512_add_epi16
#define B8_WG_SUB16 _mm512_sub_epi16
#define B8_WG_SLLI16 _mm512_slli_epi16
#define B8_WG_ADD32 _mm512_add_epi32
#define B8_WG_SUB32 _mm512_sub_epi32
#define B8_WG_SLLI32 _mm512_slli_epi32
#define B8_WG_SRAI32 _mm512_srai_epi32
#define B8_WG_MULLO32 _mm512_mullo_epi32
#define B8_WG_SET16 _mm512_set1_epi16
#define B8_WG_SET32 _mm512_set1_epi32
#define B8_WG_LOAD32(p) _mm512_loadu_si512((const void*)(p))
#define B8_WG_WIDEN(p, mask) _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, p))
#define B8_WG_STORE16(p, x, mask) _mm512_mask_storeu_epi16(p, mask, x)
#else
typedef __m256i b8_wg_vec;
typedef int b8_wg_mask;
enum { B8_WG_LANES = 8 };
#define B8_WG_ADD16 _mm256_add_epi16
#define B8_WG_SUB16 _mm256_sub_epi16
#define B8_WG_SLLI16 _mm256_slli_epi16
#define B8_WG_ADD32 _mm256_add_epi32
#define B8_WG_SUB32 _mm256_sub_epi32
#define B8_WG_SLLI32 _mm256_slli_epi32
#define B8_WG_SRAI32 _mm256_srai_epi32
#define B8_WG_MULLO32 _mm256_mullo_epi32
#define B8_WG_SET16 _mm256_set1_epi16
#define B8_WG_SET32 _mm256_set1_epi32
#define B8_WG_LOAD32(p) _mm256_loadu_si256((const __m256i*)(p))
#define B8_WG_WIDEN(p, mask) ((void)(mask), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p))))
#define B8_WG_STORE16(p, x, mask) ((void)(mask), _mm256_storeu_si256((__m256i*)(p), x))
#endif
/* Input channels per step of the input transform; vectors per block of output channels. */
enum { B8_WG_INPUT_STEP = 2 * B8_WG_LANES, B8_WG_HALVES = B8_WG_CHANNELS / B8_WG_LANES };

/* B4^T x (x0 .. x5): F(4, 3)'s input transform, 6 values (|result| <= 10 max |x|). */
B8_INLINE void b8_wg_b4(const b8_wg_vec x[6], b8_wg_vec r[6]) {
  const b8_wg_vec p = B8_WG_SUB16(x[4], B8_WG_SLLI16(x[2], 2)); /* x4 - 4 x2 */
  const b8_wg_vec q = B8_WG_SUB16(x[3], B8_WG_SLLI16(x[1], 2)); /* x3 - 4 x1 */
  const b8_wg_vec e = B8_WG_SUB16(x[4], x[2]);                  /* x4 - x2 */
  const b8_wg_vec f = B8_WG_SLLI16(B8_WG_SUB16(x[3], x[1]), 1); /* 2 (x3 - x1) */
  r[0] = B8_WG_ADD16(B8_WG_SLLI16(B8_WG_SUB16(x[0], x[2]), 2), e);
  r[1] = B8_WG_ADD16(p, q);
  r[2] = B8_WG_SUB16(p, q);
  r[3] = B8_WG_ADD16(e, f);
  r[4] = B8_WG_SUB16(e, f);
  r[5] = B8_WG_ADD16(B8_WG_SLLI16(B8_WG_SUB16(x[1], x[3]), 2), B8_WG_SUB16(x[5], x[3]));
}

/* V of one tile, all c channels, B8_WG_INPUT_STEP at a time: the (rows + 2) x 6 input block from
 * (iy0, ix0), positions outside the input reading pad_value; position r x 6 + s at v + (r x 6 + s)
 * x stride. B2^T (or B4^T for tiles of 4 rows) down the columns, then B4^T along the rows. */
B8_INLINE void b8_winograd_input_rows(const int8_t* image, const b8_dims* input_dims, int32_t iy0, int32_t ix0,
                                      int32_t pad_value, int16_t* v, int64_t stride, const int32_t rows) {
  const int32_t c = input_dims->c;
  const b8_wg_vec pad = B8_WG_SET16((int16_t)pad_value);
  int inside[6][6];
  for (int32_t r = 0; r < rows + 2; ++r)
    for (int32_t s = 0; s < 6; ++s)
      inside[r][s] = iy0 + r >= 0 && iy0 + r < input_dims->h && ix0 + s >= 0 && ix0 + s < input_dims->w;
  const int8_t* at = image + ((int64_t)iy0 * input_dims->w + ix0) * c; /* formed only, never read outside */
  const int64_t row = (int64_t)input_dims->w * c;
  for (int32_t c0 = 0; c0 < c; c0 += B8_WG_INPUT_STEP) {
    const b8_wg_mask mask = (b8_wg_mask)(c - c0 >= B8_WG_INPUT_STEP ? -1 : 0xFFFF); /* c: a multiple of 16 */
    b8_wg_vec t[6][6];
    for (int32_t s = 0; s < 6; ++s) { /* B^T d, column s */
      b8_wg_vec d[6], column[6];
      for (int32_t r = 0; r < rows + 2; ++r) d[r] = inside[r][s] ? B8_WG_WIDEN(at + r * row + s * c + c0, mask) : pad;
      if (rows == 4) {
        b8_wg_b4(d, column);
      } else {
        column[0] = B8_WG_SUB16(d[0], d[2]);
        column[1] = B8_WG_ADD16(d[1], d[2]);
        column[2] = B8_WG_SUB16(d[2], d[1]);
        column[3] = B8_WG_SUB16(d[1], d[3]);
      }
      for (int32_t r = 0; r < rows + 2; ++r) t[r][s] = column[r];
    }
    for (int32_t r = 0; r < rows + 2; ++r) { /* (B^T d) B4, row r */
      b8_wg_vec out[6];
      b8_wg_b4(t[r], out);
      for (int32_t s = 0; s < 6; ++s) B8_WG_STORE16(v + (r * 6 + s) * stride + c0, out[s], mask);
    }
  }
}

static void b8_winograd_input(const int8_t* image, const b8_dims* input_dims, int32_t iy0, int32_t ix0,
                              int32_t pad_value, int16_t* v, int64_t stride, int32_t rows) {
  if (rows == 4)
    b8_winograd_input_rows(image, input_dims, iy0, ix0, pad_value, v, stride, 4);
  else
    b8_winograd_input_rows(image, input_dims, iy0, ix0, pad_value, v, stride, 2);
}

/* m[t][0, 16) (+)= sum over k < pairs of v[t][k] x u[k] for n = 6 or 4 tiles t (rows of v
 * `row` int32 apart, each a pair of int16), from m's values where `accumulate`: vpmaddwd
 * multiplies a pair of V by a pair of U per channel and sums them. 4 tiles end a block whose last
 * group has 1-4 (a 7x7 output has 8 tiles). With `fetch`, a line from `prefetch` on goes to L2
 * per line of u read. With `blocks` 2 (AVX-512 only) the same for the next 16 output channels too,
 * from u + u_block into m + m_block. */
#if B8_USE_AVX512
/* With AVX-512: vpdpwssd on 512-bit vectors (AVX-512BW: vpmaddwd and vpaddd; there the 512-bit
 * path ran ResNet's 3x3 layers 1.24-1.75x and SqueezeNet's 1.5-1.6x faster than the 256-bit one on
 * AMD Zen 5), one per tile, step and block of 16 channels. On two blocks each broadcast of V serves
 * both, 12 accumulators; on one, two accumulators per tile (even
 * and odd steps), so that 12 chains cover the instruction's latency. (A broadcast per product held
 * the GEMM at 84% of the peak on AMD's Zen 5, two at 99%: a stand-alone loop, L1-resident.) On Zen 5,
 * whose cores run 512-bit operations whole, twice the products per cycle of the 256-bit form
 * (ResNet-18's 3x3 layers on 64 and 128 channels: README); on Zen 4, which splits them into two
 * 256-bit halves, as many. */
B8_INLINE void b8_winograd_gemm_tiles(const int32_t* v, int64_t row, int32_t pairs, const int16_t* u, int64_t u_block,
                                      int32_t* m, int64_t m_block, int accumulate, const int16_t* prefetch,
                                      const int n, const int fetch, const int blocks) {
  /* (no arrays of vectors: GCC zeroed them in memory, a third of the time of a call on 32 pairs) */
#define B8_WG_START(at, t) \
  (accumulate && (t) < n ? _mm512_loadu_si512((const void*)((at) + (t) * B8_WG_CHANNELS)) : _mm512_setzero_si512())
  __m512i e0 = B8_WG_START(m, 0), e1 = B8_WG_START(m, 1), e2 = B8_WG_START(m, 2), e3 = B8_WG_START(m, 3);
  __m512i e4 = B8_WG_START(m, 4), e5 = B8_WG_START(m, 5);
  int32_t* const m1 = blocks == 2 ? m + m_block : NULL; /* the second block's, or none (odd steps) */
  __m512i o0 = _mm512_setzero_si512(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0;
  if (blocks == 2) {
    o0 = B8_WG_START(m1, 0), o1 = B8_WG_START(m1, 1), o2 = B8_WG_START(m1, 2), o3 = B8_WG_START(m1, 3);
    o4 = B8_WG_START(m1, 4), o5 = B8_WG_START(m1, 5);
  }
#undef B8_WG_START
  const int32_t *v0 = v, *v1 = v0 + row, *v2 = v1 + row, *v3 = v2 + row, *v4 = v3 + row, *v5 = v4 + row;
#if B8_USE_AVX512VNNI
#define B8_WG_STEP(r, acc, kk, w) acc = _mm512_dpwssd_epi32(acc, _mm512_set1_epi32((r)[kk]), w)
#else /* AVX-512BW: the same products and sums, in two instructions */
#define B8_WG_STEP(r, acc, kk, w) acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_set1_epi32((r)[kk]), w))
#endif
#define B8_WG_STEPS(acc0, acc1, acc2, acc3, acc4, acc5, kk, w) \
  do {                                                         \
    B8_WG_STEP(v0, acc0, kk, w);                               \
    B8_WG_STEP(v1, acc1, kk, w);                               \
    B8_WG_STEP(v2, acc2, kk, w);                               \
    B8_WG_STEP(v3, acc3, kk, w);                               \
    if (n > 4) {                                               \
      B8_WG_STEP(v4, acc4, kk, w);                             \
      B8_WG_STEP(v5, acc5, kk, w);                             \
    }                                                          \
  } while (0)
  /* Pairs per iteration: one on two blocks, else two (pairs: a multiple of 8). The o
   * accumulators take the second block's products, or the odd pairs'. */
  const int32_t step = blocks == 2 ? 1 : 2;
  const int16_t* u1 = blocks == 2 ? u + u_block : u + 2 * B8_WG_CHANNELS;
  for (int32_t k = 0; k < pairs; k += step, u += 2 * B8_WG_CHANNELS * step, u1 += 2 * B8_WG_CHANNELS * step) {
    if (fetch) {
      for (int32_t line = 0; line < step; ++line)
        _mm_prefetch((const char*)(prefetch + 2 * B8_WG_CHANNELS * line), _MM_HINT_T1);
      prefetch += 2 * B8_WG_CHANNELS * step;
    }
    const __m512i w0 = _mm512_loadu_si512((const void*)u), w1 = _mm512_loadu_si512((const void*)u1);
    B8_WG_STEPS(e0, e1, e2, e3, e4, e5, k, w0);
    B8_WG_STEPS(o0, o1, o2, o3, o4, o5, blocks == 2 ? k : k + 1, w1);
    /* (a register for each accumulator, kept across iterations: GCC 12 otherwise copied some of
     * them to other registers and back every iteration) */
    __asm__("" : "+v"(e0), "+v"(e1), "+v"(e2), "+v"(e3), "+v"(e4), "+v"(e5));
    __asm__("" : "+v"(o0), "+v"(o1), "+v"(o2), "+v"(o3), "+v"(o4), "+v"(o5));
  }
#undef B8_WG_STEPS
#undef B8_WG_STEP
  if (blocks == 1) {
    e0 = _mm512_add_epi32(e0, o0), e1 = _mm512_add_epi32(e1, o1), e2 = _mm512_add_epi32(e2, o2);
    e3 = _mm512_add_epi32(e3, o3), e4 = _mm512_add_epi32(e4, o4), e5 = _mm512_add_epi32(e5, o5);
  }
#define B8_WG_STORE(at, acc0, acc1, acc2, acc3, acc4, acc5)                   \
  do {                                                                        \
    _mm512_storeu_si512((void*)(at), acc0);                                   \
    _mm512_storeu_si512((void*)((at) + B8_WG_CHANNELS), acc1);                \
    _mm512_storeu_si512((void*)((at) + 2 * B8_WG_CHANNELS), acc2);            \
    _mm512_storeu_si512((void*)((at) + 3 * B8_WG_CHANNELS), acc3);            \
    if (n > 4) {                                                              \
      _mm512_storeu_si512((void*)((at) + 4 * B8_WG_CHANNELS), acc4);          \
      _mm512_storeu_si512((void*)((at) + 5 * B8_WG_CHANNELS), acc5);          \
    }                                                                         \
  } while (0)
  B8_WG_STORE(m, e0, e1, e2, e3, e4, e5);
  if (blocks == 2) B8_WG_STORE(m1, o0, o1, o2, o3, o4, o5);
#undef B8_WG_STORE
}
#else
B8_INLINE void b8_winograd_gemm_tiles(const int32_t* v, int64_t row, int32_t pairs, const int16_t* u, int64_t u_block,
                                      int32_t* m, int64_t m_block, int accumulate, const int16_t* prefetch,
                                      const int n, const int fetch, const int blocks) {
  (void)u_block, (void)m_block, (void)blocks; /* one block at a time */
  __m256i acc[B8_WG_GROUP][2];
  for (int32_t t = 0; t < B8_WG_GROUP; ++t)
    for (int32_t h = 0; h < 2; ++h)
      acc[t][h] = accumulate && t < n ? _mm256_loadu_si256((const __m256i*)(m + t * B8_WG_CHANNELS + 8 * h))
                                      : _mm256_setzero_si256();
  __m256i a00 = acc[0][0], a01 = acc[0][1], a10 = acc[1][0], a11 = acc[1][1], a20 = acc[2][0], a21 = acc[2][1];
  __m256i a30 = acc[3][0], a31 = acc[3][1], a40 = acc[4][0], a41 = acc[4][1], a50 = acc[5][0], a51 = acc[5][1];
  const int32_t *v0 = v, *v1 = v0 + row, *v2 = v1 + row, *v3 = v2 + row, *v4 = v3 + row, *v5 = v4 + row;
  for (int32_t k = 0; k < pairs; ++k, u += 2 * B8_WG_CHANNELS) {
    if (fetch) {
      _mm_prefetch((const char*)prefetch, _MM_HINT_T1);
      prefetch += 2 * B8_WG_CHANNELS;
    }
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)u), w1 = _mm256_loadu_si256((const __m256i*)(u + 16));
#if B8_USE_AVXVNNI /* vpdpwssd: the products, their pair sums and the accumulation (wrapping) */
#define B8_WG_STEP(r, acc0, acc1)                                     \
  do {                                                                \
    const __m256i x = _mm256_set1_epi32((r)[k]);                      \
    acc0 = _mm256_dpwssd_avx_epi32(acc0, x, w0);                      \
    acc1 = _mm256_dpwssd_avx_epi32(acc1, x, w1);                      \
  } while (0)
#else
#define B8_WG_STEP(r, acc0, acc1)                                     \
  do {                                                                \
    const __m256i x = _mm256_set1_epi32((r)[k]);                      \
    acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(x, w0));          \
    acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(x, w1));          \
  } while (0)
#endif
    B8_WG_STEP(v0, a00, a01);
    B8_WG_STEP(v1, a10, a11);
    B8_WG_STEP(v2, a20, a21);
    B8_WG_STEP(v3, a30, a31);
    if (n > 4) {
      B8_WG_STEP(v4, a40, a41);
      B8_WG_STEP(v5, a50, a51);
    }
#undef B8_WG_STEP
  }
  const __m256i all[B8_WG_GROUP][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
  for (int32_t t = 0; t < n; ++t) {
    _mm256_storeu_si256((__m256i*)(m + t * B8_WG_CHANNELS), all[t][0]);
    _mm256_storeu_si256((__m256i*)(m + t * B8_WG_CHANNELS + 8), all[t][1]);
  }
}
#endif

/* The GEMM's forms: 6 or 4 tiles, 1 or 2 blocks of 16 output channels, fetching or not. */
#define B8_WG_GEMM(name, n, blocks)                                                                               \
  static void name(const int32_t* v, int64_t row, int32_t pairs, const int16_t* u, int64_t u_block, int32_t* m,   \
                   int64_t m_block, int accumulate, const int16_t* prefetch) {                                    \
    if (prefetch)                                                                                                 \
      b8_winograd_gemm_tiles(v, row, pairs, u, u_block, m, m_block, accumulate, prefetch, n, 1, blocks);         \
    else                                                                                                          \
      b8_winograd_gemm_tiles(v, row, pairs, u, u_block, m, m_block, accumulate, NULL, n, 0, blocks);             \
  }
B8_WG_GEMM(b8_winograd_gemm6, 6, 1)
B8_WG_GEMM(b8_winograd_gemm4, 4, 1)
#if B8_USE_AVX512
B8_WG_GEMM(b8_winograd_gemm6x2, 6, 2)
B8_WG_GEMM(b8_winograd_gemm4x2, 4, 2)
#else
#define b8_winograd_gemm6x2 b8_winograd_gemm6 /* never called: one block at a time */
#define b8_winograd_gemm4x2 b8_winograd_gemm4
#endif
#undef B8_WG_GEMM

/* A4^T x (x0 .. x5): F(4, 3)'s output transform, 4 values, x5 counted `last` times (1, or 2 for
 * tiles of 4 rows, whose filter transform's last row is 12, not 24, x the textbook's). */
B8_INLINE void b8_wg_a4(const b8_wg_vec x[6], const int32_t last, b8_wg_vec y[4]) {
  const b8_wg_vec sum12 = B8_WG_ADD32(x[1], x[2]), diff12 = B8_WG_SUB32(x[1], x[2]);
  const b8_wg_vec sum34 = B8_WG_ADD32(x[3], x[4]), diff34 = B8_WG_SUB32(x[3], x[4]);
  y[0] = B8_WG_ADD32(B8_WG_ADD32(x[0], sum12), sum34);
  y[1] = B8_WG_ADD32(diff12, B8_WG_SLLI32(diff34, 1));
  y[2] = B8_WG_ADD32(sum12, B8_WG_SLLI32(sum34, 2));
  y[3] = B8_WG_ADD32(B8_WG_ADD32(diff12, B8_WG_SLLI32(diff34, 3)), last == 2 ? B8_WG_ADD32(x[5], x[5]) : x[5]);
}

/* A^T M A4 for 16 channels of one tile (M's positions `stride` int32 apart), divided by 48 (tiles
 * of 2 rows: A2^T down the columns) or 576 (4 rows: A4^T), plus the bias: y[h][i] holds channels
 * B8_WG_LANES x h onwards of the tile's pixel i = 4 x row + column. */
B8_INLINE void b8_winograd_output_rows(const int32_t* m, int64_t stride, const b8_wg_vec bias[B8_WG_HALVES],
                                       b8_wg_vec y[B8_WG_HALVES][B8_WG_MAX_PIXELS], const int32_t rows) {
  const int32_t last = rows == 4 ? 2 : 1;
  for (int32_t h = 0; h < B8_WG_HALVES; ++h) {
    b8_wg_vec s[4][6]; /* A^T M */
    for (int32_t c = 0; c < 6; ++c) {
      b8_wg_vec x[6], column[4];
      for (int32_t r = 0; r < rows + 2; ++r) x[r] = B8_WG_LOAD32(m + (6 * r + c) * stride + B8_WG_LANES * h);
      if (rows == 4) {
        b8_wg_a4(x, last, column);
      } else {
        column[0] = B8_WG_ADD32(B8_WG_ADD32(x[0], x[1]), x[2]);
        column[1] = B8_WG_SUB32(B8_WG_SUB32(x[1], x[2]), x[3]);
      }
      for (int32_t r = 0; r < rows; ++r) s[r][c] = column[r];
    }
    for (int32_t r = 0; r < rows; ++r) b8_wg_a4(s[r], last, &y[h][4 * r]); /* (A^T M) A4 */
  }
  /* The sums are 48 (or 576) x the convolution's modulo 2^32: times the inverse of 3 (9) modulo
   * 2^32, 16 (64) x the sum modulo 2^32, which is 16 (64) x the sum itself in int32 while |sum| <
   * 2^27 (2^25); an arithmetic shift by 4 (6) leaves the sum. */
  const int32_t bits = rows == 4 ? 6 : 4;
  const b8_wg_vec inverse = B8_WG_SET32(rows == 4 ? (int32_t)0x38E38E39u : (int32_t)0xAAAAAAABu);
  for (int32_t i = 0; i < 4 * rows; ++i)
    for (int32_t h = 0; h < B8_WG_HALVES; ++h)
      y[h][i] = B8_WG_ADD32(B8_WG_SRAI32(B8_WG_MULLO32(y[h][i], inverse), bits), bias[h]);
}

static void b8_winograd_output(const int32_t* m, int64_t stride, const b8_wg_vec bias[B8_WG_HALVES],
                               b8_wg_vec y[B8_WG_HALVES][B8_WG_MAX_PIXELS], int32_t rows) {
  if (rows == 4)
    b8_winograd_output_rows(m, stride, bias, y, 4);
  else
    b8_winograd_output_rows(m, stride, bias, y, 2);
}

/* What position p's first group of tiles fetches into L2 (a line per pair it multiplies): with U
 * whole, the next block's U for that position; with U per piece, the next piece's int8 filter, its
 * first g_lines / pairs x pairs lines (none past its end); else nothing. */
static const int16_t* b8_winograd_fetch(const int16_t* next_u, const int8_t* next_g, int32_t p, int64_t u_position,
                                        int32_t pairs, int32_t g_lines) {
  if (next_u) return next_u + p * u_position;
  if (next_g && (p + 1) * pairs <= g_lines) return (const int16_t*)(next_g + (int64_t)p * pairs * 64);
  return NULL;
}

b8_status b8_conv2d_s8_winograd(const b8_conv_params* conv, const b8_requant_params* quant,
                                const b8_dims* input_dims, const int8_t* input, const b8_dims* filter_dims,
                                const int8_t* packed, const int32_t* bias, const b8_dims* output_dims,
                                int8_t* output, const b8_pixels* pixels, int32_t oc_begin, int32_t oc_end,
                                int8_t* scratch) {
  const int32_t c = filter_dims->c, pairs = c / 2, out_c = output_dims->c, out_h = output_dims->h, out_w = output_dims->w;
  const int32_t channels = b8_winograd_channels(filter_dims), block = b8_winograd_block_tiles(filter_dims);
  const int32_t rows = b8_winograd_rows(filter_dims), positions = b8_winograd_positions(rows), tile_pixels = 4 * rows;
  int32_t marker;
  memcpy(&marker, packed + b8_winograd_int8_bytes(filter_dims), 4);
  if (marker != B8_WEIGHTS_WINOGRAD) return B8_ERROR_ARGUMENT; /* not packed for this path */
  int64_t begin, end;
  b8_pixel_range(pixels, output_dims, &begin, &end);
  if (begin >= end) return B8_OK;
  /* The rows of tiles that hold the share's pixels, counted over the batch; a tile's pixels
   * outside the share (or past the output's last row or column) are computed, never written. */
  const int32_t tiles_w = (out_w + 3) / 4, tiles_h = (out_h + rows - 1) / rows;
  const int64_t image_pixels = (int64_t)out_h * out_w, image_size = (int64_t)input_dims->h * input_dims->w * c;
  const int64_t first_row = begin / image_pixels * tiles_h + begin % image_pixels / out_w / rows;
  const int64_t last_row = (end - 1) / image_pixels * tiles_h + (end - 1) % image_pixels / out_w / rows;
  const int64_t tiles = (last_row - first_row + 1) * tiles_w;
  int8_t* base = (int8_t*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  int16_t* v = (int16_t*)base;                                            /* [positions][block][c] */
  int32_t* m = (int32_t*)(base + (int64_t)2 * positions * block * c);     /* [blocks][positions][block][16] */
  /* U: whole in the packed filter (b8_winograd_pack_filter), else a piece's in the scratch. */
  const int whole_u = b8_winograd_whole_u(filter_dims);
  int16_t* piece_u = (int16_t*)(m + B8_WG_BLOCKS * positions * block * B8_WG_CHANNELS);
  const int16_t* u = whole_u ? (const int16_t*)(packed + b8_winograd_u_offset(filter_dims)) : piece_u;
  int32_t* start = (int32_t*)((int8_t*)piece_u + (whole_u ? 0 : 2 * positions * B8_WG_CHANNELS * B8_WG_PIECE));
  float* table = (float*)(start + channels);                          /* scale, offsets */
  for (int32_t oc = 0; oc < channels; ++oc) start[oc] = bias && oc < out_c ? bias[oc] : 0;
  int vector_epilogue = quant->multiplier != NULL && out_c % 8 == 0;
  for (int32_t oc = 0; oc < out_c; ++oc) vector_epilogue &= quant->shift[oc] <= 0;
  if (vector_epilogue) b8_estimate_table(quant, out_c, table, table + channels, table + 2 * channels);
#if !B8_USE_AVX512
  /* The output transform leaves each sum exact: the bias and 9 x c products. */
  const int32_t estimate_mode = vector_epilogue ? b8_estimate_mode(quant, bias, out_c, 9 * (int64_t)c)
                                                : B8_ESTIMATE_FULL;
#endif
  const __m256i lo = _mm256_set1_epi32(quant->act_min), hi = _mm256_set1_epi32(quant->act_max);
  const int64_t position = (int64_t)block * c; /* V's int16 from one position to the next */
  const int64_t filter_block = (int64_t)9 * B8_WG_CHANNELS * c; /* packed bytes per 16 channels */
  for (int64_t first = 0; first < tiles; first += block) {
    const int32_t count = tiles - first < block ? (int32_t)(tiles - first) : block;
    /* Groups of 6 tiles, then of 4: the tiles that the GEMM reads (`slots`, the spare ones zeros).
     * 6k + 1 and 6k + 2 end in two groups of 4, not a 6 and a 4 (a 7x7 output's 8 tiles of 2 rows:
     * 8 slots, not 10: with the fetch below, those layers 1.2x faster, AVX2 build); 6k + 3 and
     * 6k + 4 in one of 4; 6k + 5 in a 6. */
    const int32_t rest = count % B8_WG_GROUP;
    const int32_t fours = rest == 0 || rest == 5 ? 0 : rest > 2 || count < B8_WG_GROUP ? 1 : 2;
    const int32_t sixes = (count - 4 * fours + B8_WG_GROUP - 1) / B8_WG_GROUP, slots = B8_WG_GROUP * sixes + 4 * fours;
    /* Per tile, the output offsets of its pixels that this call writes (-1: not written), worked
     * out once for all the blocks of 16 output channels. */
    int64_t where[B8_WG_MAX_TILES][B8_WG_MAX_PIXELS];
    for (int32_t t = 0; t < count; ++t) {
      const int64_t row = first_row + (first + t) / tiles_w;
      const int32_t ox = 4 * (int32_t)((first + t) % tiles_w), oy = rows * (int32_t)(row % tiles_h);
      for (int32_t i = 0; i < tile_pixels; ++i) {
        const int32_t y = oy + i / 4, x = ox + i % 4;
        const int64_t pixel = row / tiles_h * image_pixels + (int64_t)y * out_w + x;
        where[t][i] = y < out_h && x < out_w && pixel >= begin && pixel < end ? pixel * out_c : -1;
      }
    }
    for (int32_t t = 0; t < slots; ++t) {
      if (t >= count) { /* the last group's spare tiles: zeros, whose results are never written */
        for (int32_t p = 0; p < positions; ++p) memset(v + p * position + (int64_t)t * c, 0, (size_t)c * 2);
        continue;
      }
      const int64_t row = first_row + (first + t) / tiles_w;
      const int32_t tx = (int32_t)((first + t) % tiles_w), ty = (int32_t)(row % tiles_h);
      b8_winograd_input(input + row / tiles_h * image_size, input_dims, rows * ty - conv->pad_top,
                        4 * tx - conv->pad_left, conv->pad_value, v + (int64_t)t * c, position, rows);
    }
    int32_t blocks; /* of 16 output channels, per GEMM call: 2 with AVX-512 where U is whole */
    for (int32_t oc0 = oc_begin; oc0 < oc_end; oc0 += blocks * B8_WG_CHANNELS) {
      blocks = B8_WG_BLOCKS == 2 && whole_u && oc_end - oc0 > B8_WG_CHANNELS ? 2 : 1;
      /* U whole: each position's GEMM over all c; else per piece of B8_WG_PIECE input channels,
       * made then used while in L1, M accumulating over the pieces. */
      const int32_t piece = whole_u ? c : B8_WG_PIECE;
      const int64_t u_position = (int64_t)piece * B8_WG_CHANNELS; /* U's int16 per position */
      const int64_t u_block = positions * u_position, m_block = (int64_t)positions * block * B8_WG_CHANNELS;
      for (int32_t c0 = 0; c0 < c; c0 += piece) {
        const int8_t* g = packed + oc0 / B8_WG_CHANNELS * filter_block + (int64_t)c0 * 9 * B8_WG_CHANNELS;
        const int16_t* up = whole_u ? u + (int64_t)oc0 * positions * c : u;
        if (!whole_u) b8_winograd_filter(g, piece / 2, piece_u, u_position, rows);
        /* U whole: a position's first group of tiles also fetches the next block's U for that
         * position into L2, a line per line of one block's own, and its second group the block
         * after that where this call takes two. */
        const int32_t next_oc = oc0 + blocks * B8_WG_CHANNELS;
        const int16_t* next_u = whole_u && next_oc < oc_end ? up + blocks * u_block : NULL;
        const int16_t* next_u2 = blocks == 2 && next_oc + B8_WG_CHANNELS < oc_end ? next_u + u_block : NULL;
        /* U per piece: the first positions' first groups fetch the next piece's int8 filter into
         * L2 instead, a line per pair (the pieces lie one after the other in the packed filter),
         * so that it does not come from memory when its transform reads it: the 3x3 layers on 256
         * and 512 channels 1.1-1.15x faster with their filters evicted from the caches (one Zen 4
         * core, AVX2 build), ResNet-18 1.07x / 1.04x and ResNet-50 1.07x / 1.03x faster whole at
         * 1 / 2 threads. */
        const int last_piece = c0 + piece >= c && oc0 + B8_WG_CHANNELS >= oc_end;
        const int8_t* next_g = !whole_u && !last_piece ? g + (int64_t)piece * 9 * B8_WG_CHANNELS : NULL;
        const int32_t g_lines = piece * 9 * B8_WG_CHANNELS / 64;
        for (int32_t p = 0; p < positions; ++p) {
          const int16_t* fetch = b8_winograd_fetch(next_u, next_g, p, u_position, piece / 2, g_lines);
          const int16_t* fetch2 = next_u2 ? next_u2 + p * u_position : NULL;
          for (int32_t g0 = 0; g0 < slots; g0 += g0 < B8_WG_GROUP * sixes ? B8_WG_GROUP : 4) {
            const int six = g0 < B8_WG_GROUP * sixes;
            (blocks == 2 ? six ? b8_winograd_gemm6x2 : b8_winograd_gemm4x2
                         : six ? b8_winograd_gemm6 : b8_winograd_gemm4)(
                (const int32_t*)(v + p * position + (int64_t)g0 * c + c0), pairs, piece / 2, up + p * u_position,
                u_block, m + ((int64_t)p * block + g0) * B8_WG_CHANNELS, m_block, c0 > 0,
                g0 == 0 ? fetch : g0 == B8_WG_GROUP ? fetch2 : NULL);
          }
        }
      }
      for (int32_t b = 0; b < blocks; ++b) {
        const int32_t oc = oc0 + b * B8_WG_CHANNELS;
        const int32_t block_c = oc_end - oc < B8_WG_CHANNELS ? oc_end - oc : B8_WG_CHANNELS;
        /* Whole blocks requantize in registers: with AVX-512 four pixels' 16 channels at a time
         * (b8_block32_finish), else two (b8_block_finish). */
        const int fused = vector_epilogue && block_c == B8_WG_CHANNELS;
#if B8_USE_AVX512
        b8_block32_epilogue e;
        memset(&e, 0, sizeof e); /* read only where fused: zeroed for the compiler's sake */
        if (fused) b8_block32_epilogue_load(quant, table, channels, oc, B8_WG_CHANNELS, &e);
#else
        b8_block_epilogue e;
        memset(&e, 0, sizeof e);
        if (fused) b8_block_epilogue_load(quant, table, channels, oc, estimate_mode, &e);
#endif
        b8_wg_vec bias_block[B8_WG_HALVES];
        for (int32_t h = 0; h < B8_WG_HALVES; ++h) bias_block[h] = B8_WG_LOAD32(start + oc + B8_WG_LANES * h);
        for (int32_t t = 0; t < count; ++t) {
          int8_t* out[B8_WG_MAX_PIXELS]; /* the tile's pixels this call writes, or NULL */
          for (int32_t i = 0; i < tile_pixels; ++i) out[i] = where[t][i] < 0 ? NULL : output + where[t][i] + oc;
          b8_wg_vec y[B8_WG_HALVES][B8_WG_MAX_PIXELS]; /* the tile's pixels' 16 channels */
          b8_winograd_output(m + b * m_block + (int64_t)t * B8_WG_CHANNELS, (int64_t)block * B8_WG_CHANNELS, bias_block,
                             y, rows);
          if (fused) {
#if B8_USE_AVX512
            for (int32_t i = 0; i < tile_pixels; i += 4) {
              const __m512i bytes = b8_block32_finish(&e, y[0][i], 0, y[0][i + 1], 0, y[0][i + 2], 0, y[0][i + 3], 0);
              if (out[i]) _mm_storeu_si128((__m128i*)out[i], _mm512_castsi512_si128(bytes));
              if (out[i + 1]) _mm_storeu_si128((__m128i*)out[i + 1], _mm512_extracti32x4_epi32(bytes, 1));
              if (out[i + 2]) _mm_storeu_si128((__m128i*)out[i + 2], _mm512_extracti32x4_epi32(bytes, 2));
              if (out[i + 3]) _mm_storeu_si128((__m128i*)out[i + 3], _mm512_extracti32x4_epi32(bytes, 3));
            }
#else
            for (int32_t i = 0; i < tile_pixels; i += 2) {
              const __m256i bytes = b8_block_finish(&e, y[0][i], y[1][i], y[0][i + 1], y[1][i + 1]);
              if (out[i]) _mm_storeu_si128((__m128i*)out[i], _mm256_castsi256_si128(bytes));
              if (out[i + 1]) _mm_storeu_si128((__m128i*)out[i + 1], _mm256_extracti128_si256(bytes, 1));
            }
#endif
            continue;
          }
          for (int32_t i = 0; i < tile_pixels; ++i) {
            if (!out[i]) continue;
            int32_t sums[B8_WG_CHANNELS];
            for (int32_t h = 0; h < B8_WG_HALVES; ++h) memcpy(sums + B8_WG_LANES * h, &y[h][i], sizeof(b8_wg_vec));
            for (int32_t h = 0; h < 2 && 8 * h < block_c; ++h) {
              if (vector_epilogue) {
                b8_estimate_x8_params estimate;
                estimate.scale = _mm256_loadu_ps(table + oc + 8 * h);
                estimate.offset_nonnegative = _mm256_loadu_ps(table + channels + oc + 8 * h);
                estimate.offset_negative = _mm256_loadu_ps(table + 2 * channels + oc + 8 * h);
                b8_output_s8x8(_mm256_loadu_si256((const __m256i*)(sums + 8 * h)), &estimate, quant, oc + 8 * h, lo,
                               hi, out[i] + 8 * h);
                continue;
              }
              for (int32_t k = 0; k < 8 && 8 * h + k < block_c; ++k)
                out[i][8 * h + k] = b8_output_s8(sums[8 * h + k], quant, oc + 8 * h + k);
            }
          }
        }
      }
    }
  }
  return B8_OK;
}
#endif
