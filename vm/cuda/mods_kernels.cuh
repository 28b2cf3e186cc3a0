/*
** mods_kernels.cuh -- the kernels of attention's score_mod and mask_mod
** programs (common/mods.h) on the GPU, written once for two evaluators of
** a program:
**   qkv_mods_interp<NV>  reads the program from device memory and runs it
**                        instruction by instruction through a switch, its
**                        values in a per-thread array of NV doubles (local
**                        memory); mods.cu compiles it with the plugin, for
**                        any program;
**   qkv_mods_gen         the program as straight-line code, made for one
**                        program by mods_gen.cu and compiled at run time
**                        with NVRTC (jit.cu): no dispatch, constant
**                        operands and the values in registers.
** An evaluator E gives: E::NV, the values a thread keeps; E::run, the
** values the outputs in want need, of the instructions that read j (js)
** or of those that do not; E::has(M, o), whether output o exists; E::get,
** output o's value; E::grads, each derivative by a loaded value times g
** added into its captured tensor's sum; E::DSCORE_ONE, whether the
** derivative by the score is known to be the constant 1 (score + a bias).
**
** This file is compiled three ways (the plugin with nvcc, NVRTC's source
** at run time, g++ under the host simulation), so it includes only the
** shared headers (common/), which NVRTC's run reads as one text
** (embed.py), and uses nothing of cuda.cuh.
**
** What reads neither j nor the score (b, h, a slope[h], doc[i]) runs once
** per thread and key block, the rest per pair.  A LOAD checks each index
** (an integer in 1..size) and on failure records the first failure of
** all threads (atomicCAS on fail_ins) and yields 0; the host then returns
** QKV_EINDEX with M's fail_* filled, as the CPU does.
**
** The forward: a thread a query, a block a tile of the plan's queries
** (QKV_MODS_MT, or the block mask's query blocks), keys in chunks of CK
** with an online softmax, o accumulated in out.  q, k, v are read where
** they lie (the threads of a warp read one key's row: a broadcast).  Key
** blocks that the kinds say are empty are skipped, full ones run no mask,
** partial ones the mask; causal and the bool mask tensor as attention.cu.
** The backward's steps on whole score rows (attention_bwd.cu runs them
** between its products) are qkv_mods_scores and qkv_mods_grads.
*/
#ifndef QKV_CUDA_MODS_KERNELS_CUH
#define QKV_CUDA_MODS_KERNELS_CUH

#include "exlog.cuh"
#include "../common/attention_plan.h"
#include "../common/mods.h"

#define QKV_MODS_MT 128              /* the forward's threads a block: a query each */
#define QKV_MODS_THREADS 256         /* the backward's elementwise kernels */
#define QKV_MODS_CK 32               /* keys a chunk of the online softmax */

/* what every kernel takes (one struct, so that a kernel compiled at run
   time is launched with one argument): the plan, the device copy of the
   mods, and for the backward's steps the chunk's scores s and gradients
   ds (T), its items from b0, rq queries from i0, n pairs, keys [k0, k0 +
   kn) a row; for the tensor-core backward its lse, delta and dQ's sums
   (qkv_mma_grads) */
struct qkv_mods_args {
  qkv_attn_plan P;
  qkv_attn_mods *M;
  void *s, *ds;
  int64_t b0, i0, rq, n;
  const float *lse;
  float *delta, *dqacc;
  int64_t k0, kn;
};

/* one pair: its item's b and h, query i, key j (0-based) and score */
struct qkv_mod_pair {
  int64_t b, h, i, j;
  double score;
};

/* ---- what both evaluators share ---- */

/* instruction v, a LOAD of captured tensor a at the n indices ix: the
   element, checked */
