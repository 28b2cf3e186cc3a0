/*
** kernel.c -- `qkv kernel ...`: the Jupyter kernel's entry.  The protocol
** lives in Lua (stdlib/qkv/kernel.lua, over qkv.zmq, loaded only here);
** this file gives it what only the executable can: a call that Jupyter's
** interrupt stops, and a timer that sends a running cell's output.
**
** Jupyter interrupts a kernel with SIGINT (the kernelspec's interrupt_mode
** "signal"): while a cell runs, the signal raises the flag the kernels
** look at and sets a hook that raises "interrupted!" at the next Lua
** instruction, as the REPL's Ctrl-C does; between cells it does nothing,
** and a second one never kills the kernel.
**
** A cell's output waits in a buffer (kernel/exec.lua) so that a flood of
** prints is a few stream messages; flush_in(s, f) asks that f run s
** seconds later even when the cell is busy in Lua and prints no more: a
** thread waits for the time and sets the same hook, which then calls f.
** One hook for both, so that neither undoes the other.
*/
#define _XOPEN_SOURCE 700       /* readlink, pthread_condattr_setclock */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "cli.h"

#define HOOKMASK (LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT)
#define FLUSH "qkv.kernel.flush"        /* the registry's flush_in function */

static lua_State *kernelL;
static volatile sig_atomic_t running;   /* a cell runs; set under `lock` */
static volatile sig_atomic_t flushing;  /* the timer is due */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static struct timespec due;             /* CLOCK_MONOTONIC */
static int armed, started;

static void khook (lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);           /* first, so that a later set stays */
  if (qkv_interrupted) luaL_error(L, "interrupted!");
  if (flushing) {
    flushing = 0;
    if (lua_getfield(L, LUA_REGISTRYINDEX, FLUSH) != LUA_TFUNCTION) lua_pop(L, 1);
    else if (lua_pcall(L, 0, 0, 0) != LUA_OK) lua_pop(L, 1);  /* output is not the cell's error */
  }
}

static void on_sigint (int sig) {
  (void)sig;
  if (!running) return;
  qkv_interrupted = 1;
  lua_sethook(kernelL, khook, HOOKMASK, 1);
}

static int past (const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* the timer: waits until `due`, then hooks the state if a cell still runs
   (under `lock`, so never after k_docall has let the state go) */
static void *timer (void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    if (!armed) pthread_cond_wait(&wake, &lock);
    else if (pthread_cond_timedwait(&wake, &lock, &due) == ETIMEDOUT && armed && past(&due)) {
      armed = 0;
      if (running) {
        flushing = 1;
        lua_sethook(kernelL, khook, HOOKMASK, 1);
      }
    }
  }
  return NULL;
}

static int starttimer (void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&wake, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0) return rc;
  sigset_t all, old;                    /* signals go to the cell's thread */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  rc = pthread_create(&t, NULL, timer, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0) pthread_detach(t);
  return rc;
}

/* flush_in(seconds, f): f runs that much later, from the hook at the
   cell's next Lua instruction; not at all if the cell has ended by then
   (the kernel flushes at the end of a cell) */
static int k_flushin (lua_State *L) {
  double s = luaL_checknumber(L, 1);
  luaL_argcheck(L, s >= 0 && s < 3600, 1, "seconds out of range");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  lua_setfield(L, LUA_REGISTRYINDEX, FLUSH);
  pthread_mutex_lock(&lock);
  int rc = started ? 0 : starttimer();
  if (rc != 0) {
    pthread_mutex_unlock(&lock);
    return luaL_error(L, "flush_in: cannot start the timer thread: %s", strerror(rc));
  }
  started = 1;
  clock_gettime(CLOCK_MONOTONIC, &due);
  long ns = due.tv_nsec + (long)((s - (long)s) * 1e9);
  due.tv_sec += (time_t)s + ns / 1000000000L;
  due.tv_nsec = ns % 1000000000L;
  armed = 1;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
  return 0;
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
  pthread_mutex_lock(&lock);
  running = 1;
  pthread_mutex_unlock(&lock);
  int status = lua_pcall(L, n, LUA_MULTRET, 1);
  pthread_mutex_lock(&lock);
  running = 0;
  lua_sethook(kernelL, NULL, 0, 0);
  pthread_mutex_unlock(&lock);
  qkv_interrupted = 0;
  flushing = 0;
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
  lua_pushstring(L, cli_exepath(exe, sizeof exe) ? exe : cli_progname);
  lua_pushcfunction(L, k_flushin);
  lua_call(L, 4, 1);
  return 1;
}

int cli_kernel (int argc, char **argv) {
  lua_State *L = cli_newstate(0);
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
