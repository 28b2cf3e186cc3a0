/*
** attention_bwd_avx512.c -- the fused attention's backward (float32, no
** mask tensor, the forward's log-sum-exps given; the mods that
** attention_bwd.c's regs_take allows: a block mask with spans, a
** score_mod that adds a bias) with its five products in registers, on
** CPUs with AVX-512 F/VL/BW/DQ; attention_bwd.c keeps the BLAS-tile
** version for everything else (float64, mask tensors, other mods, a CPU
** without AVX-512).  A block mask's empty tiles are skipped, a partial
** tile's products run over the band its spans keep (ranges_of), and a
** score_mod runs on each tile's S^T by the forward's rows (mods_rows.c).
** The tiles' products were 56-108 GFLOP/s through oneDNN on a small
** model's heads (64 x 64 x 32), and half the backward's time at N = 4096
** went to calls that pack what they read.
**
** As the forward (attention_avx512.c) it works in the transposed frame:
** for a tile of BQ queries and BK keys, scores are held as st[j][i] (key
** j, query i, row stride BQ), queries along the vectors, so each query's
** log-sum-exp and D = dO . O are one vector per 16 queries.  Per key tile:
**   S^T  = K (scale Q)^T           st   (A = k's rows, B = packed q^T)
**   dP^T = V dO^T                  dpt  (A = v's rows, B = packed dO^T)
**   P^T  = exp(S^T - lse), dS^T = scale P^T (dP^T - D), in place
**   dV  += P^T dO,  dK += dS^T Q   (B = dO's and q's rows as they lie)
**   dQ  += dS K                    (A read down dS^T's columns)
** Every product is one kernel: C (m x n) = or += A B, B's rows contiguous,
** A's elements broadcast from any strides, C held in registers across the
** whole depth (a block of MR rows x NV vectors).
*/
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "attention_bwd_job.h"
#include "mods.h"
#include "pack_t8.h"
#include "vexp.h"

#ifdef QKV_VEXP_X86
#define INLINE static inline __attribute__((always_inline)) QKV_AVX512
#define UNROLL _Pragma("GCC unroll 16")
#define lanes qkv_lanes16

/* queries and keys of a tile (st is BK x BQ floats: 32 KB) */
#define BQ 128
#define BK 64

/*
** c[r][0..16 nv) (=, or += when acc) sum over p < kd of
** a[r ars + p acs] b[p ldb + 0..16 nv), for r < mr; the last vector's
** lanes are `last`.  mr x nv accumulators stay in registers.
*/
INLINE void block (int mr, int nv, int64_t kd, const float *a, int64_t ars, int64_t acs,
                   const float *b, int64_t ldb, float *c, int64_t ldc, __mmask16 last,
                   int acc) {
  __m512 C[16][4];
  UNROLL for (int r = 0; r < mr; r++)
    UNROLL for (int v = 0; v < nv; v++)
      C[r][v] = acc ? _mm512_maskz_loadu_ps(v == nv - 1 ? last : 0xffff, c + r * ldc + 16 * v)
                    : _mm512_setzero_ps();
  for (int64_t p = 0; p < kd; p++) {
    __m512 B[4];
    UNROLL for (int v = 0; v < nv; v++)
      B[v] = _mm512_maskz_loadu_ps(v == nv - 1 ? last : 0xffff, b + p * ldb + 16 * v);
    UNROLL for (int r = 0; r < mr; r++) {
      __m512 x = _mm512_set1_ps(a[r * ars + p * acs]);
      UNROLL for (int v = 0; v < nv; v++) C[r][v] = _mm512_fmadd_ps(x, B[v], C[r][v]);
    }
  }
  UNROLL for (int r = 0; r < mr; r++)
    UNROLL for (int v = 0; v < nv; v++)
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == nv - 1 ? last : 0xffff, C[r][v]);
}

