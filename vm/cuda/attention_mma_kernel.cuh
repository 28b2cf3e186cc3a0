/*
** attention_mma_kernel.cuh -- fused attention in bfloat16 and float16 on
** the tensor cores, as FlashAttention-2 tiles it (Dao, 2023), for head
** sizes 64 and 128 (dk = dv), written once for attention_mma.cu (which
** launches it, compiled with the plugin) and for the attention variants'
** programs compiled as code at run time (mods_gen.cu, jit.cu; NVRTC reads
** this file as text, embed.py); the same function as attention.cu (masks, causal
** aligned to the last key, a query with no key left gives zeros, scores
** the product then a multiply by scale, in log2 units for exp2), with
** float32 accumulators and the probabilities rounded to the input's dtype
** before P V; and, when the plan asks (P.lse), each query's log-sum-exp.
**
** A block of 4 warps takes BQ = 4 R queries of one batch item (R = 16 MT
** a warp: MT m-tiles of 16 rows; a block an item, the last query tiles
** first) and walks the key tiles of BK up to the tile's causal end:
**   1. Q's tile goes to shared memory once; its A fragments (ldmatrix)
**      stay in registers where they fit beside S's and O's accumulators
**      (q_in_registers), else they are read again per key tile;
**   2. per key tile: K's and V's tiles in shared memory (16 bytes a thread
**      a load when the rows allow it); S = Q K^T by mma.sync m16n8k16, K's
**      rows read as B fragments by ldmatrix, each feeding MT mma; where
**      the mask, the causal diagonal or the keys' end cuts the tile for
**      a warp, an excluded key gets -inf (cut_bits);
**   3. the online softmax in registers: a thread holds two rows' scores
**      per m-tile (rows g and g + 8, g = lane / 4); the four threads of a
**      row share its max by shuffles; l is rescaled by exp(m_old - m_new),
**      and O too where a row's max moved;
**   4. O += P V: the scores' accumulator fragments are the A fragments of
**      P once packed to 16 bits (no shared memory), V's rows read as B
**      fragments by ldmatrix.trans, again each feeding MT mma.
** At the end out = O / l, zeros where l == 0, and lse = m + log l.
**
** Why MT: a warp's mma needs a B fragment (K or V, 256 bytes by ldmatrix)
** per 16 x 8 x 16 product; with one m-tile each fragment feeds one mma,
** and shared memory's 128 bytes a clock, not the tensor cores, bound the
** loop (bench/NOTES.md, "Tensor-core forward on the H100").  Two m-tiles
** halve the bytes per mma, at twice the accumulators: 255 registers, and
** no spills only because nothing else stays live across the key loop
** (the item's pointers are in shared memory, positions in int, the cut
** tiles' keys as bits in shared memory).  Check `make cuda-regs` after any
** change.  The variants, QKV_CUDA_MMA_VARIANT=name (rows a warp, keys a
** tile; the one GPU run times them side by side, bench/attention_gpu.lua):
**   r16k64    MT 1, BK 64: the first design's tiling, Q in registers;
**   r32k32    MT 2, BK 32: half the accumulators of r32k64, twice the
**             per-tile work (barrier, max, rescale) a key;
**   r32k64    MT 2, BK 64: the default at d 128 (Q re-read from shared
**             memory there, in registers at d 64);
**   r32k128   MT 2, BK 128, d 64 only, its default (FlashAttention-2's
**             128 x 128 there); at d 128 S's 128 accumulators beside O's
**             128 spill, so it is not built: an error there.
** QKV_CUDA_MMA_SYNC=1, and rows that cannot be read 16 bytes at a time,
** take the one-stage kernel, r32k64 at d 64 and r32k32 at d 128.
**
** The loop, K and V in two stages by cp.async, one barrier a key tile: at
** the top of tile t every thread waits for its own copies of t, and the
** barrier both publishes them and certifies that every warp is done with
** tile t - 1, whose stage then takes tile t + 1's copies, in flight while
** t is computed on.  (The one-stage kernel: load, barrier, compute,
** barrier.)
**
** Shared memory: Q BQ x LD, K and V BK x LD per stage in 16-bit elements,
** LD = D + 8 (rows 16 bytes apart in banks, so ldmatrix's eight rows hit
** eight different bank groups), and BQ BK / 8 bytes of cut bits; see
** attention_mma.cu's launch().  Mirrors attention.cu, the float32
** reference of the same tiling on CUDA cores; the host simulation runs
** this file with mma.cuh's instructions as warp collectives.
*/
#ifndef QKV_CUDA_ATTENTION_MMA_KERNEL_CUH
#define QKV_CUDA_ATTENTION_MMA_KERNEL_CUH

