/*
** mods.h -- attention's score_mod and mask_mod as programs: what the
** tracer (stdlib/qkv/variants/trace.lua) made of a Lua function, in a form
** every backend runs without Lua.  One list of the programs' operations
** (QKV_MOD_OPS), read by the bindings (qkv._mod_ops() gives the tracer the
** codes, so the codes live here alone), by the CPU's evaluator
** (vm/cpu/mods.c) and by the code a GPU backend generates; each op's
** formula is in qkv_mod_apply, once.
**
** A program is a list of instructions in order; instruction n's value is
** "value n", and an instruction reads only values before it.  Values are
** doubles: a number, or a boolean as 0 or 1.  Leaves read the score (q.k
** times scale), the batch item b, the head h, the query i and the key j
** (all counted from 1, as the tracer's symbols) or a constant; LOAD reads
** element (args...) of a captured tensor, each index counted from 1 and
** checked (an index outside the tensor, or not an integer, is an error
** the backend reports through qkv_attn_mods.fail, never a read).
**
** A program has up to QKV_MOD_NOUT outputs: the new score (score_mod),
** its derivative by the score (for the backward), whether a key is kept
** (mask_mod), and per captured tensor that wants a gradient the
** derivative of the new score by the value loaded from it (one LOAD per
** such tensor: the tracer refuses more).  -1: none.
*/
#ifndef QKV_COMMON_MODS_H
#define QKV_COMMON_MODS_H

#include "common.h"

/*   X(NAME, name, arity) -- the formulas are qkv_mod_apply's */
#define QKV_MOD_OPS(X) \
  X(SCORE, score, 0) X(B, b, 0) X(H, h, 0) X(I, i, 0) X(J, j, 0) X(CONST, const, 0) \
  X(NEG, neg, 1) X(NOT, not, 1) X(EXP, exp, 1) X(LOG, log, 1) X(TANH, tanh, 1) \
  X(ABS, abs, 1) X(SQRT, sqrt, 1) X(SIGMOID, sigmoid, 1) X(SIN, sin, 1) X(COS, cos, 1) \
  X(RELU, relu, 1) \
  X(ADD, add, 2) X(SUB, sub, 2) X(MUL, mul, 2) X(DIV, div, 2) X(POW, pow, 2) \
  X(IDIV, idiv, 2) X(MOD, mod, 2) X(MINIMUM, minimum, 2) X(MAXIMUM, maximum, 2) \
  X(LT, lt, 2) X(LE, le, 2) X(GT, gt, 2) X(GE, ge, 2) X(EQ, eq, 2) X(NE, ne, 2) \
  X(AND, and, 2) X(OR, or, 2) \
  X(WHERE, where, 3) \
  X(LOAD, load, -1)

typedef enum {
#define QKV_MOD_ENUM(N, n, a) QKV_MOD_##N,
  QKV_MOD_OPS(QKV_MOD_ENUM)
#undef QKV_MOD_ENUM
  QKV_MOD_NOPS
} qkv_mod_op;

#define QKV_MOD_MAXINS 256          /* instructions of a program */
#define QKV_MOD_MAXARGS 64          /* LOADs' indices, all together */
#define QKV_MOD_MAXCAP 8            /* captured tensors */

/* one instruction: op; a, b, c the values it reads (LOAD: a the captured
   tensor, b its first index in args, c how many); k CONST's number */
typedef struct qkv_mod_ins {
  int32_t op, a, b, c;
  double k;
} qkv_mod_ins;

enum { QKV_MOD_OUT_SCORE, QKV_MOD_OUT_DSCORE, QKV_MOD_OUT_MASK, QKV_MOD_OUT_DLOAD,
       QKV_MOD_NOUT = QKV_MOD_OUT_DLOAD + QKV_MOD_MAXCAP };

/* what a value depends on, so that it is computed once per tile, per
   query, per key or per pair (vm/cpu/mods.c) */
enum { QKV_MOD_DEP_I = 1, QKV_MOD_DEP_J = 2 };