/* rows [0, m) of a strip of nv vectors: blocks of MR rows, then the rest.
   MR x NV accumulators: 16 for one and four vectors, 24 for two and three
   (rows in multiples of 4 or 8, as heads and tiles come).  rlo not NULL
   (with acc): row r's sum runs over p in [rlo[r], rhi[r]) only, a block
   of rows over its rows' union (a block mask's band: what lies outside is
   zero, and a block with none is skipped) */
#define TAIL(MR, NV, n) case n: block(n, NV, kk, ar, ars, acs, br, ldb, cr, ldc, last, acc); break;
#define STRIP(name, MR, NV, TAILS)                                                         \
  static QKV_AVX512 void name (int64_t m, int64_t kd, const float *a, int64_t ars,         \
                               int64_t acs, const float *b, int64_t ldb, float *c,         \
                               int64_t ldc, __mmask16 last, int acc, const int32_t *rlo,   \
                               const int32_t *rhi) {                                       \
    for (int64_t r = 0; r < m; r += MR) {                                                  \
      int64_t n = m - r < MR ? m - r : MR, p0 = 0, p1 = kd;                                \
      if (rlo) union_of(rlo + r, rhi + r, n, &p0, &p1);                                    \
      if (p1 <= p0) continue;                                                              \
      int64_t kk = p1 - p0;                                                                \
      const float *ar = a + r * ars + p0 * acs, *br = b + p0 * ldb;                        \
      float *cr = c + r * ldc;                                                             \
      if (n == MR) block(MR, NV, kk, ar, ars, acs, br, ldb, cr, ldc, last, acc);          \
      else switch (n) { TAILS default: break; }                                            \
    }                                                                                      \
  }
#define T4(MR, NV) TAIL(MR, NV, 1) TAIL(MR, NV, 2) TAIL(MR, NV, 3)
#define T8(MR, NV) T4(MR, NV) TAIL(MR, NV, 4) TAIL(MR, NV, 5) TAIL(MR, NV, 6) TAIL(MR, NV, 7)
#define T16(MR, NV) T8(MR, NV) TAIL(MR, NV, 8) TAIL(MR, NV, 9) TAIL(MR, NV, 10) \
  TAIL(MR, NV, 11) TAIL(MR, NV, 12) TAIL(MR, NV, 13) TAIL(MR, NV, 14) TAIL(MR, NV, 15)

/* [*p0, *p1) the union of the n ranges [lo[r], hi[r]) (empty ones
   skipped); *p1 <= *p0 when all are empty */
static inline void union_of (const int32_t *lo, const int32_t *hi, int64_t n, int64_t *p0,
                             int64_t *p1) {
  *p0 = INT32_MAX;
  *p1 = 0;
  for (int64_t r = 0; r < n; r++)
    if (lo[r] < hi[r]) {
      *p0 = lo[r] < *p0 ? lo[r] : *p0;
      *p1 = hi[r] > *p1 ? hi[r] : *p1;
    }
}

STRIP(strip1, 16, 1, T16(16, 1))
STRIP(strip2, 12, 2, T8(12, 2) TAIL(12, 2, 8) TAIL(12, 2, 9) TAIL(12, 2, 10) TAIL(12, 2, 11))
STRIP(strip3, 8, 3, T8(8, 3))
STRIP(strip4, 6, 4, T4(6, 4) TAIL(6, 4, 4) TAIL(6, 4, 5))

/* c (m x n, row stride ldc) = or += a b as above: strips of 64 columns;
   rlo, rhi: each row's range of the sum, or NULL (STRIP) */
static QKV_AVX512 void gemm (int64_t m, int64_t n, int64_t kd, const float *a, int64_t ars,
                             int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                             int acc, const int32_t *rlo, const int32_t *rhi) {
  for (int64_t j = 0; j < n; j += 64) {
    int64_t w = n - j < 64 ? n - j : 64;
    int nv = (int)((w + 15) / 16);
    __mmask16 last = lanes(w - 16 * (nv - 1));
    switch (nv) {
      case 1: strip1(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc, rlo, rhi); break;
      case 2: strip2(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc, rlo, rhi); break;
      case 3: strip3(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc, rlo, rhi); break;
      default: strip4(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc, rlo, rhi); break;
    }
  }
}

