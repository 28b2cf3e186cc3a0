/*
** ops.c -- device dispatch.  Picks the backend from the tensors' device,
** converts operands to the dtype a kernel wants and expands broadcast
** operands to the output's shape, then calls the backend's entry.
*/
#include <stdio.h>
#include <string.h>

#include "../core/qkv.h"
#include "../core/backend.h"
#include "../common/ops.h"
#include "../common/reduce_plan.h"
#include "ops.h"
#include "plugin.h"
#include "range.h"

/* the devices of the last op that mixed them, for its message */
static char mixed[80] = "tensors are on different devices";

const char *qkv_strerror (int code) {
  switch (code) {
    case QKV_OK: return "no error";
    case QKV_ENOMEM: return "out of memory";
    case QKV_EDTYPE: return "unsupported dtype";
    case QKV_ENODEV: return "device not available";
    case QKV_EDEVICE: return mixed;
    case QKV_EINTR: return "interrupted";
    case QKV_ENOBLAS: return "no BLAS library could be loaded (libopenblas.so.0)";
    case QKV_ECLOSED: return "a tensor was closed";
    case QKV_EOVERLAP:
      return "cannot write into a tensor whose elements share memory (an "
             "expanded view); clone() it first";
    case QKV_ECUDA: return qkv_cuda_loaded() ? qkv_cuda_loaded()->error() : "cuda: error";
    case QKV_ERANGE: return qkv_op_range_message();
    case QKV_EINDEX: return "an index out of range";
    default: return "internal error";
  }
}

static int closed (const qkv_tensor *t) { return t && qkv_is_closed(t); }

/*
** Backend of `out`, checking that `a` and `b` (may be NULL) share it: the
** entry of every op, which also refuses closed tensors (a script can close
** one from a metamethod or a finalizer while a binding holds it).
*/
const qkv_backend *qkv_op_backend (const qkv_tensor *out, const qkv_tensor *a,
                                    const qkv_tensor *b, int *err) {
  qkv_device d = out->storage->device;
  if (qkv_interrupted) {
    *err = QKV_EINTR;
    return NULL;
  }
  if (closed(out) || closed(a) || closed(b)) {
    *err = QKV_ECLOSED;
    return NULL;
  }
  if ((a && a->storage->device != d) || (b && b->storage->device != d)) {
    qkv_device o = a && a->storage->device != d ? a->storage->device : b->storage->device;
    snprintf(mixed, sizeof mixed, "expected all tensors on one device, got %s and %s",
             qkv_device_name(d), qkv_device_name(o));
    *err = QKV_EDEVICE;
    return NULL;
  }
  const qkv_backend *be = qkv_backend_of(d);
  *err = be ? QKV_OK : QKV_ENODEV;
  return be;
}

/* A contiguous copy of src in dtype dt, in a storage the caller releases. */
int qkv_op_convert (qkv_tensor *dst, const qkv_tensor *src, qkv_dtype dt) {
  qkv_tensor c = *src;
  int64_t n = qkv_numel(src);
  c.dtype = dt;
  c.offset = 0;
  c.storage = qkv_storage_new(src->storage->device, (size_t)n * qkv_elsize(dt), 0);
  if (c.storage == NULL) return QKV_ENOMEM;
  qkv_set_contiguous(&c, src->ndim, src->size);
  int err = qkv_backend_of(src->storage->device)->copy(&c, src);
  if (err == QKV_ERANGE) qkv_op_range(src, dt);
  if (err != QKV_OK) { qkv_storage_release(c.storage); return err; }
  *dst = c;
  return QKV_OK;
}

/*
** `src` expanded to the shape of `like` and given dtype `dt`: a view when
** the dtype already matches, else a converted copy whose storage the
** caller releases through `tmp` (NULL when none was made).
*/
int qkv_op_operand (qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *src,
                    const qkv_tensor *like, qkv_dtype dt) {
  qkv_tensor c = *src;
  *tmp = NULL;
  /* convert at the operand's own size, then expand: no wasted work */
  if (src->dtype != dt) {
    int err = qkv_op_convert(&c, src, dt);
    if (err != QKV_OK) return err;
    *tmp = c.storage;
  }
  if (qkv_expand(dst, &c, like->ndim, like->size) != 0) {
    qkv_storage_release(*tmp);
    *tmp = NULL;
    return QKV_EINTERNAL;
  }
  return QKV_OK;
}

