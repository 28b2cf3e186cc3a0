/*
** backend.h -- the per-device dispatch table.  vm/ops.c checks devices,
** converts dtypes and expands broadcast operands, so a backend entry only
** ever sees operands that already have the output's shape (strides may be
** 0 or arbitrary) and the dtype stated for that entry.
*/
#ifndef QKV_BACKEND_H
#define QKV_BACKEND_H

#include "qkv.h"

typedef struct qkv_backend {
  const char *name;
  void *(*alloc)(size_t nbytes, int zero);    /* NULL on failure */
  void (*free)(void *p);
  /* dst and src have the same shape; dtypes may differ (converted) */
  int (*copy)(qkv_tensor *dst, const qkv_tensor *src);
  int (*fill)(qkv_tensor *dst, double v);
  /* a, b: out's shape; dtype: out's for arithmetic, a common one for
     comparisons (out is bool) */
  int (*binary)(qkv_binop op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b);
  /* a: out's shape and dtype (float for all but NEG/ABS) */
  int (*unary)(qkv_unop op, qkv_tensor *out, const qkv_tensor *a);
  /* along dim (0-based): out has a's shape with size[dim] == 1; idx the
     same shape, int64, 0-based positions (or NULL; only MAX/MIN fill it).
     a's dtype is float for MEAN/VAR/STD; out's dtype is a's for MAX/MIN,
     int64 positions for ARGMAX/ARGMIN, and for SUM a's (int64 for bool) */
  int (*reduce)(qkv_redop op, qkv_tensor *out, qkv_tensor *idx, const qkv_tensor *a, int dim);
  /* out (B..., m, p) contiguous = alpha * a @ b; a (B..., m, n),
     b (B..., n, p) any strides, all three the same batch dims and the
     same float dtype */
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
     for first; QKV_EDTYPE says to compute them in float32 instead */
  int (*attention)(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                   const qkv_tensor *v, const qkv_tensor *mask, int causal,
                   double scale);
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
  /* the gradients of attention: all contiguous with the same batch dims
     (B..., rows, cols) and float dtype; mask bool (B..., nq, nk), any
     strides, or NULL; dq, dk, dv written whole */
  int (*attention_backward)(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                            const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                            const qkv_tensor *o, const qkv_tensor *go,
                            const qkv_tensor *mask, int causal, double scale);
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
} qkv_backend;

extern const qkv_backend qkv_cpu_backend;
const qkv_backend *qkv_backend_of(qkv_device dev);   /* NULL when absent */
/* the name of entry i (0-based; NULL past the last) and whether be fills it */
const char *qkv_backend_entry(const qkv_backend *be, int i, int *filled);

/*
** The CUDA backend lives in build/qkv_cuda.so (vm/cuda/), which vm/plugin.c
** loads with dlopen the first time a script asks for the GPU, so that
** cudart and cuBLAS never slow down a CPU script's start.  The plugin
** exports one C function, qkv_cuda_plugin, returning this table; abi
** guards against a plugin built from other headers.
*/
#define QKV_CUDA_ABI ((sizeof(qkv_backend) << 16) + (sizeof(qkv_tensor) << 4) + 2)

typedef struct qkv_cuda_memory {
  size_t allocated;      /* bytes in blocks that tensors hold */
  size_t cached;         /* bytes in free blocks kept for reuse */
  size_t peak;           /* most bytes allocated at once so far */
  size_t free, total;    /* the device's, as cudaMemGetInfo says */
} qkv_cuda_memory;

typedef struct qkv_cuda_api {
  size_t abi;                             /* QKV_CUDA_ABI */
  const qkv_backend *backend;
  /* QKV_OK when a device is usable, else QKV_ENODEV with why (no driver,
     no device) written into why */
  int (*init)(char *why, size_t n);
  /* the last failure (QKV_ECUDA): the call, its file and line, and CUDA's
     words for it; an out-of-memory also says how much was asked and free */
  const char *(*error)(void);
  /* n bytes between host and device memory (dst and src contiguous) */
  int (*to_device)(void *dst, const void *src, size_t n);
  int (*to_host)(void *dst, const void *src, size_t n);
  int (*synchronize)(void);
  void (*empty_cache)(void);
  void (*memory)(qkv_cuda_memory *m);
  const char *(*device_name)(void);
  void (*allow_tf32)(int on);             /* float32 products on tensor cores */
  int (*tf32)(void);
  /* the path the last fused attention took: "mma" (tensor cores, float16
     and bfloat16), "fp32" (the CUDA-core kernel: float32, float64, and the
     halves it computes in float32), "none" before the first */
  const char *(*attention_backend)(void);
} qkv_cuda_api;

typedef const qkv_cuda_api *(*qkv_cuda_plugin_fn)(void);

/* vm/plugin.c: the loaded plugin, or NULL with why it cannot be (no
   plugin built, no driver, no device); loads it on the first call */
const qkv_cuda_api *qkv_cuda(char *why, size_t n);
/* the plugin when already loaded and usable, else NULL (loads nothing) */
const qkv_cuda_api *qkv_cuda_loaded(void);

#endif
