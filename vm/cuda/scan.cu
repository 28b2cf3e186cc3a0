/*
** scan.cu -- running sums along one dim (cumsum) on the GPU, as
** vm/cpu/scan.c does them on the CPU, with the same numbers: a thread per
** line (outer, inner) walks the dim in order, float32 and float64 summed
** in double, int64 in unsigned arithmetic (wrapping as PyTorch's).
** Neighbouring threads take neighbouring lines, so reads and writes are
** coalesced when the dim is not the last; along the last dim each thread
** walks a row (a parallel scan would serve long rows better).
*/
#include "cuda.cuh"
#include "../common/shape.h"

#define THREADS 256

template <typename T, typename A>
__global__ void cumsum_kernel (T *out, const T *x, int64_t lines, int64_t n, int64_t inner) {
  QKV_CU_LOOP(l, lines) {
    int64_t base = l / inner * n * inner + l % inner;
    A acc = 0;
    for (int64_t i = 0; i < n; i++) {
      acc += (A)x[base + i * inner];
      out[base + i * inner] = (T)acc;
    }
  }
}

template <typename T, typename A>
static int scan (qkv_tensor *out, const qkv_tensor *x, int64_t lines, int64_t n, int64_t inner) {
  cumsum_kernel<T, A><<<qkv_cu_blocks(lines, THREADS), THREADS>>>(
      (T *)qkv_cu_data(out), (const T *)qkv_cu_data(x), lines, n, inner);
  launchCheck("cumsum_kernel");
  return QKV_OK;
}

int qkv_cuda_cumsum (qkv_tensor *out, const qkv_tensor *x, int dim) {
  int64_t outer, n, inner;
  qkv_extent(x, dim, &outer, &n, &inner);
  switch (out->dtype) {
    case QKV_F32: return scan<float, double>(out, x, outer * inner, n, inner);
    case QKV_F64: return scan<double, double>(out, x, outer * inner, n, inner);
    case QKV_I64: return scan<uint64_t, uint64_t>(out, x, outer * inner, n, inner);
    default: return QKV_EDTYPE;
  }
}
