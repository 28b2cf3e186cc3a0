/*
** softmax.cu -- softmax along one dim of a strided tensor on the GPU, as
** vm/cpu/softmax.c: the row max subtracted (in the row's dtype), the
** exponentials summed in double, each scaled by (T)(1 / sum).  A row that
** is entirely -inf (every key masked) gives zeros rather than 0/0 = NaN;
** a NaN anywhere in a row makes the whole row NaN.
**
** A row takes a warp (up to 1024 elements) or a block (longer), whose
** threads stride along it; tiny rows, and many rows interleaved in memory
** (softmax along a dim that is not the innermost), take a thread each, so
** that neighbouring threads read neighbouring memory.  Each pass reads x
** again rather than keeping the exponentials: max, then the sum, then
** the output, with the same exp of the same difference each time.
*/
#include <math.h>

#include "cuda.cuh"
#include "rows.cuh"
#include "../common/shape.h"

#define TINY 8                /* rows this short take a thread each */
#define WARP_MAX 1024         /* rows up to this long take a warp */
#define MANY 8192             /* interleaved rows enough for a thread each */
#define THREADS 256           /* of every launch */

namespace {                   /* the type is this file's own */
/* the rows (vm/common/shape.h) and where they lie */
struct sm_job {
  qkv_rows R;
  int64_t nrows;
  char *o;
  const char *x;
};
}


/* one row, its elements shared out among the group G (rows.cuh) */

template <typename T, typename G>
__device__ static void softmax_row (T *o, int64_t os, const T *x, int64_t xs, int64_t n) {
  T max = -INFINITY;
  int nan = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) {
    T v = x[j * xs];
    nan |= v != v;
    max = v > max ? v : max;
  }
  max = G::max(max);
  nan = G::any(nan);
  if (nan || max == -INFINITY) {         /* the same in the whole group */
    T fill = nan ? (T)NAN : (T)0;
    for (int64_t j = G::lane(); j < n; j += G::size()) o[j * os] = fill;
    return;
  }
  double sum = 0;
  for (int64_t j = G::lane(); j < n; j += G::size()) sum += ex(x[j * xs] - max);
  sum = G::sum(sum);
  T inv = (T)(1.0 / sum);
  for (int64_t j = G::lane(); j < n; j += G::size()) o[j * os] = ex(x[j * xs] - max) * inv;
}

/* every row, each taken by one group; a group's rows are the same for all
   its threads, so the barriers inside are reached by the whole block */
template <typename T, typename G>
static __global__ void softmax_rows (sm_job J) {
  for (int64_t r = G::first(); r < J.nrows; r += G::step()) {
    int64_t xo, oo;
    qkv_row_start(&J.R, r, &xo, &oo);
    softmax_row<T, G>((T *)J.o + oo, J.R.os, (const T *)J.x + xo, J.R.xs, J.R.n);
  }
}

template <typename T>
static int launch (const sm_job &J, int interleaved) {
  if (J.R.n <= TINY || (interleaved && J.nrows >= MANY)) {
    softmax_rows<T, by_thread><<<qkv_cu_blocks(J.nrows, THREADS), THREADS>>>(J);
    launchCheck("softmax (a thread a row)");
  } else if (J.R.n <= WARP_MAX) {
    softmax_rows<T, by_warp><<<qkv_cu_blocks(J.nrows, THREADS / 32), THREADS>>>(J);
    launchCheck("softmax (a warp a row)");
  } else {
    softmax_rows<T, by_block><<<qkv_cu_blocks(J.nrows, 1), THREADS>>>(J);
    launchCheck("softmax (a block a row)");
  }
  return QKV_OK;
}

int qkv_cuda_softmax (qkv_tensor *out, const qkv_tensor *x, int dim) {
  if (out->dtype != x->dtype || (x->dtype != QKV_F32 && x->dtype != QKV_F64))
    return QKV_EDTYPE;
  int64_t numel = qkv_cu_numel(x);
  if (numel == 0) return QKV_OK;
  sm_job J;
  qkv_rows_init(&J.R, out, x, dim);
  J.nrows = numel / J.R.n;
  int interleaved = 0;          /* another dim steps less than the row's */
  for (int i = 0; i < J.R.nd; i++)
    if (J.R.size[i] > 1 && qkv_stride_mag(J.R.xstride[i]) < qkv_stride_mag(J.R.xs))
      interleaved = 1;
  J.o = qkv_cu_data(out);
  J.x = qkv_cu_data(x);
  return x->dtype == QKV_F32 ? launch<float>(J, interleaved) : launch<double>(J, interleaved);
}
