/*
** mods_blocks.c -- the kinds of a mask program's blocks (empty, full,
** partial): what qkv.block_mask records, so that attention never computes
** an empty block and never runs the mask on a full one.
**
** A block is first judged by interval arithmetic: each value's range over
** the block's queries and keys (i in [i0 + 1, i0 + ni], j likewise, a
** captured tensor's min and max over the indices it may read), which
** decides the mask for most blocks of a window, a causal or a document
** mask without looking at a pair.  Only the blocks it cannot decide (the
** diagonals, a document's edges) run the program on every pair.  The
** intervals are conservative: a range that may hold NaN, or that the
** arithmetic cannot bound, is "anything", and a comparison with it is
** undecided.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "mods.h"
#include "parallel.h"

typedef struct { double lo, hi; int nan; } iv;

static const iv ANY = {-INFINITY, INFINITY, 1};

static iv pt (double x) { iv r = {x, x, x != x}; return r; }
static iv span (double lo, double hi) {
  iv r = {lo, hi, 0};
  return lo != lo || hi != hi ? ANY : r;
}
static iv boolean (int yes, int no) { return yes ? pt(1) : no ? pt(0) : span(0, 1); }
/* NaN is nonzero, as the evaluator's tests read it */
static int nonzero (iv a) { return !(a.lo <= 0 && 0 <= a.hi); }
static int zero (iv a) { return !a.nan && a.lo == 0 && a.hi == 0; }

static iv hull4 (double a, double b, double c, double d) {
  if (a != a || b != b || c != c || d != d) return ANY;
  return span(fmin(fmin(a, b), fmin(c, d)), fmax(fmax(a, b), fmax(c, d)));
}

/* f increasing on the range, defined where lo >= min */
static iv rising (int op, iv a, double min) {
  if (a.nan || a.lo < min) return ANY;
  return span(qkv_mod_apply(op, a.lo, 0, 0), qkv_mod_apply(op, a.hi, 0, 0));
}

/* a captured tensor's range over the box of indices the LOAD may read,
   when the box lies inside the tensor and is small enough to scan */
static iv load_range (const qkv_attn_mods *M, const qkv_mod_ins *x, const iv *r) {
  const qkv_mod_prog *P = M->prog;
  const qkv_mod_cap *C = &M->cap[x->a];
  int64_t lo[QKV_MAXDIM], n[QKV_MAXDIM], count = 1;
  for (int d = 0; d < x->c; d++) {
    iv k = r[P->args[x->b + d]];
    if (k.nan || k.lo < 1 || k.hi > (double)C->size[d]) return ANY;
    lo[d] = (int64_t)ceil(k.lo);
    n[d] = (int64_t)floor(k.hi) - lo[d] + 1;
    if (n[d] < 1) return ANY;
    count *= n[d];
    if (count > 65536) return ANY;
  }
  double mn = INFINITY, mx = -INFINITY;
  int64_t idx[QKV_MAXDIM] = {0};
  size_t es = qkv_elsize(C->dtype);
  for (int64_t e = 0; e < count; e++) {
    int64_t off = 0;
    for (int d = 0; d < x->c; d++) off += (lo[d] - 1 + idx[d]) * C->stride[d];
    double v = qkv_mod_read(C->base + off * (int64_t)es, C->dtype);
    if (v != v) return ANY;
    mn = fmin(mn, v);
    mx = fmax(mx, v);
    for (int d = x->c - 1; d >= 0 && ++idx[d] == n[d]; d--) idx[d] = 0;
  }
  return span(mn, mx);
}

