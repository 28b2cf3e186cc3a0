/*
** attention_decode.c -- the fused attention for a few queries against many
** keys: a decode step, where one new token's queries (a group's heads
** folded into rows by stdlib/qkv/gqa.lua) meet the whole KV cache.  There
** is little arithmetic per key; the time is reading K and V once, so the
** kernel streams them in order, eight keys at a time:
**
**   their rows of K and V staged (widened) in L1 by a plain stream of
**   loads, s = q k^T for every query (8 accumulators a query, summed
**   across in registers), the online softmax of the eight (a running max m
**   and sum l per query; o rescaled when the max grows), o += p V (16
**   features of up to 4 queries in registers; 32 on AVX-512).
**
** A work item is one batch item's keys, or a split of them when there are
** fewer batch items than twice the threads (flash-decoding): each split
** leaves its (m, l, o) and one pass merges them.  K and V float32,
** bfloat16 or float16, widened as they are staged (a bfloat16 cache reads
** half the bytes; float16 by copy.c's widening, F16C being outside
** QKV_AVX2's target), q scaled and held in float32, o in float32 until it
** is written once: a half's bits are those of float32 copies through here,
** as the tile path's are of float32 copies through the tile path.
** AVX2 and FMA, or AVX-512 where d_k and d_v are multiples of 16;
** attention.c sends a job here when qkv_attn_decode_fits.
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
  return (P->dtype == QKV_F32 || qkv_is_half(P->dtype)) && P->nq <= DQ && !P->has_mask &&
         !J->mods && P->dk > 0 && P->dk <= DMAX && P->dk % 8 == 0 && P->dv > 0 &&
         P->dv <= DMAX && P->dv % 8 == 0 && P->q.cs == 1 && P->k.cs == 1 && P->v.cs == 1 &&
         isfinite(P->scale) && P->scale != 0 && qkv_cpu_has_avx2();
}

/* the dtype of q, K, V and out: dec's half, the bodies' `half` */
enum { F32 = 0, BF16 = 1, F16 = 2 };

typedef struct {
  const job *J;
  int half, wide;                   /* F32, BF16 or F16; the AVX-512 body */
  int nb;                           /* keys a step (step_keys) */
  int64_t nsplit, klen;             /* splits of each item's keys, keys a split */
  float *part;                      /* nsplit > 1: per (item, split, query) m, l, o[dv] */
} dec;

