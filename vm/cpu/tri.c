/*
** tri.c -- the triangles of matrices (tril, triu) on the CPU, as
** vm/cuda/tri.cu does them on the GPU.  A row of the last dim keeps one
** run of its elements and gets zero bytes elsewhere; the kernel moves
** bytes, so one loop serves every dtype, and in place (out == x) it only
** writes the zeros.
*/
#include <string.h>

#include "cpu.h"

/* the columns [lo, hi) that row i keeps: j - i <= k (tril) or j - i >= k
   (triu), with -rows <= k <= cols (backend.h), so i + k cannot overflow */
static void kept (int64_t i, int64_t n, int64_t k, int upper, int64_t *lo, int64_t *hi) {
  int64_t edge = upper ? i + k : i + k + 1;
  edge = edge < 0 ? 0 : edge > n ? n : edge;
  *lo = upper ? edge : 0;
  *hi = upper ? n : edge;
}

int qkv_cpu_tri (qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper) {
  int nd = out->ndim;
  int64_t m = out->size[nd - 2], n = out->size[nd - 1], numel = qkv_numel(out);
  int64_t rows = numel / n;
  size_t es = qkv_elsize(out->dtype);
  char *o = qkv_data(out);
  const char *s = qkv_data(x);
  #pragma omp parallel for schedule(static) if (numel >= QKV_CPU_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    if (qkv_interrupted) continue;
    int64_t lo, hi;
    kept(r % m, n, k, upper, &lo, &hi);
    char *d = o + (size_t)(r * n) * es;
    const char *a = s + (size_t)(r * n) * es;
    memset(d, 0, (size_t)lo * es);
    if (d != a && hi > lo) memcpy(d + (size_t)lo * es, a + (size_t)lo * es, (size_t)(hi - lo) * es);
    memset(d + (size_t)hi * es, 0, (size_t)(n - hi) * es);
  }
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}
