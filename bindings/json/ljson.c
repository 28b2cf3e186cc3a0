/*
** ljson.c -- the module qkv.json: JSON text to Lua values through Debian's
** libcjson.  Loaded only by what reads JSON (qkv.bert's config.json), so
** that no script pays for it at start-up.
**   json.decode(text [, what [, unique]]) -> the value: objects become
**       tables keyed by name, arrays sequences, true/false booleans, null
**       json.null, numbers integers when they are whole and below 2^53
**       (past it the text may have held another whole number), else
**       floats (-0 too); a name repeated in one object is an error when unique is
**       true (else the last wins), and so is a string with a NUL byte
**   json.encode(value) -> compact JSON text: tables with keys 1..n (n > 0)
**       or marked by json.array(t) are arrays, other tables objects (their
**       keys strings with no NUL, written sorted), json.null and nil null; invalid
**       UTF-8 in strings becomes U+FFFD; NaN, inf, cycles and other
**       types are errors
**   json.array(t) -> t, marked to encode as an array even when empty
**   json.null                 -> the light userdata null decodes to
** what names the text in errors ("config.json"); the default is "text".
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../../vm/core/utf8.h"

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
  /* whole numbers below 2^53 stay integers: the text went through a double
     (cJSON's), so from 2^53 on it may have been another whole number
     (9007199254740993 reads as ...992), which a float says; -0 stays -0.0 */
  if (d == floor(d) && fabs(d) < 9007199254740992.0 && !(d == 0 && signbit(d)))
    lua_pushinteger(L, (lua_Integer)d);
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

/*
** libcjson keeps strings as C strings, so a NUL byte in one (raw or
** written \u0000) would cut it short: "a\u0000b" read as "a".  The first
** string of the parsed text t[0..n) that holds one, as the text writes it
** (cut at 60 bytes), pushed with whether it is an object's name; returns
** where it starts (the 1-based byte of its opening quote), or -1.
*/
static int64_t nul_string (lua_State *L, const char *t, size_t n, int *is_name) {
  for (size_t i = 0; i < n; i++) {
    if (t[i] != '"') continue;
    size_t b = ++i;
    int nul;
    i = (size_t)(qkv_json_string_end(t + i, t + n, &nul) - t);
    if (!nul) continue;
    luaL_Buffer buf;
    luaL_buffinit(L, &buf);
    for (size_t k = b; k < i && k < b + 60; k++)
      if (t[k] == '\0') luaL_addstring(&buf, "\\u0000");
      else luaL_addchar(&buf, t[k]);
    if (i > b + 60) luaL_addstring(&buf, "...");
    luaL_pushresult(&buf);
    size_t after = i + 1;
    while (after < n && (unsigned char)t[after] <= 32) after++;
    *is_name = after < n && t[after] == ':';
    return (int64_t)b;
  }
  return -1;
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
  int is_name;
  int64_t at = nul_string(L, s, (size_t)(end - s), &is_name);
  if (at >= 0)
    return luaL_error(L, "json.decode: %s has a NUL byte in the %s \"%s\" (at byte %I)", what,
                      is_name ? "name" : "string", lua_tostring(L, -1), (lua_Integer)at);
  push(L, *t, &o);
  lua_pushcfunction(L, tree_gc);      /* free the tree now, not at the next cycle */
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  return 1;
}

/* encoding */

#define ARRAY "qkv.jsonarray"
#define MAXDEPTH 200

