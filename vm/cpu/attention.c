/*
** attention.c -- fused scaled-dot-product attention on the CPU:
** out = softmax(q k^T * scale, masked) v, computed for a tile of BQ queries
** against BK keys at a time with an online softmax (a running max m and sum
** l per query; the partial output is rescaled by exp(m_old - m_new) when the
** max grows), so no thread holds more than a BQ x BK block of scores.
**
** Two ways through a tile.  float32 on a CPU with AVX2 and FMA uses our
** register-blocked products on the scores held transposed (key-major), so
** the softmax runs down columns, 8 queries to a vector; they beat OpenBLAS
** here because nothing is packed per tile (bench/NOTES.md).  Everything
** else (float64, or no AVX2) hands both products of a tile to BLAS gemm
** and runs a scalar softmax per query row.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu.h"
#include "iter.h"
#include "layout.h"
#include "vexp.h"

/*
** Tile sizes, measured (bench/NOTES.md): a 96 x 384 block of float scores
** (144 KB) and q^T for 384 queries stay in L2 with the k and v tiles; more
** queries per tile means fewer passes over k and v, fewer keys keeps the
** score block's columns short.  BQ must be a multiple of 16.
*/
#define BQ 384
#define BK 96

/* below this many multiply-adds the whole call runs on one thread */
#define PAR_MIN_WORK 200000.0

/* How gemm reads one of q, k, v: by rows (a row-major matrix, NoTrans), by
   columns, or from a dense copy of each tile. */
enum { BYROW = QKV_BYROW, BYCOL = QKV_BYCOL, COPY = QKV_COPY };

typedef struct {
  const char *base;                 /* element 0 of the view */
  int64_t rs, cs;                   /* element strides of tokens, features */
  int64_t bstride[QKV_MAXDIM];      /* batch dims, 0 where broadcast */
  int layout, ld;
} operand;

typedef struct {
  qkv_dtype dtype;
  size_t es;
  int nbd;                          /* batch dims */
  int64_t bsize[QKV_MAXDIM];
  int64_t nbatch, ntiles, nq, nk, dk, dv;
  operand q, k, v, mask;
  int has_mask, causal, avx2;
  int64_t off;                      /* causal: query i keeps keys j <= i + off */
  double scale;
  char *out;
} job;

/* a thread's scratch */
typedef struct {
  void *s;                          /* a tile of scores, then probabilities */
  double *m, *l;                    /* running max and sum per query */
  float *qt, *alpha, *mx;           /* AVX2 path: q^T * scale, rescale
                                       factors, the tile's max per query */
  void *qbuf, *kbuf, *vbuf;         /* dense tiles, for operands that need them */
} scratch;

/* a tile of the matrix has at most its rows, so the ld chosen for the
   whole (layout.h) fits every tile */
static void choose_layout (operand *op, int64_t r, int64_t c) {
  op->layout = qkv_gemm_layout(r, c, op->rs, op->cs, &op->ld);
}

static void setup (operand *op, const qkv_tensor *t, const job *J) {
  int nd = t->ndim;
  op->base = (const char *)qkv_data(t);
  op->rs = t->stride[nd - 2];
  op->cs = t->stride[nd - 1];
  for (int i = 0; i < J->nbd; i++)
    op->bstride[i] = t->size[i] == 1 ? 0 : t->stride[i];
  choose_layout(op, t->size[nd - 2], t->size[nd - 1]);
  /* the AVX2 products only need each token's features to be adjacent */
  if (J->avx2 && op->layout != BYROW)
    op->layout = op->cs == 1 || t->size[nd - 1] == 1 ? BYROW : COPY;
}

/* element offset of batch number bi (row-major over out's batch dims) */
static int64_t batch_offset (const job *J, const operand *op, int64_t bi) {
  int64_t off = 0;
  for (int i = J->nbd - 1; i >= 0 && bi > 0; i--) {
    off += (bi % J->bsize[i]) * op->bstride[i];
    bi /= J->bsize[i];
  }
  return off;
}

