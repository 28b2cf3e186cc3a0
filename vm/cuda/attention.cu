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
#include "exlog.cuh"
#include "cudnn.h"

#define NT 256                       /* threads a block */
#define RG (NT / 16)                 /* row groups: 16 threads a row */
#define FULL 0xffffffffu

/* a block's shared memory at most (the device's own limit if lower) */
#define BUDGET (200 * 1024)

/* ---- the kernel ---- */

/* rows [r0, r0 + n) of op (n <= rows, the rest zeros) to a rows x w tile
   at dst, ld apart, by all the block's threads */
template <typename T>
__device__ static void load_tile (T *dst, int ld, int rows, int w, const qkv_attn_view &op,
                                  int64_t boff, int64_t r0, int n) {
  const T *src = (const T *)op.base + boff;
  for (int x = threadIdx.x; x < rows * w; x += NT) {
    int i = x / w, j = x % w;
    dst[i * ld + j] = i < n ? src[(r0 + i) * op.rs + j * op.cs] : (T)0;
  }
}

/*
** The item loop.  STAGED: q, k, v tiles in shared memory and O there too;
** otherwise q, k, v are read where they lie (rows past the end clamped to
** the last, whose scores are excluded anyway) and O is kept in out.
*/
template <typename T, int BQ, int BK, bool STAGED>
__global__ void __launch_bounds__(NT) attention_kernel (qkv_attn_plan P) {
  enum { RA = BQ / RG, CB = BK / 16, LDP = BK / 32 * 32 + 16 };
  extern __shared__ __align__(16) unsigned char smem[];
  const int t = threadIdx.x, r = t / 16, c = t % 16, dk = P.dk, dv = P.dv;
  const int ldq = dk | 1;
  const T ninf = -(T)INFINITY, scale = (T)P.scale;
  T *Ps = (T *)smem, *Qs = Ps + BQ * LDP, *Ks = Qs + BQ * ldq, *Vs = Ks + BK * ldq;
  T *Os = Vs + BK * dv;
  /* element strides of a feature step in q, k, v as the products read them */
  const int64_t qcs = STAGED ? 1 : P.q.cs, kcs = STAGED ? 1 : P.k.cs;
  const int64_t vrs = STAGED ? dv : P.v.rs, vcs = STAGED ? 1 : P.v.cs;

  for (int64_t item = blockIdx.x; item < P.items; item += gridDim.x) {
    int64_t b, i0, boff[4];
    const int bq = qkv_attn_item(&P, item, &b, &i0);
    const int64_t jend = qkv_attn_key_end(&P, i0, bq);
    qkv_attn_batch_offsets(&P, b, boff);
    T *out = (T *)P.out + (b * P.nq + i0) * dv;
    T *O = STAGED ? Os : out;                  /* rows dv apart either way */
    const unsigned char *mk = P.has_mask ? (const unsigned char *)P.mask.base + boff[3] : NULL;

    __syncthreads();                           /* the last item's reads are done */
    if (STAGED && jend > 0) load_tile<T>(Qs, ldq, BQ, dk, P.q, boff[0], i0, bq);
    /* the thread's rows of q, as the products read them */
    const T *qrow[RA];
    for (int a = 0; a < RA; a++) {
      int64_t i = i0 + r + RG * a;
      qrow[a] = STAGED ? Qs + (r + RG * a) * ldq
                       : (const T *)P.q.base + boff[0] + (i < P.nq ? i : P.nq - 1) * P.q.rs;
    }
    T m[RA], l[RA], alpha[RA];
    for (int a = 0; a < RA; a++) {
      m[a] = ninf;
      l[a] = 0;
      if (r + RG * a < bq)
        for (int d = c; d < dv; d += 16) O[(r + RG * a) * dv + d] = 0;
    }

    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
      __syncthreads();                         /* the last tile's K, V, P reads are done */
      if (STAGED) {
        load_tile<T>(Ks, ldq, BK, dk, P.k, boff[1], j0, bk);
        load_tile<T>(Vs, dv, bk, dv, P.v, boff[2], j0, bk);
      }
      __syncthreads();

      /* 2. scores */
      const T *krow[CB];
      for (int bb = 0; bb < CB; bb++) {
        int64_t j = j0 + c + 16 * bb;
        krow[bb] = STAGED ? Ks + (c + 16 * bb) * ldq
                          : (const T *)P.k.base + boff[1] + (j < P.nk ? j : P.nk - 1) * P.k.rs;
      }
      T s[RA][CB];
      for (int a = 0; a < RA; a++)
        for (int bb = 0; bb < CB; bb++) s[a][bb] = 0;
      for (int kk = 0; kk < dk; kk++) {
        T qa[RA], kb[CB];
        for (int a = 0; a < RA; a++) qa[a] = qrow[a][kk * qcs];
        for (int bb = 0; bb < CB; bb++) kb[bb] = krow[bb][kk * kcs];
        for (int a = 0; a < RA; a++)
          for (int bb = 0; bb < CB; bb++) s[a][bb] += qa[a] * kb[bb];
      }
      for (int a = 0; a < RA; a++) {
        int64_t i = i0 + r + RG * a;
        for (int bb = 0; bb < CB; bb++) {
          int64_t j = j0 + c + 16 * bb;
          bool keep = i < P.nq && c + 16 * bb < bk && qkv_attn_keeps(&P, mk, i, j);
          s[a][bb] = keep ? s[a][bb] * scale : ninf;
        }
      }

      /* 3. the online softmax; -inf - -inf is never taken */
      for (int a = 0; a < RA; a++) {
        T mx = ninf, sum = 0;
        for (int bb = 0; bb < CB; bb++) mx = s[a][bb] > mx ? s[a][bb] : mx;
        for (int o = 8; o > 0; o >>= 1) {    /* the max skips NaN, as the CPU's */
          T y = __shfl_xor_sync(FULL, mx, o);
          mx = y > mx ? y : mx;
        }
        T mnew = mx > m[a] ? mx : m[a];
        alpha[a] = mnew == m[a] ? (T)1 : ex(m[a] - mnew);     /* 0 at first */
        for (int bb = 0; bb < CB; bb++) {
          T p = s[a][bb] == ninf ? (T)0 : ex(s[a][bb] - mnew);  /* NaN stays */
          Ps[(r + RG * a) * LDP + c + 16 * bb] = p;
          sum += p;
        }
        l[a] = l[a] * alpha[a] + sum;
        m[a] = mnew;
      }
      __syncthreads();

      /* 4. O = O alpha + P V, 64 columns a pass */
      for (int d0 = 0; d0 < dv; d0 += 64) {
        T acc[RA][4];
        const T *vcol[4];
        for (int bb = 0; bb < 4; bb++) {
          int d = d0 + c + 16 * bb;
          d = d < dv ? d : dv - 1;               /* read in bounds, stored never */
          vcol[bb] = STAGED ? Vs + d : (const T *)P.v.base + boff[2] + j0 * P.v.rs + d * vcs;
          for (int a = 0; a < RA; a++) acc[a][bb] = 0;
        }
        for (int jj = 0; jj < bk; jj++) {
          T pa[RA], vb[4];
          for (int a = 0; a < RA; a++) pa[a] = Ps[(r + RG * a) * LDP + jj];
          for (int bb = 0; bb < 4; bb++) vb[bb] = vcol[bb][jj * vrs];
          for (int a = 0; a < RA; a++)
            for (int bb = 0; bb < 4; bb++) acc[a][bb] += pa[a] * vb[bb];
        }
        for (int a = 0; a < RA; a++) {
          int row = r + RG * a;
          for (int bb = 0; bb < 4; bb++) {
            int d = d0 + c + 16 * bb;
            if (row < bq && d < dv) O[row * dv + d] = O[row * dv + d] * alpha[a] + acc[a][bb];
          }
        }
      }
    }

    /* out = O / l; a row with no key kept is zeros.  lse = m + log l (m
       is the same in the row's 16 threads), -inf where l == 0 */
    for (int a = 0; a < RA; a++) {
      T sum = l[a];
      for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
      int row = r + RG * a;
      T rinv = sum == 0 ? (T)0 : (T)(1.0 / (double)sum);
      if (row < bq)
        for (int d = c; d < dv; d += 16)
          out[row * dv + d] = sum == 0 ? (T)0 : O[row * dv + d] * rinv;
      if (P.lse && row < bq && c == 0)
        ((T *)P.lse)[b * P.nq + i0 + row] = sum == 0 ? ninf : m[a] + lg(sum);
    }
  }
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
template <typename T>
static int run (const qkv_attn_plan &P) {
  size_t block = 0, half = 0, es = sizeof(T);
  int err = smem_limits(&block, &half);
  if (err != QKV_OK) return err;
  int dk = (int)P.dk, dv = (int)P.dv;
  if (smem_bytes(64, 64, dk, dv, es, true) <= half) return launch<T, 64, 64, true>(P);
  if (smem_bytes(64, 32, dk, dv, es, true) <= half) return launch<T, 64, 32, true>(P);
  if (smem_bytes(64, 64, dk, dv, es, true) <= block) return launch<T, 64, 64, true>(P);
  if (smem_bytes(64, 32, dk, dv, es, true) <= block) return launch<T, 64, 32, true>(P);
  if (smem_bytes(32, 32, dk, dv, es, true) <= block) return launch<T, 32, 32, true>(P);
  if (smem_bytes(16, 16, dk, dv, es, true) <= block) return launch<T, 16, 16, true>(P);
  return launch<T, 64, 64, false>(P);
}

