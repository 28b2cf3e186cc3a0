/*
** norm.cu -- GPU kernels over contiguous rows, as vm/cpu/norm.c:
** log_softmax (along the last dim), layer_norm (over the last n elements
** of each row) and its backward, rms_norm (as vm/cpu/rms_norm.c) and its
** backward, and softmax's backward (along the last
** dim).  All accumulate in double whatever the dtype, and vm/dispatch/ops_nn.c hands them
** contiguous rows (moving another dim last with a copy when it must).
**
** A row takes a warp (up to 1024 elements) or a block (longer), whose
** threads stride along it and combine their sums; rows of a few elements
** take a thread each.  The sums add in another order than the CPU's, in
** double: float32 results agree to their rounding.
*/
#include <math.h>

#include "cuda.cuh"
#include "rows.cuh"
#include "../common/shape.h"

#define TINY 8                /* rows this short take a thread each */
#define WARP_MAX 1024         /* rows up to this long take a warp */
#define THREADS 256           /* of every launch */

typedef enum { LOG_SOFTMAX, LAYER_NORM, SOFTMAX_BWD, LAYER_NORM_BWD, RMS_NORM, RMS_NORM_BWD } rowop;

namespace {                   /* the types are this file's own */

/* every row of n contiguous elements at o and x (and g for the backward,
   w and b for layer_norm, either may be NULL) */
struct norm_job {
  int64_t n, nrows;
  char *o;
  const char *x, *g, *w, *b;
  double eps;
  double *stats;              /* layer_norm's (rms_norm's) backward: each row's mean (0), inv */
};
}


/* the rows, their elements shared out among the group G (rows.cuh) */

/*
** x - max - log(sum(exp(x - max))): finite for any finite row.  A row all
** -inf gives -inf (the log of softmax's zeros), and a NaN anywhere makes
** the row NaN, as softmax does.  (x - max) - log(sum) in double and
** rounded once, as the CPU's (vm/cpu/norm.c).
*/
template <typename T, typename G>
__device__ static void lsm_row (T *o, const T *x, int64_t n) {
  T max = -INFINITY;
  int nan = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    nan |= x[j] != x[j];
    max = x[j] > max ? x[j] : max;
  }
  max = G::max(max);
  nan = G::any(nan);
  if (nan || max == -INFINITY) {         /* the same in the whole group */
    for (int64_t j = G::lane(); j < n; j += G::size()) o[j] = nan ? (T)NAN : (T)-INFINITY;
    return;
  }
  double sum = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) sum += ex(x[j] - max);
  /* (x - max) - log(sum) in double, rounded once, as the CPU's: never x -
     (max + log(sum)), which rounds back to max at large logits */
  double ls = log(G::sum(sum));
  for (int64_t j = G::lane(); j < n; j += G::size())
    o[j] = (T)(((double)x[j] - (double)max) - ls);
}

/*
** (x - mean) / sqrt(var + eps), mean and biased variance in double, two
** passes.  float32 then scales by w and shifts by b in float, as the CPU's
** vector path (and PyTorch) do; float64 stays in double.  The _rn forms
** keep the multiply and add apart, as the CPU has them.
*/
__device__ static inline float affine (double y, const float *w, const float *b, int64_t j) {
  float f = (float)y;
  if (w) f = __fmul_rn(f, w[j]);
  if (b) f = __fadd_rn(f, b[j]);
  return f;
}

__device__ static inline double affine (double y, const double *w, const double *b, int64_t j) {
  if (w) y = __dmul_rn(y, w[j]);
  if (b) y = __dadd_rn(y, b[j]);
  return y;
}

/* a row's mean, and 1 / sqrt(its biased variance + eps) in *inv */
template <typename T, typename G>
__device__ static double row_moments (const T *x, int64_t n, double eps, double *inv) {
  double s = 0, v = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) s += x[j];
  double mean = G::sum(s) / (double)n;
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    double d = x[j] - mean;
    v += d * d;
  }
  *inv = 1.0 / sqrt(G::sum(v) / (double)n + eps);
  return mean;
}

template <typename T, typename G>
__device__ static void ln_row (T *o, const T *x, const T *w, const T *b, int64_t n,
                               double eps) {
  double inv, mean = row_moments<T, G>(x, n, eps, &inv);
  for (int64_t j = G::lane(); j < n; j += G::size())
    o[j] = affine(((double)x[j] - mean) * inv, w, b, j);
}

/* gx = y (g - sum(g y)), the sum in double */
template <typename T, typename G>
__device__ static void sbw_row (T *gx, const T *y, const T *g, int64_t n) {
  double dot = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) dot += (double)g[j] * y[j];
  dot = G::sum(dot);
  for (int64_t j = G::lane(); j < n; j += G::size()) gx[j] = (T)(y[j] * ((double)g[j] - dot));
}

