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
** Per key tile of BK keys, a warp (wg_tile):
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
**     consumers compute (attention_wgmma_tma_kernel);
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
#include <cuda.h>
#include <cudaTypedefs.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "attention_mma_kernel.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

#define QKV_WG_WARPS 8
#define QKV_WG_NT (32 * QKV_WG_WARPS)
#define QKV_WG_BQ 128

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

/* a warp's rows across the key tiles: O's accumulators, and per row (g,
   g + 8) the running max m and sum l in log2 units */
template <int D> struct wg_rows {
  float o[D / 8][4], m[2], l[2];
};

template <int D>
__device__ static void wg_start (wg_rows<D> &st) {
  QKV_UNROLL for (int dn = 0; dn < D / 8; dn++)
    QKV_UNROLL for (int e = 0; e < 4; e++) st.o[dn][e] = 0;
  QKV_UNROLL for (int h = 0; h < 2; h++) st.m[h] = -INFINITY, st.l[h] = 0;
}

/*
** One key tile for a warp of a warpgroup, its K and V in shared memory at
** Ks and Vs (K there now; V there once vbar's phase of parity vph has
** completed, where vbar is not 0): the products, the cut, the online
** softmax.  qa: the warpgroup's Q in shared memory; r0 the warp's first
** query, j0 the tile's first key; cut: whether the mask, the keys' end or
** the causal diagonal cuts the tile for the warp, its bits into Bw.
*/
template <int DT, int D, int BK>
__device__ static void wg_tile (wg_rows<D> &st, const qkv_attn_plan &P, uint32_t *Bw,
                                const unsigned char *mk, int r0, int j0, bool cut, uint32_t qa,
                                const unsigned char *Ks, const unsigned char *Vs, float scale2,
                                uint32_t vbar, unsigned vph) {
  enum { R = 16, NS = BK / 8, DN = D / 8, KS = D / 16, BQ = QKV_WG_BQ };
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const float ninf = -INFINITY;
  if (cut) {
    qkv_mma_cut_bits<R, BK>(Bw, P, mk, r0, j0);
    __syncwarp();
  }

  /* S = Q K^T */
  float s[NS][4];
  QKV_UNROLL for (int n = 0; n < NS; n++)
    QKV_UNROLL for (int e = 0; e < 4; e++) s[n][e] = 0;
  const uint32_t ka = qkv_smem_u32(Ks);
  qkv_wg_fence_operand<NS * 4>(&s[0][0]);
  qkv_wg_fence();
  QKV_UNROLL for (int kk = 0; kk < KS; kk++) {
    const uint32_t step = (kk & 3) * 32;
    qkv_wgmma_ss<DT, BK>(&s[0][0], qkv_wg_desc(qa + (kk >> 2) * BQ * 128 + step, 16, 1024),
                         qkv_wg_desc(ka + (kk >> 2) * BK * 128 + step, 16, 1024));
  }
  qkv_wg_commit();
  qkv_wg_wait<0>();
  qkv_wg_fence_operand<NS * 4>(&s[0][0]);

  /* scaled into log2 units, the keys not kept to -inf, the row max */
  QKV_UNROLL for (int n = 0; n < NS; n++)
    QKV_UNROLL for (int e = 0; e < 4; e++) s[n][e] *= scale2;
  if (cut) {
    QKV_UNROLL for (int h = 0; h < 2; h++)
      QKV_UNROLL for (int wd = 0; wd < BK / 32; wd++) {
        const uint32_t word = Bw[(8 * h + g) * (BK / 32) + wd] >> c;
        QKV_UNROLL for (int q = 0; q < 4; q++)
          QKV_UNROLL for (int e = 0; e < 2; e++)
            if (!(word >> (8 * q + e) & 1)) s[4 * wd + q][2 * h + e] = ninf;
      }
    __syncwarp();                     /* read before the next tile's cut bits */
  }

  /* the online softmax (mma's at MT 1) */
  float alpha[2], mref[2];
  QKV_UNROLL for (int h = 0; h < 2; h++) {
    float x = ninf;
    QKV_UNROLL for (int n = 0; n < NS; n++) x = fmaxf(x, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    x = fmaxf(x, __shfl_xor_sync(QKV_MMA_FULL, x, 1));
    x = fmaxf(x, __shfl_xor_sync(QKV_MMA_FULL, x, 2));
    const float mn = fmaxf(st.m[h], x);
    mref[h] = mn == ninf ? 0.f : mn;
    alpha[h] = qkv_exp2(st.m[h] - mref[h]);
    st.m[h] = mn;
    st.l[h] *= alpha[h];
  }
  QKV_UNROLL for (int n = 0; n < NS; n++)
    QKV_UNROLL for (int e = 0; e < 4; e++) {
      s[n][e] = qkv_exp2(s[n][e] - mref[e / 2]);
      st.l[e / 2] += s[n][e];
    }
  if (__any_sync(QKV_MMA_FULL, alpha[0] != 1.f || alpha[1] != 1.f)) {
    QKV_UNROLL for (int dn = 0; dn < DN; dn++)
      QKV_UNROLL for (int e = 0; e < 4; e++) st.o[dn][e] *= alpha[e / 2];
  }

  /* O += P V: keys 16 kp .. + 15 are V's rows from kp 16, two 8-key
     groups (SBO), the dims' column blocks LBO apart */
  uint32_t pa[BK / 16][4];
  QKV_UNROLL for (int kp = 0; kp < BK / 16; kp++) {
    pa[kp][0] = qkv_pack2<DT>(s[2 * kp][0], s[2 * kp][1]);
    pa[kp][1] = qkv_pack2<DT>(s[2 * kp][2], s[2 * kp][3]);
    pa[kp][2] = qkv_pack2<DT>(s[2 * kp + 1][0], s[2 * kp + 1][1]);
    pa[kp][3] = qkv_pack2<DT>(s[2 * kp + 1][2], s[2 * kp + 1][3]);
  }
  if (vbar) qkv_mbar_wait(vbar, vph);
  const uint32_t va = qkv_smem_u32(Vs);
  qkv_wg_fence_operand<DN * 4>(&st.o[0][0]);
  qkv_wg_fence_operand<BK / 4>(&pa[0][0]);
  qkv_wg_fence();
  QKV_UNROLL for (int kp = 0; kp < BK / 16; kp++)
    qkv_wgmma_rs<DT, D>(&st.o[0][0], pa[kp], qkv_wg_desc(va + kp * 16 * 128, BK * 128, 1024));
  qkv_wg_commit();
  qkv_wg_wait<0>();
  qkv_wg_fence_operand<DN * 4>(&st.o[0][0]);
  qkv_wg_fence_operand<BK / 4>(&pa[0][0]);
}

/* out = O / l for the warp's rows from query i0 + rw (of the item's bq
   from row row0 of out), zeros where no key was kept; lse = (m + log2
   l) ln 2 */
template <int DT, int D>
__device__ static void wg_finish (const wg_rows<D> &st, const qkv_attn_plan &P, int64_t row0,
                                  int rw, int bq) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  uint16_t *out = (uint16_t *)P.out + row0 * D;
  QKV_UNROLL for (int h = 0; h < 2; h++) {
    float sum = st.l[h];
    sum += __shfl_xor_sync(QKV_MMA_FULL, sum, 1);
    sum += __shfl_xor_sync(QKV_MMA_FULL, sum, 2);
    const int r = rw + g + 8 * h;
    if (r >= bq) continue;
    const float rinv = sum == 0 ? 0.f : 1.f / sum;
    QKV_UNROLL for (int dn = 0; dn < D / 8; dn++)
      *(uint32_t *)(out + r * D + dn * 8 + c) =
          qkv_pack2<DT>(st.o[dn][2 * h] * rinv, st.o[dn][2 * h + 1] * rinv);
    if (P.lse && c == 0)
      ((float *)P.lse)[row0 + r] =
          sum == 0 ? -INFINITY : (st.m[h] + log2f(sum)) * 0.6931471805599453f;
  }
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
    if (P.causal && j0 > g0 + 63 + off) continue;    /* the warpgroup's rows: nothing here */
    const bool cut = P.has_mask || j0 + BK > nk || (P.causal && j0 + BK - 1 > r0 + off);
    wg_tile<DT, D, BK>(st, P, Bw, mk, r0, j0, cut, qa, Ks, Vs, scale2, 0, 0);
  }
  wg_finish<DT, D>(st, P, b * P.nq + i0, R * w, bq);
