/*
** amx.h -- what the tile unit's kernels share (attention_amx.c,
** matmul_amx.c): the target attribute, a tile load the compiler cannot
** move, rounding up to whole tiles, the one configuration they use and
** 16 x 16 transposes of 16- and 32-bit elements.  Include inside
** QKV_VEXP_X86 (vexp.h), after <string.h>.
*/
#ifndef QKV_CPU_AMX_H
#define QKV_CPU_AMX_H

#include <stdint.h>
#include <string.h>

#define QKV_AMX __attribute__((target( \
  "avx512f,avx512vl,avx512bw,avx512dq,fma,avx512bf16,amx-tile,amx-bf16")))

/*
** gcc's tile loads (and ldtilecfg) are asm statements that do not say they
** read memory, so stores before them could be moved past them: a compiler
** barrier first.  (Its tile stores do say so.)
*/
#define LOAD(t, p, ld) do { __asm__ volatile("" ::: "memory"); \
    _tile_loadd(t, p, ld); } while (0)

/* n rounded up to a multiple of m: tiles are 16 rows, 32 pairs deep */
static inline int64_t qkv_amx_up (int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* the tile unit's configuration: palette 1, all 8 tiles 16 rows of 64 bytes */
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} qkv_tilecfg;

static inline QKV_AMX void qkv_amx_config (void) {
  qkv_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&cfg);
}

/* dst[c][r] = src[r][c] for a 16 x 16 block of 16-bit elements, rows ss
   and ds elements apart: the 8 x 8 transpose of each 128-bit lane by
   unpacks of 16, 32 and 64 bits, then the lanes of rows 0-7 and 8-15 joined */
static inline QKV_AMX void qkv_amx_transpose16 (const uint16_t *src, int64_t ss, uint16_t *dst,
                                                int64_t ds) {
  __m256i a[16], b[16], c[16], d[8], e[8];
  for (int i = 0; i < 16; i++) a[i] = _mm256_loadu_si256((const __m256i *)(src + i * ss));
  for (int i = 0; i < 16; i += 2) {
    b[i] = _mm256_unpacklo_epi16(a[i], a[i + 1]);
    b[i + 1] = _mm256_unpackhi_epi16(a[i], a[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    c[i] = _mm256_unpacklo_epi32(b[i], b[i + 2]);
    c[i + 1] = _mm256_unpackhi_epi32(b[i], b[i + 2]);
    c[i + 2] = _mm256_unpacklo_epi32(b[i + 1], b[i + 3]);
    c[i + 3] = _mm256_unpackhi_epi32(b[i + 1], b[i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    d[2 * i] = _mm256_unpacklo_epi64(c[i], c[i + 4]);
    d[2 * i + 1] = _mm256_unpackhi_epi64(c[i], c[i + 4]);
    e[2 * i] = _mm256_unpacklo_epi64(c[i + 8], c[i + 12]);
    e[2 * i + 1] = _mm256_unpackhi_epi64(c[i + 8], c[i + 12]);
  }
  for (int i = 0; i < 8; i++) {
    _mm256_storeu_si256((__m256i *)(dst + i * ds), _mm256_permute2x128_si256(d[i], e[i], 0x20));
    _mm256_storeu_si256((__m256i *)(dst + (i + 8) * ds),
                        _mm256_permute2x128_si256(d[i], e[i], 0x31));
  }
}

/* r[0..16) as a 16 x 16 block of 32-bit elements: rows become columns */
static inline QKV_AMX void qkv_amx_transpose16x32 (__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  /* r[4g + c], 128-bit lane L: column 4L + c of rows 4g .. 4g + 3 */
  for (int g = 0; g < 4; g++) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; c++) {
    u[4 * c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
    u[4 * c + 1] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    u[4 * c + 2] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    u[4 * c + 3] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm512_shuffle_i32x4(u[4 * c], u[4 * c + 2], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(u[4 * c], u[4 * c + 2], 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(u[4 * c + 1], u[4 * c + 3], 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(u[4 * c + 1], u[4 * c + 3], 0xdd);
  }
}

#endif
