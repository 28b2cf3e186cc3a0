/*
** attention_wgmma.cuh -- what the Hopper forward's kernels share
** (attention_wgmma.cu: the cp.async version and the choice between them;
** attention_wgmma_tma.cu: the producer warpgroup on TMA): a consumer
** warp's steps over a key tile (S = Q K^T on wgmma, the cut and the
** online softmax, O += P V) and its epilogue.
*/
#ifndef QKV_CUDA_ATTENTION_WGMMA_CUH
#define QKV_CUDA_ATTENTION_WGMMA_CUH

#include <math.h>

#include "attention.cuh"
#include "attention_mma_kernel.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

#define QKV_WG_WARPS 8
#define QKV_WG_NT (32 * QKV_WG_WARPS)
#define QKV_WG_BQ 128

/* qkv_attn_tile_cut in int, as attention_mma_kernel.cuh's loop writes it
   (there inline: through a function its 255 registers shift): whether
   the mask, the keys' end (nk) or the causal diagonal (off) cuts the
   tile of BK keys from j0 for the warp's rows from r0 */
template <int BK>
__device__ static inline bool wg_tile_cut (const qkv_attn_plan &P, int r0, int j0, int nk,
                                           int off) {
  return P.has_mask || j0 + BK > nk || (P.causal && j0 + BK - 1 > r0 + off);
}

/* whether causal leaves the warpgroup's 64 rows from g0 no key from j0
   on (the warpgroup skips the tile: wgmma is all four warps') */
