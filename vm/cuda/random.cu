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
** A thread per Philox block writes that block's elements.  Uniforms are
** exact, so equal bit for bit; normals go through CUDA's log, cos and sin,
** which may differ from the host's libm in a double's last bit or two.
*/
#include <math.h>

#include "cuda.cuh"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u     /* Weyl increments of the key */
#define PHILOX_W1 0xBB67AE85u

#define TWO_PI 6.283185307179586476925286766559
#define TWO_M24 (1.0 / 16777216.0)
#define TWO_M53 (1.0 / 9007199254740992.0)

#define THREADS 256

/* the ten rounds on the counter in x, in place */
__device__ static void philox (uint32_t x[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint32_t hi0 = __umulhi(PHILOX_M0, x[0]), lo0 = PHILOX_M0 * x[0];
    uint32_t hi1 = __umulhi(PHILOX_M1, x[2]), lo1 = PHILOX_M1 * x[2];
    uint32_t y1 = x[1], y3 = x[3];
    x[0] = hi1 ^ y1 ^ k0;
    x[1] = lo1;
    x[2] = hi0 ^ y3 ^ k1;
    x[3] = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
}

__device__ static inline double u24 (uint32_t x) { return (double)(x >> 8) * TWO_M24; }

__device__ static inline double u53 (uint32_t a, uint32_t b) {
  return (double)((((uint64_t)a << 32) | b) >> 11) * TWO_M53;
}

__device__ static void box_muller (double u1, double u2, double *c, double *s) {
  double r = sqrt(-2.0 * log(u1)), th = TWO_PI * u2;
  *c = r * cos(th);
  *s = r * sin(th);
}

/* Elements [4b, 4b + cnt) of a float32 fill, from block offset + b. */
__device__ static void fill_f32 (float *o, int normal, const uint32_t x[4], int cnt) {
  if (!normal) {
    for (int l = 0; l < cnt; l++) o[l] = (float)u24(x[l]);
    return;
  }
  for (int h = 0; 2 * h < cnt; h++) {
    double c, s;
    box_muller(u24(x[2 * h]) + TWO_M24, u24(x[2 * h + 1]), &c, &s);
    o[2 * h] = (float)c;
    if (2 * h + 1 < cnt) o[2 * h + 1] = (float)s;
  }
}

/* Elements [2b, 2b + cnt) of a float64 fill, from block offset + b. */
__device__ static void fill_f64 (double *o, int normal, const uint32_t x[4], int cnt) {
  if (!normal) {
    for (int l = 0; l < cnt; l++) o[l] = u53(x[2 * l], x[2 * l + 1]);
    return;
  }
  double c, s;
  box_muller(u53(x[0], x[1]) + TWO_M53, u53(x[2], x[3]), &c, &s);
  o[0] = c;
  if (cnt > 1) o[1] = s;
}

/* a thread per Philox block b, writing elements [b * per, b * per + per) */
template <typename T>
static __global__ void random_fill (T *o, int64_t n, int64_t nblocks, uint32_t k0,
                                    uint32_t k1, uint64_t offset, int normal) {
  const int per = sizeof(T) == 4 ? 4 : 2;
  QKV_CU_LOOP(b, nblocks) {
    uint64_t c = offset + (uint64_t)b;
    uint32_t x[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    philox(x, k0, k1);
    int64_t first = b * per;
    int cnt = n - first < per ? (int)(n - first) : per;
    if constexpr (sizeof(T) == 4) fill_f32((float *)o + first, normal, x, cnt);
    else fill_f64((double *)o + first, normal, x, cnt);
  }
}

/* row-major with every dim of more than one element in place */
static int contiguous (const qkv_tensor *t) {
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->size[i] != 1 && t->stride[i] != expect) return 0;
    expect *= t->size[i];
  }
  return 1;
}

int qkv_cuda_random (qkv_tensor *out, qkv_dist dist, const uint32_t key[2],
                     uint64_t offset) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (dist != QKV_UNIFORM && dist != QKV_NORMAL) return QKV_EINTERNAL;
  int64_t n = qkv_cu_numel(out);
  if (n <= 0) return QKV_OK;
  if (!contiguous(out)) return QKV_EINTERNAL;
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
