/*
** blocksum.h -- column sums over rows that give the same bits on any
** number of threads: the rows are cut into blocks, each block's sums go to
** partials of their own (in double), and the partials are added in block
** order after (the norms' weight and bias gradients, norm.c, rms_norm.c).
*/
#ifndef QKV_CPU_BLOCKSUM_H
#define QKV_CPU_BLOCKSUM_H

#include "../core/qkv.h"

/* rows a block: at most 256 blocks of at least 32 rows, so that the
   partials stay small */
static inline int64_t qkv_blocksum_rows (int64_t rows) {
  return rows / 256 + 1 > 32 ? rows / 256 + 1 : 32;
}

/* out (n elements, float32 or float64) = the sums at offset `at` of the
   nblk partials that stand `stride` doubles apart, added in block order */
static inline void qkv_blocksum_out (qkv_tensor *out, const double *part, int64_t nblk,
                                     int64_t stride, int64_t at, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double s = 0;
    for (int64_t k = 0; k < nblk; k++) s += part[k * stride + at + j];
    if (out->dtype == QKV_F32) ((float *)qkv_data(out))[j] = (float)s;
    else ((double *)qkv_data(out))[j] = s;
  }
}

#endif
