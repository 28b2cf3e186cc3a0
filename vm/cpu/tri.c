/*
** tri.c -- the triangles of matrices (tril, triu) on the CPU, as
** vm/cuda/tri.cu does them on the GPU.  A row of the last dim keeps one
** run of its elements and gets zero bytes elsewhere; the kernel moves
** bytes, so one loop serves every dtype, and in place (out == x) it only
** writes the zeros.
*/
#include <string.h>

#include "cpu.h"
#include "parallel.h"

/* the columns [lo, hi) that row i keeps: j - i <= k (tril) or j - i >= k
   (triu), with -rows <= k <= cols (backend.h), so i + k cannot overflow */
static void kept (int64_t i, int64_t n, int64_t k, int upper, int64_t *lo, int64_t *hi) {
  int64_t edge = upper ? i + k : i + k + 1;
  edge = edge < 0 ? 0 : edge > n ? n : edge;
  *lo = upper ? edge : 0;
  *hi = upper ? n : edge;
}

typedef struct { char *o; const char *s; int64_t m, n, k; size_t es; int upper; } tri_job;

static void tri_row (void *p, int64_t r) {
  const tri_job *J = p;
  int64_t lo, hi, n = J->n;
  size_t es = J->es;
  kept(r % J->m, n, J->k, J->upper, &lo, &hi);
  char *d = J->o + (size_t)(r * n) * es;
  const char *a = J->s + (size_t)(r * n) * es;
  memset(d, 0, (size_t)lo * es);
  if (d != a && hi > lo) memcpy(d + (size_t)lo * es, a + (size_t)lo * es, (size_t)(hi - lo) * es);
  memset(d + (size_t)hi * es, 0, (size_t)(n - hi) * es);
}

int qkv_cpu_tri (qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper) {
  int nd = out->ndim;
  int64_t n = out->size[nd - 1];
  if (n == 0 || qkv_numel(out) == 0) return QKV_OK;
  tri_job J = {qkv_data(out), qkv_data(x), out->size[nd - 2], n, k, qkv_elsize(out->dtype), upper};
  return qkv_par_rows(qkv_numel(out) / n, n, tri_row, &J);
}
