/*
** copy.c -- CPU copy with dtype conversion, and fill.
**
** Conversions: to bool is x != 0 (NaN is true); float to int64 or int32
** truncates toward zero, NaN giving 0 and out-of-range values clamping;
** to float16 and bfloat16 through float32, rounding to nearest even
** (half.h); everything else is C's conversion.
*/
#include <string.h>
#include "cpu.h"
#include "iter.h"

#define I32_OF(x) qkv_cpu_d2i32((double)(x))
#define INT32_OF(x) ((int32_t)(x))

/*
** One row function per (dst, src) pair; V(x) is the source element's value
** (a float for the halves).  ROW is MAP (vectorised) for the plain types,
** CALL where a conversion function is called.
*/
#define COPY_FROM(src, TI, V, TO_I64, TO_I32, ROW) \
  ROW(copy_f32_##src, float, TI, (float)V(x)) \
  ROW(copy_f64_##src, double, TI, (double)V(x)) \
  ROW(copy_i64_##src, int64_t, TI, TO_I64(V(x))) \
  ROW(copy_bool_##src, uint8_t, TI, (uint8_t)(V(x) != 0)) \
  ROW(copy_i32_##src, int32_t, TI, TO_I32(V(x))) \
  QKV_ROW_CALL1(copy_f16_##src, uint16_t, TI, qkv_f2h((float)V(x))) \
  QKV_ROW_CALL1(copy_bf16_##src, uint16_t, TI, qkv_f2bf((float)V(x)))

#define SAME(x) (x)
COPY_FROM(f32, float, SAME, qkv_cpu_d2i, I32_OF, QKV_ROW_MAP1)
COPY_FROM(f64, double, SAME, qkv_cpu_d2i, I32_OF, QKV_ROW_MAP1)
COPY_FROM(i64, int64_t, SAME, (int64_t), INT32_OF, QKV_ROW_MAP1)
COPY_FROM(bool, uint8_t, SAME, (int64_t), INT32_OF, QKV_ROW_MAP1)
COPY_FROM(i32, int32_t, SAME, (int64_t), INT32_OF, QKV_ROW_MAP1)
COPY_FROM(f16, uint16_t, qkv_h2f, qkv_cpu_d2i, I32_OF, QKV_ROW_CALL1)
COPY_FROM(bf16, uint16_t, qkv_bf2f, qkv_cpu_d2i, I32_OF, QKV_ROW_CALL1)

#define COPY_ROWS(dst) \
  { copy_##dst##_f32, copy_##dst##_f64, copy_##dst##_i64, copy_##dst##_bool, \
    copy_##dst##_i32, copy_##dst##_f16, copy_##dst##_bf16 }

/* indexed [dst dtype][src dtype] (a half to itself goes through float32:
   exact, but for a signalling NaN, which comes back quiet) */
static const qkv_iter_fn copy_rows[QKV_NDTYPE][QKV_NDTYPE] = {
  COPY_ROWS(f32), COPY_ROWS(f64), COPY_ROWS(i64), COPY_ROWS(bool), COPY_ROWS(i32),
  COPY_ROWS(f16), COPY_ROWS(bf16)
};

int qkv_cpu_copy(qkv_tensor *dst, const qkv_tensor *src) {
  const qkv_tensor *t[2];
  qkv_iter it;
  if ((unsigned)dst->dtype >= QKV_NDTYPE || (unsigned)src->dtype >= QKV_NDTYPE)
    return QKV_EDTYPE;
  t[0] = dst;
  t[1] = src;
  if (qkv_iter_tensors(&it, 2, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, copy_rows[dst->dtype][src->dtype], NULL);
}

/* fill works on the bits: the value is converted once, then stored by width */
#define FILL_ROW(name, T) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    T v, *o = (T *)p[0]; \
    memcpy(&v, ctx, sizeof v); \
    if (s[0] == QKV_CPU_SZ(T)) { \
      QKV_SIMD for (int64_t i = 0; i < n; i++) o[i] = v; \
    } else { \
      const int64_t so = s[0]; \
      char *po = p[0]; \
      for (int64_t i = 0; i < n; i++, po += so) *(T *)po = v; \
    } \
  }

FILL_ROW(fill_1, uint8_t)
FILL_ROW(fill_2, uint16_t)
FILL_ROW(fill_4, uint32_t)
FILL_ROW(fill_8, uint64_t)

int qkv_cpu_fill(qkv_tensor *dst, double v) {
  const qkv_tensor *t[1];
  qkv_cpu_scalar s;
  qkv_iter it;
  qkv_iter_fn fn;
  if ((unsigned)dst->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  s = qkv_cpu_scalar_of(dst->dtype, v);
  switch (qkv_elsize(dst->dtype)) {
    case 1: fn = fill_1; break;
    case 2: fn = fill_2; break;
    case 4: fn = fill_4; break;
    case 8: fn = fill_8; break;
    default: return QKV_EINTERNAL;
  }
  t[0] = dst;
  if (qkv_iter_tensors(&it, 1, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, fn, &s);
}