/* c (m x n) = a b where column block s (32 columns from 32 s) needs only
   the rows [clo[s], chi[s]): each block over those rows (a block mask's
   band: the rows left out are never read as kept, grads drops them) */
static QKV_AVX512 void gemm_cols (int64_t n, int64_t kd, const float *a, int64_t ars,
                                  int64_t acs, const float *b, int64_t ldb, float *c,
                                  int64_t ldc, const int32_t *clo, const int32_t *chi) {
  for (int64_t j = 0, s = 0; j < n; j += 32, s++) {
    int64_t w = n - j < 32 ? n - j : 32, r = clo[s], m = chi[s] - clo[s];
    if (m <= 0) continue;
    const float *ar = a + r * ars;
    float *cr = c + r * ldc + j;
    if (w > 16) strip2(m, kd, ar, ars, acs, b + j, ldb, cr, ldc, lanes(w - 16), 0, NULL, NULL);
    else strip1(m, kd, ar, ars, acs, b + j, ldb, cr, ldc, lanes(w), 0, NULL, NULL);
  }
}

/* xt (cols x BQ) = s times the bq rows of x (row stride rs) transposed,
   by 8 x 8 blocks in registers (pack_t8.h; gathers of 16 rows took 6% of
   a window's backward); lanes past bq up to a multiple of 16 zeros */
static void pack_t (const float *x, int64_t rs, int64_t bq, int64_t cols, float s, float *xt) {
  qkv_pack_t(x, rs, 1, (int)bq, cols, s, xt, BQ, (int)(bq + 15) / 16 * 16);
}

/* D[i] = dO_i . O_i for i < bq (rows gs and os apart), in double (a
   float's product is exact there), 0 past bq */
static QKV_AVX512 void row_dots (const float *go, int64_t gs, const float *o, int64_t os,
                                 int64_t bq, int64_t dv, float *D) {
  for (int64_t i = bq; i < BQ; i++) D[i] = 0.0f;
  for (int64_t i = 0; i < bq; i++, go += gs, o += os) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t c = 0; c < dv; c += 16) {
      __mmask16 m = lanes(dv - c);
      __m512 g = _mm512_maskz_loadu_ps(m, go + c), v = _mm512_maskz_loadu_ps(m, o + c);
      a0 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(g)),
                           _mm512_cvtps_pd(_mm512_castps512_ps256(v)), a0);
      a1 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(g, 1)),
                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), a1);
    }
    D[i] = (float)_mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  }
}

/*
** st becomes P^T and dpt dS^T for bk keys x bq queries: key j of the tile
** is hidden from the queries before t + j (causal), and, sp not NULL,
** from query i outside its span [sp[i], sp[BQ + i]) (a block mask's);
** lse is +inf for a query with no key, so its exp is 0.  Lanes past bq,
** and every dropped pair, are zeros.
*/
static QKV_AVX512 void grads (float *st, float *dpt, int64_t bk, int64_t bq, int64_t t,
                              const float *lse, const float *D, float scale,
                              const int32_t *sp) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < bk; j++, st += BQ, dpt += BQ)
    for (int64_t i = 0; i < bq; i += 16) {
      __mmask16 keep = lanes(bq - i) & (__mmask16)~lanes(t + j - i);
      if (sp) {
        __m512i jj = _mm512_set1_epi32((int)j);
        keep &= _mm512_cmple_epi32_mask(_mm512_loadu_si512(sp + i), jj) &
                _mm512_cmpgt_epi32_mask(_mm512_loadu_si512(sp + BQ + i), jj);
      }
      if (!keep) {                              /* (a band's edge: no exp) */
        _mm512_storeu_ps(st + i, _mm512_setzero_ps());
        _mm512_storeu_ps(dpt + i, _mm512_setzero_ps());
        continue;
      }
      __m512 s = _mm512_maskz_loadu_ps(keep, st + i);
      __m512 p = _mm512_maskz_mov_ps(keep, qkv_vexp16(_mm512_sub_ps(s, _mm512_load_ps(lse + i))));
      __m512 dp = _mm512_sub_ps(_mm512_maskz_loadu_ps(keep, dpt + i), _mm512_load_ps(D + i));
      _mm512_storeu_ps(st + i, p);
      _mm512_storeu_ps(dpt + i, _mm512_maskz_mul_ps(keep, _mm512_mul_ps(p, dp), sc));
    }
}

