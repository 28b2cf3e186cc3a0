/*
** laux.c -- what every part of the bindings uses to read its arguments,
** as lauxlib.c is to Lua's own libraries: dims, indices, dtypes, devices,
** options tables and lists (with the closest known name for a misspelt
** key; shapes are lauxshape.c's); the error of a qkv status; and the
** registration of a part's functions.  It registers no Lua function of
** its own.
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

int qkvL_checkdim0 (lua_State *L, int arg, int ndim) {
  return qkvL_checkdim(L, arg, ndim ? ndim : 1, 0);
}

int qkvL_optdim0 (lua_State *L, int arg, int ndim, int def) {
  return lua_isnoneornil(L, arg) ? def : qkvL_checkdim0(L, arg, ndim);
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

/*
** Other libraries' spellings of PyTorch's keywords, which no edit
** distance finds (NumPy's axis, keepdims, ddof and linalg.norm's ord):
** the name each stands for, where names has it, is the nearest.
*/
static const char *const SPELLINGS[][2] = {
  {"axis", "dim"}, {"axis", "dims"}, {"axes", "dims"}, {"keepdims", "keepdim"},
  {"ddof", "correction"}, {"ord", "p"},
};

const char *qkvL_closest (const char *k, const char *const *names) {
  for (size_t i = 0; i < sizeof SPELLINGS / sizeof SPELLINGS[0]; i++) {
    if (strcmp(k, SPELLINGS[i][0]) != 0) continue;
    for (int j = 0; names[j]; j++)
      if (strcmp(names[j], SPELLINGS[i][1]) == 0) return names[j];
  }
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
  {"unbiased", "correction", "unbiased = false is correction = 0"},
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

/* whether the key at the top is a string of known or an integer 1..n */
static int good_key (lua_State *L, const char *const *known, lua_Integer n) {
  if (lua_type(L, -1) == LUA_TSTRING) return known && known_key(lua_tostring(L, -1), known);
  if (!lua_isinteger(L, -1)) return 0;
  lua_Integer i = lua_tointeger(L, -1);
  return i >= 1 && i <= n;
}

/*
** The first key of the table at arg that is neither a name of known nor
** an integer 1..n, pushed (1), or nothing pushed (0): strings before
** other keys, then the least in byte order, so that the message does not
** depend on the table's layout.  The keys are read raw and never
** converted in place (lua_next needs them as they are).
*/
static int bad_key (lua_State *L, int arg, const char *const *known, lua_Integer n) {
  int base = lua_gettop(L), bad = 0;
  arg = lua_absindex(L, arg);
  lua_pushnil(L);                        /* base + 1: the first bad key */
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    lua_pop(L, 1);
    if (good_key(L, known, n)) continue;
    int isstr = lua_type(L, -1) == LUA_TSTRING;
    if (!bad || (isstr && (lua_type(L, base + 1) != LUA_TSTRING ||
                           strcmp(lua_tostring(L, -1), lua_tostring(L, base + 1)) < 0))) {
      lua_pushvalue(L, -1);
      lua_replace(L, base + 1);
      bad = 1;
    }
  }
  lua_settop(L, base + bad);
  return bad;
}

/*
** The message for the first unknown key of the table at arg, pushed, or
** NULL; a key that is not a string is described by its type, with no
** metamethod run.
*/
const char *qkvL_testopts (lua_State *L, int arg, const char *fname,
                           const char *const *known) {
  if (!bad_key(L, arg, known, 0)) return NULL;
  const char *msg, *sep = *fname ? ": " : "";
  if (lua_type(L, -1) == LUA_TSTRING)
    msg = unknown(L, fname, lua_tostring(L, -1), known);
  else if (lua_type(L, -1) == LUA_TNUMBER) {
    lua_pushvalue(L, -1);
    msg = lua_pushfstring(L, "%s%sunknown option %s (options are named: {key = value})",
                          fname, sep, lua_tostring(L, -1));
    lua_remove(L, -2);
  } else
    msg = lua_pushfstring(L, "%s%sunknown option (a %s key; options are named: "
                          "{key = value})", fname, sep, luaL_typename(L, -1));
  lua_remove(L, -2);
  return msg;
}

