/*
** attention_bwd_avx512.c -- the fused attention's backward (float32, no
** mask tensor, the forward's log-sum-exps given) with its five products
** in registers, on CPUs with AVX-512 F/VL/BW/DQ; attention_bwd.c picks it
** and keeps the BLAS-tile version for everything else (float64, masks, a
** CPU without AVX-512).  The tiles' products were 56-108 GFLOP/s through
** oneDNN on a small model's heads (64 x 64 x 32), and half the backward's
** time at N = 4096 went to calls that pack what they read.
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
   (rows in multiples of 4 or 8, as heads and tiles come) */
#define TAIL(MR, NV, n) case n: block(n, NV, kd, a, ars, acs, b, ldb, c, ldc, last, acc); break;
#define STRIP(name, MR, NV, TAILS)                                                         \
  static QKV_AVX512 void name (int64_t m, int64_t kd, const float *a, int64_t ars,         \
                               int64_t acs, const float *b, int64_t ldb, float *c,         \
                               int64_t ldc, __mmask16 last, int acc) {                     \
    for (; m >= MR; m -= MR, a += MR * ars, c += MR * ldc)                                  \
      block(MR, NV, kd, a, ars, acs, b, ldb, c, ldc, last, acc);                            \
    switch (m) { TAILS default: break; }                                                   \
  }
#define T4(MR, NV) TAIL(MR, NV, 1) TAIL(MR, NV, 2) TAIL(MR, NV, 3)
#define T8(MR, NV) T4(MR, NV) TAIL(MR, NV, 4) TAIL(MR, NV, 5) TAIL(MR, NV, 6) TAIL(MR, NV, 7)
#define T16(MR, NV) T8(MR, NV) TAIL(MR, NV, 8) TAIL(MR, NV, 9) TAIL(MR, NV, 10) \
  TAIL(MR, NV, 11) TAIL(MR, NV, 12) TAIL(MR, NV, 13) TAIL(MR, NV, 14) TAIL(MR, NV, 15)
STRIP(strip1, 16, 1, T16(16, 1))
STRIP(strip2, 12, 2, T8(12, 2) TAIL(12, 2, 8) TAIL(12, 2, 9) TAIL(12, 2, 10) TAIL(12, 2, 11))
STRIP(strip3, 8, 3, T8(8, 3))
STRIP(strip4, 6, 4, T4(6, 4) TAIL(6, 4, 4) TAIL(6, 4, 5))

/* c (m x n, row stride ldc) = or += a b as above: strips of 64 columns */
static QKV_AVX512 void gemm (int64_t m, int64_t n, int64_t kd, const float *a, int64_t ars,
                             int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                             int acc) {
  for (int64_t j = 0; j < n; j += 64) {
    int64_t w = n - j < 64 ? n - j : 64;
    int nv = (int)((w + 15) / 16);
    __mmask16 last = lanes(w - 16 * (nv - 1));
    switch (nv) {
      case 1: strip1(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc); break;
      case 2: strip2(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc); break;
      case 3: strip3(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc); break;
      default: strip4(m, kd, a, ars, acs, b + j, ldb, c + j, ldc, last, acc); break;
    }
  }
}

/* xt (cols x BQ) = s times the bq rows of x (row stride rs) transposed,
   16 rows to a gather; lanes past bq zeros.  (Element by element this was
   as much time as the products for heads of 16.) */
static QKV_AVX512 void pack_t (const float *x, int64_t rs, int64_t bq, int64_t cols, float s,
                               float *xt) {
  if (rs > (1 << 26)) {                         /* 16 rows' offsets overflow int32 */
    for (int64_t i = 0; i < BQ; i++)
      for (int64_t c = 0; c < cols; c++) xt[c * BQ + i] = i < bq ? s * x[i * rs + c] : 0.0f;
    return;
  }
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                          _mm512_set1_epi32((int)rs));
  const __m512 sc = _mm512_set1_ps(s);
  for (int64_t i = 0; i < bq; i += 16) {
    __mmask16 m = lanes(bq - i);
    for (int64_t c = 0; c < cols; c++) {
      __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, rows, x + i * rs + c, 4);
      _mm512_store_ps(xt + c * BQ + i, _mm512_mul_ps(v, sc));
    }
  }
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
** is hidden from the queries before t + j (causal); lse is +inf for a
** query with no key, so its exp is 0.  Lanes past bq are zeros.
*/
static QKV_AVX512 void grads (float *st, float *dpt, int64_t bk, int64_t bq, int64_t t,
                              const float *lse, const float *D, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < bk; j++, st += BQ, dpt += BQ)
    for (int64_t i = 0; i < bq; i += 16) {
      __mmask16 keep = lanes(bq - i) & (__mmask16)~lanes(t + j - i);
      __m512 s = _mm512_maskz_loadu_ps(keep, st + i);
      __m512 p = _mm512_maskz_mov_ps(keep, qkv_vexp16(_mm512_sub_ps(s, _mm512_load_ps(lse + i))));
      __m512 dp = _mm512_sub_ps(_mm512_maskz_loadu_ps(keep, dpt + i), _mm512_load_ps(D + i));
      _mm512_storeu_ps(st + i, p);
      _mm512_storeu_ps(dpt + i, _mm512_maskz_mul_ps(keep, _mm512_mul_ps(p, dp), sc));
    }
}

size_t qkv_attn_bwd_avx512_work (int64_t d, int64_t dv) {
  return sizeof(float) * (size_t)(BQ * (d + dv) + 2 * BK * BQ + 2 * BQ) + 64;
}

void qkv_attn_bwd_avx512 (const qkv_attn_plan *P, const qkv_attn_bwd_item *it, void *work) {
  int64_t nq = P->nq, nk = P->nk, d = P->dk, dv = P->dv;
  float scale = (float)P->scale;
  float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  float *qt = w, *dot = qt + BQ * d, *st = dot + BQ * dv, *dpt = st + BK * BQ;
  float *lse = dpt + BK * BQ, *D = lse + BQ;
  memset(it->dq, 0, sizeof(float) * (size_t)(nq * d));
  memset(it->dk, 0, sizeof(float) * (size_t)(nk * d));
  memset(it->dvv, 0, sizeof(float) * (size_t)(nk * dv));
  for (int64_t i0 = 0; i0 < nq; i0 += BQ) {
    int64_t bq = nq - i0 < BQ ? nq - i0 : BQ;
    const float *q = it->q + i0 * it->qrs, *go = it->go + i0 * it->gors, *o = it->o + i0 * it->ors;
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
      gemm(bk, bq, d, k, it->krs, 1, qt, BQ, st, BQ, 0);
      gemm(bk, bq, dv, v, it->vrs, 1, dot, BQ, dpt, BQ, 0);
      grads(st, dpt, bk, bq, t, lse, D, scale);
      gemm(bk, dv, bq, st, BQ, 1, go, it->gors, it->dvv + j0 * dv, dv, 1);
      gemm(bk, d, bq, dpt, BQ, 1, q, it->qrs, it->dk + j0 * d, d, 1);
      gemm(bq, d, bk, dpt, 1, BQ, k, it->krs, dq, d, 1);
    }
  }
}
#else
typedef int qkv_no_avx512_attention_backward;   /* (an empty file is not ISO C) */
#endif
