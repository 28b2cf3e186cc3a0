/*
** wgmma.cuh -- Hopper's warpgroup products (sm_90a), one inline function
** each, for attention_wgmma.cu: wgmma.mma_async m64nNk16 (N 64 or 128,
** bfloat16 or float16 in, float32 accumulators) with A and B read from
** shared memory through matrix descriptors, or A from registers; its
** fence, commit and wait; the proxy fence that orders ordinary writes to
** shared memory (cp.async, stores) before the tensor cores read it; and
** a pointer's shared-memory address.  In the host simulation (QKV_CUDASIM)
** each is a collective of the warpgroup's threads that computes the same
** accumulators when its group is waited for (tests/tools/cudasim/
** products.cpp), decoding the descriptors, the swizzle included, as the
** GPU does.
**
** A warpgroup is 4 consecutive warps from a warp index divisible by 4;
** warp w of it holds rows 16 w .. 16 w + 15 of the 64 x N accumulators,
** lane t the elements mma.cuh names for mma.sync's C fragment, repeated
** along N: register 4 n + e is row g + 8 (e / 2), column 8 n + c + e % 2
** (g = t / 4, c = 2 (t % 4)).  A from registers is a warp's 16 x 16 slice
** in mma.sync's A fragment (mma.cuh), so S's accumulators packed to 16
** bits are P's A operand as they stand.
**
** The shared-memory layout both operands take here, "128-byte swizzle"
** (PTX ISA, "Shared Memory Matrix Layout"; CUTLASS's canonical
** layouts): a tile of rows of 64 elements (128 bytes), 8 rows a 1024-byte
** atom, the 16-byte chunk c of row r stored at chunk c ^ (r % 8) -- the
** XOR taken on address bits 4-6 against 7-9, so a tile's base must be
** 1024-byte aligned in the shared window (qkv_wg_chunk).  A head of 128
** elements is two such column blocks, one after the other.
**   K-major (A = Q, B = K for Q K^T): the descriptor's start is the k16
**     step's first 32 bytes of row 0, SBO the 1024 bytes between 8-row
**     groups, LBO unused (1);
**   MN-major (B = V for P V, transposed by the instruction): rows are
**     the k (key) dimension; start is the k16 step's row 0, SBO the 1024
**     bytes between 8-key groups, LBO the bytes between 64-element column
**     blocks.
*/
#ifndef QKV_CUDA_WGMMA_CUH
#define QKV_CUDA_WGMMA_CUH

#include <stdint.h>

#include "mma.cuh"

/* whether this compilation has the instructions: the sm_90a pass of
   nvcc, and the simulation (elsewhere the kernel compiles to nothing) */
#if defined(QKV_CUDASIM) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QKV_WGMMA 1
#else
#define QKV_WGMMA 0
#endif

#ifdef QKV_CUDASIM
uint32_t sim_smem_addr(const void *p);
void sim_wgmma(int fp16, int n, float *d, const uint32_t *a, uint64_t da, uint64_t db, int tb);
void sim_wg_commit(void);
void sim_wg_wait(int n);
#endif

/* p's address in the block's shared-memory window */
__device__ static inline uint32_t qkv_smem_u32 (const void *p) {
#ifdef QKV_CUDASIM
  return sim_smem_addr(p);
#else
  return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

/* a 128-byte-swizzle matrix descriptor: start, LBO and SBO in bytes */
__device__ static inline uint64_t qkv_wg_desc (uint32_t start, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((start >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
         (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)1 << 62;
}

/* the byte offset of 16-byte chunk ch (elements 8 ch .. 8 ch + 7) of row
   r in a swizzled tile of `rows` rows (the header's layout) */
__host__ __device__ static inline int qkv_wg_chunk (int rows, int r, int ch) {
  return (ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
}

__device__ static inline void qkv_wg_fence (void) {
#if !defined(QKV_CUDASIM) && QKV_WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ static inline void qkv_wg_commit (void) {
#ifdef QKV_CUDASIM
  sim_wg_commit();
#elif QKV_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

template <int N>
__device__ static inline void qkv_wg_wait (void) {
#ifdef QKV_CUDASIM
  sim_wg_wait(N);
#elif QKV_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
#endif
}

/* registers an in-flight wgmma reads or writes (its accumulators, A's
   fragments) pinned in place around its issue and wait, so that the
   compiler moves no use of them between the two (CUTLASS's
   warpgroup_fence_operand) */
template <int N>
__device__ static inline void qkv_wg_fence_operand (float *d) {
#if !defined(QKV_CUDASIM) && QKV_WGMMA
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i]) :: "memory");
#else
  (void)d;
#endif
}

template <int N>
__device__ static inline void qkv_wg_fence_operand (uint32_t *r) {
#if !defined(QKV_CUDASIM) && QKV_WGMMA
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i]) :: "memory");
#else
  (void)r;