#else
  (void)P;
  __trap();           /* a build without sm_90a code: fail, never leave out unwritten */
#endif
}

/*
** The TMA kernel: a producer warpgroup and two consumers (384 threads).
** One thread of the producer copies Q's tile once and K's and V's tiles
** by TMA into a ring of NST stages, each stage with three mbarriers: K
** and V landed (full, the producer's arrival and the bytes) and the stage
** free again (empty, an arrival from each of the 8 consumer warps once
** its products of the stage are done).  Round r of stage s waits for
** empty's phase r - 1; a consumer waits for K's and V's phase r, V's only
** before P V, so S = Q K^T starts as K lands.  The producer gives its
** registers up (setmaxnreg) for the consumers' accumulators.
*/
struct wg_tmap {
  CUtensorMap map;                /* (D, rows, batch dims...), boxes of 64 x rows */
  int nb;                         /* batch dims in the map, after the rows */
  int64_t div[3], mod[3];         /* item b's coordinate k: b / div[k] % mod[k] */
};
struct wg_maps { wg_tmap q, k, v; };

#if QKV_WGMMA
/* this map's coordinates for item b, column 0 and row 0 */
__device__ static void wg_coords (int c[5], const wg_tmap &t, int64_t b) {
  c[0] = c[1] = c[2] = c[3] = c[4] = 0;
  for (int k = 0; k < t.nb; k++) c[2 + k] = (int)(b / t.div[k] % t.mod[k]);
}

