/*
** attention_mma.cu -- fused attention in bfloat16 and float16 on the
** tensor cores, as FlashAttention-2 tiles it (Dao, 2023), for head sizes 64
** and 128 (dk = dv); the same function as attention.cu (masks, causal
** aligned to the last key, a query with no key left gives zeros, scores
** the product then a multiply by scale, in log2 units for exp2), with
** float32 accumulators and the probabilities rounded to the input's dtype
** before P V.
**
** A block of 4 warps takes BQ = 64 queries of one batch item (16 a warp;
** the grid loops over items, the last query tiles first) and walks the key
** tiles of BK = 64 up to the tile's causal end:
**   1. Q's tile goes to shared memory once per item, and from there into
**      each warp's A fragments (ldmatrix), which stay in registers;
**   2. per key tile: K's and V's tiles to shared memory (16 bytes a thread
**      a load when the rows allow it); S = Q K^T by mma.sync m16n8k16, K's
**      rows read as B fragments by ldmatrix; an excluded key (mask false,
**      causal, past nk) gets -inf;
**   3. the online softmax in registers: a thread holds two rows' scores
**      (rows g and g + 8 of its warp's 16, g = lane / 4); the four threads
**      of a row share its max by shuffles; O and l are rescaled by
**      exp(m_old - m_new);
**   4. O += P V: the scores' accumulator fragments are the A fragments of
**      P once packed to 16 bits (no shared memory), V's rows read as B
**      fragments by ldmatrix.trans.
** At the end out = O / l, zeros where l == 0, and lse (float32, when the
** job asks for it) = (m + log2 l) ln 2, -inf where l == 0.
**
** Shared memory: Q BQ x LD, K and V BK x LD in 16-bit elements, LD = D + 8
** (rows 16 bytes apart in banks, so ldmatrix's eight rows hit eight
** different bank groups): 27 KiB at D = 64, 51 KiB at D = 128.
** Mirrors attention.cu, the float32 reference of the same tiling on CUDA
** cores; the host simulation runs this file with mma.cuh's instructions as
** warp collectives.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "mma.cuh"

#define WARPS 4
#define NTH (32 * WARPS)              /* threads a block */
#define BQ (16 * WARPS)               /* queries a block: 16 a warp */
#define BK 64                         /* keys a tile */
#define FULL 0xffffffffu

/* rows [r0, r0 + n) of op to a rows x D tile at dst, LD apart, zeros past
   n; 16 bytes a load when vec (the rows' elements dense and aligned) */
template <int D>
__device__ static void load_rows (uint16_t *dst, const operand &op, int64_t boff, int64_t r0,
                                  int n, int rows, int vec) {
  enum { LD = D + 8, V = D / 8 };
  const uint16_t *src = (const uint16_t *)op.base + boff;
  if (vec) {
    for (int x = threadIdx.x; x < rows * V; x += NTH) {
      int i = x / V, j = x % V * 8;
      uint4 u = make_uint4(0, 0, 0, 0);
      if (i < n) u = *(const uint4 *)(src + (r0 + i) * op.rs + j);
      *(uint4 *)(dst + i * LD + j) = u;
    }
  } else {
    for (int x = threadIdx.x; x < rows * D; x += NTH) {
      int i = x / D, j = x % D;
      dst[i * LD + j] = i < n ? src[(r0 + i) * op.rs + j * op.cs] : (uint16_t)0;
    }
  }
}

/* K's and V's rows [j0, j0 + n) into one stage by cp.async, one group;
   zeros past n (rows dense and aligned: vec) */
template <int D>
__device__ static void issue_kv (uint16_t *ks, uint16_t *vs, const job &J, const int64_t boff[4],
                                 int64_t j0, int n) {
  enum { LD = D + 8, V = D / 8 };
  const uint16_t *k = (const uint16_t *)J.k.base + boff[1];
  const uint16_t *v = (const uint16_t *)J.v.base + boff[2];
  for (int x = threadIdx.x; x < BK * V; x += NTH) {
    int i = x / V, j = x % V * 8;
    if (i < n) {
      qkv_cp_async16(ks + i * LD + j, k + (j0 + i) * J.k.rs + j);
      qkv_cp_async16(vs + i * LD + j, v + (j0 + i) * J.v.rs + j);
    } else {
      *(uint4 *)(ks + i * LD + j) = make_uint4(0, 0, 0, 0);
      *(uint4 *)(vs + i * LD + j) = make_uint4(0, 0, 0, 0);
    }
  }
  qkv_cp_commit();
}

/* PIPE: K and V in two stages, the next tile's copies (cp.async) in
   flight while this one is computed on; else one stage, loaded and then
   computed on */
