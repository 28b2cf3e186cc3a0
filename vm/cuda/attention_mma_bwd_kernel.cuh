/*
** attention_mma_bwd_kernel.cuh -- the fused attention's backward in
** bfloat16 and float16 on the tensor cores (its kernel, written once for
** attention_mma_bwd.cu, which launches it with the plugin, and for the
** attention variants' programs compiled into it at run time: mods_gen.cu),
** as FlashAttention-2 computes it (Dao, 2023, Algorithm 2): the scores
** are recomputed a tile at a time from Q, K and each query's log-sum-exp
** (lse, which attention_mma.cu's forward leaves), so no n_q x n_k matrix
** is ever held.  Head sizes 64 and 128 (dk = dv);
** the same gradients as attention_bwd.cu's (masks, causal aligned to the
** last key, a query with no key kept contributes nothing), with float32
** accumulators and P and dS rounded to the inputs' dtype before their
** products, as the forward rounds P.
**
** Sizes: q, o, go, dq (B, nq, D); k, v, dk, dv (B, nk, D), all contiguous
** (B the batch dims flattened); mask bool (B..., nq, nk) with any strides;
** lse float32 (B, nq).  Three launches and a pre-pass:
**   0. lse, when not given: the forward (attention_mma.cu) into scratch;
**   1. delta_kernel: Dl_i = dO_i . O_i in float32, and dQ's float32
**      scratch zeroed;
**   2. the main kernel: a block of 4 warps takes BK = 64 keys of one batch
**      item (16 a warp; the grid loops over items, the first key tiles
**      first: under causal they see the most queries).  K's and V's tiles
**      go to shared memory once; then for each tile of BQ queries (64 at
**      D = 64, 32 at D = 128, so that dK and dV fit in registers beside the
**      tile's scores), from the first that keeps any of its keys:
**        S^T = K Q^T (a warp's 16 keys against the tile's queries),
**        P^T = exp2(S^T scale log2 e - lse log2 e), 0 where excluded,
**        dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T (dP^T - Dl),
**        dK += dS^T Q   (the accumulators' fragments are the A fragments
**                        of P^T and dS^T once packed, as in the forward),
**        dQ += dS K     (which sums over every warp's keys: dS^T goes to
**                        shared memory, each warp takes 16 queries by a
**                        64-feature slice, and adds its part to dQ's
**                        float32 scratch with float2 atomics);
**      dK and dV (times scale for dK) are the block's own rows: stored
**      once, in the dtype;
**   3. dq_kernel: dQ = scale * scratch, in the dtype.
** An operand is read by ldmatrix from shared memory, transposed where
** the product wants its columns: Q and dO as B fragments of S^T and dP^T
** (plain) and of dK and dV (.trans), K as A of S^T (plain) and B of dQ
** (.trans), V as A of dP^T, dS^T as A of dQ (.trans).
**
** Shared memory in 16-bit elements: K and V BK x LD, Q and dO BQ x LD
** (LD = D + 8: ldmatrix's eight rows in eight bank groups), dS^T BK x
** (BQ + 8), and lse and Dl BQ floats each: 45.5 KiB at D = 64, 56.3 KiB
** at D = 128.  Scratch: dQ in float32 (B nq D) and Dl (B nq), and, without
** lse, the forward's out and lse: O(n d), as the forward.
*/
#ifndef QKV_CUDA_ATTENTION_MMA_BWD_KERNEL_CUH
#define QKV_CUDA_ATTENTION_MMA_BWD_KERNEL_CUH

#include "attention_mma_kernel.cuh"

#define QKV_MMA_BWD_BK (16 * QKV_MMA_WARPS)  /* keys a block: 16 a warp */
#define QKV_MMA_LOG2E 1.4426950408889634

/* queries a tile: 64 at D = 64, 32 at D = 128 (dK and dV in registers
   beside the tile's scores) */
__host__ __device__ constexpr int qkv_mma_bwd_bq (int D) { return D == 64 ? 64 : 32; }

