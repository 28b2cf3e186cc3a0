/*
** norm.c -- CPU kernels over contiguous rows: log_softmax (along the last
** dim) and layer_norm (over the last N elements of each row).  Both
** accumulate in double whatever the dtype, and vm/ops.c hands them
** contiguous rows (moving another dim last with a copy when it must).
*/
#include <math.h>

#include "cpu.h"

/* rows run in parallel past this many elements, with the flag looked at
   between rows */
#define PAR_MIN QKV_CPU_PAR_MIN

/*
** x - max - log(sum(exp(x - max))): finite for any finite row.  A row all
** -inf gives -inf (the log of qkv.softmax's zeros), and a NaN anywhere
** makes the row NaN, as softmax does.
*/
#define LOGSOFTMAX_ROW(name, T, EXP) \
static void name (T *o, const T *x, int64_t n) { \
  T max = -INFINITY; \
  int nan = 0; \
  for (int64_t j = 0; j < n; j++) { \
    nan |= x[j] != x[j]; \
    max = x[j] > max ? x[j] : max; \
  } \
  if (nan || max == -INFINITY) { \
    for (int64_t j = 0; j < n; j++) o[j] = nan ? (T)NAN : (T)-INFINITY; \
    return; \
  } \
  double sum = 0; \
  for (int64_t j = 0; j < n; j++) sum += EXP(x[j] - max); \
  double lse = (double)max + log(sum); \
  for (int64_t j = 0; j < n; j++) o[j] = (T)((double)x[j] - lse); \
}

LOGSOFTMAX_ROW(lsm_f32, float, expf)
LOGSOFTMAX_ROW(lsm_f64, double, exp)

/* one row of n: mean and biased variance in double, two passes, then
   (x - mean) / sqrt(var + eps) * w + b (w, b NULL for none) */
#define LAYERNORM_ROW(name, T) \
static void name (T *o, const T *x, const T *w, const T *b, int64_t n, double eps) { \
  double mean = 0, var = 0; \
  for (int64_t j = 0; j < n; j++) mean += x[j]; \
  mean /= (double)n; \
  for (int64_t j = 0; j < n; j++) { double d = x[j] - mean; var += d * d; } \
  double inv = 1.0 / sqrt(var / (double)n + eps); \
  for (int64_t j = 0; j < n; j++) { \
    double y = ((double)x[j] - mean) * inv; \
    if (w) y *= w[j]; \
    if (b) y += b[j]; \
    o[j] = (T)y; \
  } \
}

LAYERNORM_ROW(ln_f32, float)
LAYERNORM_ROW(ln_f64, double)

static int64_t last (const qkv_tensor *t) { return t->ndim ? t->size[t->ndim - 1] : 1; }

int qkv_cpu_log_softmax (qkv_tensor *out, const qkv_tensor *x) {
  int64_t n = last(x), numel = qkv_numel(x);
  if (numel == 0) return QKV_OK;
  int64_t rows = numel / n;
  int f32 = x->dtype == QKV_F32;
  char *o = qkv_data(out);
  const char *xb = qkv_data(x);
  size_t es = qkv_elsize(x->dtype);
  #pragma omp parallel for schedule(static) if (numel >= PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    if (qkv_interrupted) continue;
    if (f32) lsm_f32((float *)(o + r * n * (int64_t)es), (const float *)(xb + r * n * (int64_t)es), n);
    else lsm_f64((double *)(o + r * n * (int64_t)es), (const double *)(xb + r * n * (int64_t)es), n);
  }
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}

int qkv_cpu_layer_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                        const qkv_tensor *b, int64_t n, double eps) {
  int64_t numel = qkv_numel(x);
  if (numel == 0 || n == 0) return QKV_OK;
  int64_t rows = numel / n;
  size_t es = qkv_elsize(x->dtype);
  char *o = qkv_data(out);
  const char *xb = qkv_data(x);
  const void *pw = w ? qkv_data(w) : NULL, *pb = b ? qkv_data(b) : NULL;
  #pragma omp parallel for schedule(static) if (numel >= PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    if (qkv_interrupted) continue;
    int64_t at = r * n * (int64_t)es;
    if (x->dtype == QKV_F32)
      ln_f32((float *)(o + at), (const float *)(xb + at), pw, pb, n, eps);
    else
      ln_f64((double *)(o + at), (const double *)(xb + at), pw, pb, n, eps);
  }
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}