/* which outputs a run computes: the score, the mask, the derivatives */
enum { QKV_MOD_WANT_SCORE = 1, QKV_MOD_WANT_MASK = 2, QKV_MOD_WANT_GRAD = 4 };
static inline QKV_HD int qkv_mod_want_of (int out) {
  return out == QKV_MOD_OUT_SCORE ? QKV_MOD_WANT_SCORE
       : out == QKV_MOD_OUT_MASK ? QKV_MOD_WANT_MASK : QKV_MOD_WANT_GRAD;
}

typedef struct qkv_mod_prog {
  int n, nargs;
  qkv_mod_ins ins[QKV_MOD_MAXINS];
  int32_t args[QKV_MOD_MAXARGS];
  int out[QKV_MOD_NOUT];            /* the outputs' values, -1 for none */
  int dload[QKV_MOD_NOUT];          /* OUT_DLOAD + c: the LOAD it differentiates by */
  /* derived by qkv_mod_check: each value's dependence, whether it is a
     leaf the evaluator reads in place, and the uses left */
  uint8_t dep[QKV_MOD_MAXINS];
  uint8_t need[QKV_MOD_MAXINS];     /* QKV_MOD_WANT_* of the outputs that read it */
  int uses_score, uses_b, uses_h;
} qkv_mod_prog;

/* a captured tensor as the kernels read it: a view of any strides on the
   attention's device, of any dtype */
typedef struct qkv_mod_cap {
  const char *base;
  qkv_dtype dtype;
  int ndim;
  int64_t size[QKV_MAXDIM], stride[QKV_MAXDIM];
  double *grad;                     /* the backward's float64 sum of its gradient
                                       (contiguous, its size), or NULL */
} qkv_mod_cap;

/*
** What an attention call carries besides the plain plan: the program
** (NULL: none), its captured tensors, a block mask's kinds per (query
** block, key block) and, filled by the backend on failure, which LOAD
** failed and why.
*/
enum { QKV_BLOCK_EMPTY = 0, QKV_BLOCK_PARTIAL = 1, QKV_BLOCK_FULL = 2 };
typedef struct qkv_attn_mods {
  const qkv_mod_prog *prog;
  int ncap;
  /* the captured tensors, on the attention's device, and for the
     backward float64 tensors of their shapes (contiguous, on the same
     device) to add their gradients into, or NULL; kindt the kinds below
     as a tensor (int32, contiguous), or NULL.  The backend fills cap[]
     and kinds from them */
  const qkv_tensor *capt[QKV_MOD_MAXCAP];
  qkv_tensor *gradt[QKV_MOD_MAXCAP];
  const qkv_tensor *kindt;
  qkv_mod_cap cap[QKV_MOD_MAXCAP];
  /* kinds: int32 (kb, kh, nqb, nkb) contiguous, kb 1 or the b's, kh 1 or
     the h's; NULL: every block partial.  bq, bk the blocks' sizes, which
     the kernels' tiles take */
  const int32_t *kinds;
  int64_t kb, kh, nqb, nkb, bq, bk;
  /* spans: int32 (kb, kh, n_q, 2), per query the one run of keys [lo, hi)
     it keeps (0-based; lo = hi for none), when every query's kept keys
     are one run (a window, causal, a document, a prefix), or NULL; spant
     the tensor.  A CPU kernel then cuts a partial block by these instead
     of running the mask */
  const qkv_tensor *spant;
  const int32_t *spans;
  /* the batch dims read as (B, H): H the last's size, 1 with none */
  int64_t heads;
  /* a failed LOAD: its instruction, index (0-based) and value */
  int fail_ins, fail_arg;
  double fail_val;
} qkv_attn_mods;

/* batch item t's (b, h) as the kinds' and the spans' first two dims */
static inline QKV_HD int64_t qkv_mod_bh (const qkv_attn_mods *M, int64_t t) {
  int64_t b = t / M->heads, h = t % M->heads;
  return (M->kb == 1 ? 0 : b) * M->kh + (M->kh == 1 ? 0 : h);
}

/* whether P's derivative by the score is a constant (a bias added to the
   score: ALiBi, a relative bias), its value in *k; 0 where P has no score
   output or the derivative varies */
