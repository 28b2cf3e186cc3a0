/*
** tensor.c -- dtypes, storages and views: everything about a tensor that
** does not touch its elements.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qkv.h"
#include "backend.h"
#include "half.h"

static const struct { const char *name; size_t size; int rank; } dtypes[QKV_NDTYPE] = {
  {"float32", 4, 4}, {"float64", 8, 5}, {"int64", 8, 2}, {"bool", 1, 0},
  {"int32", 4, 1}, {"float16", 2, 3}, {"bfloat16", 2, 3}
};

size_t qkv_elsize (qkv_dtype t) { return dtypes[t].size; }
const char *qkv_dtype_name (qkv_dtype t) { return dtypes[t].name; }
int qkv_is_float (qkv_dtype t) { return dtypes[t].rank >= 3; }

qkv_dtype qkv_compute_dtype (qkv_dtype t) {
  return t == QKV_I32 ? QKV_I64 : t == QKV_F16 || t == QKV_BF16 ? QKV_F32 : t;
}

int qkv_dtype_from_name (const char *name, qkv_dtype *t) {
  for (int i = 0; i < QKV_NDTYPE; i++)
    if (strcmp(name, dtypes[i].name) == 0) { *t = (qkv_dtype)i; return 1; }
  return 0;
}

qkv_dtype qkv_promote (qkv_dtype a, qkv_dtype b) {
  if (a != b && dtypes[a].rank == 3 && dtypes[b].rank == 3) return QKV_F32;
  return dtypes[a].rank >= dtypes[b].rank ? a : b;
}

double qkv_elem_get (qkv_dtype dt, const void *p) {
  switch (dt) {
    case QKV_F32: return *(const float *)p;
    case QKV_F64: return *(const double *)p;
    case QKV_I64: return (double)*(const int64_t *)p;
    case QKV_I32: return *(const int32_t *)p;
    case QKV_F16: return qkv_h2f(*(const uint16_t *)p);
    case QKV_BF16: return qkv_bf2f(*(const uint16_t *)p);
    default: return *(const unsigned char *)p;
  }
}

int64_t qkv_elem_geti (qkv_dtype dt, const void *p) {
  double x;
  switch (dt) {
    case QKV_I64: return *(const int64_t *)p;
    case QKV_I32: return *(const int32_t *)p;
    case QKV_BOOL: return *(const unsigned char *)p;
    default: x = qkv_elem_get(dt, p);
  }
  if (x != x) return 0;
  return x >= 9223372036854775808.0 ? INT64_MAX : x < -9223372036854775808.0 ? INT64_MIN
                                                                           : (int64_t)x;
}

void qkv_elem_set (qkv_dtype dt, void *p, double x) {
  switch (dt) {
    case QKV_F32: *(float *)p = (float)x; break;
    case QKV_F64: *(double *)p = x; break;
    case QKV_F16: *(uint16_t *)p = qkv_f2h((float)x); break;
    case QKV_BF16: *(uint16_t *)p = qkv_f2bf((float)x); break;
    case QKV_BOOL: *(unsigned char *)p = x != 0; break;
    default:                 /* the int types, clamped as a copy is */
      qkv_elem_seti(dt, p, x != x ? 0 : x >= 9223372036854775808.0 ? INT64_MAX
                           : x < -9223372036854775808.0 ? INT64_MIN : (int64_t)x);
  }
}

void qkv_elem_seti (qkv_dtype dt, void *p, int64_t i) {
  switch (dt) {
    case QKV_I64: *(int64_t *)p = i; break;
    case QKV_I32: *(int32_t *)p = (int32_t)(i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i); break;
    case QKV_BOOL: *(unsigned char *)p = i != 0; break;
    default: qkv_elem_set(dt, p, (double)i);
  }
}

const char *qkv_device_name (qkv_device d) {
  return d == QKV_CUDA ? "cuda" : "cpu";
}


/* storages */

qkv_storage qkv_closed_storage = {NULL, 0, 1, QKV_CPU, -1, 0};

static size_t live_bytes[QKV_NDEV], limit;

/* host and device bytes together: what the bindings pace the collector by */
size_t qkv_memory_live (void) { return live_bytes[QKV_CPU] + live_bytes[QKV_CUDA]; }

