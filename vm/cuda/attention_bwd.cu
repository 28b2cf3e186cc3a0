/*
** attention_bwd.cu -- the fused attention's backward on the GPU, the
** gradients vm/cpu/attention_bwd.c computes, through whole score matrices
** in scratch and cuBLAS products rather than the CPU's tiles, in float32
** and float64; bfloat16 and float16 go to the tensor cores' backward
** (attention_mma_bwd.cu), or back to the caller for float32 copies.
**
** Sizes: q (B, nq, dk), k (B, nk, dk), v (B, nk, dv), o and go (B, nq, dv),
** and dq, dk, dv of the inputs' shapes, all contiguous (B the batch dims
** flattened); mask bool (B..., nq, nk) with any strides, or NULL.  Query i
** keeps key j where the mask is true and, under causal, j <= i + nk - nq.
**
** A chunk of the batch at a time (whole items while ~256 MiB of scratch
** holds two nq x nk score matrices each, else one item's queries a block of
** rows at a time; under a block mask blocks of at most BAND_ROWS rows, each
** over the keys from the first to the last block its rows keep: key_window):
**   S  = scale Q K^T                     (cuBLAS)
**   P  = exp(S - lse) per row, masked    (rows_kernel: a warp a row, which
**        also takes D = dO . O; a row with no key kept, lse = -inf, is 0;
**        lse is the forward's where it is given, else computed here)
**   dV (+)= P^T dO,  dP = dO V^T         (cuBLAS)
**   dS = P (dP - D)                      (ds_kernel, in dP's place)
**   dQ = scale dS K, dK (+)= scale dS^T Q  (cuBLAS)
** dK and dV add up over the row blocks of an item (beta 1 after the first).
** Row-major products go to cuBLAS as their transposes: C^T = op(B)^T op(A)^T.
** With score_mod/mask_mod programs (qkv_cuda_attention_mods_backward) two
** steps of mods.cu join: S becomes the new scores before the rows (empty
** blocks and dropped keys -inf), and after dS, S = scale Q K^T again, from
** which dS gets times the derivative by the score and the captured tensors'
** gradient sums their part (atomics on doubles).
*/
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attention.cuh"
#include "exlog.cuh"
#include "cudnn.h"
#include "mods.cuh"
#include "../common/layout.h"

#define THREADS 256
#define SCRATCH ((size_t)256 << 20)   /* bytes of S and dP at most, roughly */

/* a chunk of the plan: items [b0, b0 + nb), query rows [i0, i0 + rq) of
   each, keys [k0, k0 + kn) (mods.cuh) */
typedef qkv_cu_rows chunk;

/* ---- kernels ---- */

__device__ static double warp_sum (double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/*
** One warp a row of the chunk (nb rq rows of kn scores at s): lse is the
** forward's (fwd, (B, nq), when given), else the masked scores' max (NaN
** skipped, as the CPU's) and sum of exp(x - max) give it (-inf when the
** sum is not above 0: every key excluded, or a NaN); then P = exp(S - lse)
** in S's place, 0 for an excluded key.  Lane j takes columns j, j + 32,
** ... in every pass, so it reads back only what it wrote.  Also D = dO . O.
*/
template <typename T>
__global__ void rows_kernel (T *s, double *lse, double *D, const T *fwd, qkv_attn_plan P,
                             chunk C) {
  const int lane = threadIdx.x % 32;
  const T ninf = -(T)INFINITY;
  int64_t nrows = C.nb * C.rq, nk = C.kn;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int64_t nw = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t row = w; row < nrows; row += nw) {      /* the same in a warp */
    int64_t b = C.b0 + row / C.rq, i = C.i0 + row % C.rq;
    T *sr = s + row * nk;
    const unsigned char *mk = NULL;
    if (P.has_mask) mk = (const unsigned char *)P.mask.base + qkv_attn_batch_offset(&P, &P.mask, b);
    T mx = ninf;
    for (int64_t j = lane; j < nk; j += 32) {
      T x = sr[j];
      if (!qkv_attn_keeps(&P, mk, i, C.k0 + j)) sr[j] = x = ninf;
      mx = x > mx ? x : mx;
    }
    double L;
    if (fwd) {
      L = (double)fwd[b * P.nq + i];
    } else {
      for (int k = 16; k > 0; k >>= 1) {
        T y = __shfl_xor_sync(0xffffffffu, mx, k);
        mx = y > mx ? y : mx;
      }
      double l = 0;
      if (mx != ninf)
        for (int64_t j = lane; j < nk; j += 32)
          if (sr[j] != ninf) l += (double)ex(sr[j] - mx);
      l = warp_sum(l);
      L = l > 0 ? (double)mx + log(l) : -INFINITY;
    }
    T Lt = (T)L;
    for (int64_t j = lane; j < nk; j += 32)
      sr[j] = L == -INFINITY || sr[j] == ninf ? (T)0 : ex(sr[j] - Lt);
    /* D = dO . O over the row's dv features */
    const T *orow = (const T *)P.o.base + ((b * P.nq) + i) * P.dv;
    const T *grow = (const T *)P.go.base + ((b * P.nq) + i) * P.dv;
    double dd = 0;
    for (int64_t c = lane; c < P.dv; c += 32) dd += (double)grow[c] * (double)orow[c];
    dd = warp_sum(dd);
    if (lane == 0) {
      lse[row] = L;
      D[row] = dd;
    }
  }
}

