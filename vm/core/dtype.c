/*
** dtype.c -- the dtypes: their sizes, names and promotion, one element
** read or written as a number, and the rule for floats going into an
** integer dtype.  The devices' names too.
*/
#include <stdint.h>
#include <string.h>

#include "qkv.h"
#include "half.h"

static const struct { const char *name; size_t size; int rank; } dtypes[QKV_NDTYPE] = {
  {"float32", 4, 4}, {"float64", 8, 5}, {"int64", 8, 2}, {"bool", 1, 0},
  {"int32", 4, 1}, {"float16", 2, 3}, {"bfloat16", 2, 3}
};

size_t qkv_elsize (qkv_dtype t) { return dtypes[t].size; }
const char *qkv_dtype_name (qkv_dtype t) { return dtypes[t].name; }
int qkv_is_float (qkv_dtype t) { return dtypes[t].rank >= 3; }

qkv_dtype qkv_compute_dtype (qkv_dtype t) {
  return t == QKV_I32 ? QKV_I64 : qkv_is_half(t) ? QKV_F32 : t;
}

int qkv_dtype_from_name (const char *name, qkv_dtype *t) {
  for (int i = 0; i < QKV_NDTYPE; i++)
    if (strcmp(name, dtypes[i].name) == 0) { *t = (qkv_dtype)i; return 1; }
  return 0;
}

qkv_dtype qkv_promote (qkv_dtype a, qkv_dtype b) {
  if (a != b && dtypes[a].rank == 3 && dtypes[b].rank == 3) return QKV_F32;
  return dtypes[a].rank >= dtypes[b].rank ? a : b;
}

/* bool 0, the integers 1, the floats 2 */
static int category (qkv_dtype t) { return t == QKV_BOOL ? 0 : qkv_is_float(t) ? 2 : 1; }

qkv_dtype qkv_promote_dims (qkv_dtype a, int a0, qkv_dtype b, int b0) {
  if (a0 == b0) return qkv_promote(a, b);
  qkv_dtype dims = a0 ? b : a, zero = a0 ? a : b;
  return category(zero) > category(dims) ? zero : dims;
}

double qkv_elem_get (qkv_dtype dt, const void *p) {
  switch (dt) {
    case QKV_F32: return *(const float *)p;
    case QKV_F64: return *(const double *)p;
    case QKV_I64: return (double)*(const int64_t *)p;
    case QKV_I32: return *(const int32_t *)p;
    case QKV_F16: return qkv_h2f(*(const uint16_t *)p);
    case QKV_BF16: return qkv_bf2f(*(const uint16_t *)p);
    default: return *(const unsigned char *)p;
  }
}

int64_t qkv_elem_geti (qkv_dtype dt, const void *p) {
  double x;
  switch (dt) {
    case QKV_I64: return *(const int64_t *)p;
    case QKV_I32: return *(const int32_t *)p;
    case QKV_BOOL: return *(const unsigned char *)p;
    default: x = qkv_elem_get(dt, p);
  }
  if (x != x) return 0;
  return x >= 9223372036854775808.0 ? INT64_MAX : x < -9223372036854775808.0 ? INT64_MIN
                                                                           : (int64_t)x;
}

void qkv_elem_set (qkv_dtype dt, void *p, double x) {
  switch (dt) {
    case QKV_F32: *(float *)p = (float)x; break;
    case QKV_F64: *(double *)p = x; break;
    case QKV_F16: *(uint16_t *)p = qkv_f2h((float)x); break;
    case QKV_BF16: *(uint16_t *)p = qkv_f2bf((float)x); break;
    case QKV_BOOL: *(unsigned char *)p = x != 0; break;
    default:                 /* the int types, clamped as a copy is */
      qkv_elem_seti(dt, p, x != x ? 0 : x >= 9223372036854775808.0 ? INT64_MAX
                           : x < -9223372036854775808.0 ? INT64_MIN : (int64_t)x);
  }
}

void qkv_elem_seti (qkv_dtype dt, void *p, int64_t i) {
  switch (dt) {
    case QKV_I64: *(int64_t *)p = i; break;
    case QKV_I32: *(int32_t *)p = (int32_t)(i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i); break;
    case QKV_BOOL: *(unsigned char *)p = i != 0; break;
    default: qkv_elem_set(dt, p, (double)i);
  }
}

const char *qkv_device_name (qkv_device d) {
  return d == QKV_CUDA ? "cuda" : "cpu";
}

/* whether the float v goes into dtype dt (qkv.h): the truncations int64
   and int32 hold are -2^63 <= v < 2^63 (no double lies strictly between
   -2^63 - 1 and -2^63), and -2^31 - 1 < v < 2^31 */
int qkv_fits (qkv_dtype dt, double v) {
  if (dt == QKV_I64) return v >= -0x1p63 && v < 0x1p63;
  if (dt == QKV_I32) return v > -2147483649.0 && v < 0x1p31;
  return 1;
}
