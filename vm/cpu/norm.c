/*
** norm.c -- CPU kernels over contiguous rows: log_softmax (along the last
** dim) and layer_norm (over the last N elements of each row).  Both
** accumulate in double whatever the dtype, and vm/dispatch/ops.c hands them
** contiguous rows (moving another dim last with a copy when it must).
*/
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "parallel.h"
#include "blocksum.h"
#include "vexp.h"
#include "../common/shape.h"

/* the rows of one call, run in parallel by qkv_par_rows (parallel.h) */
typedef struct {
  char *o;
  const char *x, *g;                 /* g: softmax's backward's gradient */
  const void *w, *b;                 /* layer_norm's, or NULL */
  int64_t n;
  size_t es;
  double eps;
  int avx2;
} rows_job;

#define ROW(J, base, r) ((J)->base + (r) * (J)->n * (int64_t)(J)->es)

/*
** (x - max) - log(sum(exp(x - max))), in double, rounded once: finite for
** any finite row.  Never x - (max + log(sum)): at max 1e8 in float32 (or
** 1e12 in float64) max + log(sum) rounds back to max, and the row came out
** 0 where it is -log 2 (cross_entropy 0 on large logits).  A row all
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
  double ls = log(sum); \
  for (int64_t j = 0; j < n; j++) o[j] = (T)(((double)x[j] - (double)max) - ls); \
}

LOGSOFTMAX_ROW(lsm_f32, float, expf)
LOGSOFTMAX_ROW(lsm_f64, double, exp)

#ifdef QKV_VEXP_X86
/* a float32 row 8 lanes at a time, with softmax's exp (vexp.h): the exps
   are the whole cost, and libm's expf does not vectorise */
static QKV_AVX2 void lsm_f32_avx2 (float *o, const float *x, int64_t n) {
  int isnan;
  int64_t j;
  float max = qkv_rowmax8(x, n, &isnan);
  if (isnan || max == -INFINITY) { lsm_f32(o, x, n); return; }
  __m256 vm = _mm256_set1_ps(max);
  __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};   /* in double */
  for (j = 0; j + 8 <= n; j += 8)
    qkv_acc8d(acc, qkv_vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
  double sum = qkv_hsum8d(acc);
  for (; j < n; j++) sum += qkv_vexpf(x[j] - max);
  double ls = log(sum);
  __m256d vm2 = _mm256_set1_pd((double)max), vl = _mm256_set1_pd(ls);
  for (j = 0; j + 8 <= n; j += 8) {        /* lsm_f32's rounding, 4 doubles at a time */
    __m256 v = _mm256_loadu_ps(x + j);
    __m256d lo = _mm256_sub_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm2), vl);
    __m256d hi = _mm256_sub_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm2), vl);
    _mm256_storeu_ps(o + j, _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)),
                                                 _mm256_cvtpd_ps(hi), 1));
  }
  for (; j < n; j++) o[j] = (float)(((double)x[j] - (double)max) - ls);
}
#endif

static void lsm_row_f32 (float *o, const float *x, int64_t n, int avx2) {
#ifdef QKV_VEXP_X86
  if (avx2) { lsm_f32_avx2(o, x, n); return; }
#endif
  (void)avx2;
  lsm_f32(o, x, n);
}

/* one row of n: mean and biased variance in double, two passes, then
   (x - mean) / sqrt(var + eps) * w + b (w, b NULL for none) */
#define LAYERNORM_ROW(name, T) \
static void name (T *o, const T *x, const T *w, const T *b, int64_t n, double eps) { \
  double mean = 0, var = 0; \
  double m4[4] = {0, 0, 0, 0}, v4[4] = {0, 0, 0, 0}; /* 4 chains, not 1 */ \
  int64_t j = 0; \
  for (; j + 4 <= n; j += 4) \
    for (int k = 0; k < 4; k++) m4[k] += x[j + k]; \
  for (; j < n; j++) m4[0] += x[j]; \
  mean = (m4[0] + m4[1] + m4[2] + m4[3]) / (double)n; \
  for (j = 0; j + 4 <= n; j += 4) \
    for (int k = 0; k < 4; k++) { double d = x[j + k] - mean; v4[k] += d * d; } \
  for (; j < n; j++) { double d = x[j] - mean; v4[0] += d * d; } \
  var = v4[0] + v4[1] + v4[2] + v4[3]; \
  double inv = 1.0 / sqrt(var / (double)n + eps); \
  for (j = 0; j < n; j++) { \
    double y = ((double)x[j] - mean) * inv; \
    if (w) y *= w[j]; \
    if (b) y += b[j]; \
    o[j] = (T)y; \
  } \
}

