/*
** rows.cuh -- the groups of threads that share a row in softmax.cu and
** norm.cu: a thread, a warp or a block, each with its first row, its step
** between rows, its threads' lane and count, and the reductions over them.
** Every thread of a group gets the same result: a warp's butterfly adds
** the same pairs in every lane, and a block's threads each fold the
** warps' results in the same order.
*/
#ifndef QKV_CUDA_ROWS_CUH
#define QKV_CUDA_ROWS_CUH

#include <math.h>

#include "cuda.cuh"

namespace {                   /* each file's own copy */

#define FULL 0xffffffffu

struct by_thread {
  __device__ static int64_t first () { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
  __device__ static int64_t step () { return (int64_t)gridDim.x * blockDim.x; }
  __device__ static int lane () { return 0; }
  __device__ static int size () { return 1; }
  __device__ static double sum (double v) { return v; }
  template <typename T> __device__ static T max (T v) { return v; }
  __device__ static int any (int v) { return v; }
};

template <typename T> __device__ static inline T warp_max (T v) {
  for (int o = 16; o > 0; o /= 2) {
    T u = __shfl_xor_sync(FULL, v, o);
    v = u > v ? u : v;
  }
  return v;
}

__device__ static inline double warp_sum (double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL, v, o);
  return v;
}

struct by_warp {
  __device__ static int64_t first () {
    return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  }
  __device__ static int64_t step () { return (int64_t)gridDim.x * blockDim.x / 32; }
  __device__ static int lane () { return threadIdx.x % 32; }
  __device__ static int size () { return 32; }
  __device__ static double sum (double v) { return warp_sum(v); }
  template <typename T> __device__ static T max (T v) { return warp_max(v); }
  __device__ static int any (int v) { return __any_sync(FULL, v); }
};

/* blockDim.x a multiple of 32; the first barrier keeps a write to sh from
   overtaking a thread still reading the previous call's */
struct by_block {
  __device__ static int64_t first () { return blockIdx.x; }
  __device__ static int64_t step () { return gridDim.x; }
  __device__ static int lane () { return threadIdx.x; }
  __device__ static int size () { return blockDim.x; }
  __device__ static double sum (double v) {
    __shared__ double sh[32];
    v = warp_sum(v);
    __syncthreads();
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    v = sh[0];
    for (unsigned w = 1; w < blockDim.x / 32; w++) v += sh[w];
    return v;
  }
  template <typename T> __device__ static T max (T v) {
    __shared__ T sh[32];
    v = warp_max(v);
    __syncthreads();
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    v = sh[0];
    for (unsigned w = 1; w < blockDim.x / 32; w++) v = sh[w] > v ? sh[w] : v;
    return v;
  }
  __device__ static int any (int v) { return __syncthreads_or(v); }
};

__device__ static inline float ex (float v) { return expf(v); }
__device__ static inline double ex (double v) { return exp(v); }

}

#endif
