/*
** cli.c -- what the parts of the qkv executable share (cli.h): a Lua state
** with the module and the searcher for qkv's own modules (searcher.c);
** calls under the traceback handler and the SIGINT hook; error reports.
** The commands (script.c, repl.c, testrun.c, kernel.c) call these, never
** the other way round.
*/
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "cli.h"
#include "linit.h"
#include "searcher.h"

const char *cli_progname = "qkv";

int cli_exepath (char *exe, size_t size) {
  ssize_t n = readlink("/proc/self/exe", exe, size - 1);
  if (n <= 0) return 0;
  exe[n] = '\0';
  return 1;
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
void cli_testrun (lua_State *L, const char *fn) {
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
  cli_testrun(L, "luaunit");
  return 1;
}

/* with noenv (lua's -E), as lua.c: the package library then ignores
   LUA_PATH and LUA_CPATH */
static int initstate (lua_State *L) {
  if (lua_toboolean(L, 1)) {
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  cli_openlibs(L);
  lua_register(L, "help", help);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, preload_luaunit);
  lua_setfield(L, -2, "luaunit");
  lua_pop(L, 1);
  char exe[PATH_MAX];
  if (cli_exepath(exe, sizeof exe)) cli_searcher(L, exe);
  return 0;
}

lua_State *cli_newstate (int noenv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "%s: cannot create state: not enough memory\n", cli_progname);
    return NULL;
  }
  lua_pushcfunction(L, initstate);
  lua_pushboolean(L, noenv);
  if (cli_report(L, lua_pcall(L, 1, 0, 0)) != LUA_OK) {
    lua_close(L);
    return NULL;
  }
  return L;
}