template <int DT, int D, bool PIPE>
__global__ void __launch_bounds__(NTH) attention_mma_kernel (job J, int vec) {
  enum { LD = D + 8, KS = D / 16, NS = BK / 8, DN = D / 8, STAGE = 2 * BK * LD };
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t *Qs = (uint16_t *)smem, *KV = Qs + BQ * LD;    /* stage s: K at KV + s STAGE, V after */
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, c = 2 * (lane % 4), tile = lane / 8, trow = lane % 8;
  /* scores in log2 units: exp(x scale - m) = exp2(x scale log2 e - m') */
  const float scale2 = (float)(J.scale * 1.4426950408889634), ninf = -INFINITY;

  for (int64_t item = blockIdx.x; item < J.items; item += gridDim.x) {
    int64_t b, i0, jend, boff[4];
    int bq;
    attention_tile(J, item, BQ, &b, &i0, &bq, &jend);
    batch_offsets(J, b, boff);
    const unsigned char *mk = (const unsigned char *)J.mask.base + boff[3];
    const int64_t row[2] = {i0 + 16 * w + g, i0 + 16 * w + g + 8};   /* this thread's queries */

    __syncthreads();                           /* the last item's reads are done */
    if (PIPE && jend > 0) issue_kv<D>(KV, KV + BK * LD, J, boff, 0, (int)(J.nk < BK ? J.nk : BK));
    load_rows<D>(Qs, J.q, boff[0], i0, bq, BQ, vec);
    __syncthreads();
    uint32_t qf[KS][4];
    for (int kk = 0; kk < KS; kk++)
      qkv_ldmatrix_x4(qf[kk], Qs + (16 * w + lane % 16) * LD + kk * 16 + lane / 16 * 8);

    float o[DN][4], m[2] = {ninf, ninf}, l[2] = {0, 0};
    for (int dn = 0; dn < DN; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0;

    for (int64_t j0 = 0, it = 0; j0 < jend; j0 += BK, it++) {
      uint16_t *Ks = KV + (PIPE ? (it & 1) * STAGE : 0), *Vs = Ks + BK * LD;
      if (PIPE) {
        /* the next tile's copies into the other stage (which every warp
           finished reading before the barrier that ended the last pass),
           then wait for this tile's */
        if (j0 + BK < jend) {
          uint16_t *nk = KV + ((it + 1) & 1) * STAGE;
          issue_kv<D>(nk, nk + BK * LD, J, boff, j0 + BK,
                      (int)(J.nk - j0 - BK < BK ? J.nk - j0 - BK : BK));
          qkv_cp_wait<1>();
        } else
          qkv_cp_wait<0>();
      } else {
        int bk = (int)(J.nk - j0 < BK ? J.nk - j0 : BK);
        __syncthreads();                       /* every warp is done with K and V */
        load_rows<D>(Ks, J.k, boff[1], j0, bk, BK, vec);
        load_rows<D>(Vs, J.v, boff[2], j0, bk, BK, vec);
      }
      __syncthreads();

      /* 2. S = Q K^T: ldmatrix's tiles 0, 1 are keys 16 np .. + 7 (dims
         kk 16 and + 8), tiles 2, 3 the next eight keys */
      float s[NS][4];
      for (int n = 0; n < NS; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
      for (int kk = 0; kk < KS; kk++)
        for (int np = 0; np < NS / 2; np++) {
          uint32_t kb[4];
          qkv_ldmatrix_x4(kb, Ks + (np * 16 + (tile >> 1) * 8 + trow) * LD + kk * 16 + (tile & 1) * 8);
          const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
          qkv_mma<DT>(s[2 * np], qf[kk], b0);
          qkv_mma<DT>(s[2 * np + 1], qf[kk], b1);
        }

      /* scaled (by scale log2 e: the exponentials are exp2), excluded
         keys to -inf, and each row's max; only a tile that the mask,
         the causal diagonal or the keys' end cuts looks at each key
         (rows past nq are Q's zero rows, never stored) */
      float mx[2] = {ninf, ninf};
      bool cut = J.has_mask || j0 + BK > J.nk || (J.causal && j0 + BK - 1 > i0 + J.off);
      for (int n = 0; n < NS; n++)
        for (int e = 0; e < 4; e++) {
          s[n][e] *= scale2;
          if (cut) {
            int64_t i = row[e / 2], j = j0 + n * 8 + c + (e & 1);
            bool keep = j < J.nk && (!J.causal || j <= i + J.off) &&
                        (!J.has_mask || i >= J.nq || mk[i * J.mask.rs + j * J.mask.cs]);
            if (!keep) s[n][e] = ninf;
          }
          mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
        }

      /* 3. the online softmax; a row with nothing kept yet keeps m = -inf
         and takes its exponentials against 0 (all zeros) */
      float mref[2], alpha[2];
      for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2));
        float mn = fmaxf(m[h], mx[h]);
        mref[h] = mn == ninf ? 0.f : mn;
        alpha[h] = exp2f(m[h] - mref[h]);
        m[h] = mn;
        l[h] *= alpha[h];
      }
      for (int n = 0; n < NS; n++)
        for (int e = 0; e < 4; e++) {
          s[n][e] = exp2f(s[n][e] - mref[e / 2]);
          l[e / 2] += s[n][e];
        }
      for (int dn = 0; dn < DN; dn++)
        for (int e = 0; e < 4; e++) o[dn][e] *= alpha[e / 2];

      /* 4. O += P V: P's A fragment for keys 16 kp .. + 15 is S's
         accumulators of key groups 2 kp and 2 kp + 1; ldmatrix.trans's
         tiles 0, 1 are keys 16 kp .. + 7 and + 8 .. + 15 of dims 16 dp .. + 7,
         tiles 2, 3 the same keys of the next eight dims */
      for (int kp = 0; kp < NS / 2; kp++) {
        const uint32_t pa[4] = {qkv_pack2<DT>(s[2 * kp][0], s[2 * kp][1]),
                                qkv_pack2<DT>(s[2 * kp][2], s[2 * kp][3]),
                                qkv_pack2<DT>(s[2 * kp + 1][0], s[2 * kp + 1][1]),
                                qkv_pack2<DT>(s[2 * kp + 1][2], s[2 * kp + 1][3])};
        for (int dp = 0; dp < D / 16; dp++) {
          uint32_t vb[4];
          qkv_ldmatrix_x4_trans(vb, Vs + (kp * 16 + (tile & 1) * 8 + trow) * LD + dp * 16 +
                                    (tile >> 1) * 8);
          const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
          qkv_mma<DT>(o[2 * dp], pa, b0);
          qkv_mma<DT>(o[2 * dp + 1], pa, b1);
        }
      }
      if (PIPE) __syncthreads();               /* this stage is free for the pass after next */
    }

    /* out = O / l (l summed over the row's four threads); zeros where no
       key was kept */
    for (int h = 0; h < 2; h++) {
      l[h] += __shfl_xor_sync(FULL, l[h], 1);
      l[h] += __shfl_xor_sync(FULL, l[h], 2);
    }
    uint16_t *out = (uint16_t *)J.out + (b * J.nq + i0) * D;
    for (int h = 0; h < 2; h++) {
      int r = 16 * w + g + 8 * h;
      if (r >= bq) continue;
      float rinv = l[h] == 0 ? 0.f : 1.f / l[h];
      for (int dn = 0; dn < DN; dn++)
        *(uint32_t *)(out + r * D + dn * 8 + c) =
            qkv_pack2<DT>(o[dn][2 * h] * rinv, o[dn][2 * h + 1] * rinv);
      /* lse in natural units: m and log2 l are in log2 ones */
      if (J.lse && c == 0)
        ((float *)J.lse)[b * J.nq + i0 + r] =
            l[h] == 0 ? ninf : (m[h] + log2f(l[h])) * 0.6931471805599453f;
    }
  }
}

