/*
** jit.cuh -- kernels compiled at run time (jit.cu): a source text made by
** the plugin (mods_gen.cu: a score_mod/mask_mod program as code) compiled
** once per process and text, then launched like the plugin's own.
**
** On a GPU the text goes to NVRTC (libnvrtc, opened at the first use, so
** that the plugin neither links nor needs it) for the device's
** architecture, and the machine code to cudaLibraryLoadData.  Under the
** host simulation (tests/tools/cudasim) the same text is compiled by the
** host's C++ compiler against cudasim.h into a shared object, cached on
** disk by the text, and its kernels are host functions run by sim_launch:
** the generated code runs on the simulation as it would on the GPU.
**
** QKV_CUDA_JIT=0 turns it off (qkv_cu_jit_on is false, and the callers
** take their compiled-in paths).
*/
#ifndef QKV_CUDA_JIT_CUH
#define QKV_CUDA_JIT_CUH

#include "cuda.cuh"

/* a compiled text: its kernels by name (qkv_cu_jit_kernel) */
struct qkv_cu_jit;

/* whether kernels can be compiled here: QKV_CUDA_JIT is not 0 and the
   compiler (NVRTC, or the simulation's) is found; the reason when not */
int qkv_cu_jit_on(const char **why);

/* the text compiled, or found compiled before (one compile per process
   and text; thread-safe); NULL with the error recorded (qkv_cu_fail)
   when it does not compile */
qkv_cu_jit *qkv_cu_jit_get(const char *src);

/* the kernel called name (an extern "C" __global__ of the text), or NULL */
const void *qkv_cu_jit_kernel(qkv_cu_jit *j, const char *name);

/* k(a) on grid blocks of block threads with smem bytes of dynamic shared
   memory, a the kernel's one argument */
template <typename A>
static int qkv_cu_jit_launch (const void *k, const char *name, unsigned grid, unsigned block,
                              size_t smem, A a) {
  if (smem > 48 * 1024)
    cudaCheck(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
#ifdef QKV_CUDASIM
  sim_launch(sim_cfg(grid, block, smem), name, (void (*)(A))k, a);
  cudaError_t e = cudaGetLastError();
#else
  void *args[] = {&a};
  cudaError_t e = cudaLaunchKernel(k, dim3(grid), dim3(block), args, smem, 0);
#endif
  return e == cudaSuccess ? QKV_OK : qkv_cu_fail_cuda(name, __FILE__, __LINE__, e);
}

#endif
