/*
** matmul.c -- batched matrix products on the CPU through CBLAS gemm.
** Strided operands are handed to BLAS as they lie whenever their strides
** describe a row-major or a transposed matrix (as Torch7's addmm chose);
** only a matrix that fits neither layout is copied to a dense buffer.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "blas.h"
#include "layout.h"

/* below this many multiply-adds a gemm call is too small to thread */
#define SMALL_GEMM ((double)64 * 64 * 64)
/*
** At most this many multiply-adds a product runs as plain loops, so that a
** script of small products never loads OpenBLAS (blas.h).  Where b's rows
** are contiguous OpenBLAS's small-matrix kernel is 5-20% faster from 512
** up; for other layouts (b transposed: Q K^T) it packs first, and the
** loops are faster up to about 1024 (bench/NOTES.md).
*/
#define TINY_GEMM 512
#define TINY_GEMM_T 1024

/* How one operand is handed to gemm. */
typedef struct {
  int64_t rows, cols;
  int64_t rs, cs;            /* element strides of a row and a column step */
  int64_t bstride[QKV_MAXDIM];
  const char *base;          /* element 0 of the view */
  enum CBLAS_TRANSPOSE trans;
  int ld;
  int copy;                  /* no layout fits: gemm reads a dense copy */
  int shared;                /* every batch reads the same matrix */
} operand;

/* Picks the layout as Torch7 did (layout.h). */
static void choose_layout (operand *op) {
  int l = qkv_gemm_layout(op->rows, op->cols, op->rs, op->cs, &op->ld);
  op->copy = l == QKV_COPY;
  op->trans = l == QKV_BYCOL ? CblasTrans : CblasNoTrans;
}

static void setup (operand *op, const qkv_tensor *t) {
  int nd = t->ndim;
  op->rows = t->size[nd - 2];
  op->cols = t->size[nd - 1];
  op->rs = t->stride[nd - 2];
  op->cs = t->stride[nd - 1];
  op->base = (const char *)qkv_data(t);
  op->shared = 1;
  for (int i = 0; i < nd - 2; i++) {
    op->bstride[i] = t->size[i] == 1 ? 0 : t->stride[i];
    if (op->bstride[i] != 0) op->shared = 0;
  }
  choose_layout(op);
}

/* Element offset of batch number `bi` (batch dims in out's order). */
static int64_t batch_offset (const operand *op, const qkv_tensor *out,
                              int64_t bi) {
  int64_t off = 0;
  for (int i = out->ndim - 3; i >= 0 && bi > 0; i--) {
    int64_t s = out->size[i];
    off += (bi % s) * op->bstride[i];
    bi /= s;
  }
  return off;
}

static void densify (void *dst, const operand *op, const char *src, size_t es) {
  qkv_densify(dst, src, es == sizeof(double), op->rows, op->cols, op->rs, op->cs);
}

typedef struct {
  qkv_dtype dtype;
  size_t es;
  double alpha;              /* finite and nonzero, or 1 and applied after */
  int m, n, p;
  operand a, b;
  char *c;                   /* out's data */
  const qkv_tensor *out;
} job;

static void gemm (const job *J, const void *a, int lda, const void *b, int ldb,
                  void *c) {
  if (J->dtype == QKV_F32)
    qkv_sgemm(CblasRowMajor, J->a.trans, J->b.trans, J->m, J->p, J->n,
                (float)J->alpha, (const float *)a, lda, (const float *)b, ldb,
                0.0f, (float *)c, J->p > 1 ? J->p : 1);
  else
    qkv_dgemm(CblasRowMajor, J->a.trans, J->b.trans, J->m, J->p, J->n,
                J->alpha, (const double *)a, lda, (const double *)b, ldb,
                0.0, (double *)c, J->p > 1 ? J->p : 1);
}

/*
** One batch.  abuf/bbuf are this thread's scratch for operands that need
** densifying; a shared operand was densified once, up front, into them.
*/
static void one_batch (const job *J, int64_t bi, void *abuf, void *bbuf) {
  const char *a = J->a.base + batch_offset(&J->a, J->out, bi) * (int64_t)J->es;
  const char *b = J->b.base + batch_offset(&J->b, J->out, bi) * (int64_t)J->es;
  if (J->a.copy) {
    if (!J->a.shared) densify(abuf, &J->a, a, J->es);
    a = abuf;
  }
  if (J->b.copy) {
    if (!J->b.shared) densify(bbuf, &J->b, b, J->es);
    b = bbuf;
  }
  char *c = J->c + bi * (int64_t)J->m * J->p * (int64_t)J->es;
  gemm(J, a, J->a.ld, b, J->b.ld, c);
}

