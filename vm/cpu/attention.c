/*
** attention.c -- fused scaled-dot-product attention on the CPU:
** out = softmax(q k^T * scale, masked) v, computed for a tile of BQ queries
** against BK keys at a time with an online softmax (a running max m and sum
** l per query; the partial output is rescaled by exp(m_old - m_new) when the
** max grows), so no thread holds more than a BQ x BK block of scores.
**
** Two ways through a tile.  float32 on a CPU with AVX2 and FMA uses our
** register-blocked products on the scores held transposed (key-major), so
** the softmax runs down columns, 8 queries to a vector (16 with AVX-512,
** attention_avx512.c); they beat OpenBLAS here because nothing is packed
** per tile (bench/NOTES.md).  Everything
** else (float64, or no AVX2) hands both products of a tile to BLAS gemm
** and runs a scalar softmax per query row.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "parallel.h"
#include "blas.h"
#include "iter.h"
#include "vexp.h"
#include "../common/attention_shape.h"
#include "../common/layout.h"

#include "attention_job.h"

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

/* ---- the BLAS path ---- */

/* loops the compiler should vectorise (SSE2 at least), reducing into `sum`
   or `mx`; gcc's -O2 cost model refuses them even so, "cheap" takes them */
#ifdef QKV_OMP_SIMD
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

/*
** s (m x n, ld n) = scale * q (m x dk) k^T.  gemm reads neither q nor k
** when dk or alpha is 0, but Q K^T * scale is NaN where an infinite scale
** meets a 0 product or a scale of 0 an infinite one (as the composed path
** and PyTorch give): those cases, and any scale that is not finite,
** multiply by the scale after the product, as the composed path does.
*/
static void scores (const job *J, int m, int n, const void *q, const void *k,
                    void *s) {
  int dk = (int)J->dk, after = dk == 0 || J->scale == 0 || !isfinite(J->scale);
  double alpha = after ? 1.0 : J->scale;
  if (dk == 0) {
    memset(s, 0, (size_t)m * (size_t)n * J->es);
  } else if (J->dtype == QKV_F32) {
    qkv_sgemm(CblasRowMajor, flag(&J->q, 0), flag(&J->k, 1), m, n, dk,
                (float)alpha, (const float *)q, J->q.ld,
                (const float *)k, J->k.ld, 0.0f, (float *)s, n);
  } else {
    qkv_dgemm(CblasRowMajor, flag(&J->q, 0), flag(&J->k, 1), m, n, dk,
                alpha, (const double *)q, J->q.ld,
                (const double *)k, J->k.ld, 0.0, (double *)s, n);
  }
  for (int64_t i = 0; after && i < (int64_t)m * n; i++)
    if (J->dtype == QKV_F32) ((float *)s)[i] *= (float)J->scale;
    else ((double *)s)[i] *= J->scale;
}