/* rows [r0, r0 + n) of op (batch at element offset boff), as stored or, for
   a COPY operand, densified into buf (whose row stride is then width) */
static const void *tile_of (const job *J, const operand *op, int64_t boff,
                            int64_t r0, int64_t n, int64_t width, void *buf) {
  const char *p = op->base + (boff + r0 * op->rs) * (int64_t)J->es;
  if (op->layout != COPY) return p;
  qkv_densify(buf, p, J->dtype == QKV_F64, n, width, op->rs, op->cs);
  return buf;
}

/* ---- the BLAS path ---- */

/* loops the compiler should vectorise (SSE2 at least), reducing into `sum`
   or `mx`; gcc's -O2 cost model refuses them even so, "cheap" takes them */
#ifdef _OPENMP
#define SIMD_SUM _Pragma("omp simd reduction(+:sum)")
#define SIMD_MAX _Pragma("omp simd reduction(max:mx)")
#else
#define SIMD_SUM
#define SIMD_MAX
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORISE __attribute__((optimize("vect-cost-model=cheap")))
#else
#define VECTORISE
#endif

/* gemm's transpose flag for an operand read as stored (BYROW = NoTrans) or,
   for k, as its transpose */
static enum CBLAS_TRANSPOSE flag (const operand *op, int transposed) {
  int byrow = op->layout != BYCOL;
  return byrow != transposed ? CblasNoTrans : CblasTrans;
}

/* s (m x n, ld n) = scale * q (m x dk) k^T */
static void scores (const job *J, int m, int n, const void *q, const void *k,
                    void *s) {
  int dk = (int)J->dk;
  if (dk == 0) {
    memset(s, 0, (size_t)m * (size_t)n * J->es);
  } else if (J->dtype == QKV_F32) {
    cblas_sgemm(CblasRowMajor, flag(&J->q, 0), flag(&J->k, 1), m, n, dk,
                (float)J->scale, (const float *)q, J->q.ld,
                (const float *)k, J->k.ld, 0.0f, (float *)s, n);
  } else {
    cblas_dgemm(CblasRowMajor, flag(&J->q, 0), flag(&J->k, 1), m, n, dk,
                J->scale, (const double *)q, J->q.ld,
                (const double *)k, J->k.ld, 0.0, (double *)s, n);
  }
}

/* o (m x dv, ld dv) += p (m x n, ld n) v */
static void accumulate (const job *J, int m, int n, const void *p,
                        const void *v, void *o) {
  int dv = (int)J->dv;
  if (J->dtype == QKV_F32)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, flag(&J->v, 0), m, dv, n,
                1.0f, (const float *)p, n, (const float *)v, J->v.ld,
                1.0f, (float *)o, dv);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, flag(&J->v, 0), m, dv, n,
                1.0, (const double *)p, n, (const double *)v, J->v.ld,
                1.0, (double *)o, dv);
}

/*
** One query's row of a tile: s holds n scores, of which those at lim and
** beyond are causally excluded; mk (NULL for none) its mask, ms apart.
** Leaves the probabilities, relative to the new running max, in s (0 for
** excluded keys) and rescales o.  Returns 0 when every key was excluded.
*/
static VECTORISE int row_f32 (const job *J, float *s, int n, int lim,
                              const uint8_t *mk, int64_t ms, double *m,
                              double *l, float *o) {
  float mx = -INFINITY, sum = 0.0f;
  if (mk)
    for (int j = 0; j < lim; j++) if (!mk[j * ms]) s[j] = -INFINITY;
  SIMD_MAX for (int j = 0; j < lim; j++) mx = s[j] > mx ? s[j] : mx;
  if (mx == -INFINITY) {
    memset(s, 0, (size_t)n * sizeof *s);
    return 0;
  }
  double mnew = mx > *m ? mx : *m;
  float alpha = (float)exp(*m - mnew), mf = (float)mnew;  /* alpha 0 at first */
  SIMD_SUM for (int j = 0; j < lim; j++) {
    s[j] = qkv_vexpf(s[j] - mf);
    sum += s[j];
  }
  memset(s + lim, 0, (size_t)(n - lim) * sizeof *s);
  if (alpha != 1.0f)
    for (int64_t d = 0; d < J->dv; d++) o[d] *= alpha;
  *l = *l * alpha + sum;
  *m = mnew;
  return 1;
}

