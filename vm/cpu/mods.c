/*
** mods.c -- score_mod and mask_mod programs (common/mods.h) run over a
** tile of scores.  Each instruction runs as a loop over the elements its
** value depends on: once per tile for what reads neither i nor j (b, h,
** a captured slope), once per query or per key for what reads one of
** them (doc[i]), per pair only for the rest; so a program costs a few
** vector passes over the tile, not an interpreter's dispatch per score.
** Values are doubles: indices stay exact far past 2^24, and a float32
** score is widened exactly.  The forward's row-by-row way is in
** mods_rows.c.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "mods.h"
#include "mods_eval.h"
#include "vexp.h"
#include "../common/attention_plan.h"

static size_t count_of (const axes *A, int dep) {
  return (size_t)(dep & A->dx ? A->nx : 1) * (size_t)(dep & A->dy ? A->ny : 1);
}

size_t qkv_mod_scratch (const qkv_mod_prog *P, int ni, int nj) {
  size_t n = 0;
  for (int v = 0; v < P->n; v++)
    n += (size_t)(P->dep[v] & QKV_MOD_DEP_I ? ni : 1) * (size_t)(P->dep[v] & QKV_MOD_DEP_J ? nj : 1);
  return n + 1;
}

/* value v's place in mem: the values lie in order, each its own count */
static double *place (const qkv_mod_prog *P, const axes *A, double *mem, int v) {
  size_t off = 0;
  for (int n = 0; n < v; n++) off += count_of(A, P->dep[n]);
  return mem + off;
}

const double *qkv_mod_value (const qkv_mod_prog *P, const qkv_mod_tile *T, const double *mem,
                             int v, int *dep) {
  axes A = axes_of(T);
  *dep = P->dep[v];
  return place(P, &A, (double *)mem, v);
}

/* o[0..n) = op(a, b, c), each operand along x (its s* set) or one
   element; a switch outside the loops, so that each loop is one op's
   formula, which the compiler can vectorise */
#define AP(N, u, v, w) qkv_mod_apply(QKV_MOD_##N, u, v, w)
#define LOOP1(N) do { \
    if (sa) SIMD for (int x = 0; x < n; x++) o[x] = AP(N, a[x], 0, 0); \
    else o[0] = AP(N, a[0], 0, 0); \
  } while (0)
#define LOOP2(N) do { \
    if (sa && sb) SIMD for (int x = 0; x < n; x++) o[x] = AP(N, a[x], b[x], 0); \
    else if (sa) { double v_ = b[0]; SIMD for (int x = 0; x < n; x++) o[x] = AP(N, a[x], v_, 0); } \
    else if (sb) { double u_ = a[0]; SIMD for (int x = 0; x < n; x++) o[x] = AP(N, u_, b[x], 0); } \
    else o[0] = AP(N, a[0], b[0], 0); \
  } while (0)
#define LOOP3(N) do { \
    SIMD for (int x = 0; x < n; x++) o[x] = AP(N, a[sa ? x : 0], b[sb ? x : 0], c[sc ? x : 0]); \
  } while (0)

CLONES void qkv_mod_run (int op, double *o, int n, const double *a, int sa, const double *b,
                        int sb, const double *c, int sc) {
  switch (op) {
#define CASE(N, nm, ar) \
    case QKV_MOD_##N: \
      if (ar == 1) LOOP1(N); else if (ar == 2) LOOP2(N); else if (ar == 3) LOOP3(N); \
      break;
    QKV_MOD_OPS(CASE)
#undef CASE
    default: break;
  }
}

/* records the first failed LOAD of all threads */
static void failed (qkv_attn_mods *M, int ins, int arg, double val) {
  int none = -1;
  if (__atomic_compare_exchange_n(&M->fail_ins, &none, ins, 0, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST)) {
    M->fail_arg = arg;
    M->fail_val = val;
  }
}