/*
** Lists: the table at arg holds n items, keys 1..n, and the names of
** known (may be NULL) beside them; any other key is the message, pushed,
** for the list that `what` names ("the shape"):
**   zeros: unknown key 'dtyp' in the shape (did you mean 'dtype'?)
**   cat: the list of tensors has key 3 past its 2 items (a nil in it?)
** or NULL.  Like options, the table is walked raw.
*/
const char *qkvL_testlist (lua_State *L, int arg, const char *fname, const char *what,
                           lua_Integer n, const char *const *known) {
  if (!bad_key(L, arg, known, n)) return NULL;
  const char *msg, *sep = *fname ? ": " : "";
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *k = lua_tostring(L, -1), *near = known ? qkvL_closest(k, known) : NULL;
    if (near)
      msg = lua_pushfstring(L, "%s%sunknown key '%s' in %s (did you mean '%s'?)", fname, sep,
                            k, what, near);
    else if (known && known[0]) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      lua_pushfstring(L, "%s%sunknown key '%s' in %s (it takes its items", fname, sep, k, what);
      luaL_addvalue(&b);
      for (int i = 0; known[i]; i++) {
        lua_pushfstring(L, "%s '%s'", known[i + 1] ? "," : " and", known[i]);
        luaL_addvalue(&b);
      }
      luaL_addchar(&b, ')');
      luaL_pushresult(&b);
      msg = lua_tostring(L, -1);
    } else
      msg = lua_pushfstring(L, "%s%sunknown key '%s' in %s (it holds its %I item%s only)",
                            fname, sep, k, what, n, n == 1 ? "" : "s");
  } else if (lua_isinteger(L, -1))
    msg = lua_pushfstring(L, "%s%s%s has key %I past its %I item%s (a nil in the list?)",
                          fname, sep, what, lua_tointeger(L, -1), n, n == 1 ? "" : "s");
  else if (lua_type(L, -1) == LUA_TNUMBER)
    msg = lua_pushfstring(L, "%s%s%s has key %f, not an item's position", fname, sep, what,
                          lua_tonumber(L, -1));
  else
    msg = lua_pushfstring(L, "%s%s%s has a %s key, not an item's position", fname, sep, what,
                          luaL_typename(L, -1));
  lua_remove(L, -2);
  return msg;
}

lua_Integer qkvL_checklist (lua_State *L, int arg, const char *fname, const char *what,
                            const char *const *known) {
  lua_Integer n = luaL_len(L, arg);
  if (qkvL_testlist(L, arg, fname, what, n, known)) luaL_error(L, "%s", lua_tostring(L, -1));
  return n;
}

/* arguments past the n a function takes are an error, not ignored (gelu's
   PyTorch option approximate = "tanh" would else give the exact form) */
const char *qkvL_testextra (lua_State *L, const char *fname, int first, int n) {
  int k = lua_gettop(L) - first + 1;
  while (k > n && lua_isnil(L, first + k - 1)) k--;
  if (k <= n) return NULL;
  return lua_pushfstring(L, "%s: takes %d argument%s, got %d (argument #%d is a %s)", fname, n,
                         n == 1 ? "" : "s", k, n + 1, luaL_typename(L, first + n));
}

void qkvL_noextra (lua_State *L, const char *fname, int n) {
  if (qkvL_testextra(L, fname, 1, n)) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
    lua_error(L);
  }
}

void qkvL_checkopts (lua_State *L, int arg, const char *fname, const char *const *known) {
  if (lua_isnoneornil(L, arg)) return;
  if (lua_type(L, arg) != LUA_TTABLE)
    luaL_error(L, "%s: options must be a table, got %s", fname, luaL_typename(L, arg));
  if (qkvL_testopts(L, arg, fname, known)) lua_error(L);
}
