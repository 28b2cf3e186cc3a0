/*
** elementwise.cu -- CUDA binary and unary ops, and masked_fill, as
** vm/cpu/elementwise.c.
**
** One thread per element over the strided iterator (cuda.cuh).  The ops
** come from their list (vm/common/ops.h): each row is a functor whose
** overloads, one per dtype the row takes, call the op's formula
** (vm/common/elementwise.h, the CPU's too), and a kernel is stamped out
** per op x dtype.  The formulas' float32 primitives are CUDA's libm (a few
** ulps at most off glibc's), but for powf: pow in double rounded to float,
** which rounds as glibc's powf (nearly always correctly rounded) does.
*/
#include "cuda.cuh"

static __host__ __device__ inline float qkv_cu_powf (float x, float y) {
  return (float)pow((double)x, (double)y);
}
#define QKV_POWF qkv_cu_powf
#include "../common/elementwise.h"
#include "../common/ops.h"

#define THREADS 256

/* what the plugin was built from, for the loader's check (plugin.h) */
const char qkv_cu_op_list[] = QKV_OPS_LIST;

/* ---- the functors: an overload per dtype the op takes ---- */

#define CALL1(name, T) qkv_el_##name##_##T(x)
#define CALL2(name, T) qkv_el_##name##_##T(x, y)
#define ARGS1(T) (T x)
#define ARGS2(T) (T x, T y)
#define OVERLOAD(N, name, T, C) \
  __device__ auto operator() ARGS##N(T) const { return CALL##N(name, C); }
#define OVERLOADS_FLOAT(N, name) OVERLOAD(N, name, float, f32) OVERLOAD(N, name, double, f64)
#define OVERLOADS_NUMBER(N, name) OVERLOADS_FLOAT(N, name) OVERLOAD(N, name, int64_t, i64)
#define OVERLOADS_ANY(N, name) OVERLOADS_NUMBER(N, name) OVERLOAD(N, name, uint8_t, bool)
#define FUNCTOR1(NAME, name, takes, ...) struct Unary_##name { OVERLOADS_##takes(1, name) };
#define FUNCTOR2(NAME, name, takes, ...) struct Binary_##name { OVERLOADS_##takes(2, name) };
QKV_BINARY_OPS(FUNCTOR2)
QKV_UNARY_OPS(FUNCTOR1)

/* the element type of an op's result given its inputs' */
template <int RESULT, typename T> struct Out { typedef T type; };
template <typename T> struct Out<QKV_RESULT_BOOL, T> { typedef uint8_t type; };


/* ---- float32 and the halves mixed (core/backend.h's elementwise_halves) ----
**
** As the CPU's staged rows (vm/cpu/elementwise.c): each operand read as
** float32 (a half widened, half.h: exact), the op's float32 overload, out
** rounded once into its half (or float32, or a comparison's bool): the
** values the dispatch's converted copies gave, in one pass with no
** temporaries.  One kernel per op, the dtypes read per element (the same
** branch in every thread). */

__device__ static inline float widen (const char *p, int64_t off, qkv_dtype dt) {
  if (dt == QKV_F32) return ((const float *)p)[off];
  uint16_t h = ((const uint16_t *)p)[off];
  return dt == QKV_BF16 ? qkv_bf2f(h) : qkv_h2f(h);
}

__device__ static inline void narrow (char *p, int64_t off, qkv_dtype dt, float v) {
  if (dt == QKV_F32) ((float *)p)[off] = v;
  else ((uint16_t *)p)[off] = dt == QKV_BF16 ? qkv_f2bf(v) : qkv_f2h(v);
}

__device__ static inline void narrow (char *p, int64_t off, qkv_dtype, uint8_t v) {
  ((uint8_t *)p)[off] = v;
}

/* operand 0 is out, 1 (and 2) the op's; dt their dtypes */
template <int NOP, typename F>
__global__ void halves_kernel (qkv_cu_iter it, F f, qkv_dtype d0, qkv_dtype d1, qkv_dtype d2) {
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[NOP];
    qkv_cu_iter_at(it, i, off);
    float x = widen(it.data[1], off[1], d1);
    if constexpr (NOP == 3) narrow(it.data[0], off[0], d0, f(x, widen(it.data[2], off[2], d2)));
    else narrow(it.data[0], off[0], d0, f(x));
  }
}

/* t[0] = f(t[1..]) with float32 and the halves mixed: an op that takes
   float32 (the others were refused before) */
template <int NOP, int TAKES, typename F>
static int halves_launch (const qkv_cu_iter &it, const qkv_tensor *const *t, F f) {
  if constexpr ((TAKES & 1) == 0) {
    return QKV_EDTYPE;
  } else {
    halves_kernel<NOP, F><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(
        it, f, t[0]->dtype, t[1]->dtype, t[NOP - 1]->dtype);
    launchCheck("halves_kernel");
    return QKV_OK;
  }
}

