/*
** select.c -- CPU kernels that pick elements rather than compute them:
** where (a choice by a bool tensor), gather (a read through int64
** positions) and sort (a stable sort of each line, with its positions).
**
** They move bytes of any dtype and run on one thread: none of them is on
** an attention hot path, and the strided walk below keeps them simple.
** Each looks at the interrupt flag every 64K elements.
*/
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "../common/shape.h"

#define CHUNK 65536

/*
** Calls row(ctx, off, n) for each row (last dim) of `size`, with off[k]
** the element offset of operand k's first element in that row (strides
** in elements, per operand).  QKV_EINTR when the flag stopped it.
*/
typedef void (*rowfn) (void *ctx, const int64_t *off, int64_t n);

static int walk (int ndim, const int64_t *size, int nops,
                 const int64_t *const *stride, rowfn row, void *ctx) {
  int64_t idx[QKV_MAXDIM] = {0}, off[4] = {0}, n = ndim ? size[ndim - 1] : 1;
  int64_t rows = 1, done = 0;
  for (int d = 0; d < ndim; d++) {
    if (size[d] == 0) return QKV_OK;
    if (d < ndim - 1) rows *= size[d];
  }
  for (int64_t r = 0; r < rows; r++) {
    row(ctx, off, n);
    if ((done += n) >= CHUNK) {
      if (qkv_interrupted) return QKV_EINTR;
      done = 0;
    }
    for (int d = ndim - 2; d >= 0; d--) {         /* the next row's index */
      for (int k = 0; k < nops; k++) off[k] += stride[k][d];
      if (++idx[d] < size[d]) break;
      for (int k = 0; k < nops; k++) off[k] -= stride[k][d] * size[d];
      idx[d] = 0;
    }
  }
  return QKV_OK;
}


/* where: out = cond ? a : b */

typedef struct {
  char *o; const unsigned char *c; const char *a, *b;
  int64_t so, sc, sa, sb;
  size_t es;
} Where;

static void where_row (void *ctx, const int64_t *off, int64_t n) {
  const Where *w = ctx;
  char *o = w->o + off[0] * (int64_t)w->es;
  const unsigned char *c = w->c + off[1];
  const char *a = w->a + off[2] * (int64_t)w->es, *b = w->b + off[3] * (int64_t)w->es;
  for (int64_t i = 0; i < n; i++)
    memcpy(o + i * w->so * (int64_t)w->es,
           c[i * w->sc] ? a + i * w->sa * (int64_t)w->es : b + i * w->sb * (int64_t)w->es,
           w->es);
}

int qkv_cpu_where (qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                   const qkv_tensor *b) {
  Where w = {qkv_data(out), qkv_data(cond), qkv_data(a), qkv_data(b),
             qkv_last_stride(out), qkv_last_stride(cond), qkv_last_stride(a),
             qkv_last_stride(b), qkv_elsize(out->dtype)};
  const int64_t *st[4] = {out->stride, cond->stride, a->stride, b->stride};
  return walk(out->ndim, out->size, 4, st, where_row, &w);
}


/* gather: out[i] = a[i with i_dim := idx[i]] */

typedef struct {
  char *o; const int64_t *ix; const char *a;
  int64_t so, si, sa, sdim;
  size_t es;
} Gather;

static void gather_row (void *ctx, const int64_t *off, int64_t n) {
  const Gather *g = ctx;
  char *o = g->o + off[0] * (int64_t)g->es;
  const int64_t *ix = g->ix + off[1];
  const char *a = g->a + off[2] * (int64_t)g->es;
  for (int64_t i = 0; i < n; i++)
    memcpy(o + i * g->so * (int64_t)g->es,
           a + (i * g->sa + ix[i * g->si] * g->sdim) * (int64_t)g->es, g->es);
}

int qkv_cpu_gather (qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim) {
  int64_t sa[QKV_MAXDIM];
  memcpy(sa, a->stride, sizeof sa);
  sa[dim] = 0;                 /* the position along dim comes from idx */
  Gather g = {qkv_data(out), qkv_data(idx), qkv_data(a),
              qkv_last_stride(out), qkv_last_stride(idx), out->ndim ? sa[out->ndim - 1] : 0,
              a->stride[dim], qkv_elsize(out->dtype)};
  const int64_t *st[3] = {out->stride, idx->stride, sa};
  return walk(out->ndim, out->size, 3, st, gather_row, &g);
}


/* scatter_add: out[i with i_dim := idx[i]] += src[i], one thread (two
   elements of src may land on one of out) */

typedef struct {
  char *o; const int64_t *ix; const char *s;
  int64_t so, si, ss, sdim;
  qkv_dtype dt;
} Scatter;

