/*
** script.c -- `qkv [options] [script [args]]`: Lua 5.4 with the qkv module
** as a global.  Runs a script with `arg` set as lua.c does, or code given
** with -e, or standard input, then the REPL (repl.c) with -i or on a
** terminal; a script that is a suite ends as `qkv test` would end it.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "../dispatch/plugin.h"
#include "cli.h"

static void usage (FILE *f) {
  fprintf(f,
    "usage: %s [options] [script [args]]\n"
    "       %s test [paths] [-p pat] [-x pat] [-o text|tap|junit] [-n file.xml] [-v]\n"
    "                [--timeout s] [--device cpu|cuda] [-h]\n"
    "       %s kernel -f connection_file | kernel install [--user | --prefix dir]\n"
    "  -e code        run the Lua code (may repeat)\n"
    "  -i             enter the REPL after the script (or -e)\n"
    "  -              run standard input as a script\n"
    "  --device dev   cpu (the default) or cuda\n"
    "  -v, --version  print the version\n"
    "  -h, --help     print this help\n"
    "With no script: the REPL when standard input is a terminal, else\n"
    "standard input runs as a script.  The module is the global `qkv`.\n",
    cli_progname, cli_progname, cli_progname);
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
    status = cli_docall(L, n, 0);
  }
  return cli_report(L, status);
}

/* script_end() of qkv.testrun, protected: pushes whether nothing failed */
static int callend (lua_State *L) {
  cli_testrun(L, "script_end");
  return 1;
}

/*
** After a script ran to its end: one that is a suite (it loaded LuaUnit,
** or it is named test_*.lua) gets the runner's rule, its tests run if it
** did not run them, and the summary line.  Returns whether nothing failed.
*/
static int suite_end (lua_State *L, const char *fname) {
  const char *base = strrchr(fname, '/');
  size_t n = strlen(base = base ? base + 1 : fname);
  int named = strncmp(base, "test_", 5) == 0 && n > 9 && strcmp(base + n - 4, ".lua") == 0;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  int loaded = lua_getfield(L, -1, "luaunit") != LUA_TNIL;
  lua_pop(L, 2);
  if (!named && !loaded) return 1;
  lua_pushcfunction(L, callend);
  int status = cli_report(L, cli_docall(L, 0, 1));
  int ok = status == LUA_OK && lua_toboolean(L, -1);
  if (status == LUA_OK) lua_pop(L, 1);
  return ok;
}

/*
** --device cuda: new tensors go to the GPU, which must be usable.  The
** module's own qkv.set_default_device sets it, so that the executable
** needs nothing of the bindings' C side but luaopen_qkv (cli.h).
*/
static int rundevice (lua_State *L, const char *dev) {
  char why[600];
  if (strcmp(dev, "cpu") == 0) return 1;
  if (strcmp(dev, "cuda") != 0)
    fprintf(stderr, "%s: --device: '%s' is not cpu or cuda\n", cli_progname, dev);
  else if (qkv_cuda(why, sizeof why) == NULL)
    fprintf(stderr, "%s: --device cuda: %s\n", cli_progname, why);
  else {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "qkv");
    lua_getfield(L, -1, "set_default_device");
    lua_pushliteral(L, "cuda");
    lua_call(L, 1, 0);
    lua_pop(L, 2);
    return 1;
  }
  return 0;
}

/* the options before the script; returns 0 on a bad one, else 1 and sets
   *script (0 for none), *interactive and *ran (something was run/printed) */
static int runargs (lua_State *L, int argc, char **argv, int *script,
                    int *interactive, int *ran) {
  for (int i = 1; i < argc && *script == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); *ran = 1; }
    else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
      printf("qkv %s (%s)\n", QKV_VERSION, LUA_RELEASE);
      *ran = 1;
    } else if (strcmp(a, "-i") == 0) *interactive = 1;
    else if (strcmp(a, "--device") == 0) {
      if (++i >= argc) { usage(stderr); return 0; }
      if (!rundevice(L, argv[i])) return 0;
    } else if (strcmp(a, "-e") == 0) {
      if (++i >= argc) { usage(stderr); return 0; }
      createargtable(L, argv, argc, 0);
      int status = luaL_loadbuffer(L, argv[i], strlen(argv[i]), "=(command line)");
      if (status == LUA_OK) status = cli_docall(L, 0, 0);
      if (cli_report(L, status) != LUA_OK) return 0;
      *ran = 1;
    } else if (strcmp(a, "--") == 0) {
      if (i + 1 < argc) *script = i + 1;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "%s: unrecognized option '%s'\n", cli_progname, a);
      usage(stderr);
      return 0;
    } else *script = i;
  }
  return 1;
}

static int pmain (lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script = 0, interactive = 0, ran = 0, ok = 1;
  if (!runargs(L, argc, argv, &script, &interactive, &ran))
    return lua_pushboolean(L, 0), 1;
  if (script > 0) {
    createargtable(L, argv, argc, script);
    ok = runscript(L, argv, argc, script) == LUA_OK && suite_end(L, argv[script]);
    /* like python -i: the session starts even after an error */
  } else if (!ran && !interactive) {
    if (isatty(STDIN_FILENO)) interactive = 1;
    else {
      char *stdin_args[] = {argv[0], "-"};
      createargtable(L, stdin_args, 2, 1);
      ok = runscript(L, stdin_args, 2, 1) == LUA_OK;
    }
  }
  if (interactive) {
    if (script == 0) createargtable(L, argv, argc, 0);
    cli_repl(L);
    ok = 1;
  }
  lua_pushboolean(L, ok);
  return 1;
}

int cli_script (int argc, char **argv) {
  lua_State *L = cli_newstate(0);
  if (L == NULL) return EXIT_FAILURE;
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int ok = lua_toboolean(L, -1);
  cli_report(L, status);
  lua_close(L);
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
