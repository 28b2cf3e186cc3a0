/*
** matmul_amx.c -- bfloat16 products with float32 sums on the tile unit
** (AMX), for matmul.c's bfloat16 panels: C = alpha op(A) op(B), rounded
** once to bfloat16.  oneDNN 2.6's bfloat16 gemm reached 0.3-0.9x PyTorch's
** on this machine's shapes (bench/NOTES.md, "bfloat16 products on the
** tiles").
**
** The sum is cut into slices of at most KC, op(B)'s columns into chunks of
** about 1 MB.  A chunk of a slice of op(B) is packed once as the tile unit
** reads it (pairs of rows interleaved, 16 columns to a block: a B tile is
** 16 pairs x 16 columns), op(A) MC rows at a time as rows of the slice.  A
** block of 32 x 32 outputs is four C tiles, fed by two A and two B tiles
** per 32 deep: C tiles 0-3, A 4-5, B 6-7.  With more than one slice the
** running sums wait in float32 between them; after the last, each C tile
** goes through a 16 x 16 buffer, times alpha, rounded as qkv_f2bf rounds.
** The products are exact and the sums float32, as the float32 path's (in
** another order), but for one thing: the tile unit flushes sums and
** products below 2^-126 to 0.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "matmul_amx.h"
#include "vexp.h"

#ifdef QKV_VEXP_X86
#include "amx.h"

/*
** Sizes, measured on one core here (bench/NOTES.md): a 32-row A block and
** a 32-column B block, each 24 KB at KC, share L1; deeper slices or more
** rows at a time ran 5-25% slower, shallower ones paid for the sums' trips.
*/
enum {
  KC = 384,          /* the deepest slice of the sum */
  MC = 32,           /* rows of op(A) packed at a time */
  NB = 32            /* columns of a block of outputs: two B tiles */
};
/* columns of op(B) packed at a time: about 1 MB of them, half of L2 (384 x
   3072 at once ran at 0.72x 384 x 1536, from L3) */
#define NC(depth) ((((int64_t)1 << 19) / (depth) + NB - 1) / NB * NB)

/* this thread's packing buffers, kept between calls */
static _Thread_local struct { uint16_t *p; size_t n; } buf[3];

static uint16_t *buffer (int which, size_t elems) {
  if (elems > buf[which].n) {
    free(buf[which].p);
    buf[which].p = aligned_alloc(64, qkv_amx_up((int64_t)elems * 2, 64));
    buf[which].n = buf[which].p ? elems : 0;
  }
  return buf[which].p;
}

static inline QKV_AMX __mmask32 lanes32 (int64_t n) {
  return n <= 0 ? 0 : n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1);
}

/* ap (MC x ks) = rows i0.. and columns p0.. of op(A), zeros past m and
   the slice's end p1 */
static QKV_AMX void pack_a (int ta, const uint16_t *a, int64_t lda, int64_t m, int64_t p1,
                            int64_t i0, int64_t p0, int64_t ks, uint16_t *ap) {
  int64_t mc = m - i0 < MC ? m - i0 : MC, kc = p1 - p0;
  if (!ta) {
    for (int64_t r = 0; r < MC; r++)
      for (int64_t c = 0; c < ks; c += 32) {
        __mmask32 keep = r < mc ? lanes32(kc - c) : 0;
        _mm512_store_si512((void *)(ap + r * ks + c),
                           _mm512_maskz_loadu_epi16(keep, a + (i0 + r) * lda + p0 + c));
      }
    return;
  }
  /* A(i, p) = a[p lda + i]: 16 x 16 transposes inside, element by element
     at the edges */
  memset(ap, 0, sizeof(uint16_t) * (size_t)(MC * ks));
  int64_t rb = mc / 16 * 16, cb = kc / 16 * 16;
  for (int64_t c = 0; c < cb; c += 16)
    for (int64_t r = 0; r < rb; r += 16)
      qkv_amx_transpose16(a + (p0 + c) * lda + i0 + r, lda, ap + r * ks + c, ks);
  for (int64_t r = 0; r < mc; r++)
    for (int64_t c = r < rb ? cb : 0; c < kc; c++) ap[r * ks + c] = a[(p0 + c) * lda + i0 + r];
}

