/*
** softmax.c -- softmax along one dim of a strided tensor on the CPU.
** Subtracting the row max keeps any finite input finite; a row that is
** entirely -inf (every key masked) gives zeros rather than 0/0 = NaN; a
** NaN anywhere in a row makes the whole row NaN, as in PyTorch.
*/
#include <math.h>

#include "cpu.h"

/* where row r of the tensor starts, the other dims taken in order */
typedef struct {
  int n;
  int64_t size[QKV_MAXDIM], xs[QKV_MAXDIM], os[QKV_MAXDIM];
} rows;

static void rows_init (rows *R, const qkv_tensor *out, const qkv_tensor *x,
                       int dim) {
  R->n = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (i == dim) continue;
    R->size[R->n] = x->size[i];
    R->xs[R->n] = x->stride[i];
    R->os[R->n] = out->stride[i];
    R->n++;
  }
}

static void row_start (const rows *R, int64_t r, int64_t *xo, int64_t *oo) {
  *xo = *oo = 0;
  for (int i = R->n - 1; i >= 0 && r > 0; i--) {
    int64_t j = r % R->size[i];
    r /= R->size[i];
    *xo += j * R->xs[i];
    *oo += j * R->os[i];
  }
}

#define SOFTMAX_ROW(name, T, EXP) \
static void name (T *o, int64_t os, const T *x, int64_t xs, int64_t n) { \
  T max = -INFINITY; \
  int nan = 0; \
  for (int64_t j = 0; j < n; j++) { \
    T v = x[j * xs]; \
    nan |= v != v; \
    max = v > max ? v : max; \
  } \
  if (nan || max == -INFINITY) { \
    T fill = nan ? (T)NAN : 0; \
    for (int64_t j = 0; j < n; j++) o[j * os] = fill; \
    return; \
  } \
  double sum = 0; \
  for (int64_t j = 0; j < n; j++) { \
    T e = EXP(x[j * xs] - max); \
    o[j * os] = e; \
    sum += e; \
  } \
  T inv = (T)(1.0 / sum); \
  for (int64_t j = 0; j < n; j++) o[j * os] *= inv; \
}

SOFTMAX_ROW(row_f32, float, expf)
SOFTMAX_ROW(row_f64, double, exp)

int qkv_cpu_softmax (qkv_tensor *out, const qkv_tensor *x, int dim) {
  if (out->dtype != x->dtype || !qkv_is_float(x->dtype)) return QKV_EDTYPE;
  int64_t numel = qkv_numel(x);
  if (numel == 0) return QKV_OK;
  int64_t n = x->ndim ? x->size[dim] : 1, nrows = numel / n;
  int64_t xs = x->ndim ? x->stride[dim] : 1, os = out->ndim ? out->stride[dim] : 1;
  rows R;
  rows_init(&R, out, x, dim);
  char *ob = (char *)qkv_data(out);
  const char *xb = (const char *)qkv_data(x);
  size_t es = qkv_elsize(x->dtype);
  #pragma omp parallel for schedule(static) if (numel >= QKV_CPU_PAR_MIN)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t xo, oo;
    row_start(&R, r, &xo, &oo);
    if (es == sizeof(float))
      row_f32((float *)ob + oo, os, (const float *)xb + xo, xs, n);
    else
      row_f64((double *)ob + oo, os, (const double *)xb + xo, xs, n);
  }
  return QKV_OK;
}
