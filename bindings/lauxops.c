/*
** lauxops.c -- the small ops that several parts of the bindings run:
** numbers as 0-d scalars and the fills made of them, masked fill, matmul
** with its shape rules, and the masks of attention (a mask broadcast to
** the scores, the fill where it is false, the causal mask).  It registers
** no Lua function of its own.
*/
#include <math.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"


/* scalars and fills */

const qkv_tensor *qkvL_scalar (qkvL_Scalar *sc, qkv_dtype dt) {
  sc->s.data = &sc->v;
  sc->s.nbytes = sizeof sc->v;
  sc->s.refcount = 1;
  sc->s.device = QKV_CPU;
  sc->s.pool = 0;
  sc->s.version = 0;
  memset(&sc->t, 0, sizeof sc->t);
  sc->t.dtype = dt;
  sc->t.storage = &sc->s;
  return &sc->t;
}

/* 2^63: the first double past int64's range (and -2^63 its least) */
#define TWO63 9223372036854775808.0

const qkv_tensor *qkvL_checkfill (lua_State *L, int arg, qkv_dtype dt,
                                  const char *name, qkvL_Scalar *sc) {
  int t = lua_type(L, arg);
  if (t != LUA_TNUMBER && t != LUA_TBOOLEAN) luaL_typeerror(L, arg, "number");
  double x = t == LUA_TBOOLEAN ? lua_toboolean(L, arg) : lua_tonumber(L, arg);
  int64_t i = 0;
  if (dt != QKV_I64 && dt != QKV_I32) {
    qkv_elem_set(dt, &sc->v, x);
    return qkvL_scalar(sc, dt);
  }
  int fits = lua_isinteger(L, arg) || (x >= -TWO63 && x < TWO63);
  if (fits) i = lua_isinteger(L, arg) ? (int64_t)lua_tointeger(L, arg) : (int64_t)x;
  if (!fits || (dt == QKV_I32 && (i < INT32_MIN || i > INT32_MAX)))
    luaL_error(L, "%s: %s does not fit in %s", name,
               x != x ? "nan" : lua_pushfstring(L, "%s", luaL_tolstring(L, arg, NULL)),
               qkv_dtype_name(dt));
  qkv_elem_seti(dt, &sc->v, i);            /* toward 0 for a float */
  return qkvL_scalar(sc, dt);
}

/*
** The kernels take the fill value as a double, which holds every float
** and bool value and every int64 up to 2^53; a larger int64 is written
** exactly as out = (out with 0 under the mask) + mask * value.
*/
void qkvL_masked_fill (lua_State *L, const char *name, qkv_tensor *out,
                       const qkv_tensor *mask, const qkv_tensor *val) {
  const qkvL_Scalar *sc = (const qkvL_Scalar *)val;
  double v = qkv_elem_get(val->dtype, &sc->v);
  int64_t i = sc->v.i;
  if (val->dtype != QKV_I64 || (i >= -((int64_t)1 << 53) && i <= (int64_t)1 << 53)) {
    qkvL_check(L, name, qkv_masked_fill(out, mask, v));
    return;
  }
  qkv_tensor *on = qkvL_newlike(L, mask, QKV_BOOL);
  qkv_tensor *add = qkvL_newlike(L, out, QKV_I64);
  qkvL_check(L, name, qkv_copy(on, mask));           /* nonzero: true */
  qkvL_check(L, name, qkv_masked_fill(out, on, 0));
  qkvL_check(L, name, qkv_binary(QKV_MUL, add, on, val));
  qkvL_check(L, name, qkv_binary(QKV_ADD, out, out, add));
  lua_pop(L, 2);
}


/* matmul */

static int matmul_error (lua_State *L, const qkv_tensor *a,
                         const qkv_tensor *b, const char *why) {
  const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
  return luaL_error(L, "matmul: %s @ %s: %s", sa, sb, why);
}

/* pushes a @ b (batched, broadcasting, 1-D operands as in PyTorch) */
qkv_tensor *qkvL_matmul_bias (lua_State *L, const char *name, const qkv_tensor *a,
                              const qkv_tensor *b, const qkv_tensor *bias, double alpha) {
  qkv_tensor x = *a, y = *b;
  if (a->ndim == 0 || b->ndim == 0)
    matmul_error(L, a, b, "both operands need at least 1 dim");
  const char *why = qkvL_matmul_dtypes(L, a->dtype, b->dtype);
  if (why) matmul_error(L, a, b, why);
  if (a->ndim == 1) qkv_view_unsqueeze(&x, a, 0);
  if (b->ndim == 1) qkv_view_unsqueeze(&y, b, 1);
  int64_t k1 = x.size[x.ndim - 1], k2 = y.size[y.ndim - 2];
  if (k1 != k2)
    matmul_error(L, a, b, lua_pushfstring(L, "inner dims %I and %I differ",
                 (lua_Integer)k1, (lua_Integer)k2));
  int n;
  int64_t size[QKV_MAXDIM + 2];
  if (qkv_broadcast_shape(x.ndim - 2, x.size, y.ndim - 2, y.size, &n, size) != 0)
    matmul_error(L, a, b, "batch dims do not broadcast");
  size[n] = x.size[x.ndim - 2];
  size[n + 1] = y.size[y.ndim - 1];
  qkv_tensor *out = qkvL_new(L, a->dtype, a->storage->device, n + 2, size, 0);
  qkvL_check(L, name, qkv_matmul_bias(out, &x, &y, bias, alpha));
  if (b->ndim == 1) qkv_view_select(out, out, out->ndim - 1, 0);
  if (a->ndim == 1) qkv_view_select(out, out, out->ndim - 1 - (b->ndim > 1), 0);
  return out;
}


