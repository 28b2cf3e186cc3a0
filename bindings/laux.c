/*
** laux.c -- what every part of the bindings uses to read its arguments,
** as lauxlib.c is to Lua's own libraries: dims, indices, dtypes, shapes,
** devices and options tables (with the closest known name for a
** misspelt one); the error of a qkv status; and the registration of a
** part's functions.  It registers no Lua function of its own.
*/
#include <string.h>

#include "lauxqkv.h"
#include "../vm/core/backend.h"
#include "../vm/dispatch/plugin.h"
#include "../vm/common/nearest.h"

/* An op stopped by Ctrl-C has delivered the interrupt: the hook that the
   executable's SIGINT handler set must not fire again in the handler. */
void qkvL_check (lua_State *L, const char *name, int err) {
  if (err == QKV_EINTR) lua_sethook(L, NULL, 0, 0);
  if (err != QKV_OK) luaL_error(L, "%s: %s", name, qkv_strerror(err));
}

/* `both` into the methods and the module, `meth` and `mod` into one each */
void qkvL_register (lua_State *L, int methods, int module, const luaL_Reg *both,
                    const luaL_Reg *meth, const luaL_Reg *mod) {
  lua_pushvalue(L, methods);
  if (both) luaL_setfuncs(L, both, 0);
  if (meth) luaL_setfuncs(L, meth, 0);
  lua_pushvalue(L, module);
  if (both) luaL_setfuncs(L, both, 0);
  if (mod) luaL_setfuncs(L, mod, 0);
  lua_pop(L, 2);
}


/* dims, indices, dtypes and shapes */

const char *qkvL_shape (lua_State *L, const qkv_tensor *t) {
  char buf[200];
  return lua_pushstring(L, qkv_shape_str(buf, sizeof buf, t->ndim, t->size));
}

/*
** What an out-of-range 0 adds to its message, where PyTorch's habit of
** counting from 0 shows (the one place that says it); "" for any other
** value.  kind: QKVL_DIM a dim, QKVL_INDEX a number, QKVL_IDS a tensor
** of indices.
*/
const char *qkvL_from1 (lua_Integer i, int kind) {
  static const char *const says[] = {
    ": qkv counts dims from 1, so PyTorch's dim 0 is dim 1 here",
    ": qkv counts from 1, so PyTorch's index 0 is 1 here",
    ": qkv counts from 1, so 0-based indices need a + 1",
  };
  return i == 0 && kind >= 0 && kind <= QKVL_IDS ? says[kind] : "";
}

/* a 1-based dim, negative from the end, among ndim + extra dims; 0-based */
int qkvL_checkdim (lua_State *L, int arg, int ndim, int extra) {
  lua_Integer d = luaL_checkinteger(L, arg);
  int n = ndim + extra;
  if (d < 0) d += n + 1;
  if (d < 1 || d > n) {
    if (n == 0) luaL_argerror(L, arg, "a 0-d tensor has no dims");
    lua_Integer given = luaL_checkinteger(L, arg);
    luaL_argerror(L, arg, lua_pushfstring(L, "dim %I out of range [%d, %d]%s", given, -n, n,
                                          qkvL_from1(given, QKVL_DIM)));
  }
  return (int)d - 1;
}

int qkvL_optdim (lua_State *L, int arg, int ndim, int def) {
  return lua_isnoneornil(L, arg) ? def : qkvL_checkdim(L, arg, ndim, 0);
}

/* a 1-based index, negative from the end, into `size` items; 0-based */
int64_t qkvL_checkindex (lua_State *L, int arg, int64_t size, const char *what) {
  lua_Integer i = luaL_checkinteger(L, arg);
  lua_Integer j = i < 0 ? i + size + 1 : i;
  if (j < 1 || j > size)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s %I out of range for size %I%s",
                  what, i, (lua_Integer)size, qkvL_from1(i, QKVL_INDEX)));
  return j - 1;
}

qkv_dtype qkvL_checkdtype (lua_State *L, int arg) {
  const char *name = luaL_checkstring(L, arg);
  qkv_dtype t;
  if (!qkv_dtype_from_name(name, &t))
    luaL_argerror(L, arg, lua_pushfstring(L, "unknown dtype '%s' "
                  "(float32, float64, float16, bfloat16, int64, int32, bool)", name));
  return t;
}