/* dp = P (dP - D) over n elements, rows nk long; a row with no key is 0 */
template <typename T>
__global__ void ds_kernel (const T *p, T *dp, const double *lse, const double *D,
                           int64_t n, int64_t nk) {
  QKV_CU_LOOP(x, n) {
    int64_t row = x / nk;
    dp[x] = lse[row] == -INFINITY ? (T)0 : p[x] * (dp[x] - (T)D[row]);
  }
}

/* ---- the products ---- */

/* One row-major operand of a batch: element (i, j) of item b at
   p + b stride + i ld + j; read transposed when t. */
template <typename T>
struct mat {
  const T *p;
  int64_t ld, stride;
  int t;
};

/*
** C (m x n, rows c.ld apart) = alpha op(A) op(B) + beta C for count items,
** row-major, as C^T = op(B)^T op(A)^T in cuBLAS's column-major terms (a
** row-major X read column-major is X^T).  k > 0; every size fits int.
*/
template <typename T>
static int gemm (int64_t m, int64_t n, int64_t k, double alpha, mat<T> A, mat<T> B,
                 double beta, T *c, int64_t ldc, int64_t sc, int64_t count) {
  cublasHandle_t h = qkv_cu_blas();
  if (h == NULL) return QKV_ECUDA;
  T al = (T)alpha, be = (T)beta;
  cublasCheck(qkv_cu_gemm_batched(h, B.t ? CUBLAS_OP_T : CUBLAS_OP_N, A.t ? CUBLAS_OP_T : CUBLAS_OP_N,
                           (int)n, (int)m, (int)k, &al, B.p, (int)B.ld, B.stride,
                           A.p, (int)A.ld, A.stride, &be, c, (int)ldc, sc, (int)count));
  return QKV_OK;
}

/* ---- a chunk ---- */

/* the gradients of chunk C, with scratch s, dp (C.nb C.rq x C.kn each)
   and lse, D (C.nb C.rq each); zeroed: dK and dV were zeroed before the
   first chunk (the chunks take key windows) */
