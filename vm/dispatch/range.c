/*
** range.c -- the message of QKV_ERANGE, which names the first value that
** breaks the rule for floats going into an integer dtype (qkv_fits,
** vm/core/dtype.c).  A float converts by truncation toward 0; NaN, the
** infinities and values whose truncation the integer cannot hold are
** errors, never a clamp or a 0.  The kernels only say that some element
** failed (one vectorised pass); the element is found here, on the error
** path, for the message.
*/
#include <math.h>
#include <stdio.h>

#include "../core/qkv.h"
#include "range.h"

static char message[400] = "a value does not fit in the integer dtype";

const char *qkv_op_range_message (void) { return message; }

/* "cannot convert nan at [2, 1] to int64 (...)"; at is NULL for no position */
static void describe (double v, qkv_dtype to, int ndim, const int64_t *at) {
  char val[40], pos[QKV_MAXDIM * 22 + 8] = "";
  const char *why = to == QKV_I64 ? "out of its range [-9223372036854775808, 9223372036854775807]"
                                  : "out of its range [-2147483648, 2147483647]";
  if (v != v) snprintf(val, sizeof val, "nan"), why = "NaN has no integer value";
  else if (isinf(v)) snprintf(val, sizeof val, v > 0 ? "inf" : "-inf"),
                     why = "an infinity has no integer value";
  else snprintf(val, sizeof val, "%.17g", v);
  if (at != NULL && ndim > 0) {
    size_t k = (size_t)snprintf(pos, sizeof pos, " at [");
    for (int d = 0; d < ndim && k < sizeof pos; d++)
      k += (size_t)snprintf(pos + k, sizeof pos - k, d ? ", %lld" : "%lld",
                            (long long)at[d] + 1);
    if (k < sizeof pos) snprintf(pos + k, sizeof pos - k, "]");
  }
  snprintf(message, sizeof message, "cannot convert %s%s to %s (%s)", val, pos,
           qkv_dtype_name(to), why);
}

void qkv_op_range_value (double v, qkv_dtype to) { describe(v, to, 0, NULL); }

/* the first element of x (on the host) in row-major order that `to`
   cannot hold; 0 when there is none */
static int first_bad (const qkv_tensor *x, qkv_dtype to) {
  int64_t at[QKV_MAXDIM] = {0}, n = qkv_numel(x);
  const char *base = qkv_data(x);
  size_t es = qkv_elsize(x->dtype);
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int d = 0; d < x->ndim; d++) off += at[d] * x->stride[d];
    double v = qkv_elem_get(x->dtype, base + off * (int64_t)es);
    if (!qkv_fits(to, v)) {
      describe(v, to, x->ndim, at);
      return 1;
    }
    for (int d = x->ndim - 1; d >= 0 && ++at[d] == x->size[d]; d--) at[d] = 0;
  }
  return 0;
}

/* after a copy of src into dtype `to` failed with QKV_ERANGE; a GPU
   tensor is read through a host copy (when memory allows; otherwise the
   message names the class of values, not the element) */
void qkv_op_range (const qkv_tensor *src, qkv_dtype to) {
  snprintf(message, sizeof message, "cannot convert NaN, an infinity or a value out of "
           "%s's range to %s", qkv_dtype_name(to), qkv_dtype_name(to));
  if (src->storage->device == QKV_CPU) {
    first_bad(src, to);
    return;
  }
  qkv_tensor h = *src;
  h.offset = 0;
  qkv_set_contiguous(&h, src->ndim, src->size);
  h.storage = qkv_storage_new(QKV_CPU, (size_t)qkv_numel(src) * qkv_elsize(src->dtype), 0);
  if (h.storage == NULL) return;
  if (qkv_transfer(&h, src) == QKV_OK) first_bad(&h, to);
  qkv_storage_release(h.storage);
}
