/*
** mods.cuh -- attention's score_mod and mask_mod programs (common/mods.h)
** on the GPU (mods.cu): what the backward (attention_bwd.cu) shares with
** the forward.  The program, the captured tensors' views, the kinds and
** the failure record go to device memory once per call (qkv_cu_mods_up);
** the kernels read that copy, and the host reads the failure back
** (qkv_cu_mods_down) to report it as the CPU does.
*/
#ifndef QKV_CUDA_MODS_CUH
#define QKV_CUDA_MODS_CUH

#include <string>

#include "attention.cuh"
#include "mods_kernels.cuh"

/* the backend's entries attention_mods and attention_mods_backward
   (backend.h says what they take; mods.cu, attention_bwd.cu) */
int qkv_cuda_attention_mods(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                            const qkv_tensor *v, const qkv_tensor *mask, int causal,
                            double scale, qkv_tensor *lse, qkv_attn_mods *M);
int qkv_cuda_attention_mods_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                     const qkv_tensor *q, const qkv_tensor *k,
                                     const qkv_tensor *v, const qkv_tensor *o,
                                     const qkv_tensor *go, const qkv_tensor *mask, int causal,
                                     double scale, const qkv_tensor *lse, qkv_attn_mods *M);

/*
** M's program and views as the kernels read them (the device copy, dev),
** the program's length, which picks the size of the interpreter's arrays
** of values (a few instructions, the usual mod, need no 2 KiB of local
** memory a thread), and the program compiled as code (jit.cu), or NULL
** where the interpreter runs it.
*/
struct qkv_cu_jit;
struct qkv_cu_mods {
  qkv_attn_mods *dev;
  int n;
  qkv_cu_jit *jit;
  qkv_cu_tiles tiles;               /* the compiled forward's */
  qkv_cu_mma_tiles mma;             /* the tensor cores' (mma.d 0: not taken) */
};

/* the source of the kernels of program G as code (mods_gen.cu): for
   dtype dt (float32, float64), the forward at tiles t and the backward's
   steps; or, mma not NULL, the tensor-core forward at its tiles and the
   tensor-core backward */
int qkv_cu_mods_source(const qkv_mod_prog *G, qkv_dtype dt, const qkv_cu_tiles &t,
                       const qkv_cu_mma_tiles *mma, std::string *src);

/*
** For the plan P (the heads are its last batch dim): a device copy of M
** in D->dev (free it with qkv_cu_free), its prog pointing to a device copy
** of the program, and where a compiler is at hand the program's kernels
** compiled (mma not NULL: the tensor-core forward's at those tiles).
** QKV_EINTERNAL when the kinds do not fit P.
*/
int qkv_cu_mods_up(qkv_attn_mods *M, const qkv_attn_plan *P, qkv_cu_mods *D,
                   const qkv_cu_mma_tiles *mma = NULL);

/* after the kernels: QKV_EINDEX with M's fail_* filled when a LOAD failed,
   else QKV_OK (or the copy's error) */
int qkv_cu_mods_down(qkv_attn_mods *M, const qkv_cu_mods &D);

/* a chunk of the backward's score rows (attention_bwd.cu): items b0 ..
   b0 + nb - 1, queries i0 .. i0 + rq - 1 of each, keys k0 .. k0 + kn - 1
   (the rest of a row excluded for all of them) */
struct qkv_cu_rows {
  int64_t b0, nb, i0, rq, k0, kn;
};

/*
** The backward's steps on chunk C's score rows at s (kn scores a row).
** qkv_cu_mods_scores: s (scale q k^T) becomes the new scores, -inf where
** the mask or an empty block drops the key.  qkv_cu_mods_grads: s is
** scale q k^T again and ds the gradient by the new scores; adds ds times
** each derivative by a loaded value into the captured tensors' sums, then
** makes ds the gradient by the scores (0 stays 0).
*/
template <typename T>
int qkv_cu_mods_scores(const qkv_attn_plan &P, const qkv_cu_mods &D, T *s, const qkv_cu_rows &C);
template <typename T>
int qkv_cu_mods_grads(const qkv_attn_plan &P, const qkv_cu_mods &D, const T *s, T *ds,
                      const qkv_cu_rows &C);

#endif
