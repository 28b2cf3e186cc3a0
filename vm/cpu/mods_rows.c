/*
** mods_rows.c -- the forward's way of running score_mod and mask_mod
** programs (common/mods.h): row by row of a tile (vm/cpu/mods.h's
** qkv_mod_rows), so that the values in flight are rows that stay in L1;
** on a float32 tile the score's path in float32, and index arithmetic as
** lines where only lines and that path read it.
*/
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "mods.h"
#include "mods_eval.h"
#include "vexp.h"

/* value v's row y (its only row when it does not depend on y) */
CLONES static void leaf_row (const qkv_mod_ins *x, const qkv_mod_tile *T, const axes *A, int y,
                      double *o) {
  switch (x->op) {
    case QKV_MOD_B: o[0] = (double)(T->b + 1); break;
    case QKV_MOD_H: o[0] = (double)(T->h + 1); break;
    case QKV_MOD_CONST: o[0] = x->k; break;
    case QKV_MOD_I: case QKV_MOD_J: {
      int dep = x->op == QKV_MOD_I ? QKV_MOD_DEP_I : QKV_MOD_DEP_J;
      int64_t base = (x->op == QKV_MOD_I ? T->i0 : T->j0) + 1;
      if (dep == A->dx) for (int e = 0; e < A->nx; e++) o[e] = (double)(base + e);
      else o[0] = (double)(base + y);
      break;
    }
    case QKV_MOD_SCORE:
      if (T->f64) memcpy(o, (const double *)T->s + y * T->ld, sizeof(double) * (size_t)A->nx);
      else {
        const float *sy = (const float *)T->s + y * T->ld;
        SIMD for (int e = 0; e < A->nx; e++) o[e] = sy[e];
      }
      break;
    default: break;
  }
}

/* value v's row (one element where it does not run along x) from its
   operands' rows, all at y = 0 of their buffers */
static int one_row (qkv_attn_mods *M, const qkv_mod_tile *T, const axes *A, double *const *val,
                    int v, int y) {
  const qkv_mod_prog *P = M->prog;
  const qkv_mod_ins *x = &P->ins[v];
  int n = P->dep[v] & A->dx ? A->nx : 1;
  if (qkv_mod_arity(x->op) == 0) { leaf_row(x, T, A, y, val[v]); return QKV_OK; }
  if (x->op == QKV_MOD_LOAD) return qkv_mod_load(M, A, val, v, 0, val[v], n);
  int ar = qkv_mod_arity(x->op), sa = 0, sb = 0, sc = 0;
  const double *a = row(A, val[x->a], P->dep[x->a], 0, &sa);
  const double *b = ar >= 2 ? row(A, val[x->b], P->dep[x->b], 0, &sb) : a;
  const double *c = ar >= 3 ? row(A, val[x->c], P->dep[x->c], 0, &sc) : a;
  qkv_mod_run(x->op, val[v], n, a, sa, b, sb, c, sc);
  return QKV_OK;
}

/*
** A float32 tile's score path in float32: the values that read the score
** (and nothing a LOAD indexes by) are rows of floats, the score's row is
** the tile's own, and what they read of the index arithmetic (in double)
** is rounded once where it meets them.  The score ends as float32 anyway;
** the saving is the passes that widened the tile and narrowed it back,
** and twice the lanes.
*/
#define FLOOP2(F) do { \
    if (sa && sb) SIMD for (int x = 0; x < n; x++) o[x] = F(a[x], b[x]); \
    else if (sa) { float v_ = b[0]; SIMD for (int x = 0; x < n; x++) o[x] = F(a[x], v_); } \
    else if (sb) { float u_ = a[0]; SIMD for (int x = 0; x < n; x++) o[x] = F(u_, b[x]); } \
    else o[0] = F(a[0], b[0]); \
  } while (0)
#define F_ADD(u, v) ((u) + (v))
#define F_SUB(u, v) ((u) - (v))
#define F_MUL(u, v) ((u) * (v))
#define F_DIV(u, v) ((u) / (v))