/* the box at column col, row row of t (c: the item's coordinates) */
__device__ static void wg_copy (uint32_t dst, const wg_tmap &t, int c[5], int col, int row,
                                uint32_t bar) {
  c[0] = col;
  c[1] = row;
  switch (t.nb) {
  case 0: qkv_tma_load<2>(dst, &t.map, c, bar); break;
  case 1: qkv_tma_load<3>(dst, &t.map, c, bar); break;
  case 2: qkv_tma_load<4>(dst, &t.map, c, bar); break;
  default: qkv_tma_load<5>(dst, &t.map, c, bar); break;
  }
}
#endif

/* stages of K and V, as many as fit beside Q in 200 KiB, at most 4 */
__host__ __device__ static constexpr int wg_stages (int D, int BK) {
  return (200 * 1024 - 128 * D * 2) / (2 * BK * D * 2) < 4
             ? (200 * 1024 - 128 * D * 2) / (2 * BK * D * 2) : 4;
}

static constexpr size_t wg_tma_smem (int D, int BK) {
  return 1024 + (size_t)(QKV_WG_BQ + 2 * wg_stages(D, BK) * BK) * D * sizeof(uint16_t) +
         (size_t)QKV_WG_BQ * (BK / 32) * sizeof(uint32_t) + 8 * (1 + 3 * wg_stages(D, BK));
}

