/*
** attention.c -- device dispatch of attention: the fused forward (with
** its log-sum-exps), the composed path that keeps the weights, the
** backward, and the variants' forward, backward and block kinds (the
** score_mod/mask_mod programs of vm/common/mods.h).  q, k, v and the
** mask are expanded to the output's batch dims and made of its dtype
** here; the halves run natively where the backend can, else in float32.
*/
#include <math.h>
#include <string.h>

#include "../core/qkv.h"
#include "../core/backend.h"
#include "../common/attention_plan.h"
#include "../common/layout.h"
#include "../common/mods.h"
#include "ops.h"

static int attention_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *q,
                         const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                         int causal, double scale, qkv_tensor *lse, qkv_attn_mods *M) {
  int err, n = out->ndim;
  int64_t nq = out->size[n - 2], nk = k->size[k->ndim - 2];
  int64_t sq[QKV_MAXDIM], sk[QKV_MAXDIM], sv[QKV_MAXDIM], sm[QKV_MAXDIM];
  for (int i = 0; i < n - 2; i++) sq[i] = sk[i] = sv[i] = sm[i] = out->size[i];
  sq[n - 2] = nq; sq[n - 1] = q->size[q->ndim - 1];
  sk[n - 2] = nk; sk[n - 1] = k->size[k->ndim - 1];
  sv[n - 2] = nk; sv[n - 1] = v->size[v->ndim - 1];
  sm[n - 2] = nq; sm[n - 1] = nk;
  qkv_tensor x, y, z, m, *pm = NULL;
  qkv_storage *tx = NULL, *ty = NULL, *tz = NULL, *tm = NULL;
  qkv_tensor lq = *q, lk = *k, lv = *v;
  /* the dtype first, at the operands' own sizes; then expand */
  err = qkv_op_operand(&lq, &tx, q, q, out->dtype);
  if (err == QKV_OK) err = qkv_op_operand(&lk, &ty, k, k, out->dtype);
  if (err == QKV_OK) err = qkv_op_operand(&lv, &tz, v, v, out->dtype);
  if (err == QKV_OK && mask) {
    err = qkv_op_operand(&m, &tm, mask, mask, QKV_BOOL);
    pm = &m;
  }
  if (err == QKV_OK && (qkv_expand(&x, &lq, n, sq) || qkv_expand(&y, &lk, n, sk) ||
                        qkv_expand(&z, &lv, n, sv) || (pm && qkv_expand(pm, &m, n, sm))))
    err = QKV_EINTERNAL;
  if (err == QKV_OK && M)
    err = be->attention_mods ? be->attention_mods(out, &x, &y, &z, pm, causal, scale, lse, M)
                             : QKV_ENODEV;
  else if (err == QKV_OK) err = be->attention(out, &x, &y, &z, pm, causal, scale, lse);
  qkv_storage_release(tx);
  qkv_storage_release(ty);
  qkv_storage_release(tz);
  qkv_storage_release(tm);
  return err;
}

/* whether lse fits as the forward's log-sum-exps of o: one per query, of
   dtype dt, contiguous, on o's device */
static int lse_fits (const qkv_tensor *lse, const qkv_tensor *o, qkv_dtype dt) {
  return lse->dtype == dt && qkv_is_contiguous(lse) && lse->ndim == o->ndim - 1 &&
         memcmp(lse->size, o->size, sizeof(int64_t) * (size_t)lse->ndim) == 0 &&
         lse->storage->device == o->storage->device;
}

/* qkv_attention, and qkv_attention_lse's with lse (checked by it) */
static int attention_with (qkv_tensor *out, qkv_tensor *lse, const qkv_tensor *q,
                           const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                           int causal, double scale, qkv_attn_mods *M) {
  int err;
  qkv_tensor t, *o, m;
  qkv_storage *tm = NULL;
  const qkv_backend *be = qkv_op_backend(out, q, k, &err);
  if (be == NULL || (be = qkv_op_backend(out, v, mask, &err)) == NULL) return err;
  /* a mask of another dtype made bool once, for both tries below */
  if (mask && mask->dtype != QKV_BOOL) {
    if ((err = qkv_op_convert(&m, mask, QKV_BOOL)) != QKV_OK) return err;
    tm = m.storage;
    mask = &m;
  }
  /* float16 and bfloat16 natively where the backend can (the GPU's tensor
     cores: QKV_EDTYPE otherwise), else computed in float32 */
  err = QKV_EDTYPE;
  if (qkv_is_half(out->dtype))
    err = attention_in(be, out, q, k, v, mask, causal, scale, lse, M);
  if (err == QKV_EDTYPE && (err = qkv_op_computed(out, &t, &o)) == QKV_OK)
    err = qkv_op_done(attention_in(be, o, q, k, v, mask, causal, scale, lse, M), be, out, o);
  qkv_storage_release(tm);
  return err;
}

