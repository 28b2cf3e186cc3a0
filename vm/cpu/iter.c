/*
** iter.c -- the strided iterator shared by CPU kernels (see iter.h).
*/
#include "iter.h"
#include "cpu.h"
#include "parallel.h"

/* threads get at least this many elements each, so a run just over
   QKV_CPU_PAR_MIN does not pay for more threads than it can use */
#define ITER_PER_THREAD (QKV_CPU_PAR_MIN / 2)
/* split points are multiples of this (outside whole-row mode), keeping
   threads off each other's cache lines in contiguous outputs */
#define ITER_GRAIN 64
/* elements between two looks at the interrupt flag: 64K is 10-200 µs of
   work, so the look costs nothing and Ctrl-C stops a run within a fraction
   of a millisecond per thread; a longer row is handed out in pieces */
#define ITER_CHECK 65536

int qkv_iter_init(qkv_iter *it, int ndim, const int64_t *size, int nop,
                  char *const *data, const int64_t *const *stride,
                  const size_t *elsize) {
  int d, k, nd = 0;
  if (nop < 1 || nop > QKV_ITER_MAXOP || ndim < 0 || ndim > QKV_MAXDIM)
    return -1;
  it->nop = nop;
  it->flags = 0;
  it->numel = 1;
  for (k = 0; k < nop; k++) it->data[k] = data[k];
  /* walk from the innermost dim out, so dim 0 of the result is the row */
  for (d = ndim - 1; d >= 0; d--) {
    int64_t bs[QKV_ITER_MAXOP];
    int merge = nd > 0;
    if (size[d] == 0) it->numel = 0;
    if (size[d] == 1) continue;   /* its stride never matters */
    it->numel *= size[d];
    for (k = 0; k < nop; k++) {
      bs[k] = stride[k][d] * (int64_t)elsize[k];
      if (merge && bs[k] != it->stride[nd - 1][k] * it->size[nd - 1])
        merge = 0;
    }
    if (merge) {
      /* this dim continues the previous one in every operand */
      it->size[nd - 1] *= size[d];
    } else {
      it->size[nd] = size[d];
      for (k = 0; k < nop; k++) it->stride[nd][k] = bs[k];
      nd++;
    }
  }
  if (nd == 0) {   /* a scalar, or all dims 1: one row of one element */
    it->size[0] = 1;
    for (k = 0; k < nop; k++) it->stride[0][k] = 0;
    nd = 1;
  }
  it->ndim = nd;
  return 0;
}

int qkv_iter_tensors(qkv_iter *it, int nop, const qkv_tensor *const *t) {
  char *data[QKV_ITER_MAXOP];
  const int64_t *stride[QKV_ITER_MAXOP];
  size_t elsize[QKV_ITER_MAXOP];
  int k, d, empty = 0;
  if (nop < 1 || nop > QKV_ITER_MAXOP) return -1;
  /* an empty tensor may have no storage to point into */
  for (d = 0; d < t[0]->ndim; d++) empty |= t[0]->size[d] == 0;
  for (k = 0; k < nop; k++) {
    data[k] = empty ? NULL : (char *)qkv_data(t[k]);
    stride[k] = t[k]->stride;
    elsize[k] = qkv_elsize(t[k]->dtype);
  }
  return qkv_iter_init(it, t[0]->ndim, t[0]->size, nop, data, stride, elsize);
}

int qkv_iter_range(const qkv_iter *it, int64_t lo, int64_t hi,
                   qkv_iter_fn fn, void *ctx) {
  int64_t idx[QKV_MAXDIM];
  char *row[QKV_ITER_MAXOP], *p[QKV_ITER_MAXOP];
  const int64_t inner = it->size[0];
  int64_t r = lo / inner, j = lo % inner, left = ITER_CHECK;
  int d, k;
  if (lo >= hi) return QKV_OK;
  /* decompose the starting index once; row[] is the start of its row */
  for (k = 0; k < it->nop; k++) row[k] = it->data[k];
  for (d = 1; d < it->ndim; d++) {
    idx[d] = r % it->size[d];
    r /= it->size[d];
    for (k = 0; k < it->nop; k++) row[k] += idx[d] * it->stride[d][k];
  }
  for (;;) {
    int64_t n = inner - j < hi - lo ? inner - j : hi - lo;
    if (n > ITER_CHECK) n = ITER_CHECK;
    for (k = 0; k < it->nop; k++) p[k] = row[k] + j * it->stride[0][k];
    fn(n, p, it->stride[0], ctx);
    lo += n;
    if (lo >= hi) return QKV_OK;
    /* short rows are counted up to ITER_CHECK elements between looks */
    if ((left -= n) <= 0) {
      if (qkv_interrupted) return QKV_EINTR;
      left = ITER_CHECK;
    }
    if ((j += n) < inner) continue;     /* the rest of a long row */
    j = 0;
    /* next row: odometer carry through the outer dims */
    for (d = 1; d < it->ndim; d++) {
      for (k = 0; k < it->nop; k++) row[k] += it->stride[d][k];
      if (++idx[d] < it->size[d]) break;
      for (k = 0; k < it->nop; k++) row[k] -= it->size[d] * it->stride[d][k];
      idx[d] = 0;
    }
  }
}

/* whether the run is split among threads: not when it must or should stay
   serial (how many take part is the grain's affair, qkv_par_for's) */
static int iter_parallel(const qkv_iter *it) {
  if (it->numel < QKV_CPU_PAR_MIN || (it->flags & QKV_ITER_SERIAL) || qkv_par_threads() <= 1)
    return 0;
  for (int d = 1; d < it->ndim; d++)
    if (it->stride[d][0] == 0) return 0;
  return 1;
}

typedef struct { const qkv_iter *it; qkv_iter_fn fn; void *ctx; int64_t unit; } units;

static int run_units(void *p, int64_t lo, int64_t hi, int tid) {
  const units *u = p;
  (void)tid;
  lo *= u->unit;
  hi = hi * u->unit < u->it->numel ? hi * u->unit : u->it->numel;
  return qkv_iter_range(u->it, lo, hi, u->fn, u->ctx);
}

int qkv_iter_run(const qkv_iter *it, qkv_iter_fn fn, void *ctx) {
  if (it->numel <= 0) return QKV_OK;
  if (!iter_parallel(it)) return qkv_iter_range(it, 0, it->numel, fn, ctx);
  /* split in units: whole rows when a row must stay on one thread; each
     thread's share at least ITER_PER_THREAD elements */
  units u = {it, fn, ctx, (it->flags & QKV_ITER_WHOLE_ROWS) || it->stride[0][0] == 0
                              ? it->size[0] : ITER_GRAIN};
  int64_t nunits = (it->numel + u.unit - 1) / u.unit;
  int64_t grain = ITER_PER_THREAD / u.unit;
  return qkv_par_for(nunits, grain < 1 ? 1 : grain, run_units, &u) != QKV_OK ? QKV_EINTR : QKV_OK;
}
