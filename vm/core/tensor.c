/*
** tensor.c -- shapes and views: everything about a tensor that neither
** touches its elements nor owns memory (dtype.c, storage.c).
*/
#include <stdio.h>
#include <string.h>

#include "qkv.h"


/* shapes */

int64_t qkv_numel (const qkv_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->size[i];
  return n;
}

/* Fails when the sizes are negative or the byte count overflows.  The
   nonzero sizes must multiply within range even when another size is 0,
   since the strides of the shape are such products. */
int qkv_numel_of (int ndim, const int64_t *size, size_t elsize, int64_t *numel) {
  int64_t n = 1, nz = (int64_t)elsize;   /* nz: bytes of the nonzero sizes */
  for (int i = 0; i < ndim; i++) {
    if (size[i] < 0) return -1;
    if (size[i] > 0 && __builtin_mul_overflow(nz, size[i], &nz)) return -1;
    n *= size[i];
  }
  *numel = n;
  return 0;
}

int qkv_is_contiguous (const qkv_tensor *t) {
  int64_t expect = 1;
  if (qkv_numel(t) == 0) return 1;      /* no element is out of place */
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->size[i] != 1 && t->stride[i] != expect) return 0;
    expect *= t->size[i];
  }
  return 1;
}

/* the strides of a shape that qkv_numel_of accepts; for one it refuses
   (a caller's bug) they saturate rather than overflow */
void qkv_set_contiguous (qkv_tensor *t, int ndim, const int64_t *size) {
  int64_t s = 1;
  t->ndim = ndim;
  for (int i = ndim - 1; i >= 0; i--) {
    t->size[i] = size[i];
    t->stride[i] = s;
    if (size[i] > 1 && __builtin_mul_overflow(s, size[i], &s)) s = INT64_MAX;
  }
}

/* out may be a or b (where's three shapes broadcast in two steps): the
   shape is made aside and copied, since writing out[i] in place overwrote
   a's entries still to be read once the result had more dims than a */
int qkv_broadcast_shape (int na, const int64_t *a, int nb, const int64_t *b,
                         int *nout, int64_t *out) {
  int n = na > nb ? na : nb;
  int64_t r[QKV_MAXDIM];
  if (n > QKV_MAXDIM) return -1;
  for (int i = 0; i < n; i++) {
    int64_t x = i < n - na ? 1 : a[i - (n - na)];
    int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
    if (x != y && x != 1 && y != 1) return -1;
    r[i] = x == 1 ? y : x;
  }
  memcpy(out, r, sizeof *r * (size_t)n);
  *nout = n;
  return 0;
}

int qkv_expand (qkv_tensor *dst, const qkv_tensor *src, int ndim, const int64_t *size) {
  /* the common case, nothing to expand: src's shape is known to be valid */
  if (ndim == src->ndim && memcmp(size, src->size, sizeof *size * (size_t)ndim) == 0) {
    *dst = *src;
    return 0;
  }
  qkv_tensor r = *src;
  int64_t n;
  int lead = ndim - src->ndim;
  /* a size < 0 (-1 asked for a new leading dim), or more bytes than int64
     (the rule of qkv_numel_of, as for a tensor that owns its storage) */
  if (lead < 0 || qkv_numel_of(ndim, size, qkv_elsize(src->dtype), &n) != 0) return -1;
  r.ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t sz = j < 0 ? 1 : src->size[j];
    if (sz != size[i] && sz != 1) return -1;
    r.size[i] = size[i];
    r.stride[i] = (j < 0 || sz != size[i]) ? 0 : src->stride[j];
  }
  *dst = r;
  return 0;
}

void *qkv_data (const qkv_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)qkv_elsize(t->dtype);
}

char *qkv_shape_str (char *buf, size_t n, int ndim, const int64_t *size) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)size[i]);
  if (k < n) snprintf(buf + k, n - k, ndim == 1 ? ",)" : ")");
  return buf;
}


/* views: the callers have checked the dims and ranges */

void qkv_view_transpose (qkv_tensor *dst, const qkv_tensor *src, int d1, int d2) {
  qkv_tensor r = *src;
  r.size[d1] = src->size[d2]; r.stride[d1] = src->stride[d2];
  r.size[d2] = src->size[d1]; r.stride[d2] = src->stride[d1];
  *dst = r;
}

