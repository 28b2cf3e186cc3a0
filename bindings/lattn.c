/*
** lattn.c -- the attention primitives: project, scores, mask, causal,
** padding, softmax, heads, merge, align and attention.  Each works
** on any leading batch/head dims; shape errors name the function, the
** argument and the shapes.
*/
#include <math.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"
#include "../vm/common/mods.h"

#define LAST(t) ((t)->size[(t)->ndim - 1])
#define ROWS(t) ((t)->size[(t)->ndim - 2])

/* "name: A is (..) but B is (..): what" */
static int shape_error (lua_State *L, const char *name, const char *an,
                        const qkv_tensor *a, const char *bn,
                        const qkv_tensor *b, const char *what) {
  const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
  return luaL_error(L, "%s: %s is %s but %s is %s: %s", name, an, sa, bn, sb, what);
}

static void check_float_pair (lua_State *L, const char *name, const char *an,
                              const qkv_tensor *a, const char *bn,
                              const qkv_tensor *b) {
  if (!qkv_is_float(a->dtype) || a->dtype != b->dtype)
    luaL_error(L, "%s: %s is %s but %s is %s: expected the same float dtype "
               "(convert with :to())", name, an, qkv_dtype_name(a->dtype), bn,
               qkv_dtype_name(b->dtype));
}

static void check_rank (lua_State *L, const char *name, const char *an,
                        const qkv_tensor *a, int min, const char *layout) {
  if (a->ndim < min) {
    const char *s = qkvL_shape(L, a);
    luaL_error(L, "%s: %s must be %s, got %s", name, an, layout, s);
  }
}

static int opt_field (lua_State *L, int arg, const char *key) {
  if (lua_isnoneornil(L, arg)) { lua_pushnil(L); return LUA_TNIL; }
  return lua_getfield(L, arg, key);
}

/*
** The options of scores and attention, read into C values before any
** tensor argument is checked: reading them may run the table's
** metamethods, which may close a tensor or let the collector run.  The
** masks stay on the stack (at .mask and .kpm, 0 for none) so that they
** cannot be collected, and are checked with the other tensors afterwards.
** causal is qkv's (aligned to the end), is_causal PyTorch's (to the
** start); -1 where not given.
*/
typedef struct Opts {
  int has_scale, causal, is_causal, weights, mask, kpm;
  double scale;
} Opts;

static int opt_flag (lua_State *L, int arg, const char *name, const char *key,
                     int def) {
  int t = opt_field(L, arg, key), v = t == LUA_TNIL ? def : lua_toboolean(L, -1);
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_error(L, "%s: option '%s' must be a boolean", name, key);
  lua_pop(L, 1);
  return v;
}

static void read_opts (lua_State *L, int arg, const char *name,
                       const char *const *known, int attention, Opts *o) {
  qkvL_checkopts(L, arg, name, known);
  o->has_scale = opt_field(L, arg, "scale") != LUA_TNIL;
  if (o->has_scale && lua_type(L, -1) != LUA_TNUMBER)
    luaL_error(L, "%s: option 'scale' must be a number, got %s", name,
               luaL_typename(L, -1));
  o->scale = lua_tonumber(L, -1);
  lua_pop(L, 1);
  o->mask = o->kpm = 0;
  if (!attention) return;                   /* scores: scale alone */
  o->causal = opt_flag(L, arg, name, "causal", 0);
  o->is_causal = opt_flag(L, arg, name, "is_causal", 0);
  o->weights = opt_flag(L, arg, name, "weights", 1);
  if (opt_field(L, arg, "mask") == LUA_TNIL) lua_pop(L, 1);
  else o->mask = lua_gettop(L);
  if (opt_field(L, arg, "key_padding_mask") == LUA_TNIL) lua_pop(L, 1);
  else o->kpm = lua_gettop(L);
}

/* project(x, W [, b]) = x W + b */

