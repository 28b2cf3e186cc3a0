/*
** ops_nn.c -- device dispatch of the ops over rows and positions: where,
** gather, sort, softmax, log_softmax, layer_norm, rms_norm, cumsum, tri and
** attention (ops.c has the rest, and the helpers of ops.h).  An out of a
** dtype that is stored but not computed (int32, the halves) is computed
** in its compute dtype and converted back.
*/
#include <math.h>
#include <string.h>

#include "../core/qkv.h"
#include "../core/backend.h"
#include "../common/layout.h"
#include "ops.h"
#include "../common/mods.h"

/* selection */

static int where_on (qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                     const qkv_tensor *b);

int qkv_where (qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
               const qkv_tensor *b) {
  qkv_tensor la, lb;
  qkv_device d = out->storage->device;
  int err = qkv_op_lift(&a, &la, d);
  if (err == QKV_OK && (err = qkv_op_lift(&b, &lb, d)) == QKV_OK) {
    err = where_on(out, cond, a, b);
    qkv_op_unlift(b, &lb);
  }
  qkv_op_unlift(a, &la);
  return err;
}

static int where_on (qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                     const qkv_tensor *b) {
  int err;
  const qkv_backend *be = qkv_op_backend(out, a, b, &err);
  if (be == NULL || (be = qkv_op_backend(out, cond, NULL, &err)) == NULL) return err;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  qkv_tensor c, x, y;
  qkv_storage *tc, *tx = NULL, *ty = NULL;
  err = qkv_op_input(&c, &tc, cond, out, QKV_BOOL);
  if (err == QKV_OK) err = qkv_op_input(&x, &tx, a, out, out->dtype);
  if (err == QKV_OK) err = qkv_op_input(&y, &ty, b, out, out->dtype);
  if (err == QKV_OK) err = be->where(out, &c, &x, &y);
  qkv_storage_release(tc);
  qkv_storage_release(tx);
  qkv_storage_release(ty);
  return err;
}

int qkv_gather (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim) {
  int err;
  const qkv_backend *be = qkv_op_backend(out, a, idx, &err);
  if (be == NULL) return err;
  if (a->dtype != out->dtype || idx->dtype != QKV_I64 || idx->ndim != out->ndim ||
      a->ndim != out->ndim || dim < 0 || dim >= out->ndim)
    return QKV_EINTERNAL;
  for (int d = 0; d < out->ndim; d++)
    if (idx->size[d] != out->size[d] || (d != dim && a->size[d] < out->size[d]))
      return QKV_EINTERNAL;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  return be->gather(out, a, idx, dim);
}

int qkv_scatter_add (qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim) {
  int err;
  const qkv_backend *be = qkv_op_backend(out, idx, src, &err);
  if (be == NULL) return err;
  if (src->dtype != out->dtype || idx->dtype != QKV_I64 || idx->ndim != src->ndim ||
      src->ndim != out->ndim || dim < 0 || dim >= out->ndim)
    return QKV_EINTERNAL;
  for (int d = 0; d < out->ndim; d++)
    if (idx->size[d] != src->size[d] || (d != dim && src->size[d] > out->size[d]))
      return QKV_EINTERNAL;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  /* a src in out's storage is read whole first */
  qkv_tensor c = *src;
  if (c.storage == out->storage && (err = qkv_op_convert(&c, src, src->dtype)) != QKV_OK)
    return err;
  err = be->scatter_add(out, idx, &c, dim);
  if (c.storage != src->storage) qkv_storage_release(c.storage);
  return err;
}

int qkv_sort (qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int dim,
              int descending) {
  int err;
  const qkv_backend *be = qkv_op_backend(values, indices, a, &err);
  if (be == NULL) return err;
  if (values->dtype != a->dtype || indices->dtype != QKV_I64) return QKV_EINTERNAL;
  if (qkv_op_self_overlapping(values) || qkv_op_self_overlapping(indices)) return QKV_EOVERLAP;
  qkv_tensor x = *a, v = *values, ix = *indices;
  if (a->ndim > 0) {              /* the sorted dim last: each row is a line */
    qkv_view_transpose(&x, a, dim, a->ndim - 1);
    qkv_view_transpose(&v, values, dim, a->ndim - 1);
    qkv_view_transpose(&ix, indices, dim, a->ndim - 1);
  }
  return be->sort(&v, &ix, &x, descending);
}


