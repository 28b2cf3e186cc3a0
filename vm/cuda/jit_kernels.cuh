/*
** jit_kernels.cuh -- the kernels a score_mod/mask_mod program is compiled
** into at run time (mods_gen.cu, jit.cu): the CUDA-core tiles of
** attention_kernel.cuh (float32, float64) and the tensor-core tiles of
** attention_mma_kernel.cuh and attention_mma_bwd_kernel.cuh (bfloat16,
** float16).  embed.py makes this file
** and what it includes one text, which the plugin hands to NVRTC.
*/
#ifndef QKV_CUDA_JIT_KERNELS_CUH
#define QKV_CUDA_JIT_KERNELS_CUH

#include "attention_kernel.cuh"
#include "attention_mma_kernel.cuh"
#include "attention_mma_bwd_kernel.cuh"

#endif
