/*
** reduce.cu -- reductions along one dim on the GPU: sum, mean, max, min,
** var, std, argmax and argmin of a strided tensor, with vm/cpu/reduce.c's
** answers.
**
** Float sums and moments add in double, int64 sums wrap as two's
** complement, bool sums count the true elements into an int64.  Variance
** is two-pass: the mean first, then the squared deviations with the sum
** of deviations as a correction, over max(0, n - correction) (PyTorch's;
** 1 unbiased): one element over 0 gives NaN.  Max and min keep the first
** extremum on ties, and the first NaN beats every number.  An empty line sums to 0 (its mean and variance
** are NaN); an empty max or min is the caller's error.
**
** Each output reduces one line of a.  Lines whose elements lie further
** apart than neighbouring lines do (a column sum), and short lines, take
** one thread each, so that a warp reads neighbouring memory; the others
** take a block each, the block's threads striding along the line.  When
** there are too few lines to fill the GPU, long lines are cut into
** pieces whose partial results land in scratch memory and are folded by
** a second kernel, a block per output (for var and std twice: the
** means, then the deviations).  The order of the additions differs from
** the CPU's, in double: float32 results agree to their rounding.
*/
#include <math.h>

#include "cuda.cuh"
#include "../common/reduce_plan.h"

#define SHORT 32              /* lines this short take a thread each */
#define BLOCK 256             /* most threads of a block (a power of 2) */
#define TPIECE 256            /* shortest piece of a line a thread takes */
#define TTARGET (1 << 17)     /* threads worth cutting lines up for */
#define BPIECE 4096           /* shortest piece of a line a block takes */
#define BTARGET 1024          /* blocks worth cutting lines up for */
#define MAXGRID 65536         /* blocks of a block-per-line launch */

typedef qkv_redplan plan;     /* ../common/reduce_plan.h; passed to the kernels by value */

/* What a line, or a piece of one, reduces to (as vm/cpu/reduce.c's). */
template <typename T> struct acc {
  double d;                   /* float sum, or sum of squared deviations */
  double c;                   /* sum of deviations: the two-pass correction */
  uint64_t u;                 /* int64 and bool sums, wrapping */
  int64_t pos;                /* extremum position; -1 for none yet */
  T v;                        /* the extremum */
};


/*
** A float16 (BF 0) or bfloat16 (BF 1) element, read as float32 (half.h:
** exact): the sums and moments take the halves where they lie
** (reduce_halves, core/backend.h), with no float32 copy of a.
*/
template <int BF> struct half_el {
  uint16_t b;
  __device__ operator float () const { return BF ? qkv_bf2f(b) : qkv_h2f(b); }
};

/* element helpers */

__device__ static inline bool is_nan (float v) { return isnan(v); }
__device__ static inline bool is_nan (double v) { return isnan(v); }
__device__ static inline bool is_nan (int64_t) { return false; }
__device__ static inline bool is_nan (uint8_t) { return false; }
template <int BF> __device__ static inline bool is_nan (half_el<BF> v) { return isnan((float)v); }

/* adds one element to a sum: floats in double, ints wrapping, bools
   counted */
__device__ static inline void add (acc<float> &r, float v) { r.d += (double)v; }
__device__ static inline void add (acc<double> &r, double v) { r.d += v; }
__device__ static inline void add (acc<int64_t> &r, int64_t v) { r.u += (uint64_t)v; }
__device__ static inline void add (acc<uint8_t> &r, uint8_t v) { r.u += v != 0; }
template <int BF> __device__ static inline void add (acc<half_el<BF>> &r, half_el<BF> v) {
  r.d += (double)(float)v;
}

/* an element as a double, exactly */
template <typename T> __device__ static inline double wide (T v) { return (double)v; }
template <int BF> __device__ static inline double wide (half_el<BF> v) { return (double)(float)v; }

template <typename T> __device__ static inline acc<T> empty () {
  acc<T> r;
  r.d = r.c = 0;
  r.u = 0;
  r.pos = -1;
  r.v = T{};
  return r;
}

