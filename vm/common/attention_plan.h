/*
** attention_plan.h -- the fused attention's plan, made on the host alike
** for the CPU's kernels (vm/cpu/attention*.c) and the GPU's
** (vm/cuda/attention*.cu), forward and backward: the operands' checks,
** shapes and strides, the mask, causal alignment, the scale, and the
** bounds of the tile loops.  Every kernel reads the plan; none builds its
** own.  Each backend then adds what only its kernels need (the CPU: how
** gemm reads q, k, v; the GPU's kernels take the plan by value as it is,
** and cuDNN's adapter, vm/cuda/cudnn.cpp, the tensors for its
** descriptors).
**
** What the kernels compute, for each batch item b (row-major over the
** batch dims), query i and key j, all counted from 0:
**   s[i][j] = q[i] . k[j], then times scale (each path's own order of
**             the two, as its comment says);
**   kept    = the mask's (i, j) is true, and under causal j <= i + off;
**   out[i]  = sum over kept j of softmax_j(s[i][j]) v[j]; 0 where no key
**             is kept (qkv's convention), also when nk == 0;
**   lse[i]  = log sum over kept j of exp(s[i][j]), natural log; -inf
**             where none is kept.
** Causal is aligned to the last key (the bottom-right diagonal, off = nk -
** nq): the last query keeps every key, and with nq > nk the first nq - nk
** queries keep none.  PyTorch's is_causal is the top-left diagonal; the
** two agree where nq == nk.  The mask is bool, (B..., nq, nk) with any
** strides, 0 included: the dispatch expands a broadcast mask to that shape
** (vm/dispatch/ops_nn.c), so a view's 0 strides are its broadcasting.
** Attention has no dropout here: nn's attention dropout runs on the
** weights of the composed path (stdlib), never in a fused kernel.
**
** Issue 48 (attention variants) extends the plan, not the kernels' own
** set-up: its traced score_mod and mask_mod programs, their captured
** tensors and a block mask's per-tile kinds are carried in the plan
** (see the comment at the end of qkv_attn_plan), the mask_mod joins the
** element test qkv_attn_keeps, and the block mask the tile bounds below
** (qkv_attn_key_end, qkv_attn_query_begin, qkv_attn_tile_cut).  Two
** places compute these tests their own way, for speed: the CPU's AVX
** paths (a tile's diagonal, qkv_attn_diagonal, and the mask by columns,
** attention_job.h) and the tensor-core forward (attention_mma.cu: the
** same tests in int, and the kept keys as bits, for its registers).
*/
#ifndef QKV_COMMON_ATTENTION_PLAN_H
#define QKV_COMMON_ATTENTION_PLAN_H

#include "common.h"

/*
** One of q, k, v, mask, o, go as the kernels read it: element (b, i, j)
** at base + qkv_attn_batch_offset(b) + i rs + j cs, in elements; rows
** are tokens (queries or keys), columns features (the mask: keys).
*/
typedef struct qkv_attn_view {
  const char *base;                 /* element 0 of the view; NULL: none */
  int64_t rs, cs;                   /* strides of rows, columns */
  int64_t bs[QKV_MAXDIM];           /* of the batch dims, 0 where of size 1 */
} qkv_attn_view;

typedef struct qkv_attn_plan {
  qkv_dtype dtype;                  /* q's, k's, v's, out's (o, go and the grads) */
  int nbd;                          /* batch dims, of sizes bsize (1 past nbd) */
  int64_t bsize[QKV_MAXDIM];
  int64_t nbatch, nq, nk, dk, dv;   /* items; queries, keys; their features, v's */
  double scale;
  int causal;
  int64_t off;                      /* causal: query i keeps keys j <= i + off, nk - nq */
  int has_mask;                     /* mask: bool (B..., nq, nk) */
  qkv_attn_view q, k, v, mask;
  /* the forward writes out, contiguous (B..., nq, dv), and lse when not
     NULL: (B..., nq) contiguous, of dtype for float32 and float64, float32
     for float16 and bfloat16.  The backward reads lse when not NULL (what
     the forward left for the same operands; NULL where dv == 0, since the
     forward then wrote nothing), o and go (B..., nq, dv), and writes the
     gradients gq, gk, gv, contiguous, of q's, k's, v's shapes, whole;
     gk and gv grouped when kvg > 1 (qkv_attn_kv_group: item b's keys add
     into item b / kvg) */
  char *out;
  void *lse;
  qkv_attn_view o, go;
  char *gq, *gk, *gv;
  int64_t kvg;                      /* 1, or the group of grouped gk and gv */
  /* the forward's work items, once the backend has chosen its tile of tq
     queries (qkv_attn_tiles): ntiles a batch item, items in all */
  int64_t tq, ntiles, items;
  /* Issue 48 carries here the traced score_mod and mask_mod programs
     (each a compiled expression the kernels evaluate per score), the
     views of the tensors they capture, and a block mask's kinds per
     (query tile, key tile): empty, full or partial.  Nothing yet. */
} qkv_attn_plan;