LAYERNORM_ROW(ln_f32, float)
LAYERNORM_ROW(ln_f64, double)

#ifdef QKV_VEXP_X86
static QKV_AVX2 double hsum4d (__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* a float32 row, 8 at a time: the sums in double (each 8 floats widened to
   two vectors of 4 doubles), the row itself in L1 after the first pass;
   the scale by w and shift by b in float, as PyTorch's */
static QKV_AVX2 void ln_f32_avx2 (float *o, const float *x, const float *w, const float *b,
                                  int64_t n, double eps) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  double sum = hsum4d(_mm256_add_pd(a0, a1));
  for (int64_t k = j; k < n; k++) sum += x[k];
  double mean = sum / (double)n;
  __m256d vm = _mm256_set1_pd(mean);
  a0 = a1 = _mm256_setzero_pd();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm);
    __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm);
    a0 = _mm256_fmadd_pd(d0, d0, a0);
    a1 = _mm256_fmadd_pd(d1, d1, a1);
  }
  double var = hsum4d(_mm256_add_pd(a0, a1));
  for (int64_t k = j; k < n; k++) var += (x[k] - mean) * (x[k] - mean);
  double inv = 1.0 / sqrt(var / (double)n + eps);
  __m256d vi = _mm256_set1_pd(inv);
  for (j = 0; j + 8 <= n; j += 8) {     /* x - mean in double: mean as a */
    __m256 v = _mm256_loadu_ps(x + j);   /* float could be off by its ulp */
    __m256d y0 = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm), vi);
    __m256d y1 = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm), vi);
    __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(y1), _mm256_cvtpd_ps(y0));
    if (w) y = _mm256_mul_ps(y, _mm256_loadu_ps(w + j));
    if (b) y = _mm256_add_ps(y, _mm256_loadu_ps(b + j));
    _mm256_storeu_ps(o + j, y);
  }
  for (; j < n; j++) {
    float y = (float)((x[j] - mean) * inv);
    o[j] = (w ? y * w[j] : y) + (b ? b[j] : 0.0f);
  }
}
#endif

static void lsm_row32 (void *p, int64_t r) {
  const rows_job *J = p;
  lsm_row_f32((float *)ROW(J, o, r), (const float *)ROW(J, x, r), J->n, J->avx2);
}

static void lsm_row64 (void *p, int64_t r) {
  const rows_job *J = p;
  lsm_f64((double *)ROW(J, o, r), (const double *)ROW(J, x, r), J->n);
}

static void ln_row32 (void *p, int64_t r) {
  const rows_job *J = p;
#ifdef QKV_VEXP_X86
  if (J->avx2) {
    ln_f32_avx2((float *)ROW(J, o, r), (const float *)ROW(J, x, r), J->w, J->b, J->n, J->eps);
    return;
  }
#endif
  ln_f32((float *)ROW(J, o, r), (const float *)ROW(J, x, r), J->w, J->b, J->n, J->eps);
}

static void ln_row64 (void *p, int64_t r) {
  const rows_job *J = p;
  ln_f64((double *)ROW(J, o, r), (const double *)ROW(J, x, r), J->w, J->b, J->n, J->eps);
}

int qkv_cpu_log_softmax (qkv_tensor *out, const qkv_tensor *x) {
  int64_t n = qkv_last_size(x), numel = qkv_numel(x);
  if (numel == 0) return QKV_OK;
  int64_t rows = numel / n;
  int f32 = x->dtype == QKV_F32;
#ifdef QKV_VEXP_X86
  int avx2 = qkv_cpu_has_avx2();
#else
  int avx2 = 0;
#endif
  rows_job J = {qkv_data(out), qkv_data(x), NULL, NULL, NULL, n, qkv_elsize(x->dtype), 0, avx2};
  return qkv_par_rows(rows, n, f32 ? lsm_row32 : lsm_row64, &J);
}