/*
** Whether vj at position j beats the extremum so far, vi at i (i < 0:
** none yet).  The first NaN beats everything, then the larger (smaller)
** value, then the earlier position: the order of the CPU's one scan,
** whatever order the candidates meet in.
*/
template <typename T>
__device__ static inline bool beats (bool mx, T vj, int64_t j, T vi, int64_t i) {
  if (i < 0) return true;
  if (j < 0) return false;
  bool ni = is_nan(vi), nj = is_nan(vj);
  if (ni || nj) return nj && (!ni || j < i);
  if (vj == vi) return j < i;
  return mx ? vj > vi : vj < vi;
}

/* folds s into r: sums add, extrema compete */
template <typename T>
__device__ static inline void merge (const plan &P, acc<T> &r, const acc<T> &s) {
  if (P.fam == QKV_RED_EXTREMA) {
    if (beats(qkv_red_is_max(P.op), s.v, s.pos, r.v, r.pos)) { r.v = s.v; r.pos = s.pos; }
  } else {
    r.d += s.d;
    r.c += s.c;
    r.u += s.u;
  }
}

/*
** Elements lo, lo + step, ... below hi of the line into r: the squared
** deviations from `mean` when dev, else the sum or the extremum.
*/
template <typename T>
__device__ static void scan (const plan &P, const T *line, int64_t lo, int64_t hi,
                             int64_t step, bool dev, double mean, acc<T> &r) {
  bool mx = qkv_red_is_max(P.op);
  for (int64_t i = lo; i < hi; i += step) {
    T v = line[i * P.sa];
    if (dev) {
      double d = wide(v) - mean;
      r.c += d;
      r.d += d * d;
    } else if (P.fam == QKV_RED_EXTREMA) {
      if (beats(mx, v, i, r.v, r.pos)) { r.v = v; r.pos = i; }
    } else {
      add(r, v);
    }
  }
}

/* where output j's line starts in a, and where its results go */
__device__ static void locate (const plan &P, int64_t j, int64_t *ao, int64_t *oo,
                               int64_t *xo) {
  *ao = *oo = *xo = 0;
  for (int k = P.nd - 1; k >= 0; k--) {
    int64_t c = j % P.size[k];
    j /= P.size[k];
    *ao += c * P.as[k];
    *oo += c * P.os[k];
    *xo += c * P.xs[k];
  }
}

__device__ static inline void put_float (qkv_dtype dt, char *o, int64_t at, double v) {
  if (dt == QKV_F32) ((float *)o)[at] = (float)v;
  else ((double *)o)[at] = v;
}

/* Over max(0, n - corr), as vm/cpu/reduce.c's: rounded once into out;
   one element's deviation is x - x (r.d holds x: no second pass) */
template <typename T>
__device__ static double variance (const acc<T> &r, int64_t n, double corr) {
  double div = (double)n - corr > 0 ? (double)n - corr : 0;
  if (n == 0) return NAN;
  double s = n == 1 ? (r.d - r.d) * (r.d - r.d) : r.d - r.c * r.c / (double)n;
  return (s < 0 ? 0 : s) / div;
}

/* Stores a line's finished result at oo (values) and xo (positions). */
template <typename T>
__device__ static void emit (const plan &P, int64_t oo, int64_t xo, const acc<T> &r) {
  switch (P.op) {
    case QKV_SUM:
      if (P.odt == QKV_I64) ((int64_t *)P.o)[oo] = (int64_t)r.u;
      else put_float(P.odt, P.o, oo, r.d);
      break;
    case QKV_MEAN: put_float(P.odt, P.o, oo, r.d / (double)P.n); break;
    case QKV_VAR: put_float(P.odt, P.o, oo, variance(r, P.n, P.corr)); break;
    case QKV_STD: put_float(P.odt, P.o, oo, sqrt(variance(r, P.n, P.corr))); break;
    default:                  /* the element itself, bit for bit */
      if (P.o != NULL) ((T *)P.o)[oo] = r.v;
      break;
  }
  if (P.x != NULL) ((int64_t *)P.x)[xo] = r.pos;
}

