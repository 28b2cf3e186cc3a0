/*
** common.h -- the code both backends share, header only: vm/common/ is
** included by the CPU backend (vm/cpu/, C11) and the CUDA backend
** (vm/cuda/, CUDA C++20; g++ under the host simulation) alike.  It holds
** plans and shape checks made on the host, and the element formulas that
** kernels on both sides compute bit for bit.  Every function is static
** inline; QKV_HD (core/half.h: __host__ __device__ under nvcc, nothing in
** C and under tests/tools/cudasim, where all code is host code) marks the
** ones CUDA kernels call.  Nothing here calls qkv code: the CUDA plugin
** links none.  This file is what every header here needs.
*/
#ifndef QKV_COMMON_H
#define QKV_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {                  /* as vm/cuda/cuda.cuh includes it */
#endif
#include "../core/qkv.h"
#ifdef __cplusplus
}
#endif
#include "../core/half.h"

/* the bytes of an element of dtype t where core/dtype.c's qkv_elsize
   cannot be called: in CUDA kernels (NVRTC's too), and in the CUDA
   plugin, which links no qkv code */
static inline QKV_HD size_t qkv_dtype_bytes (qkv_dtype t) {
  return t == QKV_F64 || t == QKV_I64 ? 8 : t == QKV_BOOL ? 1
       : t == QKV_F16 || t == QKV_BF16 ? 2 : 4;
}

#endif