__device__ static inline double qkv_mods_load (qkv_attn_mods *M, int v, int a, const double *ix,
                                               int n) {
  const qkv_mod_cap *C = &M->cap[a];
  int64_t off = 0;
  for (int d = 0; d < n; d++) {
    double k = ix[d];
    /* 1 <= k <= size, an integer (NaN fails the first test) */
    if (!(k >= 1 && k <= (double)C->size[d]) || k != floor(k)) {
      if (atomicCAS(&M->fail_ins, -1, v) == -1) {
        M->fail_arg = d;
        M->fail_val = k;
      }
      return 0;
    }
    off += ((int64_t)k - 1) * C->stride[d];
  }
  return qkv_mod_read(C->base + off * (int64_t)qkv_dtype_bytes(C->dtype), C->dtype);
}

/* g added into captured tensor a's gradient sum (contiguous, float64) at
   the n indices ix, where they are in range (else the LOAD recorded it) */
__device__ static inline void qkv_mods_grad_add (qkv_attn_mods *M, int a, const double *ix, int n,
                                                 double g) {
  const qkv_mod_cap *C = &M->cap[a];
  if (C->grad == NULL) return;
  int64_t off = 0, span = 1;
  for (int d = n - 1; d >= 0; d--) {
    double k = ix[d];
    if (!(k >= 1 && k <= (double)C->size[d])) return;
    off += ((int64_t)k - 1) * span;
    span *= C->size[d];
  }
  atomicAdd(C->grad + off, g);
}

/* exp, tanh or sigmoid (op) of a in float32, widened: the compiled
   kernels' score path for float32 and the halves (mods_gen.cu), as the
   CPU's float32 kernels take them, where libm's double tanh alone would
   cost tens of float64 instructions a score */
__device__ static inline double qkv_mods_apply_f (int op, double a) {
  const float x = (float)a;
  return op == QKV_MOD_EXP ? expf(x) : op == QKV_MOD_TANH ? tanhf(x) : 1.0f / (1.0f + expf(-x));
}

/* the value of a leaf op for pair e (CONST and LOAD are the evaluators') */
__device__ static inline double qkv_mods_leaf (int op, const qkv_mod_pair &e) {
  return op == QKV_MOD_SCORE ? e.score : op == QKV_MOD_B ? (double)(e.b + 1)
       : op == QKV_MOD_H ? (double)(e.h + 1) : op == QKV_MOD_I ? (double)(e.i + 1)
       : (double)(e.j + 1);
}

/* ---- the interpreter ---- */

template <int N>
struct qkv_mods_interp {
  static const bool MODS = true;
  static const bool DSCORE_ONE = false;
  static const int NV = N;
  __device__ static void run (qkv_attn_mods *M, double *val, int want, bool js,
                              const qkv_mod_pair &e) {
    const qkv_mod_prog *G = M->prog;
    for (int v = 0; v < G->n; v++) {
      if (!(G->need[v] & want) || ((G->dep[v] & QKV_MOD_DEP_J) != 0) != js) continue;
      const qkv_mod_ins x = G->ins[v];
      double r;
      switch (x.op) {
        case QKV_MOD_SCORE: case QKV_MOD_B: case QKV_MOD_H: case QKV_MOD_I: case QKV_MOD_J:
          r = qkv_mods_leaf(x.op, e);
          break;
        case QKV_MOD_CONST: r = x.k; break;
        case QKV_MOD_LOAD: {
          double ix[QKV_MAXDIM];
          for (int d = 0; d < x.c; d++) ix[d] = val[G->args[x.b + d]];
          r = qkv_mods_load(M, v, x.a, ix, x.c);
          break;
        }
        /* qkv_cu_mods_up made every operand a value: b, c repeat a */
        default: r = qkv_mod_apply(x.op, val[x.a], val[x.b], val[x.c]); break;
      }
      val[v] = r;
    }
  }
  __device__ static bool has (const qkv_attn_mods *M, int o) { return M->prog->out[o] >= 0; }
  __device__ static double get (const qkv_attn_mods *M, const double *val, int o) {
    return val[M->prog->out[o]];
  }
  __device__ static void grads (qkv_attn_mods *M, const double *val, double g) {
    const qkv_mod_prog *G = M->prog;
    for (int o = QKV_MOD_OUT_DLOAD; o < QKV_MOD_NOUT; o++) {
      if (G->out[o] < 0) continue;
      const qkv_mod_ins l = G->ins[G->dload[o]];
      double ix[QKV_MAXDIM];
      for (int d = 0; d < l.c; d++) ix[d] = val[G->args[l.b + d]];
      qkv_mods_grad_add(M, l.a, ix, l.c, g * val[G->out[o]]);
    }
  }
};

