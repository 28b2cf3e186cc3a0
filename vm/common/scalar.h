/*
** scalar.h -- one element's rules, the same on both backends: int64
** arithmetic wraps (done in uint64_t, where overflow is defined), int64
** pow by squaring, and a double stored as an element of any dtype (the
** value of fill and masked_fill), to an int as C truncates but defined
** everywhere.
*/
#ifndef QKV_COMMON_SCALAR_H
#define QKV_COMMON_SCALAR_H

#include "common.h"

#define QKV_WRAP(op, x, y) ((int64_t)((uint64_t)(x) op (uint64_t)(y)))

/* integer pow by squaring; a negative exponent gives 1/b^-e truncated */
static inline QKV_HD int64_t qkv_ipow (int64_t b, int64_t e) {
  uint64_t r = 1, x = (uint64_t)b;
  if (e < 0) {
    if (b == 1) return 1;
    if (b == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  for (; e; e >>= 1) {
    if (e & 1) r *= x;
    x *= x;
  }
  return (int64_t)r;
}

/* NaN gives 0 and out-of-range values (infinities too) clamp; 2^63 is
   exact in a double */
static inline QKV_HD int64_t qkv_d2i (double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775808.0) return INT64_MAX;
  if (x < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

/* as qkv_d2i, clamping to int32's range */
static inline QKV_HD int32_t qkv_d2i32 (double x) {
  int64_t i = qkv_d2i(x);
  return (int32_t)(i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i);
}

/* v stored as one element of dtype t, converted once on the host */
typedef union qkv_scalar {
  float f32;
  double f64;
  int64_t i64;
  int32_t i32;
  uint16_t h;                 /* float16 and bfloat16 */
  uint8_t b;                  /* bool */
} qkv_scalar;

static inline qkv_scalar qkv_scalar_of (qkv_dtype t, double v) {
  qkv_scalar s;
  s.i64 = 0;
  switch (t) {
    case QKV_F32: s.f32 = (float)v; break;
    case QKV_F64: s.f64 = v; break;
    case QKV_I64: s.i64 = qkv_d2i(v); break;
    case QKV_I32: s.i32 = qkv_d2i32(v); break;
    case QKV_F16: s.h = qkv_f2h((float)v); break;
    case QKV_BF16: s.h = qkv_f2bf((float)v); break;
    default: s.b = (uint8_t)(v != 0); break;
  }
  return s;
}

#endif