/* s as valid UTF-8 (bad bytes as U+FFFD), pushed */
static const char *utf8_clean (lua_State *L, const char *s, size_t n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = u[i] == 0 ? 0 : qkv_utf8_seq(u + i, n - i);   /* NUL too: cJSON ends there */
    if (k) luaL_addlstring(&b, s + i, k), i += k;
    else luaL_addstring(&b, "\xEF\xBF\xBD"), i++;           /* U+FFFD */
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static int is_array (lua_State *L, int t) {
  if (lua_getmetatable(L, t)) {
    luaL_getmetatable(L, ARRAY);
    int marked = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (marked) return 1;
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, t), keys = 0;
  if (n == 0) return 0;
  lua_pushnil(L);
  while (lua_next(L, t)) { keys++; lua_pop(L, 1); }
  return keys == n;
}

static int by_string (const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void add (lua_State *L, int i, int depth, cJSON *parent, const char *key);

/* attaches c to parent (under key, or at the end of an array) at once, so
   that the tree owns every node before anything can raise an error */
static cJSON *attach (lua_State *L, cJSON *parent, const char *key, cJSON *c) {
  if (c == NULL) luaL_error(L, "json.encode: out of memory");
  if (key) cJSON_AddItemToObject(parent, key, c);
  else cJSON_AddItemToArray(parent, c);
  return c;
}

static void add_object (lua_State *L, int t, int depth, cJSON *o) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "json.encode: an object's keys must be strings, got %s", luaL_typename(L, -1));
    size_t len;                       /* (the keys go on as C strings: one cut at a NUL
                                         lost its value to null) */
    const char *key = lua_tolstring(L, -1, &len);
    if (strlen(key) != len) luaL_error(L, "json.encode: an object's key holds a NUL byte");
    n++;
  }
  const char **keys = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *keys, 0);
  int k = 0;
  lua_pushnil(L);
  while (k < n && lua_next(L, t)) { keys[k++] = lua_tostring(L, -2); lua_pop(L, 1); }
  if (k == n && n > 0) lua_pop(L, 1);               /* the key lua_next left */
  qsort(keys, (size_t)k, sizeof *keys, by_string);
  for (int j = 0; j < k; j++) {
    lua_pushstring(L, keys[j]);
    lua_rawget(L, t);
    const char *clean = utf8_clean(L, keys[j], strlen(keys[j]));
    add(L, lua_gettop(L) - 1, depth + 1, o, clean);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
}

static void add (lua_State *L, int i, int depth, cJSON *parent, const char *key) {
  luaL_checkstack(L, 8, "json.encode: nested too deep");
  if (depth > MAXDEPTH) luaL_error(L, "json.encode: nested deeper than %d (a cycle?)", MAXDEPTH);
  switch (lua_type(L, i)) {
    case LUA_TNIL: attach(L, parent, key, cJSON_CreateNull()); return;
    case LUA_TBOOLEAN: attach(L, parent, key, cJSON_CreateBool(lua_toboolean(L, i))); return;
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, i) != NULL) break;
      attach(L, parent, key, cJSON_CreateNull());
      return;
    case LUA_TNUMBER: {
      char buf[40];
      if (lua_isinteger(L, i)) snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, i));
      else {
        double d = lua_tonumber(L, i);
        if (!isfinite(d)) luaL_error(L, "json.encode: %f is not a JSON number", d);
        for (int prec = 15; prec <= 17; prec++) {      /* the shortest that reads back */
          snprintf(buf, sizeof buf, "%.*g", prec, d);
          if (strtod(buf, NULL) == d) break;
        }
        if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
      }
      attach(L, parent, key, cJSON_CreateRaw(buf));
      return;
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, i, &n);
      attach(L, parent, key, cJSON_CreateString(utf8_clean(L, s, n)));
      lua_pop(L, 1);
      return;
    }
    case LUA_TTABLE: {
      int t = lua_absindex(L, i);
      if (!is_array(L, t)) {
        add_object(L, t, depth, attach(L, parent, key, cJSON_CreateObject()));
        return;
      }
      cJSON *a = attach(L, parent, key, cJSON_CreateArray());
      lua_Integer n = (lua_Integer)lua_rawlen(L, t);
      for (lua_Integer j = 1; j <= n; j++) {
        lua_rawgeti(L, t, j);
        add(L, lua_gettop(L), depth + 1, a, NULL);
        lua_pop(L, 1);
      }
      return;
    }
    default: break;
  }
  luaL_error(L, "json.encode: cannot encode a %s", luaL_typename(L, i));
}

/* the value is built under a root array that a userdata owns, so that an
   error anywhere frees the whole tree */
static int encode (lua_State *L) {
  lua_settop(L, 1);
  cJSON **t = (cJSON **)lua_newuserdatauv(L, sizeof *t, 0);
  *t = NULL;
  luaL_setmetatable(L, TREE);
  if ((*t = cJSON_CreateArray()) == NULL) return luaL_error(L, "json.encode: out of memory");
  add(L, 1, 0, *t, NULL);
  char *text = cJSON_PrintUnformatted(cJSON_GetArrayItem(*t, 0));
  if (text == NULL) return luaL_error(L, "json.encode: out of memory");
  lua_pushstring(L, text);
  cJSON_free(text);
  return 1;
}

static int array (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, ARRAY);
  return 1;
}

LUALIB_API int luaopen_qkv_json (lua_State *L) {
  luaL_newmetatable(L, TREE);
  lua_pushcfunction(L, tree_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, ARRAY);
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushcfunction(L, decode);
  lua_setfield(L, -2, "decode");
  lua_pushcfunction(L, encode);
  lua_setfield(L, -2, "encode");
  lua_pushcfunction(L, array);
  lua_setfield(L, -2, "array");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