/* the floats of the fixed scratch; then, with a score_mod, its rows */
static size_t floats_of (int64_t d, int64_t dv) {
  return (size_t)(BQ * (d + dv) + 2 * BK * BQ + 2 * BQ);
}

size_t qkv_attn_bwd_avx512_work (int64_t d, int64_t dv, const qkv_attn_mods *M) {
  size_t n = sizeof(float) * floats_of(d, dv) + 64;
  if (M && M->prog->out[QKV_MOD_OUT_SCORE] >= 0)
    n += sizeof(double) * qkv_mod_row_scratch(M->prog, BQ, BK) + 64;
  return n;
}

/*
** A partial tile of a block mask with spans: sp[i], sp[BQ + i] query i's
** keys in the tile (clipped; none past bq), kr[j], kr[BK + j] the
** queries that keep key j (their first and one past their last), cr[s],
** cr[BQ / 32 + s] the keys any of the 32 queries from 32 s keeps.
*/
typedef struct {
  int32_t sp[2 * BQ], kr[2 * BK], cr[2 * (BQ / 32)];
} ranged;

static QKV_AVX512 void ranges_of (const int32_t *spans, int64_t bq, int64_t j0, int64_t bk,
                                  ranged *R) {
  for (int64_t j = 0; j < bk; j++) R->kr[j] = INT32_MAX, R->kr[BK + j] = 0;
  for (int64_t s = 0; s < BQ / 32; s++) R->cr[s] = (int32_t)bk, R->cr[BQ / 32 + s] = 0;
  for (int64_t i = 0; i < BQ; i++) {
    int64_t lo = i < bq ? spans[2 * i] - j0 : 0, hi = i < bq ? spans[2 * i + 1] - j0 : 0;
    lo = lo < 0 ? 0 : lo > bk ? bk : lo;
    hi = hi < lo ? lo : hi > bk ? bk : hi;
    R->sp[i] = (int32_t)lo;
    R->sp[BQ + i] = (int32_t)hi;
    if (lo >= hi) continue;
    int32_t *c0 = &R->cr[i / 32], *c1 = &R->cr[BQ / 32 + i / 32];
    *c0 = (int32_t)lo < *c0 ? (int32_t)lo : *c0;
    *c1 = (int32_t)hi > *c1 ? (int32_t)hi : *c1;
    __m512i ii = _mm512_set1_epi32((int32_t)i), i1 = _mm512_set1_epi32((int32_t)i + 1);
    for (int64_t j = lo; j < hi; j += 16) {       /* i ascending: min keeps the first */
      __mmask16 m = lanes(hi - j);
      _mm512_mask_storeu_epi32(R->kr + j, m, _mm512_min_epi32(_mm512_maskz_loadu_epi32(m, R->kr + j), ii));
      _mm512_mask_storeu_epi32(R->kr + BK + j, m, i1);
    }
  }
}

