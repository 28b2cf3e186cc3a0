/*
** attention_avx2.c -- the float32 path of the fused attention kernel on
** CPUs with AVX2 and FMA (attention.c checks at run time): register-blocked
** products and a column-wise online softmax.
*/
#include <math.h>
#include <string.h>

#include "attention_job.h"

/* ---- the AVX2 path (float32) ----
**
** Scores are held as st[j][i] (key j, query i, row stride BQ), so that a
** query's max and sum run down a column, 8 queries to a vector.  q k^T
** takes 6 keys x 16 queries per block: 12 accumulators, the queries'
** features from q^T (packed once per query tile, times scale) and each key's
** feature broadcast straight from k's rows.  p v takes 6 queries x 16 output
** features: the probabilities broadcast from st, v's rows loaded as they
** lie.  Neither product packs k or v per tile, which is where OpenBLAS spent
** ~15% of the time on tiles this small.
**
** Causal: e (very negative without causal) says that query i of the tile
** keeps key j when i >= j + e.  Blocks past every query's last key are not
** computed (their part of st is never read), and blocks that cross the
** diagonal get -inf where they are excluded, so st holds no stale scores
** wherever a pass reads it.
*/
#ifdef QKV_VEXP_X86
#define INLINE static inline __attribute__((always_inline)) QKV_AVX2
#define UNROLL _Pragma("GCC unroll 6")

#define key_limit qkv_attn_key_limit
#define span_of qkv_attn_span_of

/* narrowed by keep (key-major, rows BQ apart) for the bq real queries:
   a row's 8 bytes of a group read as one word; returns 0 when no query
   keeps any key */
static int ranges_keep (ranges *R, int nqp, int bq, int bk, uint8_t *keep) {
  if (bq < nqp)                         /* padding queries keep nothing */
    for (int j = 0; j < bk; j++) memset(keep + j * BQ + bq, 0, (size_t)(nqp - bq));
  int any = 0;
  for (int g = 0; g < nqp / 8; g++) {
    int lo = R->lo[g], hi = R->hi[g];
    uint64_t w;
    for (; lo < hi; lo++) {
      memcpy(&w, keep + lo * BQ + 8 * g, 8);
      if (w) break;
    }
    for (; hi > lo; hi--) {
      memcpy(&w, keep + (hi - 1) * BQ + 8 * g, 8);
      if (w) break;
    }
    if (lo >= hi) lo = hi = 0;
    R->lo[g] = lo;
    R->hi[g] = hi;
    any |= hi > 0;
  }
  return any;
}

/*
** A block mask's spans (each query's one run of kept keys, common/mods.h)
** over a partial tile from key j0: sp[i] = lo, sp[BQ + i] = hi, the keys
** [lo, hi) of the tile query i keeps, clipped to the tile and to the
** causal diagonal (which the spans then carry too); the groups' ranges
** narrowed to them.  The mask is never run.  Returns 0 when no query
** keeps any key.
*/
static int ranges_spans (ranges *R, int nqp, int bq, int bk, int64_t j0, int64_t e,
                         const int32_t *spans, int32_t *sp) {
  int any = 0;
  for (int g = 0; g < nqp / 8; g++) {
    int lo = bk, hi = 0;
    for (int i = 8 * g; i < 8 * g + 8; i++) {
      int64_t a = 0, b = 0;
      if (i < bq) {
        a = spans[2 * i] - j0;
        b = spans[2 * i + 1] - j0;
        int64_t lim = key_limit(i, e, bk);
        a = a < 0 ? 0 : a;
        b = b > lim ? lim : b;
        if (a >= b) a = b = 0;
      }
      sp[i] = (int32_t)a;
      sp[BQ + i] = (int32_t)b;
      if (a < b) {
        lo = (int)a < lo ? (int)a : lo;
        hi = (int)b > hi ? (int)b : hi;
      }
    }
    if (lo >= hi) lo = hi = 0;
    R->lo[g] = lo;
    R->hi[g] = hi;
    any |= hi > 0;
  }
  return any;
}

/* -inf in the 16 queries' columns of rows [0, rows) (keys j ...) that
   their spans drop */