static inline int qkv_mod_dscore_const (const qkv_mod_prog *P, double *k) {
  int d = P->out[QKV_MOD_OUT_DSCORE];
  if (P->out[QKV_MOD_OUT_SCORE] < 0 || d < 0 || P->ins[d].op != QKV_MOD_CONST) return 0;
  *k = P->ins[d].k;
  return 1;
}

/* inlined always: the CPU's loops call it with a constant op (vm/cpu/mods.c),
   and only inlined does its switch fold away and the loop vectorise */
#if defined(__GNUC__) && !defined(__CUDACC__)
#define QKV_MOD_INLINE static inline __attribute__((always_inline))
#else
#define QKV_MOD_INLINE static inline
#endif

/* the value of op on a, b, c (numbers; booleans as 0, 1) */
QKV_MOD_INLINE QKV_HD double qkv_mod_apply (int op, double a, double b, double c) {
  switch (op) {
    case QKV_MOD_NEG: return -a;
    case QKV_MOD_NOT: return a == 0;
    case QKV_MOD_EXP: return exp(a);
    case QKV_MOD_LOG: return log(a);
    case QKV_MOD_TANH: return tanh(a);
    case QKV_MOD_ABS: return fabs(a);
    case QKV_MOD_SQRT: return sqrt(a);
    case QKV_MOD_SIGMOID: return 1 / (1 + exp(-a));
    case QKV_MOD_SIN: return sin(a);
    case QKV_MOD_COS: return cos(a);
    case QKV_MOD_RELU: return a > 0 ? a : a == a ? 0.0 : a;
    case QKV_MOD_ADD: return a + b;
    case QKV_MOD_SUB: return a - b;
    case QKV_MOD_MUL: return a * b;
    case QKV_MOD_DIV: return a / b;
    case QKV_MOD_POW: return pow(a, b);
    case QKV_MOD_IDIV: return floor(a / b);                   /* Lua's // */
    case QKV_MOD_MOD: {                                       /* Lua's % */
      double m = fmod(a, b);
      if ((m > 0) ? b < 0 : (m < 0 && b != m)) m += b;
      return m;
    }
    case QKV_MOD_MINIMUM: return a != a || b != b ? a + b : a < b ? a : b;
    case QKV_MOD_MAXIMUM: return a != a || b != b ? a + b : a > b ? a : b;
    case QKV_MOD_LT: return a < b;
    case QKV_MOD_LE: return a <= b;
    case QKV_MOD_GT: return a > b;
    case QKV_MOD_GE: return a >= b;
    case QKV_MOD_EQ: return a == b;
    case QKV_MOD_NE: return a != b;
    case QKV_MOD_AND: return a != 0 && b != 0;
    case QKV_MOD_OR: return a != 0 || b != 0;
    case QKV_MOD_WHERE: return a != 0 ? b : c;
    default: return NAN;
  }
}

/* element p of a captured tensor of dtype dt, as a double */
static inline QKV_HD double qkv_mod_read (const char *p, qkv_dtype dt) {
  switch (dt) {
    case QKV_F32: { float f; memcpy(&f, p, 4); return f; }
    case QKV_F64: { double d; memcpy(&d, p, 8); return d; }
    case QKV_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case QKV_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case QKV_BOOL: return *(const unsigned char *)p != 0;
    case QKV_F16: { uint16_t h; memcpy(&h, p, 2); return qkv_h2f(h); }
    case QKV_BF16: { uint16_t h; memcpy(&h, p, 2); return qkv_bf2f(h); }
    default: return NAN;
  }
}

static inline int qkv_mod_arity (int op) {
  static const signed char ar[] = {
#define QKV_MOD_AR(N, n, a) a,
    QKV_MOD_OPS(QKV_MOD_AR)
#undef QKV_MOD_AR
  };
  return op >= 0 && op < QKV_MOD_NOPS ? ar[op] : -2;
}