/* o (m x dv, ld dv) += p (m x n, ld n) v */
static void accumulate (const job *J, int m, int n, const void *p,
                        const void *v, void *o) {
  int dv = (int)J->dv;
  if (J->dtype == QKV_F32)
    qkv_sgemm(CblasRowMajor, CblasNoTrans, flag(&J->v, 0), m, dv, n,
                1.0f, (const float *)p, n, (const float *)v, J->v.ld,
                1.0f, (float *)o, dv);
  else
    qkv_dgemm(CblasRowMajor, CblasNoTrans, flag(&J->v, 0), m, dv, n,
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
  if (mx == -INFINITY) {      /* the max skips NaN: one still spoils the row */
    for (int j = 0; j < lim; j++) if (s[j] != s[j]) *l = NAN;
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
  if (mx == -INFINITY) {      /* the max skips NaN: one still spoils the row */
    for (int j = 0; j < lim; j++) if (s[j] != s[j]) *l = NAN;
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
  int64_t qo = qkv_attn_batch_offset(J, &J->q, b), ko = qkv_attn_batch_offset(J, &J->k, b);
  int64_t vo = qkv_attn_batch_offset(J, &J->v, b), mo = qkv_attn_batch_offset(J, &J->mask, b);
  const void *qt = qkv_attn_tile_of(J, &J->q, qo, i0, bq, J->dk, W->qbuf);
  for (int i = 0; i < bq; i++) {
    W->m[i] = -INFINITY;
    W->l[i] = 0.0;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += BK) {
    int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
    scores(J, bq, bk, qt, qkv_attn_tile_of(J, &J->k, ko, j0, bk, J->dk, W->kbuf), W->s);
    const uint8_t *mk = NULL;
    if (J->has_mask)
      mk = (const uint8_t *)J->mask.base + mo + i0 * J->mask.rs + j0 * J->mask.cs;
    if (softmax_rows(J, W, i0, bq, j0, bk, mk, o))
      accumulate(J, bq, bk, W->s,
                 qkv_attn_tile_of(J, &J->v, vo, j0, bk, J->dv, W->vbuf), o);
  }
  qkv_attn_put_lse(J, b, i0, bq, NULL, W->m, W->l);
  finish(J, W, bq, o);
}

/* ---- the work items: one tile of queries of one batch ---- */

/* item t (attention_job.h says which queries) */
static void query_tile (const job *J, scratch *W, int64_t t) {
  int64_t b, i0;
  int bq = qkv_attn_item(J, t, &b, &i0);
  char *o = J->out + (size_t)((b * J->nq + i0) * J->dv) * J->es;
  memset(o, 0, (size_t)bq * (size_t)J->dv * J->es);
  /* keys past jend are causally excluded for every query of the tile */
  int64_t jend = J->nk;
  if (J->causal && i0 + bq + J->off < jend) jend = i0 + bq + J->off;
  if (jend <= 0) {                  /* no key for any of them */
    qkv_attn_put_lse(J, b, i0, bq, NULL, NULL, NULL);
    return;
  }
#ifdef QKV_VEXP_X86
  if (J->avx512) {
    qkv_attn_keys_avx512(J, W, b, i0, bq, jend, (float *)o);
    return;
  }
  if (J->avx2) {
    qkv_attn_keys_avx2(J, W, b, i0, bq, jend, (float *)o);
    return;
  }
#endif
  keys_blas(J, W, b, i0, bq, jend, o);
}

static void scratch_free (scratch *W) {
  free(W->block);
  free(W->qbuf);
  free(W->kbuf);
  free(W->vbuf);
}

/* 0 when out of memory (W is then freed).  The tile buffers share one
   block: a call on a few tokens pays for one allocation, not six. */
static int scratch_new (const job *J, scratch *W) {
  size_t bq = (size_t)(J->nq < BQ ? J->nq : BQ);
  size_t bk = (size_t)(J->nk < BK ? J->nk : BK);
  size_t es = J->es, dk = (size_t)J->dk, dv = (size_t)J->dv;
  memset(W, 0, sizeof *W);
  /* AVX2: queries padded to BQ; + 1 keeps dk == 0 from an empty qt */
  size_t ns = J->avx2 ? bk * BQ * sizeof(float) : bq * bk * es;
  size_t nq = J->avx2 ? (dk + 1) * BQ * sizeof(float) : 0;
  size_t nv = J->avx2 ? BQ * sizeof(float) : 0;
  if (J->avx2) bq = BQ;
  size_t nm = bq * sizeof *W->m;
  char *p = W->block = aligned_alloc(64, (ns + nq + 2 * nv + 2 * nm) / 64 * 64 + 6 * 64);
  if (p == NULL) return 0;
  W->s = qkv_attn_carve(&p, ns);
  W->m = qkv_attn_carve(&p, nm);
  W->l = qkv_attn_carve(&p, nm);
  if (J->avx2) {
    W->qt = qkv_attn_carve(&p, nq);
    W->alpha = qkv_attn_carve(&p, nv);
    W->mx = qkv_attn_carve(&p, nv);
  }
  int ok = 1;
  if (J->q.layout == COPY && !J->avx2) ok = ok && (W->qbuf = malloc(bq * dk * es + 1));
  if (J->k.layout == COPY) ok = ok && (W->kbuf = malloc(bk * dk * es + 1));
  if (J->v.layout == COPY) ok = ok && (W->vbuf = malloc(bk * dv * es + 1));
  if (!ok) scratch_free(W);
  return ok;
}

/* items [lo, hi), with scratch of their own */
static int tiles (void *p, int64_t lo, int64_t hi, int tid) {
  const job *J = p;
  scratch W;
  (void)tid;
  if (!scratch_new(J, &W)) return QKV_ENOMEM;
  unsigned csr = qkv_ftz_on(J->dtype == QKV_F32);     /* subnormals flushed */
  for (int64_t t = lo; t < hi && !qkv_interrupted; t++) query_tile(J, &W, t);
  qkv_ftz_off(csr);
  scratch_free(&W);
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}

/*
** Items in parallel (BLAS runs single-threaded on each thread, blas.h), so
** the cores split the items, not the products.
*/
static int run (const job *J) {
  int64_t items = J->nbatch * J->ntiles;
  if (!qkv_attn_threaded(J)) return tiles((void *)J, 0, items, 0);
  return qkv_par_for(items, 1, tiles, (void *)J);
}

int qkv_cpu_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                       const qkv_tensor *v, const qkv_tensor *mask, int causal,
                       double scale, qkv_tensor *lse) {
  /* bfloat16 on the tile unit where there is one; otherwise, and for a
     scale that is not finite or is 0 (scores() below takes those) or
     d_k = 0, QKV_EDTYPE makes the dispatch compute in float32 */
  int bf16 = out->dtype == QKV_BF16;
  if (bf16) {
#ifdef QKV_VEXP_X86
    /* the tile path keeps no log-sum-exps: a forward that must leave them
       (autograd's) runs in float32 */
    if (!isfinite(scale) || scale == 0 || q->size[q->ndim - 1] == 0 || !qkv_cpu_has_amx() || lse)
#endif
      return QKV_EDTYPE;
  } else if (out->dtype != QKV_F32 && out->dtype != QKV_F64) {
    return QKV_EDTYPE;
  }
  int err = qkv_attention_check(out, q, k, v, mask);
  if (err != QKV_OK) return err;
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
  J.lse = lse ? (char *)qkv_data(lse) : NULL;
  if (J.nk == 0) {                   /* no key for any query: zeros */
    memset(J.out, 0, (size_t)(J.nbatch * J.nq * J.dv) * J.es);
    for (int64_t i = 0; J.lse && i < J.nbatch * J.nq; i++) qkv_attn_lse_at(&J, i, -INFINITY);
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
  /* the AVX2 path carries the scale in q: with d_k = 0 there is no q, and
     a q * scale that is infinite or 0 hides what Q K^T * scale gives where
     the product overflows; BLAS's scores() takes those */
  J.avx2 = J.dtype == QKV_F32 && J.dk > 0 && isfinite(scale) && scale != 0 &&
           qkv_cpu_has_avx2();
  /* the same path on 16 lanes (attention_avx512.c), when the CPU has it */
  J.avx512 = J.avx2 && qkv_cpu_has_avx512();
#endif
  setup(&J.q, q, &J);
  setup(&J.k, k, &J);
  setup(&J.v, v, &J);
  if (mask) {
    setup(&J.mask, mask, &J);
    J.has_mask = 1;
  }
#ifdef QKV_VEXP_X86
  if (bf16) return qkv_attn_amx(&J);
#endif
  if (!J.avx2 && qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  return run(&J);
}