/* 8 features of a row of K or V from c, widened to float32 (not F16) */
static inline QKV_AVX2 __m256 load8 (const void *row, int64_t c, int half) {
  if (half == F32) return _mm256_loadu_ps((const float *)row + c);
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

/* element r of a row stored as `half` */
static inline float elem (const void *p, int64_t r, int half) {
  return half == BF16 ? qkv_bf2f(((const uint16_t *)p)[r])
       : half == F16 ? qkv_h2f(((const uint16_t *)p)[r]) : ((const float *)p)[r];
}

/* o's row (dv features) times a */
static inline QKV_AVX2 void rescale (float *o, int64_t dv, float a) {
  __m256 va = _mm256_set1_ps(a);
  for (int64_t c = 0; c < dv; c += 8) _mm256_storeu_ps(o + c, _mm256_mul_ps(va, _mm256_loadu_ps(o + c)));
}

/*
** Keys a step: 8 where d_k + d_v is 256 (their staged rows 8 KB), up to
** KMAX for smaller heads, where a softmax step every 8 keys cost more than
** the keys' products (d 16: 7 ns a key).
*/
enum { KMAX = 64 };
static int step_keys (int64_t dk, int64_t dv) {
  int64_t g = 256 / (dk + dv);
  return 8 * (int)(g < 1 ? 1 : g > KMAX / 8 ? KMAX / 8 : g);
}

/*
** Keys [j, j + n) of K and V staged: their rows widened to float32 into kc
** (rows up to a multiple of 8 past n: the last one again) and vc.  A plain
** stream of loads with nothing between them keeps many misses in flight;
** the products then read L1.  Measured (bench/NOTES.md): a 32k float32
** cache 13.5 -> 4.9 ms, where the products' loads straight from memory
** left the arithmetic waiting on each miss.
*/
static inline QKV_AVX2 __attribute__((always_inline)) void
stage (const char *kb, int64_t krs, const char *vb, int64_t vrs, int64_t j, int n, int64_t dk,
       int64_t dv, float *kc, float *vc, const int half) {
  for (int t = 0; t < n; t++) {
    const char *kr = kb + (j + t) * krs, *vr = vb + (j + t) * vrs;
    if (half == F16) {
      qkv_cpu_copy_tile(QKV_F32, kc + t * dk, QKV_F16, kr, 1, dk, dk, 1);
      qkv_cpu_copy_tile(QKV_F32, vc + t * dv, QKV_F16, vr, 1, dv, dv, 1);
      continue;
    }
    for (int64_t c = 0; c < dk; c += 8) _mm256_storeu_ps(kc + t * dk + c, load8(kr, c, half));
    for (int64_t c = 0; c < dv; c += 8) _mm256_storeu_ps(vc + t * dv + c, load8(vr, c, half));
  }
  for (int t = n; t % 8; t++) memcpy(kc + t * dk, kc + (n - 1) * dk, sizeof(float) * (size_t)dk);
}

/*
** Query r's online softmax of its scores against a step's keys, of which
** it keeps the first `keep` (past n, and past the causal limit, dropped):
** m, l and its row of o rescaled when the max grows (to bm, the kept
** scores' max, NaN skipped), p into s.  A query whose every key is
** dropped keeps m = -inf, l = 0; a NaN score makes l NaN.  rebase moves
** the max and returns 0 while nothing is kept yet (then the caller's l is
** NaN where a kept score x[t], t < keep, is, and its p zeros).
*/
static inline QKV_AVX2 __attribute__((always_inline)) int
rebase (float bm, int keep, const float *x, float *m, float *l, float *o, int64_t dv) {
  if (bm > *m) {
    if (*m != -INFINITY) {
      float alpha = expf(*m - bm);
      *l *= alpha;
      rescale(o, dv, alpha);
    }
    *m = bm;
  }
  if (*m != -INFINITY) return 1;
  for (int t = 0; t < keep; t++) if (x[t] != x[t]) *l = NAN;
  return 0;
}

/* the scores x of 8 keys, in a register (8 keys a step: d_k + d_v >= 256) */
static inline QKV_AVX2 __attribute__((always_inline)) void
soft8 (__m256 x, int keep, float *m, float *l, float *o, int64_t dv, float *s) {
  __m256 drop = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                              _mm256_set1_ps((float)keep), _CMP_GE_OQ);
  x = _mm256_blendv_ps(x, _mm256_set1_ps(-INFINITY), drop);
  float xs[8];
  _mm256_storeu_ps(xs, x);
  if (!rebase(hmax8(x), keep, xs, m, l, o, dv)) {      /* (hmax8 skips NaN) */
    _mm256_storeu_ps(s, _mm256_setzero_ps());
    return;
  }
  __m256 p = qkv_vexp8(_mm256_sub_ps(x, _mm256_set1_ps(*m)));
  _mm256_storeu_ps(s, p);
  *l += hadd8(p);
}

/* the scores x[0 .. 8 ng) of a bigger step's keys, in memory */
static inline QKV_AVX2 __attribute__((always_inline)) void
softn (float *x, int ng, int keep, float *m, float *l, float *o, int64_t dv, float *s) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), lim = _mm256_set1_ps((float)keep);
  __m256 idx = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), mx = ninf;
  for (int u = 0; u < ng; u++, idx = _mm256_add_ps(idx, _mm256_set1_ps(8))) {
    __m256 xu = _mm256_blendv_ps(_mm256_loadu_ps(x + 8 * u), ninf,
                                 _mm256_cmp_ps(idx, lim, _CMP_GE_OQ));
    _mm256_storeu_ps(x + 8 * u, xu);
    mx = _mm256_max_ps(xu, mx);                 /* a NaN in xu keeps mx */
  }
  if (!rebase(hmax8(mx), keep, x, m, l, o, dv)) {
    memset(s, 0, sizeof(float) * (size_t)(8 * ng));
    return;
  }
  __m256 sum = _mm256_setzero_ps(), mm = _mm256_set1_ps(*m);
  for (int u = 0; u < ng; u++) {
    __m256 p = qkv_vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * u), mm));
    _mm256_storeu_ps(s + 8 * u, p);
    sum = _mm256_add_ps(sum, p);
  }
  *l += hadd8(sum);
}

