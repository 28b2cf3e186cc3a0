/*
** shape.h -- how both backends read a tensor's shape around one dim: a
** stride's magnitude, the last dim, the (outer, n, inner) of a contiguous
** tensor, and the rows along a dim of a strided one.  A 0-d tensor is one
** element: its dim has length 1.
*/
#ifndef QKV_COMMON_SHAPE_H
#define QKV_COMMON_SHAPE_H

#include "common.h"

/* how far a stride steps, either way */
static inline int64_t qkv_stride_mag (int64_t s) { return s < 0 ? -s : s; }

static inline int64_t qkv_last_size (const qkv_tensor *t) {
  return t->ndim ? t->size[t->ndim - 1] : 1;
}

static inline int64_t qkv_last_stride (const qkv_tensor *t) {
  return t->ndim ? t->stride[t->ndim - 1] : 0;
}

/* contiguous x seen as (outer, n, inner) around dim */
static inline void qkv_extent (const qkv_tensor *x, int dim, int64_t *outer,
                               int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  *n = x->ndim ? x->size[dim] : 1;
  for (int i = 0; i < x->ndim; i++) {
    if (i < dim) *outer *= x->size[i];
    if (i > dim) *inner *= x->size[i];
  }
}

/*
** The rows of x and out (one shape, any strides) along dim: n elements,
** xs apart in x and os apart in out; row r is the r-th of the other dims'
** positions in row-major order.  Passed to CUDA kernels by value.
*/
typedef struct qkv_rows {
  int64_t n, xs, os;          /* a row: its length, its strides */
  int nd;                     /* the other dims, outermost first */
  int64_t size[QKV_MAXDIM], xstride[QKV_MAXDIM], ostride[QKV_MAXDIM];
} qkv_rows;

static inline void qkv_rows_init (qkv_rows *R, const qkv_tensor *out,
                                  const qkv_tensor *x, int dim) {
  R->n = x->ndim ? x->size[dim] : 1;
  R->xs = x->ndim ? x->stride[dim] : 1;
  R->os = out->ndim ? out->stride[dim] : 1;
  R->nd = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (i == dim) continue;
    R->size[R->nd] = x->size[i];
    R->xstride[R->nd] = x->stride[i];
    R->ostride[R->nd] = out->stride[i];
    R->nd++;
  }
}

/* where row r starts: its first element's offsets in x and in out */
static inline QKV_HD void qkv_row_start (const qkv_rows *R, int64_t r,
                                         int64_t *xo, int64_t *oo) {
  *xo = *oo = 0;
  for (int i = R->nd - 1; i >= 0 && r > 0; i--) {
    int64_t j = r % R->size[i];
    r /= R->size[i];
    *xo += j * R->xstride[i];
    *oo += j * R->ostride[i];
  }
}

#endif
