/*
** attention_avx512.c -- the float32 path of the fused attention kernel on
** CPUs with AVX-512 F/VL/BW/DQ (attention.c checks at run time): the AVX2
** path's design (read attention_avx2.c first) on 16-lane vectors, with the
** 32 registers taken for bigger blocks.
*/
#include <math.h>
#include <string.h>

#include "attention_job.h"

/* ---- the AVX-512 path (float32) ----
**
** As in the AVX2 path, scores are held as st[j][i] (key j, query i, row
** stride BQ) and the softmax runs down columns, here 16 queries to a
** vector.  q k^T takes QK_KEYS keys x 32 queries per block (2 vectors of
** q^T per feature, 2 QK_KEYS accumulators); p v takes PV_ROWS queries x
** 16 PV_VECS output features.  Both blocks leave 24 of the 32 registers to
** accumulators, so each FMA needs well under one load.
**
** Causal: e (very negative without causal) says that query i of the tile
** keeps key j when i >= j + e; blocks past every query's last key are
** skipped, blocks that cross the diagonal get -inf where excluded.
*/
#ifdef QKV_VEXP_X86
#define INLINE static inline __attribute__((always_inline)) QKV_AVX512
#define UNROLL _Pragma("GCC unroll 16")
#define key_limit qkv_attn_key_limit
#define lanes qkv_lanes16

#define QK_KEYS 12
#define PV_ROWS 6
#define PV_VECS 4

/*
** st[r][0..16 nv) = sum over c of qt[c][0..16 nv) k[r][c], for rows r <
** rows, nv 1 or 2.  Query l of the block drops key r when l < t + r (the
** causal diagonal), or, sp not NULL, outside its span [sp[l], sp[BQ + l])
** (row r is key j + r; the spans carry the diagonal).
** mx[0..16 nv) (when not NULL) takes the max of each column, which saves
** the softmax a pass over the tile.
*/
INLINE void qk_block (int rows, int nv, const float *qt, const float *k,
                      int64_t krs, int64_t dk, int64_t t, const int32_t *sp, int j,
                      float *st, float *mx) {
  __m512 acc[QK_KEYS][2];
  UNROLL for (int r = 0; r < QK_KEYS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t c = 0; c < dk; c++) {
    __m512 a0 = _mm512_load_ps(qt + c * BQ);
    __m512 a1 = nv > 1 ? _mm512_load_ps(qt + c * BQ + 16) : a0;
    UNROLL for (int r = 0; r < rows; r++) {
      __m512 b = _mm512_set1_ps(k[r * krs + c]);
      acc[r][0] = _mm512_fmadd_ps(a0, b, acc[r][0]);
      if (nv > 1) acc[r][1] = _mm512_fmadd_ps(a1, b, acc[r][1]);
    }
  }
  if (sp) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    UNROLL for (int w = 0; w < nv; w++) {
      __m512i lo = _mm512_loadu_si512(sp + 16 * w), hi = _mm512_loadu_si512(sp + BQ + 16 * w);
      UNROLL for (int r = 0; r < rows; r++) {
        __mmask16 d = _mm512_cmpgt_epi32_mask(lo, _mm512_set1_epi32(j + r)) |
                      _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(j + r + 1), hi);
        acc[r][w] = _mm512_mask_mov_ps(acc[r][w], d, ninf);
      }
    }
  } else if (t + rows - 1 > 0) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    UNROLL for (int r = 0; r < rows; r++) {
      acc[r][0] = _mm512_mask_mov_ps(acc[r][0], lanes(t + r), ninf);
      if (nv > 1) acc[r][1] = _mm512_mask_mov_ps(acc[r][1], lanes(t + r - 16), ninf);
    }
  }
  UNROLL for (int r = 0; r < rows; r++) {
    _mm512_store_ps(st + r * BQ, acc[r][0]);
    if (nv > 1) _mm512_store_ps(st + r * BQ + 16, acc[r][1]);
  }
  if (!mx) return;
  __m512 m0 = _mm512_load_ps(mx), m1 = nv > 1 ? _mm512_load_ps(mx + 16) : m0;
  UNROLL for (int r = 0; r < rows; r++) {
    m0 = _mm512_max_ps(m0, acc[r][0]);
    if (nv > 1) m1 = _mm512_max_ps(m1, acc[r][1]);
  }
  _mm512_store_ps(mx, m0);
  if (nv > 1) _mm512_store_ps(mx + 16, m1);
}