int qkv_cpu_layer_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                        const qkv_tensor *b, int64_t n, double eps) {
  int64_t numel = qkv_numel(x);
  if (numel == 0 || n == 0) return QKV_OK;
  int64_t rows = numel / n;
#ifdef QKV_VEXP_X86
  int avx2 = qkv_cpu_has_avx2();
#else
  int avx2 = 0;
#endif
  rows_job J = {qkv_data(out), qkv_data(x), NULL, w ? qkv_data(w) : NULL, b ? qkv_data(b) : NULL,
                n, qkv_elsize(x->dtype), eps, avx2};
  return qkv_par_rows(rows, n, x->dtype == QKV_F32 ? ln_row32 : ln_row64, &J);
}

/* softmax's backward along the last dim: gx = y (g - sum(g y)), the sum in
   double; y, g, gx contiguous rows of one float dtype */
#define SOFTMAX_BWD_ROW(name, T) \
static void name (T *gx, const T *y, const T *g, int64_t n) { \
  double dot = 0; \
  for (int64_t j = 0; j < n; j++) dot += (double)g[j] * y[j]; \
  for (int64_t j = 0; j < n; j++) gx[j] = (T)(y[j] * ((double)g[j] - dot)); \
}

SOFTMAX_BWD_ROW(sbw_f32, float)
SOFTMAX_BWD_ROW(sbw_f64, double)

static void sbw_row32 (void *p, int64_t r) {
  const rows_job *J = p;
  sbw_f32((float *)ROW(J, o, r), (const float *)ROW(J, x, r), (const float *)ROW(J, g, r), J->n);
}

static void sbw_row64 (void *p, int64_t r) {
  const rows_job *J = p;
  sbw_f64((double *)ROW(J, o, r), (const double *)ROW(J, x, r), (const double *)ROW(J, g, r), J->n);
}

int qkv_cpu_softmax_backward (qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g) {
  int64_t n = qkv_last_size(y), numel = qkv_numel(y);
  if (numel == 0) return QKV_OK;
  int64_t rows = numel / n;
  rows_job J = {qkv_data(gx), qkv_data(y), qkv_data(g), NULL, NULL, n, qkv_elsize(y->dtype), 0, 0};
  return qkv_par_rows(rows, n, y->dtype == QKV_F32 ? sbw_row32 : sbw_row64, &J);
}

/*
** layer_norm's backward over rows of n: with xhat = (x - mean) inv and
** gy = g w (g where there is no w),
**   gx = inv (gy - mean(gy) - xhat mean(gy xhat)),
**   gw = sum over rows of g xhat,  gb = sum over rows of g.
** mean and inv are computed again as the forward does (double, two
** passes).  Everything per row in double; the column sums go to partials
** per block of rows, added in block order after: the same bits on any
** number of threads.
*/
typedef struct {
  char *gx;
  const char *x, *g;
  const void *w;
  double *part;                     /* per block: gw's n sums, then gb's */
  int64_t n, rows, blk;             /* blk rows a block */
  size_t es;
  double eps;
  int want_w, want_b, wide;         /* wide: the AVX-512 build of the rows */
} lnb_job;

/* one row; gy_j = g_j w_j (w NULL: ones); pw, pb the block's partial sums
   or NULL.  Built for the baseline and AVX-512 (qkv_cpu_isa picks). */
#define LNB_ROW(name, T, ATTR) \
static ATTR void name (T *restrict gx, const T *restrict x, const T *restrict g, \
                       const T *restrict w, int64_t n, double eps, \
                       double *restrict pw, double *restrict pb) { \
  double mean = 0, var = 0, s1 = 0, s2 = 0; \
  _Pragma("omp simd reduction(+:mean)") \
  for (int64_t j = 0; j < n; j++) mean += x[j]; \
  mean /= (double)n; \
  _Pragma("omp simd reduction(+:var)") \
  for (int64_t j = 0; j < n; j++) { double d = x[j] - mean; var += d * d; } \
  double inv = 1.0 / sqrt(var / (double)n + eps); \
  if (w) { \
    _Pragma("omp simd reduction(+:s1, s2)") \
    for (int64_t j = 0; j < n; j++) { \
      double gy = (double)g[j] * w[j]; \
      s1 += gy; \
      s2 += gy * ((x[j] - mean) * inv); \
    } \
  } else { \
    _Pragma("omp simd reduction(+:s1, s2)") \
    for (int64_t j = 0; j < n; j++) { \
      s1 += g[j]; \
      s2 += g[j] * ((x[j] - mean) * inv); \
    } \
  } \
  s1 /= (double)n; \
  s2 /= (double)n; \
  if (w) { \
    _Pragma("omp simd") \
    for (int64_t j = 0; j < n; j++) \
      gx[j] = (T)(inv * ((double)g[j] * w[j] - s1 - (x[j] - mean) * inv * s2)); \
  } else { \
    _Pragma("omp simd") \
    for (int64_t j = 0; j < n; j++) \
      gx[j] = (T)(inv * (g[j] - s1 - (x[j] - mean) * inv * s2)); \
  } \
  if (pw) { \
    _Pragma("omp simd") \
    for (int64_t j = 0; j < n; j++) pw[j] += g[j] * ((x[j] - mean) * inv); \
  } \
  if (pb) { \
    _Pragma("omp simd") \
    for (int64_t j = 0; j < n; j++) pb[j] += g[j]; \
  } \
}