CLONES static void runf (int op, float *o, int n, const float *a, int sa, const float *b, int sb,
                         const float *c, int sc) {
  if (!sa && !sb && !sc) n = 1;
  switch (op) {
    case QKV_MOD_ADD: FLOOP2(F_ADD); return;
    case QKV_MOD_SUB: FLOOP2(F_SUB); return;
    case QKV_MOD_MUL: FLOOP2(F_MUL); return;
    case QKV_MOD_DIV: FLOOP2(F_DIV); return;
    case QKV_MOD_EXP: case QKV_MOD_TANH: case QKV_MOD_SIGMOID:
      if (!sa) n = 1;                   /* one element, or the row as it lies */
#define F1(N) SIMD for (int x = 0; x < n; x++) o[x] = qkv_mod_apply_f(QKV_MOD_##N, a[x])
      if (op == QKV_MOD_EXP) F1(EXP);
      else if (op == QKV_MOD_TANH) F1(TANH);
      else F1(SIGMOID);
#undef F1
      return;
    default:                            /* the rest through the double formulas */
      for (int x = 0; x < n; x++)
        o[x] = (float)qkv_mod_apply(op, a[sa ? x : 0], b[sb ? x : 0], c[sc ? x : 0]);
  }
}

size_t qkv_mod_row_scratch (const qkv_mod_prog *P, int ni, int nj) {
  return (size_t)(P->n + 4) * (size_t)(ni > nj ? ni : nj);
}


/* o = f op (float)d, or (float)d op f when dfirst: a float value (a row
   when sf, else one element) met by a double row, rounded in the loop
   rather than in a pass of its own; 0 for the ops it does not take */
#define FMIX(F) do { \
    if (dfirst && sf) SIMD for (int x = 0; x < n; x++) o[x] = F((float)d[x], f[x]); \
    else if (dfirst) { float u_ = f[0]; SIMD for (int x = 0; x < n; x++) o[x] = F((float)d[x], u_); } \
    else if (sf) SIMD for (int x = 0; x < n; x++) o[x] = F(f[x], (float)d[x]); \
    else { float u_ = f[0]; SIMD for (int x = 0; x < n; x++) o[x] = F(u_, (float)d[x]); } \
  } while (0)

CLONES static int runf_mixed (int op, float *o, int n, const float *f, int sf, const double *d,
                              int dfirst) {
  switch (op) {
    case QKV_MOD_ADD: FMIX(F_ADD); return 1;
    case QKV_MOD_SUB: FMIX(F_SUB); return 1;
    case QKV_MOD_MUL: FMIX(F_MUL); return 1;
    case QKV_MOD_DIV: FMIX(F_DIV); return 1;
    default: return 0;
  }
}

CLONES static void runf_line (int op, float *o, int n, const float *f, int sf,
                              const double *line, int kind, int dfirst);

/* a float value's row: its operands as float rows (a double one rounded
   into tmp, or as the loop reads it), then runf.  The score is the
   tile's row itself (qkv_mod_rows points its value there). */
CLONES static void one_row_f (const qkv_mod_prog *P, const axes *A, double *const *val,
                              const uint8_t *fl, const uint8_t *af, double (*ab)[3], int v,
                              float *tmp) {
  const qkv_mod_ins *x = &P->ins[v];
  float *o = (float *)val[v];
  if (x->op == QKV_MOD_SCORE) return;
  int ar = qkv_mod_arity(x->op), s[3] = {0, 0, 0};
  if (ar == 2 && fl[x->a] != fl[x->b]) {        /* a float and a double row */
    int df = !fl[x->a], d = df ? x->a : x->b, f = df ? x->b : x->a;
    if (af[d]) {                                /* a line (affine_values) */
      runf_line(x->op, o, P->dep[v] & A->dx ? A->nx : 1, (const float *)val[f],
                (P->dep[f] & A->dx) != 0, ab[d], af[d], df);
      return;
    }
    if ((P->dep[d] & A->dx) && (P->dep[v] & A->dx) &&
        runf_mixed(x->op, o, A->nx, (const float *)val[f], (P->dep[f] & A->dx) != 0, val[d], df))
      return;
  }
  const float *r[3] = {NULL, NULL, NULL};
  const int32_t in[3] = {x->a, x->b, x->c};
  for (int i = 0; i < ar; i++) {
    int a = in[i], along = (P->dep[a] & A->dx) != 0, n = along ? A->nx : 1;
    s[i] = along;
    if (fl[a]) { r[i] = (const float *)val[a]; continue; }
    float *t = tmp + (size_t)i * (size_t)A->nx;
    const double *d = val[a];
    SIMD for (int e = 0; e < n; e++) t[e] = (float)d[e];
    r[i] = t;
  }
  for (int i = ar; i < 3; i++) r[i] = r[0], s[i] = s[0];
  runf(x->op, o, P->dep[v] & A->dx ? A->nx : 1, r[0], s[0], r[1], s[1], r[2], s[2]);
}