#endif
}

/* ordinary writes to shared memory (this thread's) before the tensor
   cores' reads of it, with a barrier after */
__device__ static inline void qkv_fence_proxy_async (void) {
#if !defined(QKV_CUDASIM) && QKV_WGMMA
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* the accumulators' operand lists: "+f"(d[i]) for 32 or 64 registers */
#define QKV_WG_F4(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define QKV_WG_F16(d, i) QKV_WG_F4(d, i), QKV_WG_F4(d, (i) + 4), QKV_WG_F4(d, (i) + 8), \
                         QKV_WG_F4(d, (i) + 12)
#define QKV_WG_F32(d, i) QKV_WG_F16(d, i), QKV_WG_F16(d, (i) + 16)
#define QKV_WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, " \
                   "%30, %31}"
#define QKV_WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, " \
                   "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
                   "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, " \
                   "%58, %59, %60, %61, %62, %63}"
/* d += A B with A (da) and B (db) K-major in shared memory, scale-d 1 */
#define QKV_WG_SS(shape, ty, DL, A, B, ...)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                            \
               "wgmma.mma_async.sync.aligned." shape ".f32." ty "." ty " " DL ", "    \
               A ", " B ", p, 1, 1, 0, 0;\n}\n" : __VA_ARGS__ : "l"(da), "l"(db))
/* d += A B with A's fragments in registers, B MN-major in shared memory */
#define QKV_WG_RS(shape, ty, DL, A, B, ...)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                            \
               "wgmma.mma_async.sync.aligned." shape ".f32." ty "." ty " " DL ", "    \
               A ", " B ", p, 1, 1, 1;\n}\n"                                        \
               : __VA_ARGS__ : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))

/* d (N / 2 floats a thread) += A B, A (64 x 16) and B (16 x N) K-major */
template <int DT, int N>
__device__ static inline void qkv_wgmma_ss (float *d, uint64_t da, uint64_t db) {
  static_assert(N == 64 || N == 128, "wgmma: N 64 or 128");
#ifdef QKV_CUDASIM
  sim_wgmma(DT == QKV_MMA_F16, N, d, NULL, da, db, 0);
#elif QKV_WGMMA
  if constexpr (N == 64 && DT == QKV_MMA_BF16)
    QKV_WG_SS("m64n64k16", "bf16", QKV_WG_D32, "%32", "%33", QKV_WG_F32(d, 0));
  else if constexpr (N == 64)
    QKV_WG_SS("m64n64k16", "f16", QKV_WG_D32, "%32", "%33", QKV_WG_F32(d, 0));
  else if constexpr (DT == QKV_MMA_BF16)
    QKV_WG_SS("m64n128k16", "bf16", QKV_WG_D64, "%64", "%65", QKV_WG_F32(d, 0),
              QKV_WG_F32(d, 32));
  else
    QKV_WG_SS("m64n128k16", "f16", QKV_WG_D64, "%64", "%65", QKV_WG_F32(d, 0),
              QKV_WG_F32(d, 32));
#else
  (void)d, (void)da, (void)db;
#endif
}

/* d (N / 2 floats a thread) += A B, A's fragment a (this warp's 16 rows
   of the 64 x 16), B (16 x N) MN-major */
template <int DT, int N>
__device__ static inline void qkv_wgmma_rs (float *d, const uint32_t a[4], uint64_t db) {
  static_assert(N == 64 || N == 128, "wgmma: N 64 or 128");
#ifdef QKV_CUDASIM
  sim_wgmma(DT == QKV_MMA_F16, N, d, a, 0, db, 1);
#elif QKV_WGMMA
  if constexpr (N == 64 && DT == QKV_MMA_BF16)
    QKV_WG_RS("m64n64k16", "bf16", QKV_WG_D32, "{%32, %33, %34, %35}", "%36",
              QKV_WG_F32(d, 0));
  else if constexpr (N == 64)
    QKV_WG_RS("m64n64k16", "f16", QKV_WG_D32, "{%32, %33, %34, %35}", "%36",
              QKV_WG_F32(d, 0));
  else if constexpr (DT == QKV_MMA_BF16)
    QKV_WG_RS("m64n128k16", "bf16", QKV_WG_D64, "{%64, %65, %66, %67}", "%68",
              QKV_WG_F32(d, 0), QKV_WG_F32(d, 32));
  else
    QKV_WG_RS("m64n128k16", "f16", QKV_WG_D64, "{%64, %65, %66, %67}", "%68",
              QKV_WG_F32(d, 0), QKV_WG_F32(d, 32));
#else
  (void)d, (void)a, (void)db;
#endif
}

#endif