/*
** A tiny product as plain loops over the operands' own strides.  When b's
** rows are contiguous, out's row is built 16, then 4 columns at a time in
** vector accumulators that stay in registers (adding into out in memory
** stalls on every store); other elements are dot products.  The scale
** multiplies each finished sum, as a product followed by a multiply would.
*/
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));

/* W columns of row ai @ b starting at bj, into ci[0 .. W) */
#define BLOCK(name, T, V, W) \
static void name (const job *J, const T *ai, const T *bj, T *ci) { \
  enum { NV = W * sizeof(T) / sizeof(V) }; \
  V acc[NV] = {{0}}; \
  for (int k = 0; k < J->n; k++) { \
    V a = ai[k * J->a.cs] - (V){0}; \
    const T *bk = bj + k * J->b.rs; \
    _Pragma("GCC unroll 8") \
    for (int v = 0; v < NV; v++) { \
      V x; \
      memcpy(&x, bk + v * (int)(sizeof(V) / sizeof(T)), sizeof x); \
      acc[v] += a * x; \
    } \
  } \
  memcpy(ci, acc, sizeof acc); \
}

#define TINY(name, T, V) \
BLOCK(name##_b16, T, V, 16) \
BLOCK(name##_b4, T, V, 4) \
static T name##_dot (const T *x, const T *y, int n) { \
  enum { L = sizeof(V) / sizeof(T) }; \
  V acc = {0}; \
  int k = 0; \
  for (; k + L <= n; k += L) { \
    V a, b; \
    memcpy(&a, x + k, sizeof a); \
    memcpy(&b, y + k, sizeof b); \
    acc += a * b; \
  } \
  T sum = 0; \
  for (int l = 0; l < L; l++) sum += acc[l]; \
  for (; k < n; k++) sum += x[k] * y[k]; \
  return sum; \
} \
static void name##_row (const job *J, const T *ai, const T *b, T *ci) { \
  int j = 0; \
  if (J->b.cs == 1) { \
    for (; j + 16 <= J->p; j += 16) name##_b16(J, ai, b + j, ci + j); \
    for (; j + 4 <= J->p; j += 4) name##_b4(J, ai, b + j, ci + j); \
  } \
  for (; j < J->p; j++) { \
    const T *bj = b + j * J->b.cs; \
    if (J->a.cs == 1 && J->b.rs == 1) { ci[j] = name##_dot(ai, bj, J->n); continue; } \
    T sum = 0; \
    for (int k = 0; k < J->n; k++) sum += ai[k * J->a.cs] * bj[k * J->b.rs]; \
    ci[j] = sum; \
  } \
} \
static void name (const job *J, const T *a, const T *b, T *c, T alpha) { \
  for (int i = 0; i < J->m; i++) { \
    T *ci = c + (int64_t)i * J->p; \
    name##_row(J, a + i * J->a.rs, b, ci); \
    if (alpha != 1) \
      for (int j = 0; j < J->p; j++) ci[j] *= alpha; \
  } \
}

TINY(tiny_f32, float, f32x4)
TINY(tiny_f64, double, f64x2)

static void tiny_batches (const job *J, int64_t nbatch, double alpha) {
  size_t es = J->es;
  for (int64_t bi = 0; bi < nbatch; bi++) {
    const char *a = J->a.base + batch_offset(&J->a, J->out, bi) * (int64_t)es;
    const char *b = J->b.base + batch_offset(&J->b, J->out, bi) * (int64_t)es;
    char *c = J->c + bi * (int64_t)J->m * J->p * (int64_t)es;
    if (J->dtype == QKV_F32)
      tiny_f32(J, (const float *)a, (const float *)b, (float *)c, (float)alpha);
    else
      tiny_f64(J, (const double *)a, (const double *)b, (double *)c, alpha);
  }
}

/* out *= alpha, for the scales gemm would not apply as a product would */
static void scale_out (const job *J, int64_t count, double alpha) {
  if (J->dtype == QKV_F32)
    for (int64_t i = 0; i < count; i++) ((float *)J->c)[i] *= (float)alpha;
  else
    for (int64_t i = 0; i < count; i++) ((double *)J->c)[i] *= alpha;
}

/*
** Scratch for the operands that need densifying (NULL elsewhere): those
** read by every batch (SHARED), the others (PRIVATE), or both; 0 on failure.
*/
enum { PRIVATE = 1, SHARED = 2 };

static int wants (const operand *op, int which) {
  return op->copy && (which & (op->shared ? SHARED : PRIVATE));
}

static int scratch (const job *J, void **abuf, void **bbuf, int which) {
  *abuf = *bbuf = NULL;
  if (wants(&J->a, which)) {
    *abuf = malloc((size_t)J->m * (size_t)J->n * J->es);
    if (*abuf == NULL) return 0;
  }
  if (wants(&J->b, which)) {
    *bbuf = malloc((size_t)J->n * (size_t)J->p * J->es);
    if (*bbuf == NULL) { free(*abuf); *abuf = NULL; return 0; }
  }
  return 1;
}

/*
** Small products in a batch run one per thread (the OpenMP build of
** OpenBLAS keeps a call made inside a parallel region on its thread);
** large ones go one after another, each threaded by BLAS itself.
*/
static int run_batches (const job *J, int64_t nbatch) {
  void *sa, *sb;
  int err = QKV_OK;
  double work = (double)J->m * J->n * J->p;
  /* (too little work in all: no parallel region, which costs more) */
  int par = nbatch > 1 && work < SMALL_GEMM &&
            work * (double)nbatch >= QKV_CPU_PAR_MIN;
  if (!scratch(J, &sa, &sb, par ? SHARED : SHARED | PRIVATE)) return QKV_ENOMEM;
  if (wants(&J->a, SHARED)) densify(sa, &J->a, J->a.base, J->es);
  if (wants(&J->b, SHARED)) densify(sb, &J->b, J->b.base, J->es);
  if (par) {
    #pragma omp parallel reduction(|:err)
    {
      void *pa, *pb;
      int ok = scratch(J, &pa, &pb, PRIVATE);
      void *ua = J->a.shared ? sa : pa, *ub = J->b.shared ? sb : pb;
      if (!ok) err = QKV_ENOMEM;
      /* every thread must reach the same loop, even one without scratch */
      #pragma omp for schedule(static)
      for (int64_t bi = 0; bi < nbatch; bi++)
        if (ok && !qkv_interrupted) one_batch(J, bi, ua, ub);
      free(pa);
      free(pb);
    }
  } else {
    for (int64_t bi = 0; bi < nbatch && !qkv_interrupted; bi++)
      one_batch(J, bi, sa, sb);
  }
  free(sa);
  free(sb);
  return err ? err : qkv_interrupted ? QKV_EINTR : QKV_OK;
}

static int shapes_agree (const qkv_tensor *out, const qkv_tensor *a,
                         const qkv_tensor *b) {
  int nd = out->ndim;
  if (nd < 2 || a->ndim != nd || b->ndim != nd) return 0;
  for (int i = 0; i < nd - 2; i++)
    if (a->size[i] != out->size[i] || b->size[i] != out->size[i]) return 0;
  return a->size[nd - 2] == out->size[nd - 2] &&
         b->size[nd - 2] == a->size[nd - 1] &&
         b->size[nd - 1] == out->size[nd - 1];
}

int qkv_cpu_matmul (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                    double alpha) {
  int nd = out->ndim;
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (a->dtype != out->dtype || b->dtype != out->dtype) return QKV_EDTYPE;
  if (!shapes_agree(out, a, b)) return QKV_EINTERNAL;
  job J;
  J.dtype = out->dtype;
  J.es = qkv_elsize(out->dtype);
  J.out = out;
  int64_t m = out->size[nd - 2], p = out->size[nd - 1], n = a->size[nd - 1];
  int64_t nbatch = 1;
  for (int i = 0; i < nd - 2; i++) nbatch *= out->size[i];
  if (nbatch == 0 || m == 0 || p == 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  J.c = (char *)qkv_data(out);
  if (n == 0) {                        /* an empty sum: all zeros */
    memset(J.c, 0, (size_t)(nbatch * m * p) * J.es);
    if (alpha != 1) scale_out(&J, nbatch * m * p, alpha);   /* 0 * inf */
    return QKV_OK;
  }
  /* CBLAS counts in int */
  if (!qkv_fits_int(m) || !qkv_fits_int(n) || !qkv_fits_int(p)) return QKV_EINTERNAL;
  J.m = (int)m; J.n = (int)n; J.p = (int)p;
  setup(&J.a, a);
  setup(&J.b, b);
  if ((double)m * (double)n * (double)p <= (J.b.cs == 1 ? TINY_GEMM : TINY_GEMM_T)) {
    tiny_batches(&J, nbatch, alpha);
    return QKV_OK;
  }
  if (qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  /* gemm skips the product when alpha is 0 (so 0 * inf would be 0) */
  int exact = alpha != 0 && isfinite(alpha);
  J.alpha = exact ? alpha : 1;
  int err = run_batches(&J, nbatch);
  if (err == QKV_OK && !exact) scale_out(&J, nbatch * m * p, alpha);
  return err;
}