/* the backend's pointer to a tensor's element 0 (qkv_data on the CPU, a
   wrapper of qkv_cu_data on the GPU: this header calls no qkv code) */
typedef void *(*qkv_attn_data_fn)(const qkv_tensor *t);

/* ---- the checks ---- */

/* out (B..., nq, dv) from q (B..., nq, dk), k (B..., nk, dk), v (B...,
   nk, dv) and the mask (B..., nq, nk), when there is one: one rank, and
   out's batch dims in every one */
static inline int qkv_attn_shapes_agree (const qkv_tensor *out, const qkv_tensor *q,
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

/* a and b of one shape */
static inline int qkv_attn_same_shape (const qkv_tensor *a, const qkv_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->size[i] != b->size[i]) return 0;
  return 1;
}

/*
** Grouped keys (grouped-query heads): how many of out's batch items share
** each item of g, a gradient of k or v of out's rank whose batch dims are
** out's up to some dim and 1 from it on (the trailing ones: out's group),
** so that item b of out adds into item b / G of g.  1 where g has out's
** batch dims, 0 where it has neither form or the group is empty.
*/
static inline int64_t qkv_attn_kv_group (const qkv_tensor *out, const qkv_tensor *g) {
  int nb = out->ndim - 2, s = nb;
  if (g->ndim != out->ndim) return 0;
  while (s > 0 && g->size[s - 1] == 1) s--;
  int64_t G = 1;
  for (int i = 0; i < nb; i++) {
    if (i < s && g->size[i] != out->size[i]) return 0;
    if (i >= s) G *= out->size[i];
  }
  return G;
}

/* ---- making the plan ---- */

/* x = t, a matrix of each of nbd batch dims, its element 0 at base */
static inline void qkv_attn_view_of (qkv_attn_view *x, const qkv_tensor *t, int nbd,
                                     const void *base) {
  int nd = t->ndim;
  x->base = (const char *)base;
  x->rs = t->stride[nd - 2];
  x->cs = t->stride[nd - 1];
  for (int i = 0; i < QKV_MAXDIM; i++)
    x->bs[i] = i < nbd && t->size[i] != 1 ? t->stride[i] : 0;
}

/* what the forward and the backward share: sizes from q, k, v, the batch
   dims from ref (out, or o), the mask, causal and scale */
static inline void qkv_attn_plan_common (qkv_attn_plan *P, const qkv_tensor *ref,
                                         const qkv_tensor *q, const qkv_tensor *k,
                                         const qkv_tensor *v, const qkv_tensor *mask,
                                         int causal, double scale, qkv_attn_data_fn data) {
  int nd = ref->ndim;
  memset(P, 0, sizeof *P);
  P->dtype = ref->dtype;
  P->nbd = nd - 2;
  P->nbatch = 1;
  for (int i = 0; i < QKV_MAXDIM; i++) {
    P->bsize[i] = i < nd - 2 ? ref->size[i] : 1;
    if (i < nd - 2) P->nbatch *= ref->size[i];
  }
  P->nq = q->size[nd - 2];
  P->nk = k->size[nd - 2];
  P->dk = q->size[nd - 1];
  P->dv = v->size[nd - 1];
  P->scale = scale;
  P->causal = causal != 0;
  P->off = P->nk - P->nq;
  qkv_attn_view_of(&P->q, q, P->nbd, data(q));
  qkv_attn_view_of(&P->k, k, P->nbd, data(k));
  qkv_attn_view_of(&P->v, v, P->nbd, data(v));
  if (mask) {
    qkv_attn_view_of(&P->mask, mask, P->nbd, data(mask));
    P->has_mask = 1;
  }
}

