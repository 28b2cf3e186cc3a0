/*
** plugin.h -- the CUDA plugin's interface: what build/qkv_cuda.so
** (vm/cuda/backend.cu) hands over, and the loader (plugin.c) that finds it.
**
** The CUDA backend lives in build/qkv_cuda.so (vm/cuda/), which plugin.c
** loads with dlopen the first time a script asks for the GPU, so that
** cudart and cuBLAS never slow down a CPU script's start.  The plugin
** exports one C function, qkv_cuda_plugin, returning this table; abi
** guards against a plugin built from other headers, ops against one built
** from another list of ops, whose enums may number them otherwise.  Once
** loaded, its backend serves QKV_CUDA in the core's registry
** (qkv_backend_of).
*/
#ifndef QKV_PLUGIN_H
#define QKV_PLUGIN_H

#include "../core/qkv.h"
#include "../core/backend.h"

#define QKV_CUDA_ABI ((sizeof(qkv_backend) << 16) + (sizeof(qkv_tensor) << 4) + 6)

typedef struct qkv_cuda_memory {
  size_t allocated;      /* bytes in blocks that tensors hold */
  size_t cached;         /* bytes in free blocks kept for reuse */
  size_t peak;           /* most bytes allocated at once so far */
  size_t free, total;    /* the device's, as cudaMemGetInfo says */
} qkv_cuda_memory;

typedef struct qkv_cuda_api {
  size_t abi;                             /* QKV_CUDA_ABI */
  const char *ops;                        /* QKV_OPS_LIST (vm/common/ops.h) */
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
  /* the path the last fused attention took: "cudnn" (cuDNN's fused
     attention, float16 and bfloat16), "wgmma" (our Hopper forward),
     "mma" (our tensor-core kernels),
     "fp32" (the CUDA-core kernels: float32, float64, and the halves they
     compute in float32), "none" before the first */
  const char *(*attention_backend)(void);
  /* the path every fused attention must take from now on ("cudnn",
     "wgmma", "mma" or "fp32"; one that cannot take a call fails it), NULL: each call
     takes the first that runs it, in that order */
  void (*force_attention)(const char *path);
  /* events, as cudaEvent_t: marks in the one stream that every kernel runs
     on, for timing on the GPU's clock.  event_new: a handle (timing: it
     can be timed) or NULL with the error set; event_record: the mark after
     the work launched so far; event_wait: until the GPU has passed it;
     event_done: whether it has (*done), without waiting; event_elapsed:
     the ms between two recorded timing events, once b is passed */
  void *(*event_new)(int timing);
  void (*event_free)(void *e);
  int (*event_record)(void *e);
  int (*event_wait)(void *e);
  int (*event_done)(void *e, int *done);
  int (*event_elapsed)(void *a, void *b, float *ms);
} qkv_cuda_api;

typedef const qkv_cuda_api *(*qkv_cuda_plugin_fn)(void);

/* the loaded plugin, or NULL with why it cannot be (no plugin built, no
   driver, no device); loads it on the first call */
const qkv_cuda_api *qkv_cuda(char *why, size_t n);
/* the plugin when already loaded and usable, else NULL (loads nothing) */
const qkv_cuda_api *qkv_cuda_loaded(void);
/* the loaded plugin's TF32 as the float32 matmul precision says (off at
   "highest"): called when the plugin loads and when the precision is set */
void qkv_cuda_follow_precision(void);

#endif