#include <limits.h>
#include <math.h>

#include "mods_kernels.cuh"
#include "mma.cuh"

#define QKV_MMA_WARPS 4
#define QKV_MMA_NT (32 * QKV_MMA_WARPS)              /* threads a block */
#define QKV_MMA_FULL 0xffffffffu

/* every loop over a register array unrolled, so that its indices are
   constants and the array stays in registers (nvcc's own heuristic stops
   short at two m-tiles and leaves the accumulators in local memory); and
   qkv_mma_cut_bits' loop over rows only twice (unrolled, its loads in
   flight take the registers that the accumulators need: ptxas spills) */
#ifdef QKV_CUDASIM
#define QKV_UNROLL
#define QKV_ROLLED2
#else
#define QKV_UNROLL _Pragma("unroll")
#define QKV_ROLLED2 _Pragma("unroll 2")
#endif

/* whether Q's fragments (MT D / 4 registers a thread) stay in registers:
   when they, S's (MT BK / 2) and O's (MT D / 2) accumulators come to at
   most 160 of the 255 a thread has (the rest: addresses, m, l, the
   fragments in flight) */
__host__ __device__ constexpr bool qkv_mma_q_in_registers (int D, int MT, int BK) {
  return MT * (D / 4 + BK / 2 + D / 2) <= 160;
}

/* the kernel's dynamic shared memory, bytes: Q's tile, K's and V's
   (twice, PIPE), the cut bits */
__host__ __device__ constexpr size_t qkv_mma_smem (int D, int MT, int BK, bool PIPE) {
  return (size_t)(QKV_MMA_WARPS * 16 * MT + (PIPE ? 4 : 2) * BK) * (D + 8) * sizeof(uint16_t) +
         (size_t)QKV_MMA_WARPS * 16 * MT * (BK / 32) * sizeof(uint32_t);
}

/* rows [r0, r0 + n) of src (rows rs, columns cs apart) to a rows x D tile
   at dst, LD apart, zeros past n; 16 bytes a load when vec (the rows'
   elements dense and aligned) */
template <int D>
__device__ static void qkv_mma_load_rows (uint16_t *dst, const uint16_t *src, int64_t rs,
                                          int64_t cs, int r0, int n, int rows, int vec) {
  enum { LD = D + 8, V = D / 8 };
  if (vec) {
    for (int x = threadIdx.x; x < rows * V; x += QKV_MMA_NT) {
      int i = x / V, j = x % V * 8;
      uint4 u = make_uint4(0, 0, 0, 0);
      if (i < n) u = *(const uint4 *)(src + (r0 + i) * rs + j);
      *(uint4 *)(dst + i * LD + j) = u;
    }
  } else {
    for (int x = threadIdx.x; x < rows * D; x += QKV_MMA_NT) {
      int i = x / D, j = x % D;
      dst[i * LD + j] = i < n ? src[(r0 + i) * rs + j * cs] : (uint16_t)0;
    }
  }
}

/* K's and V's rows [j0, j0 + n) into one stage by cp.async, one group;
   zeros past n (rows dense and aligned: vec).  A thread copies 16 bytes of
   column j of rows i, i + QKV_MMA_NT / V, ...: one running address each
   for K and V rather than one per copy, which the compiler would keep in
   registers across the key loop */
template <int D, int BK>
__device__ static void qkv_mma_issue_kv (uint16_t *ks, uint16_t *vs, const uint16_t *kg,
                                         const uint16_t *vg, const qkv_attn_plan &P, int j0,
                                         int n) {
  enum { LD = D + 8, V = D / 8, STEP = QKV_MMA_NT / V };
  const int i = threadIdx.x / V, j = threadIdx.x % V * 8;
  const uint16_t *k = kg + (j0 + i) * P.k.rs + j, *v = vg + (j0 + i) * P.v.rs + j;
  for (int r = i; r < BK; r += STEP, k += STEP * P.k.rs, v += STEP * P.v.rs) {
    if (r < n) {
      qkv_cp_async16(ks + r * LD + j, k);
      qkv_cp_async16(vs + r * LD + j, v);
    } else {
      *(uint4 *)(ks + r * LD + j) = make_uint4(0, 0, 0, 0);
      *(uint4 *)(vs + r * LD + j) = make_uint4(0, 0, 0, 0);
    }
  }
  qkv_cp_commit();
}

