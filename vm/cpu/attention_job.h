/*
** attention_job.h -- what the two paths of the fused CPU attention kernel
** share: tile sizes, the job (the plan every backend's kernels read,
** common/attention_plan.h, and how gemm reads q, k, v here), per-thread
** scratch, and the helpers that read a batch's tiles.  attention.c calls the AVX2 path
** (attention_avx2.c) or the AVX-512 one (attention_avx512.c), and hands a
** bfloat16 job to the AMX one (attention_amx.c); they need nothing of
** attention.c but this.
*/
#ifndef QKV_CPU_ATTENTION_JOB_H
#define QKV_CPU_ATTENTION_JOB_H

#include <math.h>

#include "cpu.h"
#include "../common/attention_plan.h"
#include "../common/layout.h"
#include "vexp.h"
#include "mods.h"
#include "pack_t8.h"

/*
** Tile sizes, measured (bench/NOTES.md): a 96 x 384 block of float scores
** (144 KB) and q^T for 384 queries stay in L2 with the k and v tiles; more
** queries per tile means fewer passes over k and v, fewer keys keeps the
** score block's columns short.  BQ must be a multiple of 16.
*/
#define BQ 384
#define BK 96
/* a block mask's tiles of keys: as many of its blocks as fit in TKB
   keys (blocks of 64 as tiles of 192: a third of the softmax's passes and
   of o's rescales; measured, bench/NOTES.md) */
#ifndef TKB
#define TKB 192
#endif

/* a decode step's queries at most: a job of this many or fewer may go to
   attention_decode.c (qkv_attn_decode_fits), so attention.c keeps such a
   bfloat16 one where there is no tile unit */
#define DQ 8

/* below this many multiply-adds the whole call runs on one thread */
#define PAR_MIN_WORK 200000.0

/* How gemm reads one of q, k, v: by rows (a row-major matrix, NoTrans), by
   columns, or from a dense copy of each tile; ld its leading dimension. */
enum { BYROW = QKV_BYROW, BYCOL = QKV_BYCOL, COPY = QKV_COPY };
typedef struct { int layout, ld; } gemm_read;

typedef struct {
  qkv_attn_plan p;                  /* operands, shapes, bounds: common/attention_plan.h */
  size_t es;                        /* the dtype's element size */
  int avx2, avx512;                 /* our products (avx512 implies avx2; with mods
                                       the AVX2 path's tiles take its products) */
  struct { gemm_read q, k, v; } gemm;
  int halves;                       /* q, k, v and out of the plan's half dtype, their
                                       tiles widened to float32 as read and o's
                                       rounded as written: the float32 path's values */
  qkv_attn_mods *mods;              /* score_mod/mask_mod programs, or NULL */
  int64_t tk;                       /* keys per tile: BK, or a block mask's */
} job;

/* a thread's scratch */
typedef struct {
  void *s;                          /* a tile of scores, then probabilities */
  double *m, *l;                    /* running max and sum per query */
  float *qt, *alpha, *mx;           /* AVX paths: q^T * scale, rescale
                                       factors, the tile's max per query */
  void *qbuf, *kbuf, *vbuf;         /* dense tiles, for operands that need them */
  float *obuf;                      /* a halves job's tile of o in float32 */
  double *mem;                      /* the mods' values (mods.h), or NULL */
  uint8_t *keep;                    /* AVX2: a partial tile's mask, as s */
  int32_t *span;                    /* AVX2: a partial tile's spans, as keys
                                       [span[i], span[BQ + i]) per query i */
  void *block;                      /* holds s, m, l, qt, alpha and mx */
} scratch;

/* the plan's multiply-adds, both products of every query with every key
   (causal cuts not counted), weighed against PAR_MIN_WORK by the tile
   path (qkv_attn_threaded) and the decode kernel alike */
static inline double qkv_attn_work (const qkv_attn_plan *P) {
  return (double)P->nbatch * (double)P->nq * (double)P->nk * (double)(P->dk + P->dv);
}

