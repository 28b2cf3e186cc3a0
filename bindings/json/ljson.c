/*
** ljson.c -- the module qkv.json: JSON text to Lua values through Debian's
** libcjson.  Loaded only by what reads JSON (qkv.bert's config.json), so
** that no script pays for it at start-up.
**   json.decode(text [, what [, unique]]) -> the value: objects become
**       tables keyed by name, arrays sequences, true/false booleans, null
**       json.null, numbers integers when they are whole and fit, else
**       floats; a name repeated in one object is an error when unique is
**       true (else the last wins)
**   json.null                 -> the light userdata null decodes to
** what names the text in errors ("config.json"); the default is "text".
*/
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <lua.h>
#include <lauxlib.h>


#define TREE "qkv.jsontree"

LUALIB_API int luaopen_qkv_json (lua_State *L);

/* the tree lives in a userdata, so that a Lua error while it is turned
   into tables (a memory error) cannot leak it */
static int tree_gc (lua_State *L) {
  cJSON **t = (cJSON **)luaL_checkudata(L, 1, TREE);
  if (*t) cJSON_Delete(*t);
  *t = NULL;
  return 0;
}

static void pushnumber (lua_State *L, double d) {
  /* whole numbers within the exactly representable range stay integers */
  if (d == floor(d) && fabs(d) <= 9007199254740992.0) lua_pushinteger(L, (lua_Integer)d);
  else lua_pushnumber(L, d);
}

typedef struct Opts { const char *what; int unique; } Opts;

static void push (lua_State *L, const cJSON *j, const Opts *o) {
  luaL_checkstack(L, 4, "json.decode: nested too deep");
  if (cJSON_IsObject(j)) {
    lua_createtable(L, 0, cJSON_GetArraySize(j));
    for (const cJSON *c = j->child; c; c = c->next) {
      if (o->unique && lua_getfield(L, -1, c->string) != LUA_TNIL)
        luaL_error(L, "json.decode: %s has the name \"%s\" twice in one object", o->what,
                   c->string);
      if (o->unique) lua_pop(L, 1);
      push(L, c, o);
      lua_setfield(L, -2, c->string);     /* a repeated name: the last wins */
    }
  } else if (cJSON_IsArray(j)) {
    lua_Integer i = 0;
    lua_createtable(L, cJSON_GetArraySize(j), 0);
    for (const cJSON *c = j->child; c; c = c->next) {
      push(L, c, o);
      lua_rawseti(L, -2, ++i);
    }
  } else if (cJSON_IsString(j)) lua_pushstring(L, j->valuestring);
  else if (cJSON_IsNumber(j)) pushnumber(L, j->valuedouble);
  else if (cJSON_IsBool(j)) lua_pushboolean(L, cJSON_IsTrue(j));
  else lua_pushlightuserdata(L, NULL);      /* null */
}

static int decode (lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  Opts o = {luaL_optstring(L, 2, "text"), lua_toboolean(L, 3)};
  const char *what = o.what;
  cJSON **t = (cJSON **)lua_newuserdatauv(L, sizeof *t, 0);
  *t = NULL;
  luaL_setmetatable(L, TREE);
  const char *end = NULL;
  *t = cJSON_ParseWithLengthOpts(s, n, &end, 0);
  if (*t == NULL) {
    size_t at = end && end >= s && end <= s + n ? (size_t)(end - s) : 0;
    return luaL_error(L, "json.decode: %s is not valid JSON (at byte %d of %d)", what,
                      (int)(at + 1), (int)n);
  }
  while (end < s + n && strchr(" \t\r\n", *end) && *end) end++;
  if (end < s + n)
    return luaL_error(L, "json.decode: %s has bytes after its JSON value (at byte %d)", what,
                      (int)(end - s + 1));
  push(L, *t, &o);
  lua_pushcfunction(L, tree_gc);      /* free the tree now, not at the next cycle */
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  return 1;
}

LUALIB_API int luaopen_qkv_json (lua_State *L) {
  luaL_newmetatable(L, TREE);
  lua_pushcfunction(L, tree_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushcfunction(L, decode);
  lua_setfield(L, -2, "decode");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