/*
** Which keys j0 .. j0 + BK - 1 rows r0 .. r0 + R - 1 (a warp's) keep, one
** bit a key, BK / 32 words a row, into the warp's words at bits: a key is
** kept when below nk, on or before the causal diagonal, and kept by the
** mask (the plan's qkv_attn_keeps, in int).  Without a mask a row keeps a
** run of keys from its first, so a
** lane makes a whole word from the count (R BK / 1024 words a lane).
** With one, the mask's bytes are read a row of 32 keys at a time (lane l
** reading key 32 wd + l: coalesced) and made a word by ballot.  Shared
** memory rather than registers, because S's and O's accumulators leave
** none (computing the cut in place of reading it spills them: ptxas, 40
** bytes at the defaults): each thread reads back only its own rows' words.
*/
template <int R, int BK>
__device__ static void qkv_mma_cut_bits (uint32_t *bits, const qkv_attn_plan &P,
                                         const unsigned char *mk, int r0, int j0) {
  const int lane = threadIdx.x % 32, nk = (int)P.nk, off = (int)P.off;
  if (!P.has_mask) {
    for (int x = lane; x < R * (BK / 32); x += 32) {
      const int i = r0 + x / (BK / 32), j = j0 + 32 * (x % (BK / 32));
      const int kept = (P.causal && i + off < nk - 1 ? i + off : nk - 1) - j + 1;
      bits[x] = kept >= 32 ? QKV_MMA_FULL : kept <= 0 ? 0u : (1u << kept) - 1;
    }
    return;
  }
  QKV_ROLLED2 for (int rr = 0; rr < R; rr++)
    QKV_UNROLL for (int wd = 0; wd < BK / 32; wd++) {
      const int i = r0 + rr, j = j0 + 32 * wd + lane;
      bool keep = j < nk && (!P.causal || j <= i + off);
      if (P.has_mask && keep && i < P.nq) keep = mk[i * P.mask.rs + j * P.mask.cs] != 0;
      const uint32_t word = __ballot_sync(QKV_MMA_FULL, keep);
      if (lane == 0) bits[rr * (BK / 32) + wd] = word;
    }
}

/*
** The run [*lo, *hi) of M's block mask that a tile crosses: along the
** keys (rows false) for queries [f0, f0 + fn), along the queries (rows
** true) for keys [f0, f0 + fn); from the first position of the first
** block that is not all empty to the last of the last, below end; none
** (*lo >= *hi) when all are.  The block's threads look at the blocks
** together, each once.
*/
template <class E>
__device__ static void qkv_mma_nonempty (const qkv_attn_mods *M, int64_t b, bool rows, int f0,
                                         int fn, int end, int *lo, int *hi) {
  __shared__ int range[2];
  if (threadIdx.x == 0) range[0] = INT_MAX, range[1] = 0;
  __syncthreads();
  const int bs = (int)(rows ? M->bq : M->bk);
  for (int x = threadIdx.x; x < (end + bs - 1) / bs; x += QKV_MMA_NT) {
    const int kind = rows ? qkv_mods_tile_kind<E>(M, b, (int64_t)x * bs, bs, f0, fn)
                          : qkv_mods_tile_kind<E>(M, b, f0, fn, (int64_t)x * bs, bs);
    if (kind != QKV_BLOCK_EMPTY) {
      atomicMin(&range[0], x * bs);
      atomicMax(&range[1], x * bs + bs < end ? x * bs + bs : end);
    }
  }
  __syncthreads();
  *lo = range[0];
  *hi = range[1];
}

