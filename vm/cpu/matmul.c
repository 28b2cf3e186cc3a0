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
#include "parallel.h"
#include "blas.h"
#include "matmul_amx.h"
#include "../common/layout.h"
#include "../common/matmul_shape.h"

/*
** At most this many multiply-adds a product runs as plain loops, so that a
** script of small products never loads OpenBLAS (blas.h).  Where b's rows
** are contiguous OpenBLAS's small-matrix kernel is 5-20% faster from 512
** up; for other layouts (b transposed: Q K^T) it packs first, and the
** loops are faster up to about 1024 (bench/NOTES.md).
*/
#define TINY_GEMM 512
#define TINY_GEMM_T 1024
/*
** One gemm call cannot be stopped, and a 4096² product is half a second of
** one here: a product of more than PANEL_FLOPS runs as panels of a's (and
** out's) rows, a gemm call each, with a look at the interrupt flag between
** them.  A panel is about PANEL_FLOPS (~40 ms here) and never below
** PANEL_MIN_ROWS rows, where BLAS runs as fast as on the whole
** (bench/NOTES.md).
*/
#ifndef PANEL_FLOPS
#define PANEL_FLOPS 8e9
#endif
/* bfloat16 on the tile unit runs 5-7 times faster, and each panel packs
   its B again */
#define PANEL_FLOPS_BF16 (8 * PANEL_FLOPS)
#ifndef PANEL_MIN_ROWS
#define PANEL_MIN_ROWS 512
#endif
#ifndef PANEL_MIN_COLS
#define PANEL_MIN_COLS 2048
#endif
/* elements copied or scaled between looks at the flag */
#define CHUNK 65536

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

/* a dense copy of rows [r0, r1) of the operand at src, in blocks of rows
   with a look at the flag between them (a big one copies for a while) */
static int densify_rows (void *dst, const operand *op, const char *src,
                         size_t es, int64_t r0, int64_t r1) {
  int64_t step = CHUNK / (op->cols > 0 ? op->cols : 1) + 1;
  for (int64_t r = r0; r < r1; r += step) {
    if (r > r0 && qkv_interrupted) return QKV_EINTR;
    qkv_densify((char *)dst + (r - r0) * op->cols * (int64_t)es,
                src + r * op->rs * (int64_t)es, es == sizeof(double),
                r1 - r < step ? r1 - r : step, op->cols, op->rs, op->cs);
  }
  return QKV_OK;
}

static int densify (void *dst, const operand *op, const char *src, size_t es) {
  return densify_rows(dst, op, src, es, 0, op->rows);
}

typedef struct {
  qkv_dtype dtype;           /* the operands' */
  size_t es, oes;            /* the operands' element size, out's */
  double alpha;              /* finite and nonzero, or 1 and applied after */
  int m, n, p;
  operand a, b;
  char *c;                   /* out's data */
  const qkv_tensor *out;
} job;

/* an m x p block of out (at c, rows J->p apart) from m rows of a and p
   columns of b */
static void gemm (const job *J, int m, int p, const void *a, int lda,
                  const void *b, int ldb, void *c) {
  if (m == 1 && (J->dtype == QKV_F32 ? qkv_sgemv != NULL : qkv_dgemv != NULL)) {
    /* one row: y = op(b)^T x, as a matrix-vector product (b as stored: n
       x p, or p x n when read transposed); x's step is lda when a is
       read transposed.  y zeroed first: gemv scales it by beta = 0 */
    enum CBLAS_TRANSPOSE t = J->b.trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
    int rows = t == CblasTrans ? J->n : p, cols = t == CblasTrans ? p : J->n;
    int incx = J->a.trans == CblasNoTrans ? 1 : lda;
    memset(c, 0, (size_t)p * J->es);
    if (J->dtype == QKV_F32)
      qkv_sgemv(CblasRowMajor, t, rows, cols, (float)J->alpha, (const float *)b, ldb,
                (const float *)a, incx, 0.0f, (float *)c, 1);
    else
      qkv_dgemv(CblasRowMajor, t, rows, cols, J->alpha, (const double *)b, ldb,
                (const double *)a, incx, 0.0, (double *)c, 1);
    return;
  }
  if (J->dtype == QKV_F32)
    qkv_sgemm(CblasRowMajor, J->a.trans, J->b.trans, m, p, J->n,
                (float)J->alpha, (const float *)a, lda, (const float *)b, ldb,
                0.0f, (float *)c, J->p > 1 ? J->p : 1);
  else
    qkv_dgemm(CblasRowMajor, J->a.trans, J->b.trans, m, p, J->n,
                J->alpha, (const double *)a, lda, (const double *)b, ldb,
                0.0, (double *)c, J->p > 1 ? J->p : 1);
}

