/*
** attention_bwd.c -- the fused attention's backward on the CPU, as
** FlashAttention-2 does it: nothing of size n_q x n_k is kept.  For each
** batch item, one thread, and for each tile of BQ queries:
**   1. per query row, the log-sum-exp of its masked, scaled scores (an
**      online max and sum over key tiles; read from the forward's when it
**      gave them) and D = dO . O;
**   2. per key tile, the scores again (not when there is one key tile:
**      they are still there), P = exp(S - lse), dV += P^T dO,
**      dP = dO V^T, dS = P (dP - D), dQ += scale dS K, dK += scale dS^T Q.
** q, k, v, o and dO are read by rows where they lie (heads' transposed
** views need no copy); the gradients are contiguous.
** The tile products go to BLAS gemm.  Only BQ x BK blocks and BQ row
** statistics are held per thread.  A float32 job with no mask tensor and
** the forward's log-sum-exps (and no mods, or those regs_take allows)
** goes to attention_bwd_avx512.c on CPUs with AVX-512, the same steps
** with its products in registers; so does a float16 or bfloat16 one, each
** item's rows widened to float32 as it is taken and its gradients rounded
** once (elsewhere the dispatch computes the halves in float32 copies).
*/
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "parallel.h"
#include "blas.h"
#include "vexp.h"
#include "attention_bwd_job.h"
#include "mods.h"
#include "../common/layout.h"

/* tiles of BQ queries x BK keys: 64 x 128 148 GFLOP/s at N = 4096, 128 x 128
   162, 128 x 256 172, 256 x 256 168 (bigger gemm calls, bench/NOTES.md) */
#define BQ 128
#define BK 256

typedef struct {
  qkv_attn_plan p;                  /* operands, shapes, bounds: common/attention_plan.h */
  int f64;
  /* q's, k's, v's, o's, go's rows: the dispatch passes only those that
     gemm can read by rows (layout.h's QKV_BYROW), and these are their
     leading dimensions (the row step, or the width for a single row) */
  int64_t ldq, ldk, ldv, ldo, ldgo;
  int isa;                          /* qkv_cpu_isa(): the row loops' lanes */
  int regs;                         /* items by attention_bwd_avx512.c */
  int halves;                       /* the plan's dtype a half (regs only): each item
                                       widened to float32, its gradients rounded */
  int64_t tq, tk;                   /* a tile's queries and keys: BQ, BK or the blocks' */
  qkv_attn_mods *mods;              /* score_mod/mask_mod programs, or NULL */
  pthread_mutex_t lock;             /* over the captured tensors' gradient sums */
} Bwd;

/* C (m x n, ldc) = alpha op(A) op(B) + beta C, rows of A and B as stored */
static void gemm (const Bwd *J, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                  void *c, int64_t ldc) {
  enum CBLAS_TRANSPOSE A = ta ? CblasTrans : CblasNoTrans, B = tb ? CblasTrans : CblasNoTrans;
  if (J->f64)
    qkv_dgemm(CblasRowMajor, A, B, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
              beta, c, (int)ldc);
  else
    qkv_sgemm(CblasRowMajor, A, B, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
              (int)ldb, (float)beta, c, (int)ldc);
}

/* t's leading dimension as gemm reads its rows */
static int64_t ld_of (const qkv_tensor *t) {
  int n = t->ndim, ld;
  qkv_gemm_layout(t->size[n - 2], t->size[n - 1], t->stride[n - 2], t->stride[n - 1], &ld);
  return ld;
}

/* row i of x (rows ld apart) in batch item b */
static const char *row (const Bwd *J, const qkv_attn_view *x, int64_t ld, int64_t b, int64_t i) {
  return x->base + (qkv_attn_batch_offset(&J->p, x, b) + i * ld) *
                   (int64_t)qkv_elsize(J->p.dtype);
}

static double at (const Bwd *J, const char *p, int64_t i) {
  return J->f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}
static void put (const Bwd *J, char *p, int64_t i, double x) {
  if (J->f64) ((double *)p)[i] = x; else ((float *)p)[i] = (float)x;
}

