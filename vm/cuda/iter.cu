/*
** iter.cu -- the strided iterator's host side (cuda.cuh), as vm/cpu/iter.c:
** size-1 dims dropped, neighbours contiguous in every operand merged.
*/
#include "cuda.cuh"

void qkv_cu_iter_init (qkv_cu_iter *it, int nop, const qkv_tensor *const *t) {
  const qkv_tensor *s = t[0];
  int n = 0;
  it->nop = nop;
  it->numel = qkv_cu_numel(s);
  for (int k = 0; k < QKV_CU_MAXOP; k++) it->data[k] = k < nop ? qkv_cu_data(t[k]) : NULL;
  for (int d = 0; d < s->ndim; d++) {
    if (s->size[d] == 1) continue;
    /* merge into the previous kept dim when every operand steps over it
       exactly: stride[prev] == stride[d] * size[d] */
    int merge = n > 0;
    for (int k = 0; k < nop && merge; k++)
      merge = it->stride[k][n - 1] == t[k]->stride[d] * s->size[d];
    if (merge) {
      it->size[n - 1] *= s->size[d];
      for (int k = 0; k < nop; k++) it->stride[k][n - 1] = t[k]->stride[d];
      continue;
    }
    it->size[n] = s->size[d];
    for (int k = 0; k < nop; k++) it->stride[k][n] = t[k]->stride[d];
    n++;
  }
  if (n == 0) {                /* a scalar, or all dims of size 1 */
    it->size[0] = 1;
    for (int k = 0; k < nop; k++) it->stride[k][0] = 0;
    n = 1;
  }
  it->ndim = n;
}