static qkv_tensor *project (lua_State *L, const char *name, const qkv_tensor *x,
                            const qkv_tensor *W, const qkv_tensor *b) {
  check_rank(L, name, "x", x, 1, "(..., d_in)");
  if (W->ndim != 2) check_rank(L, name, "W", W, 99, "(d_in, d_out)");
  check_float_pair(L, name, "x", x, "W", W);
  if (LAST(x) != W->size[0])
    shape_error(L, name, "x", x, "W", W, lua_pushfstring(L, "d_in %I ≠ %I",
                (lua_Integer)LAST(x), (lua_Integer)W->size[0]));
  if (b) {
    check_float_pair(L, name, "b", b, "W", W);
    if (b->ndim != 1 || b->size[0] != W->size[1])
      shape_error(L, name, "b", b, "W", W, lua_pushfstring(L, "b must be "
                  "(d_out,) = (%I,)", (lua_Integer)W->size[1]));
  }
  /* the bias inside the product, as PyTorch's addmm: a half product
     computed in float32 is rounded once, after it */
  return qkvL_matmul_bias(L, name, x, W, b, 1);
}

static qkv_tensor *optbias (lua_State *L, int arg) {
  return lua_isnoneornil(L, arg) ? NULL : qkvL_checktensor(L, arg);
}

static int a_project (lua_State *L) {
  QKVL_GRAD(L, "project", a_project);
  project(L, "project", qkvL_checktensor(L, 1), qkvL_checktensor(L, 2), optbias(L, 3));
  return 1;
}


/* scores(Q, K [, {scale=}]) = Q K^T * scale, K^T a view (BLAS transposes),
   the scale applied by the product itself */

static void check_qk (lua_State *L, const char *name, const qkv_tensor *Q,
                      const qkv_tensor *K) {
  check_rank(L, name, "Q", Q, 2, "(..., n_q, d_k)");
  check_rank(L, name, "K", K, 2, "(..., n_k, d_k)");
  check_float_pair(L, name, "Q", Q, "K", K);
  if (LAST(Q) != LAST(K))
    shape_error(L, name, "Q", Q, "K", K, lua_pushfstring(L, "d_k %I ≠ %I",
                (lua_Integer)LAST(Q), (lua_Integer)LAST(K)));
  int n;
  int64_t size[QKV_MAXDIM];
  if (qkv_broadcast_shape(Q->ndim - 2, Q->size, K->ndim - 2, K->size, &n, size))
    shape_error(L, name, "Q", Q, "K", K, "batch dims do not broadcast");
}

/* the option, else 1/sqrt(d_k); before Q's rank is checked, so a 0-d Q
   (no size[ndim - 1]) counts as d_k = 1 */
static double scale_of (const Opts *o, const qkv_tensor *Q) {
  int64_t dk = Q->ndim > 0 ? LAST(Q) : 1;
  return o->has_scale ? o->scale : 1.0 / sqrt((double)(dk > 0 ? dk : 1));
}

static qkv_tensor *scores (lua_State *L, const char *name, const qkv_tensor *Q,
                           const qkv_tensor *K, double scale) {
  qkv_tensor Kt;
  check_qk(L, name, Q, K);
  qkv_view_transpose(&Kt, K, K->ndim - 2, K->ndim - 1);
  return qkvL_matmul(L, name, Q, &Kt, scale);
}

static int a_scores (lua_State *L) {
  QKVL_GRAD(L, "scores", a_scores);
  static const char *const known[] = {"scale", NULL};
  Opts o;
  read_opts(L, 3, "scores", known, 0, &o);
  qkv_tensor *Q = qkvL_checktensor(L, 1), *K = qkvL_checktensor(L, 2);
  scores(L, "scores", Q, K, scale_of(&o, Q));
  return 1;
}


/* softmax, gelu (for align: x:gelu() is lmath.c's, from the list of ops) */

static qkv_tensor *softmax_into (lua_State *L, const char *name,
                                 qkv_tensor *out, const qkv_tensor *x, int dim) {
  qkvL_check(L, name, qkv_softmax(out, x, dim));
  return out;
}

static int a_softmax (lua_State *L) {
  qkvL_keywords(L, "softmax", 2, qkvL_KW_DIM, 2);
  qkvL_noextra(L, "softmax", 2);      /* x:softmax(dim, "float64") is dtype's option */
  QKVL_GRAD(L, "softmax", a_softmax);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  int dim = qkvL_optdim0(L, 2, x->ndim, x->ndim ? x->ndim - 1 : 0);
  softmax_into(L, "softmax", qkvL_newlike(L, x, qkv_is_float(x->dtype) ? x->dtype : QKV_F32),
               x, dim);
  return 1;
}

