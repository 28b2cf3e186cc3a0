/*
** matmul.cu -- batched matrix products on the GPU through cuBLAS, as
** vm/cpu/matmul.c does them through CBLAS.
**
** out (B..., m, p), contiguous, = alpha * a (B..., m, n) @ b (B..., n, p):
** a and b have out's batch dims (ops.c expanded them, so a batch stride may
** be 0) and any element strides.  cuBLAS is column-major, so the row-major
** product is asked for as its transpose, out^T (p x m, ld p) = b^T a^T: b
** goes first, and a matrix whose strides read as row-major
** (vm/common/layout.h's BYROW) is already the transpose cuBLAS wants
** (CUBLAS_OP_N), one stored by columns (BYCOL) is read with CUBLAS_OP_T.
**
** A batch of products is one cublas?gemmStridedBatched call when each
** operand's batch dims collapse to one stride (row-major over out's batch
** dims; a broadcast operand has stride 0).  An operand that collapses to no
** stride, or whose matrix fits neither layout (a 0 stride, say), is copied
** densely into scratch first: all of it, or one matrix when every batch
** reads the same one.
**
** alpha is "the product, then a multiply by alpha", 0, inf and NaN
** included: cuBLAS skips the product when alpha is 0 (0 * inf would be 0),
** so an alpha that is 0 or not finite is applied by a kernel afterwards.
*/
#include <limits.h>
#include <math.h>

#include "cuda.cuh"
#include "../common/layout.h"
#include "../common/matmul_shape.h"

#define THREADS 256

/* How gemm reads one operand. */
typedef struct {
  const char *base;              /* element 0 of the view */
  int64_t rows, cols, rs, cs;    /* the matrix: sizes, element strides */
  int layout, ld;                /* layout.h's (after a copy: BYROW) */
  int64_t bs;                    /* the batch stride, when the batch collapses */
  int collapses;
  int64_t ncopy;                 /* elements of the dense copy (0: none) */
  const char *ptr;               /* what gemm reads: base or the copy */
} operand;

/* ---- kernels ---- */

/* the sizes and element strides of a strided view, outermost first */
typedef struct {
  int ndim;
  int64_t size[QKV_MAXDIM], stride[QKV_MAXDIM];
} view;

/* dst[i] (dense, row-major over v's sizes) = the view's element i */
template <typename T>
__global__ void densify_kernel (T *dst, const T *src, view v, int64_t n) {
  QKV_CU_LOOP(i, n) {
    int64_t off = 0, r = i;
    for (int d = v.ndim - 1; d >= 0; d--) {
      off += (r % v.size[d]) * v.stride[d];
      r /= v.size[d];
    }
    dst[i] = src[off];
  }
}

/* x *= alpha over n elements */
template <typename T>
__global__ void scale_kernel (T *x, int64_t n, T alpha) {
  QKV_CU_LOOP(i, n) x[i] *= alpha;
}

/* ---- operands ---- */

/*
** Whether t's nbd batch dims step as one dim (each outer stride the inner
** one times its size; size-1 dims take no part), and that stride in *bs.
** All strides 0 (a broadcast) collapse to 0.
*/
static int collapse (const qkv_tensor *t, int nbd, int64_t *bs) {
  int first = 1;
  int64_t expect = 0;
  *bs = 0;
  for (int i = nbd - 1; i >= 0; i--) {
    if (t->size[i] == 1) continue;
    if (first) {
      *bs = expect = t->stride[i];
      first = 0;
    }
    if (t->stride[i] != expect) return 0;
    expect *= t->size[i];
  }
  return *bs >= 0;
}

/* the layout of t's matrix, and whether (and how much of) it is copied */
static void setup (operand *op, const qkv_tensor *t, int64_t nbatch) {
  int nd = t->ndim;
  op->base = qkv_cu_data(t);
  op->rows = t->size[nd - 2];
  op->cols = t->size[nd - 1];
  op->rs = t->stride[nd - 2];
  op->cs = t->stride[nd - 1];
  op->layout = qkv_gemm_layout(op->rows, op->cols, op->rs, op->cs, &op->ld);
  op->collapses = collapse(t, nd - 2, &op->bs);
  op->ncopy = 0;
  op->ptr = op->base;
  if (op->layout != QKV_COPY && op->collapses) return;
  /* dense: every batch reads one matrix (stride 0), or each its own */
  int shared = op->collapses && op->bs == 0;
  op->ncopy = op->rows * op->cols * (shared ? 1 : nbatch);
  op->bs = shared ? 0 : op->rows * op->cols;
  op->layout = QKV_BYROW;
  op->ld = (int)(op->cols > 1 ? op->cols : 1);
}

/* the dense copy of t into buf: one matrix, or all of t */
template <typename T>
static int densify (T *buf, const operand *op, const qkv_tensor *t) {
  view v;
  int nd = t->ndim, first = op->bs == 0 ? nd - 2 : 0;
  v.ndim = nd - first;
  for (int i = first; i < nd; i++) {
    v.size[i - first] = t->size[i];
    v.stride[i - first] = t->stride[i];
  }
  densify_kernel<T><<<qkv_cu_blocks(op->ncopy, THREADS), THREADS>>>(
      buf, (const T *)op->base, v, op->ncopy);
  launchCheck("densify_kernel");
  return QKV_OK;
}