/*
** Index arithmetic as lines.  A double value along x that is i or j, or a
** sum, difference or negation of such and of small integers one per row
** (b, h, i or j, whole constants), is c + d x on each row with c, d whole
** numbers (PLAIN); such a line times or over a number one per row is k (c
** + d x) or (c + d x) / k (MULK, DIVK).  Each element of a line is then
** exactly what the row's ops give (the integer part is exact, k's product
** or quotient the one rounding the row had), so a line costs three
** numbers a row instead of a pass over it.  Lines are kept only where
** every reader is another line or a float op of the score (ALiBi's score
** + slope (j - i)), which evaluates the line as it adds it; a comparison,
** a LOAD or an output reads the row, computed as it always was.
*/
enum { PLAIN = 1, MULK, DIVK };

/* whether v is a whole number of at most 2^40 in size whatever the call:
   b, h, i, j, whole constants, their sums, differences and negations */
static int small_int (const qkv_mod_prog *P, const uint8_t *si, int v) {
  const qkv_mod_ins *x = &P->ins[v];
  switch (x->op) {
    case QKV_MOD_B: case QKV_MOD_H: case QKV_MOD_I: case QKV_MOD_J: return 1;
    case QKV_MOD_CONST: return x->k == floor(x->k) && fabs(x->k) <= 0x1p40;
    case QKV_MOD_NEG: return si[x->a];
    case QKV_MOD_ADD: case QKV_MOD_SUB: return si[x->a] && si[x->b];
    default: return 0;
  }
}

static int fuses (const qkv_mod_prog *P, const uint8_t *fl, int c) {
  const qkv_mod_ins *x = &P->ins[c];
  return fl[c] && qkv_mod_arity(x->op) == 2 && fl[x->a] != fl[x->b] &&
         (x->op == QKV_MOD_ADD || x->op == QKV_MOD_SUB || x->op == QKV_MOD_MUL ||
          x->op == QKV_MOD_DIV);
}

static void affine_values (const qkv_mod_prog *P, const axes *A, const uint8_t *fl, int want,
                           uint8_t *af, uint8_t *rows) {
  uint8_t si[QKV_MOD_MAXINS];
  for (int v = 0; v < P->n; v++) {
    const qkv_mod_ins *x = &P->ins[v];
    int ar = qkv_mod_arity(x->op);
    si[v] = (uint8_t)small_int(P, si, v);
    af[v] = 0;
    if (fl[v] || !(P->dep[v] & A->dx) || !(P->need[v] & want)) continue;
    /* each operand: a line's kind, or -1 for a number one per row (-2:
       a small whole one) */
    int k[2] = {0, 0};
    for (int i = 0; i < ar && i < 2; i++) {
      int u = i == 0 ? x->a : x->b;
      k[i] = af[u] ? af[u] : P->dep[u] & A->dx ? 0 : si[u] ? -2 : -1;
    }
    switch (x->op) {
      case QKV_MOD_I: case QKV_MOD_J: af[v] = PLAIN; break;
      case QKV_MOD_NEG: af[v] = k[0] > 0 ? (uint8_t)k[0] : 0; break;
      case QKV_MOD_ADD: case QKV_MOD_SUB:
        af[v] = (k[0] == PLAIN || k[0] == -2) && (k[1] == PLAIN || k[1] == -2) ? PLAIN : 0;
        break;
      case QKV_MOD_MUL:
        af[v] = (k[0] == PLAIN && k[1] < 0) || (k[0] < 0 && k[1] == PLAIN) ? MULK : 0;
        break;
      case QKV_MOD_DIV: af[v] = k[0] == PLAIN && k[1] < 0 ? DIVK : 0; break;
      default: break;
    }
  }
  /* which lines need their rows too (line_row, from the line's numbers):
     those that an output, a LOAD or any op but a line's or a fused float
     op reads */
  for (int v = 0; v < P->n; v++) rows[v] = !af[v];
  for (int o = 0; o < QKV_MOD_NOUT; o++)
    if (P->out[o] >= 0) rows[P->out[o]] = 1;
  for (int c = 0; c < P->n; c++) {
    const qkv_mod_ins *x = &P->ins[c];
    int ar = qkv_mod_arity(x->op);
    if (!(P->need[c] & want)) continue;
    if (ar == -1)
      for (int d = 0; d < x->c; d++) rows[P->args[x->b + d]] = 1;
    else if (!af[c] && !fuses(P, fl, c))
      for (int i = 0; i < ar; i++) rows[i == 0 ? x->a : i == 1 ? x->b : x->c] = 1;
  }
}