/*
** A tile's scores s (a warp's MT m-tiles by BK keys from j0, rows from
** r0: this thread's fragments, q k^T) through E's program, into log2
** units as the kernel takes them: each kept score becomes the program's
** score (q k^T scale in, the outputs in want run), -inf where the mask
** drops it; a key that bits (qkv_mma_cut_bits' words, NULL: none cut) or
** the queries' end leaves out is -inf and runs nothing.
*/
template <class E, int MT, int BK>
__device__ static __forceinline__ void qkv_mma_mods (float (&s)[MT][BK / 8][4],
                                                     const qkv_attn_plan &P, qkv_attn_mods *M,
                                                     int want, int64_t b, int r0, int j0,
                                                     const uint32_t *bits, double *val) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4), nq = (int)P.nq;
  const float scale = (float)P.scale, log2e = 1.4426950408889634f;
  const int64_t bb = b / M->heads, hh = b % M->heads;
  QKV_UNROLL for (int mt = 0; mt < MT; mt++)
    QKV_UNROLL for (int h = 0; h < 2; h++) {
      const int i = r0 + 16 * mt + 8 * h + g;
      qkv_mod_pair e = {bb, hh, i, 0, 0};
      if (i < nq) E::run(M, val, want, false, e);          /* what reads no key, once */
      QKV_UNROLL for (int wd = 0; wd < BK / 32; wd++) {
        /* keys 32 wd + 8 q + c + x: S's n = 4 wd + q, element 2 h + x */
        const uint32_t word = bits ? bits[(16 * mt + 8 * h + g) * (BK / 32) + wd] >> c
                                   : QKV_MMA_FULL;
        QKV_UNROLL for (int q = 0; q < 4; q++)
          QKV_UNROLL for (int x = 0; x < 2; x++) {
            float &y = s[mt][4 * wd + q][2 * h + x], z = -INFINITY;
            if (i < nq && (word >> (8 * q + x) & 1)) {
              e.j = j0 + 32 * wd + 8 * q + c + x;
              e.score = (double)(y * scale);
              E::run(M, val, want, true, e);
              z = qkv_mods_applied<E, float>(M, val, want, y * scale) * log2e;
            }
            y = z;
          }
      }
    }
}

