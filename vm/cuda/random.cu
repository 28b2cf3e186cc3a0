/*
** random.cu -- uniform and normal fills on the GPU from the Philox 4x32-10
** stream that vm/cpu/random.c documents, so that a seed gives the same
** numbers on either device:
**
**   block j = philox4x32_10(ctr = {lo32(j), hi32(j), 0, 0}, key), lanes
**   x0..x3; a call with `offset` uses blocks offset, offset + 1, ...
**
**   float32: element i is lane i%4 of block offset + i/4; uniform
**     (x >> 8) * 2^-24, normal from the pairs of lanes (0, 1) and (2, 3)
**     with u1 = ((x >> 8) + 1) * 2^-24, u2 = (y >> 8) * 2^-24.
**   float64: element i of a uniform fill takes lanes (2*(i%2), 2*(i%2)+1)
**     of block offset + i/2 as ((a << 32 | b) >> 11) * 2^-53; a normal
**     pair k takes block offset + k, u1 = (v1 + 1) * 2^-53 and
**     u2 = v2 * 2^-53 from v1 = (x0 << 32 | x1) >> 11, v2 likewise.
**   normal: r = sqrt(-2 ln u1), th = 2 pi u2, the pair (r cos th,
**     r sin th), computed in double (then rounded for float32); an odd
**     last element drops the sin.
**
** A thread per Philox block writes that block's elements, with the CPU's
** code (vm/common/philox.h).  Uniforms are exact, so equal bit for bit;
** normals go through CUDA's log, cos and sin, which may differ from the
** host's libm in a double's last bit or two.
*/
#include <math.h>

#include "cuda.cuh"
#include "../common/philox.h"

#define THREADS 256

/* a thread per Philox block b, writing elements [b * per, b * per + per) */
template <typename T>
static __global__ void random_fill (T *o, int64_t n, int64_t nblocks, uint32_t k0,
                                    uint32_t k1, uint64_t offset, int normal) {
  const int per = sizeof(T) == 4 ? 4 : 2;
  QKV_CU_LOOP(b, nblocks) {
    uint64_t c = offset + (uint64_t)b;
    uint32_t x[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    qkv_philox4x32_10(x, k0, k1);
    int64_t first = b * per;
    int cnt = n - first < per ? (int)(n - first) : per;
    if constexpr (sizeof(T) == 4) qkv_random_f32((float *)o + first, normal, x, cnt);
    else qkv_random_f64((double *)o + first, normal, x, cnt);
  }
}

int qkv_cuda_random (qkv_tensor *out, qkv_dist dist, const uint32_t key[2],
                     uint64_t offset) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (dist != QKV_UNIFORM && dist != QKV_NORMAL) return QKV_EINTERNAL;
  int64_t n = qkv_cu_numel(out);
  if (n <= 0) return QKV_OK;
  if (!qkv_cu_contiguous(out)) return QKV_EINTERNAL;
  int normal = dist == QKV_NORMAL;
  if (out->dtype == QKV_F32) {
    int64_t nblocks = (n + 3) / 4;
    random_fill<float><<<qkv_cu_blocks(nblocks, THREADS), THREADS>>>(
        (float *)qkv_cu_data(out), n, nblocks, key[0], key[1], offset, normal);
    launchCheck("random_fill<float>");
  } else {
    int64_t nblocks = (n + 1) / 2;
    random_fill<double><<<qkv_cu_blocks(nblocks, THREADS), THREADS>>>(
        (double *)qkv_cu_data(out), n, nblocks, key[0], key[1], offset, normal);
    launchCheck("random_fill<double>");
  }
  return QKV_OK;
}
