/*
** lauxshape.c -- shapes as the bindings read them: sizes as numbers or as
** one table, then a dtype and a device, as strings or as an options table
** (PyTorch's keywords: qkv.zeros(2, 3, {dtype = "float64"})).  A shape
** table is a list of sizes which may also hold, where the function takes
** them, its list under a name (PyTorch's size=: qkv.zeros{size = {2, 3}}),
** a dtype and a device (qkv.zeros{2, 3, dtype = "float64"}); any other
** key is an error naming the closest (laux.c's lists and options), never
** ignored.  It registers no Lua function.
*/
#include "lauxqkv.h"

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

static const char *valuename (lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : luaL_typename(L, idx);
}

/* the dtype at idx, which is given twice when `got` has it already */
static void set_dtype (lua_State *L, int idx, int arg, qkv_dtype *dt, int *got) {
  if (*got & QKVL_GOT_DTYPE) luaL_argerror(L, arg, "the dtype is given twice");
  *dt = qkvL_checkdtype(L, idx);
  *got |= QKVL_GOT_DTYPE;
}

static void set_device (lua_State *L, int arg, qkv_device d, qkv_device *dev, int *got) {
  if (*got & QKVL_GOT_DEVICE) luaL_argerror(L, arg, "the device is given twice");
  *dev = d;
  *got |= QKVL_GOT_DEVICE;
}

/* t[k] read raw, pushed: what the check of t's keys saw */
static int rawfield (lua_State *L, int idx, const char *k) {
  idx = lua_absindex(L, idx);
  lua_pushstring(L, k);
  return lua_rawget(L, idx);
}

int qkvL_tableopts (lua_State *L, int idx, int arg, qkv_dtype *dt, qkv_device *dev,
                    int got) {
  idx = lua_absindex(L, idx);
  if (dt) {
    if (rawfield(L, idx, "dtype") != LUA_TNIL) {
      qkv_dtype t;
      if (lua_type(L, -1) != LUA_TSTRING || !qkv_dtype_from_name(lua_tostring(L, -1), &t))
        luaL_argerror(L, arg, lua_pushfstring(L, "option 'dtype' must be a dtype name "
                      "(float32, float64, float16, bfloat16, int64, int32, bool), got %s",
                      valuename(L, -1)));
      set_dtype(L, -1, arg, dt, &got);
    }
    lua_pop(L, 1);
  }
  if (dev) {
    qkv_device d;
    if (rawfield(L, idx, "device") != LUA_TNIL) {
      if (!qkvL_isdevice(L, -1, &d))
        luaL_argerror(L, arg, lua_pushfstring(L, "option 'device' must be \"cpu\" or "
                      "\"cuda\", got %s", valuename(L, -1)));
      set_device(L, arg, d, dev, &got);
    }
    lua_pop(L, 1);
  }
  return got;
}

/*
** What follows the other arguments, from arg on: a dtype and a device
** (strings, either first, as the function takes them: dt or dev NULL, not
** taken), then an options table {dtype =, device =}.  What `got` says was
** given already may not be given again; anything else left over, but
** trailing nils, is an error (`sizes`: a size could have come there too).
*/
static int tail (lua_State *L, int arg, qkv_dtype *dt, qkv_device *dev, int got, int sizes) {
  int top = lua_gettop(L);
  qkv_device d;
  while (top >= arg && lua_isnil(L, top)) top--;
  for (int i = 0; i < 2 && arg <= top && lua_type(L, arg) == LUA_TSTRING; i++, arg++) {
    qkv_dtype t;
    if (dev && qkvL_isdevice(L, arg, &d)) set_device(L, arg, d, dev, &got);
    else if (dt && (!(got & QKVL_GOT_DTYPE) || qkv_dtype_from_name(lua_tostring(L, arg), &t)))
      set_dtype(L, arg, arg, dt, &got);
    else break;                           /* "tpu" after a dtype: not a dtype again */
  }
  if ((dt || dev) && arg == top && lua_type(L, arg) == LUA_TTABLE) {
    const char *known[3];
    int k = 0;
    if (dt) known[k++] = "dtype";
    if (dev) known[k++] = "device";
    known[k] = NULL;
    if (qkvL_testopts(L, arg, "", known)) luaL_argerror(L, arg, lua_tostring(L, -1));
    return qkvL_tableopts(L, arg, arg, dt, dev, got);
  }
  if (arg <= top) {
    const char *want = dev ? (sizes ? "size, dtype or device" : "dtype or device")
                     : dt ? (sizes ? "size or dtype" : "dtype") : sizes ? "size" : "nothing";
    luaL_argerror(L, arg, lua_pushfstring(L, "%s expected, got %s", want,
                                          luaL_typename(L, arg)));
  }
  return got;
}

