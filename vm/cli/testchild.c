/*
** testchild.c -- one suite of `qkv test`, in the child process the runner
** forked for it: a brand-new Lua state runs the file, LuaUnit prints its
** own output, and the runner hears on a pipe (testwire.c) which test
** starts, how each ended, and at last the suite's results as plain tables.
**
** The time limit: each test, and each stretch of the suite outside its
** tests, arms a timer.  When it fires, a Lua hook raises the error at the
** main thread's next instruction (and every thread's count hook within a
** few thousand, for a coroutine: watch) and qkv_interrupted stops a kernel
** that is running; the suite's LuaUnit marks the test as timed out
** (stdlib/qkv/testrun.lua).  A child that does not stop is killed by the
** runner.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "cli.h"
#include "testchild.h"
#include "testwire.h"

#define MAXCOPY 8   /* deepest table handed from one state to the other */
#define MAXNAME 200 /* the longest test name kept for the time-out message */

/* the child's one suite */
static struct {
  lua_State *S;          /* the suite's state */
  const char *path;      /* the file */
  int fd;                /* the pipe to the runner */
  double timeout;        /* seconds, 0 for none */
  char test[MAXNAME];    /* the test running, "" outside tests */
  char where[MAXNAME];   /* file:line the time-out stopped, if known */
  void (*prev_sigint)(int);
  volatile sig_atomic_t sigint;     /* Ctrl-C was pressed */
  volatile sig_atomic_t timedout;   /* the timer fired in this stretch */
} child;