/* whether the job's items are worth more than one thread */
static inline int qkv_attn_threaded (const job *J) {
  return J->p.items > 1 && qkv_attn_work(&J->p) >= PAR_MIN_WORK;
}

/* lse's element r (batch b's query i is b nq + i) = v: float64 for a
   float64 job, float32 for the others */
static inline void qkv_attn_lse_at (const job *J, int64_t r, double v) {
  if (J->p.dtype == QKV_F64) ((double *)J->p.lse)[r] = v;
  else ((float *)J->p.lse)[r] = (float)v;
}

/* each query's log-sum-exp, m + log(l) (-inf with no key, NaN kept), for
   the bq queries of a tile from i0 of batch b, when lse was asked for: m
   as float (mf) or double (md); l NULL: no key for any of them */
static inline void qkv_attn_put_lse (const job *J, int64_t b, int64_t i0, int bq,
                                     const float *mf, const double *md, const double *l) {
  if (J->p.lse == NULL) return;
  for (int i = 0; i < bq; i++) {
    double m = mf ? mf[i] : md ? md[i] : 0;
    qkv_attn_lse_at(J, b * J->p.nq + i0 + i, l == NULL || l[i] == 0.0 ? -INFINITY : m + log(l[i]));
  }
}

/* the next n bytes of a scratch block, 64-byte aligned for vector loads */
static inline void *qkv_attn_carve (char **p, size_t n) {
  void *r = *p;
  *p += (n + 63) / 64 * 64;
  return r;
}

/* rows [r0, r0 + n) of x (batch at element offset boff), as stored or,
   read by gemm as a COPY, densified into buf (whose row stride is then
   width), widened to float32 for a halves job */
static inline const void *qkv_attn_tile_of (const job *J, const qkv_attn_view *x, int layout,
                                             int64_t boff, int64_t r0, int64_t n,
                                             int64_t width, void *buf) {
  const char *p = x->base + (boff + r0 * x->rs) * (int64_t)J->es;
  if (layout != COPY) return p;
  if (J->halves) qkv_cpu_copy_tile(QKV_F32, buf, J->p.dtype, p, n, width, x->rs, x->cs);
  else qkv_densify(buf, p, J->p.dtype == QKV_F64, n, width, x->rs, x->cs);
  return buf;
}

/* ---- shared by the AVX2 and AVX-512 paths (float32, scores as st[key][query]) ---- */

/* q^T (dk x nqp, row stride BQ) = scale * rows [i0, i0 + bq) of q; the
   padding queries get zeros, so finite scores nobody reads.  By query: q's
   rows are read in order, and the dk lines of qt being written stay in L1
   (by feature, each pass re-read the whole tile of q from L2).  A halves
   job's tile is widened into qbuf first */
static inline void qkv_attn_pack_q (const job *J, int64_t qo, int64_t i0,
                                    int bq, int nqp, float *qt, void *qbuf) {
  const qkv_attn_plan *P = &J->p;
  if (J->halves) {
    const float *q = qkv_attn_tile_of(J, &P->q, COPY, qo, i0, bq, P->dk, qbuf);
    qkv_pack_t(q, P->dk, 1, bq, P->dk, (float)P->scale, qt, BQ, nqp);
    return;
  }
  qkv_pack_t((const float *)P->q.base + qo + i0 * P->q.rs, P->q.rs, P->q.cs, bq, P->dk,
             (float)P->scale, qt, BQ, nqp);
}

/* -inf in st where the mask (at the tile's first query and key) is false;
   by query, so that a row-major mask is read in order */
static inline void qkv_attn_mask_cols (const job *J, float *st, int bq, int bk,
                                       int64_t e, const uint8_t *mk) {
  const qkv_attn_view *M = &J->p.mask;
  for (int i = 0; i < bq; i++) {
    const uint8_t *mi = mk + i * M->rs;
    for (int j = 0, n = qkv_attn_key_limit(i, e, bk); j < n; j++)
      if (!mi[j * M->cs]) st[j * BQ + i] = -INFINITY;
  }
}

