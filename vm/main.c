/*
** main.c -- the qkv executable: Lua 5.4 with the qkv module preloaded as a
** global.  Runs a script with `arg` set as lua.c does, or code given with
** -e, or the chunks read from standard input.
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "qkv.h"

LUALIB_API int luaopen_qkv (lua_State *L);

static const char *progname = "qkv";

static void usage (FILE *f) {
  fprintf(f,
    "usage: %s [options] [script [args]]\n"
    "  -e code        run the Lua code (may repeat)\n"
    "  -              run standard input as a script\n"
    "  -v, --version  print the version\n"
    "  -h, --help     print this help\n"
    "With no script, qkv reads chunks from standard input.\n"
    "The module is the global `qkv` (also require \"qkv\").\n", progname);
}

static int msghandler (lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int report (lua_State *L, int status) {
  if (status != LUA_OK) {
    fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
    fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

/* calls the function below `nargs` arguments under the traceback handler */
static int docall (lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  return status;
}

/* package.path and cpath also search the stdlib next to the executable */
static void setpath (lua_State *L) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/../stdlib/?.lua;%s/../stdlib/?/init.lua;"
                  "%s/../share/lua/5.4/?.lua;", exe, exe, exe);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  /* C submodules: build/lib/qkv/cairo.so, or PREFIX/lib/lua/5.4/qkv/cairo.so */
  lua_pushfstring(L, "%s/lib/?.so;%s/../lib/lua/5.4/?.so;", exe, exe);
  lua_getfield(L, -2, "cpath");
  lua_concat(L, 2);
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
}

/* arg[0] is the script, arg[-k] what came before it, arg[1..] its args */
static void createargtable (lua_State *L, char **argv, int argc, int script) {
  lua_createtable(L, argc - script - 1, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int runscript (lua_State *L, char **argv, int argc, int script) {
  const char *fname = argv[script];
  if (strcmp(fname, "-") == 0) fname = NULL;
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    int n = argc - script - 1;
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
    status = docall(L, n, 0);
  }
  return report(L, status);
}

static int pmain (lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script = 0, ran = 0;
  luaL_openlibs(L);
  luaL_requiref(L, "qkv", luaopen_qkv, 1);
  lua_pop(L, 1);
  setpath(L);
  for (int i = 1; i < argc && script == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); ran = 1; }
    else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
      printf("qkv %s (%s)\n", QKV_VERSION, LUA_RELEASE);
      ran = 1;
    } else if (strcmp(a, "-e") == 0) {
      if (++i >= argc) { usage(stderr); return lua_pushboolean(L, 0), 1; }
      createargtable(L, argv, argc, 0);
      int status = luaL_loadbuffer(L, argv[i], strlen(argv[i]), "=(command line)");
      if (status == LUA_OK) status = docall(L, 0, 0);
      if (report(L, status) != LUA_OK) return lua_pushboolean(L, 0), 1;
      ran = 1;
    } else if (strcmp(a, "--") == 0) {
      if (i + 1 < argc) script = i + 1;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a);
      usage(stderr);
      return lua_pushboolean(L, 0), 1;
    } else script = i;
  }
  if (script > 0) {
    createargtable(L, argv, argc, script);
    lua_pushboolean(L, runscript(L, argv, argc, script) == LUA_OK);
    return 1;
  }
  if (!ran) {
    char *stdin_args[] = {argv[0], "-"};
    createargtable(L, stdin_args, 2, 1);
    lua_pushboolean(L, runscript(L, stdin_args, 2, 1) == LUA_OK);
    return 1;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int main (int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (argv[0] && argv[0][0]) progname = argv[0];
  if (L == NULL) {
    fprintf(stderr, "%s: cannot create state: not enough memory\n", progname);
    return EXIT_FAILURE;
  }
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int ok = lua_toboolean(L, -1);
  report(L, status);
  lua_close(L);
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
