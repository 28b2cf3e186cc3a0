/*
** attention.cuh -- what the fused attention kernels share (attention.cu in
** float32 and float64 on CUDA cores, attention_mma.cu in bfloat16 and
** float16 on tensor cores): the job a launch is given, and each batch
** item's offsets into q, k, v and the mask.
*/
#ifndef QKV_CUDA_ATTENTION_CUH
#define QKV_CUDA_ATTENTION_CUH

#include <limits.h>

#include "cuda.cuh"

/* One of q, k, v, mask: element (b, i, j) at base + boff(b) + i rs + j cs. */
typedef struct {
  const char *base;                  /* element 0 of the view */
  int64_t rs, cs;                    /* element strides of rows, columns */
  int64_t bstride[QKV_MAXDIM];       /* batch dims, 0 where of size 1 */
} operand;

typedef struct {
  int nbd;                           /* batch dims */
  int64_t bsize[QKV_MAXDIM];
  int64_t nbatch, ntiles, items, nq, nk;
  int64_t off;                       /* causal: query i keeps keys j <= i + off */
  int dk, dv, causal, has_mask;
  double scale;
  operand q, k, v, mask;
  void *out;
  void *lse;                         /* NULL, or (nbatch, nq) contiguous: each query's
                                        log-sum-exp of its kept, scaled scores (-inf
                                        with none), in the job's dtype for float32 and
                                        float64, float32 for bfloat16 and float16 */
} job;

/* J for out = attention(q, k, v, mask, causal, scale), as the backend's
   attention entry is given them (backend.h): all but dk and dv, which
   the caller sets once it has checked that its kernels take them, and
   lse (NULL) */
void qkv_cu_attention_job(job *J, const qkv_tensor *out, const qkv_tensor *q,
                          const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                          int causal, double scale);

/* the tensor-core path for bfloat16 and float16 (attention_mma.cu);
   QKV_EDTYPE when it does not take the job (a head size other than 64 or
   128, dk != dv, or QKV_CUDA_ATTENTION=fp32): the caller computes in
   float32 then */
int qkv_cu_attention_mma(const job &J, qkv_dtype dt);

/* the tensor-core backward for bfloat16 and float16 (attention_mma_bwd.cu),
   as the backend's attention_backward entry is given it (backend.h; lse
   NULL or float32); QKV_EDTYPE when it does not take the job (a head
   size other than 64 or 128, dk != dv, an operand not 16-byte aligned,
   or QKV_CUDA_ATTENTION=fp32): the caller computes in float32 then */
int qkv_cu_attention_mma_bwd(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                             const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                             const qkv_tensor *o, const qkv_tensor *go, const qkv_tensor *mask,
                             int causal, double scale, const qkv_tensor *lse);

/* rows [0, n) of a row-major matrix of 16-bit elements (src, rows ld
   elements apart, every row 16-byte aligned) to a rows x D tile at dst,
   rows LD apart, zeros past n: 16 bytes a load, by a block of NT threads */
template <int D, int LD, int NT>
__device__ static inline void load_rows16 (uint16_t *dst, const uint16_t *src, int64_t ld, int n,
                                           int rows) {
  for (int x = threadIdx.x; x < rows * (D / 8); x += NT) {
    int i = x / (D / 8), j = x % (D / 8) * 8;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (i < n) u = *(const uint4 *)(src + i * ld + j);
    *(uint4 *)(dst + i * LD + j) = u;
  }
}

/*
** Item `item` of a launch of BQ-query tiles (the last tiles first, as the
** CPU's): its batch b, first query i0 and rows bq, and jend, past which
** every key is causally excluded for every query of the tile.
*/
__device__ static inline void attention_tile (const job &J, int64_t item, int BQ, int64_t *b,
                                              int64_t *i0, int *bq, int64_t *jend) {
  *b = item % J.nbatch;
  *i0 = (J.ntiles - 1 - item / J.nbatch) * BQ;
  *bq = (int)(J.nq - *i0 < BQ ? J.nq - *i0 : BQ);
  *jend = J.nk;
  if (J.causal && *i0 + *bq + J.off < *jend) *jend = *i0 + *bq + J.off;
}

/*
** What both fused kernels' launches do first: raise the kernel's limit of
** dynamic shared memory where a block needs more than the default 48 KiB,
** and cut the job into tiles of bq queries (J->ntiles, J->items); *grid is
** a block an item, at most INT_MAX (the kernels loop over the rest).
*/
template <typename K>
static int attention_grid (K kernel, size_t smem, int bq, job *J, unsigned *grid) {
  if (smem > 48 * 1024)
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
  J->ntiles = (J->nq + bq - 1) / bq;
  J->items = J->nbatch * J->ntiles;
  *grid = (unsigned)(J->items < INT_MAX ? J->items : INT_MAX);
  return QKV_OK;
}

/* element offsets of batch item b in q, k, v and mask (row-major over out's
   batch dims) */
__device__ static inline void batch_offsets (const job &J, int64_t b, int64_t off[4]) {
  off[0] = off[1] = off[2] = off[3] = 0;
  for (int i = J.nbd - 1; i >= 0; i--) {
    int64_t c = b % J.bsize[i];
    b /= J.bsize[i];
    off[0] += c * J.q.bstride[i];
    off[1] += c * J.k.bstride[i];
    off[2] += c * J.v.bstride[i];
    off[3] += c * J.mask.bstride[i];
  }
}

#endif