/* the step that cuts len into `parts` even parts, rounded up to a
   multiple of unit */
static int part (int len, int64_t parts, int unit) {
  return (int)((len + parts - 1) / parts + unit - 1) / unit * unit;
}

/*
** The step that cuts len into even parts of about `want`, at least `least`
** (len itself when one part will do), rounded up to a multiple of 16: BLAS
** kernels take rows and columns 4 to 16 at a time.
*/
static int split (int len, double want, int least) {
  if (want < least) want = least;
  if (want >= len) return len;
  return part(len, (int64_t)ceil(len / want), 16);
}

/* rows i0.. of a as gemm reads them: a row down as stored, or a column
   over when a is read transposed */
static const char *rows_of (const job *J, const operand *op, const char *x,
                            int i0) {
  int64_t step = op->trans == CblasNoTrans ? op->ld : 1;
  return x + (int64_t)i0 * step * (int64_t)J->es;
}

/* columns j0.. of b: across a row as stored, or rows down when transposed */
static const char *cols_of (const job *J, const operand *op, const char *x,
                            int j0) {
  int64_t step = op->trans == CblasNoTrans ? 1 : op->ld;
  return x + (int64_t)j0 * step * (int64_t)J->es;
}

/*
** One batch, in panels (see PANEL_FLOPS).  abuf/bbuf are this thread's
** scratch for operands that need densifying; a shared operand was
** densified once, up front, into them.  A private a is densified a panel
** of rows at a time, into the start of abuf.  QKV_EINTR when the flag
** stopped it.
*/
static int one_batch (const job *J, int64_t bi, void *abuf, void *bbuf) {
  const char *a = J->a.base + batch_offset(&J->a, J->out, bi) * (int64_t)J->es;
  const char *b = J->b.base + batch_offset(&J->b, J->out, bi) * (int64_t)J->es;
  char *c = J->c + bi * (int64_t)J->m * J->p * (int64_t)J->es;
  if (J->b.copy) {
    if (!J->b.shared && densify(bbuf, &J->b, b, J->es) != QKV_OK) return QKV_EINTR;
    b = bbuf;
  }
  int rows = split(J->m, PANEL_FLOPS / (2.0 * J->n * J->p), PANEL_MIN_ROWS);
  int cols = split(J->p, PANEL_FLOPS / (2.0 * J->n * rows), PANEL_MIN_COLS);
  for (int i0 = 0; i0 < J->m; i0 += rows) {
    int m = J->m - i0 < rows ? J->m - i0 : rows;
    const char *ai = a;
    if (i0 > 0 && qkv_interrupted) return QKV_EINTR;
    if (J->a.copy && !J->a.shared) {
      if (densify_rows(abuf, &J->a, a, J->es, i0, i0 + m) != QKV_OK) return QKV_EINTR;
      ai = abuf;
    } else {
      ai = rows_of(J, &J->a, J->a.copy ? abuf : a, i0);
    }
    for (int j0 = 0; j0 < J->p; j0 += cols) {
      if (j0 > 0 && qkv_interrupted) return QKV_EINTR;
      gemm(J, m, J->p - j0 < cols ? J->p - j0 : cols, ai, J->a.ld,
           cols_of(J, &J->b, b, j0), J->b.ld,
           c + ((int64_t)i0 * J->p + j0) * (int64_t)J->es);
    }
  }
  return QKV_OK;
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

/* a look at the flag every 1024 products (at most 0.5 ms of them) */
static int tiny_batches (const job *J, int64_t nbatch, double alpha) {
  size_t es = J->es;
  for (int64_t bi = 0; bi < nbatch; bi++) {
    if ((bi & 1023) == 1023 && qkv_interrupted) return QKV_EINTR;
    const char *a = J->a.base + batch_offset(&J->a, J->out, bi) * (int64_t)es;
    const char *b = J->b.base + batch_offset(&J->b, J->out, bi) * (int64_t)es;
    char *c = J->c + bi * (int64_t)J->m * J->p * (int64_t)es;
    if (J->dtype == QKV_F32)
      tiny_f32(J, (const float *)a, (const float *)b, (float *)c, (float)alpha);
    else
      tiny_f64(J, (const double *)a, (const double *)b, (double *)c, alpha);
  }
  return QKV_OK;
}

/* out *= alpha, for the scales gemm would not apply as a product would */
static int scale_out (const job *J, int64_t count, double alpha) {
  for (int64_t i0 = 0; i0 < count; i0 += CHUNK) {
    int64_t i1 = count - i0 < CHUNK ? count : i0 + CHUNK;
    if (i0 > 0 && qkv_interrupted) return QKV_EINTR;
    if (J->dtype == QKV_F32)
      for (int64_t i = i0; i < i1; i++) ((float *)J->c)[i] *= (float)alpha;
    else
      for (int64_t i = i0; i < i1; i++) ((double *)J->c)[i] *= alpha;
  }
  return QKV_OK;
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

/* batches [lo, hi), one after another, with scratch of their own for the
   operands that are densified per batch (sa, sb: those shared by all) */
typedef struct { const job *J; void *sa, *sb; } batches_job;

static int batches (void *p, int64_t lo, int64_t hi, int tid) {
  const batches_job *B = p;
  const job *J = B->J;
  void *pa, *pb;
  (void)tid;
  if (!scratch(J, &pa, &pb, PRIVATE)) return QKV_ENOMEM;
  void *ua = J->a.shared ? B->sa : pa, *ub = J->b.shared ? B->sb : pb;
  int err = QKV_OK;
  for (int64_t bi = lo; bi < hi && err == QKV_OK; bi++)
    err = qkv_interrupted ? QKV_EINTR : one_batch(J, bi, ua, ub);
  free(pa);
  free(pb);
  return err;
}

/*
** A bfloat16 panel: the tile unit's product (matmul_amx.c, rounded into
** out as it goes), else oneDNN's: float32 sums of exact products (as the
** float32 path's converted operands give) into float32 scratch, then
** rounded once into out, as that path rounds.  A float32 out takes
** oneDNN's sums as they are.
*/
static int dnnl_panel (const job *J, int m, int w, const void *a, const void *b, float *c,
                       int ldc) {
  return qkv_bf16gemm(J->a.trans == CblasTrans ? 'T' : 'N', J->b.trans == CblasTrans ? 'T' : 'N',
                      m, w, J->n, (float)J->alpha, a, J->a.ld, b, J->b.ld, 0.0f, c, ldc)
         ? QKV_EINTERNAL : QKV_OK;
}

static int bf16_panel (const job *J, int m, int w, const void *a, const void *b, char *c) {
  if (J->oes == sizeof(float)) return dnnl_panel(J, m, w, a, b, (float *)c, J->p);
  if (qkv_amx_bf16gemm(J->a.trans == CblasTrans, J->b.trans == CblasTrans, m, w, J->n,
                       (float)J->alpha, a, J->a.ld, b, J->b.ld, (uint16_t *)c, J->p) == 0)
    return QKV_OK;
  if (qkv_bf16gemm == NULL) return QKV_ENOMEM;        /* the tile unit's buffers */
  float *f = malloc(sizeof(float) * (size_t)m * (size_t)w);
  if (f == NULL) return QKV_ENOMEM;
  int err = dnnl_panel(J, m, w, a, b, f, w);
  uint16_t *o = (uint16_t *)c;
  for (int i = 0; i < m && err == QKV_OK; i++)
    qkv_cpu_to_bf16(w, o + (int64_t)i * J->p, f + (int64_t)i * w);
  free(f);
  return err;
}

/*
** Panels of out, rows x cols each, over every batch: the products that
** need no per-batch copy of b.  A panel is one gemm call; the threads take
** panels (BLAS is single-threaded on each, blas.h).
*/
typedef struct { const job *J; const void *sa, *sb; int rows, cols; int64_t nr, nc; } panels_job;

static int panels (void *p, int64_t lo, int64_t hi, int tid) {
  const panels_job *P = p;
  const job *J = P->J;
  void *pa = NULL;
  (void)tid;
  if (J->a.copy && !J->a.shared &&
      (pa = malloc((size_t)P->rows * (size_t)J->n * J->es)) == NULL) return QKV_ENOMEM;
  int err = QKV_OK;
  for (int64_t t = lo; t < hi && err == QKV_OK; t++) {
    int64_t bi = t / (P->nr * P->nc), ri = t / P->nc % P->nr, ci = t % P->nc;
    int i0 = (int)ri * P->rows, j0 = (int)ci * P->cols;
    int m = J->m - i0 < P->rows ? J->m - i0 : P->rows;
    int w = J->p - j0 < P->cols ? J->p - j0 : P->cols;
    const char *a = J->a.base + batch_offset(&J->a, J->out, bi) * (int64_t)J->es;
    const char *b = J->b.copy ? P->sb
                              : J->b.base + batch_offset(&J->b, J->out, bi) * (int64_t)J->es;
    char *c = J->c + (bi * (int64_t)J->m * J->p + (int64_t)i0 * J->p + j0) * (int64_t)J->oes;
    if (qkv_interrupted) { err = QKV_EINTR; break; }
    if (pa) {
      if ((err = densify_rows(pa, &J->a, a, J->es, i0, i0 + m)) != QKV_OK) break;
      a = pa;
    } else {
      a = rows_of(J, &J->a, J->a.copy ? P->sa : a, i0);
    }
    if (J->dtype == QKV_BF16) {
      if ((err = bf16_panel(J, m, w, a, cols_of(J, &J->b, b, j0), c)) != QKV_OK) break;
      continue;
    }
    gemm(J, m, w, a, J->a.ld, cols_of(J, &J->b, b, j0), J->b.ld, c);
  }
  free(pa);
  return err;
}

/* below this many multiply-adds in all, products stay on one thread */
#define PAR_GEMM ((double)(1 << 20))
/* bfloat16 products run natively from this many multiply-adds: on the
   tile unit from 16^3 (as fast as the float32 path's conversions below,
   2-7x faster from 24^3), through oneDNN from 160^3, below which its call
   costs more (bench/NOTES.md, "bfloat16 products") */
#define BF16_AMX_MIN ((double)(1 << 12))
#define BF16_DNNL_MIN ((double)(1 << 22))

static int run_batches (const job *J, int64_t nbatch) {
  void *sa, *sb;
  int err = QKV_OK;
  double work = (double)J->m * J->n * J->p;
  int nt = qkv_par_threads(), by_batch = J->b.copy && !J->b.shared;
  if (!scratch(J, &sa, &sb, SHARED)) return QKV_ENOMEM;
  if (wants(&J->a, SHARED)) err = densify(sa, &J->a, J->a.base, J->es);
  if (err == QKV_OK && wants(&J->b, SHARED)) err = densify(sb, &J->b, J->b.base, J->es);
  if (err == QKV_OK && by_batch) {
    batches_job B = {J, sa, sb};
    err = nt > 1 && nbatch > 1 && work * (double)nbatch >= QKV_CPU_PAR_MIN
            ? qkv_par_for(nbatch, 1, batches, &B) : batches(&B, 0, nbatch, 0);
  } else if (err == QKV_OK) {
    /* panels of about PANEL_FLOPS (so that Ctrl-C is seen), then cut
       further until each thread has one (more would pack the same b once
       more per panel: BERT 11% slower with two each, idle and busy) */
    panels_job P = {J, sa, sb, 0, 0, 0, 0};
    double flops = J->dtype == QKV_BF16 ? PANEL_FLOPS_BF16 : PANEL_FLOPS;
    P.rows = split(J->m, flops / (2.0 * J->n * J->p), PANEL_MIN_ROWS);
    P.cols = split(J->p, flops / (2.0 * J->n * P.rows), PANEL_MIN_COLS);
    P.nr = (J->m + P.rows - 1) / P.rows;
    P.nc = (J->p + P.cols - 1) / P.cols;
    int par = nt > 1 && work * (double)nbatch >= PAR_GEMM;
    if (par && nbatch * P.nc == 1 && P.nr > nt && P.nr % nt != 0) {
      /* as many panels for every thread: 3 on 2 threads took as long as 4 */
      int64_t nr = (P.nr + nt - 1) / nt * nt;
      P.rows = part(J->m, nr, 16);
      P.nr = (J->m + P.rows - 1) / P.rows;
    }
    if (par && nbatch * P.nr * P.nc < nt && J->dtype == QKV_BF16 && J->p >= 64 * nt) {
      /* the tile unit's B is packed per panel, and B is what a bfloat16
         product packs at a cost: a part of its columns each */
      int64_t more = (nt + nbatch * P.nr - 1) / (nbatch * P.nr);
      P.cols = part(J->p, more, 32);
      P.nc = (J->p + P.cols - 1) / P.cols;
    }
    if (par && nbatch * P.nr * P.nc < nt) {
      int64_t more = (nt + nbatch * P.nc - 1) / (nbatch * P.nc);
      int rows = part(J->m, more, 16);
      if (rows < J->m) {
        P.rows = rows;
        P.nr = (J->m + rows - 1) / rows;
      } else if (J->p >= 128) {          /* few rows: split the columns */
        more = (nt + nbatch * P.nr - 1) / (nbatch * P.nr);
        P.cols = part(J->p, more, 16);
        P.nc = (J->p + P.cols - 1) / P.cols;
      }
    }
    int64_t tasks = nbatch * P.nr * P.nc;
    err = par && tasks > 1 ? qkv_par_for(tasks, 1, panels, &P) : panels(&P, 0, tasks, 0);
  }
  free(sa);
  free(sb);
  return err;
}

/*
** bfloat16 products run natively on the tile unit (matmul_amx.c) where the
** CPU has AMX, else where oneDNN has its bfloat16 gemm, when both operands
** are laid out as gemm reads them; QKV_EDTYPE otherwise, and the dispatch
** computes them in float32 instead (the same values but for sums below
** 2^-126, which the tile unit flushes: exact products, float32 sums, one
** rounding).
*/
static int bf16_check (const qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                       qkv_matmul_dims *d) {
  if (a->dtype != QKV_BF16 || b->dtype != QKV_BF16) return QKV_EDTYPE;
  int err = qkv_matmul_sizes(out, a, b, d);
  if (err != QKV_OK) return err;
  if (out->dtype == QKV_F32)              /* float32 sums as they are: oneDNN's */
    return qkv_blas_load() == QKV_OK && qkv_bf16gemm != NULL ? QKV_OK : QKV_EDTYPE;
  double work = (double)d->m * d->n * d->p;
  if (work >= BF16_AMX_MIN && qkv_cpu_has_amx()) return QKV_OK;
  if (work < BF16_DNNL_MIN || qkv_blas_load() != QKV_OK || qkv_bf16gemm == NULL)
    return QKV_EDTYPE;
  return QKV_OK;
}

/*
** The float32 matmul precision's parts (vm/dispatch/matmul.c) run on
** oneDNN's bfloat16 product: on the tile unit where the CPU has one, else
** on AVX-512's bfloat16 dot products at twice float32's rate, worth one
** part ("medium") there and six ("high") on the tile unit only.
*/
int qkv_cpu_split_products (int parts, double work) {
  if (work * parts < BF16_DNNL_MIN) return 0;
  if (parts > 1 ? !qkv_cpu_has_amx() : !qkv_cpu_has_bf16()) return 0;
  return qkv_blas_load() == QKV_OK && qkv_bf16gemm != NULL;
}

int qkv_cpu_matmul (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                    double alpha) {
  qkv_matmul_dims d;
  /* bfloat16 operands into a bfloat16 out, or into a float32 one (the
     float32 matmul precision's parts, vm/dispatch/matmul.c) */
  int bf16 = a->dtype == QKV_BF16 && (out->dtype == QKV_BF16 || out->dtype == QKV_F32);
  int err = bf16 ? bf16_check(out, a, b, &d) : qkv_matmul_check(out, a, b, &d);
  if (err != QKV_OK) return err;
  job J;
  J.dtype = a->dtype;
  J.es = qkv_elsize(a->dtype);
  J.oes = qkv_elsize(out->dtype);
  J.out = out;
  int64_t m = d.m, p = d.p, n = d.n, nbatch = d.nbatch;
  if (nbatch == 0 || m == 0 || p == 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  J.c = (char *)qkv_data(out);
  if (n == 0) {                        /* an empty sum: all zeros */
    memset(J.c, 0, (size_t)(nbatch * m * p) * J.oes);
    return alpha != 1 ? scale_out(&J, nbatch * m * p, alpha) : QKV_OK;  /* 0 * inf */
  }
  /* CBLAS counts in int */
  if (!qkv_fits_int(m) || !qkv_fits_int(n) || !qkv_fits_int(p)) return QKV_EINTERNAL;
  J.m = (int)m; J.n = (int)n; J.p = (int)p;
  setup(&J.a, a);
  setup(&J.b, b);
  if (bf16) {
    if (J.a.copy || J.b.copy || alpha == 0 || !isfinite(alpha)) return QKV_EDTYPE;
    J.alpha = alpha;
    return run_batches(&J, nbatch);
  }
  if ((double)m * (double)n * (double)p <= (J.b.cs == 1 ? TINY_GEMM : TINY_GEMM_T)) {
    return tiny_batches(&J, nbatch, alpha);
  }
  if (qkv_blas_load() != QKV_OK) return QKV_ENOBLAS;
  /* gemm skips the product when alpha is 0 (so 0 * inf would be 0) */
  int exact = alpha != 0 && isfinite(alpha);
  J.alpha = exact ? alpha : 1;
  err = run_batches(&J, nbatch);
  if (err == QKV_OK && !exact) err = scale_out(&J, nbatch * m * p, alpha);
  return err;
}