/* whether two elements of t are one element of memory (a stride-0 dim) */
int qkv_op_self_overlapping (const qkv_tensor *t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->stride[i] == 0 && t->size[i] > 1) return 1;
  return 0;
}

/* the bytes [lo, hi) of its storage that a view touches (lo == hi: none) */
static void extent (const qkv_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t a = t->offset, b = t->offset, es = (int64_t)qkv_elsize(t->dtype);
  for (int i = 0; i < t->ndim; i++) {
    if (t->size[i] == 0) { *lo = *hi = 0; return; }
    int64_t span = (t->size[i] - 1) * t->stride[i];
    if (span < 0) a += span; else b += span;
  }
  *lo = a * es;
  *hi = (b + 1) * es;
}

static int overlap (const qkv_tensor *x, const qkv_tensor *y) {
  int64_t xl, xh, yl, yh;
  if (x->storage != y->storage) return 0;
  extent(x, &xl, &xh);
  extent(y, &yl, &yh);
  return xl < xh && yl < yh && xl < yh && yl < xh;
}

/*
** A 0-d CPU tensor (a Lua number the bindings made a scalar of) meeting an
** op on the GPU is put there first, as PyTorch lets x + 1 run with x on
** the GPU: *x then points at buf, whose storage qkv_op_unlift releases.
** The value travels by value in a fill kernel's arguments, not through a
** copy from pageable memory, which would wait for all queued GPU work
** (an int64 that a double cannot hold is copied).
*/
int qkv_op_lift (const qkv_tensor **x, qkv_tensor *buf, qkv_device d) {
  const qkv_tensor *s = *x;
  if (s == NULL || d == QKV_CPU || s->storage->device != QKV_CPU || s->ndim != 0 ||
      qkv_is_closed(s) || qkv_backend_of(d) == NULL)
    return QKV_OK;
  *buf = *s;
  buf->offset = 0;
  if ((buf->storage = qkv_storage_new(d, qkv_elsize(s->dtype), 0)) == NULL) return QKV_ENOMEM;
  const void *p = qkv_data(s);
  double v = qkv_elem_get(s->dtype, p);
  int exact = s->dtype != QKV_I64 || (v >= -0x1p63 && v < 0x1p63 &&
                                      (int64_t)v == qkv_elem_geti(s->dtype, p));
  int err = exact ? qkv_backend_of(d)->fill(buf, v) : qkv_transfer(buf, s);
  if (err != QKV_OK) qkv_storage_release(buf->storage);
  else *x = buf;
  return err;
}

void qkv_op_unlift (const qkv_tensor *x, qkv_tensor *buf) {
  if (x == buf) qkv_storage_release(buf->storage);
}

static int copy_on (qkv_tensor *dst, const qkv_tensor *src);

int qkv_copy (qkv_tensor *dst, const qkv_tensor *src) {
  qkv_tensor buf;
  int err = qkv_op_lift(&src, &buf, dst->storage->device);
  if (err != QKV_OK) return err;
  err = copy_on(dst, src);
  qkv_op_unlift(src, &buf);
  return err;
}

static int copy_on (qkv_tensor *dst, const qkv_tensor *src) {
  int err;
  qkv_tensor e, c = *src;
  const qkv_backend *be = qkv_op_backend(dst, src, NULL, &err);
  if (be == NULL) return err;
  if (qkv_op_self_overlapping(dst)) return QKV_EOVERLAP;
  /* a source that overlaps the destination is read whole first, as
     PyTorch's copy_ does: element by element, a write could change what
     a later read sees */
  if (overlap(dst, src) && (err = qkv_op_convert(&c, src, src->dtype)) != QKV_OK) return err;
  if (qkv_expand(&e, &c, dst->ndim, dst->size) != 0) err = QKV_EINTERNAL;
  else err = be->copy(dst, &e);
  if (err == QKV_ERANGE) qkv_op_range(&c, dst->dtype);   /* named in src's shape */
  if (c.storage != src->storage) qkv_storage_release(c.storage);
  return err;
}

static int is_int (qkv_dtype dt) { return dt == QKV_I64 || dt == QKV_I32; }

