/*
** copy.cu -- CUDA copy with dtype conversion, and fill, as vm/cpu/copy.c.
**
** Conversions: to bool is x != 0 (NaN is true); float to int64 or int32
** truncates toward zero, and NaN, an infinity or a value whose truncation
** the int cannot hold makes the copy return QKV_ERANGE (0 is stored there;
** the kernel raises a flag in device memory, read back after it); int64
** to int32 wraps (C's cast, as the CPU's); to float16 and bfloat16 through
** float32, rounding to nearest even (half.h, the same code as the CPU's,
** so the bits agree), but a half into its own dtype, its bits; everything
** else is C's conversion.  One thread per
** element, over the strided iterator (cuda.cuh).
*/
#include "cuda.cuh"
#include "../common/scalar.h"

#define THREADS 256

/* the halves as their own types, so that overloads can tell them apart */
struct f16_t { uint16_t b; };
struct bf16_t { uint16_t b; };

/* ---- conversions ---- */

/* the value an element stands for: itself, or a float for the halves */
__device__ static inline float value_of (f16_t h) { return qkv_h2f(h.b); }
__device__ static inline float value_of (bf16_t h) { return qkv_bf2f(h.b); }
template <typename T> __device__ static inline T value_of (T x) { return x; }

/*
** A float into an int, as vm/cpu/copy.c's rows: truncated when lox < v <
** hix (the bounds exclusive and exact in V, so NaN fails both), else 0,
** with *bad raised (every thread that raises it stores 1).
*/
template <typename TO, typename V>
__device__ static inline TO to_int (V v, V lox, V hix, int *bad) {
  if (v > lox && v < hix) return (TO)v;
  atomicExch(bad, 1);
  return 0;
}

/* a value (float, double, int64, int32 or a bool's byte) as an element of
   type TO; the overloads pick the float or the int rule, and only a float
   into an int uses bad */
template <typename TO> struct to;

template <> struct to<float> {
  template <typename V> __device__ static float of (V v, int *) { return (float)v; }
};
template <> struct to<double> {
  template <typename V> __device__ static double of (V v, int *) { return (double)v; }
};
template <> struct to<int64_t> {
  __device__ static int64_t of (float v, int *bad) {
    return to_int<int64_t>(v, -0x1.000002p63f, 0x1p63f, bad);
  }
  __device__ static int64_t of (double v, int *bad) {
    return to_int<int64_t>(v, -0x1.0000000000001p63, 0x1p63, bad);
  }
  __device__ static int64_t of (int64_t v, int *) { return v; }
  __device__ static int64_t of (int32_t v, int *) { return (int64_t)v; }
  __device__ static int64_t of (uint8_t v, int *) { return (int64_t)v; }
};
template <> struct to<int32_t> {
  __device__ static int32_t of (float v, int *bad) {
    return to_int<int32_t>(v, -0x1.000002p31f, 0x1p31f, bad);
  }
  __device__ static int32_t of (double v, int *bad) {
    return to_int<int32_t>(v, -2147483649.0, 0x1p31, bad);
  }
  __device__ static int32_t of (int64_t v, int *) { return (int32_t)v; }   /* wraps */
  __device__ static int32_t of (int32_t v, int *) { return v; }
  __device__ static int32_t of (uint8_t v, int *) { return (int32_t)v; }
};
template <> struct to<uint8_t> {                  /* bool */
  template <typename V> __device__ static uint8_t of (V v, int *) { return (uint8_t)(v != 0); }
};
template <> struct to<f16_t> {
  template <typename V> __device__ static f16_t of (V v, int *) {
    f16_t r;
    r.b = qkv_f2h((float)v);
    return r;
  }
};
template <> struct to<bf16_t> {
  template <typename V> __device__ static bf16_t of (V v, int *) {
    bf16_t r;
    r.b = qkv_f2bf((float)v);
    return r;
  }
};

/* whether a copy from TI into TO is checked: a float into an int */
template <typename T> struct is_float_src { static const bool value = false; };
template <> struct is_float_src<float> { static const bool value = true; };
template <> struct is_float_src<double> { static const bool value = true; };
template <> struct is_float_src<f16_t> { static const bool value = true; };
template <> struct is_float_src<bf16_t> { static const bool value = true; };
template <typename T> struct is_int_dst { static const bool value = false; };
template <> struct is_int_dst<int64_t> { static const bool value = true; };
template <> struct is_int_dst<int32_t> { static const bool value = true; };


/* ---- copy ---- */

/* an element of TI as one of TO: through its value, but a half into its
   own dtype as its bits (a NaN's payload and quiet bit kept, as the CPU's
   copy_f16_f16: through float32 and back made a signalling NaN quiet) */