/* ---- the products ---- */

static cublasOperation_t op_of (const operand *op) {
  return op->layout == QKV_BYCOL ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/*
** out (nbatch x m x p) = alpha * A @ B, as out^T = B^T A^T in cuBLAS's
** column-major terms, at most INT_MAX products a call.
*/
template <typename T>
static int products (T *out, const operand *A, const operand *B, int64_t nbatch,
                     int m, int n, int p, double alpha) {
  cublasHandle_t h = qkv_cu_blas();
  if (h == NULL) return QKV_ECUDA;
  T al = (T)alpha, zero = 0;
  for (int64_t b0 = 0; b0 < nbatch; b0 += INT_MAX) {
    int count = (int)(nbatch - b0 < INT_MAX ? nbatch - b0 : INT_MAX);
    const T *a = (const T *)A->ptr + b0 * A->bs, *b = (const T *)B->ptr + b0 * B->bs;
    cublasCheck(qkv_cu_gemm_batched(h, op_of(B), op_of(A), p, m, n, &al, b, B->ld, B->bs,
                             a, A->ld, A->bs, &zero, out + b0 * m * p, p,
                             (long long)m * p, count));
  }
  return QKV_OK;
}

/* out *= alpha over n elements, for the scales cuBLAS would not apply as a
   product followed by a multiply would */
template <typename T>
static int scale_out (T *out, int64_t n, double alpha) {
  scale_kernel<T><<<qkv_cu_blocks(n, THREADS), THREADS>>>(out, n, (T)alpha);
  launchCheck("scale_kernel");
  return QKV_OK;
}

/* with scratch (NULL where no copy is made) for a's and b's dense copies */
template <typename T>
static int run (T *out, operand *A, operand *B, const qkv_tensor *a,
                const qkv_tensor *b, int64_t nbatch, int m, int n, int p,
                double alpha, T *abuf, T *bbuf) {
  int err;
  if (abuf) {
    if ((err = densify<T>(abuf, A, a)) != QKV_OK) return err;
    A->ptr = (const char *)abuf;
  }
  if (bbuf) {
    if ((err = densify<T>(bbuf, B, b)) != QKV_OK) return err;
    B->ptr = (const char *)bbuf;
  }
  /* cuBLAS skips the product when alpha is 0 (so 0 * inf would be 0),
     and folds an alpha below T's normal range in before the sum ends
     (seen on an H100: results an ulp or two off the CPU's) */
  double tiny = sizeof(T) == 4 ? 1.17549435e-38 : 2.2250738585072014e-308;
  int exact = alpha != 0 && isfinite(alpha) && fabs(alpha) >= tiny;
  if ((err = products<T>(out, A, B, nbatch, m, n, p, exact ? alpha : 1)) != QKV_OK)
    return err;
  return exact ? QKV_OK : scale_out<T>(out, nbatch * m * p, alpha);
}

/* the empty sum (n == 0): zeros, times alpha as a product would be (0 * inf) */
template <typename T>
static int zeros (T *out, int64_t count, double alpha) {
  cudaCheck(cudaMemsetAsync(out, 0, (size_t)count * sizeof(T), 0));
  return alpha != 1 ? scale_out<T>(out, count, alpha) : QKV_OK;
}

/* the scratch for the copies, the product, the scratch freed on every path */
template <typename T>
static int matmul (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                   int64_t nbatch, int64_t m, int64_t n, int64_t p, double alpha) {
  T *o = (T *)qkv_cu_data(out);
  if (n == 0) return zeros<T>(o, nbatch * m * p, alpha);
  /* cuBLAS counts in int */
  if (!qkv_fits_int(m) || !qkv_fits_int(n) || !qkv_fits_int(p)) return QKV_EINTERNAL;
  operand A, B;
  setup(&A, a, nbatch);
  setup(&B, b, nbatch);
  T *abuf = NULL, *bbuf = NULL;
  if (A.ncopy && (abuf = (T *)qkv_cu_alloc((size_t)A.ncopy * sizeof(T))) == NULL)
    return QKV_ENOMEM;
  if (B.ncopy && (bbuf = (T *)qkv_cu_alloc((size_t)B.ncopy * sizeof(T))) == NULL) {
    qkv_cu_free(abuf);
    return QKV_ENOMEM;
  }
  int err = run<T>(o, &A, &B, a, b, nbatch, (int)m, (int)n, (int)p, alpha, abuf, bbuf);
  qkv_cu_free(abuf);
  qkv_cu_free(bbuf);
  return err;
}

int qkv_cuda_matmul (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                     double alpha) {
  qkv_matmul_dims d;
  int err = qkv_matmul_check(out, a, b, &d);
  if (err != QKV_OK) return err;
  if (d.nbatch == 0 || d.m == 0 || d.p == 0) return QKV_OK;
  if (!qkv_cu_contiguous(out)) return QKV_EINTERNAL;
  if (out->dtype == QKV_F32) return matmul<float>(out, a, b, d.nbatch, d.m, d.n, d.p, alpha);
  return matmul<double>(out, a, b, d.nbatch, d.m, d.n, d.p, alpha);
}
