/*
** elementwise.c -- CPU binary and unary ops, and masked_fill.  The row
** functions are elementwise_rows.h's, compiled here for the baseline and
** in elementwise_avx2.c and elementwise_avx512.c for those sets; the
** tables of the widest set this CPU has (and $QKV_CPU allows) are used.
*/
#include <string.h>
#include "cpu.h"
#include "iter.h"
#include "../common/scalar.h"

#define QKV_ROWS(name) qkv_cpu_##name##_rows_base
#include "elementwise_rows.h"

extern const qkv_iter_fn qkv_cpu_binary_rows_avx2[QKV_NBINARY][QKV_NDTYPE];
extern const qkv_iter_fn qkv_cpu_unary_rows_avx2[QKV_NUNARY][QKV_NDTYPE];
extern const qkv_iter_fn qkv_cpu_binary_rows_avx512[QKV_NBINARY][QKV_NDTYPE];
extern const qkv_iter_fn qkv_cpu_unary_rows_avx512[QKV_NUNARY][QKV_NDTYPE];

#if defined(__x86_64__)
/* entry i of a table, from the widest instruction set's build */
static qkv_iter_fn row_of (const qkv_iter_fn *base, const qkv_iter_fn *avx2,
                           const qkv_iter_fn *avx512, int i) {
  switch (qkv_cpu_isa()) {
    case QKV_ISA_AMX:
    case QKV_ISA_AVX512: return avx512[i];
    case QKV_ISA_AVX2: return avx2[i];
    default: return base[i];
  }
}

#define ROW(table, op, dt) row_of(&qkv_cpu_##table##_rows_base[0][0], \
  &qkv_cpu_##table##_rows_avx2[0][0], &qkv_cpu_##table##_rows_avx512[0][0], \
  (int)(op) * QKV_NDTYPE + (int)(dt))
#else
#define ROW(table, op, dt) qkv_cpu_##table##_rows_base[op][dt]
#endif

int qkv_cpu_binary(int op, qkv_tensor *out, const qkv_tensor *a,
                   const qkv_tensor *b) {
  const qkv_tensor *t[3];
  qkv_iter_fn fn;
  qkv_dtype want;
  qkv_iter it;
  if ((unsigned)op >= QKV_NBINARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  want = qkv_binop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL : a->dtype;
  /* the backend contract: ops.c has already converted the operands */
  if (b->dtype != a->dtype || out->dtype != want) return QKV_EINTERNAL;
  fn = ROW(binary, op, a->dtype);
  if (!fn) return QKV_EDTYPE;
  t[0] = out;
  t[1] = a;
  t[2] = b;
  if (qkv_iter_tensors(&it, 3, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, fn, NULL);
}

int qkv_cpu_unary(int op, qkv_tensor *out, const qkv_tensor *a) {
  const qkv_tensor *t[2];
  qkv_iter_fn fn;
  qkv_dtype want;
  qkv_iter it;
  if ((unsigned)op >= QKV_NUNARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  want = qkv_unop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL : a->dtype;
  if (out->dtype != want) return QKV_EINTERNAL;
  fn = ROW(unary, op, a->dtype);
  if (!fn) return QKV_EDTYPE;
  t[0] = out;
  t[1] = a;
  if (qkv_iter_tensors(&it, 2, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, fn, NULL);
}

/* ---- masked_fill ---- */

/* stores by element width, with v's bits in ctx; the select (rather than
   an if) rewrites unmasked elements with themselves, so it vectorises */
#define MASKED_ROW(name, T) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    T v, *o = (T *)p[0]; \
    const uint8_t *m = (const uint8_t *)p[1]; \
    memcpy(&v, ctx, sizeof v); \
    if (s[0] == QKV_CPU_SZ(T) && s[1] == 1) { \
      QKV_SIMD for (int64_t i = 0; i < n; i++) o[i] = m[i] ? v : o[i]; \
    } else if (s[0] == QKV_CPU_SZ(T) && s[1] == 0) { \
      if (m[0]) { QKV_SIMD for (int64_t i = 0; i < n; i++) o[i] = v; } \
    } else { \
      const int64_t so = s[0], sm = s[1]; \
      char *po = p[0], *pm = p[1]; \
      for (int64_t i = 0; i < n; i++, po += so, pm += sm) \
        if (*pm) *(T *)po = v; \
    } \
  }

MASKED_ROW(masked_1, uint8_t)
MASKED_ROW(masked_2, uint16_t)
MASKED_ROW(masked_4, uint32_t)
MASKED_ROW(masked_8, uint64_t)

int qkv_cpu_masked_fill(qkv_tensor *out, const qkv_tensor *mask, double v) {
  const qkv_tensor *t[2];
  qkv_scalar s;
  qkv_iter_fn fn;
  qkv_iter it;
  if ((unsigned)out->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (mask->dtype != QKV_BOOL) return QKV_EINTERNAL;
  s = qkv_scalar_of(out->dtype, v);
  switch (qkv_elsize(out->dtype)) {
    case 1: fn = masked_1; break;
    case 2: fn = masked_2; break;
    case 4: fn = masked_4; break;
    case 8: fn = masked_8; break;
    default: return QKV_EINTERNAL;
  }
  t[0] = out;
  t[1] = mask;
  if (qkv_iter_tensors(&it, 2, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, fn, &s);
}