void qkv_view_permute (qkv_tensor *dst, const qkv_tensor *src, const int *perm) {
  qkv_tensor r = *src;
  for (int i = 0; i < src->ndim; i++) {
    r.size[i] = src->size[perm[i]];
    r.stride[i] = src->stride[perm[i]];
  }
  *dst = r;
}

void qkv_view_narrow (qkv_tensor *dst, const qkv_tensor *src, int d,
                      int64_t start, int64_t len) {
  qkv_tensor r = *src;
  if (len > 0) r.offset += start * src->stride[d];
  r.size[d] = len;
  *dst = r;
}

void qkv_view_select (qkv_tensor *dst, const qkv_tensor *src, int d, int64_t i) {
  qkv_tensor r = *src;
  r.offset += i * src->stride[d];
  for (int k = d; k < src->ndim - 1; k++) {
    r.size[k] = src->size[k + 1];
    r.stride[k] = src->stride[k + 1];
  }
  r.ndim--;
  *dst = r;
}

void qkv_view_unsqueeze (qkv_tensor *dst, const qkv_tensor *src, int d) {
  qkv_tensor r = *src;
  for (int k = src->ndim; k > d; k--) {
    r.size[k] = src->size[k - 1];
    r.stride[k] = src->stride[k - 1];
  }
  r.size[d] = 1;
  /* any stride serves a dim of size 1; PyTorch's is this product, which
     for an empty src need not fit */
  if (d >= src->ndim || __builtin_mul_overflow(src->size[d], src->stride[d], &r.stride[d]))
    r.stride[d] = 1;
  r.ndim++;
  *dst = r;
}

void qkv_view_squeeze (qkv_tensor *dst, const qkv_tensor *src, int d) {
  qkv_tensor r = *src;
  int n = 0;
  for (int k = 0; k < src->ndim; k++) {
    int drop = src->size[k] == 1 && (d < 0 || d == k);
    if (!drop) { r.size[n] = src->size[k]; r.stride[n] = src->stride[k]; n++; }
  }
  r.ndim = n;
  *dst = r;
}

/*
** New strides for src seen with shape `size`, without copying, when each
** group of old dims that maps onto a group of new dims is itself laid out
** contiguously (the rule of PyTorch's computeStride).  -1 when impossible.
*/
int qkv_view_reshape (qkv_tensor *dst, const qkv_tensor *src, int ndim,
                      const int64_t *size) {
  qkv_tensor r = *src;
  int64_t numel = qkv_numel(src), n;
  r.ndim = ndim;
  /* a shape no tensor may have: dst still gets it, with strides that do
     not overflow, so that a caller that ignores -1 pushes a view the
     bindings refuse (qkvL_pushview) rather than garbage */
  if (qkv_numel_of(ndim, size, qkv_elsize(src->dtype), &n) != 0) {
    qkv_set_contiguous(&r, ndim, size);
    *dst = r;
    return -1;
  }
  if (numel == 0 || src->ndim == 0) {
    qkv_set_contiguous(&r, ndim, size);
    *dst = r;
    return 0;
  }
  int vd = ndim - 1;
  int64_t chunk = src->stride[src->ndim - 1], tensor_numel = 1, view_numel = 1;
  for (int td = src->ndim - 1; td >= 0; td--) {
    int64_t span;
    tensor_numel *= src->size[td];
    /* a group ends where the old layout stops being contiguous */
    if (td == 0 || (src->size[td - 1] != 1 &&
                    (__builtin_mul_overflow(tensor_numel, chunk, &span) ||
                     src->stride[td - 1] != span))) {
      while (vd >= 0 && (view_numel < tensor_numel || size[vd] == 1)) {
        r.stride[vd] = view_numel * chunk;
        r.size[vd] = size[vd];
        view_numel *= size[vd];
        vd--;
      }
      if (view_numel != tensor_numel) return -1;
      if (td > 0) {
        chunk = src->stride[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (vd != -1) return -1;
  *dst = r;
  return 0;
}
