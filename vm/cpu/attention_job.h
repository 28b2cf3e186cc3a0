/*
** attention_job.h -- what the two paths of the fused CPU attention kernel
** share: tile sizes, the job and per-thread scratch, and the helpers that
** read a batch's tiles.  attention.c calls the AVX2 path
** (attention_avx2.c); the AVX2 path needs nothing of attention.c but this.
*/
#ifndef QKV_CPU_ATTENTION_JOB_H
#define QKV_CPU_ATTENTION_JOB_H

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
  int has_mask, causal, avx2;
  int64_t off;                      /* causal: query i keeps keys j <= i + off */
  double scale;
  char *out;
} job;

/* a thread's scratch */
typedef struct {
  void *s;                          /* a tile of scores, then probabilities */
  double *m, *l;                    /* running max and sum per query */
  float *qt, *alpha, *mx;           /* AVX2 path: q^T * scale, rescale
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

#ifdef QKV_VEXP_X86
/* the keys of query tile [i0, i0 + bq) of batch b with our products, into o */
void qkv_attn_keys_avx2 (const job *J, scratch *W, int64_t b, int64_t i0,
                         int bq, int64_t jend, float *o);
#endif

#endif