#define SPAN_CUT(rows, acc, sp, j) do { \
    const __m256 ninf_ = _mm256_set1_ps(-INFINITY); \
    __m256i lo0_ = _mm256_load_si256((const __m256i *)(sp)), \
            lo1_ = _mm256_load_si256((const __m256i *)((sp) + 8)), \
            hi0_ = _mm256_load_si256((const __m256i *)((sp) + BQ)), \
            hi1_ = _mm256_load_si256((const __m256i *)((sp) + BQ + 8)); \
    UNROLL for (int r_ = 0; r_ < (rows); r_++) { \
      __m256i k_ = _mm256_set1_epi32((j) + r_), k1_ = _mm256_set1_epi32((j) + r_ + 1); \
      __m256i d0_ = _mm256_or_si256(_mm256_cmpgt_epi32(lo0_, k_), _mm256_cmpgt_epi32(k1_, hi0_)); \
      __m256i d1_ = _mm256_or_si256(_mm256_cmpgt_epi32(lo1_, k_), _mm256_cmpgt_epi32(k1_, hi1_)); \
      acc[r_][0] = _mm256_blendv_ps(acc[r_][0], ninf_, _mm256_castsi256_ps(d0_)); \
      acc[r_][1] = _mm256_blendv_ps(acc[r_][1], ninf_, _mm256_castsi256_ps(d1_)); \
    } \
  } while (0)

/* the first n lanes (none for n <= 0, all for n >= 8) */
static inline QKV_AVX2 __m256 lanes (int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  n = n < 0 ? 0 : n > 8 ? 8 : n;
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/*
** st[r][0..16) = sum over c of qt[c][0..16) k[r][c], for rows r < rows.
** Query l of the block drops key r when l < t + r (the causal diagonal),
** or, sp not NULL, outside its span (ranges_spans: row r is key j + r).
** mx[0..16) (when not NULL) takes the max of each column, which saves the
** softmax a pass over the tile.
*/
INLINE void qk_block (int rows, const float *qt, const float *k, int64_t krs,
                      int64_t dk, int64_t t, const int32_t *sp, int j, float *st, float *mx) {
  __m256 acc[6][2];
  UNROLL for (int r = 0; r < 6; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < dk; c++) {
    __m256 a0 = _mm256_load_ps(qt + c * BQ), a1 = _mm256_load_ps(qt + c * BQ + 8);
    UNROLL for (int r = 0; r < rows; r++) {
      __m256 b = _mm256_broadcast_ss(k + r * krs + c);
      acc[r][0] = _mm256_fmadd_ps(a0, b, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a1, b, acc[r][1]);
    }
  }
  if (sp) SPAN_CUT(rows, acc, sp, j);
  else if (t + rows - 1 > 0) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    UNROLL for (int r = 0; r < rows; r++) {
      acc[r][0] = _mm256_blendv_ps(acc[r][0], ninf, lanes(t + r));
      acc[r][1] = _mm256_blendv_ps(acc[r][1], ninf, lanes(t + r - 8));
    }
  }
  UNROLL for (int r = 0; r < rows; r++) {
    _mm256_store_ps(st + r * BQ, acc[r][0]);
    _mm256_store_ps(st + r * BQ + 8, acc[r][1]);
  }
  if (!mx) return;
  __m256 m0 = _mm256_load_ps(mx), m1 = _mm256_load_ps(mx + 8);
  UNROLL for (int r = 0; r < rows; r++) {
    m0 = _mm256_max_ps(m0, acc[r][0]);
    m1 = _mm256_max_ps(m1, acc[r][1]);
  }
  _mm256_store_ps(mx, m0);
  _mm256_store_ps(mx + 8, m1);
}

/* st (bk x nqp) = k (bk rows, krs apart) q^T over each group's range,
   cut by the causal diagonal e or by the spans sp (ranges_spans) when
   not NULL; nqp a multiple of 16 */
