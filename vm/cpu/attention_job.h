/*
** attention_job.h -- what the two paths of the fused CPU attention kernel
** share: tile sizes, the job and per-thread scratch, and the helpers that
** read a batch's tiles.  attention.c calls the AVX2 path
** (attention_avx2.c) or the AVX-512 one (attention_avx512.c), and hands a
** bfloat16 job to the AMX one (attention_amx.c); they need nothing of
** attention.c but this.
*/
#ifndef QKV_CPU_ATTENTION_JOB_H
#define QKV_CPU_ATTENTION_JOB_H

#include <math.h>

#include "cpu.h"
#include "../common/layout.h"
#include "vexp.h"

/*
** Tile sizes, measured (bench/NOTES.md): a 96 x 384 block of float scores
** (144 KB) and q^T for 384 queries stay in L2 with the k and v tiles; more
** queries per tile means fewer passes over k and v, fewer keys keeps the
** score block's columns short.  BQ must be a multiple of 16.
*/
#define BQ 384
#define BK 96

/* below this many multiply-adds the whole call runs on one thread */
#define PAR_MIN_WORK 200000.0

/* How gemm reads one of q, k, v: by rows (a row-major matrix, NoTrans), by
   columns, or from a dense copy of each tile. */
enum { BYROW = QKV_BYROW, BYCOL = QKV_BYCOL, COPY = QKV_COPY };

typedef struct {
  const char *base;                 /* element 0 of the view */
  int64_t rs, cs;                   /* element strides of tokens, features */
  int64_t bstride[QKV_MAXDIM];      /* batch dims, 0 where broadcast */
  int layout, ld;
} operand;

typedef struct {
  qkv_dtype dtype;
  size_t es;
  int nbd;                          /* batch dims */
  int64_t bsize[QKV_MAXDIM];
  int64_t nbatch, ntiles, nq, nk, dk, dv;
  operand q, k, v, mask;
  int has_mask, causal;
  int avx2, avx512;                 /* our products (avx512 implies avx2) */
  int64_t off;                      /* causal: query i keeps keys j <= i + off */
  double scale;
  char *out;
  char *lse;                        /* (B..., nq) of dtype, or NULL */
} job;

/* a thread's scratch */
typedef struct {
  void *s;                          /* a tile of scores, then probabilities */
  double *m, *l;                    /* running max and sum per query */
  float *qt, *alpha, *mx;           /* AVX paths: q^T * scale, rescale
                                       factors, the tile's max per query */
  void *qbuf, *kbuf, *vbuf;         /* dense tiles, for operands that need them */
  void *block;                      /* holds s, m, l, qt, alpha and mx */
} scratch;

/* element offset of batch number bi (row-major over out's batch dims) */
static inline int64_t qkv_attn_batch_offset (const job *J, const operand *op, int64_t bi) {
  int64_t off = 0;
  for (int i = J->nbd - 1; i >= 0 && bi > 0; i--) {
    off += (bi % J->bsize[i]) * op->bstride[i];
    bi /= J->bsize[i];
  }
  return off;
}

/*
** Work item t: a tile of at most BQ queries, from query *i0, of batch *b;
** returns how many queries.  The tiles of the last queries come first:
** under causal they have the most keys, and a dynamic schedule balances
** best when it hands out the big items before the small ones.
*/
static inline int qkv_attn_item (const job *J, int64_t t, int64_t *b, int64_t *i0) {
  *b = t % J->nbatch;
  *i0 = (J->ntiles - 1 - t / J->nbatch) * BQ;
  return (int)(J->nq - *i0 < BQ ? J->nq - *i0 : BQ);
}

/* whether the job's items are worth more than one thread */
static inline int qkv_attn_threaded (const job *J) {
  double work = (double)J->nbatch * (double)J->nq * (double)J->nk * (double)(J->dk + J->dv);
  return J->nbatch * J->ntiles > 1 && work >= PAR_MIN_WORK;
}

