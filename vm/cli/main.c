/*
** main.c -- the qkv executable: Lua 5.4 with the qkv module preloaded as a
** global.  Runs a script with `arg` set as lua.c does, or code given with
** -e, or the REPL (repl.c), or `qkv test` (testrun.c), or the Jupyter
** kernel (kernel.c).
*/
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "../core/qkv.h"
#include "cli.h"
#include "../dispatch/plugin.h"
#include "../../bindings/lqkv.h"

LUALIB_API int luaopen_qkv (lua_State *L);

const char *cli_progname = "qkv";

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

const char *cli_errortext (lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (lua_type(L, -1) == LUA_TSTRING) return lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  return lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
}

/* as lua.c's: an object's own text (__tostring) goes without a traceback */
static int msghandler (lua_State *L) {
  if (lua_tostring(L, 1) == NULL && luaL_callmeta(L, 1, "__tostring") &&
      lua_type(L, -1) == LUA_TSTRING)
    return 1;
  luaL_traceback(L, L, cli_errortext(L, 1), 1);
  return 1;
}

int cli_report (lua_State *L, int status) {
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%s: %s\n", cli_progname, msg ? msg : "(error object)");
    fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

/*
** Ctrl-C, as lua.c does it: the handler only sets a hook, and the hook
** raises the error at the next Lua instruction; kernels see the flag.
** A second Ctrl-C before the hook runs gets the default action.
*/
static lua_State *globalL = NULL;

static void lstop (lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

void cli_setsignal (int sig, void (*handler)(int)) {
  struct sigaction sa;
  sa.sa_handler = handler;
  sa.sa_flags = 0;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

void cli_interrupt (lua_State *L) {
  int flag = LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT;
  qkv_interrupted = 1;
  lua_sethook(L, lstop, flag, 1);
}

static void laction (int sig) {
  cli_setsignal(sig, SIG_DFL);
  cli_interrupt(globalL);
}

void cli_pushmain (lua_State *L, const char *module, int argc, char **argv) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_remove(L, -2);
  lua_createtable(L, argc, 0);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
}

int cli_pcall (lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  return status;
}

int cli_docall (lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  qkv_interrupted = 0;
  cli_setsignal(SIGINT, laction);
  int status = lua_pcall(L, nargs, nres, base);
  cli_setsignal(SIGINT, SIG_DFL);
  lua_sethook(L, NULL, 0, 0);
  qkv_interrupted = 0;
  lua_remove(L, base);
  return status;
}

/* whether file a was modified after file b (1 also when either is missing) */
static int newer (const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 1;
  if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec) return sa.st_mtim.tv_sec > sb.st_mtim.tv_sec;
  return sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec;
}

/*
** A searcher ahead of Lua's file searcher, for the stdlib: the chunk that
** `make` precompiled with luac (build/luac/qkv/plot.luac) when it is not
** older than its source, which skips parsing (1 ms of a script that draws
** a figure).  A missing or stale one falls through to the source.
*/
static int search_compiled (lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *dir = lua_tostring(L, lua_upvalueindex(1));
  const char *rel = luaL_gsub(L, name, ".", "/");
  const char *src = lua_pushfstring(L, "%s/../stdlib/%s.lua", dir, rel);
  const char *bin = lua_pushfstring(L, "%s/luac/%s.luac", dir, rel);
  if (newer(src, bin)) {
    lua_pushfstring(L, "no fresh compiled chunk '%s'", bin);
    return 1;
  }
  if (luaL_loadfilex(L, bin, "b") != LUA_OK) return 1;   /* its message */
  lua_pushstring(L, src);
  return 2;
}

static void add_searcher (lua_State *L, const char *exedir) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchers");
  for (lua_Integer i = luaL_len(L, -1); i >= 2; i--) {   /* make room at 2 */
    lua_geti(L, -1, i);
    lua_seti(L, -2, i + 1);
  }
  lua_pushstring(L, exedir);
  lua_pushcclosure(L, search_compiled, 1);
  lua_seti(L, -2, 2);
  lua_pop(L, 2);
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
  add_searcher(L, exe);
}

/* the global help(...) of scripts, suites and the REPL alike: qkv.help */
static int help (lua_State *L) {
  int n = lua_gettop(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "qkv");
  lua_getfield(L, -1, "help");
  lua_replace(L, -3);
  lua_pop(L, 1);
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

/* pushes the one result of require("qkv.testrun")[fn]() */
static void testrun_call (lua_State *L, const char *fn) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.testrun");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, fn);
  lua_call(L, 0, 1);
}

/*
** require "luaunit" in the executable: LuaUnit as qkv.testrun prepares
** it (tensor-aware assertEquals, its outermost runs recorded for the
** summary line)
*/
static int preload_luaunit (lua_State *L) {
  testrun_call(L, "luaunit");
  return 1;
}

static int initstate (lua_State *L) {
  luaL_openlibs(L);
  luaL_requiref(L, "qkv", luaopen_qkv, 1);
  lua_pop(L, 1);
  lua_register(L, "help", help);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, preload_luaunit);
  lua_setfield(L, -2, "luaunit");
  lua_pop(L, 1);
  setpath(L);
  return 0;
}

lua_State *cli_newstate (void) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "%s: cannot create state: not enough memory\n", cli_progname);
    return NULL;
  }
  lua_pushcfunction(L, initstate);
  if (cli_report(L, lua_pcall(L, 0, 0, 0)) != LUA_OK) {
    lua_close(L);
    return NULL;
  }
  return L;
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
  testrun_call(L, "script_end");
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

/* --device cuda: new tensors go to the GPU, which must be usable */
static int rundevice (const char *dev) {
  char why[600];
  if (strcmp(dev, "cpu") == 0) return 1;
  if (strcmp(dev, "cuda") != 0)
    fprintf(stderr, "%s: --device: '%s' is not cpu or cuda\n", cli_progname, dev);
  else if (qkv_cuda(why, sizeof why) == NULL)
    fprintf(stderr, "%s: --device cuda: %s\n", cli_progname, why);
  else {
    qkvL_set_default_device(QKV_CUDA);
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
      if (!rundevice(argv[i])) return 0;
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

int main (int argc, char **argv) {
  if (argv[0] && argv[0][0]) cli_progname = argv[0];
  if (argc > 1 && strcmp(argv[1], "test") == 0) return cli_test(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "kernel") == 0) return cli_kernel(argc - 1, argv + 1);
  lua_State *L = cli_newstate();
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