/* value v's line ab[v] = {c, d, k} from its operands' lines and numbers */
static void affine_of (const qkv_mod_prog *P, const qkv_mod_tile *T, double *const *val,
                       const uint8_t *af, double (*ab)[3], int v) {
  const qkv_mod_ins *x = &P->ins[v];
  double *o = ab[v];
  if (x->op == QKV_MOD_I || x->op == QKV_MOD_J) {
    o[0] = (double)((x->op == QKV_MOD_I ? T->i0 : T->j0) + 1);
    o[1] = 1;
    o[2] = 1;
    return;
  }
  int line = af[x->a] ? x->a : x->b, other = line == x->a ? x->b : x->a;
  const double *l = ab[line];
  double n = qkv_mod_arity(x->op) == 2 && !af[other] ? val[other][0] : 0;
  switch (x->op) {
    case QKV_MOD_NEG:
      if (af[v] == PLAIN) o[0] = -l[0], o[1] = -l[1], o[2] = 1;
      else o[0] = l[0], o[1] = l[1], o[2] = -l[2];
      break;
    case QKV_MOD_ADD: case QKV_MOD_SUB: {
      double s = x->op == QKV_MOD_SUB ? -1 : 1;
      const double *a = af[x->a] ? ab[x->a] : NULL, *b = af[x->b] ? ab[x->b] : NULL;
      o[0] = (a ? a[0] : val[x->a][0]) + s * (b ? b[0] : val[x->b][0]);
      o[1] = (a ? a[1] : 0) + s * (b ? b[1] : 0);
      o[2] = 1;
      break;
    }
    default:                                    /* MUL, DIV: by the number n */
      o[0] = l[0], o[1] = l[1], o[2] = n;
      break;
  }
}

#define LINE_P(x) (c + d * (x))
#define LINE_M(x) (k * (c + d * (x)))
#define LINE_D(x) ((c + d * (x)) / k)

/* a line's row, element by element the same as its ops would give */
CLONES static void line_row (const double *line, int kind, double *o, int n) {
  double c = line[0], d = line[1], k = line[2];
  if (kind == PLAIN) SIMD for (int x = 0; x < n; x++) o[x] = LINE_P(x);
  else if (kind == MULK) SIMD for (int x = 0; x < n; x++) o[x] = LINE_M(x);
  else SIMD for (int x = 0; x < n; x++) o[x] = LINE_D(x);
}

/* o = f op line, or line op f when dfirst: the line's element (c + d x,
   times or over k) made in the loop and rounded to float there (a float
   row f, or one element when !sf) */
#define FLINE(F, L) do { \
    if (dfirst && sf) SIMD for (int x = 0; x < n; x++) o[x] = F((float)L(x), f[x]); \
    else if (dfirst) { float u_ = f[0]; SIMD for (int x = 0; x < n; x++) o[x] = F((float)L(x), u_); } \
    else if (sf) SIMD for (int x = 0; x < n; x++) o[x] = F(f[x], (float)L(x)); \
    else { float u_ = f[0]; SIMD for (int x = 0; x < n; x++) o[x] = F(u_, (float)L(x)); } \
  } while (0)
#define FOPS(L) do { \
    switch (op) { \
      case QKV_MOD_ADD: FLINE(F_ADD, L); break; \
      case QKV_MOD_SUB: FLINE(F_SUB, L); break; \
      case QKV_MOD_MUL: FLINE(F_MUL, L); break; \
      default: FLINE(F_DIV, L); break; \
    } \
  } while (0)

CLONES static void runf_line (int op, float *o, int n, const float *f, int sf,
                              const double *line, int kind, int dfirst) {
  double c = line[0], d = line[1], k = line[2];
  if (kind == PLAIN) FOPS(LINE_P);
  else if (kind == MULK) FOPS(LINE_M);
  else FOPS(LINE_D);
}

