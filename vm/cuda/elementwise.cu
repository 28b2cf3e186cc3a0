/*
** elementwise.cu -- CUDA binary and unary ops, and masked_fill, as
** vm/cpu/elementwise.c.
**
** One thread per element over the strided iterator (cuda.cuh); each op is
** a functor with an overload per dtype, and a kernel is stamped out per op
** x dtype.  int64 arithmetic wraps (it is done in uint64_t, where overflow
** is defined); maximum/minimum propagate NaN as PyTorch does; the float
** formulas are the CPU's, with CUDA's libm (a few ulps at most) in place
** of glibc's, and float32 pow computed in double so that it rounds as
** glibc's powf does.
*/
#include "cuda.cuh"
#include "../common/scalar.h"

#define THREADS 256

/* ---- binary ---- */

/* the float overloads come from the template; int64 has its own */
struct Add {
  template <typename T> __device__ T operator() (T x, T y) const { return x + y; }
  __device__ int64_t operator() (int64_t x, int64_t y) const { return QKV_WRAP(+, x, y); }
};
struct Sub {
  template <typename T> __device__ T operator() (T x, T y) const { return x - y; }
  __device__ int64_t operator() (int64_t x, int64_t y) const { return QKV_WRAP(-, x, y); }
};
struct Mul {
  template <typename T> __device__ T operator() (T x, T y) const { return x * y; }
  __device__ int64_t operator() (int64_t x, int64_t y) const { return QKV_WRAP(*, x, y); }
};
struct Div {                           /* floats only: ops.c makes int / float */
  template <typename T> __device__ T operator() (T x, T y) const { return x / y; }
};
struct Pow {
  /* glibc's powf is correctly rounded nearly always; CUDA's has up to a
     few ulps, its double pow rounded to float matches glibc's */
  __device__ float operator() (float x, float y) const { return (float)pow((double)x, (double)y); }
  __device__ double operator() (double x, double y) const { return pow(x, y); }
  __device__ int64_t operator() (int64_t x, int64_t y) const { return qkv_ipow(x, y); }
};
/* the CPU's selects exactly: x when x > y or x is NaN, else y */
struct Max {
  template <typename T> __device__ T operator() (T x, T y) const {
    return ((x > y) | (x != x)) ? x : y;
  }
};
struct Min {
  template <typename T> __device__ T operator() (T x, T y) const {
    return ((x < y) | (x != x)) ? x : y;
  }
};

/* GELU's backward, y * (Phi(x) + x phi(x)), as the CPU's gelu_grad */
struct GeluGrad {
  __device__ float operator() (float x, float y) const {
    float e = expf(x * x * -0.5f);
    float t = e == 0.0f ? 0.0f : x * e * 0.39894228f;
    return y * (0.5f * erfcf(x * -0.70710678f) + t);
  }
  __device__ double operator() (double x, double y) const {
    double e = exp(x * x * -0.5);
    double t = e == 0.0 ? 0.0 : x * e * 0.39894228040143267794;
    return y * (0.5 * erfc(x * -0.70710678118654752440) + t);
  }
};

/* comparisons write bool (uint8_t 0/1) whatever the inputs are */
#define COMPARE(name, op) \
  struct name { \
    template <typename T> __device__ uint8_t operator() (T x, T y) const { \
      return (uint8_t)(x op y); \
    } \
  };
COMPARE(Eq, ==)
COMPARE(Ne, !=)
COMPARE(Lt, <)
COMPARE(Le, <=)
COMPARE(Gt, >)
COMPARE(Ge, >=)

/* operand 0 is out (TO), 1 and 2 are a and b (TI) */
template <typename TO, typename TI, typename F>
__global__ void binary_kernel (qkv_cu_iter it, F f) {
  TO *o = (TO *)it.data[0];
  const TI *a = (const TI *)it.data[1], *b = (const TI *)it.data[2];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[3];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <typename TO, typename TI, typename F>
static int binary_launch (const qkv_cu_iter &it, F f) {
  binary_kernel<TO, TI, F><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, f);
  launchCheck("binary_kernel");
  return QKV_OK;
}

/* arithmetic: out has the inputs' dtype; INTS says whether int64 is taken */
template <bool INTS, typename F>
static int arith (qkv_dtype dt, const qkv_cu_iter &it, F f) {
  switch (dt) {
    case QKV_F32: return binary_launch<float, float>(it, f);
    case QKV_F64: return binary_launch<double, double>(it, f);
    case QKV_I64:
      if constexpr (INTS) return binary_launch<int64_t, int64_t>(it, f);
      else return QKV_EDTYPE;
    default: return QKV_EDTYPE;
  }
}

