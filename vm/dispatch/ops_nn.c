/*
** ops_nn.c -- device dispatch of the ops over rows and positions: where,
** gather, sort, softmax, log_softmax, layer_norm, rms_norm, cumsum, tri
** and adam (attention.c has attention, ops.c the rest and the helpers of
** ops.h).  An out of a dtype that is stored but not computed (int32, the
** halves) is computed in its compute dtype and converted back.
*/
#include <math.h>
#include <string.h>

#include "../core/qkv.h"
#include "../core/backend.h"
#include "../common/layout.h"
#include "ops.h"

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
  /* the halves (a backend that adds none: both, today) in float32 copies
     of out and src, rounded back into out once: a gradient's index_add_
     into a captured float16 bias, say (PyTorch adds them too) */
  if (err == QKV_EDTYPE && qkv_is_half(out->dtype)) {
    qkv_tensor o32, s32;
    if ((err = qkv_op_convert(&o32, out, QKV_F32)) == QKV_OK) {
      if ((err = qkv_op_convert(&s32, &c, QKV_F32)) == QKV_OK) {
        err = be->scatter_add(&o32, idx, &s32, dim);
        qkv_storage_release(s32.storage);
      }
      err = qkv_op_done(err, be, out, &o32);     /* back into out, o32 released */
    }
  }
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