/*
** Why a matmul of a and b cannot run for their dtypes (pushed), or NULL:
** they must be the same floating-point dtype, and the message says how to
** convert, as x:matmul(y) (the shapes come before it in the caller's message).
*/
const char *qkvL_matmul_dtypes (lua_State *L, qkv_dtype a, qkv_dtype b) {
  const char *na = qkv_dtype_name(a), *nb = qkv_dtype_name(b);
  int fa = qkv_is_float(a), fb = qkv_is_float(b);
  if (fa && fb && a == b) return NULL;
  if (fa && fb)
    return lua_pushfstring(L, "the dtypes must agree, got %s and %s: for x:matmul(y), convert "
                           "one with y:to(\"%s\") or x:to(\"%s\")", na, nb, na, nb);
  if (fa || fb)
    return lua_pushfstring(L, "expected floating-point tensors, got %s and %s: for x:matmul(y), "
                           "convert %s with %s:to(\"%s\")", na, nb, fa ? "y" : "x",
                           fa ? "y" : "x", fa ? na : nb);
  return lua_pushfstring(L, "expected floating-point tensors, got %s and %s: convert both, "
                         "e.g. with x:float()", na, nb);
}

static int64_t checksize (lua_State *L, int idx, int arg, int infer) {
  int ok;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || v < (infer ? -1 : 0)) {
    const char *got = lua_type(L, idx) == LUA_TNUMBER
        ? lua_pushfstring(L, "%s", luaL_tolstring(L, idx, NULL))
        : luaL_typename(L, idx);
    luaL_argerror(L, arg, lua_pushfstring(L, "size must be a non-negative "
                  "integer, got %s", got));
  }
  return (int64_t)v;
}

/* PyTorch's keywords after a shape, qkv.zeros(2, 3, {dtype = "float64",
   device = "cuda"}): the table at arg, read for dt and dev (either may be
   NULL: that key is unknown) */