template <typename T>
static int one_chunk (const qkv_attn_plan &P, const qkv_cu_mods *M, const chunk &C, T *s, T *dp,
                      double *lse, double *D, bool zeroed) {
  int err;
  /* the chunk's keys: kn of them from k0, rows kn scores long */
  int64_t nq = P.nq, nk = P.nk, kn = C.kn, dk = P.dk, dv = P.dv, rq = C.rq, nb = C.nb;
  int64_t rows = nb * rq, ns = rq * kn;
  const T *q = (const T *)P.q.base + (C.b0 * nq + C.i0) * dk;
  const T *k = (const T *)P.k.base + (C.b0 * nk + C.k0) * dk;
  const T *v = (const T *)P.v.base + (C.b0 * nk + C.k0) * dv;
  const T *go = (const T *)P.go.base + (C.b0 * nq + C.i0) * dv;
  T *dq = (T *)P.gq + (C.b0 * nq + C.i0) * dk, *dkk = (T *)P.gk + (C.b0 * nk + C.k0) * dk;
  T *dvv = (T *)P.gv + (C.b0 * nk + C.k0) * dv;
  double acc = C.i0 > 0 || zeroed ? 1 : 0;   /* dK, dV add to the earlier row blocks' */
  mat<T> Q = {q, dk, nq * dk, 0}, K = {k, dk, nk * dk, 0}, V = {v, dv, nk * dv, 0};
  mat<T> GO = {go, dv, nq * dv, 0}, S = {s, kn, ns, 0}, DS = {dp, kn, ns, 0};
  /* S = scale Q K^T (no features: zeros, as BLAS gives) */
  K.t = 1;
  if (dk > 0) {
    if ((err = gemm<T>(rq, kn, dk, P.scale, Q, K, 0, s, kn, ns, nb)) != QKV_OK) return err;
  } else {
    cudaCheck(cudaMemsetAsync(s, 0, (size_t)(rows * kn) * sizeof(T), 0));
  }
  K.t = 0;
  if (M && (err = qkv_cu_mods_scores<T>(P, *M, s, C)) != QKV_OK) return err;
  rows_kernel<T><<<qkv_cu_blocks(rows * 32, THREADS), THREADS>>>(
      s, lse, D, (const T *)P.lse, P, C);
  launchCheck("rows_kernel");
  if (dv > 0) {
    S.t = 1;                                           /* dV (+)= P^T dO */
    if ((err = gemm<T>(kn, dv, rq, 1, S, GO, acc, dvv, dv, nk * dv, nb)) != QKV_OK) return err;
    S.t = 0;
    V.t = 1;                                           /* dP = dO V^T */
    if ((err = gemm<T>(rq, kn, dv, 1, GO, V, 0, dp, kn, ns, nb)) != QKV_OK) return err;
  } else {
    cudaCheck(cudaMemsetAsync(dp, 0, (size_t)(rows * kn) * sizeof(T), 0));
  }
  ds_kernel<T><<<qkv_cu_blocks(rows * kn, THREADS), THREADS>>>(s, dp, lse, D, rows * kn, kn);
  launchCheck("ds_kernel");
  if (M) {                              /* S again, then dS by the scores */
    K.t = 1;
    if (dk > 0) {
      if ((err = gemm<T>(rq, kn, dk, P.scale, Q, K, 0, s, kn, ns, nb)) != QKV_OK) return err;
    } else {
      cudaCheck(cudaMemsetAsync(s, 0, (size_t)(rows * kn) * sizeof(T), 0));
    }
    K.t = 0;
    if ((err = qkv_cu_mods_grads<T>(P, *M, s, dp, C)) != QKV_OK) return err;
  }
  if (dk == 0) return QKV_OK;
  /* dQ = scale dS K, dK (+)= scale dS^T Q */
  if ((err = gemm<T>(rq, dk, kn, P.scale, DS, K, 0, dq, dk, nq * dk, nb)) != QKV_OK) return err;
  DS.t = 1;
  return gemm<T>(kn, dk, rq, P.scale, DS, Q, acc, dkk, dk, nk * dk, nb);
}

/*
** Chunk C's keys under a block mask (kinds, the host's copy, of M's
** blocks): from the first to the last key of a block that one of its
** queries' blocks does not leave empty, below the causal end of its last
** query; a window's rows then take the window's keys, not the row.  kn 0:
** none.
*/
static void key_window (const qkv_attn_plan &P, const qkv_attn_mods *M, const int32_t *kinds,
                        chunk *C) {
  int64_t end = qkv_attn_key_end(&P, C->i0, C->rq), lo = P.nk, hi = 0;
  for (int64_t t = C->b0; t < C->b0 + C->nb; t++) {
    const int32_t *k = kinds + qkv_mod_bh(M, t) * M->nqb * M->nkb;
    for (int64_t a = C->i0 / M->bq; a <= (C->i0 + C->rq - 1) / M->bq; a++)
      for (int64_t c = 0; c < M->nkb; c++)
        if (k[a * M->nkb + c] != QKV_BLOCK_EMPTY) {
          lo = c * M->bk < lo ? c * M->bk : lo;
          hi = (c + 1) * M->bk > hi ? (c + 1) * M->bk : hi;
        }
  }
  hi = hi < end ? hi : end;
  C->k0 = lo < hi ? lo : 0;
  C->kn = lo < hi ? hi - lo : 0;
}