template <typename F>
static int compare (qkv_dtype dt, const qkv_cu_iter &it, F f) {
  switch (dt) {
    case QKV_F32: return binary_launch<uint8_t, float>(it, f);
    case QKV_F64: return binary_launch<uint8_t, double>(it, f);
    case QKV_I64: return binary_launch<uint8_t, int64_t>(it, f);
    case QKV_BOOL: return binary_launch<uint8_t, uint8_t>(it, f);
    default: return QKV_EDTYPE;
  }
}

int qkv_cuda_binary (qkv_binop op, qkv_tensor *out, const qkv_tensor *a,
                     const qkv_tensor *b) {
  const qkv_tensor *t[3] = {out, a, b};
  qkv_cu_iter it;
  if ((unsigned)op >= QKV_NBINARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  qkv_dtype dt = a->dtype, want = op >= QKV_EQ ? QKV_BOOL : dt;
  /* the backend contract: ops.c has already converted the operands */
  if (b->dtype != dt || out->dtype != want) return QKV_EINTERNAL;
  if (dt != QKV_F32 && dt != QKV_F64 && dt != QKV_I64 && (dt != QKV_BOOL || op < QKV_EQ))
    return QKV_EDTYPE;
  if ((op == QKV_DIV || op == QKV_GELU_GRAD) && dt == QKV_I64) return QKV_EDTYPE;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 3, t);
  switch (op) {
    case QKV_ADD: return arith<true>(dt, it, Add());
    case QKV_SUB: return arith<true>(dt, it, Sub());
    case QKV_MUL: return arith<true>(dt, it, Mul());
    case QKV_DIV: return arith<false>(dt, it, Div());
    case QKV_POW: return arith<true>(dt, it, Pow());
    case QKV_MAXIMUM: return arith<true>(dt, it, Max());
    case QKV_MINIMUM: return arith<true>(dt, it, Min());
    case QKV_GELU_GRAD: return arith<false>(dt, it, GeluGrad());
    case QKV_EQ: return compare(dt, it, Eq());
    case QKV_NE: return compare(dt, it, Ne());
    case QKV_LT: return compare(dt, it, Lt());
    case QKV_LE: return compare(dt, it, Le());
    case QKV_GT: return compare(dt, it, Gt());
    case QKV_GE: return compare(dt, it, Ge());
    default: return QKV_EINTERNAL;
  }
}


/* ---- unary ---- */

/* a functor per op: float32 and float64 overloads, and int64 where the
   op takes it (NEG, ABS, RELU) */
#define UNARY(name, F32, F64) \
  struct name { \
    __device__ float operator() (float x) const { return F32; } \
    __device__ double operator() (double x) const { return F64; } \
  };

UNARY(Exp, expf(x), exp(x))
UNARY(Log, logf(x), log(x))
UNARY(Sqrt, sqrtf(x), sqrt(x))
UNARY(Tanh, tanhf(x), tanh(x))
/* the exact GELU, x * Phi(x), with Phi as erfc(-x/sqrt 2)/2 (no
   cancellation for x below -3).  The CPU's float32 erfc is its own
   vectorised one, within 1.2e-7 (relative) of the true value; CUDA's
   erfcf may be 4 ulps off, so float32 takes erfc in double, rounded once,
   and the two agree to a few 1e-7 */
UNARY(Gelu, 0.5f * x * (float)erfc((double)(x * -0.70710678f)),
      0.5 * x * erfc(x * -0.70710678118654752440))
/* sigmoid and silu as 1 / (1 + e^-x): no overflow to NaN at either end */
UNARY(Sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
UNARY(Silu, x / (1.0f + expf(-x)), x / (1.0 + exp(-x)))
UNARY(Sin, sinf(x), sin(x))
UNARY(Cos, cosf(x), cos(x))

struct Neg {
  template <typename T> __device__ T operator() (T x) const { return -x; }
  /* INT64_MIN negates to itself, as in two's complement */
  __device__ int64_t operator() (int64_t x) const { return QKV_WRAP(-, 0, x); }
};
struct Abs {
  __device__ float operator() (float x) const { return fabsf(x); }
  __device__ double operator() (double x) const { return fabs(x); }
  __device__ int64_t operator() (int64_t x) const { return x < 0 ? QKV_WRAP(-, 0, x) : x; }
};
/* NaN stays NaN, as PyTorch's relu; -0 gives +0, as the CPU's select */
struct Relu {
  __device__ float operator() (float x) const { return ((x > 0) | (x != x)) ? x : 0.0f; }
  __device__ double operator() (double x) const { return ((x > 0) | (x != x)) ? x : 0.0; }
  __device__ int64_t operator() (int64_t x) const { return x > 0 ? x : 0; }
};

/* operand 0 is out, 1 is a, both T */
template <typename T, typename F>
__global__ void unary_kernel (qkv_cu_iter it, F f) {
  T *o = (T *)it.data[0];
  const T *a = (const T *)it.data[1];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[2];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = f(a[off[1]]);
  }
}