/* masks, true (or non-zero) where a query may attend */

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

/* how many elements of m equal v (a scalar of m's dtype), read back */
static int64_t count_equal (lua_State *L, const char *name, const qkv_tensor *m,
                            double v) {
  qkvL_Scalar sc;
  int64_t one_size = 1;
  qkv_elem_set(m->dtype, &sc.v, v);
  qkv_tensor *eq = qkvL_newlike(L, m, QKV_BOOL);
  qkvL_check(L, name, qkv_binary(QKV_EQ, eq, m, qkvL_scalar(&sc, m->dtype)));
  qkv_tensor *n = qkvL_new(L, QKV_I64, m->storage->device, 0, &one_size, 0);
  qkvL_check(L, name, qkv_reduce(QKV_SUM, n, NULL, eq, -1));
  const qkv_tensor *h = qkvL_host(L, n, name);
  int64_t count = *(const int64_t *)qkv_data(h);
  lua_pop(L, h == n ? 2 : 3);
  return count;
}

/* the least or the largest element of m, read back as a double */
static double extreme (lua_State *L, const char *name, const qkv_tensor *m, int max) {
  int64_t one_size = 1;
  qkv_tensor *r = qkvL_new(L, m->dtype, m->storage->device, 0, &one_size, 0);
  qkvL_check(L, name, qkv_reduce(max ? QKV_MAX : QKV_MIN, r, NULL, m, -1));
  const qkv_tensor *h = qkvL_host(L, r, name);
  double v = qkv_elem_get(h->dtype, qkv_data(h));
  lua_pop(L, h == r ? 1 : 2);
  return v;
}

/*
** A mask of a float dtype must hold 0 and 1 alone, and some 1: PyTorch's
** float attn_mask is added to the scores (0 and -inf), and taking one for
** qkv's (non-zero = may attend) would attend exactly where it masks.  An
** all-0 float mask means "every key masked" to qkv and "none" to PyTorch.
*/
int qkvL_mask_problem (lua_State *L, const char *name, const qkv_tensor *m,
                       const char *instead) {
  int64_t numel = qkv_numel(m);
  if (!qkv_is_float(m->dtype) || numel == 0) return 0;
  int64_t ones = count_equal(L, name, m, 1), zeros = count_equal(L, name, m, 0);
  if (ones + zeros != numel) {
    double lo = extreme(L, name, m, 0), hi = extreme(L, name, m, 1);
    const char *sm = qkvL_shape(L, m);
    lua_pushfstring(L, "%s: mask is %s %s with values other than 0 and 1 (from %f to %f): "
                    "qkv's mask is true (or 1) where a query may attend, not added to the "
                    "scores; for PyTorch's additive mask (0 and -inf) %s", name, qkv_dtype_name(m->dtype), sm, lo, hi, instead);
    lua_remove(L, -2);
    return 1;
  }
  if (ones == 0) {
    const char *sm = qkvL_shape(L, m);
    lua_pushfstring(L, "%s: mask is %s %s and all 0: as qkv's mask (1 = may attend) it "
                    "masks every key, as PyTorch's additive mask none; pass a bool mask "
                    "(or none)", name, qkv_dtype_name(m->dtype), sm);
    lua_remove(L, -2);
    return 1;
  }
  return 0;
}

void qkvL_check_mask (lua_State *L, const char *name, const qkv_tensor *m,
                      const char *instead) {
  if (qkvL_mask_problem(L, name, m, instead)) lua_error(L);
}

/* -inf as a scalar of S's dtype, for the masks of attention's scores */
const qkv_tensor *qkvL_neg_inf (qkvL_Scalar *sc, qkv_dtype dt) {
  qkv_elem_set(dt, &sc->v, -INFINITY);
  return qkvL_scalar(sc, dt);
}

/*
** Made on dev by the backend (ones, then their triangle in place), not on
** the host and copied: query i keeps keys j <= i + offset, j - i <= offset,
** tril's triangle; the rest, j - i >= offset + 1, is triu's.
*/
qkv_tensor *qkvL_causal (lua_State *L, const char *name, int64_t nq, int64_t nk,
                         int64_t offset, int keep, qkv_device dev) {
  int64_t size[2] = {nq, nk};
  qkv_tensor *m = qkvL_new(L, QKV_BOOL, dev, 2, size, 0);
  qkvL_check(L, name, qkv_causal(m, offset, keep));
  return m;
}