/* the chunks: cb items by rq rows, each over the whole rows or, under a
   block mask (kinds not NULL: its kinds on the host), over its key window,
   dQ, dK and dV zeroed first then */
template <typename T>
static int chunks (const qkv_attn_plan &P, const qkv_cu_mods *M, const qkv_attn_mods *H,
                   const int32_t *kinds, int64_t cb, int64_t rq, T *s, T *dp, double *lse,
                   double *D) {
  chunk C;
  bool zeroed = kinds != NULL;
  if (zeroed) {
    size_t e = sizeof(T), nq = (size_t)(P.nbatch * P.nq), nk = (size_t)(P.nbatch * P.nk);
    cudaCheck(cudaMemsetAsync(P.gq, 0, nq * (size_t)P.dk * e, 0));
    cudaCheck(cudaMemsetAsync(P.gk, 0, nk * (size_t)P.dk * e, 0));
    cudaCheck(cudaMemsetAsync(P.gv, 0, nk * (size_t)P.dv * e, 0));
  }
  for (C.b0 = 0; C.b0 < P.nbatch; C.b0 += cb)
    for (C.i0 = 0; C.i0 < P.nq; C.i0 += rq) {
      C.nb = P.nbatch - C.b0 < cb ? P.nbatch - C.b0 : cb;
      C.rq = P.nq - C.i0 < rq ? P.nq - C.i0 : rq;
      C.k0 = 0;
      C.kn = P.nk;
      if (kinds) key_window(P, H, kinds, &C);
      if (C.kn == 0) continue;                 /* no key: nothing reaches q, k or v */
      int err = one_chunk<T>(P, M, C, s, dp, lse, D, zeroed);
      if (err != QKV_OK) return err;
    }
  return QKV_OK;
}

/* rows a chunk under a block mask: its window's rows, few enough that they
   cut the keys to the window, many enough that the products stay large */
#define BAND_ROWS 2048

/* the scratch for the largest chunk, freed on every path; H: the host's
   mods (their kinds copied back here), or NULL */
template <typename T>
static int run (const qkv_attn_plan &P, const qkv_cu_mods *M, const qkv_attn_mods *H) {
  size_t row = 2 * (size_t)P.nk * sizeof(T) + 2 * sizeof(double);
  int64_t fit = (int64_t)(SCRATCH / row), cb = 1, rq = P.nq;
  if (fit < 1) fit = 1;
  /* a block mask's kinds on the host, and its chunks of rows */
  int32_t *kinds = NULL;
  if (H && H->kindt) {
    size_t n = (size_t)(H->kb * H->kh * H->nqb * H->nkb) * sizeof(int32_t);
    if ((kinds = (int32_t *)malloc(n ? n : 1)) == NULL) return QKV_ENOMEM;
    cudaError_t e = cudaMemcpy(kinds, qkv_cu_data(H->kindt), n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      free(kinds);
      return qkv_cu_fail_cuda("cudaMemcpy of the block kinds", __FILE__, __LINE__, e);
    }
    static int64_t band = -1;         /* QKV_CUDA_BWD_ROWS: the tests' small chunks */
    if (band < 0) band = getenv("QKV_CUDA_BWD_ROWS") ? atoll(getenv("QKV_CUDA_BWD_ROWS")) : 0;
    int64_t want = band > 0 ? band : BAND_ROWS;
    want = (want + H->bq - 1) / H->bq * H->bq;
    if (want < rq) rq = want;
  }
  if (fit >= rq) {
    cb = fit / rq;
    cb = cb < P.nbatch ? cb : P.nbatch;
    cb = cb < INT_MAX ? cb : INT_MAX;
  } else {
    rq = fit;
  }
  size_t nrows = (size_t)(cb * rq), ns = nrows * (size_t)P.nk;
  T *s = (T *)qkv_cu_alloc(ns * sizeof(T)), *dp = NULL;
  double *stats = NULL;
  int err = QKV_ENOMEM;
  if (s && (dp = (T *)qkv_cu_alloc(ns * sizeof(T))) != NULL &&
      (stats = (double *)qkv_cu_alloc(2 * nrows * sizeof(double))) != NULL)
    err = chunks<T>(P, M, H, kinds, cb, rq, s, dp, stats, stats + nrows);
  qkv_cu_free(stats);
  qkv_cu_free(dp);
  qkv_cu_free(s);
  free(kinds);
  return err;
}

