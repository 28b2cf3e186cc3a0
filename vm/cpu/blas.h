/*
** blas.h -- OpenBLAS's gemm, loaded on first use.  Mapping OpenBLAS (36 MB
** with every CPU's kernels) and running its constructors took 1.7 ms of a
** process's start, half of qkv's; the products of a small script run as
** plain loops (matmul.c) and never need it.
*/
#ifndef QKV_BLAS_H
#define QKV_BLAS_H

#include <cblas.h>
#include <stdint.h>

extern __typeof__(cblas_sgemm) *qkv_sgemm;
extern __typeof__(cblas_dgemm) *qkv_dgemm;
/* OpenBLAS's matrix-vector products, for the products of one row (its
   gemm packs the whole matrix for one row: 4-6x slower, bench/NOTES.md) */
extern __typeof__(cblas_sgemv) *qkv_sgemv;
extern __typeof__(cblas_dgemv) *qkv_dgemv;

/* oneDNN's bfloat16 product with float32 sums, C (float32) = alpha
   op(A) op(B) + beta C, row-major; NULL without libdnnl (or with
   $QKV_BLAS=openblas).  Returns 0 on success. */
typedef int (*qkv_bf16gemm_fn)(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                               const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                               float beta, float *c, int64_t ldc);
extern qkv_bf16gemm_fn qkv_bf16gemm;

/*
** c (m x n, ldc, float64 when f64, else float32) = scale * op(a) op(b),
** row-major (the attention's scores, forward and backward).  gemm reads
** neither a nor b when k or alpha is 0, but (a b) * scale is NaN where an
** infinite scale meets a 0 product or a scale of 0 an infinite one (as the
** composed path and PyTorch give): those cases, and any scale that is not
** finite, take alpha 1 and multiply by the scale after the product.
*/
void qkv_gemm_scaled (int f64, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                      int k, double scale, const void *a, int lda, const void *b, int ldb,
                      void *c, int ldc);

/* QKV_OK once qkv_sgemm and qkv_dgemm may be called, else QKV_ENOBLAS.
   Call it on the thread that runs Lua, before any parallel loop.  BLAS
   runs on one thread wherever it is called (parallel.h). */
int qkv_blas_load (void);

/* makes BLAS single-threaded on the calling thread, once it is loaded
   (OpenBLAS's OpenMP build keeps that setting per thread) */
void qkv_blas_serial (void);

#endif