/* no program: plain attention (attention.cu's kernel) */
struct qkv_mods_none {
  static const bool MODS = false;
  static const bool DSCORE_ONE = false;
  static const int NV = 1;
  __device__ static void run (qkv_attn_mods *, double *, int, bool, const qkv_mod_pair &) {}
  __device__ static bool has (const qkv_attn_mods *, int) { return false; }
  __device__ static double get (const qkv_attn_mods *, const double *, int) { return 0; }
  __device__ static void grads (qkv_attn_mods *, const double *, double) {}
};

/* ---- the kernels' steps ---- */

/* the kind (QKV_BLOCK_*) of the block holding query i, key j of item t */
template <class E>
__device__ static int qkv_mods_kind (const qkv_attn_mods *M, int64_t t, int64_t i, int64_t j) {
  if (M->kinds == NULL) return E::has(M, QKV_MOD_OUT_MASK) ? QKV_BLOCK_PARTIAL : QKV_BLOCK_FULL;
  return M->kinds[(qkv_mod_bh(M, t) * M->nqb + i / M->bq) * M->nkb + j / M->bk];
}

/* the kind of the tile of queries [i0, i0 + nq) and keys [j0, j0 + nk)
   of item t, which may cover several blocks: empty where all are, full
   where all are, else partial */
template <class E>
__device__ static int qkv_mods_tile_kind (const qkv_attn_mods *M, int64_t t, int64_t i0, int nq,
                                          int64_t j0, int nk) {
  if (M->kinds == NULL) return qkv_mods_kind<E>(M, t, i0, j0);
  int all = -1;
  for (int64_t qb = i0 / M->bq; qb <= (i0 + nq - 1) / M->bq; qb++)
    for (int64_t kb = j0 / M->bk; kb <= (j0 + nk - 1) / M->bk; kb++) {
      int k = qkv_mods_kind<E>(M, t, qb * M->bq, kb * M->bk);
      all = all < 0 || all == k ? k : QKV_BLOCK_PARTIAL;
    }
  return all;
}

/* the outputs a block of that kind computes: the score, and the mask
   where it is partial */
template <class E>
__device__ static int qkv_mods_want (const qkv_attn_mods *M, int kind) {
  return (E::has(M, QKV_MOD_OUT_SCORE) ? QKV_MOD_WANT_SCORE : 0) |
         (kind == QKV_BLOCK_PARTIAL && E::has(M, QKV_MOD_OUT_MASK) ? QKV_MOD_WANT_MASK : 0);
}

/* x after the outputs in want (run on the pair): the new score, -inf
   where the mask drops the key */
template <class E, typename T>
__device__ static T qkv_mods_applied (const qkv_attn_mods *M, const double *val, int want, T x) {
  if (E::has(M, QKV_MOD_OUT_SCORE)) x = (T)E::get(M, val, QKV_MOD_OUT_SCORE);
  if ((want & QKV_MOD_WANT_MASK) && E::get(M, val, QKV_MOD_OUT_MASK) == 0) x = -(T)INFINITY;
  return x;
}

