/*
** lmask.c -- the masks of attention: mask(S, m [, fill]) and the masks it
** takes, causal(n_q [, n_k]) and padding(lengths [, n]).  A mask is true
** (or non-zero) where a query may attend; its last two dims are (n_q, n_k)
** and it broadcasts against the scores.
*/
#include <math.h>
#include <string.h>

#include "lauxqkv.h"

/*
** The scores' shape (*n, size) as the mask m broadcasts it: m may add
** leading dims or widen size-1 batch dims (the result then has them, as
** with PyTorch's attn_mask), never change the last two, (n_q, n_k).
*/
void qkvL_mask_shape (lua_State *L, const char *name, const qkv_tensor *m,
                      int *n, int64_t *size) {
  int nb, keep = *n < 2 ? *n : 2;
  int64_t b[QKV_MAXDIM];
  int bad = qkv_broadcast_shape(*n, size, m->ndim, m->size, &nb, b);
  for (int i = 1; !bad && i <= keep; i++) bad = b[nb - i] != size[*n - i];
  if (bad) {
    char buf[200];
    const char *sm = qkvL_shape(L, m);
    luaL_error(L, "%s: mask of shape %s does not broadcast to the scores' shape %s",
               name, sm, qkv_shape_str(buf, sizeof buf, *n, size));
  }
  *n = nb;
  memcpy(size, b, sizeof(int64_t) * (size_t)nb);
}

/* in place: S gets `fill` (a scalar of S's dtype) where m (broadcast to S's
   shape by mask_shape) is false/0 */
void qkvL_fill_where_not (lua_State *L, const char *name, qkv_tensor *S,
                          const qkv_tensor *m, const qkv_tensor *fill) {
  qkv_tensor *off = qkvL_newlike(L, m, QKV_BOOL);
  qkvL_Scalar zero;
  zero.v.b = 0;
  qkvL_check(L, name, qkv_binary(QKV_EQ, off, m, qkvL_scalar(&zero, QKV_BOOL)));
  qkvL_masked_fill(L, name, S, off, fill);
  lua_pop(L, 1);
}

/* -inf as a scalar of S's dtype, for the masks of attention's scores */
const qkv_tensor *qkvL_neg_inf (qkvL_Scalar *sc, qkv_dtype dt) {
  qkv_elem_set(dt, &sc->v, -INFINITY);
  return qkvL_scalar(sc, dt);
}

static int a_mask (lua_State *L) {
  QKVL_GRAD(L, "mask", a_mask);
  qkv_tensor *S = qkvL_checktensor(L, 1), *m = qkvL_checktensor(L, 2);
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
** Rows of n bools, row b `first` for its first cut(b) items and !first for
** the rest, with a look at the interrupt flag every 64K bools (a mask of
** 2^31 x 2^31 could otherwise keep a Ctrl-C waiting for minutes).
*/
static void fill_rows (lua_State *L, const char *name, unsigned char *p,
                       int64_t rows, int64_t n, int first,
                       int64_t (*cut)(int64_t b, const void *ctx), const void *ctx) {
  int64_t left = 65536;
  if (n == 0) return;                    /* (p may be NULL) */
  for (int64_t b = 0; b < rows; b++, p += n) {
    int64_t c = cut(b, ctx);
    c = c < 0 ? 0 : c > n ? n : c;
    memset(p, first, (size_t)c);
    memset(p + c, !first, (size_t)(n - c));
    if ((left -= n + 1) <= 0) {
      if (qkv_interrupted) qkvL_check(L, name, QKV_EINTR);
      left = 65536;
    }
  }
}

/* query i sees keys j <= i + offset: the first i + offset + 1 */
static int64_t causal_cut (int64_t i, const void *ctx) {
  return i + *(const int64_t *)ctx + 1;
}

qkv_tensor *qkvL_causal (lua_State *L, const char *name, int64_t nq, int64_t nk,
                         int64_t offset, int keep, qkv_device dev) {
  int64_t size[2] = {nq, nk};
  qkv_tensor *m = qkvL_new(L, QKV_BOOL, QKV_CPU, 2, size, 0);
  fill_rows(L, name, (unsigned char *)qkv_data(m), nq, nk, keep, causal_cut, &offset);
  if (dev == QKV_CPU) return m;
  m = qkvL_todevice(L, m, dev, name);
  lua_remove(L, -2);
  return m;
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
  int64_t count = (int64_t)luaL_len(L, arg);
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

/* item b's first len[b] tokens are real (len[b] <= n, checked) */
static int64_t length_cut (int64_t b, const void *ctx) {
  return (int64_t)((const double *)ctx)[b];
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
  int64_t size[3] = {count, 1, n};
  qkv_tensor *m = qkvL_new(L, QKV_BOOL, QKV_CPU, 3, size, 0);
  unsigned char *p = (unsigned char *)qkv_data(m);
  len = (const double *)qkv_data(lt);       /* lt is on the stack below m */
  fill_rows(L, "padding", p, count, n, 1, length_cut, len);
  qkvL_todefault(L, "padding");
  return 1;
}

void qkvL_open_mask (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {
    {"mask", a_mask}, {"causal", a_causal}, {"padding", a_padding}, {NULL, NULL}
  };
  qkvL_register(L, methods, module, NULL, NULL, mod);
  (void)mt;
}
