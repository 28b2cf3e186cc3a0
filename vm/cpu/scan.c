/*
** scan.c -- running sums along one dim (cumsum) on the CPU, as
** vm/cuda/scan.cu does them on the GPU, with the same numbers: x and out
** contiguous, seen as (outer, n, inner) around the dim; float32 and
** float64 summed in double (PyTorch's CPU sums float32 in double too),
** int64 in unsigned arithmetic, which wraps on overflow as PyTorch does.
*/
#include <stdlib.h>

#include "cpu.h"
#include "../common/shape.h"

/* line by line along the dim, the lines of one outer slice side by side
   in acc, so that every pass reads and writes memory in order */
#define SCAN(T, A) { \
    const T *src = (const T *)qkv_data(x); \
    T *dst = (T *)qkv_data(out); \
    for (int64_t o = 0; o < outer; o++) { \
      for (int64_t j = 0; j < inner; j++) acc[j].A = 0; \
      for (int64_t i = 0; i < n; i++) { \
        int64_t base = (o * n + i) * inner; \
        for (int64_t j = 0; j < inner; j++) { \
          acc[j].A += src[base + j]; \
          dst[base + j] = (T)acc[j].A; \
        } \
      } \
    } \
  }

int qkv_cpu_cumsum (qkv_tensor *out, const qkv_tensor *x, int dim) {
  int64_t outer, n, inner;
  qkv_extent(x, dim, &outer, &n, &inner);
  union sum { double d; uint64_t u; } *acc = malloc((size_t)inner * sizeof *acc);
  if (acc == NULL) return QKV_ENOMEM;
  switch (out->dtype) {
    case QKV_F32: SCAN(float, d) break;
    case QKV_F64: SCAN(double, d) break;
    case QKV_I64: SCAN(uint64_t, u) break;
    default: free(acc); return QKV_EDTYPE;
  }
  free(acc);
  return QKV_OK;
}