/*
** The block's accumulators folded into one, which every thread gets.
** blockDim.x is a power of 2; the first barrier keeps a write to sh from
** overtaking a thread still reading the previous call's result.
*/
template <typename T>
__device__ static acc<T> block_merge (const plan &P, acc<T> *sh, const acc<T> &r) {
  unsigned t = threadIdx.x;
  __syncthreads();
  sh[t] = r;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (t < s) merge(P, sh[t], sh[t + s]);
    __syncthreads();
  }
  return sh[0];
}


/*
** The kernels.  Line j's piece k covers [k * len, k * len + len) and its
** partial result goes to part[j * np + k]; with one piece (np == 1) the
** kernel finishes the line itself.  With mean != NULL they add the
** squared deviations from mean[j] instead (var and std, second pass).
*/

/* a thread per piece; neighbouring threads take neighbouring lines */
template <typename T>
static __global__ void by_thread (plan P, int64_t np, int64_t len, const double *mean,
                                  acc<T> *part) {
  QKV_CU_LOOP(w, P.nout * np) {
    int64_t k = w / P.nout, j = w % P.nout, lo = k * len;
    int64_t hi = P.n - lo < len ? P.n : lo + len, ao, oo, xo;
    locate(P, j, &ao, &oo, &xo);
    const T *line = (const T *)P.a + ao;
    acc<T> r = empty<T>();
    scan(P, line, lo, hi, 1, mean != NULL, mean != NULL ? mean[j] : 0.0, r);
    if (mean != NULL || np > 1) { part[j * np + k] = r; continue; }
    if (P.fam == QKV_RED_MOMENTS && P.n > 1) {
      acc<T> s = empty<T>();
      scan(P, line, 0, P.n, 1, true, r.d / (double)P.n, s);
      r.d = s.d;
      r.c = s.c;
    }
    emit(P, oo, xo, r);
  }
}

/* a block per piece, its threads striding along it */
template <typename T>
static __global__ void by_block (plan P, int64_t np, int64_t len, const double *mean,
                                 acc<T> *part) {
  __shared__ acc<T> sh[BLOCK];
  for (int64_t w = blockIdx.x; w < P.nout * np; w += gridDim.x) {
    int64_t j = w / np, k = w % np, lo = k * len;
    int64_t hi = P.n - lo < len ? P.n : lo + len, ao, oo, xo;
    locate(P, j, &ao, &oo, &xo);
    const T *line = (const T *)P.a + ao;
    acc<T> r = empty<T>();
    scan(P, line, lo + threadIdx.x, hi, blockDim.x, mean != NULL,
         mean != NULL ? mean[j] : 0.0, r);
    r = block_merge(P, sh, r);
    bool finish = mean == NULL && np == 1;
    if (finish && P.fam == QKV_RED_MOMENTS && P.n > 1) {     /* uniform in the block */
      acc<T> s = empty<T>();
      scan(P, line, threadIdx.x, P.n, blockDim.x, true, r.d / (double)P.n, s);
      s = block_merge(P, sh, s);
      r.d = s.d;
      r.c = s.c;
    }
    if (threadIdx.x == 0) {
      if (finish) emit(P, oo, xo, r);
      else part[w] = r;
    }
  }
}

/* a block per line folds its np partial results; with mean != NULL it
   stores the line's mean there instead of finishing */
template <typename T>
static __global__ void fold (plan P, int64_t np, const acc<T> *part, double *mean) {
  __shared__ acc<T> sh[BLOCK];
  for (int64_t j = blockIdx.x; j < P.nout; j += gridDim.x) {
    acc<T> r = empty<T>();
    for (int64_t k = threadIdx.x; k < np; k += blockDim.x) merge(P, r, part[j * np + k]);
    r = block_merge(P, sh, r);
    if (threadIdx.x == 0) {
      if (mean != NULL) {
        mean[j] = r.d / (double)P.n;
      } else {
        int64_t ao, oo, xo;
        locate(P, j, &ao, &oo, &xo);
        emit(P, oo, xo, r);
      }
    }
  }
}


/* launching */

static unsigned grid_of (int64_t work) {
  return (unsigned)(work < MAXGRID ? work : MAXGRID);
}

