/*
** attention_amx.c -- the fused attention in bfloat16 on the tile unit
** (AMX: Intel Sapphire Rapids and later; attention.c asks qkv_cpu_has_amx).
**
** A tile product adds A (16 rows of 32 bfloat16) times B (32 x 16, stored
** as 16 rows of 16 pairs) into C (16 x 16 float32): 8192 multiply-adds in
** one instruction, about 14 times what FMAs do on the same core.  As in the
** AVX paths the scores are held transposed, st[key][query], so that the
** online softmax runs down columns on vectors of 16 queries:
**
**   S^T (64 keys x 16 queries) = K Q^T    A: K's rows, packed and padded;
**                                         B: the block's q as feature pairs
**   O^T (d_v x 16 queries)    += V^T P^T  A: V^T, packed once per batch;
**                                         B: P^T as key pairs in bfloat16
**
** P is rounded to bfloat16 for its product, as FlashAttention does on the
** GPU; everything else (the scale, max, exp, sums, O) is float32, and the
** output is rounded once.  O^T lives in float32 memory: between key blocks
** AVX-512 rescales it by exp(m_old - m_new) and the next product loads it
** into C.  With the products this fast the softmax's exps are most of the
** time (bench/NOTES.md).
*/
#include <stdint.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "attention_job.h"
#include "parallel.h"

#ifdef QKV_VEXP_X86
#include "amx.h"

enum {
  QB = 16,           /* queries a block: one vector, a C tile's columns */
  KB = 64,           /* keys a block: four C tiles of scores */
  FC = 32,           /* features (or keys) a tile product reduces over */
  TILE = 16 * FC     /* bfloat16 elements in an A or B tile */
};

typedef struct {
  const qkv_attn_plan *P;
  uint16_t *kp;      /* per batch: K, nkp x dkp, zeros past nk and dk */
  uint16_t *vt;      /* per batch: V^T, dvp x nkp, zeros past dv and nk */
  int64_t nkp, dkp, dvp, nc;     /* nc = dkp / FC */
} amx_job;

typedef struct {
  uint16_t *qp;      /* the block's Q^T pairs: nc tiles */
  float *st;         /* KB x QB scores, then probabilities */
  uint16_t *pp;      /* P^T pairs: KB / 2 rows of QB pairs */
  float *ot;         /* O^T of the block: dvp x QB */
  void *block;
} amx_scratch;

#define lanes qkv_lanes16

/* ---- packing ---- */

/* batches [lo, hi): K as rows of dkp, V as its transpose */
static QKV_AMX int pack_kv (void *ctx, int64_t lo, int64_t hi, int tid) {
  const amx_job *A = ctx;
  const qkv_attn_plan *P = A->P;
  (void)tid;
  for (int64_t b = lo; b < hi; b++) {
    uint16_t *kp = A->kp + b * A->nkp * A->dkp, *vt = A->vt + b * A->dvp * A->nkp;
    const uint16_t *k = (const uint16_t *)P->k.base + qkv_attn_batch_offset(P, &P->k, b);
    const uint16_t *v = (const uint16_t *)P->v.base + qkv_attn_batch_offset(P, &P->v, b);
    memset(kp, 0, (size_t)(A->nkp * A->dkp) * 2);
    memset(vt, 0, (size_t)(A->dvp * A->nkp) * 2);
    for (int64_t j = 0; j < P->nk; j++) {
      const uint16_t *kr = k + j * P->k.rs;
      if (P->k.cs == 1) memcpy(kp + j * A->dkp, kr, (size_t)P->dk * 2);
      else for (int64_t c = 0; c < P->dk; c++) kp[j * A->dkp + c] = kr[c * P->k.cs];
    }
    /* V^T by 16 x 16 blocks where V's rows are dense, the edges one by one */
    int64_t jb = P->v.cs == 1 ? P->nk / 16 * 16 : 0, db = P->v.cs == 1 ? P->dv / 16 * 16 : 0;
    for (int64_t j = 0; j < jb; j += 16)
      for (int64_t d = 0; d < db; d += 16)
        qkv_amx_transpose16(v + j * P->v.rs + d, P->v.rs, vt + d * A->nkp + j, A->nkp);
    for (int64_t j = 0; j < P->nk; j++)
      for (int64_t d = j < jb ? db : 0; d < P->dv; d++)
        vt[d * A->nkp + j] = v[j * P->v.rs + d * P->v.cs];
  }
  return QKV_OK;
}