int qkv_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                   const qkv_tensor *v, const qkv_tensor *mask, int causal,
                   double scale) {
  return attention_with(out, NULL, q, k, v, mask, causal, scale, NULL);
}

/* lse of out's compute dtype: float32 for the halves, which a backend
   computing them natively writes as it does for float32 */
int qkv_attention_lse (qkv_tensor *out, qkv_tensor *lse, const qkv_tensor *q,
                       const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                       int causal, double scale) {
  int err;
  if (qkv_op_backend(out, lse, NULL, &err) == NULL) return err;
  if (!qkv_is_float(out->dtype) || !lse_fits(lse, out, qkv_compute_dtype(out->dtype)))
    return QKV_EINTERNAL;
  return attention_with(out, lse, q, k, v, mask, causal, scale, NULL);
}

/* each captured tensor, gradient sum, the kinds and spans on out's backend */
static int mods_fit (const qkv_tensor *out, const qkv_attn_mods *M) {
  int err;
  if (M->prog == NULL || M->ncap < 0 || M->ncap > QKV_MOD_MAXCAP) return QKV_EINTERNAL;
  for (int c = 0; c < M->ncap; c++)
    if (qkv_op_backend(out, M->capt[c], M->gradt[c], &err) == NULL) return err;
  if (M->kindt && qkv_op_backend(out, M->kindt, M->spant, &err) == NULL) return err;
  if (M->spant && !M->kindt) return QKV_EINTERNAL;
  return QKV_OK;
}

int qkv_attention_mods (qkv_tensor *out, qkv_tensor *lse, const qkv_tensor *q,
                        const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                        int causal, double scale, qkv_attn_mods *M) {
  int err;
  if (qkv_op_backend(out, lse, NULL, &err) == NULL || (err = mods_fit(out, M)) != QKV_OK)
    return err;
  if (!qkv_is_float(out->dtype) || !lse_fits(lse, out, qkv_compute_dtype(out->dtype)))
    return QKV_EINTERNAL;
  return attention_with(out, lse, q, k, v, mask, causal, scale, M);
}

int qkv_attention_blocks (qkv_attn_mods *M, qkv_tensor *kinds, qkv_tensor *spans,
                          int64_t nq, int64_t nk, int64_t bq, int64_t bk, int *runs) {
  int err;
  *runs = 0;
  const qkv_backend *be = qkv_op_backend(kinds, spans, NULL, &err);
  if (be == NULL || (err = mods_fit(kinds, M)) != QKV_OK) return err;
  if (kinds->dtype != QKV_I32 || !qkv_is_contiguous(kinds) || kinds->ndim != 4 ||
      bq < 1 || bk < 1 || kinds->size[2] != (nq + bq - 1) / bq ||
      kinds->size[3] != (nk + bk - 1) / bk)
    return QKV_EINTERNAL;
  if (spans && (spans->dtype != QKV_I32 || !qkv_is_contiguous(spans) || spans->ndim != 4 ||
                spans->size[0] != kinds->size[0] || spans->size[1] != kinds->size[1] ||
                spans->size[2] != nq || spans->size[3] != 2))
    return QKV_EINTERNAL;
  return be->attention_blocks ? be->attention_blocks(M, kinds, spans, nq, nk, bq, bk, runs)
                              : QKV_ENODEV;
}

/*
** The composed attention, which keeps its weights: each step an op of
** this layer, so that it runs on any device and in any float dtype as
** those ops do, and gives the numbers the steps would give one by one.
*/

/* w gets -inf where keep (any dtype, nonzero = keep, broadcast to w) is
   false or 0: its negation first, a bool of keep's shape */