/* the keys of one block of 16 nv queries at column i: whole blocks of
   QK_KEYS, then one of 6, then the rest (constant row counts, so each
   unrolls) */
INLINE void qk_cols (int nv, int i, int bk, int64_t e, const float *qt,
                     const float *k, int64_t krs, int64_t dk, float *st,
                     float *mx) {
  int j = 0, n = key_limit(i + 16 * nv - 1, e, bk);
  qt += i;
  st += i;
  mx = mx ? mx + i : NULL;
  for (; j + QK_KEYS <= n; j += QK_KEYS)
    qk_block(QK_KEYS, nv, qt, k + j * krs, krs, dk, j + e - i, NULL, 0, st + j * BQ, mx);
  if (j + 6 <= n) {
    qk_block(6, nv, qt, k + j * krs, krs, dk, j + e - i, NULL, 0, st + j * BQ, mx);
    j += 6;
  }
  const float *kj = k + j * krs;
  float *sj = st + j * BQ;
  int64_t t = j + e - i;
  switch (n - j) {
    case 5: qk_block(5, nv, qt, kj, krs, dk, t, NULL, 0, sj, mx); break;
    case 4: qk_block(4, nv, qt, kj, krs, dk, t, NULL, 0, sj, mx); break;
    case 3: qk_block(3, nv, qt, kj, krs, dk, t, NULL, 0, sj, mx); break;
    case 2: qk_block(2, nv, qt, kj, krs, dk, t, NULL, 0, sj, mx); break;
    case 1: qk_block(1, nv, qt, kj, krs, dk, t, NULL, 0, sj, mx); break;
    default: break;
  }
}

/* st (bk x nqp) = k (bk rows, krs apart) q^T; nqp a multiple of 16 */
static QKV_AVX512 void qk_tile (int nqp, int bk, int64_t e, const float *qt,
                                const float *k, int64_t krs, int64_t dk,
                                float *st, float *mx) {
  int i = 0;
  for (; i + 32 <= nqp; i += 32) qk_cols(2, i, bk, e, qt, k, krs, dk, st, mx);
  if (i < nqp) qk_cols(1, i, bk, e, qt, k, krs, dk, st, mx);
}

/*
** o[r][0..16 nv) += sum over j < n of st[j][r] v[j][0..16 nv), for rows
** r < rows; `part` (a constant) reads and writes only the lanes in km[],
** for the last columns when dv is not a multiple of 16 PV_VECS.
*/
#define LD(p, k) (part ? _mm512_maskz_loadu_ps(k, p) : _mm512_loadu_ps(p))
#define ST(p, k, x) (part ? _mm512_mask_storeu_ps(p, k, x) : _mm512_storeu_ps(p, x))
INLINE void pv_block (int rows, int nv, int part, const __mmask16 *km,
                      const float *pt, int n, const float *v, int64_t vrs,
                      float *o, int64_t dv) {
  __m512 acc[PV_ROWS][PV_VECS];
  UNROLL for (int r = 0; r < PV_ROWS; r++)
    UNROLL for (int w = 0; w < PV_VECS; w++) acc[r][w] = _mm512_setzero_ps();
  for (int j = 0; j < n; j++) {
    __m512 x[PV_VECS];
    UNROLL for (int w = 0; w < nv; w++) x[w] = LD(v + j * vrs + 16 * w, km[w]);
    UNROLL for (int r = 0; r < rows; r++) {
      __m512 p = _mm512_set1_ps(pt[j * BQ + r]);
      UNROLL for (int w = 0; w < nv; w++) acc[r][w] = _mm512_fmadd_ps(p, x[w], acc[r][w]);
    }
  }
  /* the tile's sum added to o, not o carried through it: a long row then
     adds thousands of terms in blocks of BK, not in one running sum */
  UNROLL for (int r = 0; r < rows; r++)
    UNROLL for (int w = 0; w < nv; w++) {
      float *p = o + r * dv + 16 * w;
      ST(p, km[w], _mm512_add_ps(acc[r][w], LD(p, km[w])));
    }
}