template <typename TO, typename TI> struct convert {
  __device__ static TO of (TI x, int *bad) { return to<TO>::of(value_of(x), bad); }
};
template <> struct convert<f16_t, f16_t> {
  __device__ static f16_t of (f16_t x, int *) { return x; }
};
template <> struct convert<bf16_t, bf16_t> {
  __device__ static bf16_t of (bf16_t x, int *) { return x; }
};

/* operand 0 is dst (TO), 1 is src (TI); bad: the flag of a checked copy */
template <typename TO, typename TI>
__global__ void copy_kernel (qkv_cu_iter it, int *bad) {
  TO *o = (TO *)it.data[0];
  const TI *a = (const TI *)it.data[1];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[2];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = convert<TO, TI>::of(a[off[1]], bad);
  }
}

template <typename TO, typename TI>
static int copy_run (const qkv_cu_iter &it, int *bad) {
  copy_kernel<TO, TI><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, bad);
  launchCheck("copy_kernel");
  return QKV_OK;
}

/* the flag cleared, the copy, the flag read back into *found */
template <typename TO, typename TI>
static int copy_flagged (const qkv_cu_iter &it, int *bad, int *found) {
  cudaCheck(cudaMemset(bad, 0, sizeof *bad));
  int err = copy_run<TO, TI>(it, bad);
  if (err != QKV_OK) return err;
  cudaCheck(cudaMemcpy(found, bad, sizeof *found, cudaMemcpyDeviceToHost));
  return QKV_OK;
}

template <typename TO, typename TI>
static int copy_launch (const qkv_cu_iter &it) {
  if (!(is_int_dst<TO>::value && is_float_src<TI>::value)) return copy_run<TO, TI>(it, NULL);
  int found = 0, *bad = (int *)qkv_cu_alloc(sizeof(int));
  if (bad == NULL) return QKV_ECUDA;
  int err = copy_flagged<TO, TI>(it, bad, &found);
  qkv_cu_free(bad);
  return err != QKV_OK ? err : found ? QKV_ERANGE : QKV_OK;
}

template <typename TO>
static int copy_to (qkv_dtype src, const qkv_cu_iter &it) {
  switch (src) {
    case QKV_F32: return copy_launch<TO, float>(it);
    case QKV_F64: return copy_launch<TO, double>(it);
    case QKV_I64: return copy_launch<TO, int64_t>(it);
    case QKV_BOOL: return copy_launch<TO, uint8_t>(it);
    case QKV_I32: return copy_launch<TO, int32_t>(it);
    case QKV_F16: return copy_launch<TO, f16_t>(it);
    case QKV_BF16: return copy_launch<TO, bf16_t>(it);
    default: return QKV_EDTYPE;
  }
}

int qkv_cuda_copy (qkv_tensor *dst, const qkv_tensor *src) {
  const qkv_tensor *t[2] = {dst, src};
  qkv_cu_iter it;
  if ((unsigned)dst->dtype >= QKV_NDTYPE || (unsigned)src->dtype >= QKV_NDTYPE)
    return QKV_EDTYPE;
  if (qkv_cu_numel(dst) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 2, t);
  switch (dst->dtype) {
    case QKV_F32: return copy_to<float>(src->dtype, it);
    case QKV_F64: return copy_to<double>(src->dtype, it);
    case QKV_I64: return copy_to<int64_t>(src->dtype, it);
    case QKV_BOOL: return copy_to<uint8_t>(src->dtype, it);
    case QKV_I32: return copy_to<int32_t>(src->dtype, it);
    case QKV_F16: return copy_to<f16_t>(src->dtype, it);
    case QKV_BF16: return copy_to<bf16_t>(src->dtype, it);
    default: return QKV_EDTYPE;
  }
}


/* ---- fill ---- */

/* fill stores v, converted once on the host as the CPU's (qkv_scalar_of,
   vm/common/scalar.h) */
template <typename T>
__global__ void fill_kernel (qkv_cu_iter it, T v) {
  T *o = (T *)it.data[0];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[1];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = v;
  }
}

template <typename T>
static int fill_launch (const qkv_cu_iter &it, T v) {
  fill_kernel<T><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, v);
  launchCheck("fill_kernel");
  return QKV_OK;
}

int qkv_cuda_fill (qkv_tensor *dst, double v) {
  const qkv_tensor *t[1] = {dst};
  qkv_cu_iter it;
  if ((unsigned)dst->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (qkv_cu_numel(dst) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 1, t);
  qkv_scalar s = qkv_scalar_of(dst->dtype, v);
  switch (dst->dtype) {
    case QKV_F32: return fill_launch<float>(it, s.f32);
    case QKV_F64: return fill_launch<double>(it, s.f64);
    case QKV_I64: return fill_launch<int64_t>(it, s.i64);
    case QKV_BOOL: return fill_launch<uint8_t>(it, s.b);
    case QKV_I32: return fill_launch<int32_t>(it, s.i32);
    case QKV_F16: case QKV_BF16: return fill_launch<uint16_t>(it, s.h);
    default: return QKV_EDTYPE;
  }
}