/* lse's element r (batch b's query i is b nq + i) = v, in its dtype */
static inline void qkv_attn_lse_at (const job *J, int64_t r, double v) {
  if (J->dtype == QKV_F32) ((float *)J->lse)[r] = (float)v;
  else ((double *)J->lse)[r] = v;
}

/* each query's log-sum-exp, m + log(l) (-inf with no key, NaN kept), for
   the bq queries of a tile from i0 of batch b, when lse was asked for: m
   as float (mf) or double (md); l NULL: no key for any of them */
static inline void qkv_attn_put_lse (const job *J, int64_t b, int64_t i0, int bq,
                                     const float *mf, const double *md, const double *l) {
  if (J->lse == NULL) return;
  for (int i = 0; i < bq; i++) {
    double m = mf ? mf[i] : md ? md[i] : 0;
    qkv_attn_lse_at(J, b * J->nq + i0 + i, l == NULL || l[i] == 0.0 ? -INFINITY : m + log(l[i]));
  }
}

/* the next n bytes of a scratch block, 64-byte aligned for vector loads */
static inline void *qkv_attn_carve (char **p, size_t n) {
  void *r = *p;
  *p += (n + 63) / 64 * 64;
  return r;
}

/* rows [r0, r0 + n) of op (batch at element offset boff), as stored or, for
   a COPY operand, densified into buf (whose row stride is then width) */
static inline const void *qkv_attn_tile_of (const job *J, const operand *op,
                                             int64_t boff, int64_t r0, int64_t n,
                                             int64_t width, void *buf) {
  const char *p = op->base + (boff + r0 * op->rs) * (int64_t)J->es;
  if (op->layout != COPY) return p;
  qkv_densify(buf, p, J->dtype == QKV_F64, n, width, op->rs, op->cs);
  return buf;
}

/* ---- shared by the AVX2 and AVX-512 paths (float32, scores as st[key][query]) ---- */

/* how many keys of a tile query i keeps (0 to bk); e as in attention_avx2.c */
static inline int qkv_attn_key_limit (int64_t i, int64_t e, int bk) {
  int64_t n = i - e + 1;
  return n < 0 ? 0 : n < bk ? (int)n : bk;
}

/* q^T (dk x nqp, row stride BQ) = scale * rows [i0, i0 + bq) of q; the
   padding queries get zeros, so finite scores nobody reads.  By query: q's
   rows are read in order, and the dk lines of qt being written stay in L1
   (by feature, each pass re-read the whole tile of q from L2) */
static inline void qkv_attn_pack_q (const job *J, int64_t qo, int64_t i0,
                                    int bq, int nqp, float *qt) {
  const float *q = (const float *)J->q.base + qo + i0 * J->q.rs;
  float sc = (float)J->scale;
  for (int i = 0; i < bq; i++, q += J->q.rs)
    for (int64_t c = 0; c < J->dk; c++) qt[c * BQ + i] = sc * q[c * J->q.cs];
  for (int64_t c = 0; c < J->dk; c++)
    for (int i = bq; i < nqp; i++) qt[c * BQ + i] = 0.0f;
}

/* -inf in st where the mask (at the tile's first query and key) is false;
   by query, so that a row-major mask is read in order */
static inline void qkv_attn_mask_cols (const job *J, float *st, int bq, int bk,
                                       int64_t e, const uint8_t *mk) {
  for (int i = 0; i < bq; i++) {
    const uint8_t *mi = mk + i * J->mask.rs;
    for (int j = 0, n = qkv_attn_key_limit(i, e, bk); j < n; j++)
      if (!mi[j * J->mask.cs]) st[j * BQ + i] = -INFINITY;
  }
}

#ifdef QKV_VEXP_X86
/* the keys of query tile [i0, i0 + bq) of batch b with our products, into o */
void qkv_attn_keys_avx2 (const job *J, scratch *W, int64_t b, int64_t i0,
                         int bq, int64_t jend, float *o);
void qkv_attn_keys_avx512 (const job *J, scratch *W, int64_t b, int64_t i0,
                           int bq, int64_t jend, float *o);
/* the whole job in bfloat16 on the tile unit (attention_amx.c) */
int qkv_attn_amx (const job *J);
#endif

#endif
