/*
** mods.cu -- attention's score_mod and mask_mod programs (common/mods.h)
** on the GPU, as vm/cpu/mods.c on the CPU: the host's side of the kernels
** of mods_kernels.cuh (which says what they compute).  Each call copies
** the program, the captured tensors' views, the kinds and the failure
** record to device memory (qkv_cu_mods_up), then runs the program's
** kernels:
**   - compiled as code for this program (mods_gen.cu, jit.cu), the first
**     call of a program compiling them (~2 s with NVRTC on a slow CPU) and
**     the later ones finding them; the forward is then attention.cu's
**     tiled kernel with the program in it (attention_kernel.cuh), or for
**     bfloat16 and float16 at head sizes 64 and 128 attention_mma.cu's
**     tensor-core kernel with it (attention_mma_kernel.cuh);
**   - else the interpreter's, compiled with the plugin, where no compiler
**     is at hand (no libnvrtc) or QKV_CUDA_JIT=0 says so; its forward is
**     a thread a query (mods_kernels.cuh).
** qkv.cuda.attention_backend() says which ran: "mods-jit", "mods-mma" or
** "mods".
*/
#include <limits.h>
#include <math.h>
#include <stddef.h>

#include "jit.cuh"
#include "mods.cuh"
#include "attention_kernel.cuh"
#include "attention_mma_kernel.cuh"

#define SMALL 32                     /* values a thread for a short program */

/* the interpreter's kernels, for programs of up to SMALL instructions
   and of any length */
QKV_MODS_ENTRIES(static, qkv_mods_interp<SMALL>, small_)
QKV_MODS_ENTRIES(static, qkv_mods_interp<QKV_MOD_MAXINS>, big_)

/* ---- the host's side ---- */