/*
** Which values of P the fused float32 kernels (and the halves') compute
** in float32 (fl[v] = 1): those that read the score, which is float32
** there anyway; none when a LOAD is indexed by one.  The index arithmetic
** stays float64 (vm/cpu/mods_rows.c, vm/cuda/mods_gen.cu).
*/
static inline void qkv_mod_float_values (const qkv_mod_prog *P, uint8_t *fl) {
  for (int v = 0; v < P->n; v++) {
    const qkv_mod_ins *x = &P->ins[v];
    int ar = qkv_mod_arity(x->op);
    fl[v] = x->op == QKV_MOD_SCORE;
    if (x->op == QKV_MOD_LOAD) {
      for (int d = 0; d < x->c; d++)
        if (fl[P->args[x->b + d]]) {
          for (int u = 0; u < P->n; u++) fl[u] = 0;
          return;
        }
      continue;
    }
    for (int i = 0; i < ar; i++) fl[v] |= fl[i == 0 ? x->a : i == 1 ? x->b : x->c];
  }
}

/*
** Checks a program read from a script (any bytes) against ncap captured
** tensors of ranks rank[]: known ops, values read before they are made,
** LOAD's tensor and index count, outputs in range; then fills the derived
** fields.  0 when it is good.
*/
static inline int qkv_mod_check (qkv_mod_prog *P, int ncap, const int *rank) {
  if (P->n < 0 || P->n > QKV_MOD_MAXINS || P->nargs < 0 || P->nargs > QKV_MOD_MAXARGS)
    return -1;
  P->uses_score = P->uses_b = P->uses_h = 0;
  for (int n = 0; n < P->n; n++) {
    const qkv_mod_ins *x = &P->ins[n];
    int ar = qkv_mod_arity(x->op);
    uint8_t d = 0;
    if (ar == -2) return -1;
    if (ar == -1) {                                 /* LOAD */
      if (x->a < 0 || x->a >= ncap || x->c != rank[x->a] || x->b < 0 || x->c < 0 ||
          x->b > P->nargs - x->c)
        return -1;
      for (int i = 0; i < x->c; i++) {
        int v = P->args[x->b + i];
        if (v < 0 || v >= n) return -1;
        d |= P->dep[v];
      }
    } else {
      const int32_t r[3] = {x->a, x->b, x->c};
      for (int i = 0; i < ar; i++) {
        if (r[i] < 0 || r[i] >= n) return -1;
        d |= P->dep[r[i]];
      }
    }
    if (x->op == QKV_MOD_SCORE) { d = QKV_MOD_DEP_I | QKV_MOD_DEP_J; P->uses_score = 1; }
    if (x->op == QKV_MOD_I) d = QKV_MOD_DEP_I;
    if (x->op == QKV_MOD_J) d = QKV_MOD_DEP_J;
    if (x->op == QKV_MOD_B) P->uses_b = 1;
    if (x->op == QKV_MOD_H) P->uses_h = 1;
    P->dep[n] = d;
  }
  memset(P->need, 0, sizeof P->need);
  for (int o = 0; o < QKV_MOD_NOUT; o++) {
    if (P->out[o] < -1 || P->out[o] >= P->n) return -1;
    if (P->out[o] >= 0) P->need[P->out[o]] |= (uint8_t)qkv_mod_want_of(o);
    if (o >= QKV_MOD_OUT_DLOAD && P->out[o] >= 0) {
      int l = P->dload[o];
      if (l < 0 || l >= P->n || P->ins[l].op != QKV_MOD_LOAD) return -1;
      P->need[l] |= QKV_MOD_WANT_GRAD;
    }
  }
  /* what an output needs, it needs the inputs of */
  for (int n = P->n - 1; n >= 0; n--) {
    const qkv_mod_ins *x = &P->ins[n];
    int ar = qkv_mod_arity(x->op);
    if (ar == -1)
      for (int i = 0; i < x->c; i++) P->need[P->args[x->b + i]] |= P->need[n];
    for (int i = 0; i < ar; i++) P->need[i == 0 ? x->a : i == 1 ? x->b : x->c] |= P->need[n];
  }
  return 0;
}

#endif
