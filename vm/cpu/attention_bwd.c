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
** the forward's log-sum-exps goes to attention_bwd_avx512.c on CPUs with
** AVX-512, the same steps with its products in registers.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "parallel.h"
#include "blas.h"
#include "vexp.h"
#include "attention_bwd.h"
#include "../common/layout.h"

/* tiles of BQ queries x BK keys: 64 x 128 148 GFLOP/s at N = 4096, 128 x 128
   162, 128 x 256 172, 256 x 256 168 (bigger gemm calls, bench/NOTES.md) */
#define BQ 128
#define BK 256

/* q, k, v, o or go: rows of contiguous elements, batch dims any strides */
typedef struct {
  const char *base;
  int64_t rs;                       /* elements between rows */
  int64_t bs[QKV_MAXDIM];           /* and between batch items, per dim */
} rows;

typedef struct {
  int f64;
  int64_t nq, nk, d, dv, nb;
  int nbd;                          /* batch dims, of sizes bsize */
  int64_t bsize[QKV_MAXDIM];
  rows q, k, v, o, go;
  char *dq, *dk, *dvv;              /* contiguous, (nb, rows, cols) */
  const unsigned char *mask;        /* (nb..., nq, nk) view, or NULL */
  const qkv_tensor *mt;
  int64_t mask_bs[QKV_MAXDIM];      /* its batch strides */
  int causal;
  double scale;
  int wide;                         /* AVX-512 row loops (qkv_cpu_isa) */
  const char *lse;                  /* the forward's, (nb, nq), or NULL */
  int regs;                         /* items by attention_bwd_avx512.c */
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

/* t's rows, which the dispatch passes only when gemm can read them
   (layout.h's QKV_BYROW: its leading dimension is the row step) */
static rows rows_of (const qkv_tensor *t) {
  int n = t->ndim, ld;
  qkv_gemm_layout(t->size[n - 2], t->size[n - 1], t->stride[n - 2], t->stride[n - 1], &ld);
  rows r = {(const char *)qkv_data(t), ld, {0}};
  for (int i = 0; i < n - 2; i++) r.bs[i] = t->size[i] > 1 ? t->stride[i] : 0;
  return r;
}

/* the element offset of batch item b (row-major over the batch dims) in a
   view whose batch strides are bs */
static int64_t item (const Bwd *J, const int64_t *bs, int64_t b) {
  int64_t off = 0;
  for (int d = J->nbd - 1; d >= 0 && b > 0; d--) {
    off += (b % J->bsize[d]) * bs[d];
    b /= J->bsize[d];
  }
  return off;
}

/* row i of batch item b */
static const char *row (const Bwd *J, const rows *r, int64_t b, int64_t i) {
  return r->base + (item(J, r->bs, b) + i * r->rs) * (J->f64 ? 8 : 4);
}

/* whether query i may see key j */
static int keeps (const Bwd *J, int64_t mb, int64_t i, int64_t j) {
  if (J->causal && j > i + J->nk - J->nq) return 0;
  if (!J->mask) return 1;
  const qkv_tensor *m = J->mt;
  return J->mask[mb + i * m->stride[m->ndim - 2] + j * m->stride[m->ndim - 1]] != 0;
}

static double at (const Bwd *J, const char *p, int64_t i) {
  return J->f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}
static void put (const Bwd *J, char *p, int64_t i, double x) {
  if (J->f64) ((double *)p)[i] = x; else ((float *)p)[i] = (float)x;
}

/* s (bq x bk) = scale q_tile k_tile^T, masked entries -inf */
static void scores (const Bwd *J, int64_t b, int64_t mb, int64_t i0, int64_t bq, int64_t j0,
                    int64_t bk, char *s) {
  const char *q = row(J, &J->q, b, i0), *k = row(J, &J->k, b, j0);
  gemm(J, 0, 1, bq, bk, J->d, J->scale, q, J->q.rs, k, J->k.rs, 0, s, bk);
  if (!J->mask && (!J->causal || j0 + bk - 1 <= i0 + J->nk - J->nq)) return;  /* all kept */
  if (!J->mask && !J->f64) {                    /* causal alone: each row's tail */
    for (int64_t i = 0; i < bq; i++) {
      int64_t from = i0 + i + J->nk - J->nq + 1 - j0;    /* first key hidden */
      float *si = (float *)s + i * bk;
      for (int64_t j = from < 0 ? 0 : from; j < bk; j++) si[j] = -INFINITY;
    }
    return;
  }
  for (int64_t i = 0; i < bq; i++)
    for (int64_t j = 0; j < bk; j++)
      if (!keeps(J, mb, i0 + i, j0 + j)) put(J, s, i * bk + j, -INFINITY);
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
   values, its exp giving the same bits wherever the result is normal. */
static void grads_base (float *s, float *dp, int64_t bq, int64_t bk, const double *lse,
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

#ifdef QKV_VEXP_X86
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

static void row_stats_f32 (int wide, const float *x, int64_t n, double *m, double *l) {
#ifdef QKV_VEXP_X86
  if (wide) { row_stats_wide(x, n, m, l); return; }
#endif
  (void)wide;
  row_stats_base(x, n, m, l);
}

static void grads_f32 (int wide, float *s, float *dp, int64_t bq, int64_t bk, const double *lse,
                       const double *D) {
#ifdef QKV_VEXP_X86
  if (wide) { grads_wide(s, dp, bq, bk, lse, D); return; }
#endif
  (void)wide;
  grads_base(s, dp, bq, bk, lse, D);
}

/* D[i] = dO_i . O_i, in double, for the bq rows from i0 */
static void row_dots (const Bwd *J, int64_t b, int64_t i0, int64_t bq, double *D) {
  for (int64_t i = 0; i < bq; i++) {
    double dd = 0;
    const void *gi = row(J, &J->go, b, i0 + i), *oi = row(J, &J->o, b, i0 + i);
    if (J->f64) {
      const double *go = gi, *o = oi;
      for (int64_t c = 0; c < J->dv; c++) dd += go[c] * o[c];
    } else {
      const float *go = gi, *o = oi;
      _Pragma("omp simd reduction(+:dd)")
      for (int64_t c = 0; c < J->dv; c++) dd += (double)go[c] * o[c];
    }
    D[i] = dd;
  }
}

/*
** Query tile by query tile: 1. each row's log-sum-exp over every key tile
** and D; 2. the gradients, key tile by key tile.  With one key tile (n_k
** <= BK) step 2 finds that tile's scores still in s from step 1.
*/
static void one_item (const Bwd *J, int64_t b, char *s, char *dp, double *lse, double *D) {
  size_t es = J->f64 ? 8 : 4;
  int64_t mb = J->mask ? item(J, J->mask_bs, b) : 0;
  for (int64_t i0 = 0; i0 < J->nq; i0 += BQ) {
    int64_t bq = J->nq - i0 < BQ ? J->nq - i0 : BQ;
    double m[BQ], l[BQ];
    for (int64_t i = 0; i < bq; i++) m[i] = -INFINITY, l[i] = 0;
    for (int64_t j0 = 0; J->lse == NULL && j0 < J->nk; j0 += BK) {   /* 1: lse, D */
      int64_t bk = J->nk - j0 < BK ? J->nk - j0 : BK;
      scores(J, b, mb, i0, bq, j0, bk, s);
      for (int64_t i = 0; i < bq; i++) {
        if (!J->f64) { row_stats_f32(J->wide, (const float *)s + i * bk, bk, &m[i], &l[i]); continue; }
        for (int64_t j = 0; j < bk; j++) {
          double x = at(J, s, i * bk + j);
          if (x == -INFINITY) continue;
          if (x > m[i]) { l[i] = l[i] * exp(m[i] - x) + 1; m[i] = x; }
          else l[i] += exp(x - m[i]);
        }
      }
    }
    for (int64_t i = 0; i < bq; i++) {
      int64_t r = b * J->nq + i0 + i;
      if (J->lse) lse[i] = J->f64 ? ((const double *)J->lse)[r] : ((const float *)J->lse)[r];
      else lse[i] = l[i] > 0 ? m[i] + log(l[i]) : -INFINITY;
    }
    row_dots(J, b, i0, bq, D);
    const char *q = row(J, &J->q, b, i0), *go = row(J, &J->go, b, i0);
    char *dq = J->dq + (b * J->nq + i0) * J->d * (int64_t)es;
    for (int64_t j0 = 0; j0 < J->nk; j0 += BK) {         /* 2: the gradients */
      int64_t bk = J->nk - j0 < BK ? J->nk - j0 : BK;
      const char *k = row(J, &J->k, b, j0), *v = row(J, &J->v, b, j0);
      char *dk = J->dk + (b * J->nk + j0) * J->d * (int64_t)es;
      char *dvv = J->dvv + (b * J->nk + j0) * J->dv * (int64_t)es;
      if (J->nk > BK || J->lse) scores(J, b, mb, i0, bq, j0, bk, s);
      gemm(J, 0, 1, bq, bk, J->dv, 1, go, J->go.rs, v, J->v.rs, 0, dp, bk);  /* dP = dO V^T */
      if (!J->f64) grads_f32(J->wide, (float *)s, (float *)dp, bq, bk, lse, D);
      else
        for (int64_t i = 0; i < bq; i++)          /* s becomes P, dp dS = P (dP - D) */
          for (int64_t j = 0; j < bk; j++) {
            double x = at(J, s, i * bk + j), L = lse[i];
            double p = x == -INFINITY || L == -INFINITY ? 0 : exp(x - L);
            put(J, s, i * bk + j, p);
            put(J, dp, i * bk + j, p * (at(J, dp, i * bk + j) - D[i]));
          }
      gemm(J, 1, 0, bk, J->dv, bq, 1, s, bk, go, J->go.rs, 1, dvv, J->dv);  /* dV += P^T dO */
      gemm(J, 0, 0, bq, J->d, bk, J->scale, dp, bk, k, J->k.rs, 1, dq, J->d); /* dQ += s dS K */
      gemm(J, 1, 0, bk, J->d, bq, J->scale, dp, bk, q, J->q.rs, 1, dk, J->d); /* dK += s dS^T Q */
    }
  }
}

/* items [lo, hi) by attention_bwd_avx512.c */
static int items_regs (const Bwd *J, int64_t lo, int64_t hi) {
  void *work = malloc(qkv_attn_bwd_avx512_work(J->d, J->dv));
  if (work == NULL) return QKV_ENOMEM;
  int err = QKV_OK;
  for (int64_t b = lo; b < hi; b++) {
    if (qkv_interrupted) { err = QKV_EINTR; break; }
    int64_t qo = b * J->nq, ko = b * J->nk;
    qkv_attn_bwd_item it = {J->nq, J->nk, J->d, J->dv,
                            (const float *)row(J, &J->q, b, 0), (const float *)row(J, &J->k, b, 0),
                            (const float *)row(J, &J->v, b, 0), (const float *)row(J, &J->o, b, 0),
                            (const float *)row(J, &J->go, b, 0),
                            J->q.rs, J->k.rs, J->v.rs, J->o.rs, J->go.rs,
                            (const float *)J->lse + qo, (float *)J->dq + qo * J->d,
                            (float *)J->dk + ko * J->d, (float *)J->dvv + ko * J->dv, J->causal,
                            (float)J->scale};
    qkv_attn_bwd_avx512(&it, work);
  }
  free(work);
  return err;
}

/* items [lo, hi), with scratch of their own */
static int items_blas (const Bwd *J, int64_t lo, int64_t hi) {
  size_t es = J->f64 ? 8 : 4;
  /* tiles as big as this job's: BQ x BK (128 KB) went to mmap, and each
     chunk's pages were faulted in again (two threads on 32 x 32 items
     were 1.2x one) */
  size_t tile = (size_t)(J->nq < BQ ? J->nq : BQ) * (size_t)(J->nk < BK ? J->nk : BK) * es;
  char *s = malloc(tile), *dp = malloc(tile);
  double *lse = malloc(sizeof(double) * BQ), *D = malloc(sizeof(double) * BQ);
  int err = s && dp && lse && D ? QKV_OK : QKV_ENOMEM;
  for (int64_t b = lo; b < hi && err == QKV_OK; b++) {
    if (qkv_interrupted) { err = QKV_EINTR; break; }
    memset(J->dq + b * J->nq * J->d * (int64_t)es, 0, (size_t)(J->nq * J->d) * es);
    memset(J->dk + b * J->nk * J->d * (int64_t)es, 0, (size_t)(J->nk * J->d) * es);
    memset(J->dvv + b * J->nk * J->dv * (int64_t)es, 0, (size_t)(J->nk * J->dv) * es);
    one_item(J, b, s, dp, lse, D);
  }
  free(s); free(dp); free(lse); free(D);
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

int qkv_cpu_attention_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                const qkv_tensor *o, const qkv_tensor *go,
                                const qkv_tensor *mask, int causal, double scale,
                                const qkv_tensor *lse) {
  if (q->dtype != QKV_F32 && q->dtype != QKV_F64) return QKV_EDTYPE;   /* halves: in float32 */
  int n = q->ndim;
  Bwd J = {q->dtype == QKV_F64, q->size[n - 2], k->size[n - 2], q->size[n - 1],
           v->size[n - 1], 1, n - 2, {0}, rows_of(q), rows_of(k), rows_of(v), rows_of(o),
           rows_of(go), qkv_data(dq), qkv_data(dk), qkv_data(dv),
           mask ? qkv_data(mask) : NULL, mask, {0}, causal, scale, qkv_cpu_isa() >= QKV_ISA_AVX512,
           NULL, 0};
  for (int i = 0; i < n - 2; i++) {
    J.nb *= J.bsize[i] = q->size[i];
    J.mask_bs[i] = mask ? mask->stride[i] : 0;
  }
  /* the forward's log-sum-exps, but where it had nothing to write them
     with (d_v = 0: it returned at once) */
  if (lse && v->size[n - 1] > 0) J.lse = qkv_data(lse);
#ifdef QKV_VEXP_X86
  static int blas_asked = -1;                   /* QKV_BWD_BLAS, read once */
  if (blas_asked < 0) blas_asked = getenv("QKV_BWD_BLAS") != NULL;
  J.regs = J.wide && !J.f64 && !J.mask && J.lse && !blas_asked;
#endif
  /* written whole, also when there is nothing to add (n_k = 0: dq is 0);
     otherwise each item zeroes its own, on its thread */
  size_t es = J.f64 ? 8 : 4;
  if (J.nb == 0 || J.nq == 0 || J.nk == 0) {
    memset(J.dq, 0, (size_t)(J.nb * J.nq * J.d) * es);
    memset(J.dk, 0, (size_t)(J.nb * J.nk * J.d) * es);
    memset(J.dvv, 0, (size_t)(J.nb * J.nk * J.dv) * es);
    return QKV_OK;
  }
  if (qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  return qkv_par_for(J.nb, 1, items, &J);
}