/* a LOAD on row y: each element's indices checked, then read */
int qkv_mod_load (qkv_attn_mods *M, const axes *A, double *const *val, int v, int y,
                 double *o, int n) {
  const qkv_mod_prog *P = M->prog;
  const qkv_mod_ins *x = &P->ins[v];
  const qkv_mod_cap *C = &M->cap[x->a];
  const double *ix[QKV_MAXDIM];
  int along[QKV_MAXDIM];
  for (int d = 0; d < x->c; d++) {
    int a = P->args[x->b + d];
    ix[d] = row(A, val[a], P->dep[a], y, &along[d]);
  }
  for (int e = 0; e < n; e++) {
    int64_t off = 0;
    for (int d = 0; d < x->c; d++) {
      double k = ix[d][along[d] ? e : 0];
      /* 1 <= k <= size, an integer (NaN fails the first test) */
      if (!(k >= 1 && k <= (double)C->size[d]) || k != floor(k)) {
        failed(M, v, d, k);
        return QKV_EINDEX;
      }
      off += ((int64_t)k - 1) * C->stride[d];
    }
    o[e] = qkv_mod_read(C->base + off * (int64_t)qkv_elsize(C->dtype), C->dtype);
  }
  return QKV_OK;
}

/* o[0..n) = op(a) for the transcendental ops of the score's path, in
   float32 (vexp.h's, on vectors) where the tile is float32: the values
   end as float32, and libm's double tanh, one call an element, took half
   of a soft-capped attention's backward; 0 for the ops it does not take */
CLONES static int run_f (int op, double *o, int n, const double *a, int sa) {
  if (!sa) n = 1;
#define F1(N) SIMD for (int x = 0; x < n; x++) o[x] = qkv_mod_apply_f(QKV_MOD_##N, (float)a[x])
  switch (op) {
    case QKV_MOD_EXP: F1(EXP); return 1;
    case QKV_MOD_TANH: F1(TANH); return 1;
    case QKV_MOD_SIGMOID: F1(SIGMOID); return 1;
    default: return 0;
  }
#undef F1
}

int qkv_mod_eval (qkv_attn_mods *M, const qkv_mod_tile *T, int want, double *mem) {
  const qkv_mod_prog *P = M->prog;
  axes A = axes_of(T);
  double *val[QKV_MOD_MAXINS];
  size_t off = 0;
  for (int v = 0; v < P->n; v++) {
    val[v] = mem + off;
    off += count_of(&A, P->dep[v]);
  }
  uint8_t fl[QKV_MOD_MAXINS];
  if (T->f64) memset(fl, 0, (size_t)P->n);
  else qkv_mod_float_values(P, fl);
  for (int v = 0; v < P->n; v++) {
    if (!(P->need[v] & want)) continue;
    const qkv_mod_ins *x = &P->ins[v];
    double *o = val[v];
    int d = P->dep[v], nx = d & A.dx ? A.nx : 1, ny = d & A.dy ? A.ny : 1;
    switch (x->op) {
      case QKV_MOD_SCORE:                   /* the tile's scores, widened */
        for (int y = 0; y < A.ny; y++) {
          double *oy = o + (size_t)y * (size_t)A.nx;
          if (T->f64) memcpy(oy, (const double *)T->s + y * T->ld, sizeof(double) * (size_t)A.nx);
          else {
            const float *sy = (const float *)T->s + y * T->ld;
            for (int e = 0; e < A.nx; e++) oy[e] = sy[e];
          }
        }
        continue;
      case QKV_MOD_B: o[0] = (double)(T->b + 1); continue;
      case QKV_MOD_H: o[0] = (double)(T->h + 1); continue;
      case QKV_MOD_CONST: o[0] = x->k; continue;
      case QKV_MOD_I: for (int e = 0; e < T->ni; e++) o[e] = (double)(T->i0 + e + 1); continue;
      case QKV_MOD_J: for (int e = 0; e < T->nj; e++) o[e] = (double)(T->j0 + e + 1); continue;
      default: break;
    }
    for (int y = 0; y < ny; y++) {
      double *oy = o + (size_t)y * (size_t)nx;
      if (x->op == QKV_MOD_LOAD) {
        int err = qkv_mod_load(M, &A, val, v, y, oy, nx);
        if (err != QKV_OK) return err;
        continue;
      }
      int ar = qkv_mod_arity(x->op), sa = 0, sb = 0, sc = 0;
      const double *a = row(&A, val[x->a], P->dep[x->a], y, &sa);
      const double *b = ar >= 2 ? row(&A, val[x->b], P->dep[x->b], y, &sb) : a;
      const double *c = ar >= 3 ? row(&A, val[x->c], P->dep[x->c], y, &sc) : a;
      if (!fl[v] || !run_f(x->op, oy, nx, a, sa)) qkv_mod_run(x->op, oy, nx, a, sa, b, sb, c, sc);
    }
  }
  return QKV_OK;
}

