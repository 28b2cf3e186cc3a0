/*
** ops.h -- the one list of elementwise ops.  A row states what an op takes
** and gives; the rest is derived from the rows: the enums qkv_binop and
** qkv_unop, the dispatch's dtype rule (vm/dispatch/ops.c), the bindings'
** rules and Lua functions (bindings/lmath.c) and qkv._ops(), which the
** ISA, cross-backend and fuzzer suites loop over, the CPU's row tables
** (vm/cpu/elementwise_rows.h), the CUDA functors and switch
** (vm/cuda/elementwise.cu), and the check that a CUDA plugin was built
** from this list (QKV_OPS_LIST, vm/dispatch/plugin.c).  Each op's formula
** is in elementwise.h, once for both backends.
**
** Only the units that use the list include this header (qkv.h does not),
** so that a new row rebuilds those alone: the bindings that call ops, the
** dispatch, the CPU's and CUDA's elementwise units and the plugin loader.
**
**   X(NAME, name, takes, result, grad, api)
**
**   NAME    the enum's QKV_NAME
**   name    its Lua name (x:name(...), qkv.name(...)) and its formula's,
**           qkv_el_<name>_<type> (elementwise.h)
**   takes   the dtypes its kernels compute in: FLOAT (float32, float64),
**           NUMBER (and int64), ANY (and bool).  An operand the op does not
**           take is lifted (qkv_op_lifted): bool to int64, integers to
**           float32; int32 and the halves are computed in int64 and float32
**   result  SAME: that dtype; BOOL: bool (a comparison)
**   grad    GRAD: differentiable, by the rule R.name of
**           stdlib/qkv/derivatives.lua; NOGRAD: not
**   api     PUBLIC: bound as x:name(...) and qkv.name(...) by lmath.c;
**           PRIVATE: its kernel only, reached through another binding
**
** The order of the rows is the enums' order and nothing else: any order
** works.  Adding an op: docs/contributing.md, "Adding an elementwise op".
*/
#ifndef QKV_COMMON_OPS_H
#define QKV_COMMON_OPS_H

#include "common.h"