/* queries [i0, i0 + nv) of q (at element offset qo) as B tiles: tile c,
   row r, column l holds features 32c + 2r and 32c + 2r + 1 of query l.
   Where each query's pairs are adjacent, a gather takes one pair of 16
   queries at a time. */
static QKV_AMX void pack_q (const amx_job *A, int64_t qo, int64_t i0, int nv, uint16_t *qp) {
  const qkv_attn_plan *P = A->P;
  const uint16_t *q = (const uint16_t *)P->q.base + qo + i0 * P->q.rs;
  memset(qp, 0, (size_t)(A->nc * TILE) * 2);
  if (P->q.cs == 1 && P->dk % 2 == 0 && P->q.rs < INT32_MAX / QB) {
    const __m512i at = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                           5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32((int)P->q.rs));
    __mmask16 k = lanes(nv);
    for (int64_t w = 0; w < P->dk / 2; w++) {
      __m512i x = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, at, q + 2 * w, 2);
      _mm512_store_si512((void *)(qp + w / 16 * TILE + w % 16 * 2 * QB), x);
    }
    return;
  }
  for (int i = 0; i < nv; i++, q += P->q.rs)
    for (int64_t c = 0; c < P->dk; c++)
      qp[c / FC * TILE + c % FC / 2 * 2 * QB + 2 * i + (c & 1)] = q[c * P->q.cs];
}

/* ---- one block of 16 queries ---- */

/* st = the scores of keys [j0, j0 + 16 nt) against the block, unscaled */
static QKV_AMX void scores (const amx_job *A, const uint16_t *qp, const uint16_t *kp,
                            int64_t j0, int nt, float *st) {
  const uint16_t *k = kp + j0 * A->dkp;
  int64_t ld = A->dkp * 2, t16 = 16 * A->dkp;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < A->nc; c++, k += FC) {
    LOAD(4, qp + c * TILE, 64);
    LOAD(5, k, ld);
    _tile_dpbf16ps(0, 5, 4);
    if (nt > 1) {
      LOAD(6, k + t16, ld);
      _tile_dpbf16ps(1, 6, 4);
    }
    if (nt > 2) {
      LOAD(5, k + 2 * t16, ld);
      _tile_dpbf16ps(2, 5, 4);
    }
    if (nt > 3) {
      LOAD(6, k + 3 * t16, ld);
      _tile_dpbf16ps(3, 6, 4);
    }
  }
  _tile_stored(0, st, 64);
  if (nt > 1) _tile_stored(1, st + 16 * QB, 64);
  if (nt > 2) _tile_stored(2, st + 32 * QB, 64);
  if (nt > 3) _tile_stored(3, st + 48 * QB, 64);
}

/* C tile t (O^T rows d0 + 16t) += V^T's rows there times P^T, over nkc
   chunks of 32 keys (P^T's pairs are in tiles 6 and 7) */
#define PV_TILE(t, a) do { \
    float *o_ = ot + (d0 + 16 * (t)) * QB; \
    const uint16_t *v_ = v + (d0 + 16 * (t)) * A->nkp; \
    LOAD(t, o_, 64); \
    LOAD(a, v_, ld); \
    _tile_dpbf16ps(t, a, 6); \
    if (nkc > 1) { \
      LOAD(a, v_ + FC, ld); \
      _tile_dpbf16ps(t, a, 7); \
    } \
    _tile_stored(t, o_, 64); \
  } while (0)

/* ot += V^T's columns [j0, j0 + 32 nkc) times P^T (in pp) */
static QKV_AMX void values (const amx_job *A, const uint16_t *vt, int64_t j0, int nkc,
                            const uint16_t *pp, float *ot) {
  const uint16_t *v = vt + j0;
  int64_t ld = A->nkp * 2;
  LOAD(6, pp, 64);
  if (nkc > 1) LOAD(7, pp + TILE, 64);
  for (int64_t d0 = 0; d0 < A->dvp; d0 += 64) {
    int64_t nt = (A->dvp - d0) / 16;
    PV_TILE(0, 4);
    if (nt > 1) PV_TILE(1, 5);
    if (nt > 2) PV_TILE(2, 4);
    if (nt > 3) PV_TILE(3, 5);
  }
}