/* a block of queries stops at the last key one of them keeps */
INLINE void pv_cols (int nv, int part, const __mmask16 *km, int bq, int bk,
                     int64_t e, const float *pt, const float *v, int64_t vrs,
                     float *o, int64_t dv) {
  int i = 0;
  for (; i + PV_ROWS <= bq; i += PV_ROWS)
    pv_block(PV_ROWS, nv, part, km, pt + i, key_limit(i + PV_ROWS - 1, e, bk),
             v, vrs, o + i * dv, dv);
  for (; i < bq; i++)
    pv_block(1, nv, part, km, pt + i, key_limit(i, e, bk), v, vrs, o + i * dv, dv);
}

/* o (bq x dv) += st^T (bq x bk) v (bk rows, vrs apart), by blocks of
   16 PV_VECS columns; the last block with as few vectors as it needs */
static QKV_AVX512 void pv_tile (int bq, int bk, int64_t e, const float *pt,
                                const float *v, int64_t vrs, float *o,
                                int64_t dv) {
  __mmask16 km[PV_VECS];
  int64_t d = 0;
  for (int w = 0; w < PV_VECS; w++) km[w] = 0xffff;
  for (; d + 16 * PV_VECS <= dv; d += 16 * PV_VECS)
    pv_cols(PV_VECS, 0, km, bq, bk, e, pt, v + d, vrs, o + d, dv);
  if (d == dv) return;
  for (int w = 0; w < PV_VECS; w++) km[w] = lanes(dv - d - 16 * w);
  const float *vd = v + d;
  float *od = o + d;
  switch ((dv - d + 15) / 16) {
#if PV_VECS > 3
    case 4: pv_cols(4, 1, km, bq, bk, e, pt, vd, vrs, od, dv); break;
#endif
#if PV_VECS > 2
    case 3: pv_cols(3, 1, km, bq, bk, e, pt, vd, vrs, od, dv); break;
#endif
#if PV_VECS > 1
    case 2: pv_cols(2, 1, km, bq, bk, e, pt, vd, vrs, od, dv); break;
#endif
    default: pv_cols(1, 1, km, bq, bk, e, pt, vd, vrs, od, dv); break;
  }
}

/* the keys [j, n) of one block of 16 nv queries at column i (as qk_cols,
   cut by the spans si when not NULL) */
INLINE void qk_rcols (int nv, int i, int j, int n, int64_t e, const int32_t *si,
                      const float *qt, const float *k, int64_t krs, int64_t dk, float *st,
                      float *mx) {
  for (; j + QK_KEYS <= n; j += QK_KEYS)
    qk_block(QK_KEYS, nv, qt, k + j * krs, krs, dk, j + e - i, si, j, st + j * BQ, mx);
  if (j + 6 <= n) {
    qk_block(6, nv, qt, k + j * krs, krs, dk, j + e - i, si, j, st + j * BQ, mx);
    j += 6;
  }
  const float *kj = k + j * krs;
  float *sj = st + j * BQ;
  int64_t t = j + e - i;
  switch (n - j) {       /* constant row counts, so each unrolls */
    case 5: qk_block(5, nv, qt, kj, krs, dk, t, si, j, sj, mx); break;
    case 4: qk_block(4, nv, qt, kj, krs, dk, t, si, j, sj, mx); break;
    case 3: qk_block(3, nv, qt, kj, krs, dk, t, si, j, sj, mx); break;
    case 2: qk_block(2, nv, qt, kj, krs, dk, t, si, j, sj, mx); break;
    case 1: qk_block(1, nv, qt, kj, krs, dk, t, si, j, sj, mx); break;
    default: break;
  }
}