/* s (bq x bk) = scale q_tile k_tile^T, as the forward's scores (a scale
   of 0 or not finite after the product: NaN and inf in q k^T spoil the
   same scores both ways) */
static void product (const Bwd *J, int64_t b, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                     char *s) {
  const qkv_attn_plan *P = &J->p;
  const char *q = row(J, &P->q, J->ldq, b, i0), *k = row(J, &P->k, J->ldk, b, j0);
  qkv_gemm_scaled(J->f64, CblasNoTrans, CblasTrans, (int)bq, (int)bk, (int)P->dk, P->scale, q,
                  (int)J->ldq, k, (int)J->ldk, s, (int)bk);
}

/* s's masked entries -inf; mk: batch item b's mask, or NULL */
static void cut (const Bwd *J, const unsigned char *mk, int64_t i0, int64_t bq, int64_t j0,
                 int64_t bk, char *s) {
  const qkv_attn_plan *P = &J->p;
  if (!qkv_attn_tile_cut(P, i0, j0, bk)) return;        /* all kept */
  if (!mk && !J->f64) {                         /* causal alone: each row's tail */
    int64_t e = qkv_attn_diagonal(P, i0, j0);
    for (int64_t i = 0; i < bq; i++) {
      float *si = (float *)s + i * bk;
      for (int64_t j = qkv_attn_key_limit(i, e, (int)bk); j < bk; j++) si[j] = -INFINITY;
    }
    return;
  }
  for (int64_t i = 0; i < bq; i++)
    for (int64_t j = 0; j < bk; j++)
      if (!qkv_attn_keeps(P, mk, i0 + i, j0 + j)) put(J, s, i * bk + j, -INFINITY);
}

/* s's entries outside each query's span (a block mask's one run of kept
   keys, from key j0: sp[2 i], sp[2 i + 1]) -inf: a partial tile's mask
   without running it */
static void span_cut (const Bwd *J, const int32_t *sp, int64_t bq, int64_t j0, int64_t bk,
                      char *s) {
  for (int64_t i = 0; i < bq; i++) {
    int64_t lo = sp[2 * i] - j0, hi = sp[2 * i + 1] - j0;
    lo = lo < 0 ? 0 : lo > bk ? bk : lo;
    hi = hi < lo ? lo : hi > bk ? bk : hi;
    for (int64_t j = 0; j < lo; j++) put(J, s, i * bk + j, -INFINITY);
    for (int64_t j = hi; j < bk; j++) put(J, s, i * bk + j, -INFINITY);
  }
}

static void scores (const Bwd *J, int64_t b, const unsigned char *mk, int64_t i0, int64_t bq,
                    int64_t j0, int64_t bk, char *s) {
  product(J, b, i0, bq, j0, bk, s);
  cut(J, mk, i0, bq, j0, bk, s);
}

/* a tile row's max mx and sum of exp(x - mx) folded into the running
   (m, l); the first tile's without a libm exp */
static void fold_stats (float mx, float sum, double *m, double *l) {
  if (*m == -INFINITY) { *l = sum; *m = mx; }
  else if (mx > *m) { *l = *l * exp(*m - mx) + sum; *m = mx; }
  else *l += sum * exp(mx - *m);
}

/* row i of a float32 tile: its max and the sum of exp(x - max) folded into
   the running (m, l); one exp per score, vexp.h's (libm's expf is a scalar
   call: it took half the backward of a small model's attention) */
static void row_stats_base (const float *x, int64_t n, double *m, double *l) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
  if (mx == -INFINITY) return;
  float sum = 0;
  _Pragma("omp simd reduction(+:sum)")
  for (int64_t j = 0; j < n; j++) sum += qkv_vexpf(x[j] - mx);
  fold_stats(mx, sum, m, l);
}

/* A float32 tile: s becomes P = exp(s - lse), dp becomes dS = P (dP - D).
   grads_wide below is the AVX-512 version (qkv_cpu_isa picks): the same
   values, its exp giving the same bits wherever the result is normal.
   Compiled twice: for the baseline (4 lanes) and for AVX2 (grads_avx2, 8
   lanes: the baseline's took a sixth of a window's backward there). */
