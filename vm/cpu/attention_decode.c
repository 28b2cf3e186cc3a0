/*
** attention_decode.c -- the fused attention for a few queries against many
** keys: a decode step, where one new token's queries (a group's heads
** folded into rows by stdlib/qkv/gqa.lua) meet the whole KV cache.  There
** is little arithmetic per key; the time is reading K and V once, so the
** kernel streams them in order, eight keys at a time:
**
**   s = q k^T for every query (8 accumulators a query, summed across in
**   registers), the online softmax of the eight (a running max m and sum l
**   per query; o rescaled when the max grows), o += p V (16 features of up
**   to 4 queries in registers).
**
** A work item is one batch item's keys, or a split of them when there are
** fewer batch items than twice the threads (flash-decoding): each split
** leaves its (m, l, o) and one pass merges them.  K and V float32 or
** bfloat16, widened in registers (a bfloat16 cache reads half the bytes);
** q scaled and held in float32, o in float32 until it is written once.
** AVX2 and FMA; attention.c sends a job here when qkv_attn_decode_fits.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_job.h"
#include "parallel.h"
#include "../core/half.h"

#ifdef QKV_VEXP_X86

/* its limits, besides DQ queries at most (attention_job.h) */
enum {
  DMAX = 512,        /* d_k, d_v at most this, multiples of 8 */
  SPLIT_MIN = 512    /* keys a split at least */
};

int qkv_attn_decode_fits (const job *J) {
  const qkv_attn_plan *P = &J->p;
  return (P->dtype == QKV_F32 || P->dtype == QKV_BF16) && P->nq <= DQ && !P->has_mask &&
         !J->mods && P->dk > 0 && P->dk <= DMAX && P->dk % 8 == 0 && P->dv > 0 &&
         P->dv <= DMAX && P->dv % 8 == 0 && P->q.cs == 1 && P->k.cs == 1 && P->v.cs == 1 &&
         isfinite(P->scale) && P->scale != 0 && qkv_cpu_has_avx2();
}

typedef struct {
  const job *J;
  int bf16;
  int64_t nsplit, klen;             /* splits of each item's keys, keys a split */
  float *part;                      /* nsplit > 1: per (item, split, query) m, l, o[dv] */
} dec;

