/*
** attention_mma.cu -- the tensor-core forward in bfloat16 and float16
** (attention_mma_kernel.cuh holds the kernel and says how it tiles the
** work): its variants of tiles, the choice of one and the launch.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "attention_mma_kernel.cuh"

/* the plugin's kernel: plain attention (no program) */
template <int DT, int D, int MT, int BK, bool PIPE>
__global__ void __launch_bounds__(QKV_MMA_NT, 2) attention_mma_kernel (qkv_attn_plan P, int vec) {
  extern __shared__ __align__(16) unsigned char smem[];
  qkv_attn_mma<DT, D, MT, BK, PIPE, qkv_mods_none>(P, NULL, vec, smem);
}

/* ---- the variants and the launch ---- */

/* the variants, QKV_CUDA_MMA_VARIANT's names: 16 mt rows a warp, bk keys
   a tile */
static const struct { const char *name; int mt, bk; } variants[] = {
  {"r16k64", 1, 64}, {"r32k32", 2, 32}, {"r32k64", 2, 64}, {"r32k128", 2, 128}};
enum { NVARIANTS = sizeof variants / sizeof variants[0] };

template <int DT, int D, int MT, int BK, bool PIPE>
static int launch (qkv_attn_plan P, int vec) {
  size_t smem = qkv_mma_smem(D, MT, BK, PIPE);
  void (*kernel)(qkv_attn_plan, int) = attention_mma_kernel<DT, D, MT, BK, PIPE>;
  unsigned grid = 0;
  int err = attention_grid(kernel, smem, QKV_MMA_WARPS * 16 * MT, &P, &grid);
  if (err != QKV_OK) return err;
  kernel<<<grid, QKV_MMA_NT, smem>>>(P, vec);
  launchCheck("attention_mma_kernel");
  return QKV_OK;
}

/* variant v (-1: the head size's default) at head size D, pipelined or
   not.  Built: r16k64, r32k32, r32k64 at both head sizes, r32k128 at d 64
   only (at d 128 S's 128 accumulators beside O's 128 leave ptxas too few
   registers: it spills); the defaults r32k128 at d 64, r32k64 at d 128;
   the one-stage kernel (not pipe) r32k64 at d 64, r32k32 at d 128 */
template <int DT, int D>
static int run (const qkv_attn_plan &P, int vec, int v, int pipe) {
  int mt = v < 0 ? 2 : variants[v].mt, bk = v < 0 ? (D == 64 ? 128 : 64) : variants[v].bk;
  if (!pipe) return launch<DT, D, 2, D == 64 ? 64 : 32, false>(P, vec);
  if (mt == 1 && bk == 64) return launch<DT, D, 1, 64, true>(P, vec);
  if (mt == 2 && bk == 32) return launch<DT, D, 2, 32, true>(P, vec);
  if (mt == 2 && bk == 64) return launch<DT, D, 2, 64, true>(P, vec);
  if constexpr (D == 64)
    if (mt == 2 && bk == 128) return launch<DT, D, 2, 128, true>(P, vec);
  return qkv_cu_fail("QKV_CUDA_MMA_VARIANT", __FILE__, __LINE__,
                     "r32k128 is built for head size 64 only");
}

/* QKV_CUDA_MMA_VARIANT: a name of variants (unset or empty: -1, each
   head size's default); another name is an error, so that a bench never
   times the default under a misspelt name */
static int named_variant (int *v) {
  static int variant = -2;
  if (variant == -2) {
    const char *e = getenv("QKV_CUDA_MMA_VARIANT");
    variant = e && *e ? -3 : -1;
    for (int i = 0; i < NVARIANTS; i++)
      if (e && !strcmp(e, variants[i].name)) variant = i;
  }
  *v = variant;
  return variant == -3 ? qkv_cu_fail("QKV_CUDA_MMA_VARIANT", __FILE__, __LINE__,
                                     "not one of r16k64, r32k32, r32k64, r32k128")
                       : QKV_OK;
}

/* QKV_OK where the kernel takes P and no other path is forced */
static int takes (const qkv_attn_plan &P) {
  /* another path forced (qkv.cuda.attention_backend, QKV_CUDA_ATTENTION) */
  if (qkv_cu_forced_other("mma")) return QKV_EDTYPE;
  if (P.dk != P.dv || (P.dk != 64 && P.dk != 128) || (uintptr_t)P.out % 4 != 0 ||
      P.nq >= 1 << 30 || P.nk >= 1 << 30 || P.nbatch > INT_MAX / (P.nq / 64 + 1))
    return qkv_cu_decline("mma", "the tensor-core kernel takes head sizes 64 and 128, dk == "
                                 "dv");       /* (the last two: positions in int, a block an item) */
  return QKV_OK;
}

int qkv_cu_attention_mma (const qkv_attn_plan &P) {
  qkv_dtype dt = P.dtype;
  int variant, err = takes(P);
  if (err == QKV_OK) err = named_variant(&variant);
  if (err != QKV_OK) return err;
  qkv_cu_attention_path = "mma";
  int vec = qkv_cu_dense_rows(P);
  static int sync = -1;                  /* QKV_CUDA_MMA_SYNC=1: no cp.async pipeline */
  if (sync < 0) sync = getenv("QKV_CUDA_MMA_SYNC") != NULL;
  int pipe = vec && !sync;
  if (dt == QKV_BF16)
    return P.dk == 64 ? run<QKV_MMA_BF16, 64>(P, vec, variant, pipe)
                      : run<QKV_MMA_BF16, 128>(P, vec, variant, pipe);
  return P.dk == 64 ? run<QKV_MMA_F16, 64>(P, vec, variant, pipe)
                    : run<QKV_MMA_F16, 128>(P, vec, variant, pipe);
}

/* the variants' programs take r16k64 unless QKV_CUDA_MMA_VARIANT names
   another: one m-tile a warp leaves the registers that the program's
   values need beside S's and O's accumulators (ptxas at sm_90 over the
   cross-backend suite's programs: 154-213 of 255, no spills; r32k64
   spills at d 128 with a soft-cap) */
int qkv_cu_attention_mma_tiles (const qkv_attn_plan &P, qkv_cu_mma_tiles *t) {
  int v, err = takes(P);
  if (err == QKV_OK) err = named_variant(&v);
  if (err != QKV_OK) return err;
  if (!qkv_cu_dense_rows(P))
    return qkv_cu_decline("mma", "the variants' tensor-core kernel reads rows 16 bytes at a time");
  int mt = v < 0 ? 1 : variants[v].mt, bk = v < 0 ? 64 : variants[v].bk;
  if (P.dk == 128 && bk == 128)
    return qkv_cu_fail("QKV_CUDA_MMA_VARIANT", __FILE__, __LINE__,
                       "r32k128 is built for head size 64 only");
  *t = {P.dtype == QKV_BF16 ? (int)QKV_MMA_BF16 : (int)QKV_MMA_F16, (int)P.dk, mt, bk,
        qkv_mma_smem((int)P.dk, mt, bk, true)};
  return QKV_OK;
}