/* rows */

static int softmax_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *x,
                       int dim) {
  qkv_tensor y;
  qkv_storage *ty;
  int err = qkv_op_operand(&y, &ty, x, out, out->dtype);
  if (err == QKV_OK) err = be->softmax(out, &y, dim);
  qkv_storage_release(ty);
  return err;
}

int qkv_softmax (qkv_tensor *out, const qkv_tensor *x, int dim) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, x, NULL, &err);
  if (be == NULL || (err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(softmax_in(be, o, x, dim), be, out, o);
}

static int log_softmax_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *x,
                           int dim) {
  int err;
  if (!qkv_is_float(out->dtype)) return QKV_EDTYPE;
  int lastd = x->ndim ? x->ndim - 1 : 0;
  qkv_tensor xt = *x, ot = *out, c, o;
  qkv_storage *tx;
  if (x->ndim) {                            /* dim last; rows contiguous */
    qkv_view_transpose(&xt, x, dim, lastd);
    qkv_view_transpose(&ot, out, dim, lastd);
  }
  if ((err = qkv_op_contiguous_as(&c, &tx, &xt, out->dtype)) != QKV_OK) return err;
  if (qkv_is_contiguous(&ot)) err = be->log_softmax(&ot, &c);
  else if ((err = qkv_op_fresh(&o, &c, out->dtype)) == QKV_OK) {  /* then moved back */
    err = be->log_softmax(&o, &c);
    if (err == QKV_OK) err = be->copy(&ot, &o);
    qkv_storage_release(o.storage);
  }
  qkv_storage_release(tx);
  return err;
}

int qkv_log_softmax (qkv_tensor *out, const qkv_tensor *x, int dim) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, x, NULL, &err);
  if (be == NULL || (err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(log_softmax_in(be, o, x, dim), be, out, o);
}

/* the rows of y and g with dim last, contiguous in dt; gx written back */
int qkv_softmax_backward (qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g, int dim) {
  int err;
  const qkv_backend *be = qkv_op_backend(gx, y, g, &err);
  if (be == NULL) return err;
  qkv_dtype dt = gx->dtype;
  if ((dt != QKV_F32 && dt != QKV_F64) || y->ndim != gx->ndim || g->ndim != gx->ndim)
    return QKV_EINTERNAL;
  int last = y->ndim ? y->ndim - 1 : 0;
  qkv_tensor yt = *y, gt = *g, ot = *gx, yc, gc, o;
  qkv_storage *ty, *tg = NULL;
  if (y->ndim) {
    qkv_view_transpose(&yt, y, dim, last);
    qkv_view_transpose(&gt, g, dim, last);
    qkv_view_transpose(&ot, gx, dim, last);
  }
  if ((err = qkv_op_contiguous_as(&yc, &ty, &yt, dt)) != QKV_OK) return err;
  if ((err = qkv_op_contiguous_as(&gc, &tg, &gt, dt)) == QKV_OK) {
    if (qkv_is_contiguous(&ot)) err = be->softmax_backward(&ot, &yc, &gc);
    else if ((err = qkv_op_fresh(&o, &yc, dt)) == QKV_OK) {
      err = be->softmax_backward(&o, &yc, &gc);
      if (err == QKV_OK) err = be->copy(&ot, &o);
      qkv_storage_release(o.storage);
    }
  }
  qkv_storage_release(ty);
  qkv_storage_release(tg);
  return err;
}

static int layer_norm_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *x,
                          const qkv_tensor *w, const qkv_tensor *b, int64_t n, double eps) {
  int err;
  if (!qkv_is_float(out->dtype) || !qkv_is_contiguous(out)) return QKV_EINTERNAL;
  qkv_tensor c, cw, cb;
  qkv_storage *tx, *tw = NULL, *tb = NULL;
  err = qkv_op_contiguous_as(&c, &tx, x, out->dtype);
  if (err == QKV_OK && w) err = qkv_op_contiguous_as(&cw, &tw, w, out->dtype);
  if (err == QKV_OK && b) err = qkv_op_contiguous_as(&cb, &tb, b, out->dtype);
  if (err == QKV_OK) err = be->layer_norm(out, &c, w ? &cw : NULL, b ? &cb : NULL, n, eps);
  qkv_storage_release(tx);
  qkv_storage_release(tw);
  qkv_storage_release(tb);
  return err;
}

