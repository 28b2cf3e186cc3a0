/*
** lmath.c -- math on tensors: arithmetic with broadcasting and PyTorch's
** type promotion, elementwise functions, comparisons, reductions, matmul,
** masked_fill, cat and stack.
*/
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"

/* an integer dtype's number through qkvL_checkfill, whose range check
   makes one an int32 cannot hold an error (docs/tensors.md: it was
   clamped, so x:eq(2^31) was true at 2^31 - 1) */
static const qkv_tensor *make_scalar (lua_State *L, const char *name, qkvL_Scalar *sc, int arg,
                                      qkv_dtype dt) {
  if (dt == QKV_I64 || dt == QKV_I32) return qkvL_checkfill(L, arg, dt, name, sc);
  if (lua_type(L, arg) == LUA_TBOOLEAN) qkv_elem_seti(dt, &sc->v, lua_toboolean(L, arg));
  else if (lua_isinteger(L, arg)) qkv_elem_seti(dt, &sc->v, (int64_t)lua_tointeger(L, arg));
  else qkv_elem_set(dt, &sc->v, lua_tonumber(L, arg));
  return qkvL_scalar(sc, dt);
}

/* PyTorch's rule for a tensor with a Lua number: the number is "weak" and
   only lifts an integral tensor to float32 when it is a float itself */
static qkv_dtype weak_dtype (lua_State *L, const qkv_tensor *t, int arg) {
  if (qkv_is_float(t->dtype)) return t->dtype;
  if (lua_type(L, arg) == LUA_TBOOLEAN) return t->dtype;
  if (!lua_isinteger(L, arg)) return QKV_F32;
  return t->dtype == QKV_BOOL ? QKV_I64 : t->dtype;     /* int32 stays int32 */
}

static int is_scalar_arg (lua_State *L, int arg) {
  int t = lua_type(L, arg);
  return t == LUA_TNUMBER || t == LUA_TBOOLEAN;
}

/* a tensor at arg, NULL for anything else; a closed tensor is an error */
static qkv_tensor *opttensor (lua_State *L, int arg) {
  return qkvL_istensor(L, arg) ? qkvL_checktensor(L, arg) : NULL;
}

/*
** The two operands of op as tensors, a number becoming a 0-d scalar in
** `sc` (of the dtype qkv_binop_number_dtype gives); *common is their
** promoted dtype and *dev the device of the result.
*/
static void operands (lua_State *L, qkv_binop op, const char *name, const qkv_tensor **a,
                      const qkv_tensor **b, qkvL_Scalar *sc, qkv_dtype *common,
                      qkv_device *dev) {
  qkv_tensor *x = opttensor(L, 1), *y = opttensor(L, 2);
  if (x && y) {
    *a = x; *b = y;
    *common = qkv_promote_dims(x->dtype, x->ndim == 0, y->dtype, y->ndim == 0);
    *dev = x->storage->device;
    return;
  }
  if (!x && !y) luaL_typeerror(L, is_scalar_arg(L, 1) ? 2 : 1, QKV_TENSOR);
  int sarg = x ? 2 : 1;
  if (!is_scalar_arg(L, sarg))
    luaL_error(L, "%s: expected a tensor or a number, got %s", name,
               luaL_typename(L, sarg));
  const qkv_tensor *t = x ? x : y;
  *common = weak_dtype(L, t, sarg);
  *dev = t->storage->device;
  /* PyTorch's: an integral tensor to a negative integer number's power is
     an error (it gave 2 ^ -1 = 0); a tensor of exponents computes */
  if (op == QKV_POW && x && lua_isinteger(L, 2) && lua_tointeger(L, 2) < 0 &&
      (*common == QKV_I64 || *common == QKV_I32))
    luaL_error(L, "%s: integers to negative integer powers are not allowed (x is %s; "
               "x:double() ^ n for a float)", name, qkv_dtype_name(t->dtype));
  const qkv_tensor *s = make_scalar(L, name, sc, sarg, qkv_binop_number_dtype(op, *common));
  *a = x ? t : s;
  *b = x ? s : t;
}