int qkvL_checktail (lua_State *L, int arg, qkv_dtype *dt, qkv_device *dev, int got) {
  return tail(L, arg, dt, dev, got, 0);
}

/*
** The sizes of the shape table at arg into size (-1 allowed when infer):
** its items, or (key not NULL) the list under its key; its dtype and
** device where dt and dev are given (*got says which it held).
*/
static int table_sizes (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                        qkv_device *dev, const char *key, int infer, int *got) {
  const char *known[4];
  int k = 0, n, list = arg, top = lua_gettop(L);
  if (key) known[k++] = key;
  if (dt) known[k++] = "dtype";
  if (dev) known[k++] = "device";
  known[k] = NULL;
  lua_Integer len = luaL_len(L, arg);
  if (qkvL_testlist(L, arg, "", "the shape", len, known))
    luaL_argerror(L, arg, lua_tostring(L, -1));
  if (key && rawfield(L, arg, key) != LUA_TNIL) {
    if (len > 0)
      luaL_argerror(L, arg, lua_pushfstring(L, "the sizes are given twice, as items and as "
                    "'%s'", key));
    if (lua_type(L, -1) != LUA_TTABLE)
      luaL_argerror(L, arg, lua_pushfstring(L, "'%s' must be a table of sizes, got %s", key,
                    luaL_typename(L, -1)));
    list = lua_gettop(L);
    len = luaL_len(L, list);
    if (qkvL_testlist(L, list, "", lua_pushfstring(L, "'%s'", key), len, NULL))
      luaL_argerror(L, arg, lua_tostring(L, -1));
  }
  luaL_argcheck(L, len <= QKV_MAXDIM, arg, "more than 8 dims");
  for (n = 0; n < len; n++) {
    lua_geti(L, list, n + 1);
    size[n] = checksize(L, -1, arg, infer);
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  *got = qkvL_tableopts(L, arg, arg, dt, dev, 0);
  return n;
}

/*
** Sizes as numbers or one table from `arg` on (with `one`, `arg` alone
** holds them), then, `skip` arguments further, the dtype and device where
** dt and dev are given; -1 (when infer) marks a size to infer.
*/
static int parse_sizes (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                        qkv_device *dev, const char *key, int infer, int one, int skip) {
  int n = 0, got = 0, more = 0, top = lua_gettop(L);
  if (lua_type(L, arg) == LUA_TTABLE)
    n = table_sizes(L, arg++, size, dt, dev, key, infer, &got);
  else if (one) {
    size[n++] = checksize(L, arg, arg, infer);
    arg++;
  } else {
    for (; arg <= top && lua_type(L, arg) == LUA_TNUMBER; arg++, n++) {
      luaL_argcheck(L, n < QKV_MAXDIM, arg, "more than 8 dims");
      size[n] = checksize(L, arg, arg, infer);
    }
    more = 1;
  }
  tail(L, arg + skip, dt, dev, got, more);
  return n;
}

int qkvL_checkshape (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                     qkv_device *dev, const char *key) {
  if (dev) *dev = qkvL_default_device();
  return parse_sizes(L, arg, size, dt, dev, key, 0, 0, 0);
}

int qkvL_checkshapearg (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                        qkv_device *dev, int skip) {
  if (dev) *dev = qkvL_default_device();
  return parse_sizes(L, arg, size, dt, dev, "size", 0, 1, skip);
}

int qkvL_checksizes (lua_State *L, int arg, int64_t *size, const char *key) {
  return parse_sizes(L, arg, size, NULL, NULL, key, 1, 0, 0);
}