/* the forward, run by a block of QKV_MODS_MT threads */
template <typename T, class E>
__device__ static void qkv_mods_forward (const qkv_attn_plan &P, qkv_attn_mods *M) {
  const int CK = QKV_MODS_CK;
  const T ninf = -(T)INFINITY, scale = (T)P.scale;
  const int64_t KB = M->kinds ? M->bk : CK;    /* key blocks: one kind each */
  double val[E::NV];
  for (int64_t item = blockIdx.x; item < P.items; item += gridDim.x) {
    int64_t t, i0, boff[4];
    const int bq = qkv_attn_item(&P, item, &t, &i0);
    if ((int)threadIdx.x >= bq) continue;      /* no barrier below: idle threads leave */
    const int64_t i = i0 + threadIdx.x, jend = qkv_attn_key_end(&P, i0, bq);
    qkv_attn_batch_offsets(&P, t, boff);
    const T *q = (const T *)P.q.base + boff[0] + i * P.q.rs;
    const T *k = (const T *)P.k.base + boff[1], *v = (const T *)P.v.base + boff[2];
    const unsigned char *mk = P.has_mask ? (const unsigned char *)P.mask.base + boff[3] : NULL;
    T *o = (T *)P.out + (t * P.nq + i) * P.dv;
    for (int64_t d = 0; d < P.dv; d++) o[d] = 0;
    qkv_mod_pair e = {t / M->heads, t % M->heads, i, 0, 0};
    T m = ninf, l = 0;
    for (int64_t k0 = 0; k0 < jend; k0 += KB) {
      const int kind = qkv_mods_kind<E>(M, t, i0, k0);  /* the tile is one block of queries */
      if (kind == QKV_BLOCK_EMPTY) continue;   /* nothing kept: never computed */
      const int want = qkv_mods_want<E>(M, kind);
      if (want) E::run(M, val, want, false, e);
      const int64_t kend = k0 + KB < jend ? k0 + KB : jend;
      for (int64_t j0 = k0; j0 < kend; j0 += CK) {
        const int ck = (int)(kend - j0 < CK ? kend - j0 : CK);
        T s[QKV_MODS_CK], mx = ninf;
        for (int c = 0; c < ck; c++) {
          const int64_t j = j0 + c;
          T x = ninf;
          if (qkv_attn_keeps(&P, mk, i, j)) {  /* the program only where the key can stay */
            const T *kj = k + j * P.k.rs;
            x = 0;
            for (int64_t d = 0; d < P.dk; d++) x += q[d * P.q.cs] * kj[d * P.k.cs];
            x *= scale;
            if (want) {
              e.j = j;
              e.score = (double)x;
              E::run(M, val, want, true, e);
              x = qkv_mods_applied<E, T>(M, val, want, x);
            }
          }
          s[c] = x;
          mx = x > mx ? x : mx;                /* the max skips NaN, as the CPU's */
        }
        const T mnew = mx > m ? mx : m;
        const T alpha = mnew == m ? (T)1 : ex(m - mnew);      /* 0 at first */
        T sum = 0;
        for (int c = 0; c < ck; c++) {
          s[c] = s[c] == ninf ? (T)0 : ex(s[c] - mnew);      /* NaN stays */
          sum += s[c];
        }
        l = l * alpha + sum;
        m = mnew;
        if (sum == 0 && alpha == 1) continue;  /* o unchanged */
        for (int64_t d = 0; d < P.dv; d++) {
          T acc = o[d] * alpha;
          for (int c = 0; c < ck; c++) acc += s[c] * v[(j0 + c) * P.v.rs + d * P.v.cs];
          o[d] = acc;
        }
      }
    }
    /* out = O / l, zeros where no key was kept; lse = m + log l, -inf there */
    const T rinv = l == 0 ? (T)0 : (T)(1.0 / (double)l);
    for (int64_t d = 0; d < P.dv; d++) o[d] = l == 0 ? (T)0 : o[d] * rinv;
    if (P.lse) ((T *)P.lse)[t * P.nq + i] = l == 0 ? ninf : m + lg(l);
  }
}

/* pair x of a chunk's rows (A's: items from b0, rq queries from i0 each,
   keys k0 .. k0 + kn - 1 a row) */
