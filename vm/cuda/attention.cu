/*
** attention.cu -- fused scaled-dot-product attention on the GPU, as
** vm/cpu/attention.c: out = softmax(q k^T * scale, masked) v, computed for a
** tile of BQ queries against BK keys at a time with an online softmax (a
** running max m and sum l per query; the partial output is rescaled by
** exp(m_old - m_new) when the max grows), so no block holds more than a
** BQ x BK block of scores.
**
** Sizes and strides: q (B..., nq, dk), k (B..., nk, dk), v (B..., nk, dv)
** and mask (bool, (B..., nq, nk), or none) come expanded to out's batch
** dims with any element strides (0 included, in the last dims too); out
** (B..., nq, dv) is contiguous.  Query i keeps key j where the mask is
** true and, under causal, j <= i + nk - nq; a query with no key left gives
** zeros.  Scores are the product then a multiply by scale, as the CPU's.
**
** A block of NT = 256 threads takes one tile of BQ queries of one batch
** item (the grid loops over these items, the last query tiles first, as
** the CPU's) and walks the key tiles up to the tile's causal end:
**   1. K's and V's tiles to shared memory (Q's once per item);
**   2. scores: thread t = 16 r + c computes queries r + 16 a (a < BQ / 16)
**      against keys c + 16 b (b < BK / 16), in registers; an excluded key
**      (mask false, causal, past nk) gets -inf;
**   3. the online softmax in registers: the 16 threads of a row (one half
**      warp) share its max by shuffles, each keeps its part of l; the
**      probabilities go to shared memory as P;
**   4. O = O * exp(m_old - m_new) + P V, where the thread owns O's elements
**      of its rows at columns c + 16 j, so O needs no barrier of its own.
** At the end out = O / l (l summed over the row's threads), zeros where
** l == 0, and, when the plan asks for it, the query's log-sum-exp m + log l
** (-inf where l == 0) for the backward.
**
** Shared memory, in elements of T: P BQ x LDP (LDP = 16 mod 32: the two
** half warps hit other banks), Q BQ x ldq and K BK x ldq (ldq = dk | 1: odd,
** so 16 threads reading 16 keys' rows hit 16 banks), V BK x dv, O BQ x dv.
** For d = dk = dv in float32 that is 84.5 KiB at 64 x 64 (d = 64) and
** 108.4 KiB at 64 x 32 (d = 128); tiles shrink (64 x 64, 64 x 32, 32 x 32,
** 16 x 16) until a block fits, two to an SM where one of the first two does.
** A head too big even for 16 x 16 takes the unstaged kernel: q, k, v read
** from global memory where they lie, O kept in out, only P shared.
*/
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attention.cuh"
#include "attention_kernel.cuh"
#include "cudnn.h"

#define NT QKV_ATTN_NT               /* threads a block */

/* a block's shared memory at most (the device's own limit if lower) */
#define BUDGET (200 * 1024)

/* ---- the kernel (attention_kernel.cuh) ---- */

template <typename T, int BQ, int BK, bool STAGED>
__global__ void __launch_bounds__(NT) attention_kernel (qkv_attn_plan P) {
  QKV_DYNAMIC_SMEM(smem);
  qkv_attn_tiled<T, BQ, BK, STAGED, qkv_mods_none>(P, NULL, smem);
}

/* ---- the launch ---- */

/* shared memory of a block for BQ x BK tiles */
static size_t smem_bytes (int bq, int bk, int dk, int dv, size_t es, bool staged) {
  size_t ldq = (size_t)(dk | 1), ldp = (size_t)(bk / 32 * 32 + 16);
  size_t n = (size_t)bq * ldp;
  if (staged) n += (size_t)(bq + bk) * ldq + (size_t)(bk + bq) * (size_t)dv;
  return n * es;
}

template <typename T, int BQ, int BK, bool STAGED>
static int launch (qkv_attn_plan P) {
  size_t smem = smem_bytes(BQ, BK, (int)P.dk, (int)P.dv, sizeof(T), STAGED);
  void (*kernel)(qkv_attn_plan) = attention_kernel<T, BQ, BK, STAGED>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, BQ, &P, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, NT, smem>>>(P);
  launchCheck("attention_kernel");
  return QKV_OK;
}

/* the device's shared memory: a block's most, and half an SM's (two blocks
   to an SM), each less the 1 KiB the system keeps a block */