/*
** The keys each group of 8 queries of a tile may keep: [lo, hi).  Causal
** alone: from 0 to its last query's diagonal.  A mask program narrows
** them to the first and last key any of the group keeps, so that a
** window's edge or a document's border costs its few keys, not the tile:
** the products, the softmax and p v run on those rows alone (the AVX2
** path's tiles, attention_avx2.c, whose products may run on 16 lanes).
*/
typedef struct { int lo[BQ / 8], hi[BQ / 8]; } ranges;

/* the range of queries [a, b] (groups a/8 .. b/8, b below nqp) */
static inline void qkv_attn_span_of (const ranges *R, int a, int b, int *lo, int *hi) {
  *lo = R->lo[a / 8];
  *hi = R->hi[a / 8];
  for (int g = a / 8 + 1; g <= b / 8; g++) {
    if (R->hi[g] == 0) continue;
    if (*hi == 0 || R->lo[g] < *lo) *lo = R->lo[g];
    if (R->hi[g] > *hi) *hi = R->hi[g];
  }
  if (*hi == 0) *lo = 0;
}

/* causal alone: each group from key 0 to its last query's diagonal */
static inline void qkv_attn_ranges_causal (ranges *R, int nqp, int bk, int64_t e) {
  for (int g = 0; g < nqp / 8; g++) {
    R->lo[g] = 0;
    R->hi[g] = qkv_attn_key_limit(8 * g + 7, e, bk);
  }
}

/* ---- the mods (score_mod, mask_mod: common/mods.h) ---- */

/* the mods on a tile of scores s (bq queries from i0, bk keys from j0, of
   batch item t): the new scores, and -inf where a partial tile's mask
   drops a key; key_major: s[j ld + i], else s[i ld + j] */
int qkv_attn_mod_scores (const job *J, scratch *W, int64_t t, int64_t i0, int bq, int64_t j0,
                         int bk, void *s, int64_t ld, int key_major, int kind);

#ifdef QKV_VEXP_X86
/* the keys of query tile [i0, i0 + bq) of batch b with our products, into o */
int qkv_attn_keys_avx2 (const job *J, scratch *W, int64_t b, int64_t i0,
                        int bq, int64_t jend, float *o);
void qkv_attn_keys_avx512 (const job *J, scratch *W, int64_t b, int64_t i0,
                           int bq, int64_t jend, float *o);
/* the AVX2 path's products on 16 lanes, over each group's range R: st
   (bk x nqp) = k q^T cut by the causal diagonal e or the spans sp (when
   not NULL), mx its columns' max (when not NULL); o += st^T v */
void qkv_attn_qk_ranges512 (int nqp, const ranges *R, int64_t e, const int32_t *sp,
                            const float *qt, const float *k, int64_t krs, int64_t dk,
                            float *st, float *mx);
void qkv_attn_pv_ranges512 (int bq, const ranges *R, const float *pt, const float *v,
                            int64_t vrs, float *o, int64_t dv);
/* the softmax's passes on 16 lanes over each 16 queries' ranges (the
   union of their two groups', rows outside a query's own range -inf):
   mx the columns' max; the online softmax of st (attention_avx512.c) */
void qkv_attn_col_max512 (const float *st, int nqp, const ranges *R, float *mx);
int qkv_attn_softmax512 (float *st, int nqp, const ranges *R, const float *mx, float *m,
                         double *l, float *alpha);
/* the whole job in bfloat16 on the tile unit (attention_amx.c) */
int qkv_attn_amx (const job *J);
/* whether the job is a decode step's few queries that attention_decode.c
   takes (float32 or bfloat16, no mask or mods), and running it there */
int qkv_attn_decode_fits (const job *J);
int qkv_attn_decode (const job *J);
#endif

#endif