static inline __attribute__((always_inline)) void grads_rows (float *s, float *dp, int64_t bq,
                                                              int64_t bk, const double *lse,
                                                              const double *D) {
  for (int64_t i = 0; i < bq; i++) {
    float L = (float)lse[i], Di = (float)D[i];
    float *si = s + i * bk, *di = dp + i * bk;
    if (lse[i] == -INFINITY) {
      for (int64_t j = 0; j < bk; j++) si[j] = 0, di[j] = 0;
      continue;
    }
    _Pragma("omp simd")
    for (int64_t j = 0; j < bk; j++) {
      float p = qkv_vexpf(si[j] - L);       /* -inf gives 0: a masked key */
      si[j] = p;
      di[j] = p * (di[j] - Di);
    }
  }
}

static void grads_base (float *s, float *dp, int64_t bq, int64_t bk, const double *lse,
                        const double *D) {
  grads_rows(s, dp, bq, bk, lse, D);
}

#ifdef QKV_VEXP_X86
static QKV_AVX2 void grads_avx2 (float *s, float *dp, int64_t bq, int64_t bk, const double *lse,
                                 const double *D) {
  grads_rows(s, dp, bq, bk, lse, D);
}

/*
** row_stats' steps 16 lanes at a time with the max and the sum reduced in
** registers: the compiler's simd reductions go through memory, which took
** more than the exps on rows of 32 keys.  The sum adds in another order
** than the baseline's (16 partial sums): the same value within float32's
** rounding (tests/backends/test_isa.lua).
*/
static QKV_AVX512 void row_stats_wide (const float *x, int64_t n, double *m, double *l) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 a = ninf;
  for (int64_t j = 0; j < n; j += 16)
    a = _mm512_max_ps(a, _mm512_mask_loadu_ps(ninf, qkv_lanes16(n - j), x + j));
  float mx = _mm512_reduce_max_ps(a);
  if (mx == -INFINITY) return;
  __m512 vm = _mm512_set1_ps(mx), s = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {   /* lanes past n: -inf, whose exp is 0 */
    __m512 v = _mm512_mask_loadu_ps(ninf, qkv_lanes16(n - j), x + j);
    s = _mm512_add_ps(s, qkv_vexp16(_mm512_sub_ps(v, vm)));
  }
  fold_stats(mx, _mm512_reduce_add_ps(s), m, l);
}

/* grads' steps 16 lanes at a time, the row's tail masked: the compiler's
   loop spent more on its prologue and epilogue than on rows of 32 keys */
static QKV_AVX512 void grads_wide (float *s, float *dp, int64_t bq, int64_t bk,
                                   const double *lse, const double *D) {
  for (int64_t i = 0; i < bq; i++) {
    float *si = s + i * bk, *di = dp + i * bk;
    if (lse[i] == -INFINITY) {                  /* no key: zeros, whatever dP is */
      memset(si, 0, (size_t)bk * sizeof *si);
      memset(di, 0, (size_t)bk * sizeof *di);
      continue;
    }
    __m512 L = _mm512_set1_ps((float)lse[i]), Di = _mm512_set1_ps((float)D[i]);
    for (int64_t j = 0; j < bk; j += 16) {
      __mmask16 k = qkv_lanes16(bk - j);
      __m512 p = qkv_vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, si + j), L));
      _mm512_mask_storeu_ps(si + j, k, p);
      _mm512_mask_storeu_ps(di + j, k, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, di + j), Di)));
    }
  }
}
#endif

static void row_stats_f32 (int isa, const float *x, int64_t n, double *m, double *l) {
#ifdef QKV_VEXP_X86
  if (isa >= QKV_ISA_AVX512) { row_stats_wide(x, n, m, l); return; }
#endif
  (void)isa;
  row_stats_base(x, n, m, l);
}