/* the main kernel's dynamic shared memory, bytes */
__host__ __device__ constexpr size_t qkv_mma_bwd_smem (int D) {
  return (size_t)(2 * QKV_MMA_BWD_BK + 2 * qkv_mma_bwd_bq(D)) * (D + 8) * 2 +
         (size_t)QKV_MMA_BWD_BK * (qkv_mma_bwd_bq(D) + 8) * 2 + 2 * qkv_mma_bwd_bq(D) * 4;
}

/* what the main kernel reads and writes beside the plan's operands */
struct qkv_mma_grads {
  const float *lse;                   /* (B, nq): the plan's, or made here */
  float *delta;                       /* dO . O, (B, nq) */
  float *dqacc;                       /* dQ / scale, (B, nq, D) */
};

/* rows [0, n) of a row-major matrix of 16-bit elements (src, rows ld
   elements apart, every row 16-byte aligned) to a rows x D tile at dst,
   rows LD apart, zeros past n: 16 bytes a load, by a block of NT threads */
template <int D, int LD, int NT>
__device__ static inline void qkv_mma_rows16 (uint16_t *dst, const uint16_t *src, int64_t ld, int n,
                                           int rows) {
  for (int x = threadIdx.x; x < rows * (D / 8); x += NT) {
    int i = x / (D / 8), j = x % (D / 8) * 8;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (i < n) u = *(const uint4 *)(src + i * ld + j);
    *(uint4 *)(dst + i * LD + j) = u;
  }
}

/* an A fragment (16 x 16) packed to DT from two m16n8 accumulator tiles
   side by side: what a product left becomes the next one's left operand */
template <int DT>
__device__ static inline void qkv_mma_pack_a (uint32_t a[4], const float x0[4], const float x1[4]) {
  a[0] = qkv_pack2<DT>(x0[0], x0[1]);
  a[1] = qkv_pack2<DT>(x0[2], x0[3]);
  a[2] = qkv_pack2<DT>(x1[0], x1[1]);
  a[3] = qkv_pack2<DT>(x1[2], x1[3]);
}

/* acc += x B for the warp: x its 16 rows by 8 NQ columns as a product's
   accumulators (packed to DT as A fragments), B's rows 0 .. 8 NQ - 1 of D
   features LD apart, read transposed by ldmatrix.trans (tiles 0, 1: rows
   16 kp .. + 7 and + 8 .. + 15 of features 16 dp .. + 7, tiles 2, 3 the
   next 8 features); dV += P^T dO and dK += dS^T Q */
template <int DT, int NQ, int D, int LD>
__device__ static inline void qkv_mma_packed_times_rows (float acc[D / 8][4], const float x[NQ][4],
                                                 const uint16_t *B, int lane) {
  const int tile = lane / 8, trow = lane % 8;
  for (int kp = 0; kp < NQ / 2; kp++) {
    uint32_t a[4];
    qkv_mma_pack_a<DT>(a, x[2 * kp], x[2 * kp + 1]);
    for (int dp = 0; dp < D / 16; dp++) {
      uint32_t bb[4];
      qkv_ldmatrix_x4_trans(bb, B + (kp * 16 + (tile & 1) * 8 + trow) * LD + dp * 16 +
                                (tile >> 1) * 8);
      const uint32_t b0[2] = {bb[0], bb[1]}, b1[2] = {bb[2], bb[3]};
      qkv_mma<DT>(acc[2 * dp], a, b0);
      qkv_mma<DT>(acc[2 * dp + 1], a, b1);
    }
  }
}

/* acc = A B^T for the warp: A's rows 16 w .. + 15 (A fragments by
   ldmatrix), B's rows 0 .. 8 NQ - 1 (B fragments: ldmatrix's tiles 0, 1
   are B's rows 16 np .. + 7 over features 16 kk and + 8, tiles 2, 3 the
   next 8 rows), both LD apart, over KS steps of 16 features; S^T = K Q^T
   and dP^T = V dO^T */