/* the range of each value the mask needs, over a block */
static iv mask_range (const qkv_attn_mods *M, int64_t b, int64_t h, int64_t i0, int64_t ni,
                      int64_t j0, int64_t nj, iv *r) {
  const qkv_mod_prog *P = M->prog;
  for (int v = 0; v < P->n; v++) {
    if (!(P->need[v] & QKV_MOD_WANT_MASK)) continue;
    const qkv_mod_ins *x = &P->ins[v];
    int op = x->op, ar = qkv_mod_arity(op);
    iv a = ar >= 1 ? r[x->a] : ANY, c = ar >= 2 ? r[x->b] : ANY, w = ar >= 3 ? r[x->c] : ANY;
    iv o = ANY;
    switch (op) {
      case QKV_MOD_CONST: o = pt(x->k); break;
      case QKV_MOD_B: o = pt((double)b + 1); break;
      case QKV_MOD_H: o = pt((double)h + 1); break;
      case QKV_MOD_I: o = span((double)i0 + 1, (double)(i0 + ni)); break;
      case QKV_MOD_J: o = span((double)j0 + 1, (double)(j0 + nj)); break;
      case QKV_MOD_NEG: o = a.nan ? ANY : span(-a.hi, -a.lo); break;
      case QKV_MOD_NOT: o = boolean(zero(a), nonzero(a)); break;
      case QKV_MOD_EXP: case QKV_MOD_TANH: case QKV_MOD_SIGMOID: case QKV_MOD_RELU:
        o = rising(op, a, -INFINITY); break;
      case QKV_MOD_LOG: case QKV_MOD_SQRT: o = rising(op, a, 0); break;
      case QKV_MOD_ABS:
        o = a.nan ? ANY : a.lo >= 0 ? a : a.hi <= 0 ? span(-a.hi, -a.lo)
                                                    : span(0, fmax(-a.lo, a.hi));
        break;
      case QKV_MOD_SIN: case QKV_MOD_COS: o = a.nan || isinf(a.lo) || isinf(a.hi) ? ANY : span(-1, 1); break;
      case QKV_MOD_ADD: o = a.nan || c.nan ? ANY : span(a.lo + c.lo, a.hi + c.hi); break;
      case QKV_MOD_SUB: o = a.nan || c.nan ? ANY : span(a.lo - c.hi, a.hi - c.lo); break;
      case QKV_MOD_MUL:
        o = a.nan || c.nan ? ANY : hull4(a.lo * c.lo, a.lo * c.hi, a.hi * c.lo, a.hi * c.hi);
        break;
      case QKV_MOD_DIV:
        o = a.nan || c.nan || (c.lo <= 0 && 0 <= c.hi) ? ANY
          : hull4(a.lo / c.lo, a.lo / c.hi, a.hi / c.lo, a.hi / c.hi);
        break;
      case QKV_MOD_IDIV:
        if (!a.nan && !c.nan && c.lo == c.hi && c.lo > 0 && isfinite(c.lo))
          o = span(floor(a.lo / c.lo), floor(a.hi / c.lo));
        break;
      case QKV_MOD_MOD:
        if (!a.nan && !c.nan && c.lo == c.hi && c.lo > 0 && isfinite(c.lo) &&
            isfinite(a.lo) && isfinite(a.hi))
          o = floor(a.lo / c.lo) == floor(a.hi / c.lo)
            ? span(qkv_mod_apply(op, a.lo, c.lo, 0), qkv_mod_apply(op, a.hi, c.lo, 0))
            : span(0, c.lo);
        break;
      case QKV_MOD_MINIMUM: o = a.nan || c.nan ? ANY : span(fmin(a.lo, c.lo), fmin(a.hi, c.hi)); break;
      case QKV_MOD_MAXIMUM: o = a.nan || c.nan ? ANY : span(fmax(a.lo, c.lo), fmax(a.hi, c.hi)); break;
      case QKV_MOD_LT: o = boolean(!a.nan && !c.nan && a.hi < c.lo, a.lo >= c.hi && !a.nan && !c.nan); break;
      case QKV_MOD_LE: o = boolean(!a.nan && !c.nan && a.hi <= c.lo, a.lo > c.hi && !a.nan && !c.nan); break;
      case QKV_MOD_GT: o = boolean(!a.nan && !c.nan && a.lo > c.hi, a.hi <= c.lo && !a.nan && !c.nan); break;
      case QKV_MOD_GE: o = boolean(!a.nan && !c.nan && a.lo >= c.hi, a.hi < c.lo && !a.nan && !c.nan); break;
      case QKV_MOD_EQ: case QKV_MOD_NE: {
        int same = !a.nan && !c.nan && a.lo == a.hi && c.lo == c.hi && a.lo == c.lo;
        int apart = !a.nan && !c.nan && (a.hi < c.lo || c.hi < a.lo);
        o = op == QKV_MOD_EQ ? boolean(same, apart) : boolean(apart, same);
        break;
      }
      case QKV_MOD_AND: o = boolean(nonzero(a) && nonzero(c), zero(a) || zero(c)); break;
      case QKV_MOD_OR: o = boolean(nonzero(a) || nonzero(c), zero(a) && zero(c)); break;
      case QKV_MOD_WHERE:
        if (nonzero(a)) o = c;
        else if (zero(a)) o = w;
        else o = c.nan || w.nan ? ANY : span(fmin(c.lo, w.lo), fmax(c.hi, w.hi));
        break;
      case QKV_MOD_LOAD: o = load_range(M, x, r); break;
      default: break;                                 /* SCORE, POW, ...: anything */
    }
    r[v] = o;
  }
  return r[P->out[QKV_MOD_OUT_MASK]];
}

typedef struct {
  qkv_attn_mods *M;
  int32_t *kinds, *spans;
  int64_t kb, kh, nq, nk, bq, bk, nqb, nkb;
  size_t scratch;
} blocks_job;

/*
** A row of blocks' kept keys, per query: the first, one past the last and
** how many (a full block adds all of its keys, a partial one what the
** mask keeps of them); one run when the count is the run's length.
*/
static void add_run (int64_t *acc, int64_t j0, int64_t lo, int64_t hi, int64_t n) {
  if (n == 0) return;
  if (acc[2] == 0) acc[0] = j0 + lo;
  acc[1] = j0 + hi;
  acc[2] += n;
}

