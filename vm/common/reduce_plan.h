/*
** reduce_plan.h -- a reduction's plan, made on the host alike for
** vm/cpu/reduce.c and vm/cuda/reduce.cu: the checks of the operands, the
** reduced dim, and the kept dims, ordered so that the innermost walks a's
** smallest stride (neighbouring lines then share cache lines on the CPU,
** and neighbouring threads read neighbouring memory on the GPU).  Each
** backend then points it at its memory (qkv_redplan_data; the CPU also
** sets ea).  Strides count elements; CUDA kernels take the plan by value.
*/
#ifndef QKV_COMMON_REDUCE_PLAN_H
#define QKV_COMMON_REDUCE_PLAN_H

#include "common.h"
#include "shape.h"

typedef enum { QKV_RED_SUMS, QKV_RED_MOMENTS, QKV_RED_EXTREMA } qkv_redfamily;

typedef struct qkv_redplan {
  qkv_redop op;
  qkv_redfamily fam;
  qkv_dtype dt, odt;          /* a's and out's */
  size_t ea;                  /* a's element size (the CPU's; 0 on the GPU) */
  int64_t n, sa;              /* the reduced dim's length, a's stride there */
  double corr;                /* VAR and STD's correction: over max(0, n - corr) */
  int nd;                     /* the kept dims, smallest a stride last */
  int64_t size[QKV_MAXDIM], as[QKV_MAXDIM], os[QKV_MAXDIM], xs[QKV_MAXDIM];
  int64_t nout;
  const char *a;
  char *o;                    /* values; NULL for ARGMAX/ARGMIN */
  char *x;                    /* positions; NULL when not wanted */
} qkv_redplan;

static inline QKV_HD int qkv_red_is_max (qkv_redop op) {
  return op == QKV_MAX || op == QKV_ARGMAX;
}

static inline int qkv_red_is_arg (qkv_redop op) {
  return op == QKV_ARGMAX || op == QKV_ARGMIN;
}

/* the sums (SUM, MEAN), the moments (VAR, STD) or the extrema */
static inline qkv_redfamily qkv_red_family (qkv_redop op) {
  return op == QKV_SUM || op == QKV_MEAN ? QKV_RED_SUMS :
         op == QKV_VAR || op == QKV_STD ? QKV_RED_MOMENTS : QKV_RED_EXTREMA;
}

/* a is float32, float64, int64 or bool; out (and idx) as the op gives.
   halves: a backend that reads float16 and bfloat16 as float32 (its
   reduce_halves) takes them for the sums and moments into float32 */
static inline int qkv_red_dtypes (qkv_redop op, const qkv_tensor *out,
                                  const qkv_tensor *idx, const qkv_tensor *a, int halves) {
  qkv_dtype t = a->dtype;
  int ft = t == QKV_F32 || t == QKV_F64;
  if (halves && qkv_is_half(t))
    return qkv_red_family(op) != QKV_RED_EXTREMA && out->dtype == QKV_F32;
  if (!ft && t != QKV_I64 && t != QKV_BOOL) return 0;
  switch (op) {
    case QKV_SUM:
      return out->dtype == (t == QKV_BOOL ? QKV_I64 : t);
    case QKV_MEAN: case QKV_VAR: case QKV_STD:
      return ft && (out->dtype == QKV_F32 || out->dtype == QKV_F64);
    case QKV_MAX: case QKV_MIN:
      return out->dtype == t && (idx == NULL || idx->dtype == QKV_I64);
    case QKV_ARGMAX: case QKV_ARGMIN:
      return out->dtype == QKV_I64;
    default:
      return 0;
  }
}

/* t has a's shape with size 1 at dim */
static inline int qkv_red_shape (const qkv_tensor *t, const qkv_tensor *a, int dim) {
  if (t->ndim != a->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (t->size[k] != (k == dim ? 1 : a->size[k])) return 0;
  return 1;
}

/* the dims other than `dim` that have more than one element, smallest a
   stride last; x (out for ARGMAX/ARGMIN, idx, or NULL) gives xs */
static inline void qkv_red_keep_dims (qkv_redplan *P, const qkv_tensor *a,
                                      const qkv_tensor *o, const qkv_tensor *x, int dim) {
  P->nd = 0;
  P->nout = 1;
  for (int k = 0; k < a->ndim; k++) {
    if (k == dim || a->size[k] == 1) continue;
    int j = P->nd++;
    while (j > 0 && qkv_stride_mag(P->as[j - 1]) < qkv_stride_mag(a->stride[k])) {
      P->size[j] = P->size[j - 1]; P->as[j] = P->as[j - 1];
      P->os[j] = P->os[j - 1]; P->xs[j] = P->xs[j - 1];
      j--;
    }
    P->size[j] = a->size[k];
    P->as[j] = a->stride[k];
    P->os[j] = o->stride[k];
    P->xs[j] = x != NULL ? x->stride[k] : 0;
    P->nout *= a->size[k];
  }
}

/*
** The plan of out (and idx: MAX and MIN's positions, or NULL) = op of a
** along dim, with no data yet (a, o and x NULL, ea 0).  QKV_EDTYPE,
** QKV_EINTERNAL (shapes that do not fit, an empty max or min), or QKV_OK;
** P->nout == 0 then leaves nothing to do.  halves: as qkv_red_dtypes;
** corr: VAR and STD's correction (backend.h's reduce).
*/
static inline int qkv_redplan_init (qkv_redplan *P, qkv_redop op, const qkv_tensor *out,
                                    const qkv_tensor *idx, const qkv_tensor *a, int dim,
                                    int halves, double corr) {
  if (op < 0 || op >= QKV_NREDUCE || !qkv_red_dtypes(op, out, idx, a, halves))
    return QKV_EDTYPE;
  if ((a->ndim > 0 && (dim < 0 || dim >= a->ndim)) ||
      !qkv_red_shape(out, a, dim) || (idx && !qkv_red_shape(idx, a, dim)))
    return QKV_EINTERNAL;
  P->op = op;
  P->fam = qkv_red_family(op);
  P->dt = a->dtype;
  P->odt = out->dtype;
  P->ea = 0;
  P->n = a->ndim > 0 ? a->size[dim] : 1;
  P->sa = a->ndim > 0 ? a->stride[dim] : 0;
  P->corr = corr;
  qkv_red_keep_dims(P, a, out,
                    qkv_red_is_arg(op) ? out : P->fam == QKV_RED_EXTREMA ? idx : NULL, dim);
  P->a = NULL;
  P->o = P->x = NULL;
  if (P->nout > 0 && P->n == 0 && P->fam == QKV_RED_EXTREMA) return QKV_EINTERNAL;
  return QKV_OK;
}

/*
** Points the plan at the data: a's (read only when P->n > 0), out's and
** idx's (NULL when there is none).  ARGMAX and ARGMIN write their
** positions to out, MAX and MIN to idx.
*/
static inline void qkv_redplan_data (qkv_redplan *P, const char *a, char *out, char *idx) {
  int arg = qkv_red_is_arg(P->op);
  P->a = a;
  P->o = arg ? NULL : out;
  P->x = arg ? out : P->fam == QKV_RED_EXTREMA ? idx : NULL;
}

#endif