int qkv_layer_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                    const qkv_tensor *b, int64_t n, double eps) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, x, w, &err);
  if (be == NULL || (b && (be = qkv_op_backend(out, b, NULL, &err)) == NULL)) return err;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(layer_norm_in(be, o, x, w, b, n, eps), be, out, o);
}

static int rms_norm_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *x,
                        const qkv_tensor *w, int64_t n, double eps) {
  int err;
  if (!qkv_is_float(out->dtype) || !qkv_is_contiguous(out)) return QKV_EINTERNAL;
  qkv_tensor c, cw;
  qkv_storage *tx, *tw = NULL;
  err = qkv_op_contiguous_as(&c, &tx, x, out->dtype);
  if (err == QKV_OK && w) err = qkv_op_contiguous_as(&cw, &tw, w, out->dtype);
  if (err == QKV_OK) err = be->rms_norm(out, &c, w ? &cw : NULL, n, eps);
  qkv_storage_release(tx);
  qkv_storage_release(tw);
  return err;
}

int qkv_rms_norm (qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                  double eps) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, x, w, &err);
  if (be == NULL) return err;
  if (qkv_numel(x) == 0) return QKV_OK;            /* n may be 0 then */
  if (n < 1 || qkv_numel(x) % n != 0 || (w && qkv_numel(w) != n)) return QKV_EINTERNAL;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(rms_norm_in(be, o, x, w, n, eps), be, out, o);
}

/*
** The norms' backward: gx (and the sums gw, gb when asked: NULL skips one)
** from x, g and w made contiguous in gx's dtype, then the entry; rms has
** no gb and takes the rms_norm entry
*/
static int norm_backward (int rms, qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                          const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                          int64_t n, double eps) {
  int err;
  const qkv_backend *be = qkv_op_backend(gx, x, g, &err);
  if (be == NULL || (w && (be = qkv_op_backend(gx, w, NULL, &err)) == NULL)) return err;
  qkv_dtype dt = gx->dtype;
  qkv_tensor *sums[2] = {gw, gb};
  if ((dt != QKV_F32 && dt != QKV_F64) || !qkv_is_contiguous(gx) || n < 1 ||
      qkv_numel(x) % n != 0 || qkv_numel(g) != qkv_numel(x) || (w && qkv_numel(w) != n))
    return QKV_EINTERNAL;
  for (int i = 0; i < 2; i++)
    if (sums[i] && (sums[i]->dtype != dt || !qkv_is_contiguous(sums[i]) ||
                    qkv_numel(sums[i]) != n || sums[i]->storage->device != gx->storage->device))
      return QKV_EINTERNAL;
  qkv_tensor c, cg, cw;
  qkv_storage *tx, *tg = NULL, *tw = NULL;
  err = qkv_op_contiguous_as(&c, &tx, x, dt);
  if (err == QKV_OK) err = qkv_op_contiguous_as(&cg, &tg, g, dt);
  if (err == QKV_OK && w) err = qkv_op_contiguous_as(&cw, &tw, w, dt);
  if (err == QKV_OK)
    err = rms ? be->rms_norm_backward(gx, gw, &c, &cg, w ? &cw : NULL, n, eps)
              : be->layer_norm_backward(gx, gw, gb, &c, &cg, w ? &cw : NULL, n, eps);
  qkv_storage_release(tx);
  qkv_storage_release(tg);
  qkv_storage_release(tw);
  return err;
}

int qkv_rms_norm_backward (qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                           const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps) {
  return norm_backward(1, gx, gw, NULL, x, g, w, n, eps);
}

int qkv_layer_norm_backward (qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                             const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                             int64_t n, double eps) {
  return norm_backward(0, gx, gw, gb, x, g, w, n, eps);
}