int qkv_attn_bwd_avx512 (const qkv_attn_plan *P, const qkv_attn_bwd_item *it, void *work) {
  int64_t nq = P->nq, nk = P->nk, d = P->dk, dv = P->dv;
  float scale = (float)P->scale;
  float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  float *qt = w, *dot = qt + BQ * d, *st = dot + BQ * dv, *dpt = st + BK * BQ;
  float *lse = dpt + BK * BQ, *D = lse + BQ;
  qkv_attn_mods *M = it->mods;
  ranged R;
  /* a score_mod: run on each tile's S^T by the forward's rows
     (mods_rows.c), its derivative by the score the constant dsk */
  int smod = M && M->prog->out[QKV_MOD_OUT_SCORE] >= 0;
  double *mem = (double *)(((uintptr_t)(w + floats_of(d, dv)) + 63) & ~(uintptr_t)63);
  double k1 = 1;
  if (smod) qkv_mod_dscore_const(M->prog, &k1);       /* a constant: regs_take's */
  float dsk = (float)k1;
  memset(it->dq, 0, sizeof(float) * (size_t)(nq * d));
  memset(it->dk, 0, sizeof(float) * (size_t)(nk * d));
  memset(it->dvv, 0, sizeof(float) * (size_t)(nk * dv));
  for (int64_t i0 = 0; i0 < nq; i0 += BQ) {
    int64_t bq = nq - i0 < BQ ? nq - i0 : BQ;
    const float *q = it->q + i0 * it->qrs, *go = it->go + i0 * it->gors, *o = it->o + i0 * it->ors;
    const int32_t *spans = M ? qkv_mod_spans(M, it->b, i0) : NULL;
    float *dq = it->dq + i0 * d;
    pack_t(q, it->qrs, bq, d, scale, qt);
    pack_t(go, it->gors, bq, dv, 1.0f, dot);
    row_dots(go, it->gors, o, it->ors, bq, dv, D);
    for (int64_t i = 0; i < BQ; i++) {
      float L = i < bq ? it->lse[i0 + i] : 0.0f;
      lse[i] = L == -INFINITY ? INFINITY : L;
    }
    for (int64_t j0 = 0; j0 < nk; j0 += BK) {
      int64_t bk = nk - j0 < BK ? nk - j0 : BK;
      /* t: key j of the tile is hidden from the tile's queries before t + j */
      int64_t t = qkv_attn_diagonal(P, i0, j0);
      if (t + bk > bq) bk = bq - t;             /* keys hidden from every query */
      if (bk <= 0) break;
      const float *k = it->k + j0 * it->krs, *v = it->v + j0 * it->vrs;
      /* a block mask's tile: none of it kept, never computed; part of it,
         each product over the band its spans keep */
      int kind = M ? qkv_mod_kind(M, it->b, i0, bq, j0, bk) : QKV_BLOCK_FULL;
      if (kind == QKV_BLOCK_EMPTY) continue;
      const int32_t *sp = NULL, *kr = NULL;       /* a partial tile's ranges */
      if (kind == QKV_BLOCK_PARTIAL) {
        ranges_of(spans, bq, j0, bk, &R);
        sp = R.sp;
        kr = R.kr;
        gemm_cols(bq, d, k, it->krs, 1, qt, BQ, st, BQ, R.cr, R.cr + BQ / 32);
        gemm_cols(bq, dv, v, it->vrs, 1, dot, BQ, dpt, BQ, R.cr, R.cr + BQ / 32);
      } else {
        gemm(bk, bq, d, k, it->krs, 1, qt, BQ, st, BQ, 0, NULL, NULL);
        gemm(bk, bq, dv, v, it->vrs, 1, dot, BQ, dpt, BQ, 0, NULL, NULL);
      }
      if (smod) {
        qkv_mod_tile T = {it->b / M->heads, it->b % M->heads, i0, j0, (int)bq, (int)bk, 1, 0,
                          st, BQ};
        if (qkv_mod_rows(M, &T, QKV_MOD_WANT_SCORE, mem, NULL, NULL) != QKV_OK) return QKV_EINDEX;
      }
      grads(st, dpt, bk, bq, t, lse, D, scale * dsk, sp);
      gemm(bk, dv, bq, st, BQ, 1, go, it->gors, it->dvv + j0 * dv, dv, 1, kr, kr ? kr + BK : NULL);
      gemm(bk, d, bq, dpt, BQ, 1, q, it->qrs, it->dk + j0 * d, d, 1, kr, kr ? kr + BK : NULL);
      gemm(bq, d, bk, dpt, 1, BQ, k, it->krs, dq, d, 1, sp, sp ? sp + BQ : NULL);
    }
  }
  return QKV_OK;
}
#else
typedef int qkv_no_avx512_attention_backward;   /* (an empty file is not ISO C) */
#endif