static int has_half (int nop, const qkv_tensor *const *t) {
  for (int k = 0; k < nop; k++)
    if (qkv_is_half(t[k]->dtype)) return 1;
  return 0;
}


/* ---- binary ---- */

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

template <typename TI, int RESULT, typename F>
static int binary_launch (const qkv_cu_iter &it, F f) {
  typedef typename Out<RESULT, TI>::type TO;
  binary_kernel<TO, TI, F><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, f);
  launchCheck("binary_kernel");
  return QKV_OK;
}

/* the dtypes the row takes (TAKES) have overloads; the others were
   refused before */
template <int TAKES, int RESULT, typename F>
static int binary_of (qkv_dtype dt, const qkv_cu_iter &it, F f) {
  switch (dt) {
    case QKV_F32: return binary_launch<float, RESULT>(it, f);
    case QKV_F64: return binary_launch<double, RESULT>(it, f);
    case QKV_I64:
      if constexpr ((TAKES & 2) != 0) return binary_launch<int64_t, RESULT>(it, f);
      else return QKV_EDTYPE;
    case QKV_BOOL:
      if constexpr ((TAKES & 4) != 0) return binary_launch<uint8_t, RESULT>(it, f);
      else return QKV_EDTYPE;
    default: return QKV_EDTYPE;
  }
}

int qkv_cuda_binary (int op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b) {
  const qkv_tensor *t[3] = {out, a, b};
  qkv_cu_iter it;
  if ((unsigned)op >= QKV_NBINARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  /* the backend contract: ops.c has converted the operands but for
     float32 and the halves mixed */
  int cd = qkv_op_compute_dtype(3, t, qkv_binop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL
                                                                            : a->dtype);
  if (cd < 0) return QKV_EINTERNAL;
  qkv_dtype dt = (qkv_dtype)cd;
  if (!qkv_op_takes(qkv_binop_takes(op), dt)) return QKV_EDTYPE;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 3, t);
  int mixed = has_half(3, t);
  switch (op) {
#define CASE2(NAME, name, takes, result, ...) \
    case QKV_##NAME: \
      return mixed ? halves_launch<3, QKV_TAKES_##takes>(it, t, Binary_##name()) \
                   : binary_of<QKV_TAKES_##takes, QKV_RESULT_##result>(dt, it, Binary_##name());
    QKV_BINARY_OPS(CASE2)
    default: return QKV_EINTERNAL;
  }
}


/* ---- unary ---- */

/* operand 0 is out (TO), 1 is a (TI) */
template <typename TO, typename TI, typename F>
__global__ void unary_kernel (qkv_cu_iter it, F f) {
  TO *o = (TO *)it.data[0];
  const TI *a = (const TI *)it.data[1];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[2];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = f(a[off[1]]);
  }
}

template <typename TI, int RESULT, typename F>
static int unary_launch (const qkv_cu_iter &it, F f) {
  typedef typename Out<RESULT, TI>::type TO;
  unary_kernel<TO, TI, F><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, f);
  launchCheck("unary_kernel");
  return QKV_OK;
}

template <int TAKES, int RESULT, typename F>
static int unary_of (qkv_dtype dt, const qkv_cu_iter &it, F f) {
  switch (dt) {
    case QKV_F32: return unary_launch<float, RESULT>(it, f);
    case QKV_F64: return unary_launch<double, RESULT>(it, f);
    case QKV_I64:
      if constexpr ((TAKES & 2) != 0) return unary_launch<int64_t, RESULT>(it, f);
      else return QKV_EDTYPE;
    case QKV_BOOL:
      if constexpr ((TAKES & 4) != 0) return unary_launch<uint8_t, RESULT>(it, f);
      else return QKV_EDTYPE;
    default: return QKV_EDTYPE;
  }
}

int qkv_cuda_unary (int op, qkv_tensor *out, const qkv_tensor *a) {
  const qkv_tensor *t[2] = {out, a};
  qkv_cu_iter it;
  if ((unsigned)op >= QKV_NUNARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  int cd = qkv_op_compute_dtype(2, t, qkv_unop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL
                                                                           : a->dtype);
  if (cd < 0) return QKV_EINTERNAL;
  qkv_dtype dt = (qkv_dtype)cd;
  if (!qkv_op_takes(qkv_unop_takes(op), dt)) return QKV_EDTYPE;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 2, t);
  int mixed = has_half(2, t);
  switch (op) {
#define CASE1(NAME, name, takes, result, ...) \
    case QKV_##NAME: \
      return mixed ? halves_launch<2, QKV_TAKES_##takes>(it, t, Unary_##name()) \
                   : unary_of<QKV_TAKES_##takes, QKV_RESULT_##result>(dt, it, Unary_##name());
    QKV_UNARY_OPS(CASE1)
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
