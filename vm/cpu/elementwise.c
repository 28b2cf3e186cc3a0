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

/*
** float32 and the halves mixed (backend.h's elementwise_halves): the op's
** float32 row over runs of STAGE elements, each half operand converted
** into a buffer on the stack first and a half out rounded from one after.
** An op on bfloat16 is then one pass with no temporaries, where converted
** copies of the operands and of out took four passes and three tensors
** (MiniLM's GELU under autocast: 2x float32's time); the values are the
** copies': exact conversions, the float32 op, one rounding.
*/
#define STAGE 256

typedef struct {
  int nop;
  qkv_iter_fn fn;                          /* the op's float32 row */
  qkv_iter_fn conv[QKV_ITER_MAXOP];        /* [0]: float32 into out; others into float32; NULL: as is */
} staged;

static void staged_row(int64_t n, char **p, const int64_t *s, void *ctx) {
  const staged *S = ctx;
  float buf[QKV_ITER_MAXOP][STAGE];
  char *q[QKV_ITER_MAXOP], *c[2];
  int64_t qs[QKV_ITER_MAXOP], cs[2];
  for (int64_t i = 0; i < n; i += STAGE) {
    int64_t m = n - i < STAGE ? n - i : STAGE;
    for (int k = 0; k < S->nop; k++) {
      q[k] = p[k] + i * s[k];
      qs[k] = s[k];
      if (k == 0 || S->conv[k] == NULL) continue;
      /* a broadcast operand (stride 0) is one element */
      c[0] = (char *)buf[k], c[1] = q[k], cs[0] = 4, cs[1] = s[k];
      S->conv[k](s[k] ? m : 1, c, cs, NULL);
      q[k] = (char *)buf[k];
      qs[k] = s[k] ? 4 : 0;
    }
    if (S->conv[0]) q[0] = (char *)buf[0], qs[0] = 4;
    S->fn(m, q, qs, NULL);
    if (S->conv[0]) {
      c[0] = p[0] + i * s[0], c[1] = (char *)buf[0], cs[0] = s[0], cs[1] = 4;
      S->conv[0](m, c, cs, NULL);
    }
  }
}

/* t[0] = fn(t[1..nop-1]): fn the row of the operands' dtype (dt), or of
   float32 staged where some operand is a half (t[0] may be bool) */
static int run(int nop, const qkv_tensor *const *t, qkv_iter_fn fn, qkv_dtype dt) {
  qkv_iter it;
  staged S = {nop, fn, {NULL}};
  if (!fn) return QKV_EDTYPE;
  if (qkv_iter_tensors(&it, nop, t) != 0) return QKV_EINTERNAL;
  if (dt != QKV_F32) return qkv_iter_run(&it, fn, NULL);
  for (int k = 0; k < nop; k++) {
    if (!qkv_is_half(t[k]->dtype)) continue;
    S.conv[k] = k == 0 ? qkv_cpu_copy_row(t[k]->dtype, QKV_F32)
                       : qkv_cpu_copy_row(QKV_F32, t[k]->dtype);
    fn = staged_row;
  }
  return qkv_iter_run(&it, fn, fn == staged_row ? &S : NULL);
}

int qkv_cpu_binary(int op, qkv_tensor *out, const qkv_tensor *a,
                   const qkv_tensor *b) {
  const qkv_tensor *t[3] = {out, a, b};
  if ((unsigned)op >= QKV_NBINARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  int dt = qkv_op_compute_dtype(3, t, qkv_binop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL
                                                                             : a->dtype);
  if (dt < 0) return QKV_EINTERNAL;
  return run(3, t, ROW(binary, op, dt), (qkv_dtype)dt);
}

int qkv_cpu_unary(int op, qkv_tensor *out, const qkv_tensor *a) {
  const qkv_tensor *t[2] = {out, a};
  if ((unsigned)op >= QKV_NUNARY) return QKV_EINTERNAL;
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  int dt = qkv_op_compute_dtype(2, t, qkv_unop_result(op) == QKV_RESULT_BOOL ? QKV_BOOL
                                                                            : a->dtype);
  if (dt < 0) return QKV_EINTERNAL;
  return run(2, t, ROW(unary, op, dt), (qkv_dtype)dt);
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
