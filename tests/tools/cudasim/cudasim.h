/*
** cudasim.h -- a host simulation of the parts of CUDA, cuBLAS and CUB that
** the vm/cuda .cu files use, so that the real plugin source builds with g++ as
** build/simcuda.so (tests/tools/cudasim/build.sh) and runs the real
** kernels without a GPU:
**
**   QKV_CUDA_PLUGIN=build/simcuda.so build/qkv test tests/backends/cuda/
**
** build.sh makes cuda_runtime.h, cublas_v2.h and
** cub/device/device_segmented_sort.cuh include this file, and rewrite.py
** turns each launch k<<<grid, block, smem, stream>>>(args) into
** sim_launch(sim_cfg(grid, block, smem, stream), "k", k, args) and each
** `extern __shared__ T name[];` into a pointer to the block's dynamic
** shared memory.
**
** The model (runtime.cpp; scheduler.cpp runs the grid, products.cpp the
** tensor cores and cuBLAS): device memory is host memory (cudaMalloc is
** malloc, copies are memcpy) and every launch runs to completion before
** sim_launch returns (one stream).  Every block of the grid runs; a
** block's threads are cooperative fibers on one OS thread, switched only
** at __syncthreads* and at warp operations (shuffles, votes), so a block
** of 1024 threads costs 1024 small stacks, not 1024 OS threads.  Blocks
** are spread over SIM_WORKERS OS threads (default: the cores, at most 4),
** which is why __shared__ is thread_local: one block at a time per worker.
** Launch configurations, shared-memory sizes, warp-operation masks,
** barriers that can never complete, cuBLAS arguments and copies outside
** a device allocation are checked: a failure prints "cudasim: ..." to
** stderr and is returned by the next cudaGetLastError / the call itself.
*/
#ifndef QKV_CUDASIM_H
#define QKV_CUDASIM_H
#define QKV_CUDASIM 1        /* vm/cuda/mma.cuh: the tensor-core instructions as
                                warp collectives (sim_mma_m16n8k16, sim_ldmatrix_x4) */

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

/* qualifiers: all code is host code; __shared__ variables are per block,
   and a worker runs one block at a time */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static thread_local
#define __constant__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3 (unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
/* set by the scheduler for the fiber it runs */
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;


/* errors */

typedef int cudaError_t;
enum {
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3, cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101, cudaErrorNoDevice = 100,
  cudaErrorInsufficientDriver = 35, cudaErrorInvalidDeviceFunction = 98,
  cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719,
  cudaErrorECCUncorrectable = 214, cudaErrorLaunchTimeout = 702,
  cudaErrorContextIsDestroyed = 709, cudaErrorAssert = 710, cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715, cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717, cudaErrorInvalidPc = 718, cudaErrorUnknown = 999,
  cudaErrorNotReady = 600, cudaErrorInvalidResourceHandle = 400
};
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);


/* the device and memory */

typedef struct CUstream_st *cudaStream_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice, cudaMemcpyDefault
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock, cudaDevAttrMaxSharedMemoryPerBlock,
  cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
  cudaDevAttrMultiProcessorCount, cudaDevAttrWarpSize
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout
};
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
  int warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor;
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t n);
template <typename T> static inline cudaError_t cudaMalloc (T **p, size_t n) {
  return cudaMalloc((void **)p, n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaStreamSynchronize(cudaStream_t s);

/* events: every launch has finished when it returns, so a record is the
   host's clock then, and an event is always passed */
typedef struct sim_event *cudaEvent_t;
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

/* the driver's tensor maps (TMA, vm/cuda/tma.cuh), reached as the plugin
   does, through cudaGetDriverEntryPointByVersion: the types of cuda.h
   and cudaTypedefs.h the kernels name (tma.cpp encodes and copies) */
#define __grid_constant__
typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
struct alignas(128) CUtensorMap { cuuint64_t opaque[16]; };
typedef enum {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16,
  CU_TENSOR_MAP_DATA_TYPE_UINT32, CU_TENSOR_MAP_DATA_TYPE_INT32,
  CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_INT64,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
} CUtensorMapDataType;
typedef enum {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_INTERLEAVE_16B, CU_TENSOR_MAP_INTERLEAVE_32B
} CUtensorMapInterleave;
typedef enum {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B,
  CU_TENSOR_MAP_SWIZZLE_128B
} CUtensorMapSwizzle;
typedef enum {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B
} CUtensorMapL2promotion;
typedef enum {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
} CUtensorMapFloatOOBfill;
typedef CUresult (*PFN_cuTensorMapEncodeTiled_v12000)(
    CUtensorMap *t, CUtensorMapDataType dt, cuuint32_t rank, void *addr, const cuuint64_t *dim,
    const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estr,
    CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
    CUtensorMapFloatOOBfill oob);
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2
};
enum { cudaEnableDefault = 0 };
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status = NULL);

