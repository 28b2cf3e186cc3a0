/*
** select.cu -- CUDA kernels that pick elements rather than compute them,
** as vm/cpu/select.c: where (a choice by a bool tensor), gather (a read
** through int64 positions), scatter_add (gather's inverse, with atomic
** adds) and sort (a stable sort of each line, with its positions).
**
** where, gather and scatter_add are one thread per element over the
** strided iterator (cuda.cuh), moving elements by width.  sort hands each
** line to CUB's stable segmented sort as (key, position) pairs and then
** gathers the values through the sorted positions, so they keep their
** exact bits.
*/
#include <cub/device/device_segmented_sort.cuh>

#include "cuda.cuh"
#include "../common/shape.h"

#define THREADS 256

/* the unsigned type of an element's width, for kernels that move bits */
#define BY_WIDTH(dt, CALL) \
  switch (qkv_dtype_bytes(dt)) { \
    case 1: return CALL(uint8_t); \
    case 2: return CALL(uint16_t); \
    case 4: return CALL(uint32_t); \
    case 8: return CALL(uint64_t); \
    default: return QKV_EINTERNAL; \
  }


/* ---- where: out = cond ? a : b ---- */

/* operands: out, cond, a, b */
template <typename T>
__global__ void where_kernel (qkv_cu_iter it) {
  T *o = (T *)it.data[0];
  const uint8_t *c = (const uint8_t *)it.data[1];
  const T *a = (const T *)it.data[2], *b = (const T *)it.data[3];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[4];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename T>
static int where_launch (const qkv_cu_iter &it) {
  where_kernel<T><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it);
  launchCheck("where_kernel");
  return QKV_OK;
}

int qkv_cuda_where (qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                    const qkv_tensor *b) {
  const qkv_tensor *t[4] = {out, cond, a, b};
  qkv_cu_iter it;
  if ((unsigned)out->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (cond->dtype != QKV_BOOL || a->dtype != out->dtype || b->dtype != out->dtype)
    return QKV_EINTERNAL;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  qkv_cu_iter_init(&it, 4, t);
#define WHERE(T) where_launch<T>(it)
  BY_WIDTH(out->dtype, WHERE)
#undef WHERE
}


/* ---- gather: out[i] = a[i with i_dim := idx[i]] ---- */

/* operands: out, idx, a with a 0 stride at dim (sdim: its real one) */
template <typename T>
__global__ void gather_kernel (qkv_cu_iter it, int64_t sdim) {
  T *o = (T *)it.data[0];
  const int64_t *ix = (const int64_t *)it.data[1];
  const T *a = (const T *)it.data[2];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[3];
    qkv_cu_iter_at(it, i, off);
    o[off[0]] = a[off[2] + ix[off[1]] * sdim];
  }
}

template <typename T>
static int gather_launch (const qkv_cu_iter &it, int64_t sdim) {
  gather_kernel<T><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, sdim);
  launchCheck("gather_kernel");
  return QKV_OK;
}