static void grads_f32 (int isa, float *s, float *dp, int64_t bq, int64_t bk, const double *lse,
                       const double *D) {
#ifdef QKV_VEXP_X86
  if (isa >= QKV_ISA_AVX512) { grads_wide(s, dp, bq, bk, lse, D); return; }
  if (isa >= QKV_ISA_AVX2) { grads_avx2(s, dp, bq, bk, lse, D); return; }
#endif
  (void)isa;
  grads_base(s, dp, bq, bk, lse, D);
}

/* D[i] = dO_i . O_i, in double, for the bq rows from i0 */
static void row_dots (const Bwd *J, int64_t b, int64_t i0, int64_t bq, double *D) {
  const qkv_attn_plan *P = &J->p;
  for (int64_t i = 0; i < bq; i++) {
    double dd = 0;
    const void *gi = row(J, &P->go, J->ldgo, b, i0 + i), *oi = row(J, &P->o, J->ldo, b, i0 + i);
    if (J->f64) {
      const double *go = gi, *o = oi;
      for (int64_t c = 0; c < P->dv; c++) dd += go[c] * o[c];
    } else {
      const float *go = gi, *o = oi;
      _Pragma("omp simd reduction(+:dd)")
      for (int64_t c = 0; c < P->dv; c++) dd += (double)go[c] * o[c];
    }
    D[i] = dd;
  }
}