static void sizes_options (lua_State *L, int arg, qkv_dtype *dt, qkv_device *dev) {
  const char *known[3];
  int k = 0;
  if (dt) known[k++] = "dtype";
  if (dev) known[k++] = "device";
  known[k] = NULL;
  if (qkvL_testopts(L, arg, "", known)) luaL_argerror(L, arg, lua_tostring(L, -1));
  if (dt && lua_getfield(L, arg, "dtype") != LUA_TNIL) {
    int isstr = lua_type(L, -1) == LUA_TSTRING;
    if (!isstr || !qkv_dtype_from_name(lua_tostring(L, -1), dt))
      luaL_argerror(L, arg, lua_pushfstring(L, "option 'dtype' must be a dtype name (float32, "
                    "float64, float16, bfloat16, int64, int32, bool), got %s",
                    isstr ? lua_tostring(L, -1) : luaL_typename(L, -1)));
  }
  if (dev && lua_getfield(L, arg, "device") != LUA_TNIL && !qkvL_isdevice(L, -1, dev))
    luaL_argerror(L, arg, lua_pushfstring(L, "option 'device' must be \"cpu\" or \"cuda\", "
                  "got %s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                           : luaL_typename(L, -1)));
  lua_pop(L, (dt != NULL) + (dev != NULL));
}

/*
** Sizes as numbers or one table from `arg` on, then an optional dtype
** string (when dt is given); -1 (when infer) marks a size to infer.  With
** `one`, only `arg` itself holds the shape.  A table after the sizes holds
** the dtype and device as options ({dtype =, device =}).  Anything else left over, but
** trailing nils, is an error rather than silently ignored.
*/
static int parse_sizes (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                        qkv_device *dev, int infer, int one) {
  int n = 0, top = lua_gettop(L);
  while (top > arg && lua_isnil(L, top)) top--;
  if (lua_type(L, arg) == LUA_TTABLE) {
    lua_Integer len = luaL_len(L, arg);
    luaL_argcheck(L, len <= QKV_MAXDIM, arg, "more than 8 dims");
    for (n = 0; n < len; n++) {
      lua_geti(L, arg, n + 1);
      size[n] = checksize(L, -1, arg, infer);
      lua_pop(L, 1);
    }
    arg++;
  } else if (one) {
    size[n++] = checksize(L, arg, arg, infer);
    arg++;
  } else {
    for (; arg <= top && lua_type(L, arg) == LUA_TNUMBER; arg++, n++) {
      luaL_argcheck(L, n < QKV_MAXDIM, arg, "more than 8 dims");
      size[n] = checksize(L, arg, arg, infer);
    }
  }
  if (one) return n;
  if ((dt || dev) && arg == top && lua_type(L, arg) == LUA_TTABLE) {
    sizes_options(L, arg, dt, dev);
    return n;
  }
  if (dev && arg <= top && qkvL_isdevice(L, arg, dev)) arg++;
  else if (dt && arg <= top && lua_type(L, arg) == LUA_TSTRING) {
    *dt = qkvL_checkdtype(L, arg++);
    if (dev && arg <= top && qkvL_isdevice(L, arg, dev)) arg++;
  }
  if (arg <= top)
    luaL_argerror(L, arg, lua_pushfstring(L, "size%s expected, got %s",
                  dev ? ", dtype or device" : dt ? " or dtype" : "",
                  luaL_typename(L, arg)));
  return n;
}

int qkvL_checkshape (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                     qkv_device *dev) {
  if (dev) *dev = qkvL_default_device();
  return parse_sizes(L, arg, size, dt, dev, 0, 0);
}

int qkvL_checkshapearg (lua_State *L, int arg, int64_t *size) {
  return parse_sizes(L, arg, size, NULL, NULL, 0, 1);
}

int qkvL_checksizes (lua_State *L, int arg, int64_t *size) {
  return parse_sizes(L, arg, size, NULL, NULL, 1, 0);
}


/*
** Devices.  New tensors go to the default device (qkv.set_default_device,
** `qkv --device cuda`); a tensor moves with x:cuda(), x:cpu(), x:to(dev).
** The CUDA plugin is loaded by the first of these that names the GPU.
*/
static qkv_device default_device = QKV_CPU;

qkv_device qkvL_default_device (void) { return default_device; }

void qkvL_checkcuda (lua_State *L, const char *name) {
  char why[600];
  if (qkv_cuda(why, sizeof why) == NULL)
    luaL_error(L, "%s: cuda is not available: %s", name, why);
}

/* lazy, as torch.set_default_device: the first tensor made there loads the
   plugin (so that `qkv test --device cuda` can fork its suites before any
   CUDA call: a CUDA context does not survive a fork) */
void qkvL_set_default_device (qkv_device d) { default_device = d; }

int qkvL_isdevice (lua_State *L, int arg, qkv_device *dev) {
  const char *s = lua_type(L, arg) == LUA_TSTRING ? lua_tostring(L, arg) : NULL;
  if (s == NULL || (strcmp(s, "cpu") != 0 && strcmp(s, "cuda") != 0)) return 0;
  *dev = strcmp(s, "cuda") == 0 ? QKV_CUDA : QKV_CPU;
  return 1;
}

qkv_device qkvL_checkdevice (lua_State *L, int arg) {
  static const char *const names[] = {"cpu", "cuda", NULL};
  return luaL_checkoption(L, arg, NULL, names) ? QKV_CUDA : QKV_CPU;
}


/*
** Options tables: every key is one the function knows, or an error
** naming it and the closest known key, as matplotlib and PyTorch refuse
** an unknown keyword.  One checker for the C bindings (qkvL_checkopts)
** and, through qkv._checkopts (lopts.c), for the Lua library, so that a
** misspelt key reads the same everywhere:
**   attention: unknown option 'casual' (did you mean 'causal'?)
** PyTorch's names for options qkv spells otherwise get a word on the
** difference, where it matters (a mask's polarity).
*/

/* the rule is vm/common/nearest.h's, which the command line shares */
int qkvL_nearer (const char *k, const char *name, int *best) {
  return qkv_nearer(k, name, best);
}

const char *qkvL_closest (const char *k, const char *const *names) {
  return qkv_nearest(k, names);
}

/*
** The name of the table at idx (its string keys; one that starts with '_'
** only for a k that does too) or of extra (NULL-ended, may be NULL) that is closest
** to k, or NULL.  The table is walked raw (no metamethod runs), and in
** its order, so that of two names as near the first of extra wins.
*/
const char *qkvL_suggest (lua_State *L, const char *k, int idx, const char *const *extra) {
  const char *best = extra ? qkvL_closest(k, extra) : NULL;
  int bd = 3;
  if (best) qkvL_nearer(k, best, &bd);
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING && (lua_tostring(L, -1)[0] != '_' || k[0] == '_') &&
        qkvL_nearer(k, lua_tostring(L, -1), &bd))
      best = lua_tostring(L, -1);        /* the table keeps it */
  }
  return best;
}

/*
** The error for reading the name k that the table at idx does not have,
** as a PyTorch user gets an AttributeError rather than nil:
**   qkv has no function 'softmaxx' (did you mean 'softmax'?)
** `who` names the table ("qkv", "qkv.nn"), `what` what it holds; without
** a near name, `none` (may be NULL) says where to look instead.
*/
int qkvL_noname (lua_State *L, const char *who, const char *what, const char *k,
                 int idx, const char *const *extra, const char *none) {
  const char *near = qkvL_suggest(L, k, idx, extra);
  if (near)
    return luaL_error(L, "%s has no %s '%s' (did you mean '%s'?)", who, what, k, near);
  if (none) return luaL_error(L, "%s has no %s '%s' (%s)", who, what, k, none);
  return luaL_error(L, "%s has no %s '%s'", who, what, k);
}