template <typename T, typename F>
static int unary_launch (const qkv_cu_iter &it, F f) {
  unary_kernel<T, F><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, f);
  launchCheck("unary_kernel");
  return QKV_OK;
}

/* INTS: the op has an int64 overload */
template <bool INTS, typename F>
static int unary_of (qkv_dtype dt, const qkv_cu_iter &it, F f) {
  switch (dt) {
    case QKV_F32: return unary_launch<float>(it, f);
    case QKV_F64: return unary_launch<double>(it, f);
    case QKV_I64:
      if constexpr (INTS) return unary_launch<int64_t>(it, f);
      else return QKV_EDTYPE;
    default: return QKV_EDTYPE;
  }
}

int qkv_cuda_unary (qkv_unop op, qkv_tensor *out, const qkv_tensor *a) {
  const qkv_tensor *t[2] = {out, a};
  qkv_cu_iter it;
  if ((unsigned)op >= QKV_NUNARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (out->dtype != a->dtype) return QKV_EINTERNAL;
  qkv_dtype dt = a->dtype;
  int ints = op == QKV_NEG || op == QKV_ABS || op == QKV_RELU;
  if (dt != QKV_F32 && dt != QKV_F64 && (dt != QKV_I64 || !ints)) return QKV_EDTYPE;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 2, t);
  switch (op) {
    case QKV_NEG: return unary_of<true>(dt, it, Neg());
    case QKV_EXP: return unary_of<false>(dt, it, Exp());
    case QKV_LOG: return unary_of<false>(dt, it, Log());
    case QKV_SQRT: return unary_of<false>(dt, it, Sqrt());
    case QKV_ABS: return unary_of<true>(dt, it, Abs());
    case QKV_TANH: return unary_of<false>(dt, it, Tanh());
    case QKV_GELU: return unary_of<false>(dt, it, Gelu());
    case QKV_SIGMOID: return unary_of<false>(dt, it, Sigmoid());
    case QKV_RELU: return unary_of<true>(dt, it, Relu());
    case QKV_SILU: return unary_of<false>(dt, it, Silu());
    case QKV_SIN: return unary_of<false>(dt, it, Sin());
    case QKV_COS: return unary_of<false>(dt, it, Cos());
    default: return QKV_EINTERNAL;
  }
}


/* ---- masked_fill ---- */

/* stores v, converted once on the host as the CPU's (qkv_scalar_of,
   vm/common/scalar.h); operand 0 is out, 1 the mask */
template <typename T>
__global__ void masked_kernel (qkv_cu_iter it, T v) {
  T *o = (T *)it.data[0];
  const uint8_t *m = (const uint8_t *)it.data[1];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[2];
    qkv_cu_iter_at(it, i, off);
    if (m[off[1]]) o[off[0]] = v;
  }
}

template <typename T>
static int masked_launch (const qkv_cu_iter &it, T v) {
  masked_kernel<T><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, v);
  launchCheck("masked_kernel");
  return QKV_OK;
}

int qkv_cuda_masked_fill (qkv_tensor *out, const qkv_tensor *mask, double v) {
  const qkv_tensor *t[2] = {out, mask};
  qkv_cu_iter it;
  if ((unsigned)out->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (mask->dtype != QKV_BOOL) return QKV_EINTERNAL;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 2, t);
  qkv_scalar s = qkv_scalar_of(out->dtype, v);
  switch (out->dtype) {
    case QKV_F32: return masked_launch<float>(it, s.f32);
    case QKV_F64: return masked_launch<double>(it, s.f64);
    case QKV_I64: return masked_launch<int64_t>(it, s.i64);
    case QKV_BOOL: return masked_launch<uint8_t>(it, s.b);
    case QKV_I32: return masked_launch<int32_t>(it, s.i32);
    case QKV_F16: case QKV_BF16: return masked_launch<uint16_t>(it, s.h);
    default: return QKV_EDTYPE;
  }
}