/*
** Copies the value at `idx` of `from` onto the stack of `to`: nil,
** booleans, numbers, strings and tables of those; anything else (and
** tables deeper than MAXCOPY) arrive as nil.
*/
static void copyvalue (lua_State *from, int idx, lua_State *to, int depth) {
  luaL_checkstack(to, 3, "copying a suite's options");
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

/* pushes the message of a time-out in the stretch that is running */
static void pushtimeout (lua_State *L) {
  char secs[32];
  snprintf(secs, sizeof secs, "%g", child.timeout);
  if (child.test[0] != '\0')
    lua_pushfstring(L, "%s: %s: timed out after %s s", child.path, child.test, secs);
  else
    lua_pushfstring(L, "%s: timed out after %s s outside any test", child.path, secs);
  if (child.where[0] != '\0') {
    lua_pushfstring(L, ", at %s", child.where);
    lua_concat(L, 2);
  }
}

/*
** Notes the file and line the hook stopped: those of the function running
** at an instruction, else (at a call or a return) of its caller, when
** that is Lua code.
*/
static void notewhere (lua_State *L, lua_Debug *ar) {
  lua_Debug up;
  if (ar->event != LUA_HOOKCOUNT && ar->event != LUA_HOOKLINE) {
    if (!lua_getstack(L, 1, &up)) return;
    ar = &up;
  }
  if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
    snprintf(child.where, sizeof child.where, "%s:%d", ar->short_src, ar->currentline);
}

static void watch(lua_State *L);

/* runs at the first instruction after the timer fired: the test's error */
static void timeouthook (lua_State *L, lua_Debug *ar) {
  watch(L);
  notewhere(L, ar);
  if (!child.sigint) qkv_interrupted = 0;   /* the error takes over */
  pushtimeout(L);
  lua_error(L);
}

/*
** The hook every thread of the suite carries from its start: a count hook
** that raises the time-out once the timer has fired.  A coroutine takes
** its creator's hook when it is made, and on_alarm's hook reaches the main
** thread alone, so that a loop inside a coroutine ran on past its time
** until the runner killed the child, and the file's later tests were lost
** unreported; with this one it stops within WATCH instructions.
*/
#define WATCH 10000

static void watchhook (lua_State *L, lua_Debug *ar) {
  if (child.timedout) timeouthook(L, ar);
}

static void watch (lua_State *L) { lua_sethook(L, watchhook, LUA_MASKCOUNT, WATCH); }

static void on_alarm (int sig) {
  (void)sig;
  child.timedout = 1;
  qkv_interrupted = 1;
  lua_sethook(child.S, timeouthook,
              LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

/*
** (Re)starts the timer for a new stretch: a test, or what comes between.
** An alarm of the stretch before that came too late for its hook to run
** is forgotten with the hook.
*/
static void arm (double seconds) {
  struct itimerval v;
  memset(&v, 0, sizeof v);
  setitimer(ITIMER_REAL, &v, NULL);
  if (child.timedout && !child.sigint) watch(child.S);
  child.timedout = 0;
  child.where[0] = '\0';
  if (seconds > 1e8) seconds = 1e8;   /* three years: no overflow below */
  if (seconds > 0) {
    v.it_value.tv_sec = (time_t)seconds;
    v.it_value.tv_usec = (suseconds_t)((seconds - (double)v.it_value.tv_sec) * 1e6);
    if (v.it_value.tv_sec == 0 && v.it_value.tv_usec == 0) v.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &v, NULL);
  }
}

/* Ctrl-C: noted for interrupted(), then the handler of cli_docall */
static void on_sigint (int sig) {
  child.sigint = 1;
  if (child.prev_sigint != SIG_DFL && child.prev_sigint != SIG_IGN)
    child.prev_sigint(sig);
}

/* writes a frame, LuaUnit's output up to now going first */
static void send (int kind, const char *payload, size_t n) {
  fflush(stdout);
  tw_send(child.fd, kind, payload, n);
}

/* the value at idx, encoded, as one frame */
static void sendvalue (lua_State *L, int kind, int idx) {
  tw_buf b;
  tw_init(&b);
  tw_encode(&b, L, idx);
  if (!b.failed) send(kind, b.p, b.n);
  tw_free(&b);
}

/* ---- the functions the suite's runner calls (its `ctl`) ---- */

/* interrupted() -> boolean: Ctrl-C was pressed during this suite */
static int c_interrupted (lua_State *L) {
  lua_pushboolean(L, child.sigint != 0);
  return 1;
}

/* started(name): a test starts; its own time limit with it */
static int c_started (lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  snprintf(child.test, sizeof child.test, "%s", name);
  send(FRAME_STARTED, name, n);
  arm(child.timeout);
  return 0;
}

/* ended(node): the test ended as LuaUnit's node says (a plain table) */
static int c_ended (lua_State *L) {
  child.test[0] = '\0';
  if (child.timedout && !child.sigint) qkv_interrupted = 0;
  arm(child.timeout);
  sendvalue(L, FRAME_ENDED, 1);
  return 0;
}

/* timedout() -> the message, if the stretch running ran out of time */
static int c_timedout (lua_State *L) {
  if (!child.timedout) return 0;
  pushtimeout(L);
  return 1;
}

/* pushes the results of a suite that could not run, {error=, aborted=true},
   the error being the text of the value on top, else `fallback` */
static void push_aborted (lua_State *S, const char *fallback) {
  const char *msg = lua_tostring(S, -1);
  lua_createtable(S, 0, 3);
  lua_pushstring(S, msg ? msg : fallback);
  lua_setfield(S, -2, "error");
  lua_pushboolean(S, 1);
  lua_setfield(S, -2, "aborted");
}

/* the suite's driver, in Lua so that it is loaded in the suite's state */
static const char driver[] =
  "local path, args, ctl = ...\n"
  "return require('qkv.testrun').suite(path, args, ctl)";

/*
** Runs in the suite's state, under cli_docall: sets `arg` (arg[-1] the
** executable as invoked, arg[0] the file, then the LuaUnit options) and
** calls the driver.  The driver's own failure becomes {error=, aborted=true}.
*/
static int suitemain (lua_State *S) {
  static const luaL_Reg ctl[] = {
    {"interrupted", c_interrupted}, {"started", c_started},
    {"ended", c_ended}, {"timedout", c_timedout}, {NULL, NULL}
  };
  lua_State *L = (lua_State *)lua_touserdata(S, 1);
  struct sigaction sa;
  sigaction(SIGINT, NULL, &sa);
  child.prev_sigint = sa.sa_handler;
  cli_setsignal(SIGINT, on_sigint);
  copyvalue(L, 2, S, 0);
  int args = lua_gettop(S);
  lua_Integer n = luaL_len(S, args);
  lua_createtable(S, (int)n, 2);
  lua_pushstring(S, cli_progname);
  lua_rawseti(S, -2, -1);
  lua_pushstring(S, child.path);
  lua_rawseti(S, -2, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(S, args, i);
    lua_rawseti(S, -2, i);
  }
  lua_setglobal(S, "arg");
  luaL_loadbuffer(S, driver, sizeof driver - 1, "=(qkv test)");
  lua_pushstring(S, child.path);
  lua_pushvalue(S, args);
  luaL_newlib(S, ctl);
  int status = lua_pcall(S, 3, 1, 0);
  if (status != LUA_OK || !lua_istable(S, -1))
    push_aborted(S, "the suite's driver gave no results");
  lua_pushboolean(S, child.sigint);
  lua_setfield(S, -2, "interrupted");
  return 1;
}

/*
** The child's whole life: the file in a fresh state, with the generator
** at its start-up seed, its results sent, the state closed (finalizers
** run, and under ASan the leak check at exit sees the suite's memory).
*/
_Noreturn void testchild_run (lua_State *L, int fd, double timeout, uint64_t seed) {
  child.path = lua_tostring(L, 1);
  child.fd = fd;
  child.timeout = timeout;
  cli_setsignal(SIGALRM, on_alarm);
  lua_State *S = cli_newstate(0);
  if (S == NULL) exit(EXIT_FAILURE);
  child.S = S;
  watch(S);
  qkv_seed(seed);
  arm(timeout);
  lua_pushcfunction(S, suitemain);
  lua_pushlightuserdata(S, L);
  int status = cli_docall(S, 1, 1);
  arm(0);
  if (status != LUA_OK) push_aborted(S, "(error object is not a string)");
  sendvalue(S, FRAME_RESULTS, -1);
  lua_close(S);
  fflush(stdout);
  exit(EXIT_SUCCESS);
}