int64_t qkv_mod_kept (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem,
                      int64_t *run) {
  const qkv_mod_prog *P = M->prog;
  int v = P->out[QKV_MOD_OUT_MASK], dep;
  axes A = axes_of(T);
  const double *p = v >= 0 ? qkv_mod_value(P, T, mem, v, &dep) : NULL;
  int64_t kept = 0;
  for (int y = 0; y < A.ny; y++) {
    int sx = 0;
    const double *r = p ? row(&A, p, dep, y, &sx) : NULL;
    int64_t n = 0, lo = 0, hi = 0;
    if (r == NULL || !sx) {
      n = r == NULL || r[0] != 0 ? A.nx : 0;
      hi = n;
    } else {
      for (int x = 0; x < A.nx; x++) n += r[x] != 0;
      if (run && n > 0) {
        while (r[lo] == 0) lo++;
        for (hi = A.nx; r[hi - 1] == 0; hi--) continue;
      }
    }
    if (run) run[3 * y] = lo, run[3 * y + 1] = hi, run[3 * y + 2] = n;
    kept += n;
  }
  return kept;
}

CLONES void qkv_mod_put (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem,
                         int mask) {
  const qkv_mod_prog *P = M->prog;
  axes A = axes_of(T);
  int vs = P->out[QKV_MOD_OUT_SCORE], vm = mask ? P->out[QKV_MOD_OUT_MASK] : -1, ds = 0, dm = 0;
  const double *ps = vs >= 0 ? qkv_mod_value(P, T, mem, vs, &ds) : NULL;
  const double *pm = vm >= 0 ? qkv_mod_value(P, T, mem, vm, &dm) : NULL;
  for (int y = 0; y < A.ny; y++) {
    int sxs = 0, sxm = 0;
    const double *rs = ps ? row(&A, ps, ds, y, &sxs) : NULL;
    const double *rm = pm ? row(&A, pm, dm, y, &sxm) : NULL;
    qkv_mod_put_row(T, &A, y, rs, sxs, rm, sxm);
  }
}

CLONES void qkv_mod_put_row (const qkv_mod_tile *T, const axes *A, int y, const double *rs,
                             int xs, const double *rm, int xm) {
  if (T->f64) {
    double *s = (double *)T->s + (size_t)y * (size_t)T->ld;
    if (rs && xs) SIMD for (int x = 0; x < A->nx; x++) s[x] = rs[x];
    else if (rs) for (int x = 0; x < A->nx; x++) s[x] = rs[0];
    if (rm && xm) SIMD for (int x = 0; x < A->nx; x++) s[x] = rm[x] == 0 ? -INFINITY : s[x];
    else if (rm && rm[0] == 0) for (int x = 0; x < A->nx; x++) s[x] = -INFINITY;
  } else {
    float *s = (float *)T->s + (size_t)y * (size_t)T->ld;
    if (rs && xs) SIMD for (int x = 0; x < A->nx; x++) s[x] = (float)rs[x];
    else if (rs) for (int x = 0; x < A->nx; x++) s[x] = (float)rs[0];
    if (rm && xm) SIMD for (int x = 0; x < A->nx; x++) s[x] = rm[x] == 0 ? -INFINITY : s[x];
    else if (rm && rm[0] == 0) for (int x = 0; x < A->nx; x++) s[x] = -INFINITY;
  }
}

/* ds *= the derivative p (of dependence d) by rows, 0 kept 0 */
CLONES static void scale_ds (const qkv_mod_tile *T, void *ds, const double *p, int d) {
  axes A = axes_of(T);
  for (int y = 0; y < A.ny; y++) {
    int sx;
    const double *r = row(&A, p, d, y, &sx);
    if (T->f64) {
      double *s = (double *)ds + (size_t)y * (size_t)T->ld;
      if (sx) SIMD for (int x = 0; x < A.nx; x++) s[x] = s[x] != 0 ? s[x] * r[x] : s[x];
      else SIMD for (int x = 0; x < A.nx; x++) s[x] = s[x] != 0 ? s[x] * r[0] : s[x];
    } else {
      float *s = (float *)ds + (size_t)y * (size_t)T->ld;
      if (sx) SIMD for (int x = 0; x < A.nx; x++) s[x] = s[x] != 0 ? (float)(s[x] * r[x]) : s[x];
      else SIMD for (int x = 0; x < A.nx; x++) s[x] = s[x] != 0 ? (float)(s[x] * r[0]) : s[x];
    }
  }
}

