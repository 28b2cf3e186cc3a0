/*
** attention_decode.cu -- the fused attention for a few queries against many
** keys on the GPU, as vm/cpu/attention_decode.c: a decode step, where one
** new token's queries (a group's heads folded into rows by
** stdlib/qkv/gqa.lua) meet the whole KV cache.  The tile kernel
** (attention.cu) gives a block to each tile of queries, so a decode step's
** B x H_kv items fill a handful of a GPU's SMs.  Here the keys are split
** too (flash-decoding): block (item, split) takes keys [j0, j1), each of
** its warps every NW-th key:
**   the scores of every query against the key (lanes across the features,
**   then a warp's sum by shuffles), times the scale; the causal cut;
**   the online softmax per query (m, l the same in every lane) and
**   o = o * exp(m_old - m_new) + p v, each lane owning features lane,
**   lane + 32, ... of every query's row.
** The warps' (m, l, o) merge in shared memory; with one split the block
** writes out = o / l (zeros where l == 0) and the log-sum-exp, otherwise
** its part, and decode_merge combines an item's parts.  A NaN score makes
** its query's row NaN.  float32 and float64 (the CUDA cores' path):
** attention.cu sends a job here when qkv_cu_decode_fits.
*/
#include <limits.h>
#include <math.h>

#include "attention.cuh"
#include "exlog.cuh"

#define NW 8                         /* warps a block */
#define DT (32 * NW)                 /* threads a block */
#define DQ 8                         /* queries at most */
#define DMAX 256                     /* d_k, d_v at most */
#define SPLIT_MIN 64                 /* keys a split at least */
#define FULL 0xffffffffu

int qkv_cu_decode_fits (const qkv_attn_plan &P) {
  return (P.dtype == QKV_F32 || P.dtype == QKV_F64) && P.nq <= DQ && !P.has_mask && P.dk > 0 &&
         P.dk <= DMAX && P.dv > 0 && P.dv <= DMAX;
}

/* an item's (m, l, o) from its warps' in shared memory (wm, wl: NW x DQ,
   wo: NW x DQ x dv); with one split into out and lse, else into part */
template <typename T>
__device__ static void finish_block (const qkv_attn_plan &P, int64_t b, int64_t u, int nsplit,
                                     const T *wm, const T *wl, const T *wo, T *part) {
  int nq = (int)P.nq, dv = (int)P.dv;
  for (int x = threadIdx.x; x < nq * (dv + 1); x += DT) {
    int r = x / (dv + 1), c = x % (dv + 1) - 1;     /* c = -1: m and l */
    T M = -INFINITY, L = 0, O = 0;
    for (int w = 0; w < NW; w++) M = wm[w * DQ + r] > M ? wm[w * DQ + r] : M;
    for (int w = 0; w < NW; w++) {
      T lw = wl[w * DQ + r];
      if (lw != lw) L = lw;                          /* NaN spoils the row */
      if (wm[w * DQ + r] == -INFINITY) continue;
      T e = ex(wm[w * DQ + r] - M);
      L += e * lw;
      if (c >= 0) O += e * wo[(w * DQ + r) * dv + c];
    }
    if (nsplit > 1) {
      T *pt = part + (u * nq + r) * (dv + 2);
      if (c < 0) pt[0] = M, pt[1] = L;
      else pt[2 + c] = O;
      continue;
    }
    int64_t row = b * nq + r;
    if (c >= 0) ((T *)P.out)[row * dv + c] = L == 0 ? (T)0 : O / L;
    else if (P.lse) ((T *)P.lse)[row] = L == 0 ? (T)-INFINITY : M + lg(L);
  }
}