static int fill_unkept (qkv_tensor *w, const qkv_tensor *keep) {
  qkv_tensor off;
  int err = qkv_op_fresh(&off, keep, QKV_BOOL);
  if (err != QKV_OK) return err;
  if ((err = qkv_fill(&off, 1)) == QKV_OK && (err = qkv_masked_fill(&off, keep, 0)) == QKV_OK)
    err = qkv_masked_fill(w, &off, -INFINITY);
  qkv_storage_release(off.storage);
  return err;
}

/* w (..., nq, nk) gets -inf past the causal diagonal, key j > i + nk - nq
   for query i, the mask made on w's device */
static int fill_causal (qkv_tensor *w) {
  int n = w->ndim;
  int64_t size[2] = {w->size[n - 2], w->size[n - 1]};
  qkv_tensor like = *w, off;
  qkv_set_contiguous(&like, 2, size);
  int err = qkv_op_fresh(&off, &like, QKV_BOOL);
  if (err != QKV_OK) return err;
  if ((err = qkv_causal(&off, size[1] - size[0], 0)) == QKV_OK)
    err = qkv_masked_fill(w, &off, -INFINITY);
  qkv_storage_release(off.storage);
  return err;
}

int qkv_attention_weights (qkv_tensor *out, qkv_tensor *w, const qkv_tensor *q,
                           const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                           int causal, double scale) {
  int err, n = w->ndim;
  const qkv_backend *be = qkv_op_backend(w, q, k, &err);
  if (be == NULL || (be = qkv_op_backend(out, v, mask, &err)) == NULL ||
      (be = qkv_op_backend(out, w, NULL, &err)) == NULL) return err;
  if (n < 2 || out->ndim != n || q->ndim < 2 || q->ndim > n || k->ndim < 2 || k->ndim > n ||
      v->ndim < 2 || v->ndim > n) return QKV_EINTERNAL;
  /* q seen with every batch dim of w (a view), so that the product
     gives w's, which the mask may widen past q's and k's */
  int64_t size[QKV_MAXDIM];
  memcpy(size, w->size, sizeof size);
  size[n - 1] = q->size[q->ndim - 1];
  qkv_tensor qe, kt;
  if (qkv_expand(&qe, q, n, size) != 0) return QKV_EINTERNAL;
  qkv_view_transpose(&kt, k, k->ndim - 2, k->ndim - 1);
  if ((err = qkv_matmul(w, &qe, &kt, scale)) != QKV_OK ||
      (mask && (err = fill_unkept(w, mask)) != QKV_OK) ||
      (causal && (err = fill_causal(w)) != QKV_OK) ||
      (err = qkv_softmax(w, w, n - 1)) != QKV_OK)
    return err;
  return qkv_matmul(out, w, v, 1);
}

/* x broadcast to (batch of o..., rows, cols), of dtype dt and contiguous,
   or with rows as gemm reads them (layout.h) where the backend takes that
   (rows): x itself when it is so already, else a copy released through
   *tmp */
static int full (qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *x, const qkv_tensor *o,
                 qkv_dtype dt, int rows) {
  qkv_tensor like = *o, e;
  like.size[o->ndim - 2] = x->size[x->ndim - 2];
  like.size[o->ndim - 1] = x->size[x->ndim - 1];
  *tmp = NULL;
  if (qkv_expand(&e, x, like.ndim, like.size) != 0) return QKV_EINTERNAL;
  int n = e.ndim, ld;
  if (rows && e.dtype == dt &&
      qkv_gemm_layout(e.size[n - 2], e.size[n - 1], e.stride[n - 2], e.stride[n - 1], &ld) ==
        QKV_BYROW) {
    *dst = e;                                   /* its rows as they lie */
    return QKV_OK;
  }
  return qkv_op_contiguous_as(dst, tmp, &e, dt);
}

/* dk's and dv's batch dims: out's, but 1 over the trailing dims where k and
   v both broadcast (the group of grouped-query heads) */
