/*
** lmask.c -- the masks of attention: mask(S, m [, fill]) and the masks it
** takes, causal(n_q [, n_k]) and padding(lengths [, n]).  A mask is true
** (or non-zero; 0 and 1 alone in a float dtype) where a query may attend;
** its last two dims are (n_q, n_k) and it broadcasts against the scores.
*/
#include <math.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"

static int a_mask (lua_State *L) {
  QKVL_GRAD(L, "mask", a_mask);
  qkv_tensor *S = qkvL_checktensor(L, 1), *m = qkvL_checktensor(L, 2);
  qkvL_check_mask(L, "mask", m, "pass m:eq(0), or add it to the scores: S + m");
  qkvL_Scalar sc;
  const qkv_tensor *fill;
  if (lua_isnoneornil(L, 3) && qkv_is_float(S->dtype)) fill = qkvL_neg_inf(&sc, S->dtype);
  else {
    lua_settop(L, 3);        /* the default -inf, checked as a given fill */
    if (lua_isnil(L, 3)) lua_pushnumber(L, -INFINITY), lua_replace(L, 3);
    fill = qkvL_checkfill(L, 3, S->dtype, "mask", &sc);
  }
  int n = S->ndim;
  int64_t size[QKV_MAXDIM];
  qkv_tensor Se;
  memcpy(size, S->size, sizeof size);
  qkvL_mask_shape(L, "mask", m, &n, size);
  qkv_expand(&Se, S, n, size);
  qkv_tensor *out = qkvL_new(L, S->dtype, S->storage->device, n, size, 0);
  qkvL_check(L, "mask", qkv_copy(out, &Se));
  qkvL_fill_where_not(L, "mask", out, m, fill);
  return 1;
}

/*
** qkv._keep_mask(m, name) -> m as a bool mask (true = may attend), or nil
** and the error qkv.attention would raise, naming `name`: for functions
** written in Lua that take qkv's masks and decide together when to raise
** (the ranks of qkv.dist's attention).  A float m must hold 0 and 1 alone
** (not PyTorch's additive mask), and not 0 alone.
*/
static int a_keep_mask (lua_State *L) {
  qkv_tensor *m = qkvL_checktensor(L, 1);
  const char *name = luaL_checkstring(L, 2);
  if (m->dtype == QKV_BOOL) { lua_settop(L, 1); return 1; }
  if (qkvL_mask_problem(L, name, m, "pass mask = m:eq(0)")) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  qkvL_Scalar zero;
  zero.v.b = 0;
  qkv_tensor *keep = qkvL_newlike(L, m, QKV_BOOL);
  qkvL_check(L, name, qkv_binary(QKV_NE, keep, m, qkvL_scalar(&zero, QKV_BOOL)));
  return 1;
}

static int64_t checkcount (lua_State *L, int arg) {
  lua_Integer n = luaL_checkinteger(L, arg);
  luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 31), arg,
                "a non-negative length is expected");
  return (int64_t)n;
}

static int a_causal (lua_State *L) {
  int64_t nq = checkcount(L, 1);
  int64_t nk = lua_isnoneornil(L, 2) ? nq : checkcount(L, 2);
  qkvL_causal(L, "causal", nq, nk, nk - nq, 1, qkvL_default_device());
  return 1;
}

/*
** The lengths at arg, a table or a 1-D tensor, as a float64 tensor pushed
** on the stack: read once, so a table whose metamethods change their
** answers cannot make the mask disagree with the checks.
*/
static qkv_tensor *read_lengths (lua_State *L, int arg) {
  qkv_tensor *t = qkvL_totensor(L, arg), *out;
  if (t) {
    if (t->ndim != 1) luaL_error(L, "padding: lengths must be 1-D");
    const qkv_tensor *h = qkvL_host(L, t, "padding");
    out = qkvL_new(L, QKV_F64, QKV_CPU, 1, t->size, 0);
    qkvL_check(L, "padding", qkv_copy(out, h));
    if (h != t) lua_remove(L, -2);
    return out;
  }
  luaL_checktype(L, arg, LUA_TTABLE);
  int64_t count = (int64_t)qkvL_checklist(L, arg, "padding", "the lengths", NULL);
  if (count < 0) luaL_error(L, "padding: the table's length is negative");
  out = qkvL_new(L, QKV_F64, QKV_CPU, 1, &count, 0);
  for (int64_t b = 0; b < count; b++) {
    if (qkv_interrupted) qkvL_check(L, "padding", QKV_EINTR);
    lua_geti(L, arg, (lua_Integer)b + 1);
    int ok;
    lua_Integer len = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    ((double *)qkv_data(out))[b] = ok ? (double)len : -1;
  }
  return out;
}

/*
** bool (#lt, 1, n) on dev, made there by the backend: token j (1-based) of
** item b is real where j <= lt[b], the positions 1..n being the running
** sums of ones.  Only the lengths cross from the host; pushed.
*/
static qkv_tensor *positions_within (lua_State *L, const qkv_tensor *lt, int64_t n,
                                     qkv_device dev) {
  int64_t size[3] = {lt->size[0], 1, n};
  qkv_tensor len = *(dev == QKV_CPU ? lt : qkvL_todevice(L, lt, dev, "padding"));
  qkv_tensor *ones = qkvL_new(L, QKV_F64, dev, 1, &n, 0);
  qkv_tensor *pos = qkvL_new(L, QKV_F64, dev, 1, &n, 0);
  qkvL_check(L, "padding", qkv_fill(ones, 1));
  qkvL_check(L, "padding", qkv_cumsum(pos, ones, 0));
  qkv_view_unsqueeze(&len, &len, 1);
  qkv_view_unsqueeze(&len, &len, 2);
  qkv_tensor *m = qkvL_new(L, QKV_BOOL, dev, 3, size, 0);
  qkvL_check(L, "padding", qkv_binary(QKV_LE, m, pos, &len));
  return m;
}

/* padding(lengths [, n]): bool (#lengths, 1, n), true for real tokens;
   n defaults to the longest length */
static int a_padding (lua_State *L) {
  lua_Integer want = lua_isnoneornil(L, 2) ? -1 : (lua_Integer)checkcount(L, 2);
  qkv_tensor *lt = read_lengths(L, 1);
  int64_t count = lt->size[0], n = 0;
  const double *len = (const double *)qkv_data(lt);
  for (int64_t b = 0; b < count; b++) {
    if (!(len[b] >= 0 && len[b] == floor(len[b]) && len[b] < 9e18))
      return luaL_error(L, "padding: length %I is not a non-negative integer",
                        (lua_Integer)b + 1);
    if (want >= 0 && len[b] > (double)want)
      return luaL_error(L, "padding: length %I of item %I exceeds n = %I",
                        (lua_Integer)len[b], (lua_Integer)b + 1, want);
    if (len[b] > (double)n) n = (int64_t)len[b];
  }
  if (want >= 0) n = want;
  positions_within(L, lt, n, qkvL_default_device());
  return 1;
}

void qkvL_open_mask (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {
    {"mask", a_mask}, {"causal", a_causal}, {"padding", a_padding},
    {"_keep_mask", a_keep_mask}, {NULL, NULL}
  };
  qkvL_register(L, methods, module, NULL, NULL, mod);
  (void)mt;
}