__device__ static inline bool wg_tile_past (const qkv_attn_plan &P, int g0, int j0, int off) {
  return P.causal && j0 > g0 + 63 + off;
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

/* S = Q K^T for the warp's warpgroup, issued (not committed): A = Q
   from qa (k16 step kk: (kk / 4) column blocks and (kk % 4) 32 bytes on),
   B = K's tile at Ks */
template <int DT, int D, int BK>
__device__ static void wg_scores (float (&s)[BK / 8][4], uint32_t qa, const unsigned char *Ks) {
  QKV_UNROLL for (int n = 0; n < BK / 8; n++)
    QKV_UNROLL for (int e = 0; e < 4; e++) s[n][e] = 0;
  const uint32_t ka = qkv_smem_u32(Ks);
  qkv_wg_fence_operand<BK / 2>(&s[0][0]);
  qkv_wg_fence();
  QKV_UNROLL for (int kk = 0; kk < D / 16; kk++) {
    const uint32_t step = (kk & 3) * 32;
    qkv_wgmma_ss<DT, BK>(&s[0][0], qkv_wg_desc(qa + (kk >> 2) * QKV_WG_BQ * 128 + step, 16, 1024),
                         qkv_wg_desc(ka + (kk >> 2) * BK * 128 + step, 16, 1024));
  }
}

/* S (waited for) scaled into log2 units, the keys the cut bits Bw drop
   (where cut) to -inf, the online softmax (mma's at MT 1): the rows' max
   and sum updated, P packed to 16 bits as A fragments in pa, and alpha,
   what O is to be multiplied by (wg_rescale: after any P V in flight) */
template <int DT, int D, int BK>
__device__ static void wg_softmax (wg_rows<D> &st, float (&s)[BK / 8][4],
                                   uint32_t (&pa)[BK / 16][4], const uint32_t *Bw, bool cut,
                                   float scale2, float (&alpha)[2]) {
  enum { NS = BK / 8, DN = D / 8 };
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const float ninf = -INFINITY;
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
  float mref[2];
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
  QKV_UNROLL for (int kp = 0; kp < BK / 16; kp++) {
    pa[kp][0] = qkv_pack2<DT>(s[2 * kp][0], s[2 * kp][1]);
    pa[kp][1] = qkv_pack2<DT>(s[2 * kp][2], s[2 * kp][3]);
    pa[kp][2] = qkv_pack2<DT>(s[2 * kp + 1][0], s[2 * kp + 1][1]);
    pa[kp][3] = qkv_pack2<DT>(s[2 * kp + 1][2], s[2 * kp + 1][3]);
  }
}

/* O *= alpha (wg_softmax's), where a row's max moved */
template <int D>
__device__ static void wg_rescale (wg_rows<D> &st, const float (&alpha)[2]) {
  if (__any_sync(QKV_MMA_FULL, alpha[0] != 1.f || alpha[1] != 1.f)) {
    QKV_UNROLL for (int dn = 0; dn < D / 8; dn++)
      QKV_UNROLL for (int e = 0; e < 4; e++) st.o[dn][e] *= alpha[e / 2];
  }
}

/* O += P V issued (not committed): keys 16 kp .. + 15 are V's rows from
   kp 16, two 8-key groups (SBO), the dims' column blocks LBO apart */
template <int DT, int D, int BK>
__device__ static void wg_pv (wg_rows<D> &st, uint32_t (&pa)[BK / 16][4],
                              const unsigned char *Vs) {
  const uint32_t va = qkv_smem_u32(Vs);
  qkv_wg_fence_operand<D / 2>(&st.o[0][0]);
  qkv_wg_fence_operand<BK / 4>(&pa[0][0]);
  qkv_wg_fence();
  QKV_UNROLL for (int kp = 0; kp < BK / 16; kp++)
    qkv_wgmma_rs<DT, D>(&st.o[0][0], pa[kp], qkv_wg_desc(va + kp * 16 * 128, BK * 128, 1024));
}

/* the cut of the warp's rows from r0 by the tile of keys from j0 into Bw */
template <int BK>
__device__ static void wg_cut (uint32_t *Bw, const qkv_attn_plan &P, const unsigned char *mk,
                               int r0, int j0) {
  qkv_mma_cut_bits<16, BK>(Bw, P, mk, r0, j0);
  __syncwarp();
}

/*
** One key tile for a warp of a warpgroup, one step after another, its K
** and V in shared memory at Ks and Vs (K there now; V once vbar's phase
** of parity vph has completed, where vbar is not 0).  qa: the
** warpgroup's Q; r0 the warp's first query, j0 the tile's first key;
** cut: whether the mask, the keys' end or the causal diagonal cuts the
** tile for the warp, its bits into Bw.
*/
template <int DT, int D, int BK>
__device__ static void wg_tile (wg_rows<D> &st, const qkv_attn_plan &P, uint32_t *Bw,
                                const unsigned char *mk, int r0, int j0, bool cut, uint32_t qa,
                                const unsigned char *Ks, const unsigned char *Vs, float scale2,
                                uint32_t vbar, unsigned vph) {
  if (cut) wg_cut<BK>(Bw, P, mk, r0, j0);
  float s[BK / 8][4];
  wg_scores<DT, D, BK>(s, qa, Ks);
  qkv_wg_commit();
  qkv_wg_wait<0>();
  qkv_wg_fence_operand<BK / 2>(&s[0][0]);
  uint32_t pa[BK / 16][4];
  float alpha[2];
  wg_softmax<DT, D, BK>(st, s, pa, Bw, cut, scale2, alpha);
  wg_rescale(st, alpha);
  if (vbar) qkv_mbar_wait(vbar, vph);
  wg_pv<DT, D, BK>(st, pa, Vs);
  qkv_wg_commit();
  qkv_wg_wait<0>();
  qkv_wg_fence_operand<D / 2>(&st.o[0][0]);
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
/* the TMA kernel (attention_wgmma_tma.cu) for P at bk keys a tile, its
   two consumer warpgroups' schedule: 0 each tile's steps one after
   another, 1 taking turns at the tensor cores (ping-pong), 2 that and
   within a warpgroup the last tile's P V under this tile's softmax:
   QKV_OK, or a decline naming wgmma where its tensor maps cannot
   describe the views */
int qkv_cu_wgmma_tma(const qkv_attn_plan &P, int bk, int sched);

#endif