static void scatter_row (void *ctx, const int64_t *off, int64_t n) {
  const Scatter *c = ctx;
  size_t es = qkv_elsize(c->dt);
  const int64_t *ix = c->ix + off[1];
  for (int64_t i = 0; i < n; i++) {
    char *o = c->o + (off[0] + i * c->so + ix[i * c->si] * c->sdim) * (int64_t)es;
    const char *s = c->s + (off[2] + i * c->ss) * (int64_t)es;
    switch (c->dt) {
      case QKV_F32: *(float *)o += *(const float *)s; break;
      case QKV_F64: *(double *)o += *(const double *)s; break;
      case QKV_I32: *(int32_t *)o = (int32_t)((uint32_t)*(int32_t *)o + (uint32_t)*(const int32_t *)s); break;
      default: *(int64_t *)o = (int64_t)((uint64_t)*(int64_t *)o + (uint64_t)*(const int64_t *)s); break;
    }
  }
}

int qkv_cpu_scatter_add (qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64 && out->dtype != QKV_I64 &&
      out->dtype != QKV_I32)
    return QKV_EDTYPE;
  int64_t so[QKV_MAXDIM];
  memcpy(so, out->stride, sizeof so);
  so[dim] = 0;                 /* the position along dim comes from idx */
  Scatter c = {qkv_data(out), qkv_data(idx), qkv_data(src),
               src->ndim ? so[src->ndim - 1] : 0, qkv_last_stride(idx), qkv_last_stride(src),
               out->stride[dim], out->dtype};
  const int64_t *st[3] = {so, idx->stride, src->stride};
  return walk(src->ndim, src->size, 3, st, scatter_row, &c);
}


/* sort: each last-dim line, stably, NaN above every number (as PyTorch) */

typedef struct { union { double d; int64_t l; } v; int64_t i; } Item;

static int by_index (const Item *x, const Item *y) { return (x->i > y->i) - (x->i < y->i); }

static int cmp_d (const void *p, const void *q, int desc) {
  const Item *x = p, *y = q;
  double a = x->v.d, b = y->v.d;
  int an = a != a, bn = b != b;
  int c = an || bn ? an - bn : (a > b) - (a < b);
  return c ? (desc ? -c : c) : by_index(x, y);
}
static int cmp_l (const void *p, const void *q, int desc) {
  const Item *x = p, *y = q;
  int c = (x->v.l > y->v.l) - (x->v.l < y->v.l);
  return c ? (desc ? -c : c) : by_index(x, y);
}
static int d_asc (const void *p, const void *q) { return cmp_d(p, q, 0); }
static int d_desc (const void *p, const void *q) { return cmp_d(p, q, 1); }
static int l_asc (const void *p, const void *q) { return cmp_l(p, q, 0); }
static int l_desc (const void *p, const void *q) { return cmp_l(p, q, 1); }

typedef struct {
  const qkv_tensor *a, *v, *ix;
  char *pa, *pv; int64_t *pi;
  int desc;
  Item *buf;
} Sort;

static void load (const Sort *s, const char *p, int64_t st, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const char *e = p + i * st * (int64_t)qkv_elsize(s->a->dtype);
    Item *it = &s->buf[i];
    it->i = i;
    if (qkv_is_float(s->a->dtype)) it->v.d = qkv_elem_get(s->a->dtype, e);
    else it->v.l = qkv_elem_geti(s->a->dtype, e);
  }
}

static void store (const Sort *s, char *p, int64_t st, int64_t *ix, int64_t sti, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    char *e = p + i * st * (int64_t)qkv_elsize(s->v->dtype);
    const Item *it = &s->buf[i];
    ix[i * sti] = it->i;
    if (qkv_is_float(s->v->dtype)) qkv_elem_set(s->v->dtype, e, it->v.d);  /* exact */
    else qkv_elem_seti(s->v->dtype, e, it->v.l);
  }
}

static void sort_row (void *ctx, const int64_t *off, int64_t n) {
  const Sort *s = ctx;
  size_t es = qkv_elsize(s->a->dtype);
  int fl = qkv_is_float(s->a->dtype);
  load(s, s->pa + off[0] * (int64_t)es, qkv_last_stride(s->a), n);
  qsort(s->buf, (size_t)n, sizeof(Item),
        fl ? (s->desc ? d_desc : d_asc) : (s->desc ? l_desc : l_asc));
  store(s, s->pv + off[1] * (int64_t)es, qkv_last_stride(s->v), s->pi + off[2],
        qkv_last_stride(s->ix), n);
}

/* values and indices have a's shape and dtype (int64); dim is the last
   (vm/dispatch/ops_nn.c moves the sorted dim there) */
int qkv_cpu_sort (qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc) {
  int64_t n = qkv_last_size(a);
  Sort s = {a, values, indices, qkv_data(a), qkv_data(values), qkv_data(indices), desc,
            malloc(sizeof(Item) * (size_t)(n > 0 ? n : 1))};
  if (s.buf == NULL) return QKV_ENOMEM;
  const int64_t *st[3] = {a->stride, values->stride, indices->stride};
  int err = walk(a->ndim, a->size, 3, st, sort_row, &s);
  free(s.buf);
  return err;
}
