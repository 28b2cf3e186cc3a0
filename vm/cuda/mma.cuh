/*
** mma.cuh -- the tensor-core instructions the half-precision kernels use,
** one inline function each: a warp's 16 x 8 x 16 matrix multiply-add
** (mma.sync m16n8k16, bfloat16 or float16 in, float32 accumulators),
** ldmatrix (four 8 x 8 tiles of 16-bit elements from shared memory into
** fragments, plain or transposed) and cp.async (global to shared memory in
** the background, in groups).  On nvcc each is its PTX instruction; in
** the host simulation (tests/tools/cudasim, QKV_CUDASIM) each is a warp
** collective that computes the same fragments, so the kernels' numerics
** are tested on every `make test`.  Also exp2 as the SFU computes it.
**
** Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane t,
** g = t / 4 and c = 2 (t % 4); a register holds two 16-bit elements, the
** lower-numbered column (or row, for B) in its low half:
**   A (16 x 16, row-major): a[0] row g, cols c, c+1; a[1] row g+8; a[2]
**     row g, cols c+8, c+9; a[3] row g+8, cols c+8, c+9.
**   B (16 x 8, k x n): b[0] rows c, c+1 of col g; b[1] rows c+8, c+9.
**   C, D (16 x 8, float): d[0], d[1] row g, cols c, c+1; d[2], d[3] row g+8.
** ldmatrix x4: lanes 8j to 8j+7 give the addresses of tile j's 8 rows (16
** bytes each); register j of lane t gets row g, elements c, c+1 of tile j,
** or, transposed, element g of rows c and c+1.
*/
#ifndef QKV_CUDA_MMA_CUH
#define QKV_CUDA_MMA_CUH

#include <math.h>
#include <stdint.h>

#if !defined(QKV_CUDASIM) && !defined(__CUDACC_RTC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

enum { QKV_MMA_BF16 = 0, QKV_MMA_F16 = 1 };

#ifdef QKV_CUDASIM
void sim_mma_m16n8k16(int fp16, float d[4], const uint32_t a[4], const uint32_t b[2]);
void sim_ldmatrix_x4(int trans, uint32_t r[4], const void *row);
void sim_cp_async(void *dst, const void *src, size_t n);
void sim_cp_commit(void);
void sim_cp_wait(int n);
#endif

/* d += a b, one warp, every lane */
template <int DT>
__device__ static inline void qkv_mma (float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef QKV_CUDASIM
  sim_mma_m16n8k16(DT == QKV_MMA_F16, d, a, b);
#else
  if (DT == QKV_MMA_BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* four 8 x 8 tiles from shared memory; row: this lane's row address */
__device__ static inline void qkv_ldmatrix_x4 (uint32_t r[4], const void *row) {
#ifdef QKV_CUDASIM
  sim_ldmatrix_x4(0, r, row);
#else
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#endif
}

__device__ static inline void qkv_ldmatrix_x4_trans (uint32_t r[4], const void *row) {
#ifdef QKV_CUDASIM
  sim_ldmatrix_x4(1, r, row);
#else
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#endif
}

/* cp.async: 16 bytes from global to shared memory, in the background;
   commit closes a group of them, wait<n> returns when at most n groups
   are still in flight (the simulation does the copies there) */
__device__ static inline void qkv_cp_async16 (void *dst, const void *src) {
#ifdef QKV_CUDASIM
  sim_cp_async(dst, src, 16);
#else
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(src) : "memory");
#endif
}

__device__ static inline void qkv_cp_commit (void) {
#ifdef QKV_CUDASIM
  sim_cp_commit();
#else
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int N>
__device__ static inline void qkv_cp_wait (void) {
#ifdef QKV_CUDASIM
  sim_cp_wait(N);
#else
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}

/* two floats rounded to nearest into one register, lo in the low half */
template <int DT>
__device__ static inline uint32_t qkv_pack2 (float lo, float hi) {
#ifdef QKV_CUDASIM
  uint16_t a = DT == QKV_MMA_F16 ? qkv_f2h(lo) : qkv_f2bf(lo);
  uint16_t b = DT == QKV_MMA_F16 ? qkv_f2h(hi) : qkv_f2bf(hi);
  return (uint32_t)a | (uint32_t)b << 16;
#elif defined(__CUDACC_RTC__)
  /* NVRTC's text has no cuda_bf16.h: the instruction the intrinsics are
     (its first operand goes to the high half) */
  uint32_t u;
  if (DT == QKV_MMA_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
#else
  uint32_t u;
  if (DT == QKV_MMA_BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &h, 4);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&u, &h, 4);
  }
  return u;
#endif
}

/* 2^x by the SFU's approximation alone (MUFU.EX2, results below 2^-126
   flushed to 0): exp2f compiles to it plus three instructions that keep
   those, for which the attention kernels have no use (a probability
   against its row's max, whose sum is at least 1); exp2(-inf) = 0 */
__device__ static inline float qkv_exp2 (float x) {
#ifdef QKV_CUDASIM
  float y = exp2f(x);
  return y < 0x1p-126f ? 0.f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/* one 16-bit element as float */
template <int DT>
__device__ static inline float qkv_half_get (uint16_t h) {
  return DT == QKV_MMA_F16 ? qkv_h2f(h) : qkv_bf2f(h);
}

#endif