/*
** layer_norm's backward, as vm/cpu/norm.c: with xhat = (x - mean) inv and
** gy = g w, gx = inv (gy - mean(gy) - xhat mean(gy xhat)); the row's mean
** and inv left in stats (when not NULL) for the sums over rows
*/
template <typename T, typename G>
__device__ static void lnb_row (T *gx, const T *x, const T *g, const T *w, int64_t n,
                                double eps, double *stats) {
  double s1 = 0, s2 = 0, inv, mean = row_moments<T, G>(x, n, eps, &inv);
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    double xh = (x[j] - mean) * inv, gy = w ? (double)g[j] * w[j] : (double)g[j];
    s1 += gy;
    s2 += gy * xh;
  }
  s1 = G::sum(s1) / (double)n;
  s2 = G::sum(s2) / (double)n;
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    double xh = (x[j] - mean) * inv, gy = w ? (double)g[j] * w[j] : (double)g[j];
    gx[j] = (T)(inv * (gy - s1 - xh * s2));
  }
  if (stats && G::lane() == 0) stats[0] = mean, stats[1] = inv;
}

/* rms_norm: x inv w with inv = 1 / sqrt(mean(x^2) + eps), in double,
   float32 scaled by w in float as the CPU does (affine above, no b) */
template <typename T, typename G>
__device__ static double rms_inv (const T *x, int64_t n, double eps) {
  double s = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) s += (double)x[j] * x[j];
  return 1.0 / sqrt(G::sum(s) / (double)n + eps);
}

template <typename T, typename G>
__device__ static void rms_row (T *o, const T *x, const T *w, int64_t n, double eps) {
  double inv = rms_inv<T, G>(x, n, eps);
  for (int64_t j = G::lane(); j < n; j += G::size())
    o[j] = affine(x[j] * inv, w, (const T *)NULL, j);
}

/* its backward: with xhat = x inv and gy = g w, gx = inv (gy - xhat
   mean(gy xhat)); stats as layer_norm's, the mean 0, for lnb_cols' gw */
template <typename T, typename G>
__device__ static void rmsb_row (T *gx, const T *x, const T *g, const T *w, int64_t n,
                                 double eps, double *stats) {
  double s = 0, inv = rms_inv<T, G>(x, n, eps);
  for (int64_t j = G::lane(); j < n; j += G::size())
    s += (w ? (double)g[j] * w[j] : (double)g[j]) * (x[j] * inv);
  s = G::sum(s) / (double)n;
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    double gy = w ? (double)g[j] * w[j] : (double)g[j];
    gx[j] = (T)(inv * (gy - x[j] * inv * s));
  }
  if (stats && G::lane() == 0) stats[0] = 0, stats[1] = inv;
}

/* gw[j] = sum over rows of g xhat, gb[j] = sum of g (either NULL): a
   thread a column, the rows in order, in double */
template <typename T>
static __global__ void lnb_cols (norm_job J, T *gw, T *gb) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= J.n) return;
  const T *x = (const T *)J.x, *g = (const T *)J.g;
  double sw = 0, sb = 0;
  for (int64_t r = 0; r < J.nrows; r++) {
    double gv = g[r * J.n + j];
    sw += gv * ((x[r * J.n + j] - J.stats[2 * r]) * J.stats[2 * r + 1]);
    sb += gv;
  }
  if (gw) gw[j] = (T)sw;
  if (gb) gb[j] = (T)sb;
}

/* every row, each taken by one group; a group's rows are the same for all
   its threads, so the barriers inside are reached by the whole block */
template <rowop OP, typename T, typename G>
static __global__ void norm_rows (norm_job J) {
  for (int64_t r = G::first(); r < J.nrows; r += G::step()) {
    int64_t at = r * J.n;
    T *o = (T *)J.o + at;
    const T *x = (const T *)J.x + at;
    if constexpr (OP == LOG_SOFTMAX) lsm_row<T, G>(o, x, J.n);
    else if constexpr (OP == LAYER_NORM)
      ln_row<T, G>(o, x, (const T *)J.w, (const T *)J.b, J.n, J.eps);
    else if constexpr (OP == RMS_NORM) rms_row<T, G>(o, x, (const T *)J.w, J.n, J.eps);
    else if constexpr (OP == RMS_NORM_BWD)
      rmsb_row<T, G>(o, x, (const T *)J.g + at, (const T *)J.w, J.n, J.eps,
                     J.stats ? J.stats + 2 * r : NULL);
    else if constexpr (OP == LAYER_NORM_BWD)
      lnb_row<T, G>(o, x, (const T *)J.g + at, (const T *)J.w, J.n, J.eps,
                    J.stats ? J.stats + 2 * r : NULL);
    else sbw_row<T, G>(o, x, (const T *)J.g + at, J.n);
  }
}

template <rowop OP, typename T>
static int launch_as (const norm_job &J) {
  if (J.n <= TINY) {
    norm_rows<OP, T, by_thread><<<qkv_cu_blocks(J.nrows, THREADS), THREADS>>>(J);
    launchCheck("norm rows (a thread a row)");
  } else if (J.n <= WARP_MAX) {
    norm_rows<OP, T, by_warp><<<qkv_cu_blocks(J.nrows, THREADS / 32), THREADS>>>(J);
    launchCheck("norm rows (a warp a row)");
  } else {
    norm_rows<OP, T, by_block><<<qkv_cu_blocks(J.nrows, 1), THREADS>>>(J);
    launchCheck("norm rows (a block a row)");
  }
  return QKV_OK;
}

