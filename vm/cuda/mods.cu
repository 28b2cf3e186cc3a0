/*
** mods.cu -- attention's score_mod and mask_mod programs (common/mods.h)
** on the GPU, as vm/cpu/mods.c on the CPU: an interpreter.  The program
** goes to device memory once per call; each thread evaluates it for its
** own (query, key) pairs, instruction by instruction through a switch.
** The threads of a warp run the same program on neighbouring pairs, so
** they take the same case of the switch: no divergence, only the
** dispatch's cost, which NVRTC code made from the program would remove
** (the later upgrade; the format was made for it).  Values are doubles in
** a per-thread array (local memory) of SMALL values for a short program
** (the usual mod), else of QKV_MOD_MAXINS: indices stay exact, and a
** float32 score is widened exactly.
**
** What reads neither j nor the score (b, h, a slope[h], doc[i]) runs once
** per thread and key block, the rest per pair.  A LOAD checks each index
** (an integer in 1..size) and on failure records the first failure of
** all threads (atomicCAS on fail_ins) and yields 0; the host then returns
** QKV_EINDEX with M's fail_* filled, as the CPU does.
**
** The forward (forward_kernel): a thread a query, a block a tile of the
** plan's queries (MT, or the block mask's query blocks), keys in chunks
** of CK with an online softmax, o accumulated in out.  q, k, v are read
** where they lie (the threads of a warp read one key's row: a broadcast).
** Key blocks that the kinds say are empty are skipped, full ones run no
** mask, partial ones the mask; causal and the bool mask tensor as
** attention.cu.  The backward's steps on whole score rows are the two
** kernels at the end (attention_bwd.cu runs them between its products).
*/
#include <limits.h>
#include <math.h>
#include <stddef.h>

#include "mods.cuh"

#define MT 128                       /* threads a block: a query each */
#define CK 32                        /* keys a chunk of the online softmax */
#define THREADS 256                  /* the backward's elementwise kernels */
#define SMALL 32                     /* values a thread for a short program */

__device__ static inline float ex (float x) { return expf(x); }
__device__ static inline double ex (double x) { return exp(x); }
__device__ static inline float lg (float x) { return logf(x); }
__device__ static inline double lg (double x) { return log(x); }

/* ---- the evaluator ---- */

/* one pair: its item's b and h, query i, key j (0-based) and score */
struct pair {
  int64_t b, h, i, j;
  double score;
};