/* 8 features of a row of K or V from c, widened to float32 */
static inline QKV_AVX2 __m256 load8 (const void *row, int64_t c, int bf16) {
  if (!bf16) return _mm256_loadu_ps((const float *)row + c);
  __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* the sums of the lanes of a[0..7], in lanes 0..7 */
static inline QKV_AVX2 __m256 hsum8 (const __m256 a[8]) {
  __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  t0 = _mm256_hadd_ps(t0, t1);                 /* 0 1 2 3 (low halves) | (high) */
  t2 = _mm256_hadd_ps(t2, t3);                 /* 4 5 6 7 */
  __m256 lo = _mm256_permute2f128_ps(t0, t2, 0x20), hi = _mm256_permute2f128_ps(t0, t2, 0x31);
  return _mm256_add_ps(lo, hi);
}

static inline QKV_AVX2 float hmax8 (__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline QKV_AVX2 float hadd8 (__m256 x) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/* element r of a row stored as dtype bf16 or float32 */
static inline float elem (const void *p, int64_t r, int bf16) {
  return bf16 ? qkv_bf2f(((const uint16_t *)p)[r]) : ((const float *)p)[r];
}

/* o's row (dv features) times a */
static inline QKV_AVX2 void rescale (float *o, int64_t dv, float a) {
  __m256 va = _mm256_set1_ps(a);
  for (int64_t c = 0; c < dv; c += 8) _mm256_storeu_ps(o + c, _mm256_mul_ps(va, _mm256_loadu_ps(o + c)));
}

/*
** Keys [j0, j1) of batch item b for its nq queries: m, l per query and o
** (nq x dv, not divided by l).  qs: q times the scale (nq x dk); s: nq x 8
** probabilities.  A query whose every key is dropped keeps m = -inf, l =
** 0; a NaN score makes l NaN.  s holds nq x 8 then, for bfloat16, the
** 8 keys' rows of K widened.  Eight keys at a time from scores to o, so
** that their rows of K and V are read once each, in order (bench/NOTES.md:
** a softmax over blocks of 64 keys left V's rows to miss L1 in p V).
*/
static inline QKV_AVX2 __attribute__((always_inline)) void
keys_of (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs, float *s, float *m,
         float *l, float *o, const int bf16) {
  const qkv_attn_plan *P = &D->J->p;
  int nq = (int)P->nq;
  int64_t dk = P->dk, dv = P->dv, es = bf16 ? 2 : 4, off[4];
  int64_t krs = P->k.rs * es, vrs = P->v.rs * es;
  qkv_attn_batch_offsets(P, b, off);
  const char *kb = P->k.base + off[1] * es, *vb = P->v.base + off[2] * es;
  for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;
  memset(o, 0, sizeof(float) * (size_t)(nq * dv));
  for (int64_t j = j0; j < j1; j += 8) {
    int n = (int)(j1 - j < 8 ? j1 - j : 8);
    /* each query's scores against the 8 keys; past n the last key again */
    const char *kr[8];
    _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) kr[t] = kb + (j + (t < n ? t : n - 1)) * krs;
    if (bf16) {       /* widened once for all the queries, not once a query */
      float *kc = s + DQ * 8;
      for (int t = 0; t < 8; t++) {
        for (int64_t c = 0; c < dk; c += 8) _mm256_storeu_ps(kc + t * dk + c, load8(kr[t], c, 1));
        kr[t] = (const char *)(kc + t * dk);
      }
    }
    for (int r = 0; r < nq; r++) {
      __m256 a[8];
      _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
      for (int64_t c = 0; c < dk; c += 8) {
        __m256 qv = _mm256_loadu_ps(qs + r * dk + c);
        _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++)
          a[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps((const float *)kr[t] + c), a[t]);
      }
      /* keys past n, and past the causal limit (query r keeps keys up to
         r + off), -inf; then the online softmax of the eight */
      int64_t lim = P->causal ? r + P->off + 1 - j : n;
      int keep = (int)(lim < 0 ? 0 : lim < n ? lim : n);
      __m256 x = hsum8(a);
      __m256 drop = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                  _mm256_set1_ps((float)keep), _CMP_GE_OQ);
      x = _mm256_blendv_ps(x, _mm256_set1_ps(-INFINITY), drop);
      float bm = hmax8(x);                      /* skips NaN */
      if (bm > m[r]) {
        if (m[r] != -INFINITY) {
          float alpha = expf(m[r] - bm);
          l[r] *= alpha;
          rescale(o + r * dv, dv, alpha);
        }
        m[r] = bm;
      }
      if (m[r] == -INFINITY) {                  /* nothing kept yet: NaN still spoils */
        float xs[8];
        _mm256_storeu_ps(xs, x);
        for (int t = 0; t < keep; t++) if (xs[t] != xs[t]) l[r] = NAN;
        _mm256_storeu_ps(s + r * 8, _mm256_setzero_ps());
        continue;
      }
      __m256 p = qkv_vexp8(_mm256_sub_ps(x, _mm256_set1_ps(m[r])));
      _mm256_storeu_ps(s + r * 8, p);
      l[r] += hadd8(p);
    }
    /* o += p V: 16 features of up to 4 queries in registers */
    for (int r0 = 0; r0 < nq; r0 += 4) {
      int nr = nq - r0 < 4 ? nq - r0 : 4;
      /* rows past nr: row r0's again (computed, not stored) */
      float *o0 = o + r0 * dv, *o1 = o + (r0 + (nr > 1)) * dv;
      float *o2 = o + (r0 + (nr > 2 ? 2 : 0)) * dv, *o3 = o + (r0 + (nr > 3 ? 3 : 0)) * dv;
      const float *p0 = s + r0 * 8, *p1 = s + (o1 - o) / dv * 8;
      const float *p2 = s + (o2 - o) / dv * 8, *p3 = s + (o3 - o) / dv * 8;
      for (int64_t c = 0; c < dv; c += 16) {
        /* a lone last 8 features: the first 8 again, not stored */
        int64_t h8 = c + 16 <= dv ? 8 : 0;
        __m256 a0 = _mm256_loadu_ps(o0 + c), b0 = _mm256_loadu_ps(o0 + c + h8);
        __m256 a1 = _mm256_loadu_ps(o1 + c), b1 = _mm256_loadu_ps(o1 + c + h8);
        __m256 a2 = _mm256_loadu_ps(o2 + c), b2 = _mm256_loadu_ps(o2 + c + h8);
        __m256 a3 = _mm256_loadu_ps(o3 + c), b3 = _mm256_loadu_ps(o3 + c + h8);
        const char *vr = vb + j * vrs;
        for (int t = 0; t < n; t++, vr += vrs) {
          __m256 v0 = load8(vr, c, bf16), v1 = load8(vr, c + h8, bf16), p;
          p = _mm256_broadcast_ss(p0 + t);
          a0 = _mm256_fmadd_ps(p, v0, a0);
          b0 = _mm256_fmadd_ps(p, v1, b0);
          p = _mm256_broadcast_ss(p1 + t);
          a1 = _mm256_fmadd_ps(p, v0, a1);
          b1 = _mm256_fmadd_ps(p, v1, b1);
          p = _mm256_broadcast_ss(p2 + t);
          a2 = _mm256_fmadd_ps(p, v0, a2);
          b2 = _mm256_fmadd_ps(p, v1, b2);
          p = _mm256_broadcast_ss(p3 + t);
          a3 = _mm256_fmadd_ps(p, v0, a3);
          b3 = _mm256_fmadd_ps(p, v1, b3);
        }
        __m256 ra[4] = {a0, a1, a2, a3}, rb[4] = {b0, b1, b2, b3};
        for (int r = 0; r < nr; r++) {
          _mm256_storeu_ps(o + (r0 + r) * dv + c, ra[r]);
          if (h8) _mm256_storeu_ps(o + (r0 + r) * dv + c + 8, rb[r]);
        }
      }
    }
  }
}

