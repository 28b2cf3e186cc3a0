/*
** optim.cu -- the optimizers' fused steps on the GPU, as vm/cpu/optim.c:
** Adam (and AdamW) in one pass, a thread per element, in p's dtype (qkv_adam,
** core/qkv.h, says the formula).
*/
#include "cuda.cuh"

#define THREADS 256

template <typename T>
__global__ void adam_kernel (T *p, const T *g, T *m, T *v, T *vx, int64_t n, qkv_adam_step h) {
  const T keep = (T)(1 - h.decay), w1 = (T)(1 - h.b1), b2 = (T)h.b2, w2 = (T)(1 - h.b2);
  const T step = (T)(h.lr / h.bc1), root = (T)sqrt(h.bc2), eps = (T)h.eps;
  QKV_CU_LOOP(i, n) {
    T mi = m[i] + w1 * (g[i] - m[i]), vi = v[i] * b2 + w2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    if (vx) { vi = vx[i] > vi ? vx[i] : vi; vx[i] = vi; }
    p[i] = p[i] * keep - step * (mi / (sqrt(vi) / root + eps));
  }
}

template <typename T>
static int adam (qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v,
                 qkv_tensor *vmax, const qkv_adam_step *h) {
  int64_t n = qkv_cu_numel(p);
  adam_kernel<T><<<qkv_cu_blocks(n, THREADS), THREADS>>>(
      (T *)qkv_cu_data(p), (const T *)qkv_cu_data(g), (T *)qkv_cu_data(m), (T *)qkv_cu_data(v),
      vmax ? (T *)qkv_cu_data(vmax) : (T *)nullptr, n, *h);
  launchCheck("adam_kernel");
  return QKV_OK;
}

int qkv_cuda_adam (qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v,
                   qkv_tensor *vmax, const qkv_adam_step *h) {
  switch (p->dtype) {
    case QKV_F32: return adam<float>(p, g, m, v, vmax, h);
    case QKV_F64: return adam<double>(p, g, m, v, vmax, h);
    default: return QKV_EDTYPE;
  }
}
