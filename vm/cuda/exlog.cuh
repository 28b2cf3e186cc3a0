/*
** exlog.cuh -- ex and lg: expf and logf for a float, exp and log for a
** double, so that a kernel templated on its element type T calls one name
** and float32 stays in float32.  The fused attention's CUDA-core kernels
** share them (attention.cu, attention_bwd.cu, attention_decode.cu).  Not
** in attention.cuh: mods.cu sees that header through mods.cuh and still
** defines a pair of its own.
*/
#ifndef QKV_CUDA_EXLOG_CUH
#define QKV_CUDA_EXLOG_CUH

#include <math.h>

__device__ static inline float ex (float x) { return expf(x); }
__device__ static inline double ex (double x) { return exp(x); }
__device__ static inline float lg (float x) { return logf(x); }
__device__ static inline double lg (double x) { return log(x); }

#endif
