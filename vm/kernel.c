/*
** kernel.c -- `qkv kernel ...`: the Jupyter kernel's entry.  The protocol
** lives in Lua (stdlib/qkv/kernel.lua, over qkv.zmq, loaded only here);
** this file gives it what only the executable can: a call that Jupyter's
** interrupt stops.  Jupyter interrupts a kernel with SIGINT (the
** kernelspec's interrupt_mode "signal"): while a cell runs, the signal
** raises the flag the kernels look at and sets a hook that raises
** "interrupted!" at the next Lua instruction, as the REPL's Ctrl-C does;
** between cells it does nothing, and a second one never kills the kernel.
*/
#define _XOPEN_SOURCE 700       /* readlink */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "qkv.h"
#include "cli.h"

static lua_State *kernelL;
static volatile sig_atomic_t running;

static void on_sigint (int sig) {
  (void)sig;
  if (running) cli_interrupt(kernelL);
}

/* the error's text as the REPL shows it and the traceback below it, as a
   table */
static int handler (lua_State *L) {
  lua_newtable(L);
  cli_errortext(L, 1);
  lua_setfield(L, -2, "error");
  luaL_traceback(L, L, NULL, 1);
  lua_setfield(L, -2, "traceback");
  return 1;
}

/*
** docall(f, ...) -> true, results... | false, {error = text, traceback = s}:
** f under the interrupt.  Only the main state is hooked, as in the REPL.
*/
static int k_docall (lua_State *L) {
  int n = lua_gettop(L) - 1;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushcfunction(L, handler);
  lua_insert(L, 1);
  qkv_interrupted = 0;
  running = 1;
  int status = lua_pcall(L, n, LUA_MULTRET, 1);
  running = 0;
  lua_sethook(kernelL, NULL, 0, 0);
  qkv_interrupted = 0;
  lua_pushboolean(L, status == LUA_OK);
  lua_replace(L, 1);
  return lua_gettop(L);
}

static int kmain (lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  cli_pushmain(L, "qkv.kernel", argc, argv);
  lua_pushcfunction(L, k_docall);
  char exe[PATH_MAX];                   /* the kernelspec wants a full path */
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  lua_pushstring(L, n > 0 ? (exe[n] = '\0', exe) : cli_progname);
  lua_call(L, 3, 1);
  return 1;
}

int cli_kernel (int argc, char **argv) {
  lua_State *L = cli_newstate();
  if (L == NULL) return EXIT_FAILURE;
  kernelL = L;
  cli_setsignal(SIGINT, on_sigint);
  lua_pushcfunction(L, kmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = cli_report(L, cli_pcall(L, 2, 1));
  int code = status == LUA_OK ? (int)lua_tointeger(L, -1) : EXIT_FAILURE;
  lua_close(L);
  return code;
}
