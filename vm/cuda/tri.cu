/*
** tri.cu -- the triangles of matrices (tril, triu) on the GPU, as
** vm/cpu/tri.c does them on the CPU: a thread per element keeps x's
** element where j - i <= k (triu: j - i >= k) and writes zero bytes
** elsewhere.  The kernel moves elements of the dtype's size, so one
** instance per size serves every dtype; in place (out == x) each thread
** reads and writes only its own element.
*/
#include "cuda.cuh"

#define THREADS 256

template <typename T>
__global__ void tri_kernel (T *out, const T *x, int64_t numel, int64_t m, int64_t n,
                            int64_t k, int upper) {
  QKV_CU_LOOP(e, numel) {
    int64_t d = e % n - e / n % m;           /* j - i */
    out[e] = (upper ? d >= k : d <= k) ? x[e] : (T)0;
  }
}

template <typename T>
static int tri (qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper) {
  int nd = out->ndim;
  int64_t numel = qkv_cu_numel(out);
  tri_kernel<T><<<qkv_cu_blocks(numel, THREADS), THREADS>>>(
      (T *)qkv_cu_data(out), (const T *)qkv_cu_data(x), numel, out->size[nd - 2],
      out->size[nd - 1], k, upper);
  launchCheck("tri_kernel");
  return QKV_OK;
}

int qkv_cuda_tri (qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper) {
  switch (qkv_dtype_bytes(out->dtype)) {
    case 1: return tri<uint8_t>(out, x, k, upper);
    case 2: return tri<uint16_t>(out, x, k, upper);
    case 4: return tri<uint32_t>(out, x, k, upper);
    case 8: return tri<uint64_t>(out, x, k, upper);
    default: return QKV_EDTYPE;
  }
}