/*
** Query tile by query tile: 1. each row's log-sum-exp over every key tile
** and D; 2. the gradients, key tile by key tile.  With one key tile (n_k
** <= BK) step 2 finds that tile's scores still in s from step 1.
*/
static int one_item (const Bwd *J, int64_t b, char *s, char *dp, double *lse, double *D,
                     double *mem, double *const *acc) {
  const qkv_attn_plan *P = &J->p;
  size_t es = J->f64 ? 8 : 4;
  int64_t nq = P->nq, nk = P->nk, dk = P->dk, dv = P->dv;
  const unsigned char *mk = NULL;               /* the item's mask */
  if (P->has_mask) mk = (const unsigned char *)P->mask.base + qkv_attn_batch_offset(P, &P->mask, b);
  int64_t TQ = J->tq, TK = J->tk;
  for (int64_t i0 = 0; i0 < nq; i0 += TQ) {
    int64_t bq = nq - i0 < TQ ? nq - i0 : TQ;
    double m[BQ], l[BQ];
    for (int64_t i = 0; i < bq; i++) m[i] = -INFINITY, l[i] = 0;
    for (int64_t j0 = 0; P->lse == NULL && j0 < nk; j0 += TK) {   /* 1: lse, D */
      int64_t bk = nk - j0 < TK ? nk - j0 : TK;
      scores(J, b, mk, i0, bq, j0, bk, s);
      for (int64_t i = 0; i < bq; i++) {
        if (!J->f64) { row_stats_f32(J->isa, (const float *)s + i * bk, bk, &m[i], &l[i]); continue; }
        for (int64_t j = 0; j < bk; j++) {
          double x = at(J, s, i * bk + j);
          if (x == -INFINITY) continue;
          if (x > m[i]) { l[i] = l[i] * exp(m[i] - x) + 1; m[i] = x; }
          else l[i] += exp(x - m[i]);
        }
      }
    }
    for (int64_t i = 0; i < bq; i++) {
      int64_t r = b * nq + i0 + i;
      if (P->lse) lse[i] = J->f64 ? ((const double *)P->lse)[r] : ((const float *)P->lse)[r];
      else lse[i] = l[i] > 0 ? m[i] + log(l[i]) : -INFINITY;
    }
    row_dots(J, b, i0, bq, D);
    const char *q = row(J, &P->q, J->ldq, b, i0), *go = row(J, &P->go, J->ldgo, b, i0);
    char *dq = P->gq + (b * nq + i0) * dk * (int64_t)es;
    for (int64_t j0 = 0, bk; j0 < nk; j0 += bk) {      /* 2: the gradients */
      bk = nk - j0 < TK ? nk - j0 : TK;
      int kind = J->mods ? qkv_mod_kind(J->mods, b, i0, bq, j0, bk) : QKV_BLOCK_FULL;
      if (kind == QKV_BLOCK_EMPTY) continue;
      /* a block mask's blocks in a row, none empty, as one tile of up to BK
         keys: fewer, larger products (gemm's calls on 64 x 64 cost most of
         a window's backward in their own overhead) */
      while (J->mods && J->mods->kinds && j0 + bk < nk && bk + TK <= BK) {
        int next = qkv_mod_kind(J->mods, b, i0, bq, j0 + bk, TK);
        if (next == QKV_BLOCK_EMPTY) break;
        if (next == QKV_BLOCK_PARTIAL) kind = QKV_BLOCK_PARTIAL;
        bk += nk - (j0 + bk) < TK ? nk - (j0 + bk) : TK;
      }
      const char *k = row(J, &P->k, J->ldk, b, j0), *v = row(J, &P->v, J->ldv, b, j0);
      char *dkk = P->gk + (b / P->kvg * nk + j0) * dk * (int64_t)es;
      char *dvv = P->gv + (b / P->kvg * nk + j0) * dv * (int64_t)es;
      qkv_mod_tile T = {0, 0, i0, j0, (int)bq, (int)bk, 0, J->f64, s, bk};
      if (J->mods) {          /* the mods on the scores, keeping what the derivatives need */
        qkv_attn_mods *M = J->mods;
        /* a partial tile's mask: the block mask's spans, else run here */
        const int32_t *sp = kind == QKV_BLOCK_PARTIAL ? qkv_mod_spans(M, b, i0) : NULL;
        int want = QKV_MOD_WANT_SCORE | QKV_MOD_WANT_GRAD |
                   (kind == QKV_BLOCK_PARTIAL && !sp ? QKV_MOD_WANT_MASK : 0);
        T.b = b / M->heads;
        T.h = b % M->heads;
        product(J, b, i0, bq, j0, bk, s);
        int err;
        if (M->prog->out[QKV_MOD_OUT_SCORE] < 0) {       /* a mask alone: row by row */
          if (want & QKV_MOD_WANT_MASK && (err = qkv_mod_rows(M, &T, want, mem, NULL, NULL)) != QKV_OK)
            return err;
        } else {
          if ((err = qkv_mod_eval(M, &T, want, mem)) != QKV_OK) return err;
          qkv_mod_put(M, &T, mem, (want & QKV_MOD_WANT_MASK) != 0);
        }
        if (sp) span_cut(J, sp, bq, j0, bk, s);
        cut(J, mk, i0, bq, j0, bk, s);
      } else if (nk > BK || P->lse) scores(J, b, mk, i0, bq, j0, bk, s);
      gemm(J, 0, 1, bq, bk, dv, 1, go, J->ldgo, v, J->ldv, 0, dp, bk);  /* dP = dO V^T */
      if (!J->f64) grads_f32(J->isa, (float *)s, (float *)dp, bq, bk, lse, D);
      else
        for (int64_t i = 0; i < bq; i++)          /* s becomes P, dp dS = P (dP - D) */
          for (int64_t j = 0; j < bk; j++) {
            double x = at(J, s, i * bk + j), L = lse[i];
            double p = x == -INFINITY || L == -INFINITY ? 0 : exp(x - L);
            put(J, s, i * bk + j, p);
            put(J, dp, i * bk + j, p * (at(J, dp, i * bk + j) - D[i]));
          }
      if (J->mods) qkv_mod_grads(J->mods, &T, mem, dp, acc);   /* dS by the scores */
      gemm(J, 1, 0, bk, dv, bq, 1, s, bk, go, J->ldgo, 1, dvv, dv);      /* dV += P^T dO */
      gemm(J, 0, 0, bq, dk, bk, P->scale, dp, bk, k, J->ldk, 1, dq, dk);  /* dQ += s dS K */
      gemm(J, 1, 0, bk, dk, bq, P->scale, dp, bk, q, J->ldq, 1, dkk, dk); /* dK += s dS^T Q */
    }
  }
  return QKV_OK;
}