CLONES int qkv_mod_rows (qkv_attn_mods *M, const qkv_mod_tile *T, int want, double *mem,
                         uint8_t *keep, float *mx) {
  const qkv_mod_prog *P = M->prog;
  axes A = axes_of(T);
  double *val[QKV_MOD_MAXINS];
  size_t off = 0;
  for (int v = 0; v < P->n; v++) {             /* a row each, or one element */
    val[v] = mem + off;
    off += P->dep[v] & A.dx ? (size_t)A.nx : 1;
  }
  float *tmp = (float *)(mem + off);           /* 3 rows of floats */
  uint8_t fl[QKV_MOD_MAXINS], af[QKV_MOD_MAXINS], rows[QKV_MOD_MAXINS];
  double ab[QKV_MOD_MAXINS][3];
  if (T->f64) memset(fl, 0, (size_t)P->n);
  else qkv_mod_float_values(P, fl);
  affine_values(P, &A, fl, want, af, rows);
  int err = QKV_OK;
  for (int v = 0; v < P->n && err == QKV_OK; v++)   /* what no row changes, once */
    if ((P->need[v] & want) && !(P->dep[v] & A.dy)) {
      if (!af[v]) {
        err = one_row(M, T, &A, val, v, 0);
        continue;
      }
      affine_of(P, T, val, af, ab, v);
      if (rows[v]) line_row(ab[v], af[v], val[v], A.nx);
    }
  int vs = want & QKV_MOD_WANT_SCORE ? P->out[QKV_MOD_OUT_SCORE] : -1;
  int vm = want & QKV_MOD_WANT_MASK ? P->out[QKV_MOD_OUT_MASK] : -1;
  int xs = vs >= 0 && (P->dep[vs] & A.dx), xm = vm >= 0 && (P->dep[vm] & A.dx);
  int fs = vs >= 0 && fl[vs];
  /* a float score's rows: the score's value is the tile's row, and the new
     score is written into it, when nothing after it is wanted (which
     could read the score it replaced) */
  int inplace = fs && xs && P->ins[vs].op != QKV_MOD_SCORE;
  for (int v = vs + 1; inplace && v < P->n; v++) inplace = !(P->need[v] & want);
  for (int y = 0; y < A.ny && err == QKV_OK; y++) {
    double *row_y = (double *)((float *)T->s + (size_t)y * (size_t)T->ld);
    for (int v = 0; v < P->n && err == QKV_OK; v++) {
      if (!(P->need[v] & want) || !(P->dep[v] & A.dy)) continue;
      if (fl[v] && (P->ins[v].op == QKV_MOD_SCORE || (inplace && v == vs))) val[v] = row_y;
      if (fl[v]) { one_row_f(P, &A, val, fl, af, ab, v, tmp); continue; }
      if (!af[v]) {
        err = one_row(M, T, &A, val, v, y);
        continue;
      }
      affine_of(P, T, val, af, ab, v);
      if (rows[v]) line_row(ab[v], af[v], val[v], A.nx);
    }
    if (fs && !inplace) {                     /* a float score: its row as it is */
      float *s = (float *)T->s + (size_t)y * (size_t)T->ld;
      const float *r = (const float *)val[vs];
      if (xs) memcpy(s, r, sizeof(float) * (size_t)A.nx);
      else for (int x = 0; x < A.nx; x++) s[x] = r[0];
    }
    const double *rs = vs >= 0 && !fs ? val[vs] : NULL, *rm = vm >= 0 ? val[vm] : NULL;
    if (rm && keep) {                         /* the mask as bytes, s untouched */
      uint8_t *k = keep + (size_t)y * (size_t)T->ld;
      if (xm) SIMD for (int x = 0; x < A.nx; x++) k[x] = rm[x] != 0;
      else memset(k, rm[0] != 0, (size_t)A.nx);
      rm = NULL;
    }
    qkv_mod_put_row(T, &A, y, rs, xs, rm, xm);
    if (mx && !T->f64) {                      /* the new row's max, folded in */
      const float *s = (const float *)T->s + (size_t)y * (size_t)T->ld;
      SIMD for (int x = 0; x < A.nx; x++) mx[x] = s[x] > mx[x] ? s[x] : mx[x];
    }
  }
  return err;
}