/* Tensors holding more than the machine's RAM can only end in the OOM
   killer (Linux overcommits), so an allocation that would take the live
   bytes past it is refused up front (the bindings collect and retry). */
size_t qkv_memory_limit (void) {
  if (limit == 0) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    limit = (pages > 0 && psize > 0) ? (size_t)pages * (size_t)psize
                                     : (size_t)1 << 40;
  }
  return limit;
}

/* for tests of the collect-and-retry path; 0 goes back to the RAM */
void qkv_memory_set_limit (size_t nbytes) { limit = nbytes; }

/*
** Small CPU storages come from a pool: the header and the data share one
** 64-byte-aligned block (data at +64), and a freed block goes on a free
** list for its size class, so a loop of small temporaries reuses blocks
** instead of paying aligned_alloc and free (and glibc's consolidation)
** twice per tensor.  The lists are bounded by POOL_KEEP bytes in all.
** Storages are made and released only by the thread that runs Lua.  Under
** AddressSanitizer nothing is kept, so a use after free is still seen.
*/
#define POOL_UNIT 64
#define POOL_CLASSES 32                      /* data up to 2 KiB */
#define POOL_KEEP ((size_t)1 << 20)

#if defined(__SANITIZE_ADDRESS__)
#define POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_OFF 1
#endif
#endif
#ifndef POOL_OFF
#define POOL_OFF 0
#endif

static qkv_storage *pool_free[POOL_CLASSES];  /* linked through ->data */
static size_t pool_bytes;

static size_t pool_block (int c) { return POOL_UNIT + (size_t)(c + 1) * POOL_UNIT; }

static qkv_storage *pool_get (size_t nbytes, int zero) {
  int c = nbytes ? (int)((nbytes - 1) / POOL_UNIT) : 0;
  qkv_storage *s = pool_free[c];
  if (s != NULL) {
    pool_free[c] = (qkv_storage *)s->data;
    pool_bytes -= pool_block(c);
  } else if ((s = aligned_alloc(POOL_UNIT, pool_block(c))) == NULL)
    return NULL;
  s->data = (char *)s + POOL_UNIT;
  s->pool = c + 1;
  if (zero) memset(s->data, 0, nbytes);
  return s;
}

static void pool_put (qkv_storage *s) {
  int c = s->pool - 1;
  if (POOL_OFF || pool_bytes + pool_block(c) > POOL_KEEP) { free(s); return; }
  s->data = pool_free[c];
  pool_free[c] = s;
  pool_bytes += pool_block(c);
}

qkv_storage *qkv_storage_new (qkv_device dev, size_t nbytes, int zero) {
  const qkv_backend *be = qkv_backend_of(dev);
  /* the RAM bounds host storages; the GPU's allocator says when it is full */
  size_t max = dev == QKV_CPU ? qkv_memory_limit() : SIZE_MAX, live = live_bytes[dev];
  if (be == NULL || live > max || nbytes > max - live) return NULL;
  qkv_storage *s;
  if (dev == QKV_CPU && nbytes <= POOL_CLASSES * POOL_UNIT) {
    if ((s = pool_get(nbytes, zero)) == NULL) return NULL;
  } else {
    if ((s = malloc(sizeof *s)) == NULL) return NULL;
    s->data = be->alloc(nbytes ? nbytes : 1, zero);
    if (s->data == NULL) { free(s); return NULL; }
    s->pool = 0;
  }
  s->nbytes = nbytes;
  s->refcount = 1;
  s->device = dev;
  s->version = 0;
  live_bytes[dev] += nbytes;
  return s;
}

void qkv_storage_retain (qkv_storage *s) { s->refcount++; }

void qkv_storage_release (qkv_storage *s) {
  if (s == NULL || s->pool < 0 || --s->refcount > 0) return;
  live_bytes[s->device] -= s->nbytes;
  if (s->pool) { pool_put(s); return; }
  qkv_backend_of(s->device)->free(s->data);
  free(s);
}


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

int qkv_broadcast_shape (int na, const int64_t *a, int nb, const int64_t *b,
                         int *nout, int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t x = i < n - na ? 1 : a[i - (n - na)];
    int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
    if (x != y && x != 1 && y != 1) return -1;
    out[i] = x == 1 ? y : x;
  }
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
