/*
** attention_wgmma_tma.cu -- the Hopper forward's TMA kernel (sm_90a;
** attention_wgmma.cu chooses it and says what the simulation checks):
** a producer warpgroup copies K's and V's tiles by TMA (tma.cuh) into a
** ring of stages on mbarriers for two consumer warpgroups, whose steps
** are attention_wgmma.cuh's; and the tensor maps it copies through.
*/
#include <cuda.h>
#include <cudaTypedefs.h>

#include "attention_wgmma.cuh"

/*
** The TMA kernel: a producer warpgroup and two consumers (384 threads).
** One thread of the producer copies Q's tile once and K's and V's tiles
** by TMA into a ring of NST stages, each stage with three mbarriers: K
** and V landed (full, the producer's arrival and the bytes) and the stage
** free again (empty, an arrival from each of the 8 consumer warps once
** its products of the stage are done).  Round r of stage s waits for
** empty's phase r - 1; a consumer waits for K's and V's phase r, V's only
** before P V, so S = Q K^T starts as K lands.  The producer gives its
** registers up (setmaxnreg) for the consumers' accumulators.  SCHED,
** the consumers' schedule (QKV_CUDA_WGMMA_LOAD): 0 each tile's steps one
** after another (tma-serial), 1 the two taking turns at the tensor cores
** (tma-pingpong), 2 that and each one's last P V under its softmax (tma,
** the default); below.
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

/* a stage let go by this warp: each lane's products of it done (the
   barrier for the warp's lanes), then one arrival on its empty barrier */
__device__ static void wg_release (uint32_t empty) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) qkv_mbar_arrive(empty);
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

