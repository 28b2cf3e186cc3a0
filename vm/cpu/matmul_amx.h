/*
** matmul_amx.h -- bfloat16 products on the tile unit (matmul_amx.c).
*/
#ifndef QKV_CPU_MATMUL_AMX_H
#define QKV_CPU_MATMUL_AMX_H

#include <stdint.h>

/* c (m x n, rows ldc apart) = alpha op(a) op(b) summed in float32 and
   rounded once to bfloat16 (as qkv_f2bf, but products, sums and results
   below 2^-126 are 0: the tile unit flushes them), a, b and c bfloat16
   row-major, ta and tb 1 for a matrix read transposed (as cblas_sgemm's
   row-major arguments); 0 when done, -1 when the tile unit is not there
   (qkv_cpu_has_amx) or no memory: the caller computes it another way */
int qkv_amx_bf16gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                     uint16_t *c, int64_t ldc);

#endif