/* the same in float64, with libm's exp */
static int row_f64 (const job *J, double *s, int n, int lim, const uint8_t *mk,
                    int64_t ms, double *m, double *l, double *o) {
  double mx = -INFINITY, sum = 0.0;
  for (int j = 0; j < lim; j++) {
    if (mk && !mk[j * ms]) s[j] = -INFINITY;
    mx = s[j] > mx ? s[j] : mx;
  }
  if (mx == -INFINITY) {
    memset(s, 0, (size_t)n * sizeof *s);
    return 0;
  }
  double mnew = mx > *m ? mx : *m, alpha = exp(*m - mnew);
  for (int j = 0; j < lim; j++) {
    s[j] = exp(s[j] - mnew);
    sum += s[j];
  }
  memset(s + lim, 0, (size_t)(n - lim) * sizeof *s);
  if (alpha != 1.0)
    for (int64_t d = 0; d < J->dv; d++) o[d] *= alpha;
  *l = *l * alpha + sum;
  *m = mnew;
  return 1;
}

/* the rows of a bq x bk tile at query i0, key j0; 0 when no key is kept */
static int softmax_rows (const job *J, scratch *W, int64_t i0, int bq,
                         int64_t j0, int bk, const uint8_t *mk, char *o) {
  int any = 0;
  for (int i = 0; i < bq; i++) {
    int lim = bk;
    if (J->causal) {
      int64_t e = i0 + i + J->off - j0 + 1;
      lim = e < 0 ? 0 : e < bk ? (int)e : bk;
    }
    const uint8_t *mr = mk ? mk + i * J->mask.rs : NULL;
    if (J->dtype == QKV_F32)
      any |= row_f32(J, (float *)W->s + (int64_t)i * bk, bk, lim, mr,
                     J->mask.cs, W->m + i, W->l + i,
                     (float *)o + (int64_t)i * J->dv);
    else
      any |= row_f64(J, (double *)W->s + (int64_t)i * bk, bk, lim, mr,
                     J->mask.cs, W->m + i, W->l + i,
                     (double *)o + (int64_t)i * J->dv);
  }
  return any;
}

/* divides each row by its sum; a row with no key kept is already zeros */
static void finish (const job *J, const scratch *W, int bq, char *o) {
  for (int i = 0; i < bq; i++) {
    if (W->l[i] == 0.0) continue;
    double r = 1.0 / W->l[i];
    if (J->dtype == QKV_F32) {
      float *p = (float *)o + (int64_t)i * J->dv, rf = (float)r;
      for (int64_t d = 0; d < J->dv; d++) p[d] *= rf;
    } else {
      double *p = (double *)o + (int64_t)i * J->dv;
      for (int64_t d = 0; d < J->dv; d++) p[d] *= r;
    }
  }
}