/* the smallest power of 2 from 32 to BLOCK with m at most k per thread */
static int threads_for (int64_t m, int64_t k) {
  int t = 32;
  while (t < BLOCK && (int64_t)t * k < m) t *= 2;
  return t;
}

/* one pass of the line kernel chosen (thread: by_thread, else by_block) */
template <typename T>
static int pass (const plan &P, int thread, int64_t np, int64_t len,
                 const double *mean, acc<T> *part) {
  int64_t work = P.nout * np;
  if (thread) {
    by_thread<T><<<qkv_cu_blocks(work, 256), 256>>>(P, np, len, mean, part);
    launchCheck("reduce by_thread");
  } else {
    by_block<T><<<grid_of(work), threads_for(len, 8)>>>(P, np, len, mean, part);
    launchCheck("reduce by_block");
  }
  return QKV_OK;
}

template <typename T>
static int fold_pass (const plan &P, int64_t np, const acc<T> *part, double *mean) {
  fold<T><<<grid_of(P.nout), threads_for(np, 1)>>>(P, np, part, mean);
  launchCheck("reduce fold");
  return QKV_OK;
}

/*
** A thread per line when lines are short or lie interleaved (a's
** smallest stride is a kept dim's), else a block per line; lines are cut
** into pieces only when there are too few of them to fill the GPU.
*/
template <typename T>
static int run (const plan &P) {
  int thread = P.n <= SHORT ||
               (P.nd > 0 && qkv_stride_mag(P.as[P.nd - 1]) < qkv_stride_mag(P.sa));
  int64_t minp = thread ? TPIECE : BPIECE, target = thread ? TTARGET : BTARGET;
  int64_t np = 1, len = P.n;
  if (P.n >= 2 * minp && P.nout < target) {
    np = (target + P.nout - 1) / P.nout;
    if (np > P.n / minp) np = P.n / minp;
    len = (P.n + np - 1) / np;
    np = (P.n + len - 1) / len;
  }
  if (np == 1) return pass<T>(P, thread, 1, len, NULL, NULL);
  size_t pbytes = (size_t)(P.nout * np) * sizeof(acc<T>);
  size_t mbytes = P.fam == QKV_RED_MOMENTS ? (size_t)P.nout * sizeof(double) : 0;
  char *scratch = (char *)qkv_cu_alloc(pbytes + mbytes);
  if (scratch == NULL) return QKV_ENOMEM;
  acc<T> *part = (acc<T> *)scratch;
  double *mean = P.fam == QKV_RED_MOMENTS ? (double *)(scratch + pbytes) : NULL;
  int err = pass<T>(P, thread, np, len, NULL, part);
  if (err == QKV_OK) err = fold_pass<T>(P, np, part, mean);
  if (err == QKV_OK && mean != NULL) {
    err = pass<T>(P, thread, np, len, mean, part);
    if (err == QKV_OK) err = fold_pass<T>(P, np, part, NULL);
  }
  qkv_cu_free(scratch);
  return err;
}


/* the entry: the plan as ../common/reduce_plan.h makes it */

int qkv_cuda_reduce (qkv_redop op, qkv_tensor *out, qkv_tensor *idx,
                     const qkv_tensor *a, int dim, double correction) {
  plan P;
  int err = qkv_redplan_init(&P, op, out, idx, a, dim, 1, correction);
  if (err != QKV_OK || P.nout == 0) return err;
  if (P.n == 0)                /* nothing of a is read: no pointer into it */
    for (int k = 0; k < P.nd; k++) P.as[k] = 0;
  qkv_redplan_data(&P, P.n > 0 ? qkv_cu_data(a) : NULL, qkv_cu_data(out),
                   idx ? qkv_cu_data(idx) : NULL);
  switch (a->dtype) {
    case QKV_F32: return run<float>(P);
    case QKV_F64: return run<double>(P);
    case QKV_I64: return run<int64_t>(P);
    case QKV_F16: return run<half_el<0>>(P);
    case QKV_BF16: return run<half_el<1>>(P);
    default: return run<uint8_t>(P);
  }
}