void qkv_attention_kv_grad_batch (int64_t *size, const qkv_tensor *o, const qkv_tensor *k,
                                  const qkv_tensor *v) {
  int nb = o->ndim - 2, s = nb;
  while (s > 0) {
    int ik = s - 1 - (o->ndim - k->ndim), iv = s - 1 - (o->ndim - v->ndim);
    if ((ik >= 0 && k->size[ik] != 1) || (iv >= 0 && v->size[iv] != 1) ||
        o->size[s - 1] == 0)
      break;                        /* (an empty group would leave dk unwritten) */
    s--;
  }
  for (int i = 0; i < nb; i++) size[i] = i < s ? o->size[i] : 1;
}

/* the backend's backward (the variants' where M is given) into dq, dk, dv */
static int backward_call (const qkv_backend *be, qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                          const qkv_tensor x[5], const qkv_tensor *mask, int causal,
                          double scale, const qkv_tensor *lse, qkv_attn_mods *M) {
  if (M)
    return be->attention_mods_backward
        ? be->attention_mods_backward(dq, dk, dv, &x[0], &x[1], &x[2], &x[3], &x[4], mask,
                                      causal, scale, lse, M)
        : QKV_ENODEV;
  return be->attention_backward(dq, dk, dv, &x[0], &x[1], &x[2], &x[3], &x[4], mask, causal,
                                scale, lse);
}

/* w: a fresh tensor like g (dk or dv, grouped: qkv_attn_kv_group) but of
   out's batch dims, for a backend that writes whole ones; summed into g
   group by group after */
static int whole_of (qkv_tensor *w, const qkv_tensor *g, const qkv_tensor *o) {
  qkv_tensor like = *g;
  int n = o->ndim;
  memcpy(like.size, o->size, sizeof(int64_t) * (size_t)(n - 2));
  return qkv_op_fresh(w, &like, g->dtype);
}

static int sum_groups (qkv_tensor *g, const qkv_tensor *w, int64_t G) {
  int n = g->ndim;
  int64_t row = g->size[n - 2] * g->size[n - 1];
  if (qkv_numel(g) == 0) return QKV_OK;
  int64_t from[3] = {qkv_numel(g) / row, G, row}, to[3] = {qkv_numel(g) / row, 1, row};
  qkv_tensor a, b;
  if (qkv_view_reshape(&a, w, 3, from) != 0 || qkv_view_reshape(&b, g, 3, to) != 0)
    return QKV_EINTERNAL;
  return qkv_reduce(QKV_SUM, &b, NULL, &a, 1);
}

/* the backward in dt (q..go converted to it where they are not), with
   dq, dk, dv of dt; lse checked by the caller.  dk and dv grouped (a
   grouped-query call's) go to a backend that takes them as they are;
   another writes whole ones, summed here into them */
static int backward_in (const qkv_backend *be, qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                        const qkv_tensor *const in[5], const qkv_tensor *mask, int causal,
                        double scale, const qkv_tensor *lse, qkv_attn_mods *M) {
  int err = QKV_OK;
  qkv_dtype dt = dq->dtype;
  const qkv_tensor *o = in[3];
  qkv_tensor x[5], m, like = *o;
  qkv_storage *tm = NULL, *tx[5] = {NULL, NULL, NULL, NULL, NULL};
  for (int i = 0; i < 5 && err == QKV_OK; i++)
    err = full(&x[i], &tx[i], in[i], o, dt, be->attention_backward_rows);
  like.size[o->ndim - 1] = in[1]->size[in[1]->ndim - 2];
  if (err == QKV_OK && mask) err = qkv_op_operand(&m, &tm, mask, &like, QKV_BOOL);
  int64_t G = qkv_attn_kv_group(o, dk);
  if (err == QKV_OK && (G <= 1 || be->attention_backward_groups))
    err = backward_call(be, dq, dk, dv, x, mask ? &m : NULL, causal, scale, lse, M);
  else if (err == QKV_OK) {
    qkv_tensor wk, wv;
    wv.storage = NULL;
    err = whole_of(&wk, dk, o);
    if (err == QKV_OK) err = whole_of(&wv, dv, o);
    if (err == QKV_OK)
      err = backward_call(be, dq, &wk, &wv, x, mask ? &m : NULL, causal, scale, lse, M);
    if (err == QKV_OK) err = sum_groups(dk, &wk, G);
    if (err == QKV_OK) err = sum_groups(dv, &wv, G);
    qkv_storage_release(wk.storage);
    qkv_storage_release(wv.storage);
  }
  for (int i = 0; i < 5; i++) qkv_storage_release(tx[i]);
  qkv_storage_release(tm);
  return err;
}

