/*
** attention_mma_bwd.cu -- the fused attention's backward in bfloat16 and
** float16 on the tensor cores, as FlashAttention-2 computes it (Dao, 2023,
** Algorithm 2): the scores are recomputed a tile at a time from Q, K and
** each query's log-sum-exp (lse, which attention_mma.cu's forward leaves),
** so no n_q x n_k matrix is ever held.  Head sizes 64 and 128 (dk = dv);
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "mma.cuh"

#define WARPS 4
#define NTH (32 * WARPS)              /* threads a block */
#define BK (16 * WARPS)               /* keys a block: 16 a warp */
#define LOG2E 1.4426950408889634

/* what the main kernel reads and writes beside the plan's operands */
typedef struct {
  const float *lse;                   /* (B, nq): the plan's, or made here */
  float *delta;                       /* dO . O, (B, nq) */
  float *dqacc;                       /* dQ / scale, (B, nq, D) */
} grads;

/* ---- the small kernels ---- */

/* delta[r] = dO[r] . O[r] over D features, a warp a row */
/* acc = A B^T for the warp: A's rows 16 w .. + 15 (A fragments by
   ldmatrix), B's rows 0 .. 8 NQ - 1 (B fragments: ldmatrix's tiles 0, 1
   are B's rows 16 np .. + 7 over features 16 kk and + 8, tiles 2, 3 the
   next 8 rows), both LD apart, over KS steps of 16 features; S^T = K Q^T
   and dP^T = V dO^T */
/* an A fragment (16 x 16) packed to DT from two m16n8 accumulator tiles
   side by side: what a product left becomes the next one's left operand */
