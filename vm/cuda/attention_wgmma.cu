/*
** attention_wgmma.cu -- the Hopper forward in bfloat16 and float16 (sm_90a):
** attention_mma_kernel.cuh's function (the same plan, masks, causal, lse,
** a query with no key left gives zeros), its products on wgmma
** (wgmma.cuh) in place of mma.sync.  Correct first: not yet run on a GPU,
** so the automatic choice does not take it; it runs where
** qkv.cuda.attention_backend("wgmma") (or QKV_CUDA_ATTENTION=wgmma) forces
** it, on a device of compute capability 9.0 and on the host simulation.
**
** 128 queries of one batch item a block, in two consumer warpgroups:
** warpgroup h queries 64 h .. 64 h + 63, its warp w (of 8) rows 16 w ..
** 16 w + 15, the rows mma.sync's kernel gives a warp at one m-tile, so the
** cut bits, the online softmax and the epilogue are that kernel's at MT 1.
** Per key tile of BK keys, a warp (attention_wgmma.cuh):
**   1. S = Q K^T: D / 16 wgmma m64nBKk16 a warpgroup, A = Q and B = K
**      from shared memory by descriptors, swizzled (wgmma.cuh), then
**      waited for;
**   2. the mask's cut and the online softmax in registers, as mma's;
**   3. O += P V: BK / 16 wgmma m64nDk16 with P's A fragments packed from
**      S's accumulators in registers and B = V read transposed.
** A warpgroup whose 64 queries all come before the tile's first key
** (causal) skips its products, so the skip is the warpgroup's, not the
** warp's: wgmma is a collective of all four warps.
**
** Two ways to bring K and V (QKV_CUDA_WGMMA_LOAD):
**   tma (the default): a third warpgroup, the producer, copies the tiles
**     by TMA (tma.cuh) into a ring of 2-4 stages on mbarriers while the
**     consumers compute (attention_wgmma_tma.cu), the two consumers
**     taking turns at the tensor cores and each running its last tile's
**     P V under this tile's softmax (FA3's ping-pong and intra-warpgroup
**     overlap; tma-pingpong: the turns alone, tma-serial: neither);
**   cp.async: the first version, the two warpgroups load their own tiles
**     by cp.async in a two-stage ring (the mma kernel's loop: wait for
**     one's own copies, fence the async proxy, barrier, issue the next).
**
** What the simulation checks: the descriptors' addresses, strides and
** swizzle against the layout the loads write (decoded as the PTX ISA
** says), the tensor maps' boxes and coordinates, the barriers' counts,
** bytes and phases, the fragments, the numerics, and the asynchrony at
** its extremes (each wgmma computed at the wait for its group; a TMA copy
** landed at once or at the wait on its barrier: a stage reused early or
** read early shows).  What only a GPU checks: that the hardware reads
** the layout as the simulation decodes it, and the speed
** (tests/tools/gpu_check.sh, bench/attention_gpu.lua).
**
** Shared memory, from a 1024-byte aligned base: Q (128 x D), the stages
** of K and V (BK x D each), the cut bits (128 x BK / 32 words), and for
** TMA the mbarriers.
*/
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "attention_wgmma.cuh"

/* the kernel's dynamic shared memory, bytes (1024 for the alignment) */
static constexpr size_t wg_smem (int D, int BK) {
  return 1024 + (size_t)(QKV_WG_BQ + 4 * BK) * D * sizeof(uint16_t) +
         (size_t)QKV_WG_BQ * (BK / 32) * sizeof(uint32_t);
}

/* rows [r0, r0 + n) of src (rows rs apart, elements dense) into a
   swizzled tile of `rows` rows at t, zeros past n: by cp.async (async,
   one group) or plain 16-byte loads */