/*
** 2^x for x <= 0 (or NaN) to about 3e-6, which the rounding of the
** probabilities to bfloat16 (2^-9) hides: n = round(x), 2^(x - n) by its
** Taylor series of degree 5 on [-1/2, 1/2], times 2^n; 0 below -160.
** Fewer steps than qkv_vexp16, and the scores come in already times
** log2(e), so there is no multiply and no split ln 2 either.
*/
static inline QKV_AMX __m512 exp2_p (__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-160.0f), x);             /* NaN survives */
  __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.24022651f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.69314718f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/*
** The online softmax of a key block, in base 2 (m holds the running max
** of the scores times scale log2(e)): st's kn rows scaled, causally and by
** mask excluded (-inf), raised 2^(x - new max), summed
** into l and left in pp as bfloat16 pairs (rows past kn: zeros, up to the
** block's 32-key chunks).  Returns the factor O^T must be rescaled by.
*/
static QKV_AMX __m512 softmax (const qkv_attn_plan *P, float *st, int kn, int64_t e0,
                               const uint8_t *mk, int nv, uint16_t *pp,
                               __m512 *m, __m512 *l) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
  const __m512 sc = _mm512_set1_ps((float)(P->scale * 1.4426950408889634));
  __m512 bm = ninf;
  int kr = (kn + FC - 1) / FC * FC;
  for (int j = 0; j < kn; j++) {
    __m512 x = _mm512_mul_ps(_mm512_load_ps(st + j * QB), sc);
    if (P->causal) x = _mm512_mask_mov_ps(x, lanes(e0 + j), ninf);
    if (mk) {
      __mmask16 keep = 0;
      for (int i = 0; i < nv; i++)
        keep |= (__mmask16)((mk[i * P->mask.rs + j * P->mask.cs] != 0) << i);
      x = _mm512_mask_mov_ps(ninf, keep, x);
    }
    _mm512_store_ps(st + j * QB, x);
    bm = _mm512_max_ps(bm, x);
  }
  for (int j = kn; j < kr; j++) _mm512_store_ps(st + j * QB, ninf);
  __m512 mnew = _mm512_max_ps(bm, *m);
  /* a query with no key kept so far subtracts 0: its exps are 0, not NaN */
  __m512 ms = _mm512_mask_mov_ps(mnew, _mm512_cmp_ps_mask(mnew, ninf, _CMP_EQ_OQ), zero);
  __m512 alpha = exp2_p(_mm512_sub_ps(*m, ms)), sum = zero;
  /* pair (p[2r][l], p[2r + 1][l]) at lanes 2l, 2l + 1 of row r */
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                       25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                                       19, 3, 18, 2, 17, 1, 16, 0);
  for (int r = 0; r < kr / 2; r++) {
    __m512 p0 = exp2_p(_mm512_sub_ps(_mm512_load_ps(st + 2 * r * QB), ms));
    __m512 p1 = exp2_p(_mm512_sub_ps(_mm512_load_ps(st + (2 * r + 1) * QB), ms));
    sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
    __m512i two = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);   /* p0 in the low half */
    _mm512_store_si512((void *)(pp + r * 2 * QB), _mm512_permutexvar_epi16(ilv, two));
  }
  *l = _mm512_fmadd_ps(*l, alpha, sum);
  *m = mnew;
  return alpha;
}

/* queries [i0, i0 + nv) of batch b (q at offset qo, mask rows at mk, out at
   their first row) against every key they keep */
static QKV_AMX void query_block (const amx_job *A, amx_scratch *W, int64_t b, int64_t qo,
                                 int64_t i0, int nv, const uint8_t *mk, uint16_t *out) {
  const qkv_attn_plan *P = A->P;
  const uint16_t *kp = A->kp + b * A->nkp * A->dkp, *vt = A->vt + b * A->dvp * A->nkp;
  int64_t jend = qkv_attn_key_end(P, i0, nv);      /* the last query's last key + 1 */
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 m = _mm512_set1_ps(-INFINITY), l = zero;
  for (int64_t d = 0; d < A->dvp; d++) _mm512_store_ps(W->ot + d * QB, zero);
  pack_q(A, qo, i0, nv, W->qp);
  for (int64_t j0 = 0; j0 < jend; j0 += KB) {
    int kn = jend - j0 < KB ? (int)(jend - j0) : KB;
    scores(A, W->qp, kp, j0, (kn + 15) / 16, W->st);
    /* lane l drops key j0 + j when l < e0 + j (causal) */
    __m512 alpha = softmax(P, W->st, kn, qkv_attn_diagonal(P, i0, j0),
                           mk ? mk + j0 * P->mask.cs : NULL, nv, W->pp, &m, &l);
    if (_mm512_cmp_ps_mask(alpha, one, _CMP_NEQ_UQ))
      for (int64_t d = 0; d < A->dvp; d++)
        _mm512_store_ps(W->ot + d * QB, _mm512_mul_ps(_mm512_load_ps(W->ot + d * QB), alpha));
    values(A, vt, j0, (kn + FC - 1) / FC, W->pp, W->ot);
  }
  /* out = O / l, rounded once; a query with no key kept (l = 0) gets zeros */
  __m512 rl = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(l, zero, _CMP_NEQ_UQ), one, l);
  uint16_t *h = W->qp;                   /* free now: O^T in bfloat16 */
  for (int64_t d = 0; d < P->dv; d++) {
    __m256bh x = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(W->ot + d * QB), rl));
    _mm256_store_si256((__m256i *)(h + d * QB), (__m256i)x);
  }
  int64_t db = nv == QB ? P->dv / 16 * 16 : 0;
  for (int64_t d = 0; d < db; d += 16) qkv_amx_transpose16(h + d * QB, QB, out + d, P->dv);
  for (int i = 0; i < nv; i++)
    for (int64_t d = db; d < P->dv; d++) out[i * P->dv + d] = h[d * QB + i];
}

