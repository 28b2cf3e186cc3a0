/*
** backend.cu -- the CUDA backend's dispatch table, its caching allocator,
** its error record and the plugin's one export, qkv_cuda_plugin (see
** vm/dispatch/plugin.h).  Mirrors vm/cpu/backend.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"
#include "mods.cuh"

extern "C" {
#include "../dispatch/plugin.h"
}

/*
** Errors.  A failure records "call failed at file:line: why" for
** qkv_cu_error.  Most CUDA errors leave the context usable (a bad launch
** configuration, out of memory) and are cleared.  A fault inside a
** kernel (an illegal address, say) is sticky: the context is dead and
** every later call fails with it.  The first such error marks the device
** lost, and from then on every failure reports that first one, naming the
** call that saw it, instead of whatever the later call was.
*/

static char errbuf[512];
static char lost[512];

int qkv_cu_fail (const char *call, const char *file, int line, const char *why) {
  if (lost[0]) snprintf(errbuf, sizeof errbuf, "%s", lost);
  else snprintf(errbuf, sizeof errbuf, "cuda: %s failed at %s:%d: %s", call, file, line, why);
  return QKV_ECUDA;
}

static int sticky (cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorAssert: case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: case cudaErrorContextIsDestroyed:
    case cudaErrorUnknown:
      return 1;
    default: return 0;
  }
}

int qkv_cu_fail_cuda (const char *call, const char *file, int line, cudaError_t e) {
  cudaGetLastError();                       /* clear what can be cleared */
  if (!lost[0] && (sticky(e) || cudaPeekAtLastError() != cudaSuccess))
    snprintf(lost, sizeof lost, "cuda: device lost: %s (first seen by %s at %s:%d); "
             "restart the process to use the GPU again", cudaGetErrorString(e), call, file, line);
  return qkv_cu_fail(call, file, line, cudaGetErrorString(e));
}

int qkv_cu_fail_blas (const char *call, const char *file, int line, cublasStatus_t s) {
  cudaError_t e = cudaPeekAtLastError();   /* a fault inside cuBLAS's kernels */
  if (sticky(e)) return qkv_cu_fail_cuda(call, file, line, e);
  return qkv_cu_fail(call, file, line, qkv_cublas_status(s));
}

const char *qkv_cu_error (void) { return errbuf[0] ? errbuf : "cuda: no error recorded"; }

const char *qkv_cublas_status (cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS could not allocate";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "cuBLAS internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "cuBLAS error";
  }
}


/*
** The caching allocator.  Sizes round up to a class: 512-byte steps up to
** 1 MiB, then eighths of each power of two (at most 12.5% over).  A freed
** block goes on its class's free list and the next request of that class
** takes it back without cudaMalloc (which synchronises the device and
** costs tens of microseconds).  When cudaMalloc fails, the cache is given
** back to the driver and the call retried once; the bindings then collect
** Lua's garbage and ask again.  QKV_CUDA_NO_CACHE=1 frees every block at
** once, so that compute-sanitizer sees each use after free.
*/
#define SMALL_STEP 512
#define SMALL_MAX ((size_t)1 << 20)
#define NCLASS (2048 + 8 * 44 + 8)
#define NHASH 4096

typedef struct block { void *p; size_t size; int cls; struct block *next; } block;

static block *free_list[NCLASS];     /* cached blocks, by class */
static block *live[NHASH];           /* blocks tensors hold, by address */
static size_t allocated, cached, peak;
static int no_cache = -1;

static int size_class (size_t n, size_t *rounded) {
  if (n <= SMALL_MAX) {
    size_t c = (n + SMALL_STEP - 1) / SMALL_STEP;
    if (c == 0) c = 1;
    *rounded = c * SMALL_STEP;
    return (int)c - 1;
  }
  int e = 63 - __builtin_clzll((unsigned long long)n);      /* 2^e <= n */
  size_t step = (size_t)1 << (e - 3), k = (n + step - 1) / step;   /* 9..16 */
  *rounded = k * step;
  return 2048 + (e - 20) * 8 + (int)(k - 9);
}

static unsigned hash (const void *p) { return (unsigned)(((uintptr_t)p >> 9) % NHASH); }

static void release_cache (void) {
  for (int c = 0; c < NCLASS; c++)
    while (free_list[c]) {
      block *b = free_list[c];
      free_list[c] = b->next;
      cudaFree(b->p);
      free(b);
    }
  cached = 0;
}

/* n bytes for a request of `asked` (the message names what the script
   asked for); only cudaErrorMemoryAllocation is out of memory, any other
   failure is recorded (a sticky one marks the device lost) */
static void *device_malloc (size_t n, size_t asked) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cache();
    e = cudaMalloc(&p, n);
  }
  if (e == cudaSuccess) return p;
  if (e != cudaErrorMemoryAllocation) {
    qkv_cu_fail_cuda("cudaMalloc", __FILE__, __LINE__, e);
    return NULL;
  }
  cudaGetLastError();
  size_t fr = 0, total = 0;
  cudaMemGetInfo(&fr, &total);
  snprintf(errbuf, sizeof errbuf, "cuda: out of memory: tried to allocate %zu bytes (%zu free)",
           asked, fr);
  return NULL;
}