template <int D, bool ASYNC>
__device__ static void wg_load (unsigned char *t, const uint16_t *src, int64_t rs, int r0, int n,
                                int rows) {
  enum { V = D / 8 };
  for (int x = threadIdx.x; x < rows * V; x += QKV_WG_NT) {
    const int i = x / V, ch = x % V;
    unsigned char *dst = t + qkv_wg_chunk(rows, i, ch);
    if (i >= n)
      *(uint4 *)dst = make_uint4(0, 0, 0, 0);
    else if (ASYNC)
      qkv_cp_async16(dst, src + (int64_t)(r0 + i) * rs + ch * 8);
    else
      *(uint4 *)dst = *(const uint4 *)(src + (int64_t)(r0 + i) * rs + ch * 8);
  }
  if (ASYNC) qkv_cp_commit();
}

/* the first version: two warpgroups that load K and V themselves */
template <int DT, int D, int BK>
__global__ void __launch_bounds__(QKV_WG_NT, 1) attention_wgmma_kernel (qkv_attn_plan P) {
#if QKV_WGMMA
  enum { R = 16, BQ = QKV_WG_BQ, TQ = BQ * D * 2, TKV = BK * D * 2 };
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + (1024 - qkv_smem_u32(smem_raw) % 1024) % 1024;
  unsigned char *Qs = smem, *KV = smem + TQ;      /* stage s: K at KV + 2 s TKV, V after */
  const int w = threadIdx.x / 32, wg = w / 4;
  uint32_t *Bw = (uint32_t *)(KV + 4 * TKV) + w * R * (BK / 32);
  const float scale2 = (float)(P.scale * 1.4426950408889634);

  int64_t b, i0_, boff[4];
  const int bq = qkv_attn_item(&P, blockIdx.x, &b, &i0_);
  const int jend = (int)qkv_attn_key_end(&P, i0_, bq);
  qkv_attn_batch_offsets(&P, b, boff);
  const int i0 = (int)i0_, nk = (int)P.nk, off = (int)P.off;
  const int r0 = i0 + R * w;                      /* this warp's first query */
  const int g0 = i0 + 64 * wg;                    /* this warpgroup's */
  const uint16_t *kg = (const uint16_t *)P.k.base + boff[1];
  const uint16_t *vg = (const uint16_t *)P.v.base + boff[2];
  const unsigned char *mk = (const unsigned char *)P.mask.base + boff[3];

  if (jend > 0) {
    wg_load<D, true>(KV, kg, P.k.rs, 0, nk < BK ? nk : BK, BK);
    wg_load<D, true>(KV + TKV, vg, P.v.rs, 0, nk < BK ? nk : BK, BK);
  }
  wg_load<D, false>(Qs, (const uint16_t *)P.q.base + boff[0], P.q.rs, i0, bq, BQ);
  /* Q's descriptor at k16 step 0 for this warpgroup's 64 rows; step kk
     adds (kk / 4) column blocks and (kk % 4) 32 bytes */
  const uint32_t qa = qkv_smem_u32(Qs) + 64 * wg * 128;

  wg_rows<D> st;
  wg_start(st);
  for (int j0 = 0; j0 < jend; j0 += BK) {
    unsigned char *Ks = KV + (j0 / BK & 1) * 2 * TKV, *Vs = Ks + TKV;
    qkv_cp_wait<0>();                   /* this thread's copies of this tile */
    qkv_fence_proxy_async();            /* ... and its stores, for the tensor cores */
    __syncthreads();                    /* everyone's; the last tile is done with */
    if (j0 + BK < jend) {
      unsigned char *next = KV + ((j0 / BK + 1) & 1) * 2 * TKV;
      const int n = nk - j0 - BK < BK ? nk - j0 - BK : BK;
      wg_load<D, true>(next, kg, P.k.rs, j0 + BK, n, BK);
      wg_load<D, true>(next + TKV, vg, P.v.rs, j0 + BK, n, BK);
    }
    if (wg_tile_past(P, g0, j0, off)) continue;   /* the warpgroup's rows: none */
    const bool cut = wg_tile_cut<BK>(P, r0, j0, nk, off);
    wg_tile<DT, D, BK>(st, P, Bw, mk, r0, j0, cut, qa, Ks, Vs, scale2, 0, 0);
  }
  wg_finish<DT, D>(st, P, b * P.nq + i0, R * w, bq);
#else
  (void)P;
  __trap();           /* a build without sm_90a code: fail, never leave out unwritten */
#endif
}