/* the keys query r keeps of the n from j: past n, and past the causal
   limit (query r keeps keys up to r + off), dropped */
static inline int kept (const qkv_attn_plan *P, int r, int64_t j, int n) {
  int64_t lim = P->causal ? r + P->off + 1 - j : n;
  return (int)(lim < 0 ? 0 : lim < n ? lim : n);
}

/*
** o += p V for a step's n keys: R queries' rows (1 to 4) by NV vectors (1
** or 2) of W lanes from feature c in registers, R and NV constants (a
** block of rows or features past the real ones would be work thrown away:
** at d 16 with 2 rows, three quarters of it); s has nb probabilities a
** query.  PV_STEP runs the blocks over the rows and features.
*/
#define PV_BLOCK(name, ATTR, V, W, LOAD, STORE, FMA, BCAST) \
  static inline ATTR __attribute__((always_inline)) void \
  name (const int R, const int NV, float *o, int64_t dv, const float *p, int nb, \
        const float *vc, int n, int64_t c) { \
    V a[4][2]; \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) \
      _Pragma("GCC unroll 2") for (int w = 0; w < NV; w++) \
        a[r][w] = LOAD(o + r * dv + c + w * (W)); \
    const float *vr = vc + c; \
    for (int t = 0; t < n; t++, vr += dv) { \
      V v[2]; \
      _Pragma("GCC unroll 2") for (int w = 0; w < NV; w++) v[w] = LOAD(vr + w * (W)); \
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) { \
        V pr = BCAST(p[r * nb + t]); \
        _Pragma("GCC unroll 2") for (int w = 0; w < NV; w++) a[r][w] = FMA(pr, v[w], a[r][w]); \
      } \
    } \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) \
      _Pragma("GCC unroll 2") for (int w = 0; w < NV; w++) \
        STORE(o + r * dv + c + w * (W), a[r][w]); \
  }
PV_BLOCK(pv8, QKV_AVX2, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
         _mm256_set1_ps)
PV_BLOCK(pv16, QKV_AVX512, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps,
         _mm512_set1_ps)

#define PV_STEP(BLOCK, W) do { \
  for (int r0 = 0; r0 < nq; r0 += 4) { \
    int nr = nq - r0 < 4 ? nq - r0 : 4; \
    float *or0 = o + r0 * dv; \
    const float *pr0 = s + r0 * nb; \
    for (int64_t c = 0; c < dv; c += 2 * (W)) { \
      switch (nr * 2 + (c + 2 * (W) <= dv)) { \
        case 2: BLOCK(1, 1, or0, dv, pr0, nb, vc, n, c); break; \
        case 3: BLOCK(1, 2, or0, dv, pr0, nb, vc, n, c); break; \
        case 4: BLOCK(2, 1, or0, dv, pr0, nb, vc, n, c); break; \
        case 5: BLOCK(2, 2, or0, dv, pr0, nb, vc, n, c); break; \
        case 6: BLOCK(3, 1, or0, dv, pr0, nb, vc, n, c); break; \
        case 7: BLOCK(3, 2, or0, dv, pr0, nb, vc, n, c); break; \
        case 8: BLOCK(4, 1, or0, dv, pr0, nb, vc, n, c); break; \
        default: BLOCK(4, 2, or0, dv, pr0, nb, vc, n, c); break; \
      } \
    } \
  } \
} while (0)

/* query row q's scores against the 8 rows of ku (dk apart), in lanes 0-7:
   8 accumulators summed across in registers */
