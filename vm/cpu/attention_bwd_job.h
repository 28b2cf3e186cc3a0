/*
** attention_bwd_job.h -- what attention_bwd.c hands its AVX-512 path
** (attention_bwd_avx512.c): the plan (common/attention_plan.h) and one
** batch item of a float32 backward with no mask tensor and the forward's
** log-sum-exps.
*/
#ifndef QKV_CPU_ATTENTION_BWD_JOB_H
#define QKV_CPU_ATTENTION_BWD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "../common/attention_plan.h"

struct qkv_attn_mods;

/* batch item b of the plan: where its rows start */
typedef struct {
  const float *q, *k, *v, *o, *go;  /* the item's first rows */
  int64_t qrs, krs, vrs, ors, gors;  /* elements between their rows */
  const float *lse;                 /* nq log-sum-exps, -inf for no key */
  float *dq, *dk, *dvv;             /* contiguous, written whole */
  /* the mods (common/mods.h) as attention_bwd.c's regs_take allows
     them, or NULL; b: the item's index in the plan's batch, for its
     kinds, spans and (b, h) */
  struct qkv_attn_mods *mods;
  int64_t b;
} qkv_attn_bwd_item;

/* bytes of scratch qkv_attn_bwd_avx512 needs for heads of d and dv and
   the mods M (or NULL) */
size_t qkv_attn_bwd_avx512_work (int64_t d, int64_t dv, const struct qkv_attn_mods *M);
/* the item's gradients; sizes, causal and scale from the plan; QKV_OK,
   or QKV_EINDEX where a score_mod's LOAD falls outside its tensor */
int qkv_attn_bwd_avx512 (const qkv_attn_plan *P, const qkv_attn_bwd_item *it, void *work);

#endif