static int smem_limits (size_t *block, size_t *half) {
  static int most = -1, per_sm = -1;
  if (most < 0) {
    int dev, a = 0, b = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&a, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaCheck(cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    most = a;
    per_sm = b;
  }
  *block = (size_t)most < BUDGET ? (size_t)most : BUDGET;
  *half = (size_t)per_sm / 2 > 1024 ? (size_t)per_sm / 2 - 1024 : 0;
  if (*half > *block) *half = *block;
  return QKV_OK;
}

/* the biggest tiles that fit, two blocks to an SM where 64 x 64 or
   64 x 32 can, else one; the unstaged kernel when none fits */
int qkv_cu_attention_tiles (const qkv_attn_plan &P, size_t es, qkv_cu_tiles *t) {
  size_t block = 0, half = 0;
  int err = smem_limits(&block, &half);
  if (err != QKV_OK) return err;
  int dk = (int)P.dk, dv = (int)P.dv;
  static const struct { int bq, bk, half; } tries[] = {
    {64, 64, 1}, {64, 32, 1}, {64, 64, 0}, {64, 32, 0}, {32, 32, 0}, {16, 16, 0}};
  for (const auto &c : tries)
    if (smem_bytes(c.bq, c.bk, dk, dv, es, true) <= (c.half ? half : block)) {
      *t = {c.bq, c.bk, true, smem_bytes(c.bq, c.bk, dk, dv, es, true)};
      return QKV_OK;
    }
  *t = {64, 64, false, smem_bytes(64, 64, dk, dv, es, false)};
  return QKV_OK;
}

template <typename T>
static int run (const qkv_attn_plan &P) {
  qkv_cu_tiles c;
  int err = qkv_cu_attention_tiles(P, sizeof(T), &c);
  if (err != QKV_OK) return err;
  if (!c.staged) return launch<T, 64, 64, false>(P);
  if (c.bq == 64) return c.bk == 64 ? launch<T, 64, 64, true>(P) : launch<T, 64, 32, true>(P);
  return c.bq == 32 ? launch<T, 32, 32, true>(P) : launch<T, 16, 16, true>(P);
}

/* lse, when given, gets each query's log-sum-exp (the kernels' epilogue;
   -inf for every query when nk == 0), which attention_bwd.cu reads in
   place of a pass of its own over the scores */
int qkv_cuda_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                        const qkv_tensor *v, const qkv_tensor *mask, int causal,
                        double scale, qkv_tensor *lse) {
  int half = qkv_is_half(out->dtype);
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64 && !half) return QKV_EDTYPE;
  qkv_attn_plan P;
  int err = qkv_attn_plan_forward(&P, out, q, k, v, mask, causal, scale, lse, qkv_cu_attn_data);
  if (err != QKV_OK) return err;
  /* the halves: cuDNN's fused attention first, where the plugin has it,
     then the tensor cores' (QKV_EDTYPE from both: in float32) */
  const char *f = qkv_cu_attention_force;
  if (half && f && strcmp(f, "cudnn") && strcmp(f, "wgmma") && strcmp(f, "mma") &&
      strcmp(f, "fp32"))
    return qkv_cu_fail("QKV_CUDA_ATTENTION", __FILE__, __LINE__,
                       "names none of the paths auto, cudnn, wgmma, mma, fp32");
  if (half && (err = qkv_cu_cudnn_attention ? qkv_cu_cudnn_attention(P, out, q, k, v, lse)
                                            : qkv_cu_decline("cudnn", NO_CUDNN)) != QKV_EDTYPE)
    return err;
  if (P.nbatch == 0 || P.nq == 0 || P.dv == 0) return QKV_OK;
  if (!qkv_cu_contiguous(out)) return QKV_EINTERNAL;
  size_t es = qkv_dtype_bytes(out->dtype);
  if (lse && !qkv_cu_contiguous(lse)) return QKV_EINTERNAL;
  if (P.nk == 0) {                   /* no key for any query: zeros, lse -inf */
    cudaCheck(cudaMemsetAsync(P.out, 0, (size_t)(P.nbatch * P.nq * P.dv) * es, 0));
    return lse ? qkv_cuda_fill(lse, -INFINITY) : QKV_OK;
  }
  /* the kernel counts features (and tile elements) in int */
  if (P.dk >= INT_MAX / 64 || P.dv >= INT_MAX / 64) return QKV_EINTERNAL;
  if (half && (err = qkv_cu_attention_wgmma(P)) != QKV_EDTYPE) return err;
  if (half) return qkv_cu_attention_mma(P);
  qkv_cu_attention_path = "fp32";
  if (qkv_cu_decode_fits(P)) return qkv_cu_attention_decode(P);   /* a decode step */
  if (out->dtype == QKV_F32) return run<float>(P);
  return run<double>(P);
}