template <int DT, int D, int BK>
__global__ void __launch_bounds__(3 * 128, 1)
    attention_wgmma_tma_kernel (qkv_attn_plan P, const __grid_constant__ wg_maps M) {
#if QKV_WGMMA
  enum { R = 16, BQ = QKV_WG_BQ, TQ = BQ * D * 2, TKV = BK * D * 2, NST = wg_stages(D, BK) };
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + (1024 - qkv_smem_u32(smem_raw) % 1024) % 1024;
  unsigned char *Qs = smem, *KV = smem + TQ;      /* stage s: K at KV + 2 s TKV, V after */
  uint32_t *bits = (uint32_t *)(KV + 2 * NST * TKV);
  /* the barriers: Q's, then K's full, V's full and empty for each stage */
  const uint32_t bar = qkv_smem_u32(bits + BQ * (BK / 32));
  const uint32_t barq = bar, fullk = bar + 8, fullv = bar + 8 + 8 * NST,
                 empty = bar + 8 + 16 * NST;
  const int w = threadIdx.x / 32, wg = w / 4, lane = threadIdx.x % 32;

  int64_t b, i0_, boff[4];
  const int bq = qkv_attn_item(&P, blockIdx.x, &b, &i0_);
  const int jend = (int)qkv_attn_key_end(&P, i0_, bq);
  const int i0 = (int)i0_;
  if (threadIdx.x == 0) {
    qkv_mbar_init(barq, 1);
    for (int s = 0; s < NST; s++) {
      qkv_mbar_init(fullk + 8 * s, 1);
      qkv_mbar_init(fullv + 8 * s, 1);
      qkv_mbar_init(empty + 8 * s, 8);
    }
    qkv_mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {                                  /* the producer */
    qkv_setmaxnreg<24, false>();
    if (threadIdx.x != 0) return;
    int cq[5], ck[5], cv[5];
    wg_coords(cq, M.q, b);
    wg_coords(ck, M.k, b);
    wg_coords(cv, M.v, b);
    qkv_mbar_arrive(barq, TQ);
    for (int cb = 0; cb < D / 64; cb++)
      wg_copy(qkv_smem_u32(Qs) + cb * BQ * 128, M.q, cq, 64 * cb, i0, barq);
    for (int t = 0, j0 = 0; j0 < jend; t++, j0 += BK) {
      const int s = t % NST;
      if (t >= NST) qkv_mbar_wait(empty + 8 * s, (t / NST - 1) & 1);
      const uint32_t ks = qkv_smem_u32(KV + 2 * s * TKV), vs = ks + TKV;
      qkv_mbar_arrive(fullk + 8 * s, TKV);
      for (int cb = 0; cb < D / 64; cb++)
        wg_copy(ks + cb * BK * 128, M.k, ck, 64 * cb, j0, fullk + 8 * s);
      qkv_mbar_arrive(fullv + 8 * s, TKV);
      for (int cb = 0; cb < D / 64; cb++)
        wg_copy(vs + cb * BK * 128, M.v, cv, 64 * cb, j0, fullv + 8 * s);
    }
    return;
  }

  /* the consumers: warpgroup wg - 1 has queries 64 (wg - 1) .. + 63 */
  qkv_setmaxnreg<240, true>();
  const int cw = w - 4;                           /* this warp of 8 */
  qkv_attn_batch_offsets(&P, b, boff);
  const int nk = (int)P.nk, off = (int)P.off;
  const int r0 = i0 + R * cw, g0 = i0 + 64 * (wg - 1);
  const unsigned char *mk = (const unsigned char *)P.mask.base + boff[3];
  uint32_t *Bw = bits + cw * R * (BK / 32);
  const float scale2 = (float)(P.scale * 1.4426950408889634);
  const uint32_t qa = qkv_smem_u32(Qs) + 64 * (wg - 1) * 128;
  wg_rows<D> st;
  wg_start(st);
  qkv_mbar_wait(barq, 0);
  for (int t = 0, j0 = 0; j0 < jend; t++, j0 += BK) {
    const int s = t % NST;
    const unsigned ph = t / NST & 1;
    unsigned char *Ks = KV + 2 * s * TKV;
    qkv_mbar_wait(fullk + 8 * s, ph);
    if (P.causal && j0 > g0 + 63 + off) {         /* the warpgroup's rows: nothing here */
      qkv_mbar_wait(fullv + 8 * s, ph);
    } else {
      const bool cut = P.has_mask || j0 + BK > nk || (P.causal && j0 + BK - 1 > r0 + off);
      wg_tile<DT, D, BK>(st, P, Bw, mk, r0, j0, cut, qa, Ks, Ks + TKV, scale2, fullv + 8 * s,
                         ph);
    }
    __syncwarp();                                 /* every lane's products of the stage done */
    if (lane == 0) qkv_mbar_arrive(empty + 8 * s);
  }
  wg_finish<DT, D>(st, P, b * P.nq + i0, R * cw, bq);
#else
  (void)P, (void)M;
  __trap();           /* a build without sm_90a code: fail, never leave out unwritten */
#endif
}

/* the driver's cuTensorMapEncodeTiled, once (NULL where it has none) */
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled (void) {
  static void *fn;
  static bool asked;
  if (!asked) {
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = NULL;
    (void)cudaGetLastError();
    asked = true;
  }
  return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}

/*
** x's tensor map, of rows rows in boxes of 64 x box: dims (D, rows, then
** the batch dims outward, those of size 1 or stride 0 left out, and two
** next to each other joined where their strides allow); false where that
** leaves over 3 batch dims or the driver refuses the map.
*/
static bool wg_map (wg_tmap *t, const qkv_attn_plan &P, const qkv_attn_view &x, int64_t rows,
                    int box) {
  cuuint64_t dim[5] = {(cuuint64_t)P.dk, (cuuint64_t)rows}, st[4] = {(cuuint64_t)x.rs * 2};
  int r = 2, last = -2;
  int64_t div = 1;
  t->nb = 0;
  for (int i = P.nbd - 1; i >= 0; div *= P.bsize[i], i--) {
    if (P.bsize[i] == 1 || x.bs[i] == 0) continue;
    if (last == i + 1 && (cuuint64_t)x.bs[i] * 2 == st[r - 2] * dim[r - 1]) {
      dim[r - 1] *= (cuuint64_t)P.bsize[i];
      t->mod[t->nb - 1] *= P.bsize[i];
    } else {
      if (r == 5) return false;
      dim[r] = (cuuint64_t)P.bsize[i];
      st[r - 1] = (cuuint64_t)x.bs[i] * 2;
      t->div[t->nb] = div;
      t->mod[t->nb++] = P.bsize[i];
      r++;
    }
    last = i;
  }
  const cuuint32_t boxd[5] = {64, (cuuint32_t)box, 1, 1, 1}, one[5] = {1, 1, 1, 1, 1};
  PFN_cuTensorMapEncodeTiled_v12000 enc = encode_tiled();
  return enc && enc(&t->map, CU_TENSOR_MAP_DATA_TYPE_UINT16, (cuuint32_t)r, (void *)x.base, dim,
                    st, boxd, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int DT, int D, int BK>
static int launch_tma (qkv_attn_plan P) {
  constexpr size_t smem = wg_tma_smem(D, BK);
  static_assert(smem <= 227 * 1024, "the TMA kernel's shared memory");
  wg_maps M;
  if (!wg_map(&M.q, P, P.q, P.nq, QKV_WG_BQ) || !wg_map(&M.k, P, P.k, P.nk, BK) ||
      !wg_map(&M.v, P, P.v, P.nk, BK))
    return qkv_cu_decline("wgmma", "the wgmma kernel's TMA cannot describe these views "
                                   "(over 3 batch dims, or the driver refuses the map)");
  void (*kernel)(qkv_attn_plan, wg_maps) = attention_wgmma_tma_kernel<DT, D, BK>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, QKV_WG_BQ, &P, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, 3 * 128, smem>>>(P, M);
  launchCheck("attention_wgmma_tma_kernel");
  return QKV_OK;
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

template <int DT, int D, int BK>
static int run (const qkv_attn_plan &P, int tma) {
  return tma ? launch_tma<DT, D, BK>(P) : launch<DT, D, BK>(P);
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
     QKV_CUDA_WGMMA_LOAD: tma (unset) or cp.async (the first version, two
     warpgroups loading their own tiles), for the GPU run to time each;
     another value is an error */
  static int bk = 0, tma = -1;
  if (bk == 0) {
    const char *e = getenv("QKV_CUDA_WGMMA_BK");
    bk = !e || !*e || !strcmp(e, "128") ? 128 : !strcmp(e, "64") ? 64 : -1;
  }
  if (tma < 0) {
    const char *e = getenv("QKV_CUDA_WGMMA_LOAD");
    tma = !e || !*e || !strcmp(e, "tma") ? 1 : !strcmp(e, "cp.async") ? 0 : 2;
  }
  if (bk < 0) return qkv_cu_fail("QKV_CUDA_WGMMA_BK", __FILE__, __LINE__, "not 64 or 128");
  if (tma > 1)
    return qkv_cu_fail("QKV_CUDA_WGMMA_LOAD", __FILE__, __LINE__, "not tma or cp.async");
  qkv_cu_attention_path = "wgmma";
  const bool f16 = P.dtype != QKV_BF16, d64 = P.dk == 64;
  if (bk == 64)
    return f16 ? (d64 ? run<QKV_MMA_F16, 64, 64>(P, tma) : run<QKV_MMA_F16, 128, 64>(P, tma))
               : (d64 ? run<QKV_MMA_BF16, 64, 64>(P, tma) : run<QKV_MMA_BF16, 128, 64>(P, tma));
  return f16 ? (d64 ? run<QKV_MMA_F16, 64, 128>(P, tma) : run<QKV_MMA_F16, 128, 128>(P, tma))
             : (d64 ? run<QKV_MMA_BF16, 64, 128>(P, tma) : run<QKV_MMA_BF16, 128, 128>(P, tma));
}
