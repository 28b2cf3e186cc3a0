/*
** matmul.c -- qkv_matmul, and float32 products at PyTorch's float32 matmul
** precision (its state in the core: qkv_matmul_precision).
**
** "highest" is float32's own product, the default.  Where the backend says
** products of bfloat16 parts run faster than float32's (split_products:
** the CPU's bfloat16 instructions or its tile unit), "medium" multiplies
** the operands rounded to bfloat16 (to nearest) with float32 sums, and
** "high" splits each operand exactly into three bfloat16 parts,
** x = x0 + x1 + x2, and sums the six products of order above 2^-24
** (a0b0, a0b1, a1b0, a0b2, a1b1, a2b0) as one product of width 6n:
** [a0 a0 a1 a0 a1 a2] @ [b0; b1; b0; b2; b1; b0].  Every part's product is
** exact in float32, so "high" errs about as float32 does, where PyTorch's
** two parts (three products) keep about 16 bits.  Elsewhere both compute
** as "highest", as PyTorch's do where no faster product is there; on the
** GPU they mean TF32 (cuBLAS's math mode, set through the plugin).
*/
#include <math.h>
#include <string.h>

#include "ops.h"
#include "../common/ops.h"

static int forced;

void qkv_force_split_products (int on) { forced = on != 0; }

/* how many parts each operand's width becomes */
static int width (qkv_precision p) { return p == QKV_PREC_HIGH ? 6 : 1; }

/* which part each slot of a's width holds, and b's (the products above) */
static const int a_parts[6] = {0, 0, 1, 0, 1, 2};
static const int b_parts[6] = {0, 1, 0, 2, 1, 0};

/* x's shape with dim d k times as wide, contiguous, in a new storage */
static int widened (qkv_tensor *w, const qkv_tensor *x, int d, int k, qkv_dtype dt) {
  int64_t size[QKV_MAXDIM];
  memcpy(size, x->size, sizeof(int64_t) * (size_t)x->ndim);
  size[d] *= k;
  *w = *x;
  w->dtype = dt;
  w->offset = 0;
  qkv_set_contiguous(w, x->ndim, size);
  w->storage = qkv_storage_new(x->storage->device, (size_t)qkv_numel(w) * qkv_elsize(dt), 0);
  return w->storage ? QKV_OK : QKV_ENOMEM;
}

static void slot (qkv_tensor *v, const qkv_tensor *w, int d, int64_t n, int s) {
  qkv_view_narrow(v, w, d, s * n, n);
}

/* whether every element of r is finite: its sum is (a false "no" for a
   sum that overflows costs only the float32 product) */
static int finite (const qkv_tensor *r, int *ok) {
  qkv_tensor s = *r, h;
  double v = 0;
  s.offset = 0;
  qkv_set_contiguous(&s, 0, NULL);
  if ((s.storage = qkv_storage_new(r->storage->device, sizeof(float), 0)) == NULL)
    return QKV_ENOMEM;
  int err = qkv_reduce(QKV_SUM, &s, NULL, r, -1);
  if (err == QKV_OK && s.storage->device != QKV_CPU) {
    h = s;
    if ((h.storage = qkv_storage_new(QKV_CPU, sizeof(float), 0)) == NULL) err = QKV_ENOMEM;
    else {
      if ((err = qkv_transfer(&h, &s)) == QKV_OK) v = *(float *)qkv_data(&h);
      qkv_storage_release(h.storage);
    }
  } else if (err == QKV_OK) {
    v = *(float *)qkv_data(&s);
  }
  qkv_storage_release(s.storage);
  *ok = isfinite(v);
  return err;
}

/*
** x's parts into the k slots of w along dim d (n wide), as `parts` says:
** x0 rounded to nearest, r = x - x0 (exact), x1 = r rounded, x2 = r - x1
** (exact, and exactly a bfloat16).  QKV_EDTYPE when a part is not finite
** (x not finite, or rounded past bfloat16's largest): such a call is the
** float32 product's.
*/
static int split (qkv_tensor *w, const qkv_tensor *x, int d, int k, const int *parts) {
  int64_t n = x->size[d];
  int first[3] = {-1, -1, -1}, err, ok = 1;
  qkv_tensor v, r;
  for (int s = 0; s < k; s++) if (first[parts[s]] < 0) first[parts[s]] = s;
  slot(&v, w, d, n, first[0]);
  if ((err = qkv_copy(&v, x)) != QKV_OK || k == 1) return err;
  if ((err = qkv_op_fresh(&r, x, QKV_F32)) != QKV_OK) return err;
  if ((err = qkv_binary(QKV_SUB, &r, x, &v)) == QKV_OK && (err = finite(&r, &ok)) == QKV_OK &&
      !ok)
    err = QKV_EDTYPE;
  for (int p = 1; p < 3 && err == QKV_OK; p++) {
    slot(&v, w, d, n, first[p]);
    if ((err = qkv_copy(&v, &r)) == QKV_OK && p == 1) err = qkv_binary(QKV_SUB, &r, &r, &v);
  }
  qkv_storage_release(r.storage);
  for (int s = 0; s < k && err == QKV_OK; s++) {
    qkv_tensor from;
    if (s == first[parts[s]]) continue;
    slot(&v, w, d, n, s);
    slot(&from, w, d, n, first[parts[s]]);
    err = qkv_copy(&v, &from);
  }
  return err;
}