LNB_ROW(lnb_f32, float, )
LNB_ROW(lnb_f64, double, )

#ifdef QKV_VEXP_X86
/* 16 floats from p (lanes past k zeros) as two vectors of 8 doubles */
static inline QKV_AVX512 void ld16d (const float *p, __mmask16 k, __m512d *lo, __m512d *hi) {
  __m512 v = _mm512_maskz_loadu_ps(k, p);
  *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* p[0..16) += lo, hi where k keeps a lane */
static inline QKV_AVX512 void acc16d (double *p, __mmask16 k, __m512d lo, __m512d hi) {
  __mmask8 kl = (__mmask8)k, kh = (__mmask8)(k >> 8);
  _mm512_mask_storeu_pd(p, kl, _mm512_add_pd(_mm512_maskz_loadu_pd(kl, p), lo));
  _mm512_mask_storeu_pd(p + 8, kh, _mm512_add_pd(_mm512_maskz_loadu_pd(kh, p + 8), hi));
}

/*
** lnb_f32's steps 16 floats at a time, in double, with the sums reduced
** in registers: the compiler's simd reductions go through memory, which
** cost more than the arithmetic on rows of 64 (BERT's 384 too).
*/
static QKV_AVX512 void lnb_f32_avx512 (float *gx, const float *x, const float *g, const float *w,
                                       int64_t n, double eps, double *pw, double *pb) {
  __m512d a = _mm512_setzero_pd(), b = a, lo, hi;
  for (int64_t j = 0; j < n; j += 16) {
    ld16d(x + j, qkv_lanes16(n - j), &lo, &hi);
    a = _mm512_add_pd(a, lo);
    b = _mm512_add_pd(b, hi);
  }
  double mean = _mm512_reduce_add_pd(_mm512_add_pd(a, b)) / (double)n;
  __m512d vm = _mm512_set1_pd(mean);
  a = b = _mm512_setzero_pd();
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = qkv_lanes16(n - j);
    ld16d(x + j, k, &lo, &hi);
    lo = _mm512_maskz_sub_pd((__mmask8)k, lo, vm);
    hi = _mm512_maskz_sub_pd((__mmask8)(k >> 8), hi, vm);
    a = _mm512_fmadd_pd(lo, lo, a);
    b = _mm512_fmadd_pd(hi, hi, b);
  }
  double inv = 1.0 / sqrt(_mm512_reduce_add_pd(_mm512_add_pd(a, b)) / (double)n + eps);
  __m512d vi = _mm512_set1_pd(inv), s1 = _mm512_setzero_pd(), s2 = s1;
  for (int64_t j = 0; j < n; j += 16) {        /* lanes past n: g is 0, so gy is */
    __mmask16 k = qkv_lanes16(n - j);
    __m512d glo, ghi, wlo, whi;
    ld16d(x + j, k, &lo, &hi);
    ld16d(g + j, k, &glo, &ghi);
    if (w) {
      ld16d(w + j, k, &wlo, &whi);
      glo = _mm512_mul_pd(glo, wlo);
      ghi = _mm512_mul_pd(ghi, whi);
    }
    s1 = _mm512_add_pd(s1, _mm512_add_pd(glo, ghi));
    s2 = _mm512_fmadd_pd(glo, _mm512_mul_pd(_mm512_sub_pd(lo, vm), vi), s2);
    s2 = _mm512_fmadd_pd(ghi, _mm512_mul_pd(_mm512_sub_pd(hi, vm), vi), s2);
  }
  __m512d m1 = _mm512_set1_pd(_mm512_reduce_add_pd(s1) / (double)n);
  __m512d m2 = _mm512_set1_pd(_mm512_reduce_add_pd(s2) / (double)n);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = qkv_lanes16(n - j);
    __m512d glo, ghi, wlo, whi;
    ld16d(x + j, k, &lo, &hi);
    ld16d(g + j, k, &glo, &ghi);
    __m512d xl = _mm512_mul_pd(_mm512_sub_pd(lo, vm), vi), xh = _mm512_mul_pd(_mm512_sub_pd(hi, vm), vi);
    if (pw) acc16d(pw + j, k, _mm512_mul_pd(glo, xl), _mm512_mul_pd(ghi, xh));
    if (pb) acc16d(pb + j, k, glo, ghi);
    if (w) {
      ld16d(w + j, k, &wlo, &whi);
      glo = _mm512_mul_pd(glo, wlo);
      ghi = _mm512_mul_pd(ghi, whi);
    }
    __m512d ol = _mm512_mul_pd(vi, _mm512_sub_pd(_mm512_sub_pd(glo, m1), _mm512_mul_pd(xl, m2)));
    __m512d oh = _mm512_mul_pd(vi, _mm512_sub_pd(_mm512_sub_pd(ghi, m1), _mm512_mul_pd(xh, m2)));
    __m512 o = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(ol)), _mm512_cvtpd_ps(oh), 1);
    _mm512_mask_storeu_ps(gx + j, k, o);
  }
}
#endif