static QKV_AVX2 void qk_tile (int nqp, const ranges *R, int64_t e, const int32_t *sp,
                              const float *qt, const float *k, int64_t krs, int64_t dk,
                              float *st, float *mx) {
  for (int i = 0; i < nqp; i += 16) {
    int j, n;
    span_of(R, i, i + 15, &j, &n);
    float *mi = mx ? mx + i : NULL;
    const int32_t *si = sp ? sp + i : NULL;
    for (; j + 6 <= n; j += 6)
      qk_block(6, qt + i, k + j * krs, krs, dk, j + e - i, si, j, st + j * BQ + i, mi);
    const float *kj = k + j * krs;
    float *sj = st + j * BQ + i;
    int64_t t = j + e - i;
    switch (n - j) {       /* constant row counts, so each unrolls */
      case 5: qk_block(5, qt + i, kj, krs, dk, t, si, j, sj, mi); break;
      case 4: qk_block(4, qt + i, kj, krs, dk, t, si, j, sj, mi); break;
      case 3: qk_block(3, qt + i, kj, krs, dk, t, si, j, sj, mi); break;
      case 2: qk_block(2, qt + i, kj, krs, dk, t, si, j, sj, mi); break;
      case 1: qk_block(1, qt + i, kj, krs, dk, t, si, j, sj, mi); break;
      default: break;
    }
  }
}

/* -inf where the spans sp (ranges_spans) drop a key (after a score_mod,
   which may have made those scores finite), over the range of each 16
   queries, which the products ran over and the 16-lane softmax reads */
static QKV_AVX2 void drop_spans (float *st, int nqp, const ranges *R, const int32_t *sp) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int g = 0; g < nqp; g += 8) {
    __m256i lo = _mm256_load_si256((const __m256i *)(sp + g));
    __m256i hi = _mm256_load_si256((const __m256i *)(sp + BQ + g));
    int j0, j1;
    span_of(R, g / 16 * 16, g / 16 * 16 + 15, &j0, &j1);
    for (int j = j0; j < j1; j++) {
      __m256i k = _mm256_set1_epi32(j), k1 = _mm256_set1_epi32(j + 1);
      __m256 drop = _mm256_castsi256_ps(_mm256_or_si256(_mm256_cmpgt_epi32(lo, k),
                                                         _mm256_cmpgt_epi32(k1, hi)));
      float *p = st + j * BQ + g;
      _mm256_store_ps(p, _mm256_blendv_ps(_mm256_load_ps(p), ninf, drop));
    }
  }
}

/*
** o[r][0..16) += sum over j < n of st[j][r] v[j][0..16), for rows r < rows;
** `part` (a constant) reads and writes only the lanes in k0, k1, for the
** last columns when dv is not a multiple of 16.
*/
#define LD(p, k) (part ? _mm256_maskload_ps(p, k) : _mm256_loadu_ps(p))
#define ST(p, k, x) (part ? _mm256_maskstore_ps(p, k, x) : _mm256_storeu_ps(p, x))
INLINE void pv_block (int rows, int part, __m256i k0, __m256i k1,
                      const float *pt, int n, const float *v, int64_t vrs,
                      float *o, int64_t dv) {
  __m256 acc[6][2];
  UNROLL for (int r = 0; r < 6; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int j = 0; j < n; j++) {
    __m256 v0 = LD(v + j * vrs, k0), v1 = LD(v + j * vrs + 8, k1);
    UNROLL for (int r = 0; r < rows; r++) {
      __m256 p = _mm256_broadcast_ss(pt + j * BQ + r);
      acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
    }
  }
  /* the tile's sum added to o, not o carried through it: a long row then
     adds thousands of terms in blocks of BK, not in one running sum */
  UNROLL for (int r = 0; r < rows; r++) {
    ST(o + r * dv, k0, _mm256_add_ps(acc[r][0], LD(o + r * dv, k0)));
    ST(o + r * dv + 8, k1, _mm256_add_ps(acc[r][1], LD(o + r * dv + 8, k1)));
  }
}

