/*
** attention_shape.h -- what vm/cpu/attention.c and vm/cuda/attention.cu check
** alike, once each has taken out's dtype as one it computes in: q, k and v
** of that dtype, a bool mask, and their shapes: out (B..., n_q, d_v) from
** q (B..., n_q, d_k), k (B..., n_k, d_k), v (B..., n_k, d_v) and the mask
** (B..., n_q, n_k), when there is one, all with out's batch dims.
*/
#ifndef QKV_COMMON_ATTENTION_SHAPE_H
#define QKV_COMMON_ATTENTION_SHAPE_H

#include "common.h"

static inline int qkv_attention_shapes_agree (const qkv_tensor *out, const qkv_tensor *q,
                                              const qkv_tensor *k, const qkv_tensor *v,
                                              const qkv_tensor *mask) {
  int nd = out->ndim;
  if (nd < 2 || q->ndim != nd || k->ndim != nd || v->ndim != nd) return 0;
  if (mask && mask->ndim != nd) return 0;
  for (int i = 0; i < nd - 2; i++)
    if (q->size[i] != out->size[i] || k->size[i] != out->size[i] ||
        v->size[i] != out->size[i] || (mask && mask->size[i] != out->size[i]))
      return 0;
  int64_t nq = out->size[nd - 2], dv = out->size[nd - 1];
  int64_t nk = k->size[nd - 2], dk = q->size[nd - 1];
  if (mask && (mask->size[nd - 2] != nq || mask->size[nd - 1] != nk)) return 0;
  return q->size[nd - 2] == nq && k->size[nd - 1] == dk &&
         v->size[nd - 2] == nk && v->size[nd - 1] == dv;
}

/* QKV_EDTYPE, QKV_EINTERNAL (shapes that do not agree) or QKV_OK */
static inline int qkv_attention_check (const qkv_tensor *out, const qkv_tensor *q,
                                       const qkv_tensor *k, const qkv_tensor *v,
                                       const qkv_tensor *mask) {
  if (q->dtype != out->dtype || k->dtype != out->dtype || v->dtype != out->dtype)
    return QKV_EDTYPE;
  if (mask && mask->dtype != QKV_BOOL) return QKV_EDTYPE;
  if (!qkv_attention_shapes_agree(out, q, k, v, mask)) return QKV_EINTERNAL;
  return QKV_OK;
}

#endif
