/*
** mods.h -- the CPU's evaluator of score_mod and mask_mod programs
** (common/mods.h) over a tile of scores, and the block kinds of a mask.
*/
#ifndef QKV_CPU_MODS_H
#define QKV_CPU_MODS_H

#include "../common/mods.h"

/*
** A tile: queries [i0, i0 + ni) and keys [j0, j0 + nj) of batch item b,
** head h (all 0-based), and its scores s: float or double (f64), element
** (i, j) at s[j ld + i] when key_major (the AVX paths' st), else s[i ld
** + j].
*/
typedef struct qkv_mod_tile {
  int64_t b, h, i0, j0;
  int ni, nj, key_major, f64;
  void *s;
  int64_t ld;
} qkv_mod_tile;

/* doubles of scratch for the values of P on tiles of up to ni x nj */
size_t qkv_mod_scratch (const qkv_mod_prog *P, int ni, int nj);

/*
** Runs what the outputs in want need on tile T, into mem; QKV_OK, or
** QKV_EINDEX when a LOAD's index falls outside its tensor (M's fail_*
** say which, the first failure of all threads).
*/
int qkv_mod_eval (qkv_attn_mods *M, const qkv_mod_tile *T, int want, double *mem);

/* value v after qkv_mod_eval, and its dependence (QKV_MOD_DEP_*): element
   (i, j) of the tile at [(dep & J ? j : 0) * (dep & I ? ni : 1) + (dep & I ?
   i : 0)] when key_major, the roles of i and j swapped otherwise */
const double *qkv_mod_value (const qkv_mod_prog *P, const qkv_mod_tile *T, const double *mem,
                             int v, int *dep);

/* the tile's element (i, j) of a value of dependence dep at p */
static inline double qkv_mod_at (const qkv_mod_tile *T, const double *p, int dep, int i, int j) {
  int x = T->key_major ? i : j, y = T->key_major ? j : i;
  int dx = T->key_major ? QKV_MOD_DEP_I : QKV_MOD_DEP_J;
  int nx = T->key_major ? T->ni : T->nj;
  int hx = (dep & dx) != 0, hy = (dep & ~dx & 3) != 0;
  return p[(hy ? y * (hx ? nx : 1) : 0) + (hx ? x : 0)];
}

/*
** The forward's way: the score and (want & QKV_MOD_WANT_MASK) the mask
** applied to T->s row by row (rows: keys when key_major, else queries), so
** that the values in flight are rows that stay in L1, never the tile.
** mem: qkv_mod_row_scratch doubles.  keep not NULL: the mask goes there
** instead, 1 where a key is kept, laid out as s (row stride T->ld).  mx
** not NULL (a float tile): each x's max of the new rows folded into
** mx[x], which saves a pass over the tile (key-major: each query's).
** QKV_OK or QKV_EINDEX, as qkv_mod_eval.
*/
size_t qkv_mod_row_scratch (const qkv_mod_prog *P, int ni, int nj);
int qkv_mod_rows (qkv_attn_mods *M, const qkv_mod_tile *T, int want, double *mem,
                  uint8_t *keep, float *mx);

/* after a run with QKV_MOD_WANT_MASK: how many of the tile's pairs the
   mask keeps; run (a tile by queries, not key_major) not NULL: per query
   y, run[3 y ..] = its first kept key, one past its last (from the
   tile's j0; 0, 0 for none) and how many it keeps */
int64_t qkv_mod_kept (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem,
                      int64_t *run);

/*
** After a run with the score (and the mask where mask is set): the new
** scores into T->s, and -inf where the mask drops a key.
*/
void qkv_mod_put (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem, int mask);

/*
** The backward's part, after a run with QKV_MOD_WANT_GRAD on a query-major
** tile T whose ds (T's dtype, row stride T->ld) holds the gradient by the
** new scores: adds ds times each derivative by a loaded value into acc[c]
** (float64, contiguous, captured tensor c's size; NULL: not wanted) at
** the element the load read, then makes ds the gradient by the scores
** (times the derivative by the score; 0 stays 0, whatever that is).
*/
void qkv_mod_grads (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem,
                    void *ds, double *const *acc);

/* the kind (QKV_BLOCK_*) of the tile of nq queries from i0 and nk keys
   from j0 (one block or several, or parts of them) of batch item t: the
   block mask's, as one when its blocks differ (partial unless all are
   empty or all full), else partial where there is a mask program, full
   where there is none */
static inline int qkv_mod_kind (const qkv_attn_mods *M, int64_t t, int64_t i0, int64_t nq,
                                int64_t j0, int64_t nk) {
  if (M->kinds == NULL) return M->prog->out[QKV_MOD_OUT_MASK] >= 0 ? QKV_BLOCK_PARTIAL
                                                                    : QKV_BLOCK_FULL;
  int64_t a0 = i0 / M->bq, a1 = (i0 + nq - 1) / M->bq, c0 = j0 / M->bk, c1 = (j0 + nk - 1) / M->bk;
  const int32_t *k = M->kinds + qkv_mod_bh(M, t) * M->nqb * M->nkb;
  int kind = k[a0 * M->nkb + c0];
  for (int64_t a = a0; a <= a1; a++)
    for (int64_t c = c0; c <= c1; c++)
      if (k[a * M->nkb + c] != kind) return QKV_BLOCK_PARTIAL;
  return kind;
}

/* the spans (qkv_attn_mods.spans) of batch item t's queries from i, or
   NULL when there are none */
static inline const int32_t *qkv_mod_spans (const qkv_attn_mods *M, int64_t t, int64_t i) {
  return M->spans ? M->spans + 2 * (qkv_mod_bh(M, t) * M->spant->size[2] + i) : NULL;
}

/*
** The captured tensors' views, the gradient sums and the kinds as the
** kernels read them (the dispatch checked their devices) for a plan whose
** batch dims end with the heads; 0 when the kinds do not fit the plan.
*/
struct qkv_attn_plan;
void qkv_cpu_mods_caps (qkv_attn_mods *M);
int qkv_cpu_mods_ready (qkv_attn_mods *M, const struct qkv_attn_plan *P);

/*
** The kinds (QKV_BLOCK_*) of the blocks of bq queries and bk keys of a
** mask program: kinds (kb, kh, nqb, nkb) for every b < kb, h < kh, where
** kb, kh are 1 when the mask reads no b, h.  Intervals first, then the
** blocks they cannot decide pair by pair.  spans not NULL: per query the
** run of keys it keeps (qkv_attn_mods.spans), and *runs 1 when every
** query's kept keys are one run (else some spans are -1, -1).  QKV_OK,
** QKV_EINDEX (M's fail_*) or QKV_ENOMEM.
*/
int qkv_mod_block_kinds (qkv_attn_mods *M, int32_t *kinds, int32_t *spans, int64_t kb,
                         int64_t kh, int64_t nq, int64_t nk, int64_t bq, int64_t bk,
                         int *runs);

#endif