/*
** bp = rows p0 .. p1 of op(B) (ks of them, zeros past p1), columns j0 ..
** j1 (zeros past n, to a multiple of NB): column block j (16 wide) is
** ks / 2 rows of 16 pairs, (B[p0 + 2r][j0 + 16j + l], B[p0 + 2r + 1][...])
** at row r, pair l
*/
static QKV_AMX void pack_b (int tb, const uint16_t *b, int64_t ldb, int64_t n, int64_t j0,
                            int64_t j1, int64_t p0, int64_t p1, int64_t ks, uint16_t *bp) {
  int64_t kc = p1 - p0, pairs = ks / 2;
  if (!tb) {
    /* two rows' 32 columns: unpacked into pairs by 128-bit lane, then the
       lanes put in column order, 16 columns to each block */
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int64_t j = j0; j < j1; j += 32, bp += 2 * pairs * 32) {
      __mmask32 cols = lanes32(n - j);
      for (int64_t r = 0; r < pairs; r++) {
        __mmask32 m0 = 2 * r < kc ? cols : 0, m1 = 2 * r + 1 < kc ? cols : 0;
        __m512i x0 = _mm512_maskz_loadu_epi16(m0, b + (p0 + 2 * r) * ldb + j);
        __m512i x1 = _mm512_maskz_loadu_epi16(m1, b + (p0 + 2 * r + 1) * ldb + j);
        __m512i lo = _mm512_unpacklo_epi16(x0, x1), hi = _mm512_unpackhi_epi16(x0, x1);
        _mm512_store_si512((void *)(bp + r * 32), _mm512_permutex2var_epi64(lo, first, hi));
        _mm512_store_si512((void *)(bp + (pairs + r) * 32),
                           _mm512_permutex2var_epi64(lo, second, hi));
      }
    }
    return;
  }
  /* B(p, j) = b[j ldb + p]: a pair is one 32-bit word of b's row j, so
     16 columns x 16 pairs are a 16 x 16 transpose of words */
  for (int64_t j = j0; j < j1; j += 16, bp += pairs * 32)
    for (int64_t r = 0; r < pairs; r += 16) {
      __m512i w[16];
      for (int l = 0; l < 16; l++) {
        __mmask32 keep = j + l < n ? lanes32(kc - 2 * r) : 0;
        w[l] = _mm512_maskz_loadu_epi16(keep, b + (j + l) * ldb + p0 + 2 * r);
      }
      qkv_amx_transpose16x32(w);
      for (int q = 0; q < 16; q++) _mm512_store_si512((void *)(bp + (r + q) * 32), w[q]);
    }
}

/* tile t of the block from (or to) the running sums: rows 16 x 4 bytes
   of acc, ld floats apart */
#define SUMS_IN(t, p) LOAD(t, p, ld * 4)
#define SUMS_OUT(t, p) _tile_stored(t, p, ld * 4)

/* tile t (through e, 16 x 16 floats) times alpha, rounded to bfloat16
   (to nearest even, NaN kept quiet: qkv_f2bf's bits, but for results
   below 2^-126, which become 0 as the tile unit's sums do), into rows r0..
   and columns c0.. of c, inside m x n */
