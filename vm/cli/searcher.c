/*
** searcher.c -- how the executable finds qkv's own modules: a searcher
** put in package.searchers right after the preload one.  It looks beside
** the executable, in the build tree's layout (build/qkv, stdlib/, the
** chunks make precompiled in build/luac/, the C submodules in build/lib/)
** and in an install's (PREFIX/bin/qkv, PREFIX/share/lua/5.4/,
** PREFIX/lib/lua/5.4/), so qkv's library loads whatever LUA_PATH and
** LUA_CPATH say, while package.path and package.cpath stay what lua5.4
** makes of them.  It answers for qkv's names ("qkv", "qkv.*"), and lists
** where it looked when it finds nothing; any other name it leaves to
** Lua's searchers without a word (only qkv's stdlib/ folder is tried for
** it: a bundle keeps luaunit.lua there), so a failed require lists
** exactly what lua5.4 lists.
*/
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <lua.h>
#include <lauxlib.h>

#include "searcher.h"

/* the upvalues: the executable's folder, the folder above it, loadlib */
#define BINDIR lua_upvalueindex(1)
#define ROOT lua_upvalueindex(2)
#define LOADLIB lua_upvalueindex(3)

/* where a module may be: a template (? is the name with '/' for '.'),
   relative to BINDIR or ROOT, a C library or not, for qkv's names only */
static const struct place {
  int inroot, isc, qkvonly;
  const char *tmpl;
} places[] = {
  {1, 0, 0, "/stdlib/?.lua"},
  {1, 0, 0, "/stdlib/?/init.lua"},
  {1, 0, 1, "/share/lua/5.4/?.lua"},
  {1, 0, 1, "/share/lua/5.4/?/init.lua"},
  {0, 1, 1, "/lib/?.so"},
  {1, 1, 1, "/lib/lua/5.4/?.so"},
};

static int isqkv (const char *name) {
  return strcmp(name, "qkv") == 0 || strncmp(name, "qkv.", 4) == 0;
}

static int readable (const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  fclose(f);
  return 1;
}

/* whether file a was modified after file b */
static int newer (const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 1;
  if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec) return sa.st_mtim.tv_sec > sb.st_mtim.tv_sec;
  return sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec;
}

/* as Lua's own searchers: a file found that does not load is an error */
static int loaded (lua_State *L, int ok, const char *name, const char *path) {
  if (!ok)
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s",
                      name, path, lua_tostring(L, -1));
  lua_pushstring(L, path);
  return 2;
}

/* C: luaopen_qkv_cairo from build/lib/qkv/cairo.so, through package.loadlib */
static int loadc (lua_State *L, const char *name, const char *path) {
  lua_pushvalue(L, LOADLIB);
  lua_pushstring(L, path);
  lua_pushfstring(L, "luaopen_%s", luaL_gsub(L, name, ".", "_"));
  lua_remove(L, -2);
  lua_call(L, 2, 2);                   /* the function, or nil and why */
  if (lua_isnil(L, -2)) lua_remove(L, -2);
  else lua_pop(L, 1);
  return loaded(L, lua_isfunction(L, -1), name, path);
}

/*
** The chunk that make precompiled with luac (build/luac/qkv/einsum.luac,
** or for a folder's module build/luac/qkv/plot/init.luac) when it is not
** older than its source, which skips parsing (1 ms of a script that draws
** a figure); a missing or stale one is passed over.  Returns 2 (the chunk
** and its source's path) or 0.
*/
static int compiled (lua_State *L, const char *name, const char *rel) {
  const char *src = lua_pushfstring(L, "%s/stdlib/%s.lua", lua_tostring(L, ROOT), rel);
  const char *bin = lua_pushfstring(L, "%s/luac/%s.luac", lua_tostring(L, BINDIR), rel);
  if (!readable(src) || !readable(bin) || newer(src, bin)) {
    lua_pop(L, 2);
    return 0;
  }
  int ok = luaL_loadfilex(L, bin, "b") == LUA_OK;
  return loaded(L, ok, name, ok ? src : bin);
}

static int search (lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *rel = luaL_gsub(L, name, ".", "/");
  int mine = isqkv(name), tried = 0;
  if (compiled(L, name, rel)) return 2;
  if (compiled(L, name, lua_pushfstring(L, "%s/init", rel))) return 2;
  lua_pop(L, 1);
  for (size_t i = 0; i < sizeof places / sizeof *places; i++) {
    const struct place *p = &places[i];
    if (p->qkvonly && !mine) continue;
    lua_pushvalue(L, p->inroot ? ROOT : BINDIR);
    luaL_gsub(L, p->tmpl, "?", rel);
    lua_concat(L, 2);
    const char *path = lua_tostring(L, -1);
    if (readable(path)) {
      if (p->isc) return loadc(L, name, path);
      return loaded(L, luaL_loadfilex(L, path, NULL) == LUA_OK, name, path);
    }
    lua_pushfstring(L, "%sno file '%s'", tried++ ? "\n\t" : "", path);
    lua_remove(L, -2);
  }
  if (!mine) return 0;   /* other names: nothing added to require's message */
  lua_concat(L, tried);
  return 1;
}

void cli_searcher (lua_State *L, const char *exe) {
  const char *slash = strrchr(exe, '/');
  if (slash == NULL) return;
  lua_pushlstring(L, exe, (size_t)(slash - exe));         /* build */
  const char *up = slash;
  while (up > exe && *--up != '/') {}
  lua_pushlstring(L, exe, (size_t)(up - exe));            /* its parent */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loadlib");
  lua_replace(L, -2);
  lua_pushcclosure(L, search, 3);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchers");
  for (lua_Integer i = luaL_len(L, -1); i >= 2; i--) {   /* make room at 2 */
    lua_geti(L, -1, i);
    lua_seti(L, -2, i + 1);
  }
  lua_pushvalue(L, -3);
  lua_seti(L, -2, 2);
  lua_pop(L, 3);
}