static QKV_AVX2 void keys_f32 (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs,
                               float *s, float *m, float *l, float *o) {
  keys_of(D, b, j0, j1, qs, s, m, l, o, 0);
}

static QKV_AVX2 void keys_bf16 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                                const float *qs, float *s, float *m, float *l, float *o) {
  keys_of(D, b, j0, j1, qs, s, m, l, o, 1);
}

static void keys (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs, float *s,
                  float *m, float *l, float *o) {
  (D->bf16 ? keys_bf16 : keys_f32)(D, b, j0, j1, qs, s, m, l, o);
}

/* batch item b's outputs (and lse) from m, l, o */
static void finish (const dec *D, int64_t b, const float *m, const float *l, const float *o) {
  const qkv_attn_plan *P = &D->J->p;
  int64_t dv = P->dv;
  for (int64_t r = 0; r < P->nq; r++) {
    float inv = l[r] == 0 ? 0.0f : 1.0f / l[r];      /* no key: zeros */
    const float *src = o + r * dv;
    int64_t at = (b * P->nq + r) * dv;
    if (D->bf16)
      for (int64_t c = 0; c < dv; c++) ((uint16_t *)P->out)[at + c] = qkv_f2bf(src[c] * inv);
    else
      for (int64_t c = 0; c < dv; c++) ((float *)P->out)[at + c] = src[c] * inv;
    /* m + log(l) in float32, as m and l are; qkv_attn_lse_at stores it as
       float32 for float32 and bfloat16 jobs alike */
    if (P->lse) qkv_attn_lse_at(D->J, b * P->nq + r, l[r] == 0 ? -INFINITY : m[r] + logf(l[r]));
  }
}

/* a thread's scratch: q scaled, 8 keys' probabilities (and K's 8 rows
   widened), m, l and o */
typedef struct { float *qs, *s, *m, *l, *o; void *block; } work;

static int work_new (const qkv_attn_plan *P, work *W) {
  size_t nq = (size_t)P->nq, nqs = nq * (size_t)P->dk, no = nq * (size_t)P->dv;
  size_t ns = DQ * 8 + 8 * (size_t)P->dk;
  char *p = W->block = aligned_alloc(64, ((nqs + ns + 2 * DQ + no) * 4 / 64 + 6) * 64);
  if (p == NULL) return 0;
  W->qs = qkv_attn_carve(&p, nqs * 4);
  W->s = qkv_attn_carve(&p, ns * 4);
  W->m = qkv_attn_carve(&p, DQ * 4);
  W->l = qkv_attn_carve(&p, DQ * 4);
  W->o = qkv_attn_carve(&p, no * 4);
  return 1;
}

