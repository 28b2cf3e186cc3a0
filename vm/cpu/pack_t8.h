/*
** pack_t8.h -- a block of rows transposed, times a scale (by 8 x 8 blocks
** in registers on AVX2): the fused attention's q^T (attention_job.h) and
** its backward's q^T and dO^T (attention_bwd_avx512.c).
*/
#ifndef QKV_CPU_PACK_T8_H
#define QKV_CPU_PACK_T8_H

#include <stdint.h>

#include "vexp.h"

#ifdef QKV_VEXP_X86
/* xt (dk x bq, row stride ld) = sc times the first rows of x (rs apart,
   features contiguous) transposed, by 8 x 8 blocks in registers; returns
   how many rows it packed (bq rounded down to 8) */
static inline QKV_AVX2 int qkv_pack_t8 (const float *x, int64_t rs, int64_t dk, int bq,
                                        float sc, float *xt, int64_t ld) {
  const __m256 s = _mm256_set1_ps(sc);
  int n = bq / 8 * 8;
  for (int i = 0; i < n; i += 8) {
    const float *xi = x + i * rs;
    int64_t c = 0;
    for (; c + 8 <= dk; c += 8) {
      __m256 r[8], t[8];
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(xi + k * rs + c);
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
      }
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; k += 4) {
        r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      /* r[0..3] hold features c+{0,1,2,3} (low lanes) and c+{4..7} (high)
         of rows 0-3, r[4..7] those of rows 4-7 */
      _Pragma("GCC unroll 8") for (int k = 0; k < 4; k++) {
        float *o = xt + (c + k) * ld + i;
        _mm256_storeu_ps(o, _mm256_mul_ps(s, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20)));
        _mm256_storeu_ps(o + 4 * ld, _mm256_mul_ps(s, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31)));
      }
    }
    for (; c < dk; c++)
      for (int k = 0; k < 8; k++) xt[c * ld + i + k] = sc * xi[k * rs + c];
  }
  return n;
}
#endif


/* xt (cols x npad, row stride ld) = sc times the n rows of x (rs apart,
   features cs apart) transposed; columns n .. npad zeros */
static inline void qkv_pack_t (const float *x, int64_t rs, int64_t cs, int n, int64_t cols,
                               float sc, float *xt, int64_t ld, int npad) {
  int i = 0;
#ifdef QKV_VEXP_X86
  if (cs == 1) i = qkv_pack_t8(x, rs, cols, n, sc, xt, ld);
#endif
  for (; i < n; i++)
    for (int64_t c = 0; c < cols; c++) xt[c * ld + i] = sc * x[i * rs + c * cs];
  for (int64_t c = 0; c < cols; c++)
    for (i = n; i < npad; i++) xt[c * ld + i] = 0.0f;
}

#endif
