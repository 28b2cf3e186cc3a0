/*
** softmax.c -- softmax along one dim of a strided tensor on the CPU.
** Subtracting the row max keeps any finite input finite; a row that is
** entirely -inf (every key masked) gives zeros rather than 0/0 = NaN; a
** NaN anywhere in a row makes the whole row NaN, as in PyTorch.
*/
#include <math.h>

#include "cpu.h"
#include "parallel.h"
#include "vexp.h"
#include "../common/shape.h"

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

#ifdef QKV_VEXP_X86
/* a contiguous float32 row, 8 lanes at a time: one exp per score is the
   whole cost of softmax, and libm's expf does not vectorise */
static QKV_AVX2 void row_f32_avx2 (float *o, const float *x, int64_t n) {
  int isnan;
  int64_t j;
  float max = qkv_rowmax8(x, n, &isnan);
  if (isnan || max == -INFINITY) {
    row_f32(o, 1, x, 1, n);               /* the rare rows: NaN or zeros */
    return;
  }
  __m256 vmax = _mm256_set1_ps(max);
  __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};   /* in double */
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = qkv_vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmax));
    _mm256_storeu_ps(o + j, e);
    qkv_acc8d(acc, e);
  }
  double sum = qkv_hsum8d(acc);
  for (; j < n; j++) sum += o[j] = qkv_vexpf(x[j] - max);
  __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_loadu_ps(o + j), inv));
  for (; j < n; j++) o[j] *= (float)(1.0 / sum);
}
#endif

static void row_any_f32 (float *o, int64_t os, const float *x, int64_t xs,
                         int64_t n, int avx2) {
#ifdef QKV_VEXP_X86
  if (avx2 && os == 1 && xs == 1) { row_f32_avx2(o, x, n); return; }
#endif
  (void)avx2;
  row_f32(o, os, x, xs, n);
}

typedef struct {
  qkv_rows R;                 /* the row's length and strides, where each starts */
  char *ob;
  const char *xb;
  int f32, avx2;
} job;

static void one_row (const job *J, int64_t r) {
  const qkv_rows *R = &J->R;
  int64_t xo, oo;
  qkv_row_start(R, r, &xo, &oo);
  if (J->f32)
    row_any_f32((float *)J->ob + oo, R->os, (const float *)J->xb + xo, R->xs,
                R->n, J->avx2);
  else
    row_f64((double *)J->ob + oo, R->os, (const double *)J->xb + xo, R->xs, R->n);
}

static void row_fn (void *J, int64_t r) { one_row(J, r); }

int qkv_cpu_softmax (qkv_tensor *out, const qkv_tensor *x, int dim) {
  if (out->dtype != x->dtype || !qkv_is_float(x->dtype)) return QKV_EDTYPE;
  int64_t numel = qkv_numel(x);
  if (numel == 0) return QKV_OK;
  job J;
  qkv_rows_init(&J.R, out, x, dim);
  J.ob = (char *)qkv_data(out);
  J.xb = (const char *)qkv_data(x);
  J.f32 = x->dtype == QKV_F32;
#ifdef QKV_VEXP_X86
  J.avx2 = qkv_cpu_has_avx2();
#else
  J.avx2 = 0;
#endif
  int64_t nrows = numel / J.R.n;
  /* a small tensor never starts threads: they would cost more than its
     whole softmax */
  if (numel < QKV_CPU_PAR_MIN) {
    for (int64_t r = 0; r < nrows; r++) one_row(&J, r);
    return QKV_OK;
  }
  return qkv_par_rows(nrows, J.R.n, row_fn, &J);
}
