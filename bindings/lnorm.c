/*
** lnorm.c -- the layers' functions: log_softmax, layer_norm, rms_norm and
** dropout (qkv.nn's LayerNorm, RMSNorm and Dropout call them).
*/
#include <float.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"

static void check_float (lua_State *L, const char *name, const qkv_tensor *x) {
  if (!qkv_is_float(x->dtype))
    luaL_error(L, "%s: x must be float32 or float64, got %s", name, qkv_dtype_name(x->dtype));
}

/* qkv.log_softmax(x [, dim]) / x:log_softmax([dim]) */
static int n_log_softmax (lua_State *L) {
  qkvL_keywords(L, "log_softmax", 2, qkvL_KW_DIM, 2);
  qkvL_noextra(L, "log_softmax", 2);      /* x:log_softmax(dim, "float64") is dtype's option */
  QKVL_GRAD(L, "log_softmax", n_log_softmax);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  int dim = qkvL_optdim0(L, 2, x->ndim, x->ndim ? x->ndim - 1 : 0);
  qkv_tensor *out = qkvL_newlike(L, x, qkv_is_float(x->dtype) ? x->dtype : QKV_F32);
  qkvL_check(L, "log_softmax", qkv_log_softmax(out, x, dim));
  return 1;
}

/* normalized_shape at arg: a size or a table of sizes, read raw (no
   metamethod runs) into size; returns how many; errors name fname */
static int read_normalized (lua_State *L, const char *fname, int arg, int64_t *size) {
  if (lua_isinteger(L, arg)) {
    size[0] = (int64_t)lua_tointeger(L, arg);
    return 1;
  }
  if (!lua_istable(L, arg))
    luaL_error(L, "%s: normalized_shape must be a size or a table of sizes, got %s",
               fname, luaL_typename(L, arg));
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  if (qkvL_testlist(L, arg, fname, "normalized_shape", n, NULL))
    luaL_error(L, "%s", lua_tostring(L, -1));
  if (n < 1 || n > QKV_MAXDIM)
    luaL_error(L, "%s: normalized_shape must hold 1 to 8 sizes, got %I", fname, n);
  for (lua_Integer i = 1; i <= n; i++) {
    int ok;
    lua_rawgeti(L, arg, i);
    size[i - 1] = (int64_t)lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) luaL_error(L, "%s: normalized_shape item %I is not an integer", fname, i);
  }
  return (int)n;
}

/* w or b at arg: nil, or a tensor of exactly the normalized shape */
static qkv_tensor *affine (lua_State *L, const char *fname, int arg, const char *what, int n,
                           const int64_t *size) {
  if (lua_isnoneornil(L, arg)) return NULL;
  qkv_tensor *t = qkvL_checktensor(L, arg);
  if (t->ndim != n || memcmp(t->size, size, sizeof(int64_t) * (size_t)n) != 0) {
    char buf[200];
    const char *s = qkvL_shape(L, t);
    luaL_error(L, "%s: %s is %s but normalized_shape is %s", fname, what, s,
               qkv_shape_str(buf, sizeof buf, n, size));
  }
  return t;
}

/* x at 1 (a float tensor) and normalized_shape at 2 (its last dims),
   read into size; returns how many dims; errors name fname */
static int normalized (lua_State *L, const char *fname, int64_t *size) {
  int n = read_normalized(L, fname, 2, size);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  check_float(L, fname, x);
  int fits = n <= x->ndim;
  for (int i = 0; fits && i < n; i++) fits = size[i] == x->size[x->ndim - n + i];
  if (!fits) {
    char buf[200];
    const char *s = qkvL_shape(L, x);
    luaL_error(L, "%s: normalized_shape %s is not the last dims of x %s", fname,
               qkv_shape_str(buf, sizeof buf, n, size), s);
  }
  return n;
}