int qkv_cu_mods_up (qkv_attn_mods *M, const qkv_attn_plan *P, qkv_cu_mods *dev,
                    const qkv_cu_mma_tiles *mma) {
  int64_t heads = P->nbd > 0 ? P->bsize[P->nbd - 1] : 1;
  dev->dev = NULL;
  dev->n = M->prog->n;
  dev->jit = NULL;
  dev->tiles = qkv_cu_tiles{0, 0, false, 0};
  dev->mma = mma ? *mma : qkv_cu_mma_tiles{0, 0, 0, 0, 0};
  if (M->kindt) {                   /* the CPU's checks (vm/cpu/mods.c), MT queries a block */
    const qkv_tensor *k = M->kindt;
    if (M->bq < 1 || M->bk < 1 || M->bq > QKV_MODS_MT || M->bk > 256 ||
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
  /* the kernels as code: for the call's dtype, the forward at the tiles
     attention.cu takes for P; or the tensor cores' forward at mma's */
  const char *why;
  if (qkv_cu_jit_on(&why) && P->dk < INT_MAX / 64 && P->dv < INT_MAX / 64) {
    std::string src;
    qkv_dtype dt = P->dtype == QKV_F64 ? QKV_F64 : QKV_F32;
    int err = mma ? QKV_OK : qkv_cu_attention_tiles(*P, qkv_dtype_bytes(dt), &dev->tiles);
    if (err == QKV_OK) err = qkv_cu_mods_source(M->prog, dt, dev->tiles, mma, &src);
    if (err == QKV_OK && (dev->jit = qkv_cu_jit_get(src.c_str())) == NULL) err = QKV_ECUDA;
    if (err != QKV_OK) {
      qkv_cu_free(p);
      dev->dev = NULL;
      return err;
    }
  }
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

/*
** Kernel what (forward, scores, grads) for T on grid blocks of threads,
** with A: the program's compiled one (the forward: qkv_jit_tiled, at D's
** tiles), or the interpreter's for its length.
*/
template <typename T>
static int launch (const qkv_cu_mods &D, const char *what, unsigned grid, unsigned threads,
                   const qkv_mods_args &A) {
  typedef void (*kernel)(qkv_mods_args);
  const bool f = sizeof(T) == 4;
  if (D.jit) {
    char name[64];
    snprintf(name, sizeof name, "qkv_jit_%s", what[0] == 'f' ? "tiled" : what);
    const void *k = qkv_cu_jit_kernel(D.jit, name);
    if (k == NULL) return qkv_cu_fail("qkv_cu_jit_kernel", __FILE__, __LINE__, name);
    return qkv_cu_jit_launch(k, name, grid, threads, what[0] == 'f' ? D.tiles.smem : 0, A);
  }
  static const kernel small[3][2] = {{small_forward_f, small_forward_d},
                                     {small_scores_f, small_scores_d},
                                     {small_grads_f, small_grads_d}};
  static const kernel big[3][2] = {{big_forward_f, big_forward_d},
                                   {big_scores_f, big_scores_d},
                                   {big_grads_f, big_grads_d}};
  int w = what[0] == 'f' ? 0 : what[0] == 's' ? 1 : 2;
  kernel k = (D.n <= SMALL ? small : big)[w][f ? 0 : 1];
  k<<<grid, threads>>>(A);
  launchCheck("the variants' kernel");
  return QKV_OK;
}

/*
** The forward's launch, then the failure read back; dev freed either way.
** Compiled, the tiles are attention.cu's; interpreted, a thread a query
** and a block mask's query blocks as tiles (one kind a tile).
*/
template <typename T>
static int forward (qkv_attn_plan &P, qkv_attn_mods *M, const qkv_cu_mods &dev) {
  qkv_attn_tiles(&P, dev.jit ? dev.tiles.bq : M->kinds ? M->bq : QKV_MODS_MT);
  unsigned grid = (unsigned)(P.items < INT_MAX ? P.items : INT_MAX);
  qkv_mods_args A = {P, dev.dev, NULL, NULL, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0};
  int err = launch<T>(dev, "forward", grid, dev.jit ? QKV_ATTN_NT : QKV_MODS_MT, A);
  if (err == QKV_OK) err = qkv_cu_mods_down(M, dev);
  if (err == QKV_OK) qkv_cu_attention_path = dev.jit ? "mods-jit" : "mods";
  qkv_cu_free(dev.dev);
  return err;
}

/*
** bfloat16 and float16: the tensor cores' forward with the program
** compiled into it (attention_mma_kernel.cuh), where its tiles take the
** plan and a compiler is at hand; QKV_EDTYPE otherwise (the dispatch
** computes in float32 then, on the forward above).
*/
static int forward_mma (qkv_attn_plan &P, qkv_attn_mods *M) {
  const char *why;
  qkv_cu_mma_tiles t;
  if (!qkv_cu_jit_on(&why)) return QKV_EDTYPE;
  int err = qkv_cu_attention_mma_tiles(P, &t);
  qkv_cu_mods dev;
  if (err != QKV_OK || (err = qkv_cu_mods_up(M, &P, &dev, &t)) != QKV_OK) return err;
  qkv_attn_tiles(&P, QKV_MMA_WARPS * 16 * t.mt);
  qkv_mods_args A = {P, dev.dev, NULL, NULL, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0};
  const void *k = qkv_cu_jit_kernel(dev.jit, "qkv_jit_mma");
  err = k ? qkv_cu_jit_launch(k, "qkv_jit_mma", (unsigned)P.items, QKV_MMA_NT, t.smem, A)
          : qkv_cu_fail("qkv_cu_jit_kernel", __FILE__, __LINE__, "qkv_jit_mma");
  if (err == QKV_OK) err = qkv_cu_mods_down(M, dev);
  if (err == QKV_OK) qkv_cu_attention_path = "mods-mma";
  qkv_cu_free(dev.dev);
  return err;
}

/* float32 and float64 on CUDA cores, bfloat16 and float16 on the tensor
   cores where they take the call (QKV_EDTYPE otherwise: the dispatch
   computes those in float32); lse written, -inf where a query keeps no
   key */
int qkv_cuda_attention_mods (qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                             const qkv_tensor *v, const qkv_tensor *mask, int causal,
                             double scale, qkv_tensor *lse, qkv_attn_mods *M) {
  const int half = qkv_is_half(out->dtype);
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64 && !half) return QKV_EDTYPE;
  qkv_attn_plan P;
  int err = qkv_attn_plan_forward(&P, out, q, k, v, mask, causal, scale, lse, qkv_cu_attn_data);
  if (err != QKV_OK) return err;
  if (P.nbatch == 0 || P.nq == 0 || P.dv == 0) return QKV_OK;
  if (!qkv_cu_contiguous(out) || (lse && !qkv_cu_contiguous(lse))) return QKV_EINTERNAL;
  if (P.nk == 0) {                   /* no key for any query: zeros, lse -inf */
    cudaCheck(cudaMemsetAsync(P.out, 0, (size_t)(P.nbatch * P.nq * P.dv) * qkv_dtype_bytes(out->dtype), 0));
    return lse ? qkv_cuda_fill(lse, -INFINITY) : QKV_OK;
  }
  if (half) return forward_mma(P, M);
  qkv_cu_mods dev;
  if ((err = qkv_cu_mods_up(M, &P, &dev)) != QKV_OK) return err;
  return out->dtype == QKV_F32 ? forward<float>(P, M, dev) : forward<double>(P, M, dev);
}

/* ---- the backward's steps (attention_bwd.cu) ---- */

template <typename T>
int qkv_cu_mods_scores (const qkv_attn_plan &P, const qkv_cu_mods &D, T *s,
                        const qkv_cu_rows &C) {
  int64_t n = C.nb * C.rq * C.kn;
  qkv_mods_args A = {P, D.dev, s, NULL, C.b0, C.i0, C.rq, n, NULL, NULL, NULL, C.k0, C.kn};
  return launch<T>(D, "scores", qkv_cu_blocks(n, QKV_MODS_THREADS), QKV_MODS_THREADS, A);
}

template <typename T>
int qkv_cu_mods_grads (const qkv_attn_plan &P, const qkv_cu_mods &D, const T *s, T *ds,
                       const qkv_cu_rows &C) {
  int64_t n = C.nb * C.rq * C.kn;
  qkv_mods_args A = {P, D.dev, (void *)s, ds, C.b0, C.i0, C.rq, n, NULL, NULL, NULL, C.k0,
                     C.kn};
  return launch<T>(D, "grads", qkv_cu_blocks(n, QKV_MODS_THREADS), QKV_MODS_THREADS, A);
}

template int qkv_cu_mods_scores<float>(const qkv_attn_plan &, const qkv_cu_mods &, float *,
                                       const qkv_cu_rows &);
template int qkv_cu_mods_scores<double>(const qkv_attn_plan &, const qkv_cu_mods &, double *,
                                        const qkv_cu_rows &);
template int qkv_cu_mods_grads<float>(const qkv_attn_plan &, const qkv_cu_mods &, const float *,
                                      float *, const qkv_cu_rows &);
template int qkv_cu_mods_grads<double>(const qkv_attn_plan &, const qkv_cu_mods &,
                                       const double *, double *, const qkv_cu_rows &);