static int cumsum_in (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *x, int dim) {
  qkv_tensor c;
  qkv_storage *tx;
  if (!qkv_is_contiguous(out) || dim < 0 || dim >= (x->ndim ? x->ndim : 1)) return QKV_EINTERNAL;
  int err = qkv_op_contiguous_as(&c, &tx, x, out->dtype);
  if (err == QKV_OK && qkv_numel(x)) err = be->cumsum(out, &c, dim);
  qkv_storage_release(tx);
  return err;
}

int qkv_cumsum (qkv_tensor *out, const qkv_tensor *x, int dim) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, x, NULL, &err);
  if (be == NULL) return err;
  if (out->dtype != QKV_I64 && !qkv_is_float(out->dtype)) return QKV_EDTYPE;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(cumsum_in(be, o, x, dim), be, out, o);
}

/*
** Any dtype as it is stored (the kernel moves elements, so the halves and
** int32 need no compute dtype).  x is read whole first when it overlaps
** out without being out; an out that is not contiguous gets the result
** through a fresh tensor.
*/
int qkv_tri (qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper) {
  int err, n = out->ndim;
  const qkv_backend *be = qkv_op_backend(out, x, NULL, &err);
  if (be == NULL) return err;
  if (n < 2 || x->ndim != n || x->dtype != out->dtype ||
      memcmp(x->size, out->size, sizeof(int64_t) * (size_t)n) != 0)
    return QKV_EINTERNAL;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  if (qkv_numel(out) == 0) return QKV_OK;
  int64_t rows = out->size[n - 2], cols = out->size[n - 1];
  k = k < -rows ? -rows : k > cols ? cols : k;
  qkv_tensor in, c, o;
  qkv_storage *ti, *tc = NULL;
  if ((err = qkv_op_input(&in, &ti, x, out, x->dtype)) != QKV_OK) return err;
  if ((err = qkv_op_contiguous_as(&c, &tc, &in, x->dtype)) == QKV_OK) {
    if (qkv_is_contiguous(out)) err = be->tri(out, &c, k, upper);
    else if ((err = qkv_op_fresh(&o, out, out->dtype)) == QKV_OK) {
      err = be->tri(&o, &c, k, upper);
      if (err == QKV_OK) err = be->copy(out, &o);
      qkv_storage_release(o.storage);
    }
  }
  qkv_storage_release(ti);
  qkv_storage_release(tc);
  return err;
}

int qkv_causal (qkv_tensor *m, int64_t offset, int keep) {
  if (m->dtype != QKV_BOOL) return QKV_EINTERNAL;
  int err = qkv_fill(m, 1);
  return err != QKV_OK ? err : qkv_tri(m, m, keep ? offset : offset + 1, !keep);
}

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
  if (out->dtype == QKV_F16 || out->dtype == QKV_BF16)
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