/*
** The AVX2 path's tiles under mods take these products (attention_avx2.c:
** each group of 8 queries' range of keys R, the spans' cut in the
** product): q k^T for 16 queries at a time over their groups' rows (32,
** the blocks of the dense path, where both halves have the same rows), p v
** for blocks of PV_ROWS queries over theirs, as the AVX2 path blocks them
** (its softmax leaves zeros in st as far as those blocks read).
*/
QKV_AVX512 void qkv_attn_qk_ranges512 (int nqp, const ranges *R, int64_t e, const int32_t *sp,
                                       const float *qt, const float *k, int64_t krs, int64_t dk,
                                       float *st, float *mx) {
  for (int i = 0; i < nqp;) {
    int j, n, j2 = 0, n2 = 0, ju = 0, nu = -1;
    qkv_attn_span_of(R, i, i + 15, &j, &n);
    if (i + 32 <= nqp) {
      qkv_attn_span_of(R, i + 16, i + 31, &j2, &n2);
      qkv_attn_span_of(R, i, i + 31, &ju, &nu);
    }
    const int32_t *si = sp ? sp + i : NULL;
    float *mi = mx ? mx + i : NULL;
    /* 32 queries over the union of both halves' keys, where that costs
       less than each half over its own: a block of 32 runs ~1/8 faster a
       pair (a window's halves differ by a few keys) */
    if (i + 32 <= nqp && 16 * (nu - ju) <= 9 * ((n - j) + (n2 - j2))) {
      qk_rcols(2, i, ju, nu, e, si, qt + i, k, krs, dk, st + i, mi);
      i += 32;
    } else {
      qk_rcols(1, i, j, n, e, si, qt + i, k, krs, dk, st + i, mi);
      i += 16;
    }
  }
}

/* a block of queries over the keys its groups may keep */
INLINE void pv_rcols (int nv, int part, const __mmask16 *km, int bq, const ranges *R,
                      const float *pt, const float *v, int64_t vrs, float *o, int64_t dv) {
  int i = 0, lo, hi;
  for (; i + PV_ROWS <= bq; i += PV_ROWS) {
    qkv_attn_span_of(R, i, i + PV_ROWS - 1, &lo, &hi);
    pv_block(PV_ROWS, nv, part, km, pt + lo * BQ + i, hi - lo, v + lo * vrs, vrs, o + i * dv,
             dv);
  }
  if (i == bq) return;
  qkv_attn_span_of(R, i, bq - 1, &lo, &hi);    /* the last 1 to 5 as one block */
  const float *p = pt + lo * BQ + i, *vl = v + lo * vrs;
  float *oi = o + i * dv;
  switch (bq - i) {
    case 5: pv_block(5, nv, part, km, p, hi - lo, vl, vrs, oi, dv); break;
    case 4: pv_block(4, nv, part, km, p, hi - lo, vl, vrs, oi, dv); break;
    case 3: pv_block(3, nv, part, km, p, hi - lo, vl, vrs, oi, dv); break;
    case 2: pv_block(2, nv, part, km, p, hi - lo, vl, vrs, oi, dv); break;
    default: pv_block(1, nv, part, km, p, hi - lo, vl, vrs, oi, dv); break;
  }
}

QKV_AVX512 void qkv_attn_pv_ranges512 (int bq, const ranges *R, const float *pt, const float *v,
                                       int64_t vrs, float *o, int64_t dv) {
  __mmask16 km[PV_VECS];
  int64_t d = 0;
  for (int w = 0; w < PV_VECS; w++) km[w] = 0xffff;
  for (; d + 16 * PV_VECS <= dv; d += 16 * PV_VECS)
    pv_rcols(PV_VECS, 0, km, bq, R, pt, v + d, vrs, o + d, dv);
  if (d == dv) return;
  for (int w = 0; w < PV_VECS; w++) km[w] = lanes(dv - d - 16 * w);
  const float *vd = v + d;
  float *od = o + d;
  switch ((dv - d + 15) / 16) {
    case 4: pv_rcols(4, 1, km, bq, R, pt, vd, vrs, od, dv); break;
    case 3: pv_rcols(3, 1, km, bq, R, pt, vd, vrs, od, dv); break;
    case 2: pv_rcols(2, 1, km, bq, R, pt, vd, vrs, od, dv); break;
    default: pv_rcols(1, 1, km, bq, R, pt, vd, vrs, od, dv); break;
  }
}

