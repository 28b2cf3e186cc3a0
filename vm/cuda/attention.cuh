/*
** attention.cuh -- what the fused attention kernels share (attention.cu in
** float32 and float64 on CUDA cores, attention_mma.cu in bfloat16 and
** float16 on tensor cores, and their backwards): each takes the plan
** (common/attention_plan.h) by value, as both backends' kernels read it.
*/
#ifndef QKV_CUDA_ATTENTION_CUH
#define QKV_CUDA_ATTENTION_CUH

#include <limits.h>

#include "cuda.cuh"
#include "../common/attention_plan.h"

/* the plan's pointers to a tensor's element 0 (attention_plan.h) */
static inline void *qkv_cu_attn_data (const qkv_tensor *t) { return qkv_cu_data(t); }

/* whether q's, k's and v's rows are dense and 16-byte aligned, so that
   the tensor-core kernels read them 16 bytes at a time (their elements
   dense, every row and batch stride a multiple of 8 halves) */
static inline int qkv_cu_dense_rows (const qkv_attn_plan &P) {
  const qkv_attn_view *ops[3] = {&P.q, &P.k, &P.v};
  for (int k = 0; k < 3; k++) {
    if (ops[k]->cs != 1 || ops[k]->rs % 8 != 0 || (uintptr_t)ops[k]->base % 16 != 0) return 0;
    for (int i = 0; i < P.nbd; i++)
      if (ops[k]->bs[i] % 8 != 0) return 0;
  }
  return 1;
}

/* the tensor-core path for bfloat16 and float16 (attention_mma.cu), of a
   forward's plan; QKV_EDTYPE when it does not take it (a head size other
   than 64 or 128, dk != dv, or QKV_CUDA_ATTENTION=fp32): the caller
   computes in float32 then */
int qkv_cu_attention_mma(const qkv_attn_plan &P);

/* the Hopper forward (attention_wgmma.cu, sm_90a), where
   qkv.cuda.attention_backend("wgmma") forces it (never run on a GPU yet,
   so not chosen unasked); QKV_EDTYPE otherwise */
int qkv_cu_attention_wgmma(const qkv_attn_plan &P);

/* the tensor-core backward for bfloat16 and float16 (attention_mma_bwd.cu),
   of a backward's plan (q, k, v, o, go and the gradients contiguous, lse
   NULL or float32); QKV_EDTYPE when it does not take it (a head
   size other than 64 or 128, dk != dv, an operand not 16-byte aligned,
   or QKV_CUDA_ATTENTION=fp32): the caller computes in float32 then */
int qkv_cu_attention_mma_bwd(const qkv_attn_plan &P);

/* the same with M's score_mod/mask_mod program compiled into it (the
   forward's text, mods.cu): for a plan with the forward's lse, where a
   compiler is at hand; QKV_EDTYPE where it does not take P (float32
   copies then) */
struct qkv_attn_mods;
int qkv_cu_attention_mma_bwd_mods(const qkv_attn_plan &P, qkv_attn_mods *M);

/* the CUDA-core kernel's tiles for P at es bytes an element: bq x bk,
   staged in shared memory or not (attention.cu), and a block's dynamic
   shared memory, which the variants' kernels compiled at run time take
   too (mods.cu) */
struct qkv_cu_tiles {
  int bq, bk;
  bool staged;
  size_t smem;
};
int qkv_cu_attention_tiles(const qkv_attn_plan &P, size_t es, qkv_cu_tiles *t);

/* the tensor-core kernel's tiles for a variants' program compiled into it
   (mods.cu): mma.cuh's dtype, the head size d, mt m-tiles of 16 queries a
   warp, bk keys a tile and the dynamic shared memory; QKV_EDTYPE where it
   does not take P (qkv_cu_attention_mma's cases, and rows that cannot be
   read 16 bytes at a time): the caller computes in float32 then */
struct qkv_cu_mma_tiles {
  int dt, d, mt, bk;
  size_t smem;
};
int qkv_cu_attention_mma_tiles(const qkv_attn_plan &P, qkv_cu_mma_tiles *t);

/* a decode step's few queries (attention_decode.cu): whether it takes the
   plan (float32 or float64, at most 8 queries, no mask, heads up to 256),
   and running it there, the keys split across blocks */
int qkv_cu_decode_fits(const qkv_attn_plan &P);
int qkv_cu_attention_decode(const qkv_attn_plan &P);
/*
** What both fused kernels' launches do first: raise the kernel's limit of
** dynamic shared memory where a block needs more than the default 48 KiB,
** and cut the plan into tiles of bq queries (qkv_attn_tiles); *grid is a
** block an item, at most INT_MAX (the kernels loop over the rest).
*/
template <typename K>
static int attention_grid (K kernel, size_t smem, int bq, qkv_attn_plan *P, unsigned *grid) {
  if (smem > 48 * 1024)
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
  qkv_attn_tiles(P, bq);
  *grid = (unsigned)(P->items < INT_MAX ? P->items : INT_MAX);
  return QKV_OK;
}

#endif