static qkv_tensor *gelu (lua_State *L, const qkv_tensor *x) {
  qkv_tensor *out = qkvL_newlike(L, x, qkv_is_float(x->dtype) ? x->dtype : QKV_F32);
  qkvL_check(L, "gelu", qkv_unary(QKV_GELU, out, x));
  return out;
}



/* heads and merge: views, so the heads share x's storage */

static int a_heads (lua_State *L) {
  QKVL_GRAD(L, "heads", a_heads);
  qkv_tensor *x = qkvL_checktensor(L, 1), v;
  lua_Integer h = luaL_checkinteger(L, 2);
  check_rank(L, "heads", "x", x, 2, "(..., n, d)");
  if (x->ndim == QKV_MAXDIM) return luaL_error(L, "heads: more than 8 dims");
  if (h < 1 || LAST(x) % h != 0) {
    const char *s = qkvL_shape(L, x);
    return luaL_error(L, "heads: d = %I of x %s is not divisible by h = %I",
                      (lua_Integer)LAST(x), s, h);
  }
  int n = x->ndim;
  int64_t size[QKV_MAXDIM];
  memcpy(size, x->size, sizeof size);
  size[n - 1] = h;
  size[n] = LAST(x) / h;
  /* splitting one dim is always a view, unless the shape is one no tensor
     may have (h = 2^62 heads of an empty d) */
  if (qkv_view_reshape(&v, x, n + 1, size) != 0) {
    const char *s = qkvL_shape(L, x);
    return luaL_error(L, "heads: %I heads of x %s make a shape too large", h, s);
  }
  qkv_view_transpose(&v, &v, n - 2, n - 1);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int a_merge (lua_State *L) {
  QKVL_GRAD(L, "merge", a_merge);
  qkv_tensor *x = qkvL_checktensor(L, 1), v;
  check_rank(L, "merge", "x", x, 3, "(..., h, n, d_h)");
  int n = x->ndim;
  int64_t size[QKV_MAXDIM];
  qkv_view_transpose(&v, x, n - 3, n - 2);
  memcpy(size, v.size, sizeof size);
  size[n - 2] = v.size[n - 2] * v.size[n - 1];
  if (qkv_view_reshape(&v, &v, n - 1, size) == 0) {
    qkvL_pushview(L, &v, 1);
    return 1;
  }
  qkv_tensor *c = qkvL_newlike(L, &v, v.dtype);
  qkvL_check(L, "merge", qkv_copy(c, &v));
  qkv_view_reshape(c, c, n - 1, size);
  return 1;
}


/* align(x, W [, b]) linear, or align(x, {W1, b1, W2, b2}) Linear-GELU-Linear */

static int a_align (lua_State *L) {
  QKVL_GRAD(L, "align", a_align);
  qkv_tensor *x = qkvL_checktensor(L, 1), *w[4];
  if (!lua_istable(L, 2)) {
    project(L, "align", x, qkvL_checktensor(L, 2), optbias(L, 3));
    return 1;
  }
  lua_Integer len = qkvL_checklist(L, 2, "align", "the weights", NULL);
  if (len != 4)
    return luaL_error(L, "align: the MLP form takes {W1, b1, W2, b2}, got %I "
                      "items", len);
  /* all four read (the table's metamethods run here) before any is
     checked, and kept on the stack */
  int base = lua_gettop(L);
  for (int i = 0; i < 4; i++) lua_geti(L, 2, i + 1);
  x = qkvL_checktensor(L, 1);
  for (int i = 0; i < 4; i++) {
    w[i] = qkvL_totensor(L, base + 1 + i);
    if (w[i] == NULL)
      return luaL_error(L, "align: item %d of the weights is a %s, not a "
                        "tensor", i + 1, qkvL_istensor(L, base + 1 + i)
                        ? "closed tensor" : luaL_typename(L, base + 1 + i));
  }
  qkv_tensor *hidden = project(L, "align", x, w[0], w[1]);
  project(L, "align", gelu(L, hidden), w[2], w[3]);
  return 1;
}

/*
** attention(Q, K, V [, {mask=, key_padding_mask=, causal=, is_causal=,
** scale=, weights=}]) -> out, weights.  With weights = false the fused
** kernel runs and never holds the scores.  enable_gqa (grouped-query
** heads) goes to stdlib/qkv/gqa.lua, score_mod, mask_mod and block_mask
** to stdlib/qkv/variants/, which call attention again without them.
*/

static qkv_tensor *opt_tensor (lua_State *L, int idx, const char *key) {
  qkv_tensor *m;
  if (idx == 0) return NULL;
  if ((m = qkvL_totensor(L, idx)) == NULL)
    luaL_error(L, "attention: option '%s' must be a tensor, got %s", key,
               qkvL_istensor(L, idx) ? "a closed tensor" : luaL_typename(L, idx));
  return m;
}

/*
** m (true = may attend; NULL for all) and-ed with the negation of off
** (bool, true = masked), broadcast together, as a new bool mask, pushed;
** when they do not broadcast, an error names m and `given` (what off was
** made from) by name and shape.
*/
static qkv_tensor *keep_unless (lua_State *L, const qkv_tensor *m, const qkv_tensor *off,
                                const char *offname, const qkv_tensor *given) {
  int n = off->ndim;
  int64_t size[QKV_MAXDIM];
  memcpy(size, off->size, sizeof size);
  if (m && qkv_broadcast_shape(off->ndim, off->size, m->ndim, m->size, &n, size)) {
    const char *sm = qkvL_shape(L, m), *so = qkvL_shape(L, given);
    luaL_error(L, "attention: mask is %s but %s is %s: they do not broadcast", sm,
               offname, so);
  }
  qkv_tensor *keep = qkvL_new(L, QKV_BOOL, off->storage->device, n, size, 0), e;
  qkvL_Scalar zero;
  zero.v.b = 0;
  const qkv_tensor *z = qkvL_scalar(&zero, QKV_BOOL);
  if (!m) qkvL_check(L, "attention", qkv_binary(QKV_EQ, keep, off, z));
  else {
    qkvL_check(L, "attention", qkv_binary(QKV_NE, keep, m, z));
    qkv_expand(&e, off, n, size);
    qkvL_check(L, "attention", qkv_masked_fill(keep, &e, 0));
  }
  return keep;
}

/*
** key_padding_mask, PyTorch's: (..., n_k), true where a key is padding,
** seen as (..., 1, n_k); with a mask as well, a key takes part where both
** let it.  The result is pushed.
*/
static qkv_tensor *padding_keep (lua_State *L, qkv_tensor *kpm, const qkv_tensor *m,
                                 int64_t nk) {
  if (kpm->dtype != QKV_BOOL)
    luaL_error(L, "attention: option 'key_padding_mask' must be a bool tensor "
               "(true = padding), got %s", qkv_dtype_name(kpm->dtype));
  if (kpm->ndim < 1 || LAST(kpm) != nk || kpm->ndim >= QKV_MAXDIM) {
    const char *sk = qkvL_shape(L, kpm);
    luaL_error(L, "attention: key_padding_mask is %s but n_k is %I: expected "
               "(..., n_k)", sk, (lua_Integer)nk);
  }
  qkv_tensor pad;
  qkv_view_unsqueeze(&pad, kpm, kpm->ndim - 1);
  return keep_unless(L, m, &pad, "key_padding_mask", kpm);
}

/*
** The mask attention applies besides its causal flag (NULL for none), from
** the options: mask, and-ed with the keys key_padding_mask lets through
** and, for PyTorch's is_causal, with its mask aligned to the first key
** (query i sees keys j <= i, as torch.ones(n_q, n_k).tril()).  Where n_q =
** n_k that is qkv's causal, aligned to the last key, and the kernels' flag
** does it; else it is a mask.  What is made is pushed.
*/
static qkv_tensor *resolve (lua_State *L, Opts *o, const qkv_tensor *Q, const qkv_tensor *K) {
  qkv_tensor *m = opt_tensor(L, o->mask, "mask");
  if (m) qkvL_check_mask(L, "attention", m, "pass mask = m:eq(0), or add it to the "
                         "scores: F.scaled_dot_product_attention(q, k, v, {attn_mask = m})");
  qkv_tensor *kpm = opt_tensor(L, o->kpm, "key_padding_mask");
  if (kpm || o->is_causal) check_qk(L, "attention", Q, K);
  if (kpm) m = padding_keep(L, kpm, m, ROWS(K));
  if (!o->is_causal) return m;
  int64_t nq = ROWS(Q), nk = ROWS(K);
  if (nq == nk) { o->causal = 1; return m; }
  if (o->causal)
    luaL_error(L, "attention: options 'causal' (qkv's, aligned to the last key) and "
               "'is_causal' (PyTorch's, aligned to the first) differ for n_q = %I, n_k = "
               "%I: give one", (lua_Integer)nq, (lua_Integer)nk);
  qkv_tensor *off = qkvL_causal(L, "attention", nq, nk, 0, 0, Q->storage->device);
  return keep_unless(L, m, off, "is_causal's mask", off);
}

/*
** The output's shape: the batch dims of Q, K, V and the mask broadcast,
** then (n_q, d_v).
*/
int qkvL_attention_shape (lua_State *L, const qkv_tensor *Q, const qkv_tensor *K,
                          const qkv_tensor *V, const qkv_tensor *m, int64_t *size) {
  int n;
  check_qk(L, "attention", Q, K);
  check_rank(L, "attention", "V", V, 2, "(..., n_k, d_v)");
  check_float_pair(L, "attention", "Q", Q, "V", V);
  if (ROWS(K) != ROWS(V))
    shape_error(L, "attention", "K", K, "V", V, lua_pushfstring(L,
                "n_k %I ≠ %I", (lua_Integer)ROWS(K), (lua_Integer)ROWS(V)));
  qkv_broadcast_shape(Q->ndim - 2, Q->size, K->ndim - 2, K->size, &n, size);
  if (qkv_broadcast_shape(n, size, V->ndim - 2, V->size, &n, size))
    shape_error(L, "attention", "Q", Q, "V", V, "batch dims do not broadcast");
  size[n] = ROWS(Q);
  size[n + 1] = ROWS(K);
  n += 2;
  if (m) qkvL_mask_shape(L, "attention", m, &n, size);
  size[n - 1] = LAST(V);
  return n;
}

static int fused (lua_State *L, const qkv_tensor *Q, const qkv_tensor *K,
                  const qkv_tensor *V, const qkv_tensor *m, int causal_, double scale) {
  int64_t size[QKV_MAXDIM];
  int n = qkvL_attention_shape(L, Q, K, V, m, size);
  qkv_tensor *out = qkvL_new(L, Q->dtype, Q->storage->device, n, size, 0);
  qkvL_check(L, "attention", qkv_attention(out, Q, K, V, m, causal_, scale));
  return 1;
}

static const char *const ATTENTION_OPTS[] = {"mask", "causal", "is_causal", "scale",
                                             "weights", "key_padding_mask", NULL};

/* whether the options (at arg) hold one of keys: enable_gqa, which
   stdlib/qkv/gqa.lua reads, or a variant's score_mod, mask_mod or
   block_mask, which stdlib/qkv/variants/init.lua's attention reads.  Raw
   reads: an options table with an __index that refuses unknown names (a
   module's) is read_opts's to refuse, naming attention */
static int has_option (lua_State *L, int arg, const char *const *keys) {
  if (!lua_istable(L, arg)) return 0;
  for (int i = 0; keys[i]; i++) {
    lua_pushstring(L, keys[i]);
    int t = lua_rawget(L, arg);
    lua_pop(L, 1);
    if (t != LUA_TNIL) return 1;
  }
  return 0;
}

/* the call handed to module's attention, with all its arguments */
static int hand_to (lua_State *L, const char *module) {
  int n = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "attention");
  lua_insert(L, 1);
  lua_pop(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

static int a_attention (lua_State *L) {
  static const char *const gqa[] = {"enable_gqa", NULL};
  static const char *const variant[] = {"score_mod", "mask_mod", "block_mask", NULL};
  if (has_option(L, 4, gqa)) return hand_to(L, "qkv.gqa");
  if (has_option(L, 4, variant)) return hand_to(L, "qkv.variants");
  QKVL_GRAD(L, "attention", a_attention);
  Opts o;
  read_opts(L, 4, "attention", ATTENTION_OPTS, 1, &o);
  qkv_tensor *Q = qkvL_checktensor(L, 1), *K = qkvL_checktensor(L, 2);
  qkv_tensor *V = qkvL_checktensor(L, 3), *m = resolve(L, &o, Q, K);
  int64_t size[QKV_MAXDIM];
  double scale = scale_of(&o, Q);
  if (!o.weights) return fused(L, Q, K, V, m, o.causal, scale);
  /* the weights have the output's batch dims, as in the fused path */
  int n = qkvL_attention_shape(L, Q, K, V, m, size);
  qkv_tensor *out = qkvL_new(L, Q->dtype, Q->storage->device, n, size, 0);
  size[n - 1] = ROWS(K);
  qkv_tensor *W = qkvL_new(L, Q->dtype, Q->storage->device, n, size, 0);
  qkvL_check(L, "attention", qkv_attention_weights(out, W, Q, K, V, m, o.causal, scale));
  return 2;
}

/*
** qkv._attention_opts(Q, K [, opts]) -> mask|nil, causal, scale, weights:
** attention's options checked and resolved as attention reads them, for
** qkv.autograd's rule, which runs attention with them and keeps them for
** its backward (mask, true = may attend, holds key_padding_mask and
** PyTorch's is_causal; causal is qkv's)
*/
static int a_attention_opts (lua_State *L) {
  Opts o;
  read_opts(L, 3, "attention", ATTENTION_OPTS, 1, &o);
  qkv_tensor *Q = qkvL_checktensor(L, 1), *K = qkvL_checktensor(L, 2);
  int top = lua_gettop(L);
  if (resolve(L, &o, Q, K) == NULL) lua_pushnil(L);
  else if (lua_gettop(L) == top) lua_pushvalue(L, o.mask);    /* the option itself */
  else lua_pushvalue(L, -1);                                   /* the mask made */
  lua_pushboolean(L, o.causal);
  lua_pushnumber(L, scale_of(&o, Q));
  lua_pushboolean(L, o.weights);
  return 4;
}

/*
** qkv._attention_lse(Q, K, V, mask|nil, causal, scale [, spec]) -> out,
** lse: the fused attention in Q's float dtype (K and V the same), with
** options as _attention_opts resolved them, and the state its backward may
** read (qkv.autograd's rule passes it to _attention_backward): float32 for
** the halves, else Q's dtype.  spec: a variant's program (lmods.c), for
** stdlib/qkv/variants/init.lua
*/
static int a_attention_lse (lua_State *L) {
  qkv_tensor *Q = qkvL_checktensor(L, 1), *K = qkvL_checktensor(L, 2);
  qkv_tensor *V = qkvL_checktensor(L, 3);
  qkv_tensor *m = lua_isnoneornil(L, 4) ? NULL : qkvL_checktensor(L, 4);
  int causal_ = lua_toboolean(L, 5);
  double scale = luaL_checknumber(L, 6);
  qkv_attn_mods M;
  qkv_mod_prog P;
  int mods = !lua_isnoneornil(L, 7);
  if (mods) qkvL_mods_read(L, 7, &M, &P);
  if (!qkv_is_float(Q->dtype) || K->dtype != Q->dtype || V->dtype != Q->dtype) {
    const char *sq = qkvL_shape(L, Q), *sk = qkvL_shape(L, K), *sv = qkvL_shape(L, V);
    return luaL_error(L, "_attention_lse: Q %s, K %s and V %s must be one float dtype",
                      sq, sk, sv);
  }
  int64_t size[QKV_MAXDIM];
  int n = qkvL_attention_shape(L, Q, K, V, m, size);
  qkv_tensor *out = qkvL_new(L, Q->dtype, Q->storage->device, n, size, 0);
  qkv_tensor *lse = qkvL_new(L, qkv_compute_dtype(Q->dtype), Q->storage->device, n - 1, size, 0);
  if (mods) qkvL_mods_check(L, 7, &M, qkv_attention_mods(out, lse, Q, K, V, m, causal_, scale, &M));
  else qkvL_check(L, "attention", qkv_attention_lse(out, lse, Q, K, V, m, causal_, scale));
  return 2;
}

int qkvL_attention_grads (lua_State *L, qkv_tensor *const ts[5], const qkv_tensor *m,
                          qkv_tensor *g[3]) {
  const qkv_tensor *o = ts[3];
  int64_t sz[QKV_MAXDIM];
  int n = o->ndim;
  /* out must be what attention(Q, K, V) gives, and grad out's shape */
  int ok = qkv_is_float(o->dtype) && n >= 2 && o->dtype == ts[4]->dtype;
  for (int i = 0; ok && i < 5; i++)
    ok = ts[i]->ndim >= 2 && ts[i]->ndim <= n && ts[i]->dtype == o->dtype;
  ok = ok && qkvL_attention_shape(L, ts[0], ts[1], ts[2], m, sz) == n &&
       memcmp(sz, o->size, sizeof(int64_t) * (size_t)n) == 0 &&
       ts[4]->ndim == n && memcmp(ts[4]->size, o->size, sizeof(int64_t) * (size_t)n) == 0;
  if (!ok) return 0;
  int64_t size[3][QKV_MAXDIM];
  memcpy(size[0], o->size, sizeof size[0]);
  qkv_attention_kv_grad_batch(size[1], o, ts[1], ts[2]);    /* grouped keys: their own */
  memcpy(size[2], size[1], sizeof size[2]);
  size[0][n - 1] = LAST(ts[0]);
  size[1][n - 2] = ROWS(ts[1]); size[1][n - 1] = LAST(ts[1]);
  size[2][n - 2] = ROWS(ts[2]); size[2][n - 1] = LAST(ts[2]);
  for (int w = 0; w < 3; w++) g[w] = qkvL_new(L, o->dtype, o->storage->device, n, size[w], 0);
  return 1;
}

/*
** qkv._attention_backward(Q, K, V, out, grad, mask|nil, causal, scale
** [, lse [, spec]]) -> dQ, dK, dV in out's dtype with out's batch dims,
** dK's and dV's 1 over the trailing dims where K and V broadcast (the
** group of grouped-query heads; qkv.autograd's rule for the fused path
** sums them back to the inputs' shapes); lse as _attention_lse gave it
** with out.  spec: a variant's program, as _attention_lse's (float32 or
** float64, lse needed)
*/
static int a_attention_backward (lua_State *L) {
  qkv_tensor *ts[5];
  for (int i = 0; i < 5; i++) ts[i] = qkvL_checktensor(L, i + 1);
  qkv_tensor *m = lua_isnoneornil(L, 6) ? NULL : qkvL_checktensor(L, 6);
  int causal_ = lua_toboolean(L, 7);
  double scale = luaL_checknumber(L, 8);
  qkv_tensor *lse = lua_isnoneornil(L, 9) ? NULL : qkvL_checktensor(L, 9);
  qkv_attn_mods M;
  qkv_mod_prog P;
  int mods = !lua_isnoneornil(L, 10);
  if (mods) qkvL_mods_read(L, 10, &M, &P);
  if (mods && lse == NULL)
    return luaL_error(L, "_attention_backward: a variant's backward needs lse");
  const qkv_tensor *o = ts[3];
  qkv_tensor *g[3];
  if (!qkvL_attention_grads(L, ts, m, g))
    return luaL_error(L, "_attention_backward: out and grad must be attention(Q, K, V)'s "
                      "shape and dtype");
  int n = o->ndim;
  qkv_dtype dt = o->dtype == QKV_F64 ? QKV_F64 : QKV_F32;
  if (lse && (lse->dtype != dt || lse->ndim != n - 1 ||
              memcmp(lse->size, o->size, sizeof(int64_t) * (size_t)(n - 1)) != 0 ||
              !qkv_is_contiguous(lse) || lse->storage->device != o->storage->device)) {
    const char *sl = qkvL_shape(L, lse), *so = qkvL_shape(L, o);
    return luaL_error(L, "_attention_backward: lse %s must be what _attention_lse gave with "
                      "out %s", sl, so);
  }
  if (mods)
    qkvL_mods_check(L, 10, &M, qkv_attention_mods_backward(g[0], g[1], g[2], ts[0], ts[1], ts[2],
                                                           o, ts[4], m, causal_, scale, lse, &M));
  else
    qkvL_check(L, "attention", qkv_attention_backward(g[0], g[1], g[2], ts[0], ts[1], ts[2],
                                                      o, ts[4], m, causal_, scale, lse));
  return 3;
}

void qkvL_open_attention (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg both[] = {
    {"softmax", a_softmax}, {NULL, NULL}
  };
  static const luaL_Reg mod[] = {
    {"project", a_project}, {"scores", a_scores}, {"_attention_lse", a_attention_lse},
    {"heads", a_heads},
    {"merge", a_merge}, {"align", a_align}, {"attention", a_attention},
    {"_attention_backward", a_attention_backward},
    {"_attention_opts", a_attention_opts}, {NULL, NULL}
  };
  qkvL_register(L, methods, module, both, NULL, mod);
  (void)mt;
}