static qkv_tensor *broadcast_out (lua_State *L, const char *name,
                                  const qkv_tensor *a, const qkv_tensor *b,
                                  qkv_dtype dt, qkv_device dev) {
  int n;
  int64_t size[QKV_MAXDIM];
  if (qkv_broadcast_shape(a->ndim, a->size, b->ndim, b->size, &n, size) != 0) {
    const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
    luaL_error(L, "%s: shapes %s and %s do not broadcast", name, sa, sb);
  }
  return qkvL_new(L, dt, dev, n, size, 0);
}

/* the result's dtype is the row's (vm/common/ops.h): bool for a
   comparison, else the promoted one lifted to a dtype the op takes (bools
   count as int64 in arithmetic, integers divide as floats) */
static int binary (lua_State *L, qkv_binop op, const char *name) {
  const qkv_tensor *a, *b;
  qkvL_Scalar sc;
  qkv_dtype dt;
  qkv_device dev;
  operands(L, op, name, &a, &b, &sc, &dt, &dev);
  dt = qkv_op_result(qkv_binop_takes(op), qkv_binop_result(op), dt);
  qkv_tensor *out = broadcast_out(L, name, a, b, dt, dev);
  qkvL_check(L, name, qkv_binary(op, out, a, b));
  return 1;
}

static int unary (lua_State *L, qkv_unop op, const char *name) {
  qkvL_noextra(L, name, 1);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  qkv_dtype dt = qkv_op_result(qkv_unop_takes(op), qkv_unop_result(op), t->dtype);
  qkv_tensor *out = qkvL_newlike(L, t, dt);
  qkvL_check(L, name, qkv_unary(op, out, t));
  return 1;
}

/* the second operand's keyword: PyTorch's name for it */
static const char *const *operand_kw (qkv_binop op) {
  static const char *const exponent[] = {"exponent", NULL};
  return op == QKV_POW ? exponent : qkvL_KW_OTHER;
}