static inline QKV_AVX2 __attribute__((always_inline)) __m256
dot8 (const float *q, const float *ku, int64_t dk) {
  __m256 a[8];
  _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < dk; c += 8) {
    __m256 qv = _mm256_loadu_ps(q + c);
    _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++)
      a[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(ku + t * dk + c), a[t]);
  }
  return hsum8(a);
}

/* the same on 16 lanes (d_k a multiple of 16), each key's 16 folded to 8 */
static inline QKV_AVX512 __attribute__((always_inline)) __m256
dot16 (const float *q, const float *ku, int64_t dk) {
  __m512 a[8];
  _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) a[t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < dk; c += 16) {
    __m512 qv = _mm512_loadu_ps(q + c);
    _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++)
      a[t] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(ku + t * dk + c), a[t]);
  }
  __m256 h[8];
  _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++)
    h[t] = _mm256_add_ps(_mm512_castps512_ps256(a[t]), _mm512_extractf32x8_ps(a[t], 1));
  return hsum8(h);
}

/*
** Keys [j0, j1) of batch item b for its nq queries: m, l per query and o
** (nq x dv, not divided by l).  qs: q times the scale (nq x dk); s: nq x
** nb probabilities, then the staged rows of K (nb x dk) and V (nb x dv).
** A step of nb keys (step_keys) from scores to o, so that their rows of K
** and V are read once each, in order, and stay in L1 for p V
** (bench/NOTES.md: a softmax over 64 keys of d 128 left V's rows to miss
** L1 in p V).  One body on 8 lanes (keys_of: DOT dot8, PV pv8) and on 16
** (keys_of16, AVX-512, d_k and d_v multiples of 16: half the instructions
** for the products, which a bfloat16 cache, half the bytes to read, is
** bound by).
*/
#define KEYS_OF(name, ATTR, DOT, PV, W) \
  static inline ATTR __attribute__((always_inline)) void \
  name (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs, float *s, float *m, \
        float *l, float *o, const int half) { \
    const qkv_attn_plan *P = &D->J->p; \
    int nq = (int)P->nq, nb = D->nb; \
    int64_t dk = P->dk, dv = P->dv, es = half ? 2 : 4, off[4]; \
    qkv_attn_batch_offsets(P, b, off); \
    const char *kb = P->k.base + off[1] * es, *vb = P->v.base + off[2] * es; \
    float *kc = s + DQ * KMAX, *vc = kc + nb * dk, x[KMAX]; \
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0; \
    memset(o, 0, sizeof(float) * (size_t)(nq * dv)); \
    for (int64_t j = j0; j < j1; j += nb) { \
      int n = (int)(j1 - j < nb ? j1 - j : nb), ng = (n + 7) / 8; \
      stage(kb, P->k.rs * es, vb, P->v.rs * es, j, n, dk, dv, kc, vc, half); \
      for (int r = 0; r < nq; r++) {   /* each query's scores, 8 keys at a time */ \
        for (int u = 0; u < ng; u++) { \
          __m256 xu = DOT(qs + r * dk, kc + 8 * u * dk, dk); \
          if (nb == 8) soft8(xu, kept(P, r, j, n), m + r, l + r, o + r * dv, dv, s + r * 8); \
          else _mm256_storeu_ps(x + 8 * u, xu); \
        } \
        if (nb > 8) softn(x, ng, kept(P, r, j, n), m + r, l + r, o + r * dv, dv, s + r * nb); \
      } \
      PV_STEP(PV, W); \
    } \
  }
KEYS_OF(keys_of, QKV_AVX2, dot8, pv8, 8)
KEYS_OF(keys_of16, QKV_AVX512, dot16, pv16, 16)

static QKV_AVX2 void keys_f32 (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs,
                               float *s, float *m, float *l, float *o) {
  keys_of(D, b, j0, j1, qs, s, m, l, o, F32);
}

static QKV_AVX2 void keys_bf16 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                                const float *qs, float *s, float *m, float *l, float *o) {
  keys_of(D, b, j0, j1, qs, s, m, l, o, BF16);
}