/* each captured tensor, gradient sum and the kinds on out's backend */
static int mods_fit (const qkv_tensor *out, const qkv_attn_mods *M) {
  int err;
  if (M->prog == NULL || M->ncap < 0 || M->ncap > QKV_MOD_MAXCAP) return QKV_EINTERNAL;
  for (int c = 0; c < M->ncap; c++)
    if (qkv_op_backend(out, M->capt[c], M->gradt[c], &err) == NULL) return err;
  if (M->kindt && qkv_op_backend(out, M->kindt, NULL, &err) == NULL) return err;
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

int qkv_attention_blocks (qkv_attn_mods *M, qkv_tensor *kinds, int64_t nq, int64_t nk,
                          int64_t bq, int64_t bk) {
  int err;
  const qkv_backend *be = qkv_op_backend(kinds, NULL, NULL, &err);
  if (be == NULL || (err = mods_fit(kinds, M)) != QKV_OK) return err;
  if (kinds->dtype != QKV_I32 || !qkv_is_contiguous(kinds) || kinds->ndim != 4 ||
      bq < 1 || bk < 1 || kinds->size[2] != (nq + bq - 1) / bq ||
      kinds->size[3] != (nk + bk - 1) / bk)
    return QKV_EINTERNAL;
  return be->attention_blocks ? be->attention_blocks(M, kinds, nq, nk, bq, bk) : QKV_ENODEV;
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

/* the backward in dt (q..go converted to it where they are not), with
   dq, dk, dv of dt; lse checked by the caller */
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
  if (err == QKV_OK && M)
    err = be->attention_mods_backward
        ? be->attention_mods_backward(dq, dk, dv, &x[0], &x[1], &x[2], &x[3], &x[4],
                                      mask ? &m : NULL, causal, scale, lse, M)
        : QKV_ENODEV;
  else if (err == QKV_OK)
    err = be->attention_backward(dq, dk, dv, &x[0], &x[1], &x[2], &x[3], &x[4],
                                 mask ? &m : NULL, causal, scale, lse);
  for (int i = 0; i < 5; i++) qkv_storage_release(tx[i]);
  qkv_storage_release(tm);
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
  int half = dt == QKV_F16 || dt == QKV_BF16;
  if ((dt != QKV_F32 && dt != QKV_F64 && !half) || dk->dtype != dt || dv->dtype != dt ||
      !qkv_is_contiguous(dq) || !qkv_is_contiguous(dk) || !qkv_is_contiguous(dv))
    return QKV_EINTERNAL;
  if (lse && !lse_fits(lse, o, qkv_compute_dtype(dt))) return QKV_EINTERNAL;
  const qkv_tensor *in[5] = {q, k, v, o, go};
  err = QKV_EDTYPE;
  if (half) err = backward_in(be, dq, dk, dv, in, mask, causal, scale, lse, NULL);
  if (err != QKV_EDTYPE) return err;
  qkv_tensor t[3], *g[3], *out[3] = {dq, dk, dv};
  int made = 0;
  for (err = QKV_OK; made < 3 && err == QKV_OK; made++) err = qkv_op_computed(out[made], &t[made], &g[made]);
  if (err == QKV_OK) err = backward_in(be, g[0], g[1], g[2], in, mask, causal, scale, lse, NULL);
  for (int i = 0; i < made; i++) err = qkv_op_done(err, be, out[i], g[i]);
  return err;
}

/* whether t is float of p's dtype, shape and device, and contiguous */
static int adam_like (const qkv_tensor *t, const qkv_tensor *p) {
  return t->dtype == p->dtype && t->ndim == p->ndim && t->storage->device == p->storage->device &&
         memcmp(t->size, p->size, sizeof(int64_t) * (size_t)p->ndim) == 0 && qkv_is_contiguous(t);
}

int qkv_adam (qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v, qkv_tensor *vmax,
              const qkv_adam_step *h) {
  int err;
  const qkv_backend *be = qkv_op_backend(p, m, v, &err);
  if (be == NULL) return err;
  if ((be = qkv_op_backend(p, g, vmax, &err)) == NULL) return err;
  if ((p->dtype != QKV_F32 && p->dtype != QKV_F64) || !adam_like(p, p) || !adam_like(m, p) ||
      !adam_like(v, p) || (vmax && !adam_like(vmax, p)) || g->ndim != p->ndim ||
      memcmp(g->size, p->size, sizeof(int64_t) * (size_t)p->ndim) != 0)
    return QKV_EINTERNAL;
  if (qkv_numel(p) == 0) return QKV_OK;
  qkv_tensor gc;
  qkv_storage *tg;
  if ((err = qkv_op_contiguous_as(&gc, &tg, g, p->dtype)) != QKV_OK) return err;
  err = be->adam(p, &gc, m, v, vmax, h);
  qkv_storage_release(tg);
  return err;
}

/* float32 and float64 alone (the halves come in float32 copies), with the
   forward's lse */
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
  if ((dt != QKV_F32 && dt != QKV_F64) || dk->dtype != dt || dv->dtype != dt ||
      !qkv_is_contiguous(dq) || !qkv_is_contiguous(dk) || !qkv_is_contiguous(dv) ||
      !lse_fits(lse, o, dt))
    return QKV_EINTERNAL;
  const qkv_tensor *in[5] = {q, k, v, o, go};
  return backward_in(be, dq, dk, dv, in, mask, causal, scale, lse, M);
}