/* a block of queries runs over the keys its groups may keep */
INLINE void pv_cols (int part, __m256i k0, __m256i k1, int bq, const ranges *R,
                     const float *pt, const float *v, int64_t vrs,
                     float *o, int64_t dv) {
  int i = 0, lo, hi;
  for (; i + 6 <= bq; i += 6) {
    span_of(R, i, i + 5, &lo, &hi);
    pv_block(6, part, k0, k1, pt + lo * BQ + i, hi - lo, v + lo * vrs, vrs, o + i * dv, dv);
  }
  if (i == bq) return;
  /* the last 1 to 5 queries as one block of constant rows (one at a time
     they cost a tile of 64 queries a fifth of its p v) */
  span_of(R, i, bq - 1, &lo, &hi);
  const float *p = pt + lo * BQ + i, *vl = v + lo * vrs;
  float *oi = o + i * dv;
  switch (bq - i) {
    case 5: pv_block(5, part, k0, k1, p, hi - lo, vl, vrs, oi, dv); break;
    case 4: pv_block(4, part, k0, k1, p, hi - lo, vl, vrs, oi, dv); break;
    case 3: pv_block(3, part, k0, k1, p, hi - lo, vl, vrs, oi, dv); break;
    case 2: pv_block(2, part, k0, k1, p, hi - lo, vl, vrs, oi, dv); break;
    default: pv_block(1, part, k0, k1, p, hi - lo, vl, vrs, oi, dv); break;
  }
}

/* o (bq x dv) += st^T (bq x bk) v (bk rows, vrs apart), by blocks of 16
   columns (measured faster than by blocks of queries) */
static QKV_AVX2 void pv_tile (int bq, const ranges *R, const float *pt,
                              const float *v, int64_t vrs, float *o,
                              int64_t dv) {
  __m256i all = _mm256_set1_epi32(-1);
  int64_t d = 0;
  for (; d + 16 <= dv; d += 16)
    pv_cols(0, all, all, bq, R, pt, v + d, vrs, o + d, dv);
  if (d < dv)
    pv_cols(1, _mm256_castps_si256(lanes(dv - d)),
            _mm256_castps_si256(lanes(dv - d - 8)), bq, R, pt, v + d, vrs,
            o + d, dv);
}

/* mx[i] = the max of column i of st over the keys its group of 8 keeps */
static QKV_AVX2 void col_max (const float *st, int nqp, const ranges *R, float *mx) {
  for (int g = 0; g < nqp; g += 8) {
    __m256 a = _mm256_set1_ps(-INFINITY), b = a;
    int j = R->lo[g / 8], n = R->hi[g / 8];
    for (; j + 2 <= n; j += 2) {
      a = _mm256_max_ps(a, _mm256_load_ps(st + j * BQ + g));
      b = _mm256_max_ps(b, _mm256_load_ps(st + (j + 1) * BQ + g));
    }
    if (j < n) a = _mm256_max_ps(a, _mm256_load_ps(st + j * BQ + g));
    _mm256_store_ps(mx + g, _mm256_max_ps(a, b));
  }
}

/* st[j][g..g+8) = exp(st[j][g..g+8) - msub) for j < n; returns the sums */
static inline QKV_AVX2 __m256 exp_col (float *st, int n, __m256 msub) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    float *p = st + j * BQ;
    __m256 e0 = qkv_vexp8(_mm256_sub_ps(_mm256_load_ps(p), msub));
    __m256 e1 = qkv_vexp8(_mm256_sub_ps(_mm256_load_ps(p + BQ), msub));
    _mm256_store_ps(p, e0);
    _mm256_store_ps(p + BQ, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  if (j < n) {
    __m256 e0 = qkv_vexp8(_mm256_sub_ps(_mm256_load_ps(st + j * BQ), msub));
    _mm256_store_ps(st + j * BQ, e0);
    s0 = _mm256_add_ps(s0, e0);
  }
  return _mm256_add_ps(s0, s1);
}

