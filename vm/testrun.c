/*
** testrun.c -- `qkv test`: runs LuaUnit suites.  The runner itself is Lua
** (stdlib/qkv/testrun.lua, in a state of its own); this file gives it what
** Lua cannot do: list folders, and run one suite file in a brand-new state
** in this process, handing back the suite's results as plain tables.
*/
#include <dirent.h>
#include <locale.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <lua.h>
#include <lauxlib.h>

#include "qkv.h"
#include "cli.h"

#define MAXCOPY 8   /* deepest table handed from one state to the other */

/* the generator's seed at start-up, given back to every suite */
static uint64_t start_seed;

/*
** Copies the value at `idx` of `from` onto the stack of `to`: nil,
** booleans, numbers, strings and tables of those; anything else (and
** tables deeper than MAXCOPY) arrive as nil.
*/
static void copyvalue (lua_State *from, int idx, lua_State *to, int depth) {
  luaL_checkstack(to, 3, "copying a suite's results");
  idx = lua_absindex(from, idx);
  switch (lua_type(from, idx)) {
    case LUA_TBOOLEAN: lua_pushboolean(to, lua_toboolean(from, idx)); break;
    case LUA_TNUMBER:
      if (lua_isinteger(from, idx)) lua_pushinteger(to, lua_tointeger(from, idx));
      else lua_pushnumber(to, lua_tonumber(from, idx));
      break;
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(from, idx, &n);
      lua_pushlstring(to, s, n);
      break;
    }
    case LUA_TTABLE:
      if (depth < MAXCOPY && lua_checkstack(from, 3)) {
        lua_newtable(to);
        lua_pushnil(from);
        while (lua_next(from, idx)) {
          int kt = lua_type(from, -2);
          if (kt == LUA_TSTRING || kt == LUA_TNUMBER) {
            copyvalue(from, -2, to, depth + 1);
            copyvalue(from, -1, to, depth + 1);
            lua_rawset(to, -3);
          }
          lua_pop(from, 1);
        }
        break;
      }
      /* FALLTHROUGH */
    default: lua_pushnil(to); break;
  }
}

/* interrupted() -> boolean: Ctrl-C was pressed during this suite */
static int t_interrupted (lua_State *S) {
  lua_pushboolean(S, qkv_interrupted != 0);
  return 1;
}

/* the suite's driver, in Lua so that it is loaded in the suite's state */
static const char driver[] =
  "local path, args, interrupted = ...\n"
  "return require('qkv.testrun').suite(path, args, interrupted)";

/*
** Runs in the suite's state, under cli_docall: sets `arg` (arg[-1] the
** executable as invoked, arg[0] the file, then the LuaUnit options) and
** calls the driver.  The driver's own failure becomes {error=, aborted=true};
** the Ctrl-C flag is read here, before cli_docall clears it.
*/
static int suitemain (lua_State *S) {
  lua_State *L = (lua_State *)lua_touserdata(S, 1);
  const char *path = lua_tostring(L, 1);
  copyvalue(L, 2, S, 0);
  int args = lua_gettop(S);
  lua_Integer n = luaL_len(S, args);
  lua_createtable(S, (int)n, 2);
  lua_pushstring(S, cli_progname);
  lua_rawseti(S, -2, -1);
  lua_pushstring(S, path);
  lua_rawseti(S, -2, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(S, args, i);
    lua_rawseti(S, -2, i);
  }
  lua_setglobal(S, "arg");
  luaL_loadbuffer(S, driver, sizeof driver - 1, "=(qkv test)");
  lua_pushstring(S, path);
  lua_pushvalue(S, args);
  lua_pushcfunction(S, t_interrupted);
  int status = lua_pcall(S, 3, 1, 0);
  int interrupted = qkv_interrupted != 0;
  if (status != LUA_OK || !lua_istable(S, -1)) {
    const char *msg = lua_tostring(S, -1);
    lua_createtable(S, 0, 3);
    lua_pushstring(S, msg ? msg : "the suite's driver gave no results");
    lua_setfield(S, -2, "error");
    lua_pushboolean(S, 1);
    lua_setfield(S, -2, "aborted");
  }
  lua_pushboolean(S, interrupted);
  lua_setfield(S, -2, "interrupted");
  return 1;
}

/*
** runsuite(path, args) -> results: the file in a fresh state, with the
** process-wide state a suite could change (the generator, the locale) put
** back as it was at start-up, so results never depend on the order.
*/
static int t_runsuite (lua_State *L) {
  luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  lua_State *S = cli_newstate();
  if (S == NULL) return luaL_error(L, "cannot create a Lua state for a suite");
  qkv_seed(start_seed);
  fflush(stdout);
  lua_pushcfunction(S, suitemain);
  lua_pushlightuserdata(S, L);
  int status = cli_docall(S, 1, 1);
  fflush(stdout);
  if (status == LUA_OK) copyvalue(S, -1, L, 0);
  else {
    lua_createtable(L, 0, 2);
    const char *msg = lua_tostring(S, -1);
    lua_pushstring(L, msg ? msg : "(error object is not a string)");
    lua_setfield(L, -2, "error");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "aborted");
  }
  lua_close(S);
  setlocale(LC_ALL, "C");
  return 1;
}

/* kind(path) -> "file" | "directory" | "other", or nil, message */
static int t_kind (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) return luaL_fileresult(L, 0, path);
  lua_pushstring(L, S_ISDIR(st.st_mode) ? "directory"
                  : S_ISREG(st.st_mode) ? "file" : "other");
  return 1;
}

/* listdir(path) -> the names in a folder (not . and ..), or nil, message */
static int t_listdir (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (d == NULL) return luaL_fileresult(L, 0, path);
  lua_newtable(L);
  lua_Integer n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++n);
  }
  closedir(d);
  return 1;
}

/* the runner's main, protected: testrun.main(args, sys) -> exit status */
static int runnermain (lua_State *L) {
  static const luaL_Reg sys[] = {
    {"runsuite", t_runsuite}, {"kind", t_kind}, {"listdir", t_listdir},
    {NULL, NULL}
  };
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.testrun");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  luaL_newlib(L, sys);
  lua_pushstring(L, cli_progname);
  lua_setfield(L, -2, "progname");
  lua_call(L, 2, 1);
  return 1;
}

int cli_test (int argc, char **argv) {
  start_seed = qkv_initial_seed();
  lua_State *L = cli_newstate();
  if (L == NULL) return 2;
  lua_pushcfunction(L, runnermain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = cli_report(L, cli_docall(L, 2, 1));
  int code = status == LUA_OK ? (int)lua_tointeger(L, -1) : 1;
  lua_close(L);
  return code;
}