/* PyTorch's (and Hugging Face's) names for what qkv spells otherwise */
static const char *const ALIASES[][3] = {
  {"attn_mask", "mask", "true = may attend, as the boolean attn_mask of "
   "F.scaled_dot_product_attention; nn.MultiheadAttention's attn_mask is the "
   "opposite (true = masked): pass mask = attn_mask:logical_not()"},
  {"need_weights", "weights", "false runs the fused kernel and returns out alone"},
  {"output_attentions", "attentions", NULL},
  {"dropout_p", NULL, "qkv.attention has no dropout: apply qkv.dropout to the weights"},
  {"dropout", NULL, "qkv.attention has no dropout: apply qkv.dropout to the weights"},
};

static int known_key (const char *k, const char *const *known) {
  for (int i = 0; known[i]; i++)
    if (strcmp(k, known[i]) == 0) return 1;
  return 0;
}

/* the message for the unknown key k, pushed */
static const char *unknown (lua_State *L, const char *fname, const char *k,
                            const char *const *known) {
  const char *sep = *fname ? ": " : "";
  for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++) {
    const char *const *a = ALIASES[i];
    if (strcmp(k, a[0]) != 0 || (a[1] && !known_key(a[1], known))) continue;
    if (a[1] == NULL) return lua_pushfstring(L, "%s%sunknown option '%s' (%s)", fname, sep, k,
                                             a[2]);
    if (a[2] == NULL)
      return lua_pushfstring(L, "%s%sunknown option '%s' (qkv's is '%s')", fname, sep, k, a[1]);
    return lua_pushfstring(L, "%s%sunknown option '%s' (qkv's is '%s': %s)", fname, sep, k,
                           a[1], a[2]);
  }
  const char *near = qkvL_closest(k, known);
  if (near) return lua_pushfstring(L, "%s%sunknown option '%s' (did you mean '%s'?)",
                                   fname, sep, k, near);
  return lua_pushfstring(L, "%s%sunknown option '%s'", fname, sep, k);
}

/*
** The message for the first unknown key of the table at arg (in byte
** order, so that it does not depend on the table's layout), pushed, or
** NULL.  The keys are read raw and never converted in place (lua_next
** needs them as they are); a key that is not a string is described by
** its type, with no metamethod run.
*/
const char *qkvL_testopts (lua_State *L, int arg, const char *fname,
                           const char *const *known) {
  int base = lua_gettop(L), bad = 0;
  arg = lua_absindex(L, arg);
  lua_pushnil(L);                        /* base + 1: the first bad key */
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    lua_pop(L, 1);
    int isstr = lua_type(L, -1) == LUA_TSTRING;
    if (isstr && known_key(lua_tostring(L, -1), known)) continue;
    /* strings before other keys, then the least in byte order */
    if (!bad || (isstr && (lua_type(L, base + 1) != LUA_TSTRING ||
                           strcmp(lua_tostring(L, -1), lua_tostring(L, base + 1)) < 0))) {
      lua_pushvalue(L, -1);
      lua_replace(L, base + 1);
      bad = 1;
    }
  }
  if (!bad) { lua_settop(L, base); return NULL; }
  const char *msg, *sep = *fname ? ": " : "";
  if (lua_type(L, base + 1) == LUA_TSTRING)
    msg = unknown(L, fname, lua_tostring(L, base + 1), known);
  else if (lua_type(L, base + 1) == LUA_TNUMBER) {
    lua_pushvalue(L, base + 1);
    msg = lua_pushfstring(L, "%s%sunknown option %s (options are named: {key = value})",
                          fname, sep, lua_tostring(L, -1));
  } else
    msg = lua_pushfstring(L, "%s%sunknown option (a %s key; options are named: "
                          "{key = value})", fname, sep, luaL_typename(L, base + 1));
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return msg;
}

/* arguments past the n a function takes are an error, not ignored (gelu's
   PyTorch option approximate = "tanh" would else give the exact form) */
void qkvL_noextra (lua_State *L, const char *fname, int n) {
  int top = lua_gettop(L);
  while (top > n && lua_isnil(L, top)) top--;
  if (top > n)
    luaL_error(L, "%s: takes %d argument%s, got %d (argument #%d is a %s)", fname, n,
               n == 1 ? "" : "s", top, n + 1, luaL_typename(L, n + 1));
}

void qkvL_checkopts (lua_State *L, int arg, const char *fname, const char *const *known) {
  if (lua_isnoneornil(L, arg)) return;
  if (lua_type(L, arg) != LUA_TTABLE)
    luaL_error(L, "%s: options must be a table, got %s", fname, luaL_typename(L, arg));
  if (qkvL_testopts(L, arg, fname, known)) lua_error(L);
}
