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
** and runs a scalar softmax per query row.  float16 and bfloat16 take the
** float32 path on tiles widened as they are read, o rounded once as it is
** written (the halves jobs: the bits of float32 copies, without the
** copies), but for bfloat16 on a CPU with AMX (attention_amx.c).  A decode
** step's few queries go to attention_decode.c in float32 and both halves
** (there too the bits of float32 copies, which go there as well).
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
#include "attention_job.h"

/* how gemm reads x, r x c: a tile of the matrix has at most its rows, so
   the ld chosen for the whole (layout.h) fits every tile */
static gemm_read read_of (const job *J, const qkv_attn_view *x, int64_t r, int64_t c) {
  gemm_read g;
  g.layout = qkv_gemm_layout(r, c, x->rs, x->cs, &g.ld);
  /* a halves job widens every tile; the AVX2 products only need each
     token's features to be adjacent */
  if (J->halves) g.layout = COPY;
  else if (J->avx2 && g.layout != BYROW) g.layout = x->cs == 1 || c == 1 ? BYROW : COPY;
  return g;
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
static enum CBLAS_TRANSPOSE flag (gemm_read g, int transposed) {
  int byrow = g.layout != BYCOL;
  return byrow != transposed ? CblasNoTrans : CblasTrans;
}

/* s (m x n, ld n) = scale * q (m x dk) k^T, the scale after the product
   where it is 0 or not finite (qkv_gemm_scaled, as the backward's) */
static void scores (const job *J, int m, int n, const void *q, const void *k,
                    void *s) {
  const qkv_attn_plan *P = &J->p;
  qkv_gemm_scaled(P->dtype == QKV_F64, flag(J->gemm.q, 0), flag(J->gemm.k, 1), m, n, (int)P->dk,
                  P->scale, q, J->gemm.q.ld, k, J->gemm.k.ld, s, n);
}

/* o (m x dv, ld dv) += p (m x n, ld n) v */
static void accumulate (const job *J, int m, int n, const void *p,
                        const void *v, void *o) {
  int dv = (int)J->p.dv;
  if (J->p.dtype == QKV_F32)
    qkv_sgemm(CblasRowMajor, CblasNoTrans, flag(J->gemm.v, 0), m, dv, n,
                1.0f, (const float *)p, n, (const float *)v, J->gemm.v.ld,
                1.0f, (float *)o, dv);
  else
    qkv_dgemm(CblasRowMajor, CblasNoTrans, flag(J->gemm.v, 0), m, dv, n,
                1.0, (const double *)p, n, (const double *)v, J->gemm.v.ld,
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
    for (int64_t d = 0; d < J->p.dv; d++) o[d] *= alpha;
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
    for (int64_t d = 0; d < J->p.dv; d++) o[d] *= alpha;
  *l = *l * alpha + sum;
  *m = mnew;
  return 1;
}

/* the rows of a bq x bk tile at query i0, key j0; 0 when no key is kept */
static int softmax_rows (const job *J, scratch *W, int64_t i0, int bq,
                         int64_t j0, int bk, const uint8_t *mk, char *o) {
  const qkv_attn_plan *P = &J->p;
  int64_t e = qkv_attn_diagonal(P, i0, j0);
  int any = 0;
  for (int i = 0; i < bq; i++) {
    int lim = qkv_attn_key_limit(i, e, bk);
    const uint8_t *mr = mk ? mk + i * P->mask.rs : NULL;
    if (P->dtype == QKV_F32)
      any |= row_f32(J, (float *)W->s + (int64_t)i * bk, bk, lim, mr,
                     P->mask.cs, W->m + i, W->l + i,
                     (float *)o + (int64_t)i * P->dv);
    else
      any |= row_f64(J, (double *)W->s + (int64_t)i * bk, bk, lim, mr,
                     P->mask.cs, W->m + i, W->l + i,
                     (double *)o + (int64_t)i * P->dv);
  }
  return any;
}

/* divides each row by its sum; a row with no key kept is already zeros */
static void finish (const job *J, const scratch *W, int bq, char *o) {
  for (int i = 0; i < bq; i++) {
    if (W->l[i] == 0.0) continue;
    double r = 1.0 / W->l[i];
    int64_t dv = J->p.dv;
    if (J->p.dtype == QKV_F32) {
      float *p = (float *)o + (int64_t)i * dv, rf = (float)r;
      for (int64_t d = 0; d < dv; d++) p[d] *= rf;
    } else {
      double *p = (double *)o + (int64_t)i * dv;
      for (int64_t d = 0; d < dv; d++) p[d] *= r;
    }
  }
}

/* ---- the mods ---- */

int qkv_attn_mod_scores (const job *J, scratch *W, int64_t t, int64_t i0, int bq, int64_t j0,
                         int bk, void *s, int64_t ld, int key_major, int kind) {
  qkv_attn_mods *M = J->mods;
  const qkv_mod_prog *P = M->prog;
  int want = (P->out[QKV_MOD_OUT_SCORE] >= 0 ? QKV_MOD_WANT_SCORE : 0) |
             (kind == QKV_BLOCK_PARTIAL && P->out[QKV_MOD_OUT_MASK] >= 0 ? QKV_MOD_WANT_MASK : 0);
  if (want == 0) return QKV_OK;
  qkv_mod_tile T = {t / M->heads, t % M->heads, i0, j0, bq, bk, key_major,
                    J->p.dtype == QKV_F64, s, ld};
  return qkv_mod_rows(M, &T, want, W->mem, NULL, NULL);
}

/* the keys of query tile [i0, i0 + bq) through BLAS, into o */
static int keys_blas (const job *J, scratch *W, int64_t b, int64_t i0, int bq,
                      int64_t jend, char *o) {
  const qkv_attn_plan *P = &J->p;
  int64_t off[4];                   /* q's, k's, v's and the mask's */
  qkv_attn_batch_offsets(P, b, off);
  const void *qt = qkv_attn_tile_of(J, &P->q, J->gemm.q.layout, off[0], i0, bq, P->dk, W->qbuf);
  for (int i = 0; i < bq; i++) {
    W->m[i] = -INFINITY;
    W->l[i] = 0.0;
  }
  for (int64_t j0 = 0; j0 < jend; j0 += J->tk) {
    int bk = (int)(jend - j0 < J->tk ? jend - j0 : J->tk);
    int kind = J->mods ? qkv_mod_kind(J->mods, b, i0, bq, j0, bk) : QKV_BLOCK_FULL;
    if (kind == QKV_BLOCK_EMPTY) continue;        /* nothing kept: never computed */
    scores(J, bq, bk, qt, qkv_attn_tile_of(J, &P->k, J->gemm.k.layout, off[1], j0, bk, P->dk,
                                           W->kbuf), W->s);
    if (J->mods) {
      int err = qkv_attn_mod_scores(J, W, b, i0, bq, j0, bk, W->s, bk, 0, kind);
      if (err != QKV_OK) return err;
    }
    const uint8_t *mk = NULL;
    if (P->has_mask)
      mk = (const uint8_t *)P->mask.base + off[3] + i0 * P->mask.rs + j0 * P->mask.cs;
    if (softmax_rows(J, W, i0, bq, j0, bk, mk, o))
      accumulate(J, bq, bk, W->s,
                 qkv_attn_tile_of(J, &P->v, J->gemm.v.layout, off[2], j0, bk, P->dv, W->vbuf), o);
  }
  qkv_attn_put_lse(J, b, i0, bq, NULL, W->m, W->l);
  finish(J, W, bq, o);
  return QKV_OK;
}

/* ---- the work items: one tile of queries of one batch ---- */

/* the keys of the bq queries from i0 of batch b into o, a tile of out
   or, for a halves job, a float32 one */
static int item_keys (const job *J, scratch *W, int64_t b, int64_t i0, int bq, char *o) {
  const qkv_attn_plan *P = &J->p;
  memset(o, 0, (size_t)bq * (size_t)P->dv * (J->halves ? sizeof(float) : J->es));
  /* keys past jend are causally excluded for every query of the tile */
  int64_t jend = qkv_attn_key_end(P, i0, bq);
  if (jend <= 0) {                  /* no key for any of them */
    qkv_attn_put_lse(J, b, i0, bq, NULL, NULL, NULL);
    return QKV_OK;
  }
#ifdef QKV_VEXP_X86
  if (J->avx512 && !J->mods) {
    qkv_attn_keys_avx512(J, W, b, i0, bq, jend, (float *)o);
    return QKV_OK;
  }
  if (J->avx2) return qkv_attn_keys_avx2(J, W, b, i0, bq, jend, (float *)o);
#endif
  return keys_blas(J, W, b, i0, bq, jend, o);
}

/* item t (attention_plan.h's qkv_attn_item says which queries), written
   into out: a halves job's rounded once from its float32 tile */
static int query_tile (const job *J, scratch *W, int64_t t) {
  const qkv_attn_plan *P = &J->p;
  int64_t b, i0;
  int bq = qkv_attn_item(P, t, &b, &i0);
  char *o = P->out + (size_t)((b * P->nq + i0) * P->dv) * J->es;
  if (!J->halves) return item_keys(J, W, b, i0, bq, o);
  int err = item_keys(J, W, b, i0, bq, (char *)W->obuf);
  int64_t n = bq * P->dv;
  if (err == QKV_OK) qkv_cpu_copy_tile(P->dtype, o, QKV_F32, W->obuf, 1, n, n, 1);
  return err;
}

static void scratch_free (scratch *W) {
  free(W->block);
  free(W->qbuf);
  free(W->kbuf);
  free(W->vbuf);
  free(W->obuf);
  free(W->mem);
  free(W->keep);
  free(W->span);
}

/* 0 when out of memory (W is then freed).  The tile buffers share one
   block: a call on a few tokens pays for one allocation, not six. */
static int scratch_new (const job *J, scratch *W) {
  const qkv_attn_plan *P = &J->p;
  size_t bq = (size_t)(P->nq < BQ ? P->nq : BQ);
  size_t bk = (size_t)(P->nk < J->tk ? P->nk : J->tk);
  size_t es = J->es, dk = (size_t)P->dk, dv = (size_t)P->dv;
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
  /* a halves job's tiles (every operand a COPY) and its o in float32 */
  size_t ts = J->halves ? sizeof(float) : es;
  if (J->gemm.q.layout == COPY && (!J->avx2 || J->halves))
    ok = ok && (W->qbuf = malloc(bq * dk * ts + 1));
  if (J->gemm.k.layout == COPY) ok = ok && (W->kbuf = malloc(bk * dk * ts + 1));
  if (J->gemm.v.layout == COPY) ok = ok && (W->vbuf = malloc(bk * dv * ts + 1));
  if (J->halves) ok = ok && (W->obuf = malloc(bq * dv * ts + 1));
  /* the mods' values, a row at a time (mods.h) */
  if (J->mods)
    ok = ok && (W->mem = malloc(sizeof(double) * qkv_mod_row_scratch(J->mods->prog, BQ, (int)bk)));
  if (J->mods && J->avx2 && J->mods->prog->out[QKV_MOD_OUT_MASK] >= 0)
    ok = ok && (W->keep = malloc(bk * BQ)) &&
         (W->span = aligned_alloc(64, 2 * BQ * sizeof(int32_t)));
  if (!ok) scratch_free(W);
  return ok;
}

/* items [lo, hi), with scratch of their own */
static int tiles (void *p, int64_t lo, int64_t hi, int tid) {
  const job *J = p;
  scratch W;
  (void)tid;
  if (!scratch_new(J, &W)) return QKV_ENOMEM;
  unsigned csr = qkv_ftz_on(J->p.dtype == QKV_F32 || J->halves);   /* subnormals flushed */
  int err = QKV_OK;
  for (int64_t t = lo; t < hi && !qkv_interrupted && err == QKV_OK; t++) err = query_tile(J, &W, t);
  qkv_ftz_off(csr);
  scratch_free(&W);
  return err == QKV_OK && qkv_interrupted ? QKV_EINTR : err;
}

/*
** Items in parallel (BLAS runs single-threaded on each thread, blas.h), so
** the cores split the items, not the products.
*/
static int run (const job *J) {
  if (!qkv_attn_threaded(J)) return tiles((void *)J, 0, J->p.items, 0);
  return qkv_par_for(J->p.items, 1, tiles, (void *)J);
}

static int forward (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                    const qkv_tensor *v, const qkv_tensor *mask, int causal,
                    double scale, qkv_tensor *lse, qkv_attn_mods *M) {
  /* bfloat16 on the tile unit where there is one; a few queries to the
     decode kernel (below), which reads the halves as they are; the
     halves otherwise on the AVX paths' float32 tiles, widened as read
     (J.halves).  Without AVX2, and for a scale that is not finite or is 0
     (scores() below takes those) or d_k = 0, QKV_EDTYPE makes the
     dispatch compute them in float32 copies */
  int half = qkv_is_half(out->dtype), amx = 0;
  if (!half && out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
#ifdef QKV_VEXP_X86
  /* the tile path keeps no log-sum-exps: a forward that must leave them
     (autograd's) runs on the float32 tiles */
  amx = out->dtype == QKV_BF16 && !M && isfinite(scale) && scale != 0 &&
        q->size[q->ndim - 1] > 0 && qkv_cpu_has_amx() && !lse;
#else
  if (half) return QKV_EDTYPE;
#endif
  job J;
  memset(&J, 0, sizeof J);
  qkv_attn_plan *P = &J.p;
  int err = qkv_attn_plan_forward(P, out, q, k, v, mask, causal, scale, lse, qkv_data);
  if (err != QKV_OK) return err;
  J.es = qkv_elsize(out->dtype);
  int64_t tq = BQ;
  J.tk = BK;
  if (M) {
    if (!qkv_cpu_mods_ready(M, P)) return QKV_EINTERNAL;
    /* a block mask's blocks of keys as the tiles' (a tile's kinds run by
       them); as many blocks of queries to a tile as fit in BQ, so that k
       and v are read once for that many queries, not for each block */
    if (M->kinds) tq = BQ / M->bq * M->bq, J.tk = M->bk * (M->bk < TKB ? TKB / M->bk : 1);
    J.mods = M;
  }
  if (P->nbatch == 0 || P->nq == 0 || P->dv == 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  if (P->nk == 0) {                  /* no key for any query: zeros */
    memset(P->out, 0, (size_t)(P->nbatch * P->nq * P->dv) * J.es);
    for (int64_t i = 0; P->lse && i < P->nbatch * P->nq; i++) qkv_attn_lse_at(&J, i, -INFINITY);
    return QKV_OK;
  }
  /* CBLAS counts in int */
  if (!qkv_fits_int(P->nq) || !qkv_fits_int(P->nk) || !qkv_fits_int(P->dk) ||
      !qkv_fits_int(P->dv))
    return QKV_EINTERNAL;
  qkv_attn_tiles(P, tq);
#ifdef QKV_VEXP_X86
  /* a decode step's few queries: attention_decode.c */
  if (qkv_attn_decode_fits(&J)) return qkv_attn_decode(&J);
  /* the AVX2 path carries the scale in q: with d_k = 0 there is no q, and
     a q * scale that is infinite or 0 hides what Q K^T * scale gives where
     the product overflows; BLAS's scores() takes those */
  J.halves = half && !amx;
  J.avx2 = (P->dtype == QKV_F32 || J.halves) && P->dk > 0 && isfinite(scale) && scale != 0 &&
           qkv_cpu_has_avx2();
  if (J.halves && !J.avx2) return QKV_EDTYPE;
  /* the same path on 16 lanes (attention_avx512.c), when the CPU has it;
     the mods run on the AVX2 path's tiles, with its products */
  J.avx512 = J.avx2 && qkv_cpu_has_avx512();
#endif
  J.gemm.q = read_of(&J, &P->q, P->nq, P->dk);
  J.gemm.k = read_of(&J, &P->k, P->nk, P->dk);
  J.gemm.v = read_of(&J, &P->v, P->nk, P->dv);
#ifdef QKV_VEXP_X86
  if (amx) return qkv_attn_amx(&J);
#endif
  if (!J.avx2 && qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  return run(&J);
}

int qkv_cpu_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                       const qkv_tensor *v, const qkv_tensor *mask, int causal,
                       double scale, qkv_tensor *lse) {
  return forward(out, q, k, v, mask, causal, scale, lse, NULL);
}

int qkv_cpu_attention_mods (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                            const qkv_tensor *v, const qkv_tensor *mask, int causal,
                            double scale, qkv_tensor *lse, qkv_attn_mods *M) {
  return forward(out, q, k, v, mask, causal, scale, lse, M);
}