/* qkv.layer_norm(x, normalized_shape [, w [, b [, eps]]]) */
static int n_layer_norm (lua_State *L) {
  static const char *const kw[] = {"normalized_shape", "weight", "bias", "eps", NULL};
  qkvL_args(L, "layer_norm", kw);
  QKVL_GRAD(L, "layer_norm", n_layer_norm);
  int64_t size[QKV_MAXDIM];
  int n = normalized(L, "layer_norm", size);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  qkv_tensor *w = affine(L, "layer_norm", 3, "w", n, size);
  qkv_tensor *b = affine(L, "layer_norm", 4, "b", n, size);
  double eps = luaL_optnumber(L, 5, 1e-5);
  if (!(eps >= 0)) return luaL_error(L, "layer_norm: eps must be >= 0, got %f", eps);
  int64_t inner = 1;
  for (int i = 0; i < n; i++) inner *= size[i];
  qkv_tensor *out = qkvL_newlike(L, x, x->dtype);
  qkvL_check(L, "layer_norm", qkv_layer_norm(out, x, w, b, inner, eps));
  return 1;
}

/* rms_norm's eps when none is given: the machine epsilon of the dtype x
   is computed in (float32's for the halves, as PyTorch's kernel) */
static double rms_eps (qkv_dtype dt) {
  return dt == QKV_F64 ? DBL_EPSILON : FLT_EPSILON;
}

/* qkv.rms_norm(x, normalized_shape [, weight [, eps]]): x / sqrt(mean(x^2)
   + eps) * weight over the normalized dims (torch.nn.functional.rms_norm) */
static int n_rms_norm (lua_State *L) {
  static const char *const kw[] = {"normalized_shape", "weight", "eps", NULL};
  qkvL_args(L, "rms_norm", kw);
  QKVL_GRAD(L, "rms_norm", n_rms_norm);
  int64_t size[QKV_MAXDIM];
  int n = normalized(L, "rms_norm", size);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  qkv_tensor *w = affine(L, "rms_norm", 3, "weight", n, size);
  double eps = lua_isnoneornil(L, 4) ? rms_eps(x->dtype) : luaL_checknumber(L, 4);
  if (!(eps >= 0)) return luaL_error(L, "rms_norm: eps must be >= 0, got %f", eps);
  int64_t inner = 1;
  for (int i = 0; i < n; i++) inner *= size[i];
  qkv_tensor *out = qkvL_newlike(L, x, x->dtype);
  qkvL_check(L, "rms_norm", qkv_rms_norm(out, x, w, inner, eps));
  return 1;
}

/*
** qkv.dropout(x [, p [, training]]): zeros with probability p, the rest
** scaled by 1 / (1 - p); x itself when not training or p is 0.  The mask
** is qkv.rand(x.shape) >= p, drawn from the generator's stream.
*/
static int n_dropout (lua_State *L) {
  static const char *const kw[] = {"p", "training", NULL};
  qkvL_args(L, "dropout", kw);
  QKVL_GRAD(L, "dropout", n_dropout);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  double p = luaL_optnumber(L, 2, 0.5);
  int training = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
  check_float(L, "dropout", x);
  if (!(p >= 0 && p <= 1))
    return luaL_error(L, "dropout: p must be in [0, 1], got %f", p);
  if (!training || p == 0) { lua_settop(L, 1); return 1; }
  qkv_tensor *u = qkvL_newlike(L, x, x->dtype);
  qkvL_check(L, "dropout", qkv_random(u, QKV_UNIFORM));
  qkv_tensor *keep = qkvL_newlike(L, x, QKV_BOOL), *out = qkvL_newlike(L, x, x->dtype);
  qkvL_Scalar sp, sk;
  sp.v.d = p;
  sk.v.d = p < 1 ? 1 / (1 - p) : 0;
  qkvL_check(L, "dropout", qkv_binary(QKV_GE, keep, u, qkvL_scalar(&sp, QKV_F64)));
  qkvL_check(L, "dropout", qkv_binary(QKV_MUL, out, x, keep));
  qkvL_check(L, "dropout", qkv_binary(QKV_MUL, out, out, qkvL_scalar(&sk, QKV_F64)));
  return 1;
}

/* a backward's two tensors, arguments 1 and 2: float32 or float64 of one
   shape, dtype and device, or an error naming fname and their shapes */