/* rows x width of x (rows ld apart) in batch item b as the item reads
   them: where they lie, or for a halves job widened into the dense
   float32 rows at in + at (then width apart) */
static const float *item_rows (const Bwd *J, const qkv_attn_view *x, int64_t ld, int64_t b,
                               int64_t rows, int64_t width, float *in, int64_t at,
                               int64_t *rs) {
  const char *p = row(J, x, ld, b, 0);
  *rs = ld;
  if (!J->halves) return (const float *)p;
  float *to = in + at;
  qkv_cpu_copy_tile(QKV_F32, to, J->p.dtype, p, rows, width, ld, 1);
  *rs = width;
  return to;
}

/* key items [lo, hi) by attention_bwd_avx512.c, which writes an item's
   dK and dV whole: a group's later items write theirs into scratch, added.
   A halves job's items run on float32 copies of their rows (in, held by
   the thread) and write float32 gradients (g), rounded once: dQ per item,
   dK and dV per group */
static int items_regs (const Bwd *J, int64_t lo, int64_t hi) {
  const qkv_attn_plan *P = &J->p;
  int64_t G = P->kvg, nq = P->nq, nk = P->nk, dk = P->dk, dv = P->dv;
  int64_t nkd = nk * dk, nkv = nk * dv, nqd = nq * dk, nqv = nq * dv;
  size_t nin = J->halves ? (size_t)(nqd + 2 * nqv + nkd + nkv) : 0;
  void *work = malloc(qkv_attn_bwd_avx512_work(dk, dv, J->mods));
  float *sk = G > 1 ? malloc(sizeof(float) * (size_t)(nkd + nkv)) : NULL;
  float *in = nin ? malloc(sizeof(float) * (nin + (size_t)(nqd + nkd + nkv))) : NULL;
  float *g = in ? in + nin : NULL;       /* a halves job's gradients */
  int err = work && (G == 1 || sk) && (!nin || in) ? QKV_OK : QKV_ENOMEM;
  size_t es = qkv_elsize(P->dtype);
  for (int64_t b = lo * G; b < hi * G && err == QKV_OK; b++) {
    if (qkv_interrupted) { err = QKV_EINTR; break; }
    int64_t qo = b * nq, ko = b / G * nk;
    float *gq = g ? g : (float *)P->gq + qo * dk;
    float *gk = g ? g + nqd : (float *)P->gk + ko * dk;
    float *gv = g ? g + nqd + nkd : (float *)P->gv + ko * dv;
    int own = b % G == 0;
    qkv_attn_bwd_item it;
    it.q = item_rows(J, &P->q, J->ldq, b, nq, dk, in, 0, &it.qrs);
    it.o = item_rows(J, &P->o, J->ldo, b, nq, dv, in, nqd, &it.ors);
    it.go = item_rows(J, &P->go, J->ldgo, b, nq, dv, in, nqd + nqv, &it.gors);
    it.k = item_rows(J, &P->k, J->ldk, b, nk, dk, in, nqd + 2 * nqv, &it.krs);
    it.v = item_rows(J, &P->v, J->ldv, b, nk, dv, in, nqd + 2 * nqv + nkd, &it.vrs);
    it.lse = (const float *)P->lse + qo;
    it.dq = gq;
    it.dk = own ? gk : sk;
    it.dvv = own ? gv : sk + nkd;
    it.mods = J->mods;
    it.b = b;
    err = qkv_attn_bwd_avx512(P, &it, work);
    for (int64_t e = 0; !own && e < nkd; e++) gk[e] += sk[e];
    for (int64_t e = 0; !own && e < nkv; e++) gv[e] += sk[nkd + e];
    if (!g || err != QKV_OK) continue;
    qkv_cpu_copy_tile(P->dtype, P->gq + qo * dk * es, QKV_F32, gq, 1, nqd, nqd, 1);
    if (b % G != G - 1) continue;
    qkv_cpu_copy_tile(P->dtype, P->gk + ko * dk * es, QKV_F32, gk, 1, nkd, nkd, 1);
    qkv_cpu_copy_tile(P->dtype, P->gv + ko * dv * es, QKV_F32, gv, 1, nkv, nkv, 1);
  }
  free(in);
  free(sk);
  free(work);
  return err;
}