/* the keys of query tile [i0, i0 + bq) through BLAS, into o */
static void keys_blas (const job *J, scratch *W, int64_t b, int64_t i0, int bq,
                       int64_t jend, char *o) {
  int64_t qo = batch_offset(J, &J->q, b), ko = batch_offset(J, &J->k, b);
  int64_t vo = batch_offset(J, &J->v, b), mo = batch_offset(J, &J->mask, b);
  const void *qt = tile_of(J, &J->q, qo, i0, bq, J->dk, W->qbuf);
  for (int i = 0; i < bq; i++) {
    W->m[i] = -INFINITY;
    W->l[i] = 0.0;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BK) {
    int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
    scores(J, bq, bk, qt, tile_of(J, &J->k, ko, j0, bk, J->dk, W->kbuf), W->s);
    const uint8_t *mk = NULL;
    if (J->has_mask)
      mk = (const uint8_t *)J->mask.base + mo + i0 * J->mask.rs + j0 * J->mask.cs;
    if (softmax_rows(J, W, i0, bq, j0, bk, mk, o))
      accumulate(J, bq, bk, W->s,
                 tile_of(J, &J->v, vo, j0, bk, J->dv, W->vbuf), o);
  }
  finish(J, W, bq, o);
}

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

/* how many keys of a tile query i keeps (0 to bk) */
static int key_limit (int64_t i, int64_t e, int bk) {
  int64_t n = i - e + 1;
  return n < 0 ? 0 : n < bk ? (int)n : bk;
}

