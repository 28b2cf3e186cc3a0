/*
** layout.h -- how gemm can read a strided matrix, Torch7's rule, for every
** kernel that hands matrices to BLAS: CBLAS in vm/cpu/matmul.c,
** attention.c and attention_bwd.c (whose operands vm/dispatch/ops_nn.c
** passes uncopied when they fit by rows), cuBLAS in vm/cuda/matmul.cu.  BLAS counts in int
** (qkv_fits_int).  qkv_densify is the CPU's copy of a matrix that fits
** neither layout; the GPU's is a kernel (vm/cuda/matmul.cu).
*/
#ifndef QKV_COMMON_LAYOUT_H
#define QKV_COMMON_LAYOUT_H

#include <limits.h>
#include <stdint.h>

enum { QKV_BYROW, QKV_BYCOL, QKV_COPY };    /* NoTrans, Trans, densify */

static inline int qkv_fits_int (int64_t v) { return v >= 0 && v <= INT_MAX; }

/*
** The layout of an r x c matrix with element strides rs (a row step) and
** cs (a column step), and its leading dimension in *ld.  A dim of size 1 is
** never stepped over, so its stride is free, but BLAS still checks that a
** leading dimension covers the width.  A 0 stride (a broadcast) fits
** neither layout and is copied.
*/
static inline int qkv_gemm_layout (int64_t r, int64_t c, int64_t rs,
                                   int64_t cs, int *ld) {
  int64_t wr = c > 1 ? c : 1, wc = r > 1 ? r : 1;
  int64_t ldr = r == 1 ? wr : rs, ldc = c == 1 ? wc : cs;
  if ((cs == 1 || c == 1) && ldr >= wr && qkv_fits_int(ldr)) {
    *ld = (int)ldr;
    return QKV_BYROW;
  }
  if ((rs == 1 || r == 1) && ldc >= wc && qkv_fits_int(ldc)) {
    *ld = (int)ldc;
    return QKV_BYCOL;
  }
  *ld = (int)wr;
  return QKV_COPY;
}

/* copies the r x c matrix at src (strides rs, cs) densely, row-major, to dst */
static inline void qkv_densify (void *dst, const void *src, int f64, int64_t r,
                                int64_t c, int64_t rs, int64_t cs) {
  if (f64) {
    const double *s = (const double *)src;
    double *d = (double *)dst;
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < c; j++) d[i * c + j] = s[i * rs + j * cs];
  } else {
    const float *s = (const float *)src;
    float *d = (float *)dst;
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < c; j++) d[i * c + j] = s[i * rs + j * cs];
  }
}

#endif