static void lnb_row (const lnb_job *J, int64_t r, double *pw, double *pb) {
  int64_t at = r * J->n;
  if (J->es == sizeof(double)) {
    lnb_f64((double *)J->gx + at, (const double *)J->x + at, (const double *)J->g + at, J->w,
            J->n, J->eps, pw, pb);
    return;
  }
#ifdef QKV_VEXP_X86
  if (J->wide) {
    lnb_f32_avx512((float *)J->gx + at, (const float *)J->x + at, (const float *)J->g + at,
                   J->w, J->n, J->eps, pw, pb);
    return;
  }
#endif
  lnb_f32((float *)J->gx + at, (const float *)J->x + at, (const float *)J->g + at, J->w, J->n,
          J->eps, pw, pb);
}

static int lnb_blocks (void *p, int64_t lo, int64_t hi, int tid) {
  const lnb_job *J = p;
  (void)tid;
  for (int64_t k = lo; k < hi; k++) {
    if (qkv_interrupted) return QKV_EINTR;
    double *pw = J->part + k * 2 * J->n, *pb = pw + J->n;
    for (int64_t j = 0; j < 2 * J->n; j++) pw[j] = 0;
    int64_t end = (k + 1) * J->blk < J->rows ? (k + 1) * J->blk : J->rows;
    for (int64_t r = k * J->blk; r < end; r++)
      lnb_row(J, r, J->want_w ? pw : NULL, J->want_b ? pb : NULL);
  }
  return QKV_OK;
}

int qkv_cpu_layer_norm_backward (qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                                 const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                                 int64_t n, double eps) {
  int64_t numel = qkv_numel(x), rows = n ? numel / n : 0;
  int64_t blk = qkv_blocksum_rows(rows), nblk = (rows + blk - 1) / blk;
  lnb_job J = {qkv_data(gx), qkv_data(x), qkv_data(g), w ? qkv_data(w) : NULL, NULL, n, rows,
               blk, qkv_elsize(x->dtype), eps, gw != NULL, gb != NULL, 0};
#ifdef QKV_VEXP_X86
  J.wide = qkv_cpu_has_avx512();
#endif
  if (rows > 0 && (J.part = malloc(sizeof(double) * (size_t)(nblk * 2 * n))) == NULL)
    return QKV_ENOMEM;
  int err = rows > 0 ? qkv_par_for(nblk, blk * n >= QKV_CPU_PAR_MIN ? 1 : QKV_CPU_PAR_MIN / (blk * n),
                                   lnb_blocks, &J) : QKV_OK;
  if (err == QKV_OK && gw) qkv_blocksum_out(gw, J.part, nblk, 2 * n, 0, n);
  if (err == QKV_OK && gb) qkv_blocksum_out(gb, J.part, nblk, 2 * n, n, n);
  free(J.part);
  return err;
}