__device__ static inline qkv_mod_pair qkv_mods_pair_of (const qkv_mods_args &A,
                                                        const qkv_attn_mods *M, int64_t x,
                                                        int64_t *t) {
  int64_t row = x / A.kn;
  *t = A.b0 + row / A.rq;
  qkv_mod_pair e = {*t / M->heads, *t % M->heads, A.i0 + row % A.rq, A.k0 + x % A.kn, 0};
  return e;
}

/* the grid-stride loop of the backward's steps */
#define QKV_MODS_LOOP(x, n) \
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < (n); \
       x += (int64_t)gridDim.x * blockDim.x)

/* s (scale q k^T) becomes the new scores, -inf where the mask, the mask
   tensor, causal or an empty block drops the key */
template <typename T, class E>
__device__ static void qkv_mods_scores (const qkv_mods_args &A) {
  const qkv_attn_plan &P = A.P;
  qkv_attn_mods *M = A.M;
  T *s = (T *)A.s;
  double val[E::NV];
  QKV_MODS_LOOP(x, A.n) {
    int64_t t;
    qkv_mod_pair e = qkv_mods_pair_of(A, M, x, &t);
    int kind = qkv_mods_kind<E>(M, t, e.i, e.j);
    const unsigned char *mk =
        P.has_mask ? (const unsigned char *)P.mask.base + qkv_attn_batch_offset(&P, &P.mask, t)
                   : NULL;
    if (kind == QKV_BLOCK_EMPTY || !qkv_attn_keeps(&P, mk, e.i, e.j)) {
      s[x] = -(T)INFINITY;
      continue;
    }
    int want = qkv_mods_want<E>(M, kind);
    if (want == 0) continue;
    e.score = (double)s[x];
    E::run(M, val, want, false, e);
    E::run(M, val, want, true, e);
    s[x] = qkv_mods_applied<E, T>(M, val, want, s[x]);
  }
}

/* s is scale q k^T again and ds the gradient by the new scores: adds ds
   times each derivative by a loaded value into the captured tensors'
   sums, then makes ds the gradient by the scores (0 stays 0) */
template <typename T, class E>
__device__ static void qkv_mods_grads (const qkv_mods_args &A) {
  qkv_attn_mods *M = A.M;
  const T *s = (const T *)A.s;
  T *ds = (T *)A.ds;
  double val[E::NV];
  QKV_MODS_LOOP(x, A.n) {
    T g = ds[x];
    if (g == 0) continue;                      /* a dropped key, or no gradient */
    int64_t t;
    qkv_mod_pair e = qkv_mods_pair_of(A, M, x, &t);
    e.score = (double)s[x];
    E::run(M, val, QKV_MOD_WANT_GRAD, false, e);
    E::run(M, val, QKV_MOD_WANT_GRAD, true, e);
    E::grads(M, val, (double)g);
    if (E::has(M, QKV_MOD_OUT_DSCORE)) ds[x] = (T)((double)g * E::get(M, val, QKV_MOD_OUT_DSCORE));
  }
}

/* the interpreter's kernels' entry points for evaluator E, as NAME_f and
   NAME_d (float, double; mods.cu); the code that mods_gen.cu makes has
   its own, for one dtype */
#define QKV_MODS_ENTRIES(LINK, E, NAME) \
  LINK __global__ void __launch_bounds__(QKV_MODS_MT) NAME##forward_f (qkv_mods_args A) { \
    qkv_mods_forward<float, E>(A.P, A.M); } \
  LINK __global__ void __launch_bounds__(QKV_MODS_MT) NAME##forward_d (qkv_mods_args A) { \
    qkv_mods_forward<double, E>(A.P, A.M); } \
  LINK __global__ void NAME##scores_f (qkv_mods_args A) { qkv_mods_scores<float, E>(A); } \
  LINK __global__ void NAME##scores_d (qkv_mods_args A) { qkv_mods_scores<double, E>(A); } \
  LINK __global__ void NAME##grads_f (qkv_mods_args A) { qkv_mods_grads<float, E>(A); } \
  LINK __global__ void NAME##grads_d (qkv_mods_args A) { qkv_mods_grads<double, E>(A); }

#endif