/* ---- the launch ---- */

template <int DT, int D, bool PIPE>
static int launch (job J, int vec) {
  size_t smem = (size_t)(BQ + (PIPE ? 4 : 2) * BK) * (D + 8) * sizeof(uint16_t);
  void (*kernel)(job, int) = attention_mma_kernel<DT, D, PIPE>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, BQ, &J, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, NTH, smem>>>(J, vec);
  launchCheck("attention_mma_kernel");
  return QKV_OK;
}

/* whether an operand's rows can be read 16 bytes at a time */
static int dense_rows (const operand &op, int nbd) {
  if (op.cs != 1 || op.rs % 8 != 0 || (uintptr_t)op.base % 16 != 0) return 0;
  for (int i = 0; i < nbd; i++)
    if (op.bstride[i] % 8 != 0) return 0;
  return 1;
}

int qkv_cu_attention_mma (const job &J, qkv_dtype dt) {
  int force = qkv_cu_attention_force && strcmp(qkv_cu_attention_force, "mma") != 0;
  if (force || J.dk != J.dv || (J.dk != 64 && J.dk != 128) || (uintptr_t)J.out % 4 != 0)
    return QKV_EDTYPE;
  qkv_cu_attention_path = "mma";
  int vec = dense_rows(J.q, J.nbd) && dense_rows(J.k, J.nbd) && dense_rows(J.v, J.nbd);
  static int sync = -1;                  /* QKV_CUDA_MMA_SYNC=1: no cp.async pipeline */
  if (sync < 0) sync = getenv("QKV_CUDA_MMA_SYNC") != NULL;
  if (vec && !sync) {
    if (dt == QKV_BF16)
      return J.dk == 64 ? launch<QKV_MMA_BF16, 64, true>(J, vec)
                        : launch<QKV_MMA_BF16, 128, true>(J, vec);
    return J.dk == 64 ? launch<QKV_MMA_F16, 64, true>(J, vec) : launch<QKV_MMA_F16, 128, true>(J, vec);
  }
  if (dt == QKV_BF16)
    return J.dk == 64 ? launch<QKV_MMA_BF16, 64, false>(J, vec)
                      : launch<QKV_MMA_BF16, 128, false>(J, vec);
  return J.dk == 64 ? launch<QKV_MMA_F16, 64, false>(J, vec) : launch<QKV_MMA_F16, 128, false>(J, vec);
}