/* units [lo, hi): unit u is split u % nsplit of batch item u / nsplit */
static int units (void *ctx, int64_t lo, int64_t hi, int tid) {
  const dec *D = ctx;
  const qkv_attn_plan *P = &D->J->p;
  work W;
  (void)tid;
  if (!work_new(P, &W)) return QKV_ENOMEM;
  unsigned csr = qkv_ftz_on(1);
  int64_t nq = P->nq, dk = P->dk, dv = P->dv, es = D->bf16 ? 2 : 4;
  for (int64_t u = lo; u < hi && !qkv_interrupted; u++) {
    int64_t b = u / D->nsplit, sp = u % D->nsplit, off[4];
    qkv_attn_batch_offsets(P, b, off);
    const char *q = P->q.base + off[0] * es;
    for (int64_t r = 0; r < nq; r++)
      for (int64_t c = 0; c < dk; c++)
        W.qs[r * dk + c] = (float)P->scale * elem(q + r * P->q.rs * es, c, D->bf16);
    int64_t j0 = sp * D->klen, j1 = j0 + D->klen < P->nk ? j0 + D->klen : P->nk;
    if (D->nsplit == 1) {
      keys(D, b, j0, j1, W.qs, W.s, W.m, W.l, W.o);
      finish(D, b, W.m, W.l, W.o);
      continue;
    }
    float *pt = D->part + u * nq * (2 + dv);      /* m, l of each query, then o */
    keys(D, b, j0, j1, W.qs, W.s, pt, pt + nq, pt + 2 * nq);
  }
  qkv_ftz_off(csr);
  free(W.block);
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}

/* batch item b's splits merged: each rescaled to the largest max */
static void merge (const dec *D, int64_t b, float *m, float *l, float *o) {
  const qkv_attn_plan *P = &D->J->p;
  int64_t nq = P->nq, dv = P->dv;
  for (int64_t r = 0; r < nq; r++) {
    float mx = -INFINITY, sum = 0;
    for (int64_t sp = 0; sp < D->nsplit; sp++) {
      const float *pt = D->part + (b * D->nsplit + sp) * nq * (2 + dv);
      mx = pt[r] > mx ? pt[r] : mx;
      if (pt[nq + r] != pt[nq + r]) sum = NAN;    /* a NaN split spoils the row */
    }
    memset(o + r * dv, 0, sizeof(float) * (size_t)dv);
    for (int64_t sp = 0; sp < D->nsplit && mx != -INFINITY; sp++) {
      const float *pt = D->part + (b * D->nsplit + sp) * nq * (2 + dv);
      if (pt[r] == -INFINITY) continue;
      float w = expf(pt[r] - mx);
      sum += w * pt[nq + r];
      for (int64_t c = 0; c < dv; c++) o[r * dv + c] += w * pt[2 * nq + r * dv + c];
    }
    m[r] = mx;
    l[r] = sum;
  }
}

int qkv_attn_decode (const job *J) {
  const qkv_attn_plan *P = &J->p;
  dec D = {J, P->dtype == QKV_BF16, 1, P->nk, NULL};
  int T = qkv_par_threads();
  double work = qkv_attn_work(P);
  if (T > 1 && work >= PAR_MIN_WORK && P->nbatch < 2 * T) {
    int64_t want = (2 * T + P->nbatch - 1) / P->nbatch, most = P->nk / SPLIT_MIN;
    D.nsplit = want < most ? want : most > 1 ? most : 1;
    D.klen = (P->nk + D.nsplit - 1) / D.nsplit;
    D.nsplit = (P->nk + D.klen - 1) / D.klen;
  }
  int64_t n = P->nbatch * D.nsplit;
  if (D.nsplit > 1 &&
      (D.part = malloc(sizeof(float) * (size_t)(n * P->nq * (2 + P->dv)))) == NULL)
    return QKV_ENOMEM;
  int err = work >= PAR_MIN_WORK && n > 1 ? qkv_par_for(n, 1, units, &D) : units(&D, 0, n, 0);
  if (err == QKV_OK && D.nsplit > 1) {
    float m[DQ], l[DQ], *o = malloc(sizeof(float) * (size_t)(P->nq * P->dv));
    if (o == NULL) err = QKV_ENOMEM;
    for (int64_t b = 0; err == QKV_OK && b < P->nbatch; b++) {
      merge(&D, b, m, l, o);
      finish(&D, b, m, l, o);
    }
    free(o);
  }
  free(D.part);
  return err;
}

#endif