template <int DT, int D, int BK>
static int launch (qkv_attn_plan P) {
  constexpr size_t smem = wg_smem(D, BK);
  void (*kernel)(qkv_attn_plan) = attention_wgmma_kernel<DT, D, BK>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, QKV_WG_BQ, &P, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, QKV_WG_NT, smem>>>(P);
  launchCheck("attention_wgmma_kernel");
  return QKV_OK;
}

/* the device's compute capability is 9.0 (sm_90a code runs there only) */
static int hopper (void) {
  static int is = -1;
  if (is < 0) {
    cudaDeviceProp prop;
    is = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
  }
  return is;
}

int qkv_cu_attention_wgmma (const qkv_attn_plan &P) {
  if (!qkv_cu_forced("wgmma")) return QKV_EDTYPE;     /* not chosen unasked: never run on a GPU */
  if (!hopper())
    return qkv_cu_decline("wgmma", "the wgmma kernel needs a GPU of compute capability 9.0");
  if (P.dk != P.dv || (P.dk != 64 && P.dk != 128) || (uintptr_t)P.out % 4 != 0 ||
      P.nq >= 1 << 30 || P.nk >= 1 << 30 || P.nbatch > INT_MAX / (P.nq / 128 + 1))
    return qkv_cu_decline("wgmma", "the wgmma kernel takes head sizes 64 and 128, dk == dv");
  if (!qkv_cu_dense_rows(P))
    return qkv_cu_decline("wgmma", "the wgmma kernel reads rows 16 bytes at a time");
  /* QKV_CUDA_WGMMA_BK: keys a tile, 64 or 128 (unset: 128), and
     QKV_CUDA_WGMMA_LOAD: tma (unset), tma-pingpong, tma-serial (TMA's
     schedules, attention_wgmma_tma.cu) or cp.async (the first version,
     two warpgroups loading their own tiles), for the GPU run to time
     each; another value is an error */
  static int bk = 0, load = -2;                 /* load: -1 cp.async, else TMA's schedule */
  if (bk == 0) {
    const char *e = getenv("QKV_CUDA_WGMMA_BK");
    bk = !e || !*e || !strcmp(e, "128") ? 128 : !strcmp(e, "64") ? 64 : -1;
  }
  if (load == -2) {
    const char *e = getenv("QKV_CUDA_WGMMA_LOAD");
    load = !e || !*e || !strcmp(e, "tma") ? 2 : !strcmp(e, "tma-pingpong") ? 1
           : !strcmp(e, "tma-serial") ? 0 : !strcmp(e, "cp.async") ? -1 : 3;
  }
  if (bk < 0) return qkv_cu_fail("QKV_CUDA_WGMMA_BK", __FILE__, __LINE__, "not 64 or 128");
  if (load > 2)
    return qkv_cu_fail("QKV_CUDA_WGMMA_LOAD", __FILE__, __LINE__,
                       "not tma, tma-pingpong, tma-serial or cp.async");
  qkv_cu_attention_path = "wgmma";
  if (load >= 0) return qkv_cu_wgmma_tma(P, bk, load);
  const bool f16 = P.dtype != QKV_BF16, d64 = P.dk == 64;
  if (bk == 64)
    return f16 ? (d64 ? launch<QKV_MMA_F16, 64, 64>(P) : launch<QKV_MMA_F16, 128, 64>(P))
               : (d64 ? launch<QKV_MMA_BF16, 64, 64>(P) : launch<QKV_MMA_BF16, 128, 64>(P));
  return f16 ? (d64 ? launch<QKV_MMA_F16, 64, 128>(P) : launch<QKV_MMA_F16, 128, 128>(P))
             : (d64 ? launch<QKV_MMA_BF16, 64, 128>(P) : launch<QKV_MMA_BF16, 128, 128>(P));
}