/*
** A function per PUBLIC row of the list, m_<name>: a differentiable op
** (GRAD) first asks autograd (QKVL_GRAD), which runs its rule
** (stdlib/qkv/derivatives.lua) when an argument takes part in a graph.
*/
#define GRAD_GRAD(name, fn) QKVL_GRAD(L, #name, fn)
#define GRAD_NOGRAD(name, fn) (void)0
#define BIND_PRIVATE(...)
#define BIND2_PUBLIC(NAME, name, grad) \
  static int m_##name (lua_State *L) { \
    qkvL_args(L, #name, operand_kw(QKV_##NAME)); \
    GRAD_##grad(name, m_##name); \
    return binary(L, QKV_##NAME, #name); \
  }
#define BIND1_PUBLIC(NAME, name, grad) \
  static int m_##name (lua_State *L) { \
    qkvL_noextra(L, #name, 1);  /* before autograd, whose rule takes x alone */ \
    GRAD_##grad(name, m_##name); \
    return unary(L, QKV_##NAME, #name); \
  }
#define BIND2(NAME, name, takes, result, grad, api) BIND2_##api(NAME, name, grad)
#define BIND1(NAME, name, takes, result, grad, api) BIND1_##api(NAME, name, grad)
#define BIND2_PRIVATE BIND_PRIVATE
#define BIND1_PRIVATE BIND_PRIVATE
QKV_BINARY_OPS(BIND2)
QKV_UNARY_OPS(BIND1)

#define REG_PUBLIC(name) {#name, m_##name},
#define REG_PRIVATE(name)
#define REG(NAME, name, takes, result, grad, api) REG_##api(name)

/* qkv._ops() -> {{name =, arity =, takes =, result =, grad =, public =}, ...}:
   the list, for the suites that loop over it (tests/backends/test_isa.lua,
   test_ops.lua, test_cuda.lua, the fuzzer, gradcheck) */
static int m_ops (lua_State *L) {
  static const char *const takes[] = {"", "float", "", "number", "", "", "", "any"};
#define ROW(N, NAME, name, takes_, result, grad, api) \
  {#name, N, QKV_TAKES_##takes_, QKV_RESULT_##result, QKV_GRAD_##grad, QKV_API_##api},
#define ROW1(...) ROW(1, __VA_ARGS__)
#define ROW2(...) ROW(2, __VA_ARGS__)
  static const struct { const char *name; int arity, takes, result, grad, pub; } rows[] = {
    QKV_BINARY_OPS(ROW2) QKV_UNARY_OPS(ROW1)
  };
  lua_createtable(L, (int)(sizeof rows / sizeof rows[0]), 0);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    lua_createtable(L, 0, 6);
    lua_pushstring(L, rows[i].name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, rows[i].arity);
    lua_setfield(L, -2, "arity");
    lua_pushstring(L, takes[rows[i].takes]);
    lua_setfield(L, -2, "takes");
    lua_pushstring(L, rows[i].result == QKV_RESULT_BOOL ? "bool" : "same");
    lua_setfield(L, -2, "result");
    lua_pushboolean(L, rows[i].grad);
    lua_setfield(L, -2, "grad");
    lua_pushboolean(L, rows[i].pub);
    lua_setfield(L, -2, "public");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* the metamethods take the operands in either order */
static int m_unm (lua_State *L) { lua_settop(L, 1); return m_neg(L); }


/* reductions */

static const char *const rednames[] = {
  "sum", "mean", "max", "min", "var", "std", "argmax", "argmin"
};

static qkv_dtype reduce_dtype (qkv_redop op, qkv_dtype in) {
  switch (op) {
    case QKV_SUM: return in == QKV_BOOL || in == QKV_I32 ? QKV_I64 : in;  /* as PyTorch */
    case QKV_MEAN: case QKV_VAR: case QKV_STD:
      return qkv_is_float(in) ? in : QKV_F32;
    case QKV_ARGMAX: case QKV_ARGMIN: return QKV_I64;
    default: return in;
  }
}

/* positions come back 0-based from the vm; Lua counts from 1 */
static void to_lua_index (lua_State *L, const char *name, qkv_tensor *idx) {
  qkvL_Scalar one;
  one.v.i = 1;
  qkvL_check(L, name, qkv_binary(QKV_ADD, idx, idx, qkvL_scalar(&one, QKV_I64)));
}

/* var and std's correction, argument 4: PyTorch's 1 unless given */
static double correction (lua_State *L, const char *name) {
  if (lua_isnoneornil(L, 4)) return 1;
  if (lua_type(L, 4) != LUA_TNUMBER || lua_tonumber(L, 4) != lua_tonumber(L, 4))
    luaL_error(L, "%s: correction must be a number, got %s", name,
               lua_type(L, 4) == LUA_TNUMBER ? "nan" : luaL_typename(L, 4));
  return lua_tonumber(L, 4);
}

/* x:sum() reduces all to a 0-d tensor; x:sum(dim [, keepdim]) one dim;
   var and std divide by max(0, n - correction) in the vm's kernel, whose
   moments are in double, so that the result is rounded once */
static int reduce (lua_State *L, qkv_redop op) {
  const char *name = rednames[op];
  qkv_tensor *t = qkvL_checktensor(L, 1);
  int arg = (op == QKV_MAX || op == QKV_MIN) && qkvL_totensor(L, 2);
  if (arg) return binary(L, op == QKV_MAX ? QKV_MAXIMUM : QKV_MINIMUM, name);
  int all = lua_isnoneornil(L, 2), dim = all ? -1 : qkvL_checkdim0(L, 2, t->ndim);
  int keep = lua_toboolean(L, 3), picks = op == QKV_MAX || op == QKV_MIN ||
             op == QKV_ARGMAX || op == QKV_ARGMIN;
  int moments = op == QKV_VAR || op == QKV_STD;
  double c = moments ? correction(L, name) : 1;
  qkv_tensor one;                /* a 0-d t along its dim: as (1,), to a 0-d result */
  if (!all && t->ndim == 0) {
    t = qkvL_one_dim(&one, t);
    keep = 0;
  }
  if (picks && (all ? qkv_numel(t) == 0 : t->size[dim] == 0)) {
    qkvL_shape(L, t);
    return luaL_error(L, "%s: cannot reduce an empty dim of a tensor of shape %s",
                      name, lua_tostring(L, -1));
  }
  int64_t size[QKV_MAXDIM];
  int n = 0;
  for (int i = 0; !all && i < t->ndim; i++)
    if (i != dim) size[n++] = t->size[i];
    else if (keep) size[n++] = 1;
  qkv_tensor *out = qkvL_new(L, reduce_dtype(op, t->dtype), t->storage->device,
                             n, size, 0), *idx = NULL;
  if (op == QKV_ARGMAX || op == QKV_ARGMIN) idx = out;
  else if (picks && !all) idx = qkvL_new(L, QKV_I64, t->storage->device, n, size, 0);
  qkvL_check(L, name, moments ? qkv_reduce_moments(op, out, t, dim, c)
                               : qkv_reduce(op, out, idx, t, dim));
  if (idx) to_lua_index(L, name, idx);
  return idx && idx != out ? 2 : 1;
}

/*
** sum's and cumsum's dtype= is the result's dtype, as PyTorch's: an int32
** (or bool) x summed in int64 goes back into it, int32 wrapping as
** PyTorch's int32 sum does (x:sum{dtype = "int32"} of {2^31 - 1, 1} is
** -2^31, not the int64 2^31), bool being nonzero.  The result is at the
** top of the stack; want is qkvL_keywords' answer (-1: none given).
*/
static void as_dtype (lua_State *L, const char *name, int want) {
  qkv_tensor *r = qkvL_checktensor(L, -1);
  if (want < 0 || r->dtype == (qkv_dtype)want) return;
  qkv_tensor *out = qkvL_newlike(L, r, (qkv_dtype)want);
  qkvL_check(L, name, qkv_copy(out, r));
  lua_remove(L, -2);
}

/* x:cumsum(dim): running sums along dim, x's shape; integer and bool x
   give int64 (as torch.cumsum), unless dtype= says */
static int m_cumsum (lua_State *L) {
  int want = qkvL_keywords(L, "cumsum", 2, qkvL_KW_DIM, 1);
  qkvL_noextra(L, "cumsum", 2);         /* x:cumsum(dim, "float64"): dtype is the option */
  QKVL_GRAD(L, "cumsum", m_cumsum);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  int dim = qkvL_checkdim0(L, 2, t->ndim);
  qkv_tensor *out = qkvL_newlike(L, t, qkv_is_float(t->dtype) ? t->dtype : QKV_I64);
  qkvL_check(L, "cumsum", qkv_cumsum(out, t, dim));
  as_dtype(L, "cumsum", want);
  return 1;
}

static int m_sum (lua_State *L) {
  int want = qkvL_keywords(L, "sum", 2, qkvL_KW_REDUCE, 1);
  qkvL_noextra(L, "sum", 3);            /* x:sum(dim, keep, "float64"): likewise */
  QKVL_GRAD(L, "sum", m_sum);
  int n = reduce(L, QKV_SUM);
  as_dtype(L, "sum", want);
  return n;
}
static int m_mean (lua_State *L) {
  qkvL_keywords(L, "mean", 2, qkvL_KW_REDUCE, 2);
  qkvL_noextra(L, "mean", 3);
  QKVL_GRAD(L, "mean", m_mean);
  return reduce(L, QKV_MEAN);
}
static int m_max (lua_State *L) {
  qkvL_keywords(L, "max", 2, qkvL_KW_REDUCE, 0);
  qkvL_noextra(L, "max", 3);
  QKVL_GRAD(L, "max", m_max);
  return reduce(L, QKV_MAX);
}
static int m_min (lua_State *L) {
  qkvL_keywords(L, "min", 2, qkvL_KW_REDUCE, 0);
  qkvL_noextra(L, "min", 3);
  QKVL_GRAD(L, "min", m_min);
  return reduce(L, QKV_MIN);
}
/* var and std's keywords: PyTorch's correction after dim and keepdim */
static const char *const KW_VAR[] = {"dim", "keepdim", "correction", NULL};

static int m_var (lua_State *L) {
  qkvL_keywords(L, "var", 2, KW_VAR, 0);
  qkvL_noextra(L, "var", 4);
  QKVL_GRAD(L, "var", m_var);
  return reduce(L, QKV_VAR);
}
static int m_std (lua_State *L) {
  qkvL_keywords(L, "std", 2, KW_VAR, 0);
  qkvL_noextra(L, "std", 4);
  QKVL_GRAD(L, "std", m_std);
  return reduce(L, QKV_STD);
}
static int m_argmax (lua_State *L) {
  qkvL_keywords(L, "argmax", 2, qkvL_KW_REDUCE, 0);
  qkvL_noextra(L, "argmax", 3);
  return reduce(L, QKV_ARGMAX);
}
static int m_argmin (lua_State *L) {
  qkvL_keywords(L, "argmin", 2, qkvL_KW_REDUCE, 0);
  qkvL_noextra(L, "argmin", 3);
  return reduce(L, QKV_ARGMIN);
}


/* matmul */

static int m_matmul (lua_State *L) {
  qkvL_args(L, "matmul", qkvL_KW_OTHER);
  QKVL_GRAD(L, "matmul", m_matmul);
  qkvL_matmul(L, "matmul", qkvL_checktensor(L, 1), qkvL_checktensor(L, 2), 1);
  return 1;
}


/* masked_fill, cat, stack */

static int m_masked_fill (lua_State *L) {
  static const char *const kw[] = {"mask", "value", NULL};
  qkvL_args(L, "masked_fill", kw);
  QKVL_GRAD(L, "masked_fill", m_masked_fill);
  qkv_tensor *t = qkvL_checktensor(L, 1), *m = qkvL_checktensor(L, 2), e;
  if (!is_scalar_arg(L, 3)) luaL_typeerror(L, 3, "number");
  if (qkv_expand(&e, m, t->ndim, t->size) != 0) {
    const char *sm = qkvL_shape(L, m), *st = qkvL_shape(L, t);
    return luaL_error(L, "masked_fill: mask of shape %s does not broadcast to "
                      "the tensor's shape %s", sm, st);
  }
  qkvL_Scalar sc;
  const qkv_tensor *v = qkvL_checkfill(L, 3, t->dtype, "masked_fill", &sc);
  qkv_tensor *out = qkvL_newlike(L, t, t->dtype);
  qkvL_check(L, "masked_fill", qkv_copy(out, t));
  qkvL_masked_fill(L, "masked_fill", out, m, v);
  return 1;
}

/*
** The tensors of the list at index 1; returns their count.  The items are
** read first into a plain table of our own, pushed on the stack, which
** keeps them alive: the list's metamethods run during that copy only, so
** whatever they close or drop is seen when the copies are checked.
*/
static int checklist (lua_State *L, const char *name, qkv_tensor **ts, int max) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);                     /* the dim stays at 2, nil or not */
  lua_Integer len = qkvL_checklist(L, 1, name, "the list of tensors", NULL);
  if (len < 1) luaL_error(L, "%s: expected a non-empty list of tensors", name);
  if (len > max) luaL_error(L, "%s: more than %d tensors", name, max);
  int n = (int)len;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    lua_rawseti(L, -2, i + 1);
  }
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, -1, i + 1);
    ts[i] = qkvL_totensor(L, -1);
    if (ts[i] == NULL)
      luaL_error(L, "%s: item %d of the list is a %s, not a tensor", name, i + 1,
                 qkvL_istensor(L, -1) ? "closed tensor" : luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return n;
}

#define MAXLIST 1024

static int m_cat (lua_State *L) {
  qkvL_keywords(L, "cat", 2, qkvL_KW_DIM, 0);
  QKVL_GRAD(L, "cat", m_cat);
  qkv_tensor *ts[MAXLIST], *out, v;
  int n = checklist(L, "cat", ts, MAXLIST);
  for (int i = 0; i < n; i++)           /* (dim 1 of no dims wrote one element n times) */
    if (ts[i]->ndim == 0)
      return luaL_error(L, "cat: tensor %d is 0-d, and a zero-dimensional tensor cannot be "
                        "concatenated (qkv.stack makes a 1-D tensor of them)", i + 1);
  int d = qkvL_optdim(L, 2, ts[0]->ndim, 0);
  int64_t size[QKV_MAXDIM], total = 0;
  qkv_dtype dt = ts[0]->dtype;
  for (int i = 0; i < n; i++) {
    int same = ts[i]->ndim == ts[0]->ndim;
    for (int k = 0; same && k < ts[0]->ndim; k++)
      same = k == d || ts[i]->size[k] == ts[0]->size[k];
    if (!same) {
      const char *s0 = qkvL_shape(L, ts[0]), *si = qkvL_shape(L, ts[i]);
      return luaL_error(L, "cat: tensor 1 is %s but tensor %d is %s: sizes "
                        "must match except in dim %d", s0, i + 1, si, d + 1);
    }
    total += ts[i]->size[d];
    dt = qkv_promote(dt, ts[i]->dtype);
  }
  memcpy(size, ts[0]->size, sizeof size);
  size[d] = total;
  out = qkvL_new(L, dt, ts[0]->storage->device, ts[0]->ndim, size, 0);
  total = 0;
  for (int i = 0; i < n; total += ts[i]->size[d], i++) {
    qkv_view_narrow(&v, out, d, total, ts[i]->size[d]);
    qkvL_check(L, "cat", qkv_copy(&v, ts[i]));
  }
  return 1;
}

static int m_stack (lua_State *L) {
  qkvL_keywords(L, "stack", 2, qkvL_KW_DIM, 0);
  QKVL_GRAD(L, "stack", m_stack);
  qkv_tensor *ts[MAXLIST], *out, v;
  int n = checklist(L, "stack", ts, MAXLIST);
  int d = lua_isnoneornil(L, 2) ? 0 : qkvL_checkdim(L, 2, ts[0]->ndim, 1);
  int64_t size[QKV_MAXDIM];
  qkv_dtype dt = ts[0]->dtype;
  if (ts[0]->ndim == QKV_MAXDIM) return luaL_error(L, "stack: more than 8 dims");
  for (int i = 0; i < n; i++) {
    if (ts[i]->ndim != ts[0]->ndim || memcmp(ts[i]->size, ts[0]->size,
        sizeof(int64_t) * (size_t)ts[0]->ndim) != 0) {
      const char *s0 = qkvL_shape(L, ts[0]), *si = qkvL_shape(L, ts[i]);
      return luaL_error(L, "stack: tensor 1 is %s but tensor %d is %s: "
                        "shapes must be equal", s0, i + 1, si);
    }
    dt = qkv_promote(dt, ts[i]->dtype);
  }
  for (int k = 0, j = 0; k <= ts[0]->ndim; k++)
    size[k] = k == d ? n : ts[0]->size[j++];
  out = qkvL_new(L, dt, ts[0]->storage->device, ts[0]->ndim + 1, size, 0);
  for (int i = 0; i < n; i++) {
    qkv_view_select(&v, out, d, i);
    qkvL_check(L, "stack", qkv_copy(&v, ts[i]));
  }
  return 1;
}

void qkvL_open_math (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg both[] = {
    QKV_BINARY_OPS(REG) QKV_UNARY_OPS(REG)
    {"sum", m_sum}, {"cumsum", m_cumsum},
    {"mean", m_mean}, {"max", m_max}, {"min", m_min}, {"var", m_var},
    {"std", m_std}, {"argmax", m_argmax}, {"argmin", m_argmin},
    {"matmul", m_matmul}, {"masked_fill", m_masked_fill}, {NULL, NULL}
  };
  static const luaL_Reg meta[] = {
    {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div},
    {"__pow", m_pow}, {"__unm", m_unm}, {NULL, NULL}
  };
  static const luaL_Reg mod[] = {{"cat", m_cat}, {"stack", m_stack}, {"_ops", m_ops},
                                 {NULL, NULL}};
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, both, 0);
  lua_pushvalue(L, module);
  luaL_setfuncs(L, both, 0);
  luaL_setfuncs(L, mod, 0);
  lua_pushvalue(L, mt);
  luaL_setfuncs(L, meta, 0);
  lua_pop(L, 3);
}