/*
** The forward's plan, once the backend has taken out's dtype as one it
** computes in: q, k, v of that dtype and a bool mask (else QKV_EDTYPE),
** of the shapes qkv_attn_shapes_agree says (else QKV_EINTERNAL).  lse:
** NULL, or where the forward leaves its log-sum-exps.
*/
static inline int qkv_attn_plan_forward (qkv_attn_plan *P, qkv_tensor *out,
                                         const qkv_tensor *q, const qkv_tensor *k,
                                         const qkv_tensor *v, const qkv_tensor *mask,
                                         int causal, double scale, qkv_tensor *lse,
                                         qkv_attn_data_fn data) {
  if (q->dtype != out->dtype || k->dtype != out->dtype || v->dtype != out->dtype)
    return QKV_EDTYPE;
  if (mask && mask->dtype != QKV_BOOL) return QKV_EDTYPE;
  if (!qkv_attn_shapes_agree(out, q, k, v, mask)) return QKV_EINTERNAL;
  qkv_attn_plan_common(P, out, q, k, v, mask, causal, scale, data);
  P->out = (char *)data(out);
  P->lse = lse ? data(lse) : NULL;
  return QKV_OK;
}

/*
** The backward's plan: q, k, v, o (out), go (its gradient) and the
** gradients gq, gk, gv of one dtype, the mask bool (else QKV_EDTYPE); o
** and go of out's shape for q, k, v, and each gradient of its input's,
** gk and gv also grouped alike (else QKV_EINTERNAL).  lse as the forward
** left it, or NULL.
*/
static inline int qkv_attn_plan_backward (qkv_attn_plan *P, qkv_tensor *gq, qkv_tensor *gk,
                                          qkv_tensor *gv, const qkv_tensor *q,
                                          const qkv_tensor *k, const qkv_tensor *v,
                                          const qkv_tensor *o, const qkv_tensor *go,
                                          const qkv_tensor *mask, int causal, double scale,
                                          const qkv_tensor *lse, qkv_attn_data_fn data) {
  const qkv_tensor *all[8] = {gq, gk, gv, q, k, v, o, go};
  for (int i = 0; i < 8; i++)
    if (all[i]->dtype != q->dtype) return QKV_EDTYPE;
  if (mask && mask->dtype != QKV_BOOL) return QKV_EDTYPE;
  if (!qkv_attn_shapes_agree(o, q, k, v, mask) || !qkv_attn_same_shape(go, o) ||
      !qkv_attn_same_shape(gq, q))
    return QKV_EINTERNAL;
  int n = o->ndim;
  int64_t G = qkv_attn_kv_group(o, gk);
  if (G < 1 || qkv_attn_kv_group(o, gv) != G ||
      gk->size[n - 2] != k->size[n - 2] || gk->size[n - 1] != k->size[n - 1] ||
      gv->size[n - 2] != v->size[n - 2] || gv->size[n - 1] != v->size[n - 1])
    return QKV_EINTERNAL;
  qkv_attn_plan_common(P, o, q, k, v, mask, causal, scale, data);
  P->kvg = G;
  qkv_attn_view_of(&P->o, o, P->nbd, data(o));
  qkv_attn_view_of(&P->go, go, P->nbd, data(go));
  P->gq = (char *)data(gq);
  P->gk = (char *)data(gk);
  P->gv = (char *)data(gv);
  P->lse = lse && P->dv > 0 ? data(lse) : NULL;
  return QKV_OK;
}

/* the forward's work items: tiles of tq queries of each batch item */
static inline void qkv_attn_tiles (qkv_attn_plan *P, int64_t tq) {
  P->tq = tq;
  P->ntiles = (P->nq + tq - 1) / tq;
  P->items = P->nbatch * P->ntiles;
}

/* ---- reading it ---- */