/* out = alpha a @ b (+ bias) from a and b converted to out's dtype */
static int converted (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                      const qkv_tensor *b, const qkv_tensor *bias, double alpha) {
  qkv_tensor x, y;
  int err = qkv_op_convert(&x, a, out->dtype);
  if (err != QKV_OK) return err;
  if ((err = qkv_op_convert(&y, b, out->dtype)) == QKV_OK) {
    err = qkv_op_matmul(be, out, &x, &y, alpha);
    if (err == QKV_OK && bias) err = qkv_binary(QKV_ADD, out, out, bias);
    qkv_storage_release(y.storage);
  }
  qkv_storage_release(x.storage);
  return err;
}

/* the product of the parts: bfloat16 operands into float32 out where the
   backend takes them, else in float32 of the parts (the same exact
   products and float32 sums) */
static int product (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                    const qkv_tensor *b, double alpha) {
  int err = qkv_op_matmul(be, out, a, b, alpha);
  return err != QKV_EDTYPE ? err : converted(be, out, a, b, NULL, alpha);
}

/* a float32 product at the precision set: QKV_EDTYPE when it is float32's
   own (the caller's to run) */
static int split_matmul (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                         const qkv_tensor *b, double alpha) {
  qkv_precision precision = qkv_matmul_precision();
  int na = a->ndim, k = width(precision);
  if (precision == QKV_PREC_HIGHEST || out->dtype != QKV_F32 || a->dtype != QKV_F32 ||
      b->dtype != QKV_F32 || alpha == 0 || !isfinite(alpha) || qkv_numel(out) == 0)
    return QKV_EDTYPE;
  if (!forced && (be->split_products == NULL ||
                  !be->split_products(k, (double)qkv_numel(out) * (double)a->size[na - 1])))
    return QKV_EDTYPE;
  qkv_tensor wa, wb;
  int err = widened(&wa, a, na - 1, k, QKV_BF16);
  if (err != QKV_OK) return err;
  if ((err = widened(&wb, b, b->ndim - 2, k, QKV_BF16)) != QKV_OK) {
    qkv_storage_release(wa.storage);
    return err;
  }
  if ((err = split(&wa, a, na - 1, k, a_parts)) == QKV_OK &&
      (err = split(&wb, b, b->ndim - 2, k, b_parts)) == QKV_OK)
    err = product(be, out, &wa, &wb, alpha);
  qkv_storage_release(wa.storage);
  qkv_storage_release(wb.storage);
  return err;
}

/*
** A half product with a bias on a backend whose elementwise ops take the
** halves mixed with float32: the product's float32 sums (product(): the
** backend's bfloat16 product into float32 where it has one, oneDNN's on
** the CPU, else the float32 product of converted operands) plus the bias,
** rounded once into out, as PyTorch's addmm.
*/
static int with_bias (const qkv_backend *be, qkv_tensor *out, const qkv_tensor *a,
                      const qkv_tensor *b, const qkv_tensor *bias, double alpha) {
  qkv_tensor t;
  if (!bias || !be->elementwise_halves || !qkv_is_half(out->dtype)) return QKV_EDTYPE;
  int err = qkv_op_fresh(&t, out, QKV_F32);
  if (err != QKV_OK) return err;
  if ((err = product(be, &t, a, b, alpha)) == QKV_OK) err = qkv_binary(QKV_ADD, out, &t, bias);
  qkv_storage_release(t.storage);
  return err;
}

/*
** a and b of out's dtype; bias NULL, or a tensor (out's dtype) that
** broadcasts over out's rows.  A float16 or bfloat16 product is asked of
** the backend as it is first (the CPU's bfloat16 one runs on oneDNN; with
** a bias, into float32 sums that the bias joins, with_bias), and where it
** says QKV_EDTYPE is one in float32 of the operands converted, the bias
** added in float32, rounded once at the end as PyTorch's addmm: the same
** exact products and float32 sums either way.
*/
int qkv_matmul_bias (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                     const qkv_tensor *bias, double alpha) {
  int err;
  qkv_tensor t, *o;
  const qkv_backend *be = qkv_op_backend(out, a, b, &err);
  if (be == NULL) return err;
  if (a->dtype != out->dtype || b->dtype != out->dtype) return QKV_EDTYPE;
  if ((err = with_bias(be, out, a, b, bias, alpha)) != QKV_EDTYPE) return err;
  int own = qkv_compute_dtype(out->dtype) == out->dtype;   /* computed in its dtype */
  if ((err = split_matmul(be, out, a, b, alpha)) == QKV_EDTYPE && (own || qkv_is_float(out->dtype)))
    err = qkv_op_matmul(be, out, a, b, alpha);
  if (err != QKV_EDTYPE || own)
    return err == QKV_OK && bias ? qkv_binary(QKV_ADD, out, out, bias) : err;
  if ((err = qkv_op_computed(out, &t, &o)) != QKV_OK) return err;
  return qkv_op_done(converted(be, o, a, b, bias, alpha), be, out, o);
}

int qkv_matmul (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                double alpha) {
  return qkv_matmul_bias(out, a, b, NULL, alpha);
}
