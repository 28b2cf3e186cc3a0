/*
** half.h -- the 2-byte floats, float16 (IEEE binary16) and bfloat16 (the
** top half of a float32), converted to and from float32.  Narrowing rounds
** to nearest, ties to even; overflow gives inf; NaN stays NaN (quiet, with
** its sign).  Widening is exact.  qkv stores these dtypes and computes on
** them in float32 (vm/dispatch/ops.c).
*/
#ifndef QKV_HALF_H
#define QKV_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* the same conversions in CUDA kernels (vm/cuda/), bit for bit */
#ifdef __CUDACC__
#define QKV_HD __host__ __device__
#else
#define QKV_HD
#endif

static inline QKV_HD uint32_t qkv_fbits (float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline QKV_HD float qkv_bitsf (uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline QKV_HD float qkv_h2f (uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {                           /* zero or subnormal: m * 2^-24 */
    float v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return qkv_bitsf(sign | 0x7f800000u | (m << 13));
  return qkv_bitsf(sign | ((e + 112) << 23) | (m << 13));
}

static inline QKV_HD uint16_t qkv_f2h (float f) {
  uint32_t x = qkv_fbits(f), sign = (x >> 16) & 0x8000;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)                   /* inf, or NaN made quiet */
    return (uint16_t)(sign | (x > 0x7f800000u ? 0x7e00 | ((x >> 13) & 0x3ff) : 0x7c00));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* rounds past 65504 */
  if (x < 0x38800000u) {                  /* below 2^-14: a subnormal (or 1024 = 2^-14) */
    float a = qkv_bitsf(x) * 16777216.0f; /* exact: a power of 2 */
    return (uint16_t)(sign | (uint32_t)nearbyintf(a));
  }
  uint32_t r = x - 0x38000000u;           /* the exponent rebiased, 127 to 15 */
  return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1)) >> 13));
}

static inline QKV_HD float qkv_bf2f (uint16_t b) { return qkv_bitsf((uint32_t)b << 16); }

static inline QKV_HD uint16_t qkv_f2bf (float f) {
  uint32_t x = qkv_fbits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

#endif