static QKV_AVX2 void keys_f16 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                               const float *qs, float *s, float *m, float *l, float *o) {
  keys_of(D, b, j0, j1, qs, s, m, l, o, F16);
}

static QKV_AVX512 void keys16_f32 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                                   const float *qs, float *s, float *m, float *l, float *o) {
  keys_of16(D, b, j0, j1, qs, s, m, l, o, F32);
}

static QKV_AVX512 void keys16_bf16 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                                    const float *qs, float *s, float *m, float *l, float *o) {
  keys_of16(D, b, j0, j1, qs, s, m, l, o, BF16);
}

static QKV_AVX512 void keys16_f16 (const dec *D, int64_t b, int64_t j0, int64_t j1,
                                   const float *qs, float *s, float *m, float *l, float *o) {
  keys_of16(D, b, j0, j1, qs, s, m, l, o, F16);
}

static void keys (const dec *D, int64_t b, int64_t j0, int64_t j1, const float *qs, float *s,
                  float *m, float *l, float *o) {
  static void (*const body[2][3])(const dec *, int64_t, int64_t, int64_t, const float *,
                                  float *, float *, float *, float *) = {
    {keys_f32, keys_bf16, keys_f16}, {keys16_f32, keys16_bf16, keys16_f16}};
  body[D->wide][D->half](D, b, j0, j1, qs, s, m, l, o);
}

/* batch item b's outputs (and lse) from m, l, o */
static void finish (const dec *D, int64_t b, const float *m, const float *l, const float *o) {
  const qkv_attn_plan *P = &D->J->p;
  int64_t dv = P->dv;
  for (int64_t r = 0; r < P->nq; r++) {
    float inv = l[r] == 0 ? 0.0f : 1.0f / l[r];      /* no key: zeros */
    const float *src = o + r * dv;
    int64_t at = (b * P->nq + r) * dv;
    if (D->half == BF16)
      for (int64_t c = 0; c < dv; c++) ((uint16_t *)P->out)[at + c] = qkv_f2bf(src[c] * inv);
    else if (D->half == F16)
      for (int64_t c = 0; c < dv; c++) ((uint16_t *)P->out)[at + c] = qkv_f2h(src[c] * inv);
    else
      for (int64_t c = 0; c < dv; c++) ((float *)P->out)[at + c] = src[c] * inv;
    /* m + log(l) in float32, as m and l are; qkv_attn_lse_at stores it as
       float32 for float32 and half jobs alike */
    if (P->lse) qkv_attn_lse_at(D->J, b * P->nq + r, l[r] == 0 ? -INFINITY : m[r] + logf(l[r]));
  }
}

/* a thread's scratch: q scaled, 8 keys' probabilities and their rows of K
   and V staged, m, l and o */
typedef struct { float *qs, *s, *m, *l, *o; void *block; } work;

static int work_new (const qkv_attn_plan *P, work *W) {
  size_t nq = (size_t)P->nq, nqs = nq * (size_t)P->dk, no = nq * (size_t)P->dv;
  size_t ns = DQ * KMAX + (size_t)(step_keys(P->dk, P->dv) * (P->dk + P->dv));
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
  int64_t nq = P->nq, dk = P->dk, dv = P->dv, es = D->half ? 2 : 4;
  for (int64_t u = lo; u < hi && !qkv_interrupted; u++) {
    int64_t b = u / D->nsplit, sp = u % D->nsplit, off[4];
    qkv_attn_batch_offsets(P, b, off);
    const char *q = P->q.base + off[0] * es;
    for (int64_t r = 0; r < nq; r++)
      for (int64_t c = 0; c < dk; c++)
        W.qs[r * dk + c] = (float)P->scale * elem(q + r * P->q.rs * es, c, D->half);
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
  dec D = {J, P->dtype == QKV_BF16 ? BF16 : P->dtype == QKV_F16 ? F16 : F32, 0,
           step_keys(P->dk, P->dv), 1, P->nk, NULL};
  D.wide = qkv_cpu_has_avx512() && P->dk % 16 == 0 && P->dv % 16 == 0;
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
