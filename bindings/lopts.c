/*
** lopts.c -- qkv._checkopts, the Lua library's checker of options tables:
** the same as the C bindings' (qkvL_checkopts, laux.c), so that a
** misspelt key reads the same everywhere; qkv._checklist, its checker of
** lists (qkvL_testlist); qkv._strict, which makes a library's table
** refuse a name it does not have as qkv itself does; qkv._nearest,
** the nearest of a list of names; and qkv._extra, the bindings' check
** of arguments past those a function takes.
*/
#include "lauxqkv.h"

/* the strings of the list at arg (at most 64) into names, NULL-ended */
static void names_of (lua_State *L, int arg, const char **names) {
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  luaL_argcheck(L, n <= 64, arg, "at most 64 keys");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, arg, i);
    luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, arg, "a list of strings expected");
    names[i - 1] = lua_tostring(L, -1);   /* the list keeps the string */
    lua_pop(L, 1);
  }
  names[n] = NULL;
}

/*
** qkv._checkopts(fname, opts, known [, flags]) -> the message for opts'
** first unknown key, or for a key of flags whose value is neither nil nor
** a boolean (the Lua library raises it at its caller's line); or nil and
** a plain table of the known keys, each read from opts once (its
** metamethods run here), so that what is checked is what is used.
*/
static int o_checkopts (lua_State *L) {
  const char *fname = luaL_checkstring(L, 1);
  const char *known[65], *flags[65] = {NULL};
  names_of(L, 3, known);
  if (!lua_isnoneornil(L, 4)) names_of(L, 4, flags);
  if (!lua_isnil(L, 2) && lua_type(L, 2) != LUA_TTABLE) {
    lua_pushfstring(L, "%s: options must be a table, got %s", fname, luaL_typename(L, 2));
    return 1;
  }
  if (!lua_isnil(L, 2) && qkvL_testopts(L, 2, fname, known) != NULL) return 1;
  int snap = lua_gettop(L) + 2;
  lua_pushnil(L);
  lua_createtable(L, 0, 8);
  for (int i = 0; known[i] && !lua_isnil(L, 2); i++) {
    lua_getfield(L, 2, known[i]);
    lua_setfield(L, snap, known[i]);
  }
  for (int i = 0; flags[i]; i++) {
    int t = lua_getfield(L, snap, flags[i]);
    if (t != LUA_TNIL && t != LUA_TBOOLEAN) {
      lua_pushfstring(L, "%s: option '%s' must be a boolean, got %s", fname, flags[i],
                      lua_typename(L, t));
      return 1;
    }
    lua_pop(L, 1);
  }
  return 2;
}

/*
** qkv._checklist(fname, t, what [, known]) -> the message for a key of
** the list t that is neither one of its items 1..#t (its raw length) nor
** a name of known, or nil: the C bindings' check of lists
** (qkvL_testlist), for the Lua library's.
*/
static int o_checklist (lua_State *L) {
  const char *fname = luaL_checkstring(L, 1), *what = luaL_checkstring(L, 3);
  const char *known[65] = {NULL};
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 4)) names_of(L, 4, known);
  if (qkvL_testlist(L, 2, fname, what, (lua_Integer)lua_rawlen(L, 2), known) == NULL)
    lua_pushnil(L);
  return 1;
}

/* t.k for a k that t does not have: the error naming the nearest name
   (upvalues: the table's name and what it holds); '_' names stay nil */
static int strict_index (lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING || lua_tostring(L, 2)[0] == '_') return 0;
  const char *who = lua_tostring(L, lua_upvalueindex(1));
  lua_pushfstring(L, "help(%s) lists what it has", who);
  return qkvL_noname(L, who, lua_tostring(L, lua_upvalueindex(2)), lua_tostring(L, 2), 1,
                     NULL, lua_tostring(L, -1));
}

/*
** qkv._strict(t, name [, what]) -> t: reading a public name that t does
** not have is an error, "qkv.plot has no function 'line'", with the
** nearest name t has (what: "function" unless given).  t must have no
** metatable yet: one is set.
*/
static int o_strict (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checkstring(L, 2);
  const char *what = luaL_optstring(L, 3, "function");
  luaL_argcheck(L, lua_getmetatable(L, 1) == 0, 1, "the table has a metatable already");
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 2);
  lua_pushstring(L, what);
  lua_pushcclosure(L, strict_index, 2);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, 1);
  lua_settop(L, 1);
  return 1;
}

/*
** qkv._nearest(k, names) -> the name of the list names nearest to k, as
** an options table's did-you-mean finds it (within two edits, one per
** four letters of k), or nil: for the command lines written in Lua
** (qkv test, qkv kernel), as vm/cli's own options use the same rule.
*/
static int o_nearest (lua_State *L) {
  const char *k = luaL_checkstring(L, 1), *names[65];
  names_of(L, 2, names);
  const char *near = qkvL_closest(k, names);
  if (near) lua_pushstring(L, near);
  else lua_pushnil(L);
  return 1;
}

/*
** qkv._extra(fname, n, ...) -> the message for an argument past the n
** that fname takes (trailing nils do not count), as the bindings'
** qkvL_noextra words it, or nothing: the Lua library raises it at its
** caller's line.
*/
static int o_extra (lua_State *L) {
  const char *fname = luaL_checkstring(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0 && n <= 64, 2, "0 to 64 expected");
  return qkvL_testextra(L, fname, 3, (int)n) != NULL;
}

void qkvL_open_opts (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {{"_checkopts", o_checkopts}, {"_checklist", o_checklist},
                                   {"_strict", o_strict}, {"_nearest", o_nearest}, {"_extra", o_extra},
                                   {NULL, NULL}};
  qkvL_register(L, methods, module, NULL, NULL, mod);
  (void)mt;
}
