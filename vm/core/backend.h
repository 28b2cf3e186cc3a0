/*
** backend.h -- the per-device table of kernels, and the registry of which
** table serves each device.  vm/dispatch/ops.c checks devices, converts
** dtypes and expands broadcast operands, so a backend entry only ever sees
** operands that already have the output's shape (strides may be 0 or
** arbitrary) and the dtype stated for that entry.
**
** The core owns the registry, since a storage takes its memory from its
** device's table (storage.c), but it names no table: the kernels call the
** core, so a core that called them back would tie the two in a circle.
** The CPU's table registers itself as the library loads (vm/cpu/backend.c),
** the GPU's is registered when its plugin loads (vm/dispatch/plugin.c).
*/
#ifndef QKV_BACKEND_H
#define QKV_BACKEND_H

#include "qkv.h"

typedef struct qkv_backend {
  const char *name;
  /* attention_backward reads q, k, v, o, go by rows (the CPU's): the
     dispatch does not copy heads' transposed views for it */
  int attention_backward_rows;
  /* attention_backward takes dk and dv grouped (attention_plan.h's kvg:
     grouped-query heads' own shapes); else the dispatch sums a whole one */
  int attention_backward_groups;
  /* binary and unary take float32 and the halves mixed where the op
     computes in float32 (out float32, a half or a comparison's bool):
     each half read as float32, the float32 op, out rounded once, as the
     dispatch's converted copies would give; else only the dtypes below */
  int elementwise_halves;
  /* reduce takes a half for SUM, MEAN, VAR and STD into a float32 out */
  int reduce_halves;
  void *(*alloc)(size_t nbytes, int zero);    /* NULL on failure */
  void (*free)(void *p);
  /* dst and src have the same shape; dtypes may differ (converted) */
  int (*copy)(qkv_tensor *dst, const qkv_tensor *src);
  int (*fill)(qkv_tensor *dst, double v);
  /* op: a qkv_binop or qkv_unop, whose row in vm/common/ops.h says which
     dtypes it takes (others: QKV_EDTYPE) and what it gives; kept out of
     this header, so that a new op rebuilds only the units that use the
     list.  a, b: out's shape; dtype: out's, but a common one for an op
     whose result is bool */
  int (*binary)(int op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b);
  int (*unary)(int op, qkv_tensor *out, const qkv_tensor *a);
  /* along dim (0-based): out has a's shape with size[dim] == 1; idx the
     same shape, int64, 0-based positions (or NULL; only MAX/MIN fill it).
     a's dtype is float for MEAN/VAR/STD; out's dtype is a's for MAX/MIN,
     int64 positions for ARGMAX/ARGMIN, and for SUM a's (int64 for bool);
     with reduce_halves, SUM, MEAN, VAR and STD also of a half a into a
     float32 out (read as float32, exactly).  VAR and STD divide the
     squared deviations by max(0, n - correction), PyTorch's (1:
     unbiased); the other ops ignore it */
  int (*reduce)(qkv_redop op, qkv_tensor *out, qkv_tensor *idx, const qkv_tensor *a, int dim,
                double correction);
  /* out (B..., m, p) contiguous = alpha * a @ b; a (B..., m, n),
     b (B..., n, p) any strides, all three the same batch dims and the
     same float dtype, or a and b bfloat16 into a float32 out (float32
     sums; QKV_EDTYPE where the backend has no such product) */
  int (*matmul)(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                double alpha);
  /* mask: bool with out's shape */
  int (*masked_fill)(qkv_tensor *out, const qkv_tensor *mask, double v);
  /* out is contiguous; element i takes Philox lanes from block offset +
     i / 4 (float32) or offset + i / 2 (float64), as vm/cpu/random.c says */
  int (*random)(qkv_tensor *out, qkv_dist dist, const uint32_t key[2], uint64_t offset);
  /* out contiguous with x's shape and float dtype, x any strides */
  int (*softmax)(qkv_tensor *out, const qkv_tensor *x, int dim);
  /* as qkv_attention, with q, k, v (and mask, bool) already expanded to
     out's batch dims (strides may be 0; mask to (B..., nq, nk)), all of
     out's float dtype; out is contiguous.  float16 and bfloat16 are asked
     for first; QKV_EDTYPE says to compute them in float32 instead.  lse,
     NULL or (B..., nq) contiguous (out's dtype for float32 and float64,
     float32 for float16 and bfloat16), is this backend's saved state for
     its own attention_backward: each query's log-sum-exp of its kept,
     scaled scores, natural log (-inf with none); a backend whose backward
     does not read it may leave it unwritten */
  int (*attention)(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                   const qkv_tensor *v, const qkv_tensor *mask, int causal,
                   double scale, qkv_tensor *lse);
  /* cond (bool), a, b: out's shape; a, b: out's dtype */
  int (*where)(qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
               const qkv_tensor *b);
  /* out[i] = a[i with i_dim := idx[i]]: idx int64 with out's shape, every
     position in [0, a->size[dim]); a has out's rank, each other dim at
     least out's size, and out's dtype */
  int (*gather)(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim);
  /* each line along the last dim of a, stably sorted (NaN above every
     number) into values (a's dtype) and indices (int64, 0-based) */
  int (*sort)(qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc);
  /* the gradients of attention: all with the same batch dims (B...,
     rows, cols) and float dtype; dq, dk, dv contiguous, and so are q, k,
     v, o, go unless the table says attention_backward_rows, then only
     their rows as gemm reads them (common/layout.h's QKV_BYROW), batch
     strides anything, 0 included; mask bool (B..., nq, nk), any
     strides, or NULL; dq, dk, dv written whole; lse NULL or what this
     backend's attention left for the same q, k, v, mask, causal, scale
     (contiguous; dq's dtype, float32 for float16 and bfloat16), which it
     may read instead of computing it.  float16 and bfloat16 are asked for
     first; QKV_EDTYPE says to compute them in float32 copies instead */
  int (*attention_backward)(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                            const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                            const qkv_tensor *o, const qkv_tensor *go,
                            const qkv_tensor *mask, int causal, double scale,
                            const qkv_tensor *lse);
  /* out[i with i_dim := idx[i]] += src[i]: gather's inverse, idx int64 with
     src's shape, its positions in range; out float32/64 or int32/64 */
  int (*scatter_add)(qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim);
  /* softmax's backward along the last dim: gx = y (g - sum(g y)); gx, y, g
     contiguous, one float dtype */
  int (*softmax_backward)(qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g);
  /* along the last dim; out and x contiguous, the same float dtype */
  int (*log_softmax)(qkv_tensor *out, const qkv_tensor *x);
  /* over the last n elements of each row; out, x contiguous, w and b
     contiguous n elements or NULL, all the same float dtype */
  int (*layer_norm)(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                    const qkv_tensor *b, int64_t n, double eps);
  /* its backward: gx (x's shape) and the sums over rows gw, gb (n
     elements each, NULL when not wanted) from x, g (x's shape) and w (n
     elements or NULL); all contiguous, one float dtype, n >= 1 */
  int (*layer_norm_backward)(qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                             const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                             int64_t n, double eps);
  /* running sums along dim (0-based): out[.., i, ..] = x[.., 0, ..] + ...
     + x[.., i, ..]; out and x contiguous, not empty, one dtype: float32
     and float64 summed in double, int64 exactly (wrapping on overflow, as
     PyTorch) */
  int (*cumsum)(qkv_tensor *out, const qkv_tensor *x, int dim);
  /* the triangle of each matrix of the last two dims: element (..., i, j)
     of out is x's where j - i <= k (upper: j - i >= k), else zero bytes
     (0, false, +0.0).  out and x contiguous, one shape (at least 2 dims,
     not empty) and one dtype, any (the kernel moves elements, it computes
     nothing); x may be out itself; -rows <= k <= cols (the dispatch clamps
     k there, which changes no element, so that i + k cannot overflow) */
  int (*tri)(qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper);
  /* as qkv_adam, with g made contiguous too */
  int (*adam)(qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v, qkv_tensor *vmax,
              const qkv_adam_step *h);
  /* over the last n elements of each row: x / sqrt(mean(x^2) + eps) * w;
     out, x contiguous, w contiguous n elements or NULL, one float dtype
     (float32 or float64), x not empty, n >= 1 */
  int (*rms_norm)(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                  double eps);
  /* its backward: gx (x's shape) and gw (the sum over rows of g x inv, n
     elements, NULL when not wanted) from x, g (x's shape) and w (n
     elements or NULL); all contiguous, one float dtype, n >= 1 */
  int (*rms_norm_backward)(qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                           const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps);
  /* attention and its backward with score_mod/mask_mod programs
     (qkv_attention_mods), the operands as for attention and
     attention_backward; NULL where the backend has none */
  int (*attention_mods)(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                        const qkv_tensor *v, const qkv_tensor *mask, int causal,
                        double scale, qkv_tensor *lse, struct qkv_attn_mods *M);
  int (*attention_mods_backward)(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                 const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                 const qkv_tensor *o, const qkv_tensor *go,
                                 const qkv_tensor *mask, int causal, double scale,
                                 const qkv_tensor *lse, struct qkv_attn_mods *M);
  /* qkv_attention_blocks, kinds and spans (or NULL) contiguous int32 on
     this device */
  int (*attention_blocks)(struct qkv_attn_mods *M, qkv_tensor *kinds, qkv_tensor *spans,
                          int64_t nq, int64_t nk, int64_t bq, int64_t bk, int *runs);
  /* whether a float32 product of `work` multiply-adds runs faster as
     bfloat16 products `parts` times as wide (vm/dispatch/matmul.c); NULL: never */
  int (*split_products)(int parts, double work);
} qkv_backend;

/* the table of device dev, NULL while none is registered (no GPU plugin) */
const qkv_backend *qkv_backend_of(qkv_device dev);
void qkv_backend_register(qkv_device dev, const qkv_backend *be);
/* the name of entry i (0-based; NULL past the last) and whether be fills it */
const char *qkv_backend_entry(const qkv_backend *be, int i, int *filled);

#endif