int qkv_copy_into (qkv_tensor *dst, const qkv_tensor *src) {
  int err;
  qkv_tensor c;
  if (!qkv_is_float(src->dtype) || !is_int(dst->dtype)) return qkv_copy(dst, src);
  if (qkv_op_backend(src, NULL, NULL, &err) == NULL) return err;
  if ((err = qkv_op_convert(&c, src, dst->dtype)) != QKV_OK) return err;
  err = qkv_copy(dst, &c);
  qkv_storage_release(c.storage);
  return err;
}

/* a fill value that dst's dtype cannot hold: QKV_ERANGE, as for a copy
   (the bindings check theirs; this keeps any other caller from a clamp) */
static int unfit (const qkv_tensor *dst, double v) {
  if (qkv_fits(dst->dtype, v)) return 0;
  qkv_op_range_value(v, dst->dtype);
  return 1;
}

int qkv_fill (qkv_tensor *dst, double v) {
  int err;
  const qkv_backend *be = qkv_op_backend(dst, NULL, NULL, &err);
  if (be == NULL) return err;
  if (unfit(dst, v)) return QKV_ERANGE;
  return qkv_op_self_overlapping(dst) ? QKV_EOVERLAP : be->fill(dst, v);
}

/* a contiguous tensor of t's shape and dtype dt in a new storage */
int qkv_op_fresh (qkv_tensor *dst, const qkv_tensor *t, qkv_dtype dt) {
  *dst = *t;
  dst->dtype = dt;
  dst->offset = 0;
  qkv_set_contiguous(dst, t->ndim, t->size);
  dst->storage = qkv_storage_new(t->storage->device, (size_t)qkv_numel(t) * qkv_elsize(dt), 0);
  return dst->storage ? QKV_OK : QKV_ENOMEM;
}

/* x as the kernels over rows want it: contiguous, of dtype dt (x itself,
   or a copy released through *tmp) */
int qkv_op_contiguous_as (qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *x,
                          qkv_dtype dt) {
  *tmp = NULL;
  *dst = *x;
  if (x->dtype == dt && qkv_is_contiguous(x)) return QKV_OK;
  int err = qkv_op_convert(dst, x, dt);
  if (err == QKV_OK) *tmp = dst->storage;
  return err;
}

/*
** out as a kernel computes it: out itself, or for a dtype that is stored
** but computed in another (int32, the halves) a fresh tensor of its shape
** in that dtype, which qkv_op_done converts back into out and releases.
*/
int qkv_op_computed (qkv_tensor *out, qkv_tensor *tmp, qkv_tensor **use) {
  qkv_dtype cd = qkv_compute_dtype(out->dtype);
  *use = out;
  if (cd == out->dtype) return QKV_OK;
  int err = qkv_op_fresh(tmp, out, cd);
  if (err == QKV_OK) *use = tmp;
  return err;
}

int qkv_op_done (int err, const qkv_backend *be, qkv_tensor *out, qkv_tensor *use) {
  if (use == out) return err;
  if (err == QKV_OK) err = be->copy(out, use);
  qkv_storage_release(use->storage);
  return err;
}

/* an op whose result is bool (a comparison) computes in its operands'
   promoted dtype, lifted to one it takes; the others in out's (the
   bindings chose it: vm/common/ops.h) */
static int is_compare (qkv_binop op) { return qkv_binop_result(op) == QKV_RESULT_BOOL; }

/* whether x is out itself, element for element */
static int same_view (const qkv_tensor *x, const qkv_tensor *out) {
  return x->storage == out->storage && x->offset == out->offset &&
         x->dtype == out->dtype && x->ndim == out->ndim &&
         memcmp(x->size, out->size, sizeof(int64_t) * (size_t)x->ndim) == 0 &&
         memcmp(x->stride, out->stride, sizeof(int64_t) * (size_t)x->ndim) == 0;
}

/*
** An operand of an op writing into out (in place): as qkv_op_operand(), but one
** that overlaps out and is not out itself is converted (read whole) first,
** since the kernel may write an element before it reads another.
*/
int qkv_op_input (qkv_tensor *dst, qkv_storage **tmp, const qkv_tensor *src,
                  const qkv_tensor *out, qkv_dtype dt) {
  qkv_tensor c;
  if (src->dtype != dt || same_view(src, out) || !overlap(src, out))
    return qkv_op_operand(dst, tmp, src, out, dt);
  int err = qkv_op_convert(&c, src, dt);
  if (err != QKV_OK) return err;
  err = qkv_op_operand(dst, tmp, &c, out, dt);
  *tmp = c.storage;
  return err;
}