template <int DT, int NQ, int KS, int LD>
__device__ static inline void qkv_mma_rows_times_rows (float acc[NQ][4], const uint16_t *A,
                                               const uint16_t *B, int w, int lane) {
  const int tile = lane / 8, trow = lane % 8;
  for (int n = 0; n < NQ; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
  for (int kk = 0; kk < KS; kk++) {
    uint32_t a[4];
    qkv_ldmatrix_x4(a, A + (16 * w + lane % 16) * LD + kk * 16 + lane / 16 * 8);
    for (int np = 0; np < NQ / 2; np++) {
      uint32_t bb[4];
      qkv_ldmatrix_x4(bb, B + (np * 16 + (tile >> 1) * 8 + trow) * LD + kk * 16 + (tile & 1) * 8);
      const uint32_t b0[2] = {bb[0], bb[1]}, b1[2] = {bb[2], bb[3]};
      qkv_mma<DT>(acc[2 * np], a, b0);
      qkv_mma<DT>(acc[2 * np + 1], a, b1);
    }
  }
}

/* this thread's element (n, x) of a warp's S^T: the query's column in the
   tile, the key's row in the block (rows g, g + 8 of the warp's 16) */
__device__ static inline int qkv_mma_bwd_qi (int n, int x) {
  return n * 8 + 2 * (threadIdx.x % 4) + (x & 1);
}
__device__ static inline int qkv_mma_bwd_kj (int x) {
  return 16 * (threadIdx.x / 32) + threadIdx.x % 32 / 4 + 8 * (x / 2);
}

/* E's program on pair e at query i, key j, score x: the outputs in want */
template <class E>
__device__ static __forceinline__ void qkv_mma_run (qkv_attn_mods *M, double *val, int want,
                                                    qkv_mod_pair &e, int64_t i, int64_t j,
                                                    double x) {
  e.i = i;
  e.j = j;
  e.score = x;
  E::run(M, val, want, false, e);
  E::run(M, val, want, true, e);
}

/* whether E's program has a captured tensor that wants its gradient */
template <class E>
__device__ static inline bool qkv_mods_has_dload (const qkv_attn_mods *M) {
  for (int o = QKV_MOD_OUT_DLOAD; o < QKV_MOD_NOUT; o++)
    if (E::has(M, o)) return true;
  return false;
}

/*
** P^T of a warp's 16 keys from j0 (rows g, g + 8) by a tile's 8 NQ
** queries from i0 (this thread's columns n 8 + c and + 1), with E's
** program: s (K Q^T) becomes P^T = exp(new score - lse), 0 for a key the
** plan's tests (cut: the tile needs them), the queries' or the keys' end
** or the mask drops.  xs keeps for qkv_mma_bwd_grads q k^T scale where
** a captured tensor wants its gradient (the program runs again there),
** else the derivative by the score, taken here while dS's registers are
** not yet live.  Ls: the tile's lse in log2 units.
*/
template <class E, int NQ>
__device__ static __forceinline__ void qkv_mma_bwd_scores (float (&s)[NQ][4], float (&xs)[NQ][4],
                                                           const qkv_attn_plan &P,
                                                           qkv_attn_mods *M, int want, int64_t b,
                                                           int64_t i0, int64_t j0, bool cut,
                                                           const unsigned char *mk,
                                                           const float *Ls) {
  const float scale = (float)P.scale, log2e = (float)QKV_MMA_LOG2E;
  const bool dsc = !E::DSCORE_ONE && E::has(M, QKV_MOD_OUT_DSCORE) && !qkv_mods_has_dload<E>(M);
  const int all = want | (dsc ? QKV_MOD_WANT_GRAD : 0);
  double val[E::NV];
  qkv_mod_pair e = {b / M->heads, b % M->heads, 0, 0, 0};
#pragma unroll
  for (int n = 0; n < NQ; n++)
#pragma unroll
    for (int x = 0; x < 4; x++) {
      const int qi = qkv_mma_bwd_qi(n, x);
      const int64_t i = i0 + qi, j = j0 + qkv_mma_bwd_kj(x);
      const bool keep = j < P.nk && i < P.nq && (!cut || qkv_attn_keeps(&P, mk, i, j));
      float y = s[n][x] * scale;
      xs[n][x] = y;
      if (keep && all) {
        qkv_mma_run<E>(M, val, all, e, i, j, y);
        if (dsc) xs[n][x] = (float)E::get(M, val, QKV_MOD_OUT_DSCORE);
        y = qkv_mods_applied<E, float>(M, val, want, y);
      }
      s[n][x] = keep ? exp2f(y * log2e - Ls[qi]) : 0.f;
    }
}

/*
** ds, the gradient by the new scores of the elements qkv_mma_bwd_scores
** left, becomes the gradient by the scores: times the derivative by the
** score where the program has one (0 stays 0), after adding ds times
** each derivative by a loaded value into the captured tensors' float64
** sums where it has those (qkv_mods_grads' step, on the tile)
*/
template <class E, int NQ>
__device__ static __forceinline__ void qkv_mma_bwd_grads (float (&ds)[NQ][4],
                                                          const float (&xs)[NQ][4],
                                                          qkv_attn_mods *M, int64_t b, int64_t i0,
                                                          int64_t j0) {
  if (!qkv_mods_has_dload<E>(M)) {               /* xs is the derivative */
    if (!E::DSCORE_ONE && E::has(M, QKV_MOD_OUT_DSCORE))
#pragma unroll
      for (int n = 0; n < NQ; n++)
#pragma unroll
        for (int x = 0; x < 4; x++)
          if (ds[n][x] != 0) ds[n][x] *= xs[n][x];
    return;
  }
  double val[E::NV];
  qkv_mod_pair e = {b / M->heads, b % M->heads, 0, 0, 0};
#pragma unroll
  for (int n = 0; n < NQ; n++)
#pragma unroll
    for (int x = 0; x < 4; x++) {
      const float d = ds[n][x];
      if (d == 0) continue;                    /* a dropped key, or no gradient */
      qkv_mma_run<E>(M, val, QKV_MOD_WANT_GRAD, e, i0 + qkv_mma_bwd_qi(n, x),
                     j0 + qkv_mma_bwd_kj(x), xs[n][x]);
      E::grads(M, val, (double)d);
      if (E::has(M, QKV_MOD_OUT_DSCORE))
        ds[n][x] = (float)((double)d * E::get(M, val, QKV_MOD_OUT_DSCORE));
    }
}

template <int DT, int D, int BQ, class E>
__device__ static __forceinline__ void qkv_attn_mma_bwd (const qkv_attn_plan &P, qkv_attn_mods *M,
                                                         const qkv_mma_grads &G,
                                                         unsigned char *smem) {
  enum {
    BK = QKV_MMA_BWD_BK, NTH = QKV_MMA_NT, LD = D + 8, LDS = BQ + 8, KS = D / 16, NQ = BQ / 8,
    DN = D / 8,
    QG = BQ / 16,                     /* dQ: warps a feature slice (16 queries each) */
    FW = D / (QKV_MMA_WARPS / QG), FN = FW / 8 /* dQ: features a warp */
  };
  (void)M;
  uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *Gs = Qs + BQ * LD;
  uint16_t *Ss = Gs + BQ * LD;                                  /* dS^T, keys x queries */
  float *Ls = (float *)(Ss + BK * LDS), *Dl = Ls + BQ;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, c = 2 * (lane % 4), tile = lane / 8, trow = lane % 8;
  const float scale2 = (float)(P.scale * QKV_MMA_LOG2E), scale = (float)P.scale;
  const int64_t nkt = (P.nk + BK - 1) / BK, items = P.nbatch * nkt;
  /* dQ's share of this warp: queries qr .. qr + 15 of a tile, features f0 .. f0 + FW - 1 */
  const int qr = 16 * (w % QG), f0 = FW * (w / QG);

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    int64_t b = item % P.nbatch, j0 = item / P.nbatch * BK, boff[4];
    int bk = (int)(P.nk - j0 < BK ? P.nk - j0 : BK);
    qkv_attn_batch_offsets(&P, b, boff);
    const unsigned char *mk = P.has_mask ? (const unsigned char *)P.mask.base + boff[3] : NULL;

    __syncthreads();                           /* the last item's reads of K and V are done */
    qkv_mma_rows16<D, LD, NTH>(Ks, (const uint16_t *)P.k.base + boff[1] + j0 * P.k.rs, P.k.rs,
                               bk, BK);
    qkv_mma_rows16<D, LD, NTH>(Vs, (const uint16_t *)P.v.base + boff[2] + j0 * P.v.rs, P.v.rs,
                               bk, BK);

    float dk[DN][4], dv[DN][4];
    for (int dn = 0; dn < DN; dn++)
      for (int e = 0; e < 4; e++) dk[dn][e] = dv[dn][e] = 0;

    /* under causal, query i keeps no key of the tile while i + off < j0;
       under a block mask, the tiles from the first to the last query
       that a block not empty holds */
    int64_t first = qkv_attn_query_begin(&P, j0) / BQ * BQ, stop = P.nq;
    if constexpr (E::MODS)
      if (M->kinds) {
        int lo, hi;
        qkv_mma_nonempty<E>(M, b, true, (int)j0, bk, (int)P.nq, &lo, &hi);
        first = first > lo / BQ * BQ ? first : lo / BQ * BQ;
        stop = hi;
      }
    for (int64_t i0 = first; i0 < stop; i0 += BQ) {
      int bq = (int)(P.nq - i0 < BQ ? P.nq - i0 : BQ);
      int want = 0;                            /* what the program computes in this tile */
      if constexpr (E::MODS) {
        /* the same in every thread: the skip is the whole block's */
        const int kind = qkv_mods_tile_kind<E>(M, b, i0, bq, j0, bk);
        if (kind == QKV_BLOCK_EMPTY) continue;
        want = qkv_mods_want<E>(M, kind);
      }
      __syncthreads();                         /* every warp is done with Q, dO, dS^T, Ls, Dl */
      qkv_mma_rows16<D, LD, NTH>(Qs, (const uint16_t *)P.q.base + boff[0] + i0 * P.q.rs, P.q.rs,
                                 bq, BQ);
      qkv_mma_rows16<D, LD, NTH>(Gs, (const uint16_t *)P.go.base + (b * P.nq + i0) * D, D, bq, BQ);
      /* lse in log2 units; a query with no key kept (-inf), or past nq,
         gets +inf, so that every exp2 of its scores is 0 */
      for (int x = threadIdx.x; x < BQ; x += NTH) {
        float l = x < bq ? G.lse[b * P.nq + i0 + x] : -INFINITY;
        Ls[x] = l == -INFINITY ? INFINITY : l * (float)QKV_MMA_LOG2E;
        Dl[x] = x < bq ? G.delta[b * P.nq + i0 + x] : 0.f;
      }
      __syncthreads();

      /* S^T = K Q^T: the warp's 16 keys against the tile's queries */
      float s[NQ][4];
      qkv_mma_rows_times_rows<DT, NQ, KS, LD>(s, Ks, Qs, w, lane);

      /* P^T; only a tile that the mask, the causal diagonal or the keys'
         end cuts looks at each element */
      bool cut = qkv_attn_tile_cut(&P, i0, j0, BK);
      float xs[E::MODS ? NQ : 1][4];           /* the program's scores, for dS */
      (void)xs;
      if constexpr (E::MODS) {
        qkv_mma_bwd_scores<E, NQ>(s, xs, P, M, want, b, i0, j0, cut, mk, Ls);
      } else {
#pragma unroll                                 /* else s goes to local memory */
        for (int n = 0; n < NQ; n++)
          for (int e = 0; e < 4; e++) {
            int qi = n * 8 + c + (e & 1);
            float p = exp2f(s[n][e] * scale2 - Ls[qi]);
            if (cut) {
              int64_t i = i0 + qi, j = j0 + 16 * w + g + 8 * (e / 2);
              bool keep = j < P.nk && i < P.nq && qkv_attn_keeps(&P, mk, i, j);
              if (!keep) p = 0;
            }
            s[n][e] = p;
          }
      }

      /* dV += P^T dO */
      qkv_mma_packed_times_rows<DT, NQ, D, LD>(dv, s, Gs, lane);

      /* dP^T = V dO^T, as S^T with V for K and dO for Q; then dS^T in its
         place (0 wherever P^T is) */
      float ds[NQ][4];
      qkv_mma_rows_times_rows<DT, NQ, KS, LD>(ds, Vs, Gs, w, lane);
      for (int n = 0; n < NQ; n++)
        for (int e = 0; e < 4; e++) ds[n][e] = s[n][e] * (ds[n][e] - Dl[n * 8 + c + (e & 1)]);
      if constexpr (E::MODS) qkv_mma_bwd_grads<E, NQ>(ds, xs, M, b, i0, j0);

      /* dK += dS^T Q, as dV with Q for dO; dS^T to shared memory for dQ */
      for (int kp = 0; kp < NQ / 2; kp++) {
        uint32_t da[4];
        qkv_mma_pack_a<DT>(da, ds[2 * kp], ds[2 * kp + 1]);
        for (int h = 0; h < 2; h++) {
          *(uint32_t *)(Ss + (16 * w + g + 8 * h) * LDS + kp * 16 + c) = da[h];
          *(uint32_t *)(Ss + (16 * w + g + 8 * h) * LDS + kp * 16 + 8 + c) = da[2 + h];
        }
      }
      qkv_mma_packed_times_rows<DT, NQ, D, LD>(dk, ds, Qs, lane);
      __syncthreads();                         /* every warp's dS^T is in */

      /* dQ += dS K over the block's keys: A is dS (queries x keys), read
         from dS^T by ldmatrix.trans (tiles 0, 1: keys 16 kb .. + 7 of
         queries qr .. + 7 and + 8 .. + 15; tiles 2, 3 the next 8 keys);
         B is K, read as dO was for dV */
      float dq[FN][4];
      for (int n = 0; n < FN; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0;
      for (int kb = 0; kb < BK / 16; kb++) {
        uint32_t sa[4];
        qkv_ldmatrix_x4_trans(sa, Ss + (kb * 16 + (tile >> 1) * 8 + trow) * LDS + qr + (tile & 1) * 8);
        for (int fp = 0; fp < FW / 16; fp++) {
          uint32_t kb4[4];
          qkv_ldmatrix_x4_trans(kb4, Ks + (kb * 16 + (tile & 1) * 8 + trow) * LD + f0 + fp * 16 +
                                     (tile >> 1) * 8);
          const uint32_t b0[2] = {kb4[0], kb4[1]}, b1[2] = {kb4[2], kb4[3]};
          qkv_mma<DT>(dq[2 * fp], sa, b0);
          qkv_mma<DT>(dq[2 * fp + 1], sa, b1);
        }
      }
      for (int h = 0; h < 2; h++) {
        int64_t i = i0 + qr + g + 8 * h;
        if (i >= P.nq) continue;
        float *row = G.dqacc + (b * P.nq + i) * D + f0 + c;
        for (int n = 0; n < FN; n++)
          atomicAdd((float2 *)(row + n * 8), make_float2(dq[n][2 * h], dq[n][2 * h + 1]));
      }
    }

    /* the block's rows of dK (times scale) and dV */
    uint16_t *dkp = (uint16_t *)P.gk + (b * P.nk + j0) * D;
    uint16_t *dvp = (uint16_t *)P.gv + (b * P.nk + j0) * D;
    for (int h = 0; h < 2; h++) {
      int r = 16 * w + g + 8 * h;
      if (r >= bk) continue;
      for (int dn = 0; dn < DN; dn++) {
        *(uint32_t *)(dkp + r * D + dn * 8 + c) =
            qkv_pack2<DT>(dk[dn][2 * h] * scale, dk[dn][2 * h + 1] * scale);
        *(uint32_t *)(dvp + r * D + dn * 8 + c) = qkv_pack2<DT>(dv[dn][2 * h], dv[dn][2 * h + 1]);
      }
    }
  }
}

#endif