/* backward_in in dq's dtype; the halves natively where the backend can
   (QKV_EDTYPE otherwise), else in float32 copies converted back */
static int backward_as (const qkv_backend *be, qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                        const qkv_tensor *const in[5], const qkv_tensor *mask, int causal,
                        double scale, const qkv_tensor *lse, qkv_attn_mods *M) {
  int err = QKV_EDTYPE;
  if (dq->dtype != QKV_F16 && dq->dtype != QKV_BF16)
    return backward_in(be, dq, dk, dv, in, mask, causal, scale, lse, M);
  if ((err = backward_in(be, dq, dk, dv, in, mask, causal, scale, lse, M)) != QKV_EDTYPE)
    return err;
  qkv_tensor t[3], *g[3], *out[3] = {dq, dk, dv};
  int made = 0;
  for (err = QKV_OK; made < 3 && err == QKV_OK; made++) err = qkv_op_computed(out[made], &t[made], &g[made]);
  if (err == QKV_OK) err = backward_in(be, g[0], g[1], g[2], in, mask, causal, scale, lse, M);
  for (int i = 0; i < made; i++) err = qkv_op_done(err, be, out[i], g[i]);
  return err;
}

/* float16 and bfloat16 natively where the backend can (QKV_EDTYPE
   otherwise), else in float32 copies converted back; lse (float32 for the
   halves) is what the forward left */
int qkv_attention_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                            const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                            const qkv_tensor *o, const qkv_tensor *go,
                            const qkv_tensor *mask, int causal, double scale,
                            const qkv_tensor *lse) {
  int err;
  const qkv_backend *be = qkv_op_backend(dq, q, k, &err);
  if (be == NULL || (be = qkv_op_backend(dk, v, o, &err)) == NULL ||
      (be = qkv_op_backend(dv, go, mask, &err)) == NULL) return err;
  qkv_dtype dt = dq->dtype;
  int half = qkv_is_half(dt);
  if ((dt != QKV_F32 && dt != QKV_F64 && !half) || dk->dtype != dt || dv->dtype != dt ||
      !qkv_is_contiguous(dq) || !qkv_is_contiguous(dk) || !qkv_is_contiguous(dv))
    return QKV_EINTERNAL;
  if (lse && !lse_fits(lse, o, qkv_compute_dtype(dt))) return QKV_EINTERNAL;
  const qkv_tensor *in[5] = {q, k, v, o, go};
  return backward_as(be, dq, dk, dv, in, mask, causal, scale, lse, NULL);
}


/* as qkv_attention_backward, with the forward's lse (float32 for the
   halves): they run natively where the backend can (QKV_EDTYPE
   otherwise), else in float32 copies converted back */
int qkv_attention_mods_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                 const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                 const qkv_tensor *o, const qkv_tensor *go,
                                 const qkv_tensor *mask, int causal, double scale,
                                 const qkv_tensor *lse, qkv_attn_mods *M) {
  int err;
  const qkv_backend *be = qkv_op_backend(dq, q, k, &err);
  if (be == NULL || (be = qkv_op_backend(dk, v, o, &err)) == NULL ||
      (be = qkv_op_backend(dv, go, mask, &err)) == NULL ||
      (be = qkv_op_backend(dq, lse, NULL, &err)) == NULL || (err = mods_fit(dq, M)) != QKV_OK)
    return err;
  qkv_dtype dt = dq->dtype;
  int half = qkv_is_half(dt);
  if ((dt != QKV_F32 && dt != QKV_F64 && !half) || dk->dtype != dt || dv->dtype != dt ||
      !qkv_is_contiguous(dq) || !qkv_is_contiguous(dk) || !qkv_is_contiguous(dv) ||
      !lse_fits(lse, o, qkv_compute_dtype(dt)))
    return QKV_EINTERNAL;
  const qkv_tensor *in[5] = {q, k, v, o, go};
  return backward_as(be, dq, dk, dv, in, mask, causal, scale, lse, M);
}