/* ---- the entry ---- */

static int contiguous (const qkv_tensor *t) {
  return qkv_cu_numel(t) == 0 || qkv_cu_contiguous(t);
}

static int zero (qkv_tensor *t) {
  size_t n = (size_t)qkv_cu_numel(t) * qkv_dtype_bytes(t->dtype);
  if (n) cudaCheck(cudaMemsetAsync(qkv_cu_data(t), 0, n, 0));
  return QKV_OK;
}

/* M: score_mod/mask_mod programs, or NULL */
static int backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv, const qkv_tensor *q,
                     const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *o,
                     const qkv_tensor *go, const qkv_tensor *mask, int causal, double scale,
                     const qkv_tensor *lse, qkv_attn_mods *M) {
  qkv_dtype dt = q->dtype;
  int half = qkv_is_half(dt);
  if (dt != QKV_F32 && dt != QKV_F64 && !half) return QKV_EDTYPE;
  qkv_attn_plan P;
  int err = qkv_attn_plan_backward(&P, dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse,
                                   qkv_cu_attn_data);
  if (err != QKV_OK) return err;
  if (P.kvg != 1) return QKV_EINTERNAL;         /* grouped: the dispatch sums them */
  /* the halves: cuDNN's fused backward first, where the plugin has it
     (never for a program) */
  if (half && !M && (err = qkv_cu_cudnn_attention_backward
                       ? qkv_cu_cudnn_attention_backward(P, dq, dk, dv, q, k, v, o, go, lse)
                       : qkv_cu_decline("cudnn", NO_CUDNN)) != QKV_EDTYPE)
    return err;
  if (!half && !M) qkv_cu_attention_path = "fp32";
  const qkv_tensor *all[8] = {dq, dk, dv, q, k, v, o, go};
  for (int i = 0; i < 8; i++)
    if (!contiguous(all[i])) return QKV_EINTERNAL;
  if (lse && (lse->dtype != (half ? QKV_F32 : dt) || !contiguous(lse))) return QKV_EINTERNAL;
  if (P.nbatch == 0) return QKV_OK;
  if (P.nq == 0 || P.nk == 0) {                /* nothing reaches any input */
    err = zero(dq);
    if (err == QKV_OK) err = zero(dk);
    return err == QKV_OK ? zero(dv) : err;
  }
  /* float16 and bfloat16 on the tensor cores (attention_mma_bwd.cu),
     which say QKV_EDTYPE for what they do not take: float32 copies then */
  if (half) return M ? qkv_cu_attention_mma_bwd_mods(P, M) : qkv_cu_attention_mma_bwd(P);
  /* cuBLAS counts in int */
  if (!qkv_fits_int(P.nq) || !qkv_fits_int(P.nk) || !qkv_fits_int(P.dk) || !qkv_fits_int(P.dv))
    return QKV_EINTERNAL;
  if (M == NULL) return dt == QKV_F32 ? run<float>(P, NULL, NULL) : run<double>(P, NULL, NULL);
  qkv_cu_mods D;
  if ((err = qkv_cu_mods_up(M, &P, &D)) != QKV_OK) return err;
  err = dt == QKV_F32 ? run<float>(P, &D, M) : run<double>(P, &D, M);
  if (err == QKV_OK) err = qkv_cu_mods_down(M, D);
  qkv_cu_free(D.dev);
  return err;
}

int qkv_cuda_attention_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                 const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                 const qkv_tensor *o, const qkv_tensor *go,
                                 const qkv_tensor *mask, int causal, double scale,
                                 const qkv_tensor *lse) {
  return backward(dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse, NULL);
}

/* float32 and float64, bfloat16 and float16 on the tensor cores where
   they take the call (QKV_EDTYPE otherwise: float32 copies); the captured
   tensors' gradients added into M's float64 sums */
int qkv_cuda_attention_mods_backward (qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                      const qkv_tensor *q, const qkv_tensor *k,
                                      const qkv_tensor *v, const qkv_tensor *o,
                                      const qkv_tensor *go, const qkv_tensor *mask, int causal,
                                      double scale, const qkv_tensor *lse, qkv_attn_mods *M) {
  return backward(dq, dk, dv, q, k, v, o, go, mask, causal, scale, lse, M);
}