static QKV_AMX void round_out (const float *e, float alpha, uint16_t *c, int64_t ldc, int64_t m,
                               int64_t n, int64_t r0, int64_t c0) {
  if (r0 >= m || c0 >= n) return;
  __mmask16 cols = qkv_lanes16(n - c0);
  int64_t rows = m - r0 < 16 ? m - r0 : 16;
  const __m512 al = _mm512_set1_ps(alpha);   /* x * 1 is x (a NaN quieted, as the
                                                 conversion quiets it anyway) */
  c += r0 * ldc + c0;
  for (int64_t r = 0; r < rows; r++) {
    __m512 v = _mm512_mul_ps(_mm512_load_ps(e + r * 16), al);
    _mm256_mask_storeu_epi16(c + r * ldc, cols, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

#define ROUND_OUT(t, r, c_) do { _tile_stored(t, e, 64); \
    round_out(e, alpha, c, ldc, m, n, r, c_); } while (0)

/*
** The 32 x 32 outputs at rows r0.. (row ar of ap) and columns c0.. (column
** block cb of bp), over ks of the slice's depth.  Sums of earlier slices
** are in acc (at the block, rows ld floats apart) unless first; the sums
** go back there unless last, when they are rounded into c.
*/
static QKV_AMX void block (const uint16_t *ap, int64_t ar, const uint16_t *bp, int64_t cb,
                           int64_t ks, float *acc, int64_t ld, int first, int last,
                           float alpha, uint16_t *c, int64_t ldc, int64_t m, int64_t n,
                           int64_t r0, int64_t c0, float *e) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    SUMS_IN(0, acc);
    SUMS_IN(1, acc + 16);
    SUMS_IN(2, acc + 16 * ld);
    SUMS_IN(3, acc + 16 * ld + 16);
  }
  const uint16_t *a0 = ap + ar * ks, *a1 = a0 + 16 * ks;
  const uint16_t *b0 = bp + cb * ks * 16, *b1 = b0 + ks * 16;
  for (int64_t kk = 0; kk < ks; kk += 32) {
    LOAD(4, a0 + kk, ks * 2);
    LOAD(6, b0 + kk / 2 * 32, 64);
    _tile_dpbf16ps(0, 4, 6);
    LOAD(7, b1 + kk / 2 * 32, 64);
    _tile_dpbf16ps(1, 4, 7);
    LOAD(5, a1 + kk, ks * 2);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (!last) {
    SUMS_OUT(0, acc);
    SUMS_OUT(1, acc + 16);
    SUMS_OUT(2, acc + 16 * ld);
    SUMS_OUT(3, acc + 16 * ld + 16);
    return;
  }
  ROUND_OUT(0, r0, c0);
  ROUND_OUT(1, r0, c0 + 16);
  ROUND_OUT(2, r0 + 16, c0);
  ROUND_OUT(3, r0 + 16, c0 + 16);
}

static QKV_AMX void run (int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                         uint16_t *c, int64_t ldc, int64_t depth, uint16_t *ap, uint16_t *bp,
                         float *acc) {
  float e[256] __attribute__((aligned(64)));
  int64_t np = qkv_amx_up(n, NB), nc = NC(depth);
  qkv_amx_config();
  for (int64_t p0 = 0; p0 < k; p0 += depth) {
    int64_t p1 = k - p0 < depth ? k : p0 + depth, ks = qkv_amx_up(p1 - p0, 32);
    for (int64_t j0 = 0; j0 < np; j0 += nc) {
      int64_t j1 = np - j0 < nc ? np : j0 + nc;
      pack_b(tb, b, ldb, n, j0, j1, p0, p1, ks, bp);
      for (int64_t i0 = 0; i0 < m; i0 += MC) {
        int64_t rows = qkv_amx_up(m - i0 < MC ? m - i0 : MC, 32);
        pack_a(ta, a, lda, m, p1, i0, p0, ks, ap);
        for (int64_t c0 = j0; c0 < j1; c0 += NB)
          for (int64_t r = 0; r < rows; r += 32)
            block(ap, r, bp, (c0 - j0) / 16, ks, acc ? acc + (i0 + r) * np + c0 : NULL, np,
                  p0 == 0, p1 == k, alpha, c, ldc, m, n, i0 + r, c0, e);
      }
    }
  }
  _tile_release();
}

int qkv_amx_bf16gemm (int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                      uint16_t *c, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0 || !qkv_cpu_has_amx()) return -1;
  /* slices of equal depth, at most KC */
  int64_t slices = (k + KC - 1) / KC, depth = qkv_amx_up((k + slices - 1) / slices, 32);
  int64_t np = qkv_amx_up(n, NB), nc = NC(depth);
  uint16_t *bp = buffer(0, (size_t)((np < nc ? np : nc) * depth));
  uint16_t *ap = buffer(1, (size_t)(MC * depth));
  float *acc = NULL;
  if (slices > 1) {
    /* floats, in 16-bit units */
    size_t need = (size_t)(qkv_amx_up(m, 32) * qkv_amx_up(n, NB)) * 2;
    acc = (float *)buffer(2, need);
    if (acc == NULL) return -1;
  }
  if (bp == NULL || ap == NULL) return -1;
  run(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc, depth, ap, bp, acc);
  return 0;
}
#else
int qkv_amx_bf16gemm (int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                      uint16_t *c, int64_t ldc) {
  (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)lda; (void)b;
  (void)ldb; (void)c; (void)ldc;
  return -1;
}
#endif