template <int DT, int D, int BK, int SCHED>
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
  const int w = threadIdx.x / 32, wg = w / 4;

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
  if constexpr (SCHED == 0) {
    for (int t = 0, j0 = 0; j0 < jend; t++, j0 += BK) {
      const int s = t % NST;
      const unsigned ph = t / NST & 1;
      unsigned char *Ks = KV + 2 * s * TKV;
      qkv_mbar_wait(fullk + 8 * s, ph);
      if (wg_tile_past(P, g0, j0, off)) {     /* the warpgroup's rows: none */
        qkv_mbar_wait(fullv + 8 * s, ph);
      } else {
        const bool cut = wg_tile_cut<BK>(P, r0, j0, nk, off);
        wg_tile<DT, D, BK>(st, P, Bw, mk, r0, j0, cut, qa, Ks, Ks + TKV, scale2, fullv + 8 * s,
                           ph);
      }
      wg_release(empty + 8 * s);
    }
  } else {
    /* FA3's ping-pong: the two warpgroups take turns at the tensor cores
       (named barriers 1 and 2, warpgroup 0 first), each turn issuing this
       tile's S = Q K^T and the last tile's P V, so that one warpgroup's
       softmax runs while the other's products do; a stage is freed once
       its P V is done, a turn later.  Every tile is a turn for both (a
       skipped one issues nothing), so the turns pair up.  SCHED 2 adds
       FA3's intra-warpgroup overlap: S is committed on its own, and the
       softmax waits for it alone (wait_group 1) and runs while P V does,
       writing P beside the last one, which P V still reads; O is rescaled
       once P V is done. */
    const int turn = 1 + (wg - 1), other = 2 - (wg - 1);
    uint32_t pa[BK / 16][4], pn[BK / 16][4];
    bool have_p = false;
    int ps = 0;
    unsigned pph = 0;
    if (wg == 2 && jend > 0) qkv_bar<false>(1, 256);
    for (int t = 0, j0 = 0; j0 < jend; t++, j0 += BK) {
      const int s = t % NST;
      const unsigned ph = t / NST & 1;
      const bool skip = wg_tile_past(P, g0, j0, off);
      const bool cut = wg_tile_cut<BK>(P, r0, j0, nk, off);
      if (!skip && cut) wg_cut<BK>(Bw, P, mk, r0, j0);
      qkv_mbar_wait(fullk + 8 * s, ph);
      if (have_p) qkv_mbar_wait(fullv + 8 * ps, pph);
      float sc[BK / 8][4], alpha[2];
      qkv_bar<true>(turn, 256);
      if (!skip) wg_scores<DT, D, BK>(sc, qa, KV + 2 * s * TKV);
      if constexpr (SCHED == 2) qkv_wg_commit();
      if (have_p) wg_pv<DT, D, BK>(st, pa, KV + 2 * ps * TKV + TKV);
      qkv_wg_commit();
      if (wg == 1 || j0 + BK < jend) qkv_bar<false>(other, 256);
      if (SCHED == 2 && !skip) {
        qkv_wg_wait<1>();                         /* S; P V may still run */
        qkv_wg_fence_operand<BK / 2>(&sc[0][0]);
        wg_softmax<DT, D, BK>(st, sc, pn, Bw, cut, scale2, alpha);
      }
      qkv_wg_wait<0>();
      qkv_wg_fence_operand<D / 2>(&st.o[0][0]);
      if (have_p) {
        qkv_wg_fence_operand<BK / 4>(&pa[0][0]);
        wg_release(empty + 8 * ps);
      }
      if (!skip) {
        if constexpr (SCHED == 1) {
          qkv_wg_fence_operand<BK / 2>(&sc[0][0]);
          wg_softmax<DT, D, BK>(st, sc, pn, Bw, cut, scale2, alpha);
        }
        wg_rescale(st, alpha);
        QKV_UNROLL for (int kp = 0; kp < BK / 16; kp++)
          QKV_UNROLL for (int e = 0; e < 4; e++) pa[kp][e] = pn[kp][e];
        have_p = true, ps = s, pph = ph;
      } else {
        qkv_mbar_wait(fullv + 8 * s, ph);
        wg_release(empty + 8 * s);
        have_p = false;
      }
    }
    if (have_p) {                                 /* the last tile's P V */
      qkv_mbar_wait(fullv + 8 * ps, pph);
      wg_pv<DT, D, BK>(st, pa, KV + 2 * ps * TKV + TKV);
      qkv_wg_commit();
      qkv_wg_wait<0>();
      qkv_wg_fence_operand<D / 2>(&st.o[0][0]);
      qkv_wg_fence_operand<BK / 4>(&pa[0][0]);
      wg_release(empty + 8 * ps);
    }
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

template <int DT, int D, int BK, int SCHED>
static int launch_tma (qkv_attn_plan P) {
  constexpr size_t smem = wg_tma_smem(D, BK);
  static_assert(smem <= 227 * 1024, "the TMA kernel's shared memory");
  wg_maps M;
  if (!wg_map(&M.q, P, P.q, P.nq, QKV_WG_BQ) || !wg_map(&M.k, P, P.k, P.nk, BK) ||
      !wg_map(&M.v, P, P.v, P.nk, BK))
    return qkv_cu_decline("wgmma", "the wgmma kernel's TMA cannot describe these views "
                                   "(over 3 batch dims, or the driver refuses the map)");
  void (*kernel)(qkv_attn_plan, wg_maps) = attention_wgmma_tma_kernel<DT, D, BK, SCHED>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, QKV_WG_BQ, &P, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, 3 * 128, smem>>>(P, M);
  launchCheck("attention_wgmma_tma_kernel");
  return QKV_OK;
}

template <int DT, int D, int BK>
static int launch_sched (const qkv_attn_plan &P, int sched) {
  return sched == 2 ? launch_tma<DT, D, BK, 2>(P)
         : sched == 1 ? launch_tma<DT, D, BK, 1>(P) : launch_tma<DT, D, BK, 0>(P);
}

int qkv_cu_wgmma_tma (const qkv_attn_plan &P, int bk, int sched) {
  const bool f16 = P.dtype != QKV_BF16, d64 = P.dk == 64;
  if (bk == 64)
    return f16 ? (d64 ? launch_sched<QKV_MMA_F16, 64, 64>(P, sched)
                      : launch_sched<QKV_MMA_F16, 128, 64>(P, sched))
               : (d64 ? launch_sched<QKV_MMA_BF16, 64, 64>(P, sched)
                      : launch_sched<QKV_MMA_BF16, 128, 64>(P, sched));
  return f16 ? (d64 ? launch_sched<QKV_MMA_F16, 64, 128>(P, sched)
                    : launch_sched<QKV_MMA_F16, 128, 128>(P, sched))
             : (d64 ? launch_sched<QKV_MMA_BF16, 64, 128>(P, sched)
                    : launch_sched<QKV_MMA_BF16, 128, 128>(P, sched));
}