static void check_pair (lua_State *L, const char *fname, const char *an, const char *bn,
                        qkv_tensor **a, qkv_tensor **b) {
  qkv_tensor *x = *a = qkvL_checktensor(L, 1), *g = *b = qkvL_checktensor(L, 2);
  if (x->ndim != g->ndim || memcmp(x->size, g->size, sizeof(int64_t) * (size_t)x->ndim) != 0 ||
      (x->dtype != QKV_F32 && x->dtype != QKV_F64) || g->dtype != x->dtype ||
      x->storage->device != g->storage->device) {
    const char *sx = qkvL_shape(L, x), *sg = qkvL_shape(L, g);
    luaL_error(L, "%s: %s %s and %s %s must be float32 or float64 of one shape, dtype and device",
               fname, an, sx, bn, sg);
  }
}

/* qkv._softmax_backward(y, g [, dim]): softmax's backward (qkv.autograd's
   rule), y a softmax's output and g its gradient */
static int n_softmax_backward (lua_State *L) {
  qkv_tensor *y, *g;
  check_pair(L, "_softmax_backward", "y", "g", &y, &g);
  int dim = qkvL_optdim0(L, 3, y->ndim, y->ndim ? y->ndim - 1 : 0);
  qkv_tensor *gx = qkvL_newlike(L, y, y->dtype);
  qkvL_check(L, "softmax", qkv_softmax_backward(gx, y, g, dim));
  return 1;
}

/* qkv._gelu_backward(x, g): g * GELU'(x) in one pass (qkv.autograd's rule) */
static int n_gelu_backward (lua_State *L) {
  qkv_tensor *x, *g;
  check_pair(L, "_gelu_backward", "x", "g", &x, &g);
  qkv_tensor *gx = qkvL_newlike(L, x, x->dtype);
  qkvL_check(L, "gelu", qkv_binary(QKV_GELU_GRAD, gx, x, g));
  return 1;
}

/*
** qkv._layer_norm_backward(x, g, n [, w [, eps [, want_w [, want_b]]]]) ->
** gx, gw|nil, gb|nil: layer_norm's backward over the last n elements of
** each row (qkv.autograd's rule); gw and gb 1-D of n, each only when
** asked for; w nil or n elements of x's dtype
*/
static int n_layer_norm_backward (lua_State *L) {
  qkv_tensor *x, *g;
  check_pair(L, "_layer_norm_backward", "x", "g", &x, &g);
  lua_Integer n = luaL_checkinteger(L, 3);
  qkv_tensor *w = lua_isnoneornil(L, 4) ? NULL : qkvL_checktensor(L, 4);
  double eps = luaL_optnumber(L, 5, 1e-5);
  int want_w = lua_toboolean(L, 6), want_b = lua_toboolean(L, 7);
  int64_t inner = 1;
  int k = x->ndim;
  while (k > 0 && inner < n) inner *= x->size[--k];
  if (n < 1 || inner != n) {
    const char *s = qkvL_shape(L, x);
    return luaL_error(L, "_layer_norm_backward: n = %I is not the size of x %s's last dims", n, s);
  }
  if (w && (qkv_numel(w) != n || w->dtype != x->dtype || w->storage->device != x->storage->device)) {
    const char *sw = qkvL_shape(L, w);
    return luaL_error(L, "_layer_norm_backward: w %s must hold n = %I elements of x's dtype "
                      "and device", sw, n);
  }
  if (!(eps >= 0)) return luaL_error(L, "_layer_norm_backward: eps must be >= 0, got %f", eps);
  int64_t size = n;
  qkv_tensor *gx = qkvL_newlike(L, x, x->dtype);
  qkv_tensor *gw = want_w ? qkvL_new(L, x->dtype, x->storage->device, 1, &size, 0) : NULL;
  if (!want_w) lua_pushnil(L);
  qkv_tensor *gb = want_b ? qkvL_new(L, x->dtype, x->storage->device, 1, &size, 0) : NULL;
  if (!want_b) lua_pushnil(L);
  qkvL_check(L, "layer_norm", qkv_layer_norm_backward(gx, gw, gb, x, g, w, n, eps));
  return 3;
}