template <typename T>
__global__ void __launch_bounds__(DT) decode_kernel (qkv_attn_plan P, int nsplit, int64_t klen,
                                                     T *part) {
  extern __shared__ unsigned char smem_[];
  int nq = (int)P.nq, dk = (int)P.dk, dv = (int)P.dv;
  T *qs = (T *)smem_, *wm = qs + nq * dk, *wl = wm + NW * DQ, *wo = wl + NW * DQ;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t u = blockIdx.x; u < P.nbatch * nsplit; u += gridDim.x) {
    int64_t b = u / nsplit, off[4];
    qkv_attn_batch_offsets(&P, b, off);
    const T *q = (const T *)P.q.base + off[0], *k = (const T *)P.k.base + off[1];
    const T *v = (const T *)P.v.base + off[2];
    for (int x = threadIdx.x; x < nq * dk; x += DT)
      qs[x] = q[(x / dk) * P.q.rs + (x % dk) * P.q.cs];
    __syncthreads();
    int64_t j0 = (u % nsplit) * klen, j1 = j0 + klen < P.nk ? j0 + klen : P.nk;
    T m[DQ], l[DQ], o[DQ][DMAX / 32];
#pragma unroll
    for (int r = 0; r < DQ; r++) {
      m[r] = -INFINITY, l[r] = 0;
#pragma unroll
      for (int i = 0; i < DMAX / 32; i++) o[r][i] = 0;
    }
    for (int64_t j = j0 + warp; j < j1; j += NW) {
      const T *kj = k + j * P.k.rs, *vj = v + j * P.v.rs;
      T s[DQ];
#pragma unroll
      for (int r = 0; r < DQ; r++) s[r] = 0;
      for (int c = lane; c < dk; c += 32) {
        T kc = kj[c * P.k.cs];
#pragma unroll
        for (int r = 0; r < DQ; r++) if (r < nq) s[r] += qs[r * dk + c] * kc;
      }
#pragma unroll
      for (int r = 0; r < DQ; r++) {
        if (r >= nq) break;
        for (int w = 16; w > 0; w /= 2) s[r] += __shfl_xor_sync(FULL, s[r], w);
        T x = s[r] * (T)P.scale;
        if (P.causal && j > r + P.off) continue;     /* dropped */
        if (x != x) { l[r] = x; continue; }          /* NaN */
        T mn = x > m[r] ? x : m[r];
        if (mn == -INFINITY) continue;               /* nothing kept yet */
        T alpha = m[r] == -INFINITY ? (T)0 : ex(m[r] - mn), p = ex(x - mn);
        l[r] = l[r] * alpha + p;
        m[r] = mn;
#pragma unroll
        for (int i = 0; i < DMAX / 32; i++)
          if (lane + 32 * i < dv) o[r][i] = o[r][i] * alpha + p * vj[(lane + 32 * i) * P.v.cs];
      }
    }
    /* the warps' parts to shared memory, then the block's */
#pragma unroll
    for (int r = 0; r < DQ; r++) {
      if (r >= nq) break;
      if (lane == 0) wm[warp * DQ + r] = m[r], wl[warp * DQ + r] = l[r];
#pragma unroll
      for (int i = 0; i < DMAX / 32; i++)
        if (lane + 32 * i < dv) wo[(warp * DQ + r) * dv + lane + 32 * i] = o[r][i];
    }
    __syncthreads();
    finish_block<T>(P, b, u, nsplit, wm, wl, wo, part);
    __syncthreads();
  }
}

/* an item's splits merged: each rescaled to the largest max */
template <typename T>
__global__ void __launch_bounds__(DT) decode_merge (qkv_attn_plan P, int nsplit, const T *part) {
  int nq = (int)P.nq, dv = (int)P.dv;
  for (int64_t x = blockIdx.x; x < P.nbatch * nq; x += gridDim.x) {
    int64_t b = x / nq, r = x % nq;
    const T *p0 = part + (b * nsplit * nq + r) * (dv + 2);
    int64_t step = (int64_t)nq * (dv + 2);
    T M = -INFINITY, L = 0;
    for (int s = 0; s < nsplit; s++) M = p0[s * step] > M ? p0[s * step] : M;
    for (int s = 0; s < nsplit; s++) {
      T ls = p0[s * step + 1];
      if (ls != ls) L = ls;
      if (p0[s * step] != -INFINITY) L += ex(p0[s * step] - M) * ls;
    }
    for (int c = threadIdx.x; c < dv; c += DT) {
      T O = 0;
      for (int s = 0; s < nsplit; s++)
        if (p0[s * step] != -INFINITY) O += ex(p0[s * step] - M) * p0[s * step + 2 + c];
      ((T *)P.out)[x * dv + c] = L == 0 ? (T)0 : O / L;
    }
    if (threadIdx.x == 0 && P.lse) ((T *)P.lse)[x] = L == 0 ? (T)-INFINITY : M + lg(L);
  }
}

template <typename T>
static int decode (const qkv_attn_plan &P) {
  static int sms = -1;
  if (sms < 0) {
    int dev;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  /* blocks for every SM 8 times over (a warp has one key's loads in
     flight at a time: the SMs need many warps to cover memory's latency),
     no split under SPLIT_MIN keys */
  int64_t nsplit = 1, most = P.nk / SPLIT_MIN;
  if (P.nbatch < 8 * (int64_t)sms && most > 1) {
    nsplit = (8 * sms + P.nbatch - 1) / P.nbatch;
    nsplit = nsplit < most ? nsplit : most;
  }
  int64_t klen = (P.nk + nsplit - 1) / nsplit;
  nsplit = (P.nk + klen - 1) / klen;
  if (nsplit > INT_MAX / 2) return QKV_EINTERNAL;
  size_t smem = ((size_t)(P.nq * P.dk) + 2 * NW * DQ + (size_t)(NW * DQ * P.dv)) * sizeof(T);
  void (*kernel)(qkv_attn_plan, int, int64_t, T *) = decode_kernel<T>;
  if (smem > 48 * 1024)
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int64_t units = P.nbatch * nsplit;
  unsigned grid = (unsigned)(units < INT_MAX ? units : INT_MAX);
  T *part = NULL;
  if (nsplit > 1 &&
      (part = (T *)qkv_cu_alloc((size_t)(units * P.nq * (P.dv + 2)) * sizeof(T))) == NULL)
    return QKV_ENOMEM;
  kernel<<<grid, DT, smem>>>(P, (int)nsplit, klen, part);
  launchCheck("decode_kernel");
  if (nsplit > 1) {
    int64_t rows = P.nbatch * P.nq;
    decode_merge<T><<<(unsigned)(rows < INT_MAX ? rows : INT_MAX), DT>>>(P, (int)nsplit, part);
    launchCheck("decode_merge");
  }
  qkv_cu_free(part);
  return QKV_OK;
}

int qkv_cu_attention_decode (const qkv_attn_plan &P) {
  return P.dtype == QKV_F32 ? decode<float>(P) : decode<double>(P);
}