/* the rows of query blocks [lo, hi) of every (b, h) */
static int rows (void *p, int64_t lo, int64_t hi, int tid) {
  blocks_job *J = p;
  qkv_attn_mods *M = J->M;
  iv r[QKV_MOD_MAXINS];
  double *mem = NULL;
  /* per query of the block: its run so far, and one tile's runs */
  int64_t *acc = J->spans ? malloc(sizeof(int64_t) * 6 * (size_t)J->bq) : NULL, *run = acc;
  int err = J->spans && acc == NULL ? QKV_ENOMEM : QKV_OK;
  if (acc) run = acc + 3 * J->bq;
  (void)tid;
  for (int64_t t = lo; t < hi && err == QKV_OK; t++) {
    int64_t qb = t % J->nqb, bh = t / J->nqb, b = bh / J->kh, h = bh % J->kh;
    int64_t i0 = qb * J->bq, ni = J->nq - i0 < J->bq ? J->nq - i0 : J->bq;
    int32_t *k = J->kinds + t * J->nkb;
    if (acc) memset(acc, 0, sizeof(int64_t) * 3 * (size_t)ni);
    for (int64_t kb = 0; kb < J->nkb && err == QKV_OK; kb++) {
      int64_t j0 = kb * J->bk, nj = J->nk - j0 < J->bk ? J->nk - j0 : J->bk;
      iv m = mask_range(M, b, h, i0, ni, j0, nj, r);
      if (nonzero(m)) {
        k[kb] = QKV_BLOCK_FULL;
        for (int64_t i = 0; acc && i < ni; i++) add_run(acc + 3 * i, j0, 0, nj, nj);
        continue;
      }
      if (zero(m)) { k[kb] = QKV_BLOCK_EMPTY; continue; }
      if (mem == NULL && (mem = malloc(J->scratch * sizeof *mem)) == NULL) {
        err = QKV_ENOMEM;
        break;
      }
      qkv_mod_tile T = {b, h, i0, j0, (int)ni, (int)nj, 0, 1, NULL, 0};
      if ((err = qkv_mod_eval(M, &T, QKV_MOD_WANT_MASK, mem)) != QKV_OK) break;
      int64_t kept = qkv_mod_kept(M, &T, mem, run);
      k[kb] = kept == 0 ? QKV_BLOCK_EMPTY : kept == ni * nj ? QKV_BLOCK_FULL : QKV_BLOCK_PARTIAL;
      for (int64_t i = 0; acc && i < ni; i++)
        add_run(acc + 3 * i, j0, run[3 * i], run[3 * i + 1], run[3 * i + 2]);
    }
    /* the spans, or -1 where a query's keys are not one run */
    int32_t *sp = J->spans ? J->spans + 2 * (bh * J->nq + i0) : NULL;
    for (int64_t i = 0; sp && err == QKV_OK && i < ni; i++) {
      const int64_t *a = acc + 3 * i;
      int one = a[2] == a[1] - a[0];
      sp[2 * i] = one ? (int32_t)a[0] : -1;
      sp[2 * i + 1] = one ? (int32_t)a[1] : -1;
    }
  }
  free(mem);
  free(acc);
  return err == QKV_OK && qkv_interrupted ? QKV_EINTR : err;
}

int qkv_mod_block_kinds (qkv_attn_mods *M, int32_t *kinds, int32_t *spans, int64_t kb,
                         int64_t kh, int64_t nq, int64_t nk, int64_t bq, int64_t bk,
                         int *runs) {
  if (M->prog == NULL || M->prog->out[QKV_MOD_OUT_MASK] < 0 || bq < 1 || bk < 1 ||
      bq > 4096 || bk > 4096)
    return QKV_EINTERNAL;
  for (int v = 0; v < M->prog->n; v++)           /* a mask reads no score: there is none */
    if (M->prog->ins[v].op == QKV_MOD_SCORE && (M->prog->need[v] & QKV_MOD_WANT_MASK))
      return QKV_EINTERNAL;
  if (nk > INT32_MAX) spans = NULL;              /* the spans count keys in int32 */
  *runs = 0;
  blocks_job J = {M, kinds, spans, kb, kh, nq, nk, bq, bk, (nq + bq - 1) / bq,
                  (nk + bk - 1) / bk, qkv_mod_scratch(M->prog, (int)bq, (int)bk)};
  int64_t items = kb * kh * J.nqb;
  if (items == 0 || J.nkb == 0) {
    if (spans) memset(spans, 0, sizeof(int32_t) * 2 * (size_t)(kb * kh * nq));
    *runs = spans != NULL;
    return QKV_OK;
  }
  int err = items > 1 ? qkv_par_for(items, 1, rows, &J) : rows(&J, 0, items, 0);
  if (err != QKV_OK || spans == NULL) return err;
  *runs = 1;
  for (int64_t e = 0; e < kb * kh * nq && *runs; e++) *runs = spans[2 * e] >= 0;
  return QKV_OK;
}

int qkv_cpu_attention_blocks (qkv_attn_mods *M, qkv_tensor *kinds, qkv_tensor *spans,
                              int64_t nq, int64_t nk, int64_t bq, int64_t bk, int *runs) {
  qkv_cpu_mods_caps(M);
  return qkv_mod_block_kinds(M, qkv_data(kinds), spans ? qkv_data(spans) : NULL,
                             kinds->size[0], kinds->size[1], nq, nk, bq, bk, runs);
}