/* lse, when given, gets each query's log-sum-exp (the kernels' epilogue;
   -inf for every query when nk == 0), which attention_bwd.cu reads in
   place of a pass of its own over the scores */
int qkv_cuda_attention (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                        const qkv_tensor *v, const qkv_tensor *mask, int causal,
                        double scale, qkv_tensor *lse) {
  int half = out->dtype == QKV_F16 || out->dtype == QKV_BF16;
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64 && !half) return QKV_EDTYPE;
  qkv_attn_plan P;
  int err = qkv_attn_plan_forward(&P, out, q, k, v, mask, causal, scale, lse, qkv_cu_attn_data);
  if (err != QKV_OK) return err;
  /* the halves: cuDNN's fused attention first, where the plugin has it,
     then the tensor cores' (QKV_EDTYPE from both: in float32) */
  const char *f = qkv_cu_attention_force;
  if (half && f && strcmp(f, "cudnn") && strcmp(f, "mma") && strcmp(f, "fp32"))
    return qkv_cu_fail("QKV_CUDA_ATTENTION", __FILE__, __LINE__,
                       "names none of the paths auto, cudnn, mma, fp32");
  if (half && (err = qkv_cu_cudnn_attention ? qkv_cu_cudnn_attention(P, out, q, k, v, lse)
                                            : qkv_cu_decline("cudnn", NO_CUDNN)) != QKV_EDTYPE)
    return err;
  if (P.nbatch == 0 || P.nq == 0 || P.dv == 0) return QKV_OK;
  if (!qkv_cu_contiguous(out)) return QKV_EINTERNAL;
  size_t es = qkv_cu_elsize(out->dtype);
  if (lse && !qkv_cu_contiguous(lse)) return QKV_EINTERNAL;
  if (P.nk == 0) {                   /* no key for any query: zeros, lse -inf */
    cudaCheck(cudaMemsetAsync(P.out, 0, (size_t)(P.nbatch * P.nq * P.dv) * es, 0));
    return lse ? qkv_cuda_fill(lse, -INFINITY) : QKV_OK;
  }
  /* the kernel counts features (and tile elements) in int */
  if (P.dk >= INT_MAX / 64 || P.dv >= INT_MAX / 64) return QKV_EINTERNAL;
  if (half) return qkv_cu_attention_mma(P);
  qkv_cu_attention_path = "fp32";
  if (qkv_cu_decode_fits(P)) return qkv_cu_attention_decode(P);   /* a decode step */
  if (out->dtype == QKV_F32) return run<float>(P);
  return run<double>(P);
}