static void *cu_alloc (size_t nbytes, int zero) {
  size_t size;
  if (no_cache < 0) no_cache = getenv("QKV_CUDA_NO_CACHE") != NULL;
  if (lost[0]) { snprintf(errbuf, sizeof errbuf, "%s", lost); return NULL; }
  int c = size_class(nbytes, &size);
  if (c >= NCLASS || size < nbytes) return NULL;
  if (no_cache > 0) size = nbytes ? nbytes : 1;   /* exact: memcheck sees over-reads */
  block *b = no_cache > 0 ? NULL : free_list[c];
  if (b) {
    free_list[c] = b->next;
    cached -= b->size;
  } else {
    if ((b = (block *)malloc(sizeof *b)) == NULL) return NULL;
    if ((b->p = device_malloc(size, nbytes)) == NULL) { free(b); return NULL; }
    b->size = size;
    b->cls = c;
  }
  cudaError_t e;
  if (zero && (e = cudaMemset(b->p, 0, nbytes)) != cudaSuccess) {
    qkv_cu_fail_cuda("cudaMemset", __FILE__, __LINE__, e);
    cudaFree(b->p);
    free(b);
    return NULL;
  }
  unsigned h = hash(b->p);
  b->next = live[h];
  live[h] = b;
  allocated += b->size;
  if (allocated > peak) peak = allocated;
  return b->p;
}

static void cu_free (void *p) {
  block **link = &live[hash(p)];
  while (*link && (*link)->p != p) link = &(*link)->next;
  block *b = *link;
  if (b == NULL) return;                    /* not ours: never happens */
  *link = b->next;
  allocated -= b->size;
  if (no_cache > 0) { cudaFree(b->p); free(b); return; }
  b->next = free_list[b->cls];
  free_list[b->cls] = b;
  cached += b->size;
}

void *qkv_cu_alloc (size_t nbytes) { return cu_alloc(nbytes, 0); }
void qkv_cu_free (void *p) { if (p) cu_free(p); }


/* the device */

static int ready = -1;                      /* -1: not tried yet */
static char why_not[256];
static char name[256];
static int tf32_on;
static cublasHandle_t blas;

static int cu_init (char *why, size_t n) {
  if (ready < 0) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || count == 0 || e != cudaSuccess)
      snprintf(why_not, sizeof why_not, "%s (%s)",
               e == cudaErrorInsufficientDriver ? "no CUDA driver"
               : e == cudaErrorNoDevice || (e == cudaSuccess && count == 0) ? "no CUDA device"
               : "the CUDA runtime could not start",
               e == cudaSuccess ? "cudaGetDeviceCount found 0" : cudaGetErrorString(e));
    else if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess)
      snprintf(why_not, sizeof why_not, "the CUDA device could not start (%s)",
               cudaGetErrorString(e));
    else {
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(name, sizeof name, "%s", prop.name);
      ready = 1;
    }
    if (ready != 1) { ready = 0; cudaGetLastError(); }
  }
  if (!ready && why) snprintf(why, n, "%s", why_not);
  return ready ? QKV_OK : QKV_ENODEV;
}

/*
** The cuBLAS handle, made on first use.  Its workspace comes from us
** (device_malloc frees our cache to make room), so that cuBLAS never
** allocates behind the cache's back: with the cache holding most of the
** card, cuBLAS's own allocation would fail a product (ALLOC_FAILED).
*/
#define BLAS_WORKSPACE ((size_t)32 << 20)   /* what NVIDIA advises for Hopper */
static void *blas_ws;

cublasHandle_t qkv_cu_blas (void) {
  if (blas == NULL) {
    cublasStatus_t s = cublasCreate(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
      qkv_cu_fail_blas("cublasCreate", __FILE__, __LINE__, s);
      blas = NULL;
      return NULL;
    }
    if ((blas_ws = device_malloc(BLAS_WORKSPACE, BLAS_WORKSPACE)) == NULL ||
        (s = cublasSetWorkspace(blas, blas_ws, BLAS_WORKSPACE)) != CUBLAS_STATUS_SUCCESS) {
      if (blas_ws) qkv_cu_fail_blas("cublasSetWorkspace", __FILE__, __LINE__, s);
      cudaFree(blas_ws);
      cublasDestroy(blas);
      blas = NULL;
      blas_ws = NULL;
      return NULL;
    }
    cublasSetMathMode(blas, tf32_on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  }
  return blas;
}

static void cu_allow_tf32 (int on) {
  tf32_on = on != 0;
  if (blas) cublasSetMathMode(blas, tf32_on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
}


static int cu_to_device (void *dst, const void *src, size_t n) {
  if (n) cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  return QKV_OK;
}

static int cu_to_host (void *dst, const void *src, size_t n) {
  if (n) cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  return QKV_OK;
}

static int cu_synchronize (void) {
  cudaCheck(cudaDeviceSynchronize());
  return QKV_OK;
}

/* events: the handle is the cudaEvent_t, recorded on the default stream */
static void *cu_event_new (int timing) {
  cudaEvent_t e;
  cudaError_t r = cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming);
  if (r == cudaSuccess) return (void *)e;
  qkv_cu_fail_cuda("cudaEventCreateWithFlags", __FILE__, __LINE__, r);
  return NULL;
}

static void cu_event_free (void *e) { cudaEventDestroy((cudaEvent_t)e); }

static int cu_event_record (void *e) {
  cudaCheck(cudaEventRecord((cudaEvent_t)e, 0));
  return QKV_OK;
}

static int cu_event_wait (void *e) {
  cudaCheck(cudaEventSynchronize((cudaEvent_t)e));
  return QKV_OK;
}

/* not ready is no failure: cleared, as it may stay as the last error */
static int cu_event_done (void *e, int *done) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  *done = r == cudaSuccess;
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return QKV_OK;
  }
  cudaCheck(r);
  return QKV_OK;
}