/* ---- the work items: one tile of queries of one batch, as attention.c ---- */

/* items [lo, hi), with scratch and the tile configuration of their own */
static QKV_AMX int items (void *ctx, int64_t lo, int64_t hi, int tid) {
  const amx_job *A = ctx;
  const qkv_attn_plan *P = A->P;
  amx_scratch W;
  (void)tid;
  /* qp later holds the block's output, dvp x QB bfloat16 */
  size_t nq = (size_t)((A->nc > A->dvp / 16 ? A->nc : A->dvp / 16) * TILE) * 2;
  size_t ns = KB * QB * 4, np = KB / 2 * QB * 4, no = (size_t)A->dvp * QB * 4;
  char *p = W.block = aligned_alloc(64, (nq + ns + np + no) / 64 * 64 + 4 * 64);
  if (p == NULL) return QKV_ENOMEM;
  W.qp = qkv_attn_carve(&p, nq);
  W.st = qkv_attn_carve(&p, ns);
  W.pp = qkv_attn_carve(&p, np);
  W.ot = qkv_attn_carve(&p, no);
  qkv_amx_config();
  /* the probabilities of masked and far-below-max scores underflow: with
     FTZ off each such lane took a microcode assist (a causal call at N =
     512 took as long as a full one) */
  unsigned csr = qkv_ftz_on(1);
  for (int64_t t = lo; t < hi && !qkv_interrupted; t++) {
    int64_t b, i0;
    int bq = qkv_attn_item(P, t, &b, &i0);
    int64_t qo = qkv_attn_batch_offset(P, &P->q, b);
    const uint8_t *mk = NULL;
    if (P->has_mask)
      mk = (const uint8_t *)P->mask.base + qkv_attn_batch_offset(P, &P->mask, b) +
           i0 * P->mask.rs;
    uint16_t *out = (uint16_t *)P->out + (b * P->nq + i0) * P->dv;
    for (int64_t i = 0; i < bq; i += QB)
      query_block(A, &W, b, qo, i0 + i, bq - i < QB ? (int)(bq - i) : QB,
                  mk ? mk + i * P->mask.rs : NULL, out + i * P->dv);
  }
  qkv_ftz_off(csr);
  _tile_release();        /* the tile state back to its init: cheap switches */
  free(W.block);
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}

int qkv_attn_amx (const job *J) {
  const qkv_attn_plan *P = &J->p;
  amx_job A;
  A.P = P;
  A.nkp = qkv_amx_up(P->nk, KB);
  A.dkp = qkv_amx_up(P->dk, FC);
  A.dvp = qkv_amx_up(P->dv, 16);
  A.nc = A.dkp / FC;
  size_t per = (size_t)(A.nkp * (A.dkp + A.dvp));
  A.kp = qkv_cpu_alloc((size_t)P->nbatch * per * 2, 0);
  if (A.kp == NULL) return QKV_ENOMEM;
  A.vt = A.kp + (size_t)P->nbatch * (size_t)(A.nkp * A.dkp);
  int64_t n = P->items;
  int par = qkv_attn_threaded(J);
  int err = par ? qkv_par_for(P->nbatch, 1, pack_kv, &A) : pack_kv(&A, 0, P->nbatch, 0);
  if (err == QKV_OK) err = par ? qkv_par_for(n, 1, items, &A) : items(&A, 0, n, 0);
  qkv_cpu_free(A.kp);
  return err;
}
#endif