/*
** The online softmax of st, given each column's max in mx.  A query whose
** max is still -inf (nothing kept yet) subtracts 0 instead, so exp gives 0
** and never NaN.  Past a group's last key, st gets zeros as far as the next
** group's blocks of p v read it.  Leaves each query's rescale factor in
** alpha; returns 0 when every score was -inf.
*/
static QKV_AVX2 int softmax_cols (float *st, int nqp, const ranges *R,
                                  const float *mx, float *m, double *l,
                                  float *alpha) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
  int any = 0;
  for (int g = 0; g < nqp; g += 8) {
    __m256 a = _mm256_load_ps(mx + g);
    any |= _mm256_movemask_ps(_mm256_cmp_ps(a, ninf, _CMP_NEQ_OQ));
    __m256 mold = _mm256_load_ps(m + g), mnew = _mm256_max_ps(mold, a);
    __m256 msub = _mm256_blendv_ps(mnew, zero, _mm256_cmp_ps(mnew, ninf, _CMP_EQ_OQ));
    __m256 al = qkv_vexp8(_mm256_sub_ps(mold, msub));
    /* p v's blocks of 6 queries reach into the groups beside this one:
       zeros in this group's columns over the rows they read */
    int lo = R->lo[g / 8], n = R->hi[g / 8], zl, zh;
    span_of(R, g > 0 ? g - 8 : g, g + 8 < nqp ? g + 8 : g, &zl, &zh);
    __m256 s = exp_col(st + lo * BQ + g, n - lo, msub);
    for (int j = zl; j < lo; j++) _mm256_store_ps(st + j * BQ + g, zero);
    for (int j = n > zl ? n : zl; j < zh; j++) _mm256_store_ps(st + j * BQ + g, zero);
    _mm256_store_ps(m + g, mnew);
    _mm256_store_ps(alpha + g, al);
    /* the sums across tiles in double: a long row adds thousands of terms */
    for (int h = 0; h < 2; h++) {
      __m128 ah = h ? _mm256_extractf128_ps(al, 1) : _mm256_castps256_ps128(al);
      __m128 sh = h ? _mm256_extractf128_ps(s, 1) : _mm256_castps256_ps128(s);
      __m256d lv = _mm256_loadu_pd(l + g + 4 * h);
      lv = _mm256_fmadd_pd(lv, _mm256_cvtps_pd(ah), _mm256_cvtps_pd(sh));
      _mm256_storeu_pd(l + g + 4 * h, lv);
    }
  }
  return any != 0;
}

/* o[i][0..dv) *= f[i]; skips factors of 1, the common case once a query's
   max has settled */
static QKV_AVX2 void scale_rows (float *o, int bq, int64_t dv, const float *f) {
  for (int i = 0; i < bq; i++, o += dv) {
    if (f[i] == 1.0f) continue;
    __m256 x = _mm256_set1_ps(f[i]);
    int64_t d = 0;
    for (; d + 8 <= dv; d += 8)
      _mm256_storeu_ps(o + d, _mm256_mul_ps(x, _mm256_loadu_ps(o + d)));
    for (; d < dv; d++) o[d] *= f[i];
  }
}

/* -inf where the mask (keep, as st) drops a key: the whole tile, row by
   row (rows outside a group's range are never read, or zeroed first) */
static QKV_AVX2 void drop_unkept (float *st, int nqp, int bk, const uint8_t *keep) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int j = 0; j < bk; j++)
    for (int i = 0; i < nqp; i += 8) {
      __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(keep + j * BQ + i)));
      __m256 drop = _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_setzero_si256()));
      float *p = st + j * BQ + i;
      _mm256_store_ps(p, _mm256_blendv_ps(_mm256_load_ps(p), ninf, drop));
    }
}

/* -inf again where the causal diagonal drops a key (query i < j + e drops
   key j), after a score_mod may have made those scores finite */
static void recut (float *st, int nqp, int bk, int64_t e) {
  for (int j = 0; j < bk; j++) {
    int64_t n = j + e < nqp ? j + e : nqp;
    for (int64_t i = 0; i < n; i++) st[j * BQ + i] = -INFINITY;
  }
}