template <int DT>
__device__ static inline void pack_a (uint32_t a[4], const float x0[4], const float x1[4]) {
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
__device__ static inline void packed_times_rows (float acc[D / 8][4], const float x[NQ][4],
                                                 const uint16_t *B, int lane) {
  const int tile = lane / 8, trow = lane % 8;
  for (int kp = 0; kp < NQ / 2; kp++) {
    uint32_t a[4];
    pack_a<DT>(a, x[2 * kp], x[2 * kp + 1]);
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

template <int DT, int NQ, int KS, int LD>
__device__ static inline void rows_times_rows (float acc[NQ][4], const uint16_t *A,
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

/* ---- the main kernel ---- */

template <int DT, int D, int BQ>
__global__ void __launch_bounds__(NTH) attention_mma_bwd_kernel (qkv_attn_plan P, grads G) {
  enum {
    LD = D + 8, LDS = BQ + 8, KS = D / 16, NQ = BQ / 8, DN = D / 8,
    QG = BQ / 16,                     /* dQ: warps a feature slice (16 queries each) */
    FW = D / (WARPS / QG), FN = FW / 8 /* dQ: features a warp */
  };
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *Gs = Qs + BQ * LD;
  uint16_t *Ss = Gs + BQ * LD;                                  /* dS^T, keys x queries */
  float *Ls = (float *)(Ss + BK * LDS), *Dl = Ls + BQ;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, c = 2 * (lane % 4), tile = lane / 8, trow = lane % 8;
  const float scale2 = (float)(P.scale * LOG2E), scale = (float)P.scale;
  const int64_t nkt = (P.nk + BK - 1) / BK, items = P.nbatch * nkt;
  /* dQ's share of this warp: queries qr .. qr + 15 of a tile, features f0 .. f0 + FW - 1 */
  const int qr = 16 * (w % QG), f0 = FW * (w / QG);

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    int64_t b = item % P.nbatch, j0 = item / P.nbatch * BK, boff[4];
    int bk = (int)(P.nk - j0 < BK ? P.nk - j0 : BK);
    qkv_attn_batch_offsets(&P, b, boff);
    const unsigned char *mk = P.has_mask ? (const unsigned char *)P.mask.base + boff[3] : NULL;

    __syncthreads();                           /* the last item's reads of K and V are done */
    load_rows16<D, LD, NTH>(Ks, (const uint16_t *)P.k.base + boff[1] + j0 * P.k.rs, P.k.rs, bk, BK);
    load_rows16<D, LD, NTH>(Vs, (const uint16_t *)P.v.base + boff[2] + j0 * P.v.rs, P.v.rs, bk, BK);

    float dk[DN][4], dv[DN][4];
    for (int dn = 0; dn < DN; dn++)
      for (int e = 0; e < 4; e++) dk[dn][e] = dv[dn][e] = 0;

    /* under causal, query i keeps no key of the tile while i + off < j0 */
    int64_t first = qkv_attn_query_begin(&P, j0) / BQ * BQ;
    for (int64_t i0 = first; i0 < P.nq; i0 += BQ) {
      int bq = (int)(P.nq - i0 < BQ ? P.nq - i0 : BQ);
      __syncthreads();                         /* every warp is done with Q, dO, dS^T, Ls, Dl */
      load_rows16<D, LD, NTH>(Qs, (const uint16_t *)P.q.base + boff[0] + i0 * P.q.rs, P.q.rs, bq, BQ);
      load_rows16<D, LD, NTH>(Gs, (const uint16_t *)P.go.base + (b * P.nq + i0) * D, D, bq, BQ);
      /* lse in log2 units; a query with no key kept (-inf), or past nq,
         gets +inf, so that every exp2 of its scores is 0 */
      for (int x = threadIdx.x; x < BQ; x += NTH) {
        float l = x < bq ? G.lse[b * P.nq + i0 + x] : -INFINITY;
        Ls[x] = l == -INFINITY ? INFINITY : l * (float)LOG2E;
        Dl[x] = x < bq ? G.delta[b * P.nq + i0 + x] : 0.f;
      }
      __syncthreads();

      /* S^T = K Q^T: the warp's 16 keys against the tile's queries */
      float s[NQ][4];
      rows_times_rows<DT, NQ, KS, LD>(s, Ks, Qs, w, lane);

      /* P^T; only a tile that the mask, the causal diagonal or the keys'
         end cuts looks at each element */
      bool cut = qkv_attn_tile_cut(&P, i0, j0, BK);
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

      /* dV += P^T dO */
      packed_times_rows<DT, NQ, D, LD>(dv, s, Gs, lane);

      /* dP^T = V dO^T, as S^T with V for K and dO for Q; then dS^T in its
         place (0 wherever P^T is) */
      float ds[NQ][4];
      rows_times_rows<DT, NQ, KS, LD>(ds, Vs, Gs, w, lane);
      for (int n = 0; n < NQ; n++)
        for (int e = 0; e < 4; e++) ds[n][e] = s[n][e] * (ds[n][e] - Dl[n * 8 + c + (e & 1)]);

      /* dK += dS^T Q, as dV with Q for dO; dS^T to shared memory for dQ */
      for (int kp = 0; kp < NQ / 2; kp++) {
        uint32_t da[4];
        pack_a<DT>(da, ds[2 * kp], ds[2 * kp + 1]);
        for (int h = 0; h < 2; h++) {
          *(uint32_t *)(Ss + (16 * w + g + 8 * h) * LDS + kp * 16 + c) = da[h];
          *(uint32_t *)(Ss + (16 * w + g + 8 * h) * LDS + kp * 16 + 8 + c) = da[2 + h];
        }
      }
      packed_times_rows<DT, NQ, D, LD>(dk, ds, Qs, lane);
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

/* ---- the launch ---- */

template <int DT, int D>
static int launch (const qkv_attn_plan &P, const grads &G) {
  enum { BQ = D == 64 ? 64 : 32 };
  const uint16_t *o = (const uint16_t *)P.o.base, *go = (const uint16_t *)P.go.base;
  int64_t rows = P.nbatch * P.nq, items = P.nbatch * ((P.nk + BK - 1) / BK);
  delta_kernel<DT, D><<<qkv_cu_blocks(rows * 32, 256), 256>>>(G.delta, o, go, rows);
  launchCheck("delta_kernel");
  cudaCheck(cudaMemsetAsync(G.dqacc, 0, (size_t)(rows * D) * sizeof(float), 0));
  size_t smem = (size_t)(2 * BK + 2 * BQ) * (D + 8) * 2 + (size_t)BK * (BQ + 8) * 2 + 2 * BQ * 4;
  void (*kernel)(qkv_attn_plan, grads) = attention_mma_bwd_kernel<DT, D, BQ>;
  if (smem > 48 * 1024)
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  unsigned grid = (unsigned)(items < INT_MAX ? items : INT_MAX);
  kernel<<<grid, NTH, smem>>>(P, G);
  launchCheck("attention_mma_bwd_kernel");
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

int qkv_cu_attention_mma_bwd (const qkv_attn_plan &P) {
  /* another path forced (cuda.cuh): never this one */
  if (qkv_cu_forced_other("mma")) return QKV_EDTYPE;
  int64_t d = P.dk;
  if (P.dv != d || (d != 64 && d != 128))
    return qkv_cu_decline("mma", "the tensor-core backward takes head sizes 64 and 128, dk == dv");
  /* every row 16-byte aligned: the loads are 16 bytes wide */
  const void *all[8] = {P.gq, P.gk, P.gv, P.q.base, P.k.base, P.v.base, P.o.base, P.go.base};
  for (int i = 0; i < 8; i++)
    if ((uintptr_t)all[i] % 16 != 0)
      return qkv_cu_decline("mma", "the tensor-core backward reads rows 16-byte aligned");
  int64_t rows = P.nbatch * P.nq;
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
      err = d == 64 ? launch<QKV_MMA_BF16, 64>(P, G) : launch<QKV_MMA_BF16, 128>(P, G);
    else
      err = d == 64 ? launch<QKV_MMA_F16, 64>(P, G) : launch<QKV_MMA_F16, 128>(P, G);
  }
  if (err == QKV_OK) qkv_cu_attention_path = "mma";
  qkv_cu_free(scratch);
  return err;
}