static int cu_event_elapsed (void *a, void *b, float *ms) {
  cudaCheck(cudaEventSynchronize((cudaEvent_t)b));
  cudaCheck(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
  return QKV_OK;
}

static void cu_memory (qkv_cuda_memory *m) {
  m->allocated = allocated;
  m->cached = cached;
  m->peak = peak;
  m->free = m->total = 0;
  cudaMemGetInfo(&m->free, &m->total);
}

static const char *cu_device_name (void) { return name; }

const char *qkv_cu_attention_path = "none";
static const char *cu_attention_backend (void) { return qkv_cu_attention_path; }

/* QKV_CUDA_ATTENTION's path until qkv.cuda.attention_backend(path) names
   another; a name that is none of them fails every half attention */
const char *qkv_cu_attention_force = getenv("QKV_CUDA_ATTENTION") &&
  *getenv("QKV_CUDA_ATTENTION") && strcmp(getenv("QKV_CUDA_ATTENTION"), "auto")
  ? getenv("QKV_CUDA_ATTENTION") : NULL;
static void cu_force_attention (const char *path) { qkv_cu_attention_force = path; }

/* designated initialisers (C++20: in the order of backend.h's fields) */
static const qkv_backend cuda_backend = {
  .name = "cuda",
  .attention_backward_rows = 0,       /* its kernels read q..go contiguous */
  .attention_backward_groups = 0,
  .elementwise_halves = 1,            /* elementwise.cu's halves_kernel */
  .reduce_halves = 1,                 /* reduce.cu's half_el */
  .alloc = cu_alloc,
  .free = cu_free,
  .copy = qkv_cuda_copy,
  .fill = qkv_cuda_fill,
  .binary = qkv_cuda_binary,
  .unary = qkv_cuda_unary,
  .reduce = qkv_cuda_reduce,
  .matmul = qkv_cuda_matmul,
  .masked_fill = qkv_cuda_masked_fill,
  .random = qkv_cuda_random,
  .softmax = qkv_cuda_softmax,
  .attention = qkv_cuda_attention,
  .where = qkv_cuda_where,
  .gather = qkv_cuda_gather,
  .sort = qkv_cuda_sort,
  .attention_backward = qkv_cuda_attention_backward,
  .scatter_add = qkv_cuda_scatter_add,
  .softmax_backward = qkv_cuda_softmax_backward,
  .log_softmax = qkv_cuda_log_softmax,
  .layer_norm = qkv_cuda_layer_norm,
  .layer_norm_backward = qkv_cuda_layer_norm_backward,
  .cumsum = qkv_cuda_cumsum,
  .tri = qkv_cuda_tri,
  .adam = qkv_cuda_adam,
  .rms_norm = qkv_cuda_rms_norm,
  .rms_norm_backward = qkv_cuda_rms_norm_backward,
  /* the variants (mods.cu, attention_bwd.cu); no attention_blocks: a
     block mask's kinds are made on the CPU and copied here
     (stdlib/qkv/variants/init.lua) */
  .attention_mods = qkv_cuda_attention_mods,
  .attention_mods_backward = qkv_cuda_attention_mods_backward,
  .attention_blocks = NULL,
  /* "high" and "medium" are TF32 here: cuBLAS's math mode (allow_tf32) */
  .split_products = NULL,
};

static const qkv_cuda_api api = {
  .abi = QKV_CUDA_ABI,
  .ops = qkv_cu_op_list,
  .backend = &cuda_backend,
  .init = cu_init,
  .error = qkv_cu_error,
  .to_device = cu_to_device,
  .to_host = cu_to_host,
  .synchronize = cu_synchronize,
  .empty_cache = release_cache,
  .memory = cu_memory,
  .device_name = cu_device_name,
  .allow_tf32 = cu_allow_tf32,
  .attention_backend = cu_attention_backend,
  .force_attention = cu_force_attention,
  .event_new = cu_event_new,
  .event_free = cu_event_free,
  .event_record = cu_event_record,
  .event_wait = cu_event_wait,
  .event_done = cu_event_done,
  .event_elapsed = cu_event_elapsed,
};

extern "C" __attribute__((visibility("default"))) const qkv_cuda_api *qkv_cuda_plugin (void) {
  return &api;
}