/*
** qkv._rms_norm_backward(x, g, n [, w [, eps [, want_w]]]) -> gx, gw|nil:
** rms_norm's backward over the last n elements of each row (qkv.autograd's
** rule); gw 1-D of n, only when asked for; w nil or n elements of x's
** dtype; eps nil: x's dtype's, as rms_norm's
*/
static int n_rms_norm_backward (lua_State *L) {
  qkv_tensor *x, *g;
  check_pair(L, "_rms_norm_backward", "x", "g", &x, &g);
  lua_Integer n = luaL_checkinteger(L, 3);
  qkv_tensor *w = lua_isnoneornil(L, 4) ? NULL : qkvL_checktensor(L, 4);
  double eps = lua_isnoneornil(L, 5) ? rms_eps(x->dtype) : luaL_checknumber(L, 5);
  int want_w = lua_toboolean(L, 6);
  int64_t inner = 1;
  int k = x->ndim;
  while (k > 0 && inner < n) inner *= x->size[--k];
  if (n < 1 || inner != n) {
    const char *s = qkvL_shape(L, x);
    return luaL_error(L, "_rms_norm_backward: n = %I is not the size of x %s's last dims", n, s);
  }
  if (w && (qkv_numel(w) != n || w->dtype != x->dtype || w->storage->device != x->storage->device)) {
    const char *sw = qkvL_shape(L, w);
    return luaL_error(L, "_rms_norm_backward: w %s must hold n = %I elements of x's dtype "
                      "and device", sw, n);
  }
  if (!(eps >= 0)) return luaL_error(L, "_rms_norm_backward: eps must be >= 0, got %f", eps);
  int64_t size = n;
  qkv_tensor *gx = qkvL_newlike(L, x, x->dtype);
  qkv_tensor *gw = want_w ? qkvL_new(L, x->dtype, x->storage->device, 1, &size, 0) : NULL;
  if (!want_w) lua_pushnil(L);
  qkvL_check(L, "rms_norm", qkv_rms_norm_backward(gx, gw, x, g, w, n, eps));
  return 2;
}

/* qkv._adam(p, g, m, v, vmax, lr, b1, b2, eps, decay, bc1, bc2): one fused
   Adam step in place (qkv.optim's Adam:update; qkv_adam says the formula).
   vmax may be nil; p, m, v (and vmax) float32 or float64 of one shape and
   device, contiguous, and g of their shape */
static int n_adam (lua_State *L) {
  qkv_tensor *p = qkvL_checktensor(L, 1), *g = qkvL_checktensor(L, 2);
  qkv_tensor *m = qkvL_checktensor(L, 3), *v = qkvL_checktensor(L, 4);
  qkv_tensor *vmax = lua_isnil(L, 5) ? NULL : qkvL_checktensor(L, 5);
  qkv_adam_step h;
  double *f[] = {&h.lr, &h.b1, &h.b2, &h.eps, &h.decay, &h.bc1, &h.bc2};
  for (int i = 0; i < 7; i++) *f[i] = luaL_checknumber(L, 6 + i);
  int err = qkv_adam(p, g, m, v, vmax, &h);
  if (err == QKV_EINTERNAL) {
    const char *sp = qkvL_shape(L, p), *sg = qkvL_shape(L, g);
    return luaL_error(L, "_adam: p %s, g %s and the state must be float32 or float64 of one "
                      "shape, dtype and device, p and the state contiguous", sp, sg);
  }
  qkvL_check(L, "step", err);
  return 0;
}

void qkvL_open_norm (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg both[] = {{"log_softmax", n_log_softmax}, {NULL, NULL}};
  static const luaL_Reg mod[] = {
    {"layer_norm", n_layer_norm}, {"dropout", n_dropout},
    {"_softmax_backward", n_softmax_backward}, {"_gelu_backward", n_gelu_backward},
    {"_layer_norm_backward", n_layer_norm_backward},
    {"rms_norm", n_rms_norm}, {"_rms_norm_backward", n_rms_norm_backward},
    {"_adam", n_adam},
    {NULL, NULL}
  };
  qkvL_register(L, methods, module, both, NULL, mod);
  (void)mt;
}