/* mx[i] = the max of column i of st over the keys its 16 queries' range
   holds (attention_job.h) */
QKV_AVX512 void qkv_attn_col_max512 (const float *st, int nqp, const ranges *R, float *mx) {
  for (int g = 0; g < nqp; g += 16) {
    __m512 a = _mm512_set1_ps(-INFINITY), b = a;
    int j, n;
    qkv_attn_span_of(R, g, g + 15, &j, &n);
    for (; j + 2 <= n; j += 2) {
      a = _mm512_max_ps(a, _mm512_load_ps(st + j * BQ + g));
      b = _mm512_max_ps(b, _mm512_load_ps(st + (j + 1) * BQ + g));
    }
    if (j < n) a = _mm512_max_ps(a, _mm512_load_ps(st + j * BQ + g));
    _mm512_store_ps(mx + g, _mm512_max_ps(a, b));
  }
}

/* st[j][g..g+16) = exp(st[j][g..g+16) - msub) for j < n; returns the sums */
static inline QKV_AVX512 __m512 exp_col (float *st, int n, __m512 msub) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    float *p = st + j * BQ;
    __m512 e0 = qkv_vexp16(_mm512_sub_ps(_mm512_load_ps(p), msub));
    __m512 e1 = qkv_vexp16(_mm512_sub_ps(_mm512_load_ps(p + BQ), msub));
    _mm512_store_ps(p, e0);
    _mm512_store_ps(p + BQ, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  if (j < n) {
    __m512 e0 = qkv_vexp16(_mm512_sub_ps(_mm512_load_ps(st + j * BQ), msub));
    _mm512_store_ps(st + j * BQ, e0);
    s0 = _mm512_add_ps(s0, e0);
  }
  return _mm512_add_ps(s0, s1);
}

/*
** The online softmax of st, given each column's max in mx, over the range
** of each 16 queries (the union of its two groups' ranges: the rows there
** outside a query's own range hold -inf, from the product's cut or a
** mask's).  A query whose max is still -inf (nothing kept yet) subtracts 0
** instead, so exp gives 0 and never NaN.  Outside the range, st gets zeros
** as far as the blocks of p v that hold one of its queries read it (blocks
** of 6 queries: those of the groups beside).  Leaves each query's rescale
** factor in alpha; returns 0 when every score was -inf.
*/
QKV_AVX512 int qkv_attn_softmax512 (float *st, int nqp, const ranges *R, const float *mx,
                                    float *m, double *l, float *alpha) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
  __mmask16 any = 0;
  for (int g = 0; g < nqp; g += 16) {
    __m512 a = _mm512_load_ps(mx + g);
    any |= _mm512_cmp_ps_mask(a, ninf, _CMP_NEQ_OQ);
    __m512 mold = _mm512_load_ps(m + g), mnew = _mm512_max_ps(mold, a);
    __m512 msub = _mm512_mask_mov_ps(mnew, _mm512_cmp_ps_mask(mnew, ninf, _CMP_EQ_OQ), zero);
    __m512 al = qkv_vexp16(_mm512_sub_ps(mold, msub));
    int lo, n, zl, zh;
    qkv_attn_span_of(R, g, g + 15, &lo, &n);
    qkv_attn_span_of(R, g > 0 ? g - 8 : g, g + 16 < nqp ? g + 16 : g + 15, &zl, &zh);
    __m512 s = exp_col(st + lo * BQ + g, n - lo, msub);
    for (int j = zl; j < lo; j++) _mm512_store_ps(st + j * BQ + g, zero);
    for (int j = n > zl ? n : zl; j < zh; j++) _mm512_store_ps(st + j * BQ + g, zero);
    _mm512_store_ps(m + g, mnew);
    _mm512_store_ps(alpha + g, al);
    /* the sums across tiles in double: a long row adds thousands of terms */
    __m512d a0 = _mm512_cvtps_pd(_mm512_castps512_ps256(al));
    __m512d a1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(al, 1));
    __m512d s0 = _mm512_cvtps_pd(_mm512_castps512_ps256(s));
    __m512d s1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1));
    _mm512_storeu_pd(l + g, _mm512_fmadd_pd(_mm512_loadu_pd(l + g), a0, s0));
    _mm512_storeu_pd(l + g + 8, _mm512_fmadd_pd(_mm512_loadu_pd(l + g + 8), a1, s1));
  }
  return any != 0;
}

