/*
** rms_norm.c -- CPU kernels of rms_norm (torch.nn.functional.rms_norm)
** over the last n elements of each contiguous row, and its backward.
** With inv = 1 / sqrt(mean(x^2) + eps), y = x inv w.  Sums in double
** whatever the dtype; float32 rounds x inv to float before scaling by w
** in float, as vm/cuda/norm.cu does, so both backends give the same bits
** up to the order of the sum of squares.
*/
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "parallel.h"
#include "blocksum.h"

typedef struct {
  char *o;
  const char *x;
  const void *w;                     /* or NULL */
  int64_t n;
  double eps;
} rms_job;

/* 1 / sqrt(mean(x^2) + eps) of one row, in double */
#define RMS_INV(T) \
static double inv_##T (const T *x, int64_t n, double eps) { \
  double s = 0; \
  for (int64_t j = 0; j < n; j++) s += (double)x[j] * x[j]; \
  return 1.0 / sqrt(s / (double)n + eps); \
}
RMS_INV(float)
RMS_INV(double)

static void rms_row32 (void *p, int64_t r) {
  const rms_job *J = p;
  const float *x = (const float *)J->x + r * J->n, *w = J->w;
  float *o = (float *)J->o + r * J->n;
  double inv = inv_float(x, J->n, J->eps);
  for (int64_t j = 0; j < J->n; j++) {
    float y = (float)(x[j] * inv);
    o[j] = w ? y * w[j] : y;
  }
}

static void rms_row64 (void *p, int64_t r) {
  const rms_job *J = p;
  const double *x = (const double *)J->x + r * J->n, *w = J->w;
  double *o = (double *)J->o + r * J->n;
  double inv = inv_double(x, J->n, J->eps);
  for (int64_t j = 0; j < J->n; j++) o[j] = w ? x[j] * inv * w[j] : x[j] * inv;
}

int qkv_cpu_rms_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                      double eps) {
  int64_t numel = qkv_numel(x);
  if (numel == 0 || n == 0) return QKV_OK;
  rms_job J = {qkv_data(out), qkv_data(x), w ? qkv_data(w) : NULL, n, eps};
  return qkv_par_rows(numel / n, n, x->dtype == QKV_F32 ? rms_row32 : rms_row64, &J);
}

/*
** The backward: with xhat = x inv and gy = g w (g where there is no w),
**   gx = inv (gy - xhat mean(gy xhat)),  gw = sum over rows of g xhat.
** inv is computed again as the forward does.  gw's sums go to partials
** per block of rows, added in block order after: the same bits on any
** number of threads (as layer_norm's backward in norm.c).
*/
typedef struct {
  char *gx;
  const char *x, *g;
  const void *w;
  double *part;                      /* per block: gw's n sums, or NULL */
  int64_t n, rows, blk;              /* blk rows a block */
  double eps;
  int f32;
} rmsb_job;

#define RMSB_ROW(T) \
static void rmsb_##T (T *gx, const T *x, const T *g, const T *w, int64_t n, double eps, \
                      double *pw) { \
  double inv = inv_##T(x, n, eps), s = 0; \
  for (int64_t j = 0; j < n; j++) s += (w ? (double)g[j] * w[j] : (double)g[j]) * (x[j] * inv); \
  s /= (double)n; \
  for (int64_t j = 0; j < n; j++) { \
    double gy = w ? (double)g[j] * w[j] : (double)g[j]; \
    gx[j] = (T)(inv * (gy - x[j] * inv * s)); \
  } \
  if (pw) \
    for (int64_t j = 0; j < n; j++) pw[j] += g[j] * (x[j] * inv); \
}
RMSB_ROW(float)
RMSB_ROW(double)

static int rmsb_blocks (void *p, int64_t lo, int64_t hi, int tid) {
  const rmsb_job *J = p;
  (void)tid;
  for (int64_t k = lo; k < hi; k++) {
    if (qkv_interrupted) return QKV_EINTR;
    double *pw = J->part ? J->part + k * J->n : NULL;
    if (pw) for (int64_t j = 0; j < J->n; j++) pw[j] = 0;
    int64_t end = (k + 1) * J->blk < J->rows ? (k + 1) * J->blk : J->rows;
    for (int64_t r = k * J->blk; r < end; r++) {
      int64_t at = r * J->n;
      if (J->f32)
        rmsb_float((float *)J->gx + at, (const float *)J->x + at, (const float *)J->g + at,
                   J->w, J->n, J->eps, pw);
      else
        rmsb_double((double *)J->gx + at, (const double *)J->x + at,
                    (const double *)J->g + at, J->w, J->n, J->eps, pw);
    }
  }
  return QKV_OK;
}

int qkv_cpu_rms_norm_backward (qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                               const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps) {
  int64_t rows = qkv_numel(x) / n;
  int64_t blk = qkv_blocksum_rows(rows), nblk = (rows + blk - 1) / blk;
  rmsb_job J = {qkv_data(gx), qkv_data(x), qkv_data(g), w ? qkv_data(w) : NULL, NULL, n, rows,
                blk, eps, x->dtype == QKV_F32};
  if (gw && rows > 0 && (J.part = malloc(sizeof(double) * (size_t)(nblk * n))) == NULL)
    return QKV_ENOMEM;
  int err = rows > 0 ? qkv_par_for(nblk, blk * n >= QKV_CPU_PAR_MIN ? 1 : QKV_CPU_PAR_MIN / (blk * n),
                                   rmsb_blocks, &J) : QKV_OK;
  if (err == QKV_OK && gw)                 /* no rows: sums of nothing, zeros */
    qkv_blocksum_out(gw, J.part, nblk, n, 0, n);
  free(J.part);
  return err;
}
