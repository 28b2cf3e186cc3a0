/*
** tma.cuh -- Hopper's asynchronous copies and their barriers (sm_90a), one
** inline function each, for attention_wgmma.cu's producer warp:
**   - mbarriers in shared memory: init, arrive (with an expected count of
**     bytes, expect_tx), and a wait for a phase by its parity;
**   - TMA: cp.async.bulk.tensor, a box of a tensor map (a CUtensorMap the
**     host encodes, qkv_cu_tma_map) from global into shared memory, its
**     bytes counted off an mbarrier's expectation when they land; parts
**     of the box outside the tensor are zeros;
**   - setmaxnreg, a warpgroup's register budget moved to another;
**   - named barriers (bar.sync / bar.arrive with an id and a count of
**     threads), for two warpgroups to take turns.
** An mbarrier's phase completes when its count of arrivals is in and the
** bytes it expects have landed; a wait for parity p returns once the
** phase of that parity has completed (phase 0 first; a producer's first
** wait for an empty stage asks for the parity before it, which holds).
**
** In the host simulation (QKV_CUDASIM) each is a call into
** tests/tools/cudasim/tma.cpp, which keeps the barriers' counts and
** phases, decodes the map as the driver documents it (the 128-byte
** swizzle as wgmma.cuh's, by address bits), and lands a copy either when
** it is issued or at the last moment, when its barrier is waited for
** (SIM_TMA=early|late): the first finds a stage overwritten before its
** readers let it go, the second a stage read before its copy was waited
** for.  A wait that can never complete is a deadlock there.
*/
#ifndef QKV_CUDA_TMA_CUH
#define QKV_CUDA_TMA_CUH

#include <stdint.h>

#include "wgmma.cuh"

#ifdef QKV_CUDASIM
void sim_named_bar(int id, int n, bool wait);
void sim_mbar_init(uint32_t bar, unsigned count);
void sim_mbar_arrive(uint32_t bar, uint32_t tx);
void sim_mbar_wait(uint32_t bar, unsigned parity);
void sim_tma_load(uint32_t dst, const void *map, const int *c, int n, uint32_t bar);
#endif

/* count arrivals complete a phase of the barrier at shared address bar */
__device__ static inline void qkv_mbar_init (uint32_t bar, unsigned count) {
#ifdef QKV_CUDASIM
  sim_mbar_init(bar, count);
#elif QKV_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
#endif
}

/* the inits seen by the copy engine, before the __syncthreads after them */
__device__ static inline void qkv_mbar_fence_init (void) {
#if !defined(QKV_CUDASIM) && QKV_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* an arrival; tx > 0: first the phase expects tx more bytes */
__device__ static inline void qkv_mbar_arrive (uint32_t bar, uint32_t tx = 0) {
#ifdef QKV_CUDASIM
  sim_mbar_arrive(bar, tx);
#elif QKV_WGMMA
  if (tx)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(tx)
                 : "memory");
  else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
#endif
}

/* until the phase of parity `parity` has completed.  On the GPU a wait
   still waiting after 2^34 clocks (about 9 s; a tile takes microseconds)
   traps, so that a barrier protocol gone wrong fails the launch
   (cudaErrorLaunchFailure) rather than hanging the process */
__device__ static inline void qkv_mbar_wait (uint32_t bar, unsigned parity) {
#ifdef QKV_CUDASIM
  sim_mbar_wait(bar, parity);
#elif QKV_WGMMA
  uint32_t done;
  long long t0 = 0;
  for (;;) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (done) break;
    if (t0 == 0) t0 = clock64();
    else if (clock64() - t0 > (1ll << 34)) __trap();
  }
#endif
}

/* the box of map at coordinates c[0 .. N) (c[0] innermost, in elements)
   into shared memory at dst, its bytes counted off bar when they land */
template <int N>
__device__ static inline void qkv_tma_load (uint32_t dst, const void *map, const int *c,
                                            uint32_t bar) {
  static_assert(N >= 2 && N <= 5, "TMA: 2 to 5 dimensions");
#ifdef QKV_CUDASIM
  sim_tma_load(dst, map, c, N, bar);
#elif QKV_WGMMA
  const uint64_t m = (uint64_t)map;
#define QKV_TMA(n, coords, ...)                                                           \
  asm volatile("cp.async.bulk.tensor." #n "d.shared::cluster.global.mbarrier::complete_tx" \
               "::bytes [%0], [%1, {" coords "}], [%2];"                                  \
               :: "r"(dst), "l"(m), "r"(bar), __VA_ARGS__ : "memory")
  if constexpr (N == 2) QKV_TMA(2, "%3, %4", "r"(c[0]), "r"(c[1]));
  else if constexpr (N == 3) QKV_TMA(3, "%3, %4, %5", "r"(c[0]), "r"(c[1]), "r"(c[2]));
  else if constexpr (N == 4)
    QKV_TMA(4, "%3, %4, %5, %6", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
  else
    QKV_TMA(5, "%3, %4, %5, %6, %7", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]));
#undef QKV_TMA
#else
  (void)dst, (void)map, (void)c, (void)bar;
#endif
}

/* this warpgroup's registers a thread, down (a producer) or up */
template <int N, bool UP>
__device__ static inline void qkv_setmaxnreg (void) {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: 24 .. 256, a multiple of 8");
#if !defined(QKV_CUDASIM) && QKV_WGMMA
  if constexpr (UP) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
#endif
}

/* named barrier id (1 .. 15; 0 is __syncthreads') of n threads, a
   multiple of 32: WAIT, wait there (bar.sync); else arrive and go on
   (bar.arrive) */
template <bool WAIT>
__device__ static inline void qkv_bar (int id, int n) {
#ifdef QKV_CUDASIM
  sim_named_bar(id, n, WAIT);
#elif QKV_WGMMA
  if constexpr (WAIT) asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
  else asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
#endif
}

#endif