/* o[i][0..dv) *= f[i]; skips factors of 1, the common case once a query's
   max has settled */
static QKV_AVX512 void scale_rows (float *o, int bq, int64_t dv, const float *f) {
  for (int i = 0; i < bq; i++, o += dv) {
    if (f[i] == 1.0f) continue;
    __m512 x = _mm512_set1_ps(f[i]);
    int64_t d = 0;
    for (; d + 16 <= dv; d += 16)
      _mm512_storeu_ps(o + d, _mm512_mul_ps(x, _mm512_loadu_ps(o + d)));
    if (d < dv) {
      __mmask16 k = lanes(dv - d);
      _mm512_mask_storeu_ps(o + d, k, _mm512_mul_ps(x, _mm512_maskz_loadu_ps(k, o + d)));
    }
  }
}

/* the keys of query tile [i0, i0 + bq) with our products, into o (the
   AVX2 path's qkv_attn_keys_avx2, step for step) */
void qkv_attn_keys_avx512 (const job *J, scratch *W, int64_t b, int64_t i0,
                           int bq, int64_t jend, float *o) {
  const qkv_attn_plan *P = &J->p;
  int64_t off[4];                   /* q's, k's, v's and the mask's */
  qkv_attn_batch_offsets(P, b, off);
  int nqp = (bq + 15) / 16 * 16;
  float *st = (float *)W->s, *m = (float *)W->m;
  qkv_attn_pack_q(J, off[0], i0, bq, nqp, W->qt, W->qbuf);
  for (int i = 0; i < nqp; i++) {
    m[i] = -INFINITY;
    W->l[i] = 0.0;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BK) {
    int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
    int64_t e = qkv_attn_diagonal(P, i0, j0);
    const float *kt = qkv_attn_tile_of(J, &P->k, J->gemm.k.layout, off[1], j0, bk, P->dk,
                                       W->kbuf);
    ranges R;
    qkv_attn_ranges_causal(&R, nqp, bk, e);
    for (int i = 0; i < nqp; i++) W->mx[i] = -INFINITY;
    /* the max comes out of the product, unless a mask changes st after */
    qk_tile(nqp, bk, e, W->qt, kt, J->gemm.k.layout == COPY ? P->dk : P->k.rs,
            P->dk, st, P->has_mask ? NULL : W->mx);
    if (P->has_mask) {
      qkv_attn_mask_cols(J, st, bq, bk, e, (const uint8_t *)P->mask.base + off[3] +
                         i0 * P->mask.rs + j0 * P->mask.cs);
      qkv_attn_col_max512(st, nqp, &R, W->mx);
    }
    if (!qkv_attn_softmax512(st, nqp, &R, W->mx, m, W->l, W->alpha)) continue;
    scale_rows(o, bq, P->dv, W->alpha);
    const float *vt = qkv_attn_tile_of(J, &P->v, J->gemm.v.layout, off[2], j0, bk, P->dv,
                                       W->vbuf);
    pv_tile(bq, bk, e, st, vt, J->gemm.v.layout == COPY ? P->dv : P->v.rs, o, P->dv);
  }
  qkv_attn_put_lse(J, b, i0, bq, m, NULL, W->l);
  /* a query with no key stays zeros; a NaN sum (a NaN score, which the max
     may have skipped) makes the row NaN even where p v was not run */
  for (int i = 0; i < bq; i++)
    W->alpha[i] = W->l[i] == 0.0 ? 1.0f : (float)(1.0 / W->l[i]);
  scale_rows(o, bq, P->dv, W->alpha);
}
#else
typedef int qkv_no_avx512_attention;       /* (an empty file is not ISO C) */
#endif
