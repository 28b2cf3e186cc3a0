/*
** cudnn.h -- the halves' fused attention through cuDNN (cudnn.cpp), which
** the plugin holds only where it was built with cuDNN's headers: the two
** functions are weak, NULL in a plugin without them (and in the host
** simulation).  Each takes float16 or bfloat16 as the backend's attention
** and attention_backward do (backend.h), with the plan the backend made
** of them (common/attention_plan.h), and returns QKV_EDTYPE where it
** does not take the job (no libcudnn found, a mask, a shape cuDNN does not
** run, another path forced: cuda.cuh's qkv_cu_attention_force), so that
** the caller runs its own kernel; cudnn forced makes that an error instead.
*/
#ifndef QKV_CUDA_CUDNN_H
#define QKV_CUDA_CUDNN_H

#include "../common/attention_plan.h"

/* what to compute from the plan (its mask, causal, scale, sizes), the
   tensors for cuDNN's descriptors of the same operands */
int qkv_cu_cudnn_attention(const qkv_attn_plan &P, qkv_tensor *out, const qkv_tensor *q,
                           const qkv_tensor *k, const qkv_tensor *v, qkv_tensor *lse)
  __attribute__((weak));

int qkv_cu_cudnn_attention_backward(const qkv_attn_plan &P, qkv_tensor *dq, qkv_tensor *dk,
                                    qkv_tensor *dv, const qkv_tensor *q, const qkv_tensor *k,
                                    const qkv_tensor *v, const qkv_tensor *o,
                                    const qkv_tensor *go, const qkv_tensor *lse)
  __attribute__((weak));

/* why a plugin without them declines (cuda.cuh's qkv_cu_decline) */
#define NO_CUDNN "this plugin was built without cuDNN's headers"

#endif