/*
** An op computed in float32 with a half among out and its n operands, on
** a backend that takes float32 and the halves mixed (elementwise_halves):
** the halves go to it as they are, so that it converts them run by run
** instead of whole copies here; an operand of another dtype, or one that
** overlaps out and is not out itself, is converted first as binary_in
** would.  QKV_EDTYPE: not such an op, or the backend declined; the
** caller then converts.
*/
static int with_halves (const qkv_backend *be, qkv_tensor *out, int n, const qkv_tensor *const *in,
                        qkv_dtype dt, int op, int binary) {
  int half = qkv_is_half(out->dtype);
  for (int i = 0; i < n; i++) half |= qkv_is_half(in[i]->dtype);
  if (!be->elementwise_halves || dt != QKV_F32 || !half) return QKV_EDTYPE;
  qkv_tensor x[2];
  qkv_storage *tmp[2] = {NULL, NULL};
  int err = QKV_OK, made = 0;
  for (; made < n && err == QKV_OK; made++) {
    const qkv_tensor *src = in[made];
    if ((src->dtype == QKV_F32 || qkv_is_half(src->dtype)) && (same_view(src, out) || !overlap(src, out)))
      err = qkv_expand(&x[made], src, out->ndim, out->size) != 0 ? QKV_EINTERNAL : QKV_OK;
    else
      err = qkv_op_input(&x[made], &tmp[made], src, out, dt);
  }
  if (err == QKV_OK)
    err = binary ? be->binary(op, out, &x[0], &x[1]) : be->unary(op, out, &x[0]);
  for (int i = 0; i < made; i++) qkv_storage_release(tmp[i]);
  return err;
}

/* the dtype a binary op computes in: its operands' promoted one, lifted
   to one it takes, for a comparison (bool out); else out's */
static qkv_dtype binary_dtype (qkv_binop op, const qkv_tensor *out, const qkv_tensor *a,
                               const qkv_tensor *b) {
  return qkv_compute_dtype(is_compare(op) ? qkv_op_lifted(qkv_binop_takes(op),
                                                          qkv_promote(a->dtype, b->dtype))
                                          : out->dtype);
}

/* the same for a unary op */
static qkv_dtype unary_dtype (qkv_unop op, const qkv_tensor *out, const qkv_tensor *a) {
  return qkv_compute_dtype(qkv_unop_result(op) == QKV_RESULT_BOOL
                           ? qkv_op_lifted(qkv_unop_takes(op), a->dtype) : out->dtype);
}

static int binary_in (const qkv_backend *be, qkv_binop op, qkv_tensor *out,
                      const qkv_tensor *a, const qkv_tensor *b) {
  qkv_dtype dt = binary_dtype(op, out, a, b);
  qkv_tensor x, y;
  qkv_storage *tx, *ty = NULL;
  int err = qkv_op_input(&x, &tx, a, out, dt);
  if (err == QKV_OK) err = qkv_op_input(&y, &ty, b, out, dt);
  if (err == QKV_OK) err = be->binary(op, out, &x, &y);
  qkv_storage_release(tx);
  qkv_storage_release(ty);
  return err;
}

static int binary_on (qkv_binop op, qkv_tensor *out, const qkv_tensor *a,
                      const qkv_tensor *b);

int qkv_binary (qkv_binop op, qkv_tensor *out, const qkv_tensor *a,
                const qkv_tensor *b) {
  qkv_tensor la, lb;
  qkv_device d = out->storage->device;
  int err = qkv_op_lift(&a, &la, d);
  if (err == QKV_OK && (err = qkv_op_lift(&b, &lb, d)) == QKV_OK) {
    err = binary_on(op, out, a, b);
    qkv_op_unlift(b, &lb);
  }
  qkv_op_unlift(a, &la);
  return err;
}

static int binary_on (qkv_binop op, qkv_tensor *out, const qkv_tensor *a,
                      const qkv_tensor *b) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, a, b, &err);
  if (be == NULL) return err;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  const qkv_tensor *in[2] = {a, b};
  if ((err = with_halves(be, out, 2, in, binary_dtype(op, out, a, b), op, 1)) != QKV_EDTYPE)
    return err;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(binary_in(be, op, o, a, b), be, out, o);
}