/*
** MT m-tiles of 16 queries a warp, BK keys a tile; PIPE: K and V in two
** stages by cp.async (the header's loop), else one stage.  E evaluates
** M's score_mod/mask_mod program (qkv_mods_none: none, M NULL): the key
** tiles run from the first to the last that M's block mask does not leave
** all empty, an empty one between is skipped, and each kept score of a
** tile whose kind asks for it goes through the program (the score the
** program sees is q k^T scale, as attention.cu's; a key the mask drops,
** -inf), in doubles, before the scores go to log2 units.
*/
template <int DT, int D, int MT, int BK, bool PIPE, class E>
__device__ static __forceinline__ void qkv_attn_mma (const qkv_attn_plan &P, qkv_attn_mods *M,
                                                     int vec, unsigned char *smem) {
  enum { R = 16 * MT, BQ = QKV_MMA_WARPS * R, LD = D + 8, KS = D / 16, NS = BK / 8, DN = D / 8,
         STAGE = 2 * BK * LD };
  constexpr bool QREG = qkv_mma_q_in_registers(D, MT, BK);
  (void)M;
  uint16_t *Qs = (uint16_t *)smem, *KV = Qs + BQ * LD;    /* stage s: K at KV + s STAGE, V after */
  /* this warp's qkv_mma_cut_bits words, after the stages */
  uint32_t *Bw = (uint32_t *)(KV + (PIPE ? 2 : 1) * STAGE) + threadIdx.x / 32 * R * (BK / 32);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, c = 2 * (lane % 4), tile = lane / 8, trow = lane % 8;
  /* scores in log2 units: exp(x scale - m) = exp2(x scale log2 e - m') */
  const float scale2 = (float)(P.scale * 1.4426950408889634), ninf = -INFINITY;
  /* this lane's ldmatrix row of Q's m-tile 0 (A fragments: tiles 0, 1 are
     rows 0-7, 8-15 of dims 16 kk .. + 7, tiles 2, 3 the next eight dims) */
  const uint16_t *qrow = (const uint16_t *)smem + (R * w + lane % 16) * LD + lane / 16 * 8;

  /* one item a block (the launch takes P.items <= INT_MAX: a loop over
     items would keep its registers live across the key loop) */
  int64_t b, i0_, boff[4];
  const int bq = qkv_attn_item(&P, blockIdx.x, &b, &i0_);
  const int64_t jend_ = qkv_attn_key_end(&P, i0_, bq);
  qkv_attn_batch_offsets(&P, b, boff);
  /* positions in int (the launch takes nq, nk < 2^30) */
  const int i0 = (int)i0_, jend = (int)jend_, nk = (int)P.nk, off = (int)P.off;
  const int r0 = i0 + R * w;                   /* this warp's first query */
  /* the item's K, V and mask, and its first row of out, read from shared
     memory where the key loop and the end use them: in registers they
     would be live across the loop, where S's and O's accumulators leave
     none to spare */
  __shared__ struct { const uint16_t *k, *v; const unsigned char *mask; int64_t row0; } item;
  if (threadIdx.x == 0) {
    item.k = (const uint16_t *)P.k.base + boff[1];
    item.v = (const uint16_t *)P.v.base + boff[2];
    item.mask = (const unsigned char *)P.mask.base + boff[3];
    item.row0 = b * P.nq + i0;
  }
  /* the key tiles from jbeg to jstop: all of them to the causal end
     unless a block mask leaves some empty */
  int jbeg = 0, jstop = jend;
  if constexpr (E::MODS)
    if (M->kinds) {
      qkv_mma_nonempty<E>(M, b, false, i0, bq, jend, &jbeg, &jstop);
      jbeg = jbeg / BK * BK;
    }
  if (PIPE && jbeg < jstop)
    qkv_mma_issue_kv<D, BK>(KV + (jbeg / BK & 1) * STAGE, KV + (jbeg / BK & 1) * STAGE + BK * LD,
                            (const uint16_t *)P.k.base + boff[1],
                            (const uint16_t *)P.v.base + boff[2], P, jbeg,
                            nk - jbeg < BK ? nk - jbeg : BK);
  qkv_mma_load_rows<D>(Qs, (const uint16_t *)P.q.base + boff[0], P.q.rs, P.q.cs, i0, bq, BQ, vec);
  __syncthreads();
  uint32_t qf[QREG ? KS : 1][MT][4];
  if constexpr (QREG) {
    QKV_UNROLL for (int kk = 0; kk < KS; kk++)
      QKV_UNROLL for (int mt = 0; mt < MT; mt++)
        qkv_ldmatrix_x4(qf[kk][mt], qrow + 16 * mt * LD + kk * 16);
  }

  double val[E::NV];                           /* the program's values */
  (void)val;
  float o[MT][DN][4], m[MT][2], l[MT][2];
  QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
    m[mt][0] = m[mt][1] = ninf;
    l[mt][0] = l[mt][1] = 0;
    QKV_UNROLL for (int dn = 0; dn < DN; dn++)
      QKV_UNROLL for (int e = 0; e < 4; e++) o[mt][dn][e] = 0;
  }

  for (int j0 = jbeg; j0 < jstop; j0 += BK) {
    uint16_t *Ks = KV + (PIPE ? (j0 / BK & 1) * STAGE : 0), *Vs = Ks + BK * LD;
    if (PIPE) {
      qkv_cp_wait<0>();                      /* this thread's copies of this tile */
      __syncthreads();                       /* everyone's; and the last tile is done with */
      if (j0 + BK < jstop) {
        uint16_t *next = KV + ((j0 / BK + 1) & 1) * STAGE;
        qkv_mma_issue_kv<D, BK>(next, next + BK * LD, item.k, item.v, P, j0 + BK,
                        nk - j0 - BK < BK ? nk - j0 - BK : BK);
      }
    } else {
      int bk = nk - j0 < BK ? nk - j0 : BK;
      __syncthreads();                       /* every warp is done with K and V */
      qkv_mma_load_rows<D>(Ks, item.k, P.k.rs, P.k.cs, j0, bk, BK, vec);
      qkv_mma_load_rows<D>(Vs, item.v, P.v.rs, P.v.cs, j0, bk, BK, vec);
      __syncthreads();
    }
    /* causal: a warp whose queries all come before the tile's first key
       has nothing here (its m, l and O would not change).  This test and
       cut's below are the plan's qkv_attn_key_end and qkv_attn_tile_cut
       for the warp's rows, in int: the plan's int64 versions took more
       registers (make cuda-regs: 255 of 255 at the defaults, 206 for
       196 at r16k64 d 128) */
    if (P.causal && j0 > r0 + R - 1 + off) continue;
    int want = 0;                            /* what the program computes in this tile */
    if constexpr (E::MODS) {
      /* the same in every thread: the skip is the whole block's */
      const int kind = qkv_mods_tile_kind<E>(M, b, i0, bq, j0, nk - j0 < BK ? nk - j0 : BK);
      if (kind == QKV_BLOCK_EMPTY) continue;
      want = qkv_mods_want<E>(M, kind);
    }

    /* a tile that the mask, the causal diagonal or the keys' end cuts
       for this warp: which of its keys each of this thread's rows keeps,
       worked out before S's accumulators are live */
    const bool cut = P.has_mask || j0 + BK > nk || (P.causal && j0 + BK - 1 > r0 + off);
    if (cut) {
      qkv_mma_cut_bits<R, BK>(Bw, P, item.mask, r0, j0);
      __syncwarp();
    }

    /* 2. S = Q K^T: ldmatrix's tiles 0, 1 are keys 16 np .. + 7 (dims
       kk 16 and + 8), tiles 2, 3 the next eight keys */
    float s[MT][NS][4];
    QKV_UNROLL for (int mt = 0; mt < MT; mt++)
      QKV_UNROLL for (int n = 0; n < NS; n++)
        QKV_UNROLL for (int e = 0; e < 4; e++) s[mt][n][e] = 0;
    QKV_UNROLL for (int kk = 0; kk < KS; kk++) {
      uint32_t a[MT][4];
      QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
        if constexpr (QREG) {
          QKV_UNROLL for (int r = 0; r < 4; r++) a[mt][r] = qf[kk][mt][r];
        } else {
          qkv_ldmatrix_x4(a[mt], qrow + 16 * mt * LD + kk * 16);
        }
      }
      QKV_UNROLL for (int np = 0; np < NS / 2; np++) {
        uint32_t kb[4];
        qkv_ldmatrix_x4(kb, Ks + (np * 16 + (tile >> 1) * 8 + trow) * LD + kk * 16 +
                                (tile & 1) * 8);
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
          qkv_mma<DT>(s[mt][2 * np], a[mt], b0);
          qkv_mma<DT>(s[mt][2 * np + 1], a[mt], b1);
        }
      }
    }

    /* scaled (by scale log2 e: the exponentials are exp2), the keys
       not kept to -inf, and each row's max; a tile the program runs on
       takes both from qkv_mma_mods */
    if (E::MODS && want) {
      qkv_mma_mods<E, MT, BK>(s, P, M, want, b, r0, j0, cut ? Bw : NULL, val);
      if (cut) __syncwarp();                 /* read before the next tile's cut_bits */
    } else {
      QKV_UNROLL for (int mt = 0; mt < MT; mt++)
        QKV_UNROLL for (int n = 0; n < NS; n++)
          QKV_UNROLL for (int e = 0; e < 4; e++) s[mt][n][e] *= scale2;
      if (cut) {
        QKV_UNROLL for (int mt = 0; mt < MT; mt++)
          QKV_UNROLL for (int h = 0; h < 2; h++)
            QKV_UNROLL for (int wd = 0; wd < BK / 32; wd++) {
              /* keys 32 wd + 8 q + c + e: S's n = 4 wd + q, element 2 h + e */
              const uint32_t word = Bw[(16 * mt + 8 * h + g) * (BK / 32) + wd] >> c;
              QKV_UNROLL for (int q = 0; q < 4; q++)
                QKV_UNROLL for (int e = 0; e < 2; e++)
                  if (!(word >> (8 * q + e) & 1)) s[mt][4 * wd + q][2 * h + e] = ninf;
            }
        __syncwarp();                        /* read before the next tile's cut_bits */
      }
    }
    float mx[MT][2];
    QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
      mx[mt][0] = mx[mt][1] = ninf;
      QKV_UNROLL for (int n = 0; n < NS; n++)
        QKV_UNROLL for (int e = 0; e < 4; e++) mx[mt][e / 2] = fmaxf(mx[mt][e / 2], s[mt][n][e]);
    }

    /* 3. the online softmax; a row with nothing kept yet keeps m = -inf
       and takes its exponentials against 0 (all zeros) */
    QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
      float mref[2], alpha[2];
      QKV_UNROLL for (int h = 0; h < 2; h++) {
        float x = mx[mt][h];
        x = fmaxf(x, __shfl_xor_sync(QKV_MMA_FULL, x, 1));
        x = fmaxf(x, __shfl_xor_sync(QKV_MMA_FULL, x, 2));
        float mn = fmaxf(m[mt][h], x);
        mref[h] = mn == ninf ? 0.f : mn;
        alpha[h] = qkv_exp2(m[mt][h] - mref[h]);
        m[mt][h] = mn;
        l[mt][h] *= alpha[h];
      }
      QKV_UNROLL for (int n = 0; n < NS; n++)
        QKV_UNROLL for (int e = 0; e < 4; e++) {
          s[mt][n][e] = qkv_exp2(s[mt][n][e] - mref[e / 2]);
          l[mt][e / 2] += s[mt][n][e];
        }
      /* O's rescale, D / 2 multiplies a thread and m-tile, only where
         one of the warp's rows' max moved: after the first tiles of a
         long row it seldom does (alpha is then exactly 1) */
      if (__any_sync(QKV_MMA_FULL, alpha[0] != 1.f || alpha[1] != 1.f)) {
        QKV_UNROLL for (int dn = 0; dn < DN; dn++)
          QKV_UNROLL for (int e = 0; e < 4; e++) o[mt][dn][e] *= alpha[e / 2];
      }
    }

    /* 4. O += P V: P's A fragment for keys 16 kp .. + 15 is S's
       accumulators of key groups 2 kp and 2 kp + 1; ldmatrix.trans's
       tiles 0, 1 are keys 16 kp .. + 7 and + 8 .. + 15 of dims 16 dp .. + 7,
       tiles 2, 3 the same keys of the next eight dims */
    QKV_UNROLL for (int kp = 0; kp < NS / 2; kp++) {
      uint32_t pa[MT][4];
      QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
        pa[mt][0] = qkv_pack2<DT>(s[mt][2 * kp][0], s[mt][2 * kp][1]);
        pa[mt][1] = qkv_pack2<DT>(s[mt][2 * kp][2], s[mt][2 * kp][3]);
        pa[mt][2] = qkv_pack2<DT>(s[mt][2 * kp + 1][0], s[mt][2 * kp + 1][1]);
        pa[mt][3] = qkv_pack2<DT>(s[mt][2 * kp + 1][2], s[mt][2 * kp + 1][3]);
      }
      QKV_UNROLL for (int dp = 0; dp < D / 16; dp++) {
        uint32_t vb[4];
        qkv_ldmatrix_x4_trans(vb, Vs + (kp * 16 + (tile & 1) * 8 + trow) * LD + dp * 16 +
                                  (tile >> 1) * 8);
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        QKV_UNROLL for (int mt = 0; mt < MT; mt++) {
          qkv_mma<DT>(o[mt][2 * dp], pa[mt], b0);
          qkv_mma<DT>(o[mt][2 * dp + 1], pa[mt], b1);
        }
      }
    }
  }

  /* out = O / l (l summed over the row's four threads); zeros where no
     key was kept; lse = (m + log2 l) ln 2, -inf there */
  const int64_t row0 = item.row0;
  uint16_t *out = (uint16_t *)P.out + row0 * D;
  QKV_UNROLL for (int mt = 0; mt < MT; mt++)
    QKV_UNROLL for (int h = 0; h < 2; h++) {
      float sum = l[mt][h];
      sum += __shfl_xor_sync(QKV_MMA_FULL, sum, 1);
      sum += __shfl_xor_sync(QKV_MMA_FULL, sum, 2);
      int r = R * w + 16 * mt + g + 8 * h;
      if (r >= bq) continue;
      float rinv = sum == 0 ? 0.f : 1.f / sum;
      QKV_UNROLL for (int dn = 0; dn < DN; dn++)
        *(uint32_t *)(out + r * D + dn * 8 + c) =
            qkv_pack2<DT>(o[mt][dn][2 * h] * rinv, o[mt][dn][2 * h + 1] * rinv);
      if (P.lse && c == 0)
        ((float *)P.lse)[row0 + r] =
            sum == 0 ? ninf : (m[mt][h] + log2f(sum)) * 0.6931471805599453f;
    }
}

#endif