/* element offset of batch item b in x (row-major over the batch dims) */
static inline QKV_HD int64_t qkv_attn_batch_offset (const qkv_attn_plan *P,
                                                    const qkv_attn_view *x, int64_t b) {
  int64_t off = 0;
  for (int i = P->nbd - 1; i >= 0 && b > 0; i--) {
    off += (b % P->bsize[i]) * x->bs[i];
    b /= P->bsize[i];
  }
  return off;
}

/* the same for q, k, v and the mask at once (one pass of divisions) */
static inline QKV_HD void qkv_attn_batch_offsets (const qkv_attn_plan *P, int64_t b,
                                                  int64_t off[4]) {
  off[0] = off[1] = off[2] = off[3] = 0;
  for (int i = P->nbd - 1; i >= 0; i--) {
    int64_t c = b % P->bsize[i];
    b /= P->bsize[i];
    off[0] += c * P->q.bs[i];
    off[1] += c * P->k.bs[i];
    off[2] += c * P->v.bs[i];
    off[3] += c * P->mask.bs[i];
  }
}

/*
** Work item t: a tile of at most tq queries, from query *i0, of batch item
** *b; returns how many queries.  The tiles of the last queries come first:
** under causal they have the most keys, and a dynamic schedule (the CPU's
** threads, the GPU's blocks) balances best when it hands out the big items
** before the small ones.
*/
static inline QKV_HD int qkv_attn_item (const qkv_attn_plan *P, int64_t t, int64_t *b,
                                        int64_t *i0) {
  *b = t % P->nbatch;
  *i0 = (P->ntiles - 1 - t / P->nbatch) * P->tq;
  return (int)(P->nq - *i0 < P->tq ? P->nq - *i0 : P->tq);
}

/* ---- the tile loops' bounds ---- */

/*
** The keys that queries [i0, i0 + n) can keep are [0, end): end is nk,
** or under causal the last query's last key + 1 when that comes first (0
** or less: none).  Every key tile from 0 can take part; the loops stop at
** end.
*/
static inline QKV_HD int64_t qkv_attn_key_end (const qkv_attn_plan *P, int64_t i0, int64_t n) {
  return P->causal && i0 + n + P->off < P->nk ? i0 + n + P->off : P->nk;
}

/* the first query that can keep key j0 (the backward's loop over query
   tiles for a tile of keys from j0): under causal, j0 - off */
static inline QKV_HD int64_t qkv_attn_query_begin (const qkv_attn_plan *P, int64_t j0) {
  return P->causal && j0 - P->off > 0 ? j0 - P->off : 0;
}

/*
** The causal diagonal of the tile at query i0 and key j0: query i0 + i
** keeps key j0 + j when i >= j + e.  Without causal e is far below any
** i - j, so that every key is kept.
*/
static inline QKV_HD int64_t qkv_attn_diagonal (const qkv_attn_plan *P, int64_t i0, int64_t j0) {
  return P->causal ? j0 - i0 - P->off : -((int64_t)1 << 40);
}

/* how many of a tile's first bk keys its query i keeps (0 to bk), e the
   tile's diagonal */
static inline QKV_HD int qkv_attn_key_limit (int64_t i, int64_t e, int bk) {
  int64_t n = i - e + 1;
  return n < 0 ? 0 : n < bk ? (int)n : bk;
}

/*
** Whether the tile of keys [j0, j0 + bk) is cut for some query from i0
** on: the mask, the keys' end or the causal diagonal drops one of its
** keys, so that its scores need the element test (qkv_attn_keeps).  A
** tile that is not cut keeps every score.
*/
static inline QKV_HD int qkv_attn_tile_cut (const qkv_attn_plan *P, int64_t i0, int64_t j0,
                                            int64_t bk) {
  return P->has_mask || j0 + bk > P->nk || (P->causal && j0 + bk - 1 > i0 + P->off);
}

/*
** Whether query i keeps key j (0-based, both in range) of a batch item
** whose mask starts at mk (NULL: no mask): the element test, where a
** tile is cut.
*/
static inline QKV_HD int qkv_attn_keeps (const qkv_attn_plan *P, const unsigned char *mk,
                                         int64_t i, int64_t j) {
  return (!P->causal || j <= i + P->off) &&
         (mk == NULL || mk[i * P->mask.rs + j * P->mask.cs] != 0);
}

#endif