/* J's rows of one float dtype dt */
template <rowop OP>
static int launch (const norm_job &J, qkv_dtype dt) {
  return dt == QKV_F32 ? launch_as<OP, float>(J) : launch_as<OP, double>(J);
}


/* the entries */

static int is_f (qkv_dtype t) { return t == QKV_F32 || t == QKV_F64; }

static norm_job job_of (qkv_tensor *out, const qkv_tensor *x, int64_t n) {
  norm_job J;
  J.n = n;
  J.nrows = qkv_cu_numel(x) / n;
  J.o = qkv_cu_data(out);
  J.x = qkv_cu_data(x);
  J.g = J.w = J.b = NULL;
  J.eps = 0;
  J.stats = NULL;
  return J;
}

int qkv_cuda_log_softmax (qkv_tensor *out, const qkv_tensor *x) {
  if (!is_f(x->dtype) || out->dtype != x->dtype) return QKV_EDTYPE;
  int64_t n = qkv_last_size(x);
  if (qkv_cu_numel(x) == 0) return QKV_OK;
  return launch<LOG_SOFTMAX>(job_of(out, x, n), x->dtype);
}

int qkv_cuda_layer_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                         const qkv_tensor *b, int64_t n, double eps) {
  if (!is_f(x->dtype) || out->dtype != x->dtype || (w && w->dtype != x->dtype) ||
      (b && b->dtype != x->dtype))
    return QKV_EDTYPE;
  if (qkv_cu_numel(x) == 0 || n == 0) return QKV_OK;
  norm_job J = job_of(out, x, n);
  J.w = w ? qkv_cu_data(w) : NULL;
  J.b = b ? qkv_cu_data(b) : NULL;
  J.eps = eps;
  return launch<LAYER_NORM>(J, x->dtype);
}

int qkv_cuda_softmax_backward (qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g) {
  if (!is_f(y->dtype) || gx->dtype != y->dtype || g->dtype != y->dtype) return QKV_EDTYPE;
  int64_t n = qkv_last_size(y);
  if (qkv_cu_numel(y) == 0) return QKV_OK;
  norm_job J = job_of(gx, y, n);
  J.g = qkv_cu_data(g);
  return launch<SOFTMAX_BWD>(J, y->dtype);
}

/* the backward of layer_norm (OP LAYER_NORM_BWD) or rms_norm: gx by rows,
   then gw and gb (either NULL) by columns from the rows' stats */
template <rowop OP>
static int norm_backward (qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb, const qkv_tensor *x,
                          const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps) {
  if (!is_f(x->dtype) || gx->dtype != x->dtype || g->dtype != x->dtype ||
      (w && w->dtype != x->dtype) || (gw && gw->dtype != x->dtype) ||
      (gb && gb->dtype != x->dtype))
    return QKV_EDTYPE;
  norm_job J = job_of(gx, x, n);
  J.g = qkv_cu_data(g);
  J.w = w ? qkv_cu_data(w) : NULL;
  J.eps = eps;
  if ((gw || gb) && J.nrows > 0 &&
      (J.stats = (double *)qkv_cu_alloc(2 * (size_t)J.nrows * sizeof(double))) == NULL)
    return QKV_ENOMEM;
  int err = J.nrows > 0 ? launch<OP>(J, x->dtype) : QKV_OK;
  if (err == QKV_OK && (gw || gb)) {       /* no rows: sums of nothing, zeros */
    if (x->dtype == QKV_F32)
      lnb_cols<float><<<qkv_cu_blocks(n, THREADS), THREADS>>>(
          J, gw ? (float *)qkv_cu_data(gw) : NULL, gb ? (float *)qkv_cu_data(gb) : NULL);
    else
      lnb_cols<double><<<qkv_cu_blocks(n, THREADS), THREADS>>>(
          J, gw ? (double *)qkv_cu_data(gw) : NULL, gb ? (double *)qkv_cu_data(gb) : NULL);
    launchCheck("norm backward (the sums over rows)");
  }
  qkv_cu_free(J.stats);
  return err;
}

int qkv_cuda_layer_norm_backward (qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                                  const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                                  int64_t n, double eps) {
  return norm_backward<LAYER_NORM_BWD>(gx, gw, gb, x, g, w, n, eps);
}

int qkv_cuda_rms_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                       double eps) {
  if (!is_f(x->dtype) || out->dtype != x->dtype || (w && w->dtype != x->dtype))
    return QKV_EDTYPE;
  if (qkv_cu_numel(x) == 0 || n == 0) return QKV_OK;
  norm_job J = job_of(out, x, n);
  J.w = w ? qkv_cu_data(w) : NULL;
  J.eps = eps;
  return launch<RMS_NORM>(J, x->dtype);
}

int qkv_cuda_rms_norm_backward (qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                                const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps) {
  return norm_backward<RMS_NORM_BWD>(gx, gw, NULL, x, g, w, n, eps);
}