/* the keys of query tile [i0, i0 + bq) with our products, into o */
int qkv_attn_keys_avx2 (const job *J, scratch *W, int64_t b, int64_t i0, int bq,
                        int64_t jend, float *o) {
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
  qkv_attn_mods *M = J->mods;
  int scored = M && M->prog->out[QKV_MOD_OUT_SCORE] >= 0;
  const int32_t *spans = M ? qkv_mod_spans(M, b, i0) : NULL;
  for (int64_t j0 = 0; j0 < jend; j0 += J->tk) {
    int bk = (int)(jend - j0 < J->tk ? jend - j0 : J->tk);
    int64_t e = qkv_attn_diagonal(P, i0, j0);
    int kind = M ? qkv_mod_kind(M, b, i0, bq, j0, bk) : QKV_BLOCK_FULL;
    if (kind == QKV_BLOCK_EMPTY) continue;        /* nothing kept: never computed */
    ranges R;
    qkv_attn_ranges_causal(&R, nqp, bk, e);
    /* a partial tile's mask first, which narrows every step's rows: from
       the block mask's spans, else run here */
    int partial = M && kind == QKV_BLOCK_PARTIAL && M->prog->out[QKV_MOD_OUT_MASK] >= 0;
    const int32_t *sp = partial && spans ? W->span : NULL;
    int masked = partial && !sp;
    qkv_mod_tile T = {M ? b / M->heads : 0, M ? b % M->heads : 0, i0, j0, bq, bk, 1, 0, st, BQ};
    if (sp && !ranges_spans(&R, nqp, bq, bk, j0, e, spans, W->span)) continue;
    if (masked) {
      int err = qkv_mod_rows(M, &T, QKV_MOD_WANT_MASK, W->mem, W->keep, NULL);
      if (err != QKV_OK) return err;
      if (!ranges_keep(&R, nqp, bq, bk, W->keep)) continue;
    }
    const float *kt = qkv_attn_tile_of(J, &P->k, J->gemm.k.layout, off[1], j0, bk, P->dk,
                                       W->kbuf);
    for (int i = 0; i < nqp; i++) W->mx[i] = -INFINITY;
    /* the max comes out of the product, or out of the score_mod's pass,
       unless st changes after them (every row of st is then the
       product's: no range was narrowed); the spans cut in the product
       too, unless a score_mod comes after */
    int cut = P->causal && qkv_attn_tile_cut(P, i0, j0, bk);
    int later = P->has_mask || masked || (scored && (sp || cut));
    float *pmx = later || scored ? NULL : W->mx;
    int64_t krs = J->gemm.k.layout == COPY ? P->dk : P->k.rs;
    if (J->avx512)                  /* the same products on 16 lanes */
      qkv_attn_qk_ranges512(nqp, &R, e, scored ? NULL : sp, W->qt, kt, krs, P->dk, st, pmx);
    else
      qk_tile(nqp, &R, e, scored ? NULL : sp, W->qt, kt, krs, P->dk, st, pmx);
    if (scored) {
      int err = qkv_mod_rows(M, &T, QKV_MOD_WANT_SCORE, W->mem, NULL, later ? NULL : W->mx);
      if (err != QKV_OK) return err;
      if (sp) drop_spans(st, nqp, &R, sp);        /* the spans carry the diagonal */
      else if (cut) recut(st, nqp, bk, e);
    }
    if (masked) drop_unkept(st, nqp, bk, W->keep);
    if (P->has_mask)
      qkv_attn_mask_cols(J, st, bq, bk, e, (const uint8_t *)P->mask.base + off[3] +
                         i0 * P->mask.rs + j0 * P->mask.cs);
    if (J->avx512) {                /* the softmax on 16 lanes */
      if (later) qkv_attn_col_max512(st, nqp, &R, W->mx);
      if (!qkv_attn_softmax512(st, nqp, &R, W->mx, m, W->l, W->alpha)) continue;
    } else {
      if (later) col_max(st, nqp, &R, W->mx);
      if (!softmax_cols(st, nqp, &R, W->mx, m, W->l, W->alpha)) continue;
    }
    scale_rows(o, bq, P->dv, W->alpha);
    const float *vt = qkv_attn_tile_of(J, &P->v, J->gemm.v.layout, off[2], j0, bk, P->dv,
                                       W->vbuf);
    int64_t vrs = J->gemm.v.layout == COPY ? P->dv : P->v.rs;
    if (J->avx512) qkv_attn_pv_ranges512(bq, &R, st, vt, vrs, o, P->dv);
    else pv_tile(bq, &R, st, vt, vrs, o, P->dv);
  }
  qkv_attn_put_lse(J, b, i0, bq, m, NULL, W->l);
  /* a query with no key stays zeros; a NaN sum (a NaN score, which the max
     may have skipped) makes the row NaN even where p v was not run */
  for (int i = 0; i < bq; i++)
    W->alpha[i] = W->l[i] == 0.0 ? 1.0f : (float)(1.0 / W->l[i]);
  scale_rows(o, bq, P->dv, W->alpha);
  return QKV_OK;
}
#endif