#define QKV_BINARY_OPS(X) \
  X(ADD,       add,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(SUB,       sub,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(MUL,       mul,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(DIV,       div,       FLOAT,  SAME, GRAD,   PUBLIC) \
  X(POW,       pow,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(MAXIMUM,   maximum,   NUMBER, SAME, GRAD,   PUBLIC) \
  X(MINIMUM,   minimum,   NUMBER, SAME, GRAD,   PUBLIC) \
  X(LOGADDEXP, logaddexp, FLOAT,  SAME, GRAD,   PUBLIC) \
  /* b * GELU'(a), GELU's backward (qkv._gelu_backward) */ \
  X(GELU_GRAD, gelu_grad, FLOAT,  SAME, NOGRAD, PRIVATE) \
  X(EQ,        eq,        ANY,    BOOL, NOGRAD, PUBLIC) \
  X(NE,        ne,        ANY,    BOOL, NOGRAD, PUBLIC) \
  X(LT,        lt,        ANY,    BOOL, NOGRAD, PUBLIC) \
  X(LE,        le,        ANY,    BOOL, NOGRAD, PUBLIC) \
  X(GT,        gt,        ANY,    BOOL, NOGRAD, PUBLIC) \
  X(GE,        ge,        ANY,    BOOL, NOGRAD, PUBLIC)

#define QKV_UNARY_OPS(X) \
  X(NEG,       neg,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(EXP,       exp,       FLOAT,  SAME, GRAD,   PUBLIC) \
  X(LOG,       log,       FLOAT,  SAME, GRAD,   PUBLIC) \
  X(SQRT,      sqrt,      FLOAT,  SAME, GRAD,   PUBLIC) \
  X(ABS,       abs,       NUMBER, SAME, GRAD,   PUBLIC) \
  X(TANH,      tanh,      FLOAT,  SAME, GRAD,   PUBLIC) \
  X(GELU,      gelu,      FLOAT,  SAME, GRAD,   PUBLIC) \
  X(SIGMOID,   sigmoid,   FLOAT,  SAME, GRAD,   PUBLIC) \
  X(RELU,      relu,      NUMBER, SAME, GRAD,   PUBLIC) \
  X(SILU,      silu,      FLOAT,  SAME, GRAD,   PUBLIC) \
  X(SIN,       sin,       FLOAT,  SAME, GRAD,   PUBLIC) \
  X(COS,       cos,       FLOAT,  SAME, GRAD,   PUBLIC)

#define QKV_OP_ENUM_(NAME, ...) QKV_##NAME,
typedef enum { QKV_BINARY_OPS(QKV_OP_ENUM_) QKV_NBINARY } qkv_binop;
typedef enum { QKV_UNARY_OPS(QKV_OP_ENUM_) QKV_NUNARY } qkv_unop;

/* the columns' values: takes as bits of the compute dtypes, result */
#define QKV_TAKES_FLOAT 1       /* float32, float64 */
#define QKV_TAKES_NUMBER 3      /* and int64 */
#define QKV_TAKES_ANY 7         /* and bool */
#define QKV_RESULT_SAME 0
#define QKV_RESULT_BOOL 1
#define QKV_GRAD_GRAD 1
#define QKV_GRAD_NOGRAD 0
#define QKV_API_PUBLIC 1
#define QKV_API_PRIVATE 0

#define QKV_OP_TAKES_(NAME, name, takes, ...) case QKV_##NAME: return QKV_TAKES_##takes;
#define QKV_OP_RESULT_(NAME, name, takes, result, ...) case QKV_##NAME: return QKV_RESULT_##result;

static inline QKV_HD int qkv_binop_takes (int op) {
  switch (op) { QKV_BINARY_OPS(QKV_OP_TAKES_) default: return 0; }
}
static inline QKV_HD int qkv_unop_takes (int op) {
  switch (op) { QKV_UNARY_OPS(QKV_OP_TAKES_) default: return 0; }
}
static inline QKV_HD int qkv_binop_result (int op) {
  switch (op) { QKV_BINARY_OPS(QKV_OP_RESULT_) default: return QKV_RESULT_SAME; }
}
static inline QKV_HD int qkv_unop_result (int op) {
  switch (op) { QKV_UNARY_OPS(QKV_OP_RESULT_) default: return QKV_RESULT_SAME; }
}

/*
** The dtype a backend's binary or unary op computes in, given out (t[0])
** and its operands (t[1] to t[nop - 1]); want: the op's result for a's
** dtype (bool for a comparison).  The operands' one dtype; or float32
** where they mix float32 and the halves, out float32, a half or the
** comparison's bool (the halves read as float32 and out rounded once: a
** backend with elementwise_halves, core/backend.h); -1 for any other mix,
** which the dispatch converts away first (the backend contract).
*/
static inline int qkv_op_compute_dtype (int nop, const qkv_tensor *const *t, qkv_dtype want) {
  qkv_dtype dt = t[1]->dtype;
  int same = t[0]->dtype == want;
  for (int k = 2; k < nop; k++) same &= t[k]->dtype == dt;
  if (same && !qkv_is_half(dt)) return dt;
  for (int k = 0; k < nop; k++) {
    qkv_dtype d = t[k]->dtype;
    if (d != QKV_F32 && !qkv_is_half(d) && !(k == 0 && d == QKV_BOOL && want == QKV_BOOL))
      return -1;
  }
  return (t[0]->dtype == QKV_BOOL) == (want == QKV_BOOL) ? QKV_F32 : -1;
}

/* whether kernels of an op that takes `takes` compute in dtype dt */
static inline QKV_HD int qkv_op_takes (int takes, qkv_dtype dt) {
  switch (dt) {
    case QKV_F32: case QKV_F64: return (takes & 1) != 0;
    case QKV_I64: return (takes & 2) != 0;
    case QKV_BOOL: return (takes & 4) != 0;
    default: return 0;
  }
}

/* operands of (promoted) dtype dt as an op that takes `takes` computes
   them: integers as float32 for a float op, bool as int64 for one that
   takes no bool (int32 and the halves stay: the dispatch computes them in
   int64 and float32) */
static inline QKV_HD qkv_dtype qkv_op_lifted (int takes, qkv_dtype dt) {
  int is_float = dt == QKV_F32 || dt == QKV_F64 || dt == QKV_F16 || dt == QKV_BF16;
  if (!(takes & 2) && !is_float) return QKV_F32;
  if (!(takes & 4) && dt == QKV_BOOL) return QKV_I64;
  return dt;
}

/* the dtype of the result: bool for a comparison, else the lifted one */
static inline QKV_HD qkv_dtype qkv_op_result (int takes, int result, qkv_dtype dt) {
  return result == QKV_RESULT_BOOL ? QKV_BOOL : qkv_op_lifted(takes, dt);
}

/*
** The dtype a Lua number operand of a binary op is given, the op's
** operands promoting to dt.  PyTorch keeps the number of mul and div with
** a half tensor in float32 (its "opmath"), so that the result is rounded
** to the half once (x * 1e5 is not inf, x / 1e5 not 0, 9 * 0.1 in
** bfloat16 is 0.9 rounded); the dispatch takes float32 with the halves.
** The other ops round the number to the half first, as PyTorch does.
*/
static inline qkv_dtype qkv_binop_number_dtype (int op, qkv_dtype dt) {
  return qkv_is_half(dt) && (op == QKV_MUL || op == QKV_DIV) ? QKV_F32 : dt;
}

/*
** The list as text: the CUDA plugin carries the text of the list it was
** built from (vm/cuda/elementwise.cu), and the loader refuses one that
** differs from its own, whose enums may number the ops otherwise.
*/
#define QKV_OP_TEXT_(...) (__VA_ARGS__)
#define QKV_OPS_STR_(...) #__VA_ARGS__
#define QKV_OPS_XSTR_(...) QKV_OPS_STR_(__VA_ARGS__)
#define QKV_OPS_LIST QKV_OPS_XSTR_(binary QKV_BINARY_OPS(QKV_OP_TEXT_) \
                                   unary QKV_UNARY_OPS(QKV_OP_TEXT_))

/* out = a op b; a and b broadcast to out; out's dtype as qkv_op_result
   says (vm/dispatch/ops.c; in place and overlaps: qkv.h) */
#ifdef __cplusplus
extern "C" {
#endif
int qkv_binary(qkv_binop op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b);
int qkv_unary(qkv_unop op, qkv_tensor *out, const qkv_tensor *a);
#ifdef __cplusplus
}
#endif

#endif