void qkv_mod_grads (const qkv_attn_mods *M, const qkv_mod_tile *T, const double *mem,
                    void *ds, double *const *acc) {
  const qkv_mod_prog *P = M->prog;
  int f64 = T->f64;
  for (int o = QKV_MOD_OUT_DLOAD; o < QKV_MOD_NOUT; o++) {
    if (P->out[o] < 0) continue;
    const qkv_mod_ins *x = &P->ins[P->dload[o]];
    const qkv_mod_cap *C = &M->cap[x->a];
    double *g = acc[x->a];
    if (g == NULL) continue;
    int dd, di[QKV_MAXDIM];
    const double *pd = qkv_mod_value(P, T, mem, P->out[o], &dd), *pi[QKV_MAXDIM];
    int64_t cs[QKV_MAXDIM], n = 1;
    for (int d = x->c - 1; d >= 0; d--) {        /* the sum's contiguous strides */
      cs[d] = n;
      n *= C->size[d];
      pi[d] = qkv_mod_value(P, T, mem, P->args[x->b + d], &di[d]);
    }
    for (int i = 0; i < T->ni; i++)
      for (int j = 0; j < T->nj; j++) {
        double s = f64 ? ((const double *)ds)[i * T->ld + j] : ((const float *)ds)[i * T->ld + j];
        if (s == 0) continue;
        int64_t off = 0;
        for (int d = 0; d < x->c; d++) off += ((int64_t)qkv_mod_at(T, pi[d], di[d], i, j) - 1) * cs[d];
        g[off] += s * qkv_mod_at(T, pd, dd, i, j);
      }
  }
  int v = P->out[QKV_MOD_OUT_DSCORE], d;
  if (v < 0) return;
  const double *p = qkv_mod_value(P, T, mem, v, &d);
  if (d == 0 && p[0] == 1) return;              /* score + a bias: dS as it is */
  scale_ds(T, ds, p, d);
}

void qkv_cpu_mods_caps (qkv_attn_mods *M) {
  for (int c = 0; c < M->ncap; c++) {
    const qkv_tensor *t = M->capt[c];
    qkv_mod_cap *C = &M->cap[c];
    C->base = qkv_data(t);
    C->dtype = t->dtype;
    C->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) C->size[d] = t->size[d], C->stride[d] = t->stride[d];
    C->grad = M->gradt[c] ? qkv_data(M->gradt[c]) : NULL;
  }
  M->fail_ins = -1;
}

int qkv_cpu_mods_ready (qkv_attn_mods *M, const qkv_attn_plan *P) {
  int64_t heads = P->nbd > 0 ? P->bsize[P->nbd - 1] : 1;
  if (M->kindt) {
    const qkv_tensor *k = M->kindt;
    if (M->bq < 1 || M->bk < 1 || M->bq > 128 || M->bk > 256 ||
        (M->kh != 1 && M->kh != heads) || (M->kb != 1 && M->kb * heads != P->nbatch) ||
        M->nqb != (P->nq + M->bq - 1) / M->bq || M->nkb != (P->nk + M->bk - 1) / M->bk ||
        k->ndim != 4 || k->size[0] != M->kb || k->size[1] != M->kh || k->size[2] != M->nqb ||
        k->size[3] != M->nkb || k->dtype != QKV_I32 || !qkv_is_contiguous(k))
      return 0;
  }
  const qkv_tensor *s = M->spant;
  if (s && (!M->kindt || s->ndim != 4 || s->size[0] != M->kb || s->size[1] != M->kh ||
            s->size[2] != P->nq || s->size[3] != 2 || s->dtype != QKV_I32 ||
            !qkv_is_contiguous(s)))
    return 0;
  qkv_cpu_mods_caps(M);
  M->kinds = M->kindt ? qkv_data(M->kindt) : NULL;
  M->spans = s ? qkv_data(s) : NULL;
  M->heads = heads;
  M->fail_ins = -1;
  return 1;
}