/* key items [lo, hi) (each a group of kvg items), with scratch of their
   own */
static int items_blas (const Bwd *J, int64_t lo, int64_t hi) {
  const qkv_attn_plan *P = &J->p;
  size_t es = J->f64 ? 8 : 4;
  int64_t nq = P->nq, nk = P->nk, dk = P->dk, dv = P->dv;
  /* tiles as big as this job's: BQ x BK (128 KB) went to mmap, and each
     chunk's pages were faulted in again (two threads on 32 x 32 items
     were 1.2x one) */
  int64_t tq = nq < J->tq ? nq : J->tq, tk = nk < J->tk ? nk : J->tk;
  if (J->mods && J->mods->kinds) tk = nk < BK ? nk : BK;     /* blocks in a row, one_item */
  size_t tile = (size_t)tq * (size_t)tk * es;
  char *s = malloc(tile), *dp = malloc(tile);
  double *lse = malloc(sizeof(double) * BQ), *D = malloc(sizeof(double) * BQ);
  int err = s && dp && lse && D ? QKV_OK : QKV_ENOMEM;
  /* the mods' values on a whole tile, and this thread's own sums of the
     captured tensors' gradients, added to the job's once at the end */
  double *mem = NULL, *acc[QKV_MOD_MAXCAP] = {NULL};
  qkv_attn_mods *M = J->mods;
  if (M && err == QKV_OK) {
    size_t a = qkv_mod_scratch(M->prog, (int)tq, (int)tk);
    size_t r = qkv_mod_row_scratch(M->prog, (int)tq, (int)tk);
    mem = malloc(sizeof(double) * (a > r ? a : r));
    if (mem == NULL) err = QKV_ENOMEM;
    for (int c = 0; c < M->ncap && err == QKV_OK; c++)
      if (M->cap[c].grad && (acc[c] = calloc((size_t)qkv_numel(M->gradt[c]), sizeof(double))) == NULL)
        err = QKV_ENOMEM;
  }
  int64_t G = P->kvg;
  for (int64_t b = lo * G; b < hi * G && err == QKV_OK; b++) {
    if (qkv_interrupted) { err = QKV_EINTR; break; }
    memset(P->gq + b * nq * dk * (int64_t)es, 0, (size_t)(nq * dk) * es);
    if (b % G == 0) {
      memset(P->gk + b / G * nk * dk * (int64_t)es, 0, (size_t)(nk * dk) * es);
      memset(P->gv + b / G * nk * dv * (int64_t)es, 0, (size_t)(nk * dv) * es);
    }
    err = one_item(J, b, s, dp, lse, D, mem, acc);
  }
  if (M && err == QKV_OK) {
    pthread_mutex_lock((pthread_mutex_t *)&J->lock);
    for (int c = 0; c < M->ncap; c++)
      for (int64_t e = 0; acc[c] && e < qkv_numel(M->gradt[c]); e++) M->cap[c].grad[e] += acc[c][e];
    pthread_mutex_unlock((pthread_mutex_t *)&J->lock);
  }
  for (int c = 0; c < QKV_MOD_MAXCAP; c++) free(acc[c]);
  free(mem); free(s); free(dp); free(lse); free(D);
  return err;
}

/* float32 with subnormals flushed (vexp.h's qkv_ftz_on) */
static int items (void *p, int64_t lo, int64_t hi, int tid) {
  const Bwd *J = p;
  (void)tid;
  unsigned csr = qkv_ftz_on(!J->f64);
  int err = J->regs ? items_regs(J, lo, hi) : items_blas(J, lo, hi);
  qkv_ftz_off(csr);
  return err;
}

/* whether attention_bwd_avx512.c takes the mods M (NULL: none): a mask
   only as a block mask's spans (its tiles skipped or computed over their
   bands), a score_mod only with a constant derivative by the score (a
   bias added: ALiBi, a relative bias) and no captured tensor's gradient;
   the rest on the BLAS tiles */
