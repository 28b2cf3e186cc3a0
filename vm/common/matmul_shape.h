/*
** matmul_shape.h -- what vm/cpu/matmul.c and vm/cuda/matmul.cu check alike
** before a product: out (B..., m, p) = a (B..., m, n) @ b (B..., n, p),
** all of one float dtype, with the same batch dims.
*/
#ifndef QKV_COMMON_MATMUL_SHAPE_H
#define QKV_COMMON_MATMUL_SHAPE_H

#include "common.h"

typedef struct qkv_matmul_dims { int64_t nbatch, m, n, p; } qkv_matmul_dims;

static inline int qkv_matmul_shapes_agree (const qkv_tensor *out, const qkv_tensor *a,
                                           const qkv_tensor *b) {
  int nd = out->ndim;
  if (nd < 2 || a->ndim != nd || b->ndim != nd) return 0;
  for (int i = 0; i < nd - 2; i++)
    if (a->size[i] != out->size[i] || b->size[i] != out->size[i]) return 0;
  return a->size[nd - 2] == out->size[nd - 2] &&
         b->size[nd - 2] == a->size[nd - 1] &&
         b->size[nd - 1] == out->size[nd - 1];
}

/* QKV_EINTERNAL (shapes that do not agree), or QKV_OK with the sizes in
   *d (nbatch: the batch dims' product), whatever the dtypes */
static inline int qkv_matmul_sizes (const qkv_tensor *out, const qkv_tensor *a,
                                    const qkv_tensor *b, qkv_matmul_dims *d) {
  if (!qkv_matmul_shapes_agree(out, a, b)) return QKV_EINTERNAL;
  int nd = out->ndim;
  d->m = out->size[nd - 2];
  d->p = out->size[nd - 1];
  d->n = a->size[nd - 1];
  d->nbatch = 1;
  for (int i = 0; i < nd - 2; i++) d->nbatch *= out->size[i];
  return QKV_OK;
}

/* QKV_EDTYPE unless all three are float32 or all float64, else as
   qkv_matmul_sizes */
static inline int qkv_matmul_check (const qkv_tensor *out, const qkv_tensor *a,
                                    const qkv_tensor *b, qkv_matmul_dims *d) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (a->dtype != out->dtype || b->dtype != out->dtype) return QKV_EDTYPE;
  return qkv_matmul_sizes(out, a, b, d);
}

#endif