/* instruction v, a LOAD: the element its indices name, checked */
__device__ static double load (qkv_attn_mods *M, const qkv_mod_prog *G, const qkv_mod_ins &x,
                               int v, const double *val) {
  const qkv_mod_cap *C = &M->cap[x.a];
  int64_t off = 0;
  for (int d = 0; d < x.c; d++) {
    double k = val[G->args[x.b + d]];
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
  return qkv_mod_read(C->base + off * (int64_t)qkv_cu_elsize(C->dtype), C->dtype);
}

/* the values that the outputs in want need, of the instructions that
   read j (js) or of those that do not */
__device__ static void run (qkv_attn_mods *M, const qkv_mod_prog *G, double *val, int want,
                            bool js, const pair &e) {
  for (int v = 0; v < G->n; v++) {
    if (!(G->need[v] & want) || ((G->dep[v] & QKV_MOD_DEP_J) != 0) != js) continue;
    const qkv_mod_ins x = G->ins[v];
    double r;
    switch (x.op) {
      case QKV_MOD_SCORE: r = e.score; break;
      case QKV_MOD_B: r = (double)(e.b + 1); break;
      case QKV_MOD_H: r = (double)(e.h + 1); break;
      case QKV_MOD_I: r = (double)(e.i + 1); break;
      case QKV_MOD_J: r = (double)(e.j + 1); break;
      case QKV_MOD_CONST: r = x.k; break;
      case QKV_MOD_LOAD: r = load(M, G, x, v, val); break;
      /* qkv_cu_mods_up made every operand a value: b, c repeat a */
      default: r = qkv_mod_apply(x.op, val[x.a], val[x.b], val[x.c]); break;
    }
    val[v] = r;
  }
}

/* the kind (QKV_BLOCK_*) of the block holding query i, key j of item t */
__device__ static int kind_of (const qkv_attn_mods *M, int64_t t, int64_t i, int64_t j) {
  if (M->kinds == NULL)
    return M->prog->out[QKV_MOD_OUT_MASK] >= 0 ? QKV_BLOCK_PARTIAL : QKV_BLOCK_FULL;
  int64_t b = t / M->heads, h = t % M->heads;
  int64_t r = (M->kb == 1 ? 0 : b) * M->kh + (M->kh == 1 ? 0 : h);
  return M->kinds[(r * M->nqb + i / M->bq) * M->nkb + j / M->bk];
}

/* the outputs a block of that kind computes: the score, and the mask
   where it is partial */
__device__ static int want_of (const qkv_mod_prog *G, int kind) {
  return (G->out[QKV_MOD_OUT_SCORE] >= 0 ? QKV_MOD_WANT_SCORE : 0) |
         (kind == QKV_BLOCK_PARTIAL && G->out[QKV_MOD_OUT_MASK] >= 0 ? QKV_MOD_WANT_MASK : 0);
}

/* x after the outputs in want (run on the pair): the new score, -inf
   where the mask drops the key */
template <typename T>
__device__ static T applied (const qkv_mod_prog *G, const double *val, int want, T x) {
  int vs = G->out[QKV_MOD_OUT_SCORE], vm = G->out[QKV_MOD_OUT_MASK];
  if (vs >= 0) x = (T)val[vs];
  if ((want & QKV_MOD_WANT_MASK) && val[vm] == 0) x = -(T)INFINITY;
  return x;
}

/* ---- the forward ---- */

template <typename T, int NV>
__global__ void __launch_bounds__(MT) forward_kernel (qkv_attn_plan P, qkv_attn_mods *M) {
  const qkv_mod_prog *G = M->prog;
  const T ninf = -(T)INFINITY, scale = (T)P.scale;
  const int64_t KB = M->kinds ? M->bk : CK;    /* key blocks: one kind each */
  double val[NV];
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
    pair e = {t / M->heads, t % M->heads, i, 0, 0};
    T m = ninf, l = 0;
    for (int64_t k0 = 0; k0 < jend; k0 += KB) {
      const int kind = kind_of(M, t, i0, k0);  /* the tile is one block of queries */
      if (kind == QKV_BLOCK_EMPTY) continue;   /* nothing kept: never computed */
      const int want = want_of(G, kind);
      if (want) run(M, G, val, want, false, e);
      const int64_t kend = k0 + KB < jend ? k0 + KB : jend;
      for (int64_t j0 = k0; j0 < kend; j0 += CK) {
        const int ck = (int)(kend - j0 < CK ? kend - j0 : CK);
        T s[CK], mx = ninf;
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
              run(M, G, val, want, true, e);
              x = applied<T>(G, val, want, x);
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

/* ---- the host's side ---- */

int qkv_cu_mods_up (qkv_attn_mods *M, const qkv_attn_plan *P, qkv_cu_mods *dev) {
  int64_t heads = P->nbd > 0 ? P->bsize[P->nbd - 1] : 1;
  dev->dev = NULL;
  dev->n = M->prog->n;
  if (M->kindt) {                   /* the CPU's checks (vm/cpu/mods.c), MT queries a block */
    const qkv_tensor *k = M->kindt;
    if (M->bq < 1 || M->bk < 1 || M->bq > MT || M->bk > 256 ||
        (M->kh != 1 && M->kh != heads) || (M->kb != 1 && M->kb * heads != P->nbatch) ||
        M->nqb != (P->nq + M->bq - 1) / M->bq || M->nkb != (P->nk + M->bk - 1) / M->bk ||
        k->ndim != 4 || k->size[0] != M->kb || k->size[1] != M->kh || k->size[2] != M->nqb ||
        k->size[3] != M->nkb || k->dtype != QKV_I32 || !qkv_cu_contiguous(k))
      return QKV_EINTERNAL;
  }
  for (int c = 0; c < M->ncap; c++) {
    const qkv_tensor *t = M->capt[c];
    qkv_mod_cap *C = &M->cap[c];
    C->base = qkv_cu_data(t);
    C->dtype = t->dtype;
    C->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) C->size[d] = t->size[d], C->stride[d] = t->stride[d];
    C->grad = M->gradt[c] ? (double *)qkv_cu_data(M->gradt[c]) : NULL;
  }
  M->kinds = M->kindt ? (const int32_t *)qkv_cu_data(M->kindt) : NULL;
  M->spans = NULL;                  /* the kernels run the mask on partial blocks */
  M->heads = heads;
  M->fail_ins = -1;
  /* the program with every operand a value, so that the evaluator reads
     three without asking the arity: the ones an op lacks repeat a */
  qkv_mod_prog G = *M->prog;
  for (int v = 0; v < G.n; v++) {
    int ar = qkv_mod_arity(G.ins[v].op);
    if (ar == 1) G.ins[v].b = G.ins[v].c = G.ins[v].a;
    if (ar == 2) G.ins[v].c = G.ins[v].a;
  }
  size_t at = (sizeof(qkv_attn_mods) + 15) / 16 * 16;
  char *p = (char *)qkv_cu_alloc(at + sizeof G);
  if (p == NULL) return QKV_ENOMEM;
  qkv_attn_mods D = *M;
  D.prog = (const qkv_mod_prog *)(p + at);
  cudaError_t e = cudaMemcpy(p, &D, sizeof D, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(p + at, &G, sizeof G, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    qkv_cu_free(p);
    return qkv_cu_fail_cuda("cudaMemcpy of the program", __FILE__, __LINE__, e);
  }
  dev->dev = (qkv_attn_mods *)p;
  return QKV_OK;
}

int qkv_cu_mods_down (qkv_attn_mods *M, const qkv_cu_mods &dev) {
  qkv_attn_mods D;
  cudaCheck(cudaMemcpy(&D, dev.dev, sizeof D, cudaMemcpyDeviceToHost));
  if (D.fail_ins < 0) return QKV_OK;
  M->fail_ins = D.fail_ins;
  M->fail_arg = D.fail_arg;
  M->fail_val = D.fail_val;
  return QKV_EINDEX;
}

/* the launch, then the failure read back; dev freed either way */
template <typename T>
static int forward (qkv_attn_plan &P, qkv_attn_mods *M, const qkv_cu_mods &dev) {
  qkv_attn_tiles(&P, M->kinds ? M->bq : MT);  /* a block mask's query blocks: one kind a tile */
  unsigned grid = (unsigned)(P.items < INT_MAX ? P.items : INT_MAX);
  if (dev.n <= SMALL) forward_kernel<T, SMALL><<<grid, MT>>>(P, dev.dev);
  else forward_kernel<T, QKV_MOD_MAXINS><<<grid, MT>>>(P, dev.dev);
  cudaError_t e = cudaGetLastError();
  int err = e != cudaSuccess ? qkv_cu_fail_cuda("launch of forward_kernel", __FILE__, __LINE__, e)
                             : qkv_cu_mods_down(M, dev);
  qkv_cu_free(dev.dev);
  return err;
}

/* float32 and float64 (the dispatch computes the halves in float32); lse
   written, -inf where a query keeps no key */
int qkv_cuda_attention_mods (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                             const qkv_tensor *v, const qkv_tensor *mask, int causal,
                             double scale, qkv_tensor *lse, qkv_attn_mods *M) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  qkv_attn_plan P;
  int err = qkv_attn_plan_forward(&P, out, q, k, v, mask, causal, scale, lse, qkv_cu_attn_data);
  if (err != QKV_OK) return err;
  if (P.nbatch == 0 || P.nq == 0 || P.dv == 0) return QKV_OK;
  if (!qkv_cu_contiguous(out) || (lse && !qkv_cu_contiguous(lse))) return QKV_EINTERNAL;
  if (P.nk == 0) {                   /* no key for any query: zeros, lse -inf */
    cudaCheck(cudaMemsetAsync(P.out, 0, (size_t)(P.nbatch * P.nq * P.dv) * qkv_cu_elsize(out->dtype), 0));
    return lse ? qkv_cuda_fill(lse, -INFINITY) : QKV_OK;
  }
  qkv_cu_mods dev;
  if ((err = qkv_cu_mods_up(M, &P, &dev)) != QKV_OK) return err;
  return out->dtype == QKV_F32 ? forward<float>(P, M, dev) : forward<double>(P, M, dev);
}

/* ---- the backward's steps (attention_bwd.cu) ---- */

/* pair x of a chunk of nk-long rows: items from b0, rq queries from i0 each */
__device__ static pair pair_of (const qkv_attn_plan &P, const qkv_attn_mods *M, int64_t x,
                                int64_t b0, int64_t i0, int64_t rq, int64_t *t) {
  int64_t row = x / P.nk;
  *t = b0 + row / rq;
  pair e = {*t / M->heads, *t % M->heads, i0 + row % rq, x % P.nk, 0};
  return e;
}

/* the mask tensor's row of item t, or NULL */
__device__ static const unsigned char *mask_of (const qkv_attn_plan &P, int64_t t) {
  if (!P.has_mask) return NULL;
  return (const unsigned char *)P.mask.base + qkv_attn_batch_offset(&P, &P.mask, t);
}

template <typename T, int NV>
__global__ void scores_kernel (qkv_attn_plan P, qkv_attn_mods *M, T *s, int64_t b0, int64_t i0,
                               int64_t rq, int64_t n) {
  const qkv_mod_prog *G = M->prog;
  double val[NV];
  QKV_CU_LOOP(x, n) {
    int64_t t;
    pair e = pair_of(P, M, x, b0, i0, rq, &t);
    int kind = kind_of(M, t, e.i, e.j);
    /* empty blocks and keys the mask tensor or causal drop run nothing */
    if (kind == QKV_BLOCK_EMPTY || !qkv_attn_keeps(&P, mask_of(P, t), e.i, e.j)) {
      s[x] = -(T)INFINITY;
      continue;
    }
    int want = want_of(G, kind);
    if (want == 0) continue;
    e.score = (double)s[x];
    run(M, G, val, want, false, e);
    run(M, G, val, want, true, e);
    s[x] = applied<T>(G, val, want, s[x]);
  }
}

template <typename T, int NV>
__global__ void grads_kernel (qkv_attn_plan P, qkv_attn_mods *M, const T *s, T *ds, int64_t b0,
                              int64_t i0, int64_t rq, int64_t n) {
  const qkv_mod_prog *G = M->prog;
  double val[NV];
  QKV_CU_LOOP(x, n) {
    T g = ds[x];
    if (g == 0) continue;                      /* a dropped key, or no gradient */
    int64_t t;
    pair e = pair_of(P, M, x, b0, i0, rq, &t);
    e.score = (double)s[x];
    run(M, G, val, QKV_MOD_WANT_GRAD, false, e);
    run(M, G, val, QKV_MOD_WANT_GRAD, true, e);
    for (int o = QKV_MOD_OUT_DLOAD; o < QKV_MOD_NOUT; o++) {
      if (G->out[o] < 0) continue;
      const qkv_mod_ins l = G->ins[G->dload[o]];
      const qkv_mod_cap *C = &M->cap[l.a];
      if (C->grad == NULL) continue;
      int64_t off = 0, span = 1;                 /* the sum is contiguous */
      bool in = true;
      for (int d = l.c - 1; d >= 0; d--) {
        double k = val[G->args[l.b + d]];
        in = in && k >= 1 && k <= (double)C->size[d];   /* else the LOAD recorded it */
        off += in ? ((int64_t)k - 1) * span : 0;
        span *= C->size[d];
      }
      if (in) atomicAdd(C->grad + off, (double)g * val[G->out[o]]);
    }
    int vd = G->out[QKV_MOD_OUT_DSCORE];
    if (vd >= 0) ds[x] = (T)((double)g * val[vd]);
  }
}

template <typename T>
int qkv_cu_mods_scores (const qkv_attn_plan &P, const qkv_cu_mods &D, T *s, int64_t b0,
                        int64_t nb, int64_t i0, int64_t rq) {
  int64_t n = nb * rq * P.nk;
  unsigned grid = qkv_cu_blocks(n, THREADS);
  if (D.n <= SMALL) scores_kernel<T, SMALL><<<grid, THREADS>>>(P, D.dev, s, b0, i0, rq, n);
  else scores_kernel<T, QKV_MOD_MAXINS><<<grid, THREADS>>>(P, D.dev, s, b0, i0, rq, n);
  launchCheck("scores_kernel");
  return QKV_OK;
}

template <typename T>
int qkv_cu_mods_grads (const qkv_attn_plan &P, const qkv_cu_mods &D, const T *s, T *ds,
                       int64_t b0, int64_t nb, int64_t i0, int64_t rq) {
  int64_t n = nb * rq * P.nk;
  unsigned grid = qkv_cu_blocks(n, THREADS);
  if (D.n <= SMALL) grads_kernel<T, SMALL><<<grid, THREADS>>>(P, D.dev, s, ds, b0, i0, rq, n);
  else grads_kernel<T, QKV_MOD_MAXINS><<<grid, THREADS>>>(P, D.dev, s, ds, b0, i0, rq, n);
  launchCheck("grads_kernel");
  return QKV_OK;
}

template int qkv_cu_mods_scores<float>(const qkv_attn_plan &, const qkv_cu_mods &, float *,
                                       int64_t, int64_t, int64_t, int64_t);
template int qkv_cu_mods_scores<double>(const qkv_attn_plan &, const qkv_cu_mods &, double *,
                                        int64_t, int64_t, int64_t, int64_t);
template int qkv_cu_mods_grads<float>(const qkv_attn_plan &, const qkv_cu_mods &, const float *,
                                      float *, int64_t, int64_t, int64_t, int64_t);
template int qkv_cu_mods_grads<double>(const qkv_attn_plan &, const qkv_cu_mods &,
                                       const double *, double *, int64_t, int64_t, int64_t,
                                       int64_t);