static int regs_take (const qkv_attn_mods *M) {
  if (M == NULL) return 1;
  const qkv_mod_prog *P = M->prog;
  double k;
  if (P->out[QKV_MOD_OUT_MASK] >= 0 && !(M->kinds && M->spans)) return 0;
  if (P->out[QKV_MOD_OUT_SCORE] < 0) return 1;
  if (!qkv_mod_dscore_const(P, &k)) return 0;
  for (int c = 0; c < M->ncap; c++)
    if (M->gradt[c]) return 0;
  return 1;
}

static int backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                     const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                     const qkv_tensor *o, const qkv_tensor *go,
                     const qkv_tensor *mask, int causal, double scale,
                     const qkv_tensor *lse, qkv_attn_mods *M) {
  int half = qkv_is_half(q->dtype);
  if (q->dtype != QKV_F32 && q->dtype != QKV_F64 && !half) return QKV_EDTYPE;
  Bwd J;
  memset(&J, 0, sizeof J);
  qkv_attn_plan *P = &J.p;
  int err = qkv_attn_plan_backward(P, dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse,
                                   qkv_data);
  if (err != QKV_OK) return err;
  J.f64 = P->dtype == QKV_F64;
  J.ldq = ld_of(q);
  J.ldk = ld_of(k);
  J.ldv = ld_of(v);
  J.ldo = ld_of(o);
  J.ldgo = ld_of(go);
  J.isa = qkv_cpu_isa();
  J.tq = BQ;
  J.tk = BK;
  if (M) {                          /* the mods read the forward's lse */
    if (P->lse == NULL || !qkv_cpu_mods_ready(M, P)) return QKV_EINTERNAL;
    if (M->kinds) J.tq = M->bq, J.tk = M->bk;
    J.mods = M;
  }
#ifdef QKV_VEXP_X86
  static int blas_asked = -1;                   /* QKV_BWD_BLAS, read once */
  if (blas_asked < 0) blas_asked = getenv("QKV_BWD_BLAS") != NULL;
  J.regs = J.isa >= QKV_ISA_AVX512 && !J.f64 && !P->has_mask && P->lse && !blas_asked &&
           regs_take(M);
#endif
  /* the halves on attention_bwd_avx512.c's float32 items, widened as each
     is taken; elsewhere QKV_EDTYPE makes the dispatch compute them in
     float32 copies */
  J.halves = half && J.regs;
  if (half && !J.halves) return QKV_EDTYPE;
  /* written whole, also when there is nothing to add (n_k = 0: dq is 0);
     otherwise each item zeroes its own, on its thread */
  size_t es = qkv_elsize(P->dtype);
  if (P->nbatch == 0 || P->nq == 0 || P->nk == 0) {
    memset(P->gq, 0, (size_t)(P->nbatch * P->nq * P->dk) * es);
    memset(P->gk, 0, (size_t)(P->nbatch / P->kvg * P->nk * P->dk) * es);
    memset(P->gv, 0, (size_t)(P->nbatch / P->kvg * P->nk * P->dv) * es);
    return QKV_OK;
  }
  if (qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  pthread_mutex_init(&J.lock, NULL);
  err = qkv_par_for(P->nbatch / P->kvg, 1, items, &J);    /* a group of items each */
  pthread_mutex_destroy(&J.lock);
  return err;
}

int qkv_cpu_attention_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                const qkv_tensor *o, const qkv_tensor *go,
                                const qkv_tensor *mask, int causal, double scale,
                                const qkv_tensor *lse) {
  return backward(dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse, NULL);
}

int qkv_cpu_attention_mods_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                     const qkv_tensor *q, const qkv_tensor *k,
                                     const qkv_tensor *v, const qkv_tensor *o,
                                     const qkv_tensor *go, const qkv_tensor *mask, int causal,
                                     double scale, const qkv_tensor *lse, qkv_attn_mods *M) {
  return backward(dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse, M);
}