int qkv_cuda_gather (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim) {
  if ((unsigned)out->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (a->dtype != out->dtype || idx->dtype != QKV_I64 || dim < 0 || dim >= out->ndim)
    return QKV_EINTERNAL;
  if (qkv_cu_numel(out) == 0) return QKV_OK;
  /* the position along dim comes from idx; the iterator reads only the
     strides of operands past the first */
  qkv_tensor sa = *a;
  sa.stride[dim] = 0;
  const qkv_tensor *t[3] = {out, idx, &sa};
  qkv_cu_iter it;
  qkv_cu_iter_init(&it, 3, t);
#define GATHER(T) gather_launch<T>(it, a->stride[dim])
  BY_WIDTH(out->dtype, GATHER)
#undef GATHER
}


/* ---- scatter_add: out[i with i_dim := idx[i]] += src[i] ---- */

/* two elements of src may land on one of out: atomic adds, which wrap for
   the ints as the CPU's unsigned adds do (float sums may round in another
   order than the CPU's sequential one) */
__device__ static inline void add_to (float *p, float v) { atomicAdd(p, v); }
__device__ static inline void add_to (double *p, double v) { atomicAdd(p, v); }
__device__ static inline void add_to (int64_t *p, int64_t v) {
  atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
__device__ static inline void add_to (int32_t *p, int32_t v) { atomicAdd((int *)p, (int)v); }

/* operands: out with src's shape and a 0 stride at dim (sdim: its real
   one), idx, src */
template <typename T>
__global__ void scatter_kernel (qkv_cu_iter it, int64_t sdim) {
  T *o = (T *)it.data[0];
  const int64_t *ix = (const int64_t *)it.data[1];
  const T *s = (const T *)it.data[2];
  QKV_CU_LOOP(i, it.numel) {
    int64_t off[3];
    qkv_cu_iter_at(it, i, off);
    add_to(o + off[0] + ix[off[1]] * sdim, s[off[2]]);
  }
}

template <typename T>
static int scatter_launch (const qkv_cu_iter &it, int64_t sdim) {
  scatter_kernel<T><<<qkv_cu_blocks(it.numel, THREADS), THREADS>>>(it, sdim);
  launchCheck("scatter_kernel");
  return QKV_OK;
}

int qkv_cuda_scatter_add (qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src,
                          int dim) {
  qkv_dtype dt = out->dtype;
  if (dt != QKV_F32 && dt != QKV_F64 && dt != QKV_I64 && dt != QKV_I32) return QKV_EDTYPE;
  if (src->dtype != dt || idx->dtype != QKV_I64 || src->ndim != out->ndim || dim < 0 ||
      dim >= out->ndim)
    return QKV_EINTERNAL;
  if (qkv_cu_numel(src) == 0) return QKV_OK;
  /* the loop runs over src's shape; out's position along dim comes from idx */
  qkv_tensor so = *out;
  for (int d = 0; d < src->ndim; d++) so.size[d] = src->size[d];
  so.stride[dim] = 0;
  const qkv_tensor *t[3] = {&so, idx, src};
  qkv_cu_iter it;
  qkv_cu_iter_init(&it, 3, t);
  int64_t sdim = out->stride[dim];
  switch (dt) {
    case QKV_F32: return scatter_launch<float>(it, sdim);
    case QKV_F64: return scatter_launch<double>(it, sdim);
    case QKV_I64: return scatter_launch<int64_t>(it, sdim);
    default: return scatter_launch<int32_t>(it, sdim);
  }
}


/* ---- sort: each last-dim line, stably, NaN above every number ---- */

/*
** Keys: the CPU compares values, so -0 equals 0 and every NaN equals every
** other, NaN above every number.  A float is made canonical (+0 for -0,
** one positive quiet NaN) and then mapped to unsigned bits in the same
** order (negatives flipped whole, the sign bit set on the rest; NaN lands
** above +inf), which both of CUB's ways (radix passes, and a merge sort
** with < for short segments, which a NaN would break) sort correctly.
** float32 and the halves give 32 bits (exact), float64 64; the ints and
** bool are int64.  The stable sort keeps equal keys in line order,
** ascending or descending, as the CPU's tie-break on the position.
*/
__device__ static inline uint32_t ordered (float v) {
  uint32_t u = v != v ? 0x7fc00000u : v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}
__device__ static inline uint64_t ordered (double v) {
  uint64_t u = v != v ? 0x7ff8000000000000ull : v == 0.0 ? 0ull
             : (uint64_t)__double_as_longlong(v);
  return (u >> 63) ? ~u : u | 0x8000000000000000ull;
}

template <typename K> __device__ static K key_of (qkv_dtype dt, const char *p);
template <> __device__ uint32_t key_of<uint32_t> (qkv_dtype dt, const char *p) {
  return ordered(dt == QKV_F32 ? *(const float *)p
                 : dt == QKV_F16 ? qkv_h2f(*(const uint16_t *)p)
                 : qkv_bf2f(*(const uint16_t *)p));
}
template <> __device__ uint64_t key_of<uint64_t> (qkv_dtype dt, const char *p) {
  (void)dt;
  return ordered(*(const double *)p);
}
template <> __device__ int64_t key_of<int64_t> (qkv_dtype dt, const char *p) {
  return dt == QKV_I64 ? *(const int64_t *)p
       : dt == QKV_I32 ? (int64_t)*(const int32_t *)p
       : (int64_t)*(const uint8_t *)p;
}

/* where the lines lie: `lines` runs over the line index (operands a,
   values, indices, each with its last dim taken as size 1), n elements a
   line, s[k] the operands' last strides */
struct Lines {
  qkv_cu_iter it;
  int64_t n, s[3];
};

/* element i (line-major) of a as a key, and its position in the line */
template <typename K>
__global__ void key_kernel (Lines l, qkv_dtype dt, K *key, int64_t *pos, int64_t total) {
  const char *a = l.it.data[0];
  const int64_t es = (int64_t)qkv_dtype_bytes(dt);
  QKV_CU_LOOP(i, total) {
    int64_t r = i / l.n, j = i - r * l.n, off[3];
    qkv_cu_iter_at(l.it, r, off);
    key[i] = key_of<K>(dt, a + (off[0] + j * l.s[0]) * es);
    pos[i] = j;
  }
}

/* segment s is elements [s n, (s + 1) n) */
static __global__ void segments_kernel (int64_t *seg, int64_t n, int64_t count) {
  QKV_CU_LOOP(s, count) seg[s] = s * n;
}

/* values[j] = a[pos[j]] and indices[j] = pos[j] along each line (pos NULL:
   lines of one element, position 0) */
template <typename T>
__global__ void sorted_kernel (Lines l, const int64_t *pos, int64_t total) {
  const T *a = (const T *)l.it.data[0];
  T *v = (T *)l.it.data[1];
  int64_t *ix = (int64_t *)l.it.data[2];
  QKV_CU_LOOP(i, total) {
    int64_t r = i / l.n, j = i - r * l.n, off[3];
    qkv_cu_iter_at(l.it, r, off);
    int64_t p = pos ? pos[i] : j;
    v[off[1] + j * l.s[1]] = a[off[0] + p * l.s[0]];
    ix[off[2] + j * l.s[2]] = p;
  }
}

template <typename T>
static int sorted_launch (const Lines &l, const int64_t *pos, int64_t total) {
  sorted_kernel<T><<<qkv_cu_blocks(total, THREADS), THREADS>>>(l, pos, total);
  launchCheck("sorted_kernel");
  return QKV_OK;
}

static int sorted_by_width (qkv_dtype dt, const Lines &l, const int64_t *pos, int64_t total) {
#define SORTED(T) sorted_launch<T>(l, pos, total)
  BY_WIDTH(dt, SORTED)
#undef SORTED
}

/* scratch for one sort: keys and positions in and out, segment offsets
   and CUB's temporary storage */
struct SortBuf {
  void *key_in, *key_out, *tmp;
  int64_t *pos_in, *pos_out, *seg;
  size_t tmp_bytes;
};

static void sortbuf_free (SortBuf *b) {
  qkv_cu_free(b->key_in);
  qkv_cu_free(b->key_out);
  qkv_cu_free(b->tmp);
  qkv_cu_free(b->pos_in);
  qkv_cu_free(b->pos_out);
  qkv_cu_free(b->seg);
}

/* CUB's segmented sort of the keys and positions, in b's buffers (tmp
   NULL: only asks how much temporary storage it needs) */
template <typename K>
static int segmented_sort (SortBuf *b, int64_t total, int64_t rows, int desc) {
  const K *kin = (const K *)b->key_in;
  K *kout = (K *)b->key_out;
  if (desc)
    cudaCheck(cub::DeviceSegmentedSort::StableSortPairsDescending(
        b->tmp, b->tmp_bytes, kin, kout, b->pos_in, b->pos_out, total, rows, b->seg,
        b->seg + 1, 0));
  else
    cudaCheck(cub::DeviceSegmentedSort::StableSortPairs(
        b->tmp, b->tmp_bytes, kin, kout, b->pos_in, b->pos_out, total, rows, b->seg,
        b->seg + 1, 0));
  return QKV_OK;
}

/* the positions of each line sorted into b->pos_out (b's buffers NULL on
   entry; the caller frees them on any return) */
template <typename K>
static int sort_positions (SortBuf *b, const Lines &l, qkv_dtype dt, int64_t total,
                           int desc) {
  int64_t rows = total / l.n;
  int err;
  b->key_in = qkv_cu_alloc((size_t)total * sizeof(K));
  b->key_out = qkv_cu_alloc((size_t)total * sizeof(K));
  b->pos_in = (int64_t *)qkv_cu_alloc((size_t)total * sizeof(int64_t));
  b->pos_out = (int64_t *)qkv_cu_alloc((size_t)total * sizeof(int64_t));
  b->seg = (int64_t *)qkv_cu_alloc((size_t)(rows + 1) * sizeof(int64_t));
  if (!b->key_in || !b->key_out || !b->pos_in || !b->pos_out || !b->seg) return QKV_ENOMEM;
  key_kernel<K><<<qkv_cu_blocks(total, THREADS), THREADS>>>(l, dt, (K *)b->key_in,
                                                            b->pos_in, total);
  launchCheck("key_kernel");
  segments_kernel<<<qkv_cu_blocks(rows + 1, THREADS), THREADS>>>(b->seg, l.n, rows + 1);
  launchCheck("segments_kernel");
  b->tmp = NULL;
  b->tmp_bytes = 0;
  if ((err = segmented_sort<K>(b, total, rows, desc)) != QKV_OK) return err;
  if ((b->tmp = qkv_cu_alloc(b->tmp_bytes ? b->tmp_bytes : 1)) == NULL) return QKV_ENOMEM;
  return segmented_sort<K>(b, total, rows, desc);
}

static int sort_lines (qkv_tensor *values, const qkv_tensor *a, const Lines &l,
                       int64_t total, int desc) {
  SortBuf b = {NULL, NULL, NULL, NULL, NULL, NULL, 0};
  int err;
  const int64_t *pos = NULL;
  if (l.n > 1) {
    switch (a->dtype) {
      case QKV_F64: err = sort_positions<uint64_t>(&b, l, a->dtype, total, desc); break;
      case QKV_I64: case QKV_I32: case QKV_BOOL:
        err = sort_positions<int64_t>(&b, l, a->dtype, total, desc);
        break;
      default: err = sort_positions<uint32_t>(&b, l, a->dtype, total, desc); break;
    }
    pos = b.pos_out;
  } else err = QKV_OK;
  if (err == QKV_OK) err = sorted_by_width(values->dtype, l, pos, total);
  sortbuf_free(&b);
  return err;
}

/* t with its last dim taken as size 1: the iterator then runs over lines */
static qkv_tensor line_view (const qkv_tensor *t) {
  qkv_tensor v = *t;
  if (v.ndim) v.size[v.ndim - 1] = 1;
  return v;
}

/* values and indices have a's shape (dtypes a's and int64); the sorted dim
   is the last (vm/dispatch/ops_nn.c moves it there) */
static int sort_from (qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc) {
  int64_t total = qkv_cu_numel(a);
  qkv_tensor la = line_view(a), lv = line_view(values), li = line_view(indices);
  const qkv_tensor *t[3] = {&la, &lv, &li};
  Lines l;
  qkv_cu_iter_init(&l.it, 3, t);
  l.n = qkv_last_size(a);
  l.s[0] = qkv_last_stride(a);
  l.s[1] = qkv_last_stride(values);
  l.s[2] = qkv_last_stride(indices);
  return sort_lines(values, a, l, total, desc);
}

int qkv_cuda_sort (qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc) {
  if ((unsigned)a->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  if (values->dtype != a->dtype || indices->dtype != QKV_I64) return QKV_EINTERNAL;
  if (qkv_cu_numel(a) == 0) return QKV_OK;
  if (a->storage != values->storage && a->storage != indices->storage)
    return sort_from(values, indices, a, desc);
  /* writing values or indices would change what a later read of a sees:
     a is copied whole first, as the CPU's line buffer does */
  int64_t total = qkv_cu_numel(a);
  qkv_storage s = {NULL, (size_t)total * qkv_dtype_bytes(a->dtype), 1, QKV_CUDA, -1, 0};
  if ((s.data = qkv_cu_alloc(s.nbytes)) == NULL) return QKV_ENOMEM;
  qkv_tensor c = *a;
  c.offset = 0;
  c.storage = &s;
  int64_t st = 1;
  for (int d = a->ndim - 1; d >= 0; d--) {
    c.stride[d] = st;
    st *= a->size[d];
  }
  int err = qkv_cuda_copy(&c, a);
  if (err == QKV_OK) err = sort_from(values, indices, &c, desc);
  qkv_cu_free(s.data);
  return err;
}
