/*
** attention_mma_bwd.cu -- the fused attention's backward in bfloat16 and
** float16 on the tensor cores (attention_mma_bwd_kernel.cuh holds the main
** kernel and says how it works): the pre-pass and the last pass, and the
** launches.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "attention_mma_bwd_kernel.cuh"
#include "jit.cuh"
#include "mods.cuh"

#define NTH QKV_MMA_NT
#define BK QKV_MMA_BWD_BK
typedef qkv_mma_grads grads;

/* ---- the small kernels ---- */

/* delta[r] = dO[r] . O[r] over D features, a warp a row */
template <int DT, int D>
__global__ void delta_kernel (float *delta, const uint16_t *o, const uint16_t *go, int64_t rows) {
  const int lane = threadIdx.x % 32;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  for (int64_t r = w; r < rows; r += (int64_t)gridDim.x * blockDim.x / 32) {
    float sum = 0;
    for (int d = 2 * lane; d < D; d += 64) {
      const uint16_t *a = o + r * D + d, *g = go + r * D + d;
      sum += qkv_half_get<DT>(a[0]) * qkv_half_get<DT>(g[0]) +
             qkv_half_get<DT>(a[1]) * qkv_half_get<DT>(g[1]);
    }
    for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
    if (lane == 0) delta[r] = sum;
  }
}

/* dq = scale acc, two elements a thread a step (n even) */
template <int DT>
__global__ void dq_kernel (uint16_t *dq, const float *acc, float scale, int64_t n) {
  QKV_CU_LOOP(x, n / 2)
    *(uint32_t *)(dq + 2 * x) = qkv_pack2<DT>(acc[2 * x] * scale, acc[2 * x + 1] * scale);
}

/* ---- the main kernel: plain attention (no program) ---- */

template <int DT, int D, int BQ>
__global__ void __launch_bounds__(NTH) attention_mma_bwd_kernel (qkv_attn_plan P, grads G) {
  extern __shared__ __align__(16) unsigned char smem[];
  qkv_attn_mma_bwd<DT, D, BQ, qkv_mods_none>(P, NULL, G, smem);
}

/* ---- the launch ---- */

/*
** The three launches: delta, the main kernel (the plugin's, or jit: the
** one compiled with a program, which reads Md, the device copy of its
** mods), dQ.  The main kernel's grid is a block an item (key tile).
*/
template <int DT, int D>
static int launch (const qkv_attn_plan &P, const grads &G, const void *jit, qkv_attn_mods *Md) {
  enum { BQ = qkv_mma_bwd_bq(D) };
  const uint16_t *o = (const uint16_t *)P.o.base, *go = (const uint16_t *)P.go.base;
  int64_t rows = P.nbatch * P.nq, items = P.nbatch * ((P.nk + BK - 1) / BK);
  delta_kernel<DT, D><<<qkv_cu_blocks(rows * 32, 256), 256>>>(G.delta, o, go, rows);
  launchCheck("delta_kernel");
  cudaCheck(cudaMemsetAsync(G.dqacc, 0, (size_t)(rows * D) * sizeof(float), 0));
  size_t smem = qkv_mma_bwd_smem(D);
  unsigned grid = (unsigned)(items < INT_MAX ? items : INT_MAX);
  if (jit) {
    qkv_mods_args A = {P, Md, NULL, NULL, 0, 0, 0, 0, G.lse, G.delta, G.dqacc, 0, 0};
    int err = qkv_cu_jit_launch(jit, "qkv_jit_mma_bwd", grid, NTH, smem, A);
    if (err != QKV_OK) return err;
  } else {
    void (*kernel)(qkv_attn_plan, grads) = attention_mma_bwd_kernel<DT, D, BQ>;
    if (smem > 48 * 1024)
      cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem));
    kernel<<<grid, NTH, smem>>>(P, G);
    launchCheck("attention_mma_bwd_kernel");
  }
  dq_kernel<DT><<<qkv_cu_blocks(rows * D / 2, 256), 256>>>((uint16_t *)P.gq, G.dqacc,
                                                          (float)P.scale, rows * D);
  launchCheck("dq_kernel");
  return QKV_OK;
}