static int unary_in (const qkv_backend *be, qkv_unop op, qkv_tensor *out,
                     const qkv_tensor *a) {
  qkv_tensor x;
  qkv_storage *tx;
  int err = qkv_op_input(&x, &tx, a, out, unary_dtype(op, out, a));
  if (err == QKV_OK) err = be->unary(op, out, &x);
  qkv_storage_release(tx);
  return err;
}

int qkv_unary (qkv_unop op, qkv_tensor *out, const qkv_tensor *a) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, a, NULL, &err);
  if (be == NULL) return err;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  if ((err = with_halves(be, out, 1, &a, unary_dtype(op, out, a), op, 0)) != QKV_EDTYPE)
    return err;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(unary_in(be, op, o, a), be, out, o);
}

/* The dtype a reduction wants its input in. */
static qkv_dtype reduce_input_dtype (qkv_redop op, const qkv_tensor *out,
                                     const qkv_tensor *a) {
  if (op == QKV_MEAN || op == QKV_VAR || op == QKV_STD) return out->dtype;
  return a->dtype;
}

/*
** out (and idx) have the result's final shape, which is a's shape with
** `dim` removed or kept as 1; dim < 0 reduces everything to one element.
** The backend wants them with a's rank and size 1 at the reduced dim.
** corr: VAR and STD's correction.
*/
static int reduce_in (const qkv_backend *be, qkv_redop op, qkv_tensor *out,
                      qkv_tensor *idx, const qkv_tensor *a, int dim, double corr) {
  int err;
  qkv_tensor x, o = *out, ix;
  qkv_storage *tx = NULL;
  if (dim < 0) {                     /* everything: a 1-D view of a */
    int64_t n = qkv_numel(a), one = 1;
    qkv_tensor flat = *a;
    if (qkv_view_reshape(&flat, a, 1, &n) != 0) {
      err = qkv_op_convert(&flat, a, a->dtype);
      if (err != QKV_OK) return err;
      tx = flat.storage;
      qkv_view_reshape(&flat, &flat, 1, &n);
    }
    x = flat;
    qkv_view_reshape(&o, out, 1, &one);
    if (idx) qkv_view_reshape(&ix, idx, 1, &one);
    dim = 0;
  } else {
    x = *a;
    if (out->ndim < a->ndim) {
      qkv_view_unsqueeze(&o, out, dim);
      if (idx) qkv_view_unsqueeze(&ix, idx, dim);
    } else if (idx) ix = *idx;
  }
  qkv_dtype want = qkv_compute_dtype(reduce_input_dtype(op, out, a));
  /* a half summed (or its moments) where the backend reads it as float32 */
  int as_is = be->reduce_halves && qkv_is_half(x.dtype) && want == QKV_F32 &&
              qkv_red_family(op) != QKV_RED_EXTREMA;
  if (x.dtype != want && !as_is) {
    qkv_tensor y;
    qkv_storage *ty;
    err = qkv_op_operand(&y, &ty, &x, &x, want);
    qkv_storage_release(tx);
    if (err != QKV_OK) return err;
    x = y;
    tx = ty;
  }
  err = be->reduce(op, &o, idx ? &ix : NULL, &x, dim, corr);
  qkv_storage_release(tx);
  return err;
}