/* the attribute a kernel's dynamic shared memory over 48 KiB needs */
cudaError_t sim_set_func_attr(const void *f, cudaFuncAttribute a, int v);
template <typename F> static inline cudaError_t cudaFuncSetAttribute (F f, cudaFuncAttribute a,
                                                                      int v) {
  return sim_set_func_attr((const void *)f, a, v);
}

/* 0 when [p, p + n) lies in one live allocation (cudaMalloc), else the
   error, printed with what */
cudaError_t sim_check_range(const void *p, size_t n, const char *what);


/* barriers and warp operations (scheduler.cpp), from inside kernels */

void __syncthreads(void);
int __syncthreads_or(int v);
int __syncthreads_and(int v);
int __syncthreads_count(int v);
void __syncwarp(unsigned mask = 0xffffffffu);
static inline void __threadfence (void) { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence_block (void) { std::atomic_thread_fence(std::memory_order_seq_cst); }

enum sim_warp_op { SIM_SHFL, SIM_VOTE, SIM_SYNCWARP };
/* every lane of mask gives v; returns the values of all 32 lanes */
const uint64_t *sim_warp_exchange(sim_warp_op op, unsigned mask, uint64_t v);
unsigned sim_lane(void);

template <typename T> static inline uint64_t sim_bits (T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of over 8 bytes");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  return u;
}
template <typename T> static inline T sim_from_bits (uint64_t u) {
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}
/* src lane within the lane's width-wide segment, as the hardware does */
template <typename T> static inline T sim_shfl (unsigned mask, T v, int src, int width) {
  const uint64_t *all = sim_warp_exchange(SIM_SHFL, mask, sim_bits(v));
  unsigned lane = sim_lane(), base = lane & ~(unsigned)(width - 1);
  return sim_from_bits<T>(all[base + ((unsigned)src & (unsigned)(width - 1))]);
}
template <typename T> static inline T __shfl_sync (unsigned mask, T v, int src, int width = 32) {
  return sim_shfl(mask, v, src, width);
}
template <typename T> static inline T __shfl_xor_sync (unsigned mask, T v, int o, int width = 32) {
  return sim_shfl(mask, v, (int)(sim_lane() % (unsigned)width) ^ o, width);
}
template <typename T> static inline T __shfl_down_sync (unsigned mask, T v, unsigned d,
                                                        int width = 32) {
  unsigned l = sim_lane() % (unsigned)width;
  return sim_shfl(mask, v, (int)(l + d < (unsigned)width ? l + d : l), width);
}
template <typename T> static inline T __shfl_up_sync (unsigned mask, T v, unsigned d,
                                                      int width = 32) {
  unsigned l = sim_lane() % (unsigned)width;
  return sim_shfl(mask, v, (int)(l >= d ? l - d : l), width);
}
static inline unsigned __ballot_sync (unsigned mask, int p) {
  const uint64_t *all = sim_warp_exchange(SIM_VOTE, mask, p != 0);
  unsigned r = 0;
  for (int l = 0; l < 32; l++)
    if ((mask >> l & 1) && all[l]) r |= 1u << l;
  return r;
}
static inline int __any_sync (unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
static inline int __all_sync (unsigned mask, int p) { return __ballot_sync(mask, p) == mask; }
static inline unsigned __activemask (void) { return 0xffffffffu; }


/* atomics (blocks run on several OS threads): return the old value */

template <typename T> static inline T sim_atomic_add (T *p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
static inline float atomicAdd (float *p, float v) { return sim_atomic_add(p, v); }
static inline double atomicAdd (double *p, double v) { return sim_atomic_add(p, v); }
static inline int atomicAdd (int *p, int v) {
  return (int)sim_atomic_add((unsigned *)p, (unsigned)v);      /* wraps, as the GPU */
}
static inline unsigned atomicAdd (unsigned *p, unsigned v) { return sim_atomic_add(p, v); }
static inline unsigned long long atomicAdd (unsigned long long *p, unsigned long long v) {
  return sim_atomic_add(p, v);
}
/* sm_90's vector adds: atomic per element (not as a whole, as on the
   GPU), at an address aligned to the vector's size (a fault otherwise) */
struct alignas(8) float2 { float x, y; };
static inline float2 make_float2 (float x, float y) { return {x, y}; }
void sim_check_align(const void *p, size_t align, const char *what);
static inline float2 atomicAdd (float2 *p, float2 v) {
  sim_check_align(p, 8, "atomicAdd(float2 *)");
  return {sim_atomic_add(&p->x, v.x), sim_atomic_add(&p->y, v.y)};
}
template <typename T> static inline T atomicExch (T *p, T v) {
  return std::atomic_ref<T>(*p).exchange(v);
}
template <typename T> static inline T atomicCAS (T *p, T cmp, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v);
  return cmp;
}
template <typename T> static inline T atomicMax (T *p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {}
  return old;
}
template <typename T> static inline T atomicMin (T *p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {}
  return old;
}


/* intrinsics */

static inline unsigned __float_as_uint (float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float (unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int (float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float (int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong (double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double (long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline unsigned __umulhi (unsigned a, unsigned b) {
  return (unsigned)(((uint64_t)a * b) >> 32);
}
static inline unsigned long long __umul64hi (unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
/* the host compiles without contraction (-ffp-contract=off), so these are
   the plain operations */
static inline float __fmul_rn (float a, float b) { return a * b; }
static inline float __fadd_rn (float a, float b) { return a + b; }
static inline double __dmul_rn (double a, double b) { return a * b; }
static inline double __dadd_rn (double a, double b) { return a + b; }
static inline int __popc (unsigned v) { return __builtin_popcount(v); }
static inline int __popcll (unsigned long long v) { return __builtin_popcountll(v); }
static inline int __clz (int v) { return v ? __builtin_clz((unsigned)v) : 32; }
static inline int __clzll (long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline int __ffs (int v) { return __builtin_ffs(v); }
template <typename T> static inline T __ldg (const T *p) { return *p; }
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4 (unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
static inline float rsqrtf (float v) { return 1.0f / sqrtf(v); }
static inline double rsqrt (double v) { return 1.0 / sqrt(v); }


/* launches */

struct sim_cfg_t { dim3 grid, block; size_t smem; };
static inline sim_cfg_t sim_cfg (dim3 g, dim3 b, size_t smem = 0, cudaStream_t = 0) {
  return {g, b, smem};
}

/* runs body(ctx) as every thread of the grid; the error, if any, goes to
   cudaGetLastError */
void sim_run_grid(const char *name, const void *kernel, sim_cfg_t c, void (*body)(void *),
                  void *ctx);
/* the running block's dynamic shared memory */
void *sim_dynamic_smem(void);

template <typename... P> struct sim_call {
  void (*f)(P...);
  std::tuple<P...> args;
  static void run (void *self) {
    sim_call *c = (sim_call *)self;
    std::apply(c->f, c->args);
  }
};

template <typename... P, typename... A>
static inline void sim_launch (sim_cfg_t c, const char *name, void (*f)(P...), A &&...a) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
  static_assert((std::is_trivially_copyable_v<std::decay_t<P>> && ...),
                "kernel parameters must be trivially copyable");
  static_assert((sizeof(P) + ... + 0) <= 4096, "kernel parameters over 4 KiB");
  sim_call<P...> call{f, std::tuple<P...>(std::forward<A>(a)...)};  /* converted once */
  sim_run_grid(name, (const void *)f, c, sim_call<P...>::run, &call);
}


/* cuBLAS: strided batched products, column-major */

typedef struct sim_blas *cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11, CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum {
  CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *a, int lda, long long sa, const float *b, int ldb,
    long long sb, const float *beta, float *c, int ldc, long long sc, int count);
cublasStatus_t cublasDgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const double *alpha, const double *a, int lda, long long sa, const double *b, int ldb,
    long long sb, const double *beta, double *c, int ldc, long long sc, int count);


/* CUB: the segmented stable sort of (key, value) pairs, with CUB's
   two-call temp-storage protocol (a NULL temp only sets its size) */

namespace cub {
struct DeviceSegmentedSort {
  static bool overlap (const void *p, size_t a, const void *q, size_t b) {
    return (const char *)p < (const char *)q + b && (const char *)q < (const char *)p + a;
  }
  template <typename K, typename V, typename BI, typename EI>
  static cudaError_t run (bool desc, void *tmp, size_t &tmp_bytes, const K *kin, K *kout,
                          const V *vin, V *vout, long long n, long long nseg, BI begin, EI end) {
    size_t need = 256 + (size_t)n * (sizeof(K) + sizeof(V)) + (size_t)nseg * 16;
    if (tmp == NULL) { tmp_bytes = need; return cudaSuccess; }
    if (n < 0 || nseg < 0 || tmp_bytes < need) return cudaErrorInvalidValue;
    if (cudaError_t e = sim_check_range(tmp, need, "cub: temp storage")) return e;
    if (n == 0 || nseg == 0) return cudaSuccess;
    if (cudaError_t e = sim_check_range(kin, n * sizeof(K), "cub: keys in")) return e;
    if (cudaError_t e = sim_check_range(kout, n * sizeof(K), "cub: keys out")) return e;
    if (cudaError_t e = sim_check_range(vin, n * sizeof(V), "cub: values in")) return e;
    if (cudaError_t e = sim_check_range(vout, n * sizeof(V), "cub: values out")) return e;
    if (overlap(kout, n * sizeof(K), kin, n * sizeof(K)) ||
        overlap(kout, n * sizeof(K), vin, n * sizeof(V)) ||
        overlap(vout, n * sizeof(V), kin, n * sizeof(K)) ||
        overlap(vout, n * sizeof(V), vin, n * sizeof(V)) ||
        overlap(kout, n * sizeof(K), vout, n * sizeof(V))) {
      fprintf(stderr, "cudasim: cub: the outputs overlap the inputs\n");
      return cudaErrorInvalidValue;
    }
    memset(tmp, 0xab, need);
    std::vector<std::pair<K, V>> buf;
    for (long long s = 0; s < nseg; s++) {
      long long b = begin[s], e = end[s];
      if (b < 0 || e > n) {
        fprintf(stderr, "cudasim: cub: segment %lld is [%lld, %lld), outside [0, %lld)\n",
                s, b, e, n);
        return cudaErrorInvalidValue;
      }
      if (e <= b) continue;                 /* empty segment */
      buf.clear();
      for (long long i = b; i < e; i++) buf.emplace_back(kin[i], vin[i]);
      if (desc)
        std::stable_sort(buf.begin(), buf.end(),
                         [](const auto &x, const auto &y) { return y.first < x.first; });
      else
        std::stable_sort(buf.begin(), buf.end(),
                         [](const auto &x, const auto &y) { return x.first < y.first; });
      for (long long i = b; i < e; i++) { kout[i] = buf[i - b].first; vout[i] = buf[i - b].second; }
    }
    return cudaSuccess;
  }
  template <typename K, typename V, typename BI, typename EI>
  static cudaError_t StableSortPairs (void *tmp, size_t &tmp_bytes, const K *kin, K *kout,
                                      const V *vin, V *vout, long long n, long long nseg,
                                      BI b, EI e, cudaStream_t = 0) {
    return run(false, tmp, tmp_bytes, kin, kout, vin, vout, n, nseg, b, e);
  }
  template <typename K, typename V, typename BI, typename EI>
  static cudaError_t StableSortPairsDescending (void *tmp, size_t &tmp_bytes, const K *kin,
                                                K *kout, const V *vin, V *vout, long long n,
                                                long long nseg, BI b, EI e, cudaStream_t = 0) {
    return run(true, tmp, tmp_bytes, kin, kout, vin, vout, n, nseg, b, e);
  }
};
}

#endif