/* the forward's lse into scratch, where the caller has none */
static int forward_lse (const qkv_attn_plan &P, uint16_t *out, float *lse) {
  qkv_attn_plan F = P;
  F.out = (char *)out;
  F.lse = lse;
  return qkv_cu_attention_mma(F);
}

/* QKV_OK where the kernel takes P: head sizes 64 and 128, dk == dv, every
   row 16-byte aligned (the loads are 16 bytes wide), no other path forced */
static int takes (const qkv_attn_plan &P) {
  /* another path forced (cuda.cuh): never this one */
  if (qkv_cu_forced_other("mma")) return QKV_EDTYPE;
  int64_t d = P.dk;
  if (P.dv != d || (d != 64 && d != 128))
    return qkv_cu_decline("mma", "the tensor-core backward takes head sizes 64 and 128, dk == dv");
  const void *all[8] = {P.gq, P.gk, P.gv, P.q.base, P.k.base, P.v.base, P.o.base, P.go.base};
  for (int i = 0; i < 8; i++)
    if ((uintptr_t)all[i] % 16 != 0)
      return qkv_cu_decline("mma", "the tensor-core backward reads rows 16-byte aligned");
  return QKV_OK;
}

/* the backward into P's gradients, lse made first where P has none; jit,
   Md: launch()'s */
static int run (const qkv_attn_plan &P, const void *jit, qkv_attn_mods *Md) {
  int64_t rows = P.nbatch * P.nq, d = P.dk;
  /* scratch: dQ's accumulators, delta, and without lse the forward's
     lse and out */
  size_t bytes = (size_t)(rows * d + rows) * sizeof(float);
  if (!P.lse) bytes += (size_t)rows * sizeof(float) + (size_t)(rows * d) * 2;
  float *scratch = (float *)qkv_cu_alloc(bytes);
  if (scratch == NULL) return QKV_ENOMEM;
  grads G;
  G.dqacc = scratch;
  G.delta = scratch + rows * d;
  int err = QKV_OK;
  if (P.lse) {
    G.lse = (const float *)P.lse;
  } else {
    float *l = scratch + rows * d + rows;
    G.lse = l;
    err = forward_lse(P, (uint16_t *)(l + rows), l);
  }
  if (err == QKV_OK) {
    if (P.dtype == QKV_BF16)
      err = d == 64 ? launch<QKV_MMA_BF16, 64>(P, G, jit, Md)
                    : launch<QKV_MMA_BF16, 128>(P, G, jit, Md);
    else
      err = d == 64 ? launch<QKV_MMA_F16, 64>(P, G, jit, Md)
                    : launch<QKV_MMA_F16, 128>(P, G, jit, Md);
  }
  qkv_cu_free(scratch);
  return err;
}

int qkv_cu_attention_mma_bwd (const qkv_attn_plan &P) {
  int err = takes(P);
  if (err == QKV_OK) err = run(P, NULL, NULL);
  if (err == QKV_OK) qkv_cu_attention_path = "mma";
  return err;
}

int qkv_cu_attention_mma_bwd_mods (const qkv_attn_plan &P, qkv_attn_mods *M) {
  const char *why;
  qkv_cu_mma_tiles t;
  if (!qkv_cu_jit_on(&why) || P.lse == NULL) return QKV_EDTYPE;
  /* the forward's tiles, so that the program's text is the forward's:
     one compile for both */
  int err = takes(P);
  if (err == QKV_OK) err = qkv_cu_attention_mma_tiles(P, &t);
  if (err != QKV_OK) return err;
  if (P.nq >= 1 << 30 || P.nk >= 1 << 30)        /* positions in int where the blocks are */
    return qkv_cu_decline("mma", "the variants' tensor-core backward takes n below 2^30");
  qkv_cu_mods dev;
  if ((err = qkv_cu_mods_up(M, &P, &dev, &t)) != QKV_OK) return err;
  const void *k = qkv_cu_jit_kernel(dev.jit, "qkv_jit_mma_bwd");
  err = k ? run(P, k, dev.dev)
          : qkv_cu_fail("qkv_cu_jit_kernel", __FILE__, __LINE__, "qkv_jit_mma_bwd");
  if (err == QKV_OK) err = qkv_cu_mods_down(M, dev);
  if (err == QKV_OK) qkv_cu_attention_path = "mods-mma";
  qkv_cu_free(dev.dev);
  return err;
}