static int reduce_on (qkv_redop op, qkv_tensor *out, qkv_tensor *idx,
                      const qkv_tensor *a, int dim, double corr) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, a, idx, &err);
  if (be == NULL || (err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(reduce_in(be, op, o, idx, a, dim, corr), be, out, o);
}

int qkv_reduce (qkv_redop op, qkv_tensor *out, qkv_tensor *idx,
                const qkv_tensor *a, int dim) {
  return reduce_on(op, out, idx, a, dim, 1);
}

/* the correction goes to the kernel, which divides in double: a result
   rescaled after its rounding into out would be rounded twice */
int qkv_reduce_moments (qkv_redop op, qkv_tensor *out, const qkv_tensor *a, int dim,
                        double correction) {
  if (op != QKV_VAR && op != QKV_STD) return QKV_EINTERNAL;
  return reduce_on(op, out, NULL, a, dim, correction);
}

/*
** Whether dims 0..n-2 of t lie end to end, so that they read as one dim of
** rows; *rs is that dim's stride: the innermost of them with more than one
** element (a dim of size 1 has any stride, and takes no part).
*/
static int rows_chain (const qkv_tensor *t, int64_t *rs) {
  int last = t->ndim - 2;
  while (last > 0 && t->size[last] == 1) last--;
  int64_t expect = *rs = t->stride[last];
  for (int i = last; i >= 0; i--) {
    if (t->size[i] == 1) continue;
    if (t->stride[i] != expect) return 0;
    expect *= t->size[i];
  }
  return 1;
}

/* t's last two dims with its rows folded into the first: (rows, cols) */
static void fold (qkv_tensor *f, const qkv_tensor *t, int64_t rows, int64_t rs) {
  *f = *t;
  f->ndim = 2;
  f->size[0] = rows;
  f->size[1] = t->size[t->ndim - 1];
  f->stride[0] = rs;
  f->stride[1] = t->stride[t->ndim - 1];
}

int qkv_op_matmul (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                   const qkv_tensor *b, double alpha) {
  /* expand the batch dims to out's; the matrix dims keep their own sizes */
  int n = out->ndim;
  int64_t sa[QKV_MAXDIM], sb[QKV_MAXDIM];
  for (int i = 0; i < n - 2; i++) sa[i] = sb[i] = out->size[i];
  sa[n - 2] = a->size[a->ndim - 2]; sa[n - 1] = a->size[a->ndim - 1];
  sb[n - 2] = b->size[b->ndim - 2]; sb[n - 1] = b->size[b->ndim - 1];
  qkv_tensor x, y;
  if (qkv_expand(&x, a, n, sa) != 0 || qkv_expand(&y, b, n, sb) != 0)
    return QKV_EINTERNAL;
  /* (B..., n, k) @ (k, m), b shared by every batch: one product of
     (B... n, k) rows, as PyTorch folds it, rather than B small ones */
  int shared = n > 2;
  for (int i = 0; i < n - 2; i++) shared = shared && (y.size[i] == 1 || y.stride[i] == 0);
  int64_t xs, os;
  if (shared && rows_chain(&x, &xs) && rows_chain(out, &os)) {
    int64_t rows = 1;
    for (int i = 0; i < n - 1; i++) rows *= out->size[i];
    qkv_tensor x2, y2, o2;
    fold(&x2, &x, rows, xs);
    fold(&o2, out, rows, os);
    fold(&y2, &y, y.size[n - 2], y.stride[n - 2]);
    return be->matmul(&o2, &x2, &y2, alpha);
  }
  return be->matmul(out, &x, &y, alpha);
}

int qkv_masked_fill (qkv_tensor *out, const qkv_tensor *mask, double v) {
  int err;
  const qkv_backend *be = qkv_op_backend(out, mask, NULL, &err);
  if (be == NULL) return err;
  if (qkv_op_self_overlapping(out)) return QKV_EOVERLAP;
  if (unfit(out, v)) return QKV_ERANGE;
  qkv_tensor m;
  qkv_storage *tm;
  err = qkv_op_input(&m, &tm, mask, out, QKV_BOOL);
  if (err == QKV_OK) err = be->masked_fill(out, &m, v);
  qkv_storage_release(tm);
  return err;
}


/* the generator */

static uint64_t seed = 67280421310721ULL;   /* PyTorch's default seed */
static uint64_t offset;                     /* next unused Philox block */

void qkv_seed (uint64_t s) { seed = s; offset = 0; }
uint64_t qkv_initial_seed (void) { return seed; }

static int random_in (const qkv_backend *be, qkv_tensor *out, qkv_dist dist) {
  int err;
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint64_t n = (uint64_t)qkv_numel(out), per = out->dtype == QKV_F32 ? 4 : 2;
  err = be->random(out, dist, key, offset);
  if (err == QKV_OK) offset += (n + per - 1) / per;
  return err;
}

/* a float16 or bfloat16 tensor takes float32's numbers, rounded */
int qkv_random (qkv_tensor *out, qkv_dist dist) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, NULL, NULL, &err);
  if (be == NULL) return err;
  if (!qkv_is_float(out->dtype)) return QKV_EDTYPE;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(random_in(be, o, dist), be, out, o);
}