/* the first n lanes (none for n <= 0, all for n >= 8) */
static inline QKV_AVX2 __m256 lanes (int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  n = n < 0 ? 0 : n > 8 ? 8 : n;
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/*
** st[r][0..16) = sum over c of qt[c][0..16) k[r][c], for rows r < rows.
** Query l of the block drops key r when l < t + r (the causal diagonal).
** mx[0..16) (when not NULL) takes the max of each column, which saves the
** softmax a pass over the tile.
*/
INLINE void qk_block (int rows, const float *qt, const float *k, int64_t krs,
                      int64_t dk, int64_t t, float *st, float *mx) {
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
  if (t + rows - 1 > 0) {
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

/* st (bk x nqp) = k (bk rows, krs apart) q^T; nqp a multiple of 16 */
static QKV_AVX2 void qk_tile (int nqp, int bk, int64_t e, const float *qt,
                              const float *k, int64_t krs, int64_t dk,
                              float *st, float *mx) {
  for (int i = 0; i < nqp; i += 16) {
    int j = 0, n = key_limit(i + 15, e, bk);
    float *mi = mx ? mx + i : NULL;
    for (; j + 6 <= n; j += 6)
      qk_block(6, qt + i, k + j * krs, krs, dk, j + e - i, st + j * BQ + i, mi);
    const float *kj = k + j * krs;
    float *sj = st + j * BQ + i;
    int64_t t = j + e - i;
    switch (n - j) {       /* constant row counts, so each unrolls */
      case 5: qk_block(5, qt + i, kj, krs, dk, t, sj, mi); break;
      case 4: qk_block(4, qt + i, kj, krs, dk, t, sj, mi); break;
      case 3: qk_block(3, qt + i, kj, krs, dk, t, sj, mi); break;
      case 2: qk_block(2, qt + i, kj, krs, dk, t, sj, mi); break;
      case 1: qk_block(1, qt + i, kj, krs, dk, t, sj, mi); break;
      default: break;
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

/* a block of queries stops at the last key one of them keeps */
INLINE void pv_cols (int part, __m256i k0, __m256i k1, int bq, int bk,
                     int64_t e, const float *pt, const float *v, int64_t vrs,
                     float *o, int64_t dv) {
  int i = 0;
  for (; i + 6 <= bq; i += 6)
    pv_block(6, part, k0, k1, pt + i, key_limit(i + 5, e, bk), v, vrs,
             o + i * dv, dv);
  for (; i < bq; i++)
    pv_block(1, part, k0, k1, pt + i, key_limit(i, e, bk), v, vrs,
             o + i * dv, dv);
}

/* o (bq x dv) += st^T (bq x bk) v (bk rows, vrs apart), by blocks of 16
   columns (measured faster than by blocks of queries) */
static QKV_AVX2 void pv_tile (int bq, int bk, int64_t e, const float *pt,
                              const float *v, int64_t vrs, float *o,
                              int64_t dv) {
  __m256i all = _mm256_set1_epi32(-1);
  int64_t d = 0;
  for (; d + 16 <= dv; d += 16)
    pv_cols(0, all, all, bq, bk, e, pt, v + d, vrs, o + d, dv);
  if (d < dv)
    pv_cols(1, _mm256_castps_si256(lanes(dv - d)),
            _mm256_castps_si256(lanes(dv - d - 8)), bq, bk, e, pt, v + d, vrs,
            o + d, dv);
}

/* mx[i] = the max of column i of st over the keys its group of 8 keeps */
static QKV_AVX2 void col_max (const float *st, int nqp, int bk, int64_t e,
                              float *mx) {
  for (int g = 0; g < nqp; g += 8) {
    __m256 a = _mm256_set1_ps(-INFINITY), b = a;
    int j = 0, n = key_limit(g + 7, e, bk);
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
static QKV_AVX2 int softmax_cols (float *st, int nqp, int bk, int64_t e,
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
    int n = key_limit(g + 7, e, bk), z = key_limit(g + 15, e, bk);
    __m256 s = exp_col(st + g, n, msub);
    for (int j = n; j < z; j++) _mm256_store_ps(st + j * BQ + g, zero);
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

/* q^T (dk x nqp, row stride BQ) = scale * rows [i0, i0 + bq) of q; the
   padding queries get zeros, so finite scores nobody reads */
static void pack_q (const job *J, int64_t qo, int64_t i0, int bq, int nqp,
                    float *qt) {
  const float *q = (const float *)J->q.base + qo + i0 * J->q.rs;
  float sc = (float)J->scale;
  for (int64_t c = 0; c < J->dk; c++) {
    float *d = qt + c * BQ;
    for (int i = 0; i < bq; i++) d[i] = sc * q[i * J->q.rs + c * J->q.cs];
    for (int i = bq; i < nqp; i++) d[i] = 0.0f;
  }
}

/* -inf where the mask (at the tile's first query and key) is false; by
   query, so that a row-major mask is read in order */
static void mask_cols (const job *J, float *st, int bq, int bk, int64_t e,
                       const uint8_t *mk) {
  for (int i = 0; i < bq; i++) {
    const uint8_t *mi = mk + i * J->mask.rs;
    for (int j = 0, n = key_limit(i, e, bk); j < n; j++)
      if (!mi[j * J->mask.cs]) st[j * BQ + i] = -INFINITY;
  }
}

/* the keys of query tile [i0, i0 + bq) with our products, into o */
static void keys_avx2 (const job *J, scratch *W, int64_t b, int64_t i0, int bq,
                       int64_t jend, float *o) {
  int64_t ko = batch_offset(J, &J->k, b), vo = batch_offset(J, &J->v, b);
  int64_t mo = batch_offset(J, &J->mask, b);
  int nqp = (bq + 15) / 16 * 16;
  float *st = (float *)W->s, *m = (float *)W->m;
  pack_q(J, batch_offset(J, &J->q, b), i0, bq, nqp, W->qt);
  for (int i = 0; i < nqp; i++) {
    m[i] = -INFINITY;
    W->l[i] = 0.0;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BK) {
    int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
    int64_t e = J->causal ? j0 - i0 - J->off : -((int64_t)1 << 40);
    const float *kt = tile_of(J, &J->k, ko, j0, bk, J->dk, W->kbuf);
    for (int i = 0; i < nqp; i++) W->mx[i] = -INFINITY;
    /* the max comes out of the product, unless a mask changes st after */
    qk_tile(nqp, bk, e, W->qt, kt, J->k.layout == COPY ? J->dk : J->k.rs,
            J->dk, st, J->has_mask ? NULL : W->mx);
    if (J->has_mask) {
      mask_cols(J, st, bq, bk, e, (const uint8_t *)J->mask.base + mo +
                i0 * J->mask.rs + j0 * J->mask.cs);
      col_max(st, nqp, bk, e, W->mx);
    }
    if (!softmax_cols(st, nqp, bk, e, W->mx, m, W->l, W->alpha)) continue;
    scale_rows(o, bq, J->dv, W->alpha);
    const float *vt = tile_of(J, &J->v, vo, j0, bk, J->dv, W->vbuf);
    pv_tile(bq, bk, e, st, vt, J->v.layout == COPY ? J->dv : J->v.rs, o, J->dv);
  }
  for (int i = 0; i < bq; i++)        /* a query with no key stays zeros */
    W->alpha[i] = W->l[i] > 0.0 ? (float)(1.0 / W->l[i]) : 1.0f;
  scale_rows(o, bq, J->dv, W->alpha);
}
#endif

/* ---- the work items: one tile of queries of one batch ---- */

/*
** Item t.  The tiles of the last queries come first: under causal they have
** the most keys, and a dynamic schedule balances best when it hands out the
** big items before the small ones.
*/
static void query_tile (const job *J, scratch *W, int64_t t) {
  int64_t b = t % J->nbatch, i0 = (J->ntiles - 1 - t / J->nbatch) * BQ;
  int bq = (int)(J->nq - i0 < BQ ? J->nq - i0 : BQ);
  char *o = J->out + (size_t)((b * J->nq + i0) * J->dv) * J->es;
  memset(o, 0, (size_t)bq * (size_t)J->dv * J->es);
  /* keys past jend are causally excluded for every query of the tile */
  int64_t jend = J->nk;
  if (J->causal && i0 + bq + J->off < jend) jend = i0 + bq + J->off;
  if (jend <= 0) return;
#ifdef QKV_VEXP_X86
  if (J->avx2) {
    keys_avx2(J, W, b, i0, bq, jend, (float *)o);
    return;
  }
#endif
  keys_blas(J, W, b, i0, bq, jend, o);
}

static void scratch_free (scratch *W) {
  free(W->s);
  free(W->m);
  free(W->l);
  free(W->qt);
  free(W->alpha);
  free(W->mx);
  free(W->qbuf);
  free(W->kbuf);
  free(W->vbuf);
}

/* n bytes aligned for AVX loads (a multiple of 64 for aligned_alloc) */
static void *alloc64 (size_t n) {
  return aligned_alloc(64, (n + 63) / 64 * 64);
}

/* 0 when out of memory (W is then freed) */
static int scratch_new (const job *J, scratch *W) {
  size_t bq = (size_t)(J->nq < BQ ? J->nq : BQ);
  size_t bk = (size_t)(J->nk < BK ? J->nk : BK);
  size_t es = J->es, dk = (size_t)J->dk, dv = (size_t)J->dv;
  memset(W, 0, sizeof *W);
  if (J->avx2) {     /* queries padded to 16; + 1 keeps dk == 0 from malloc(0) */
    W->s = alloc64(bk * BQ * sizeof(float));
    W->qt = alloc64((dk + 1) * BQ * sizeof(float));
    W->alpha = alloc64(BQ * sizeof(float));
    W->mx = alloc64(BQ * sizeof(float));
    bq = BQ;
  } else {
    W->s = malloc(bq * bk * es);
  }
  W->m = alloc64(bq * sizeof *W->m);
  W->l = alloc64(bq * sizeof *W->l);
  int ok = W->s && W->m && W->l && (!J->avx2 || (W->qt && W->alpha && W->mx));
  if (J->q.layout == COPY && !J->avx2) ok = ok && (W->qbuf = malloc(bq * dk * es + 1));
  if (J->k.layout == COPY) ok = ok && (W->kbuf = malloc(bk * dk * es + 1));
  if (J->v.layout == COPY) ok = ok && (W->vbuf = malloc(bk * dv * es + 1));
  if (!ok) scratch_free(W);
  return ok;
}

/*
** Items in parallel.  OpenBLAS's OpenMP build runs a gemm called inside the
** region on the calling thread, so the cores split the items, not the
** products.
*/
static int run (const job *J) {
  int64_t items = J->nbatch * J->ntiles;
  double work = (double)J->nbatch * (double)J->nq * (double)J->nk *
                (double)(J->dk + J->dv);
  int err = QKV_OK;
  #pragma omp parallel reduction(|:err) if (items > 1 && work >= PAR_MIN_WORK)
  {
    scratch W;
    int ok = scratch_new(J, &W);
    if (!ok) err = QKV_ENOMEM;
    /* every thread must reach the loop, even one without scratch */
    #pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < items; t++)
      if (ok) query_tile(J, &W, t);
    if (ok) scratch_free(&W);
  }
  return err;
}

static int shapes_agree (const qkv_tensor *out, const qkv_tensor *q,
                         const qkv_tensor *k, const qkv_tensor *v,
                         const qkv_tensor *mask) {
  int nd = out->ndim;
  if (nd < 2 || q->ndim != nd || k->ndim != nd || v->ndim != nd) return 0;
  if (mask && mask->ndim != nd) return 0;
  for (int i = 0; i < nd - 2; i++)
    if (q->size[i] != out->size[i] || k->size[i] != out->size[i] ||
        v->size[i] != out->size[i] || (mask && mask->size[i] != out->size[i]))
      return 0;
  int64_t nq = out->size[nd - 2], dv = out->size[nd - 1];
  int64_t nk = k->size[nd - 2], dk = q->size[nd - 1];
  if (mask && (mask->size[nd - 2] != nq || mask->size[nd - 1] != nk)) return 0;
  return q->size[nd - 2] == nq && k->size[nd - 1] == dk &&
         v->size[nd - 2] == nk && v->size[nd - 1] == dv;
}

int qkv_cpu_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                       const qkv_tensor *v, const qkv_tensor *mask, int causal,
                       double scale) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (q->dtype != out->dtype || k->dtype != out->dtype || v->dtype != out->dtype)
    return QKV_EDTYPE;
  if (mask && mask->dtype != QKV_BOOL) return QKV_EDTYPE;
  if (!shapes_agree(out, q, k, v, mask)) return QKV_EINTERNAL;
  int nd = out->ndim;
  job J;
  memset(&J, 0, sizeof J);
  J.dtype = out->dtype;
  J.es = qkv_elsize(out->dtype);
  J.nbd = nd - 2;
  J.nbatch = 1;
  for (int i = 0; i < nd - 2; i++) {
    J.bsize[i] = out->size[i];
    J.nbatch *= out->size[i];
  }
  J.nq = out->size[nd - 2];
  J.dv = out->size[nd - 1];
  J.nk = k->size[nd - 2];
  J.dk = q->size[nd - 1];
  if (J.nbatch == 0 || J.nq == 0 || J.dv == 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  J.out = (char *)qkv_data(out);
  if (J.nk == 0) {                   /* no key for any query: zeros */
    memset(J.out, 0, (size_t)(J.nbatch * J.nq * J.dv) * J.es);
    return QKV_OK;
  }
  /* CBLAS counts in int */
  if (!qkv_fits_int(J.nq) || !qkv_fits_int(J.nk) || !qkv_fits_int(J.dk) || !qkv_fits_int(J.dv))
    return QKV_EINTERNAL;
  J.ntiles = (J.nq + BQ - 1) / BQ;
  J.causal = causal;
  J.off = J.nk - J.nq;
  J.scale = scale;
#ifdef QKV_VEXP_X86
  J.avx2 = J.dtype == QKV_F32 && qkv_cpu_has_avx2();
#endif
  setup(&J.q, q, &J);
  setup(&J.k, k, &J);
  setup(&J.v, v, &J);
  if (mask) {
    setup(&J.mask, mask, &J);
    J.has_mask = 1;
  }
  return run(&J);
}
