/*
** testrun.c -- `qkv test`: runs LuaUnit suites.  The runner itself is Lua
** (stdlib/qkv/testrun.lua, in a state of its own); this file gives it what
** Lua cannot do: list folders, and run one suite file in a child process
** (testchild.c) with a brand-new state, watching it: the child reports on
** a pipe which test starts and how each ends, then the suite's results as
** plain tables.  A child that dies (a crash, a signal) leaves the tests it
** finished and the one it was in; one that outlives the time limit by a
** grace period is killed.  The run goes on with the next file.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "cli.h"
#include "../dispatch/plugin.h"
#include "testchild.h"
#include "testwire.h"

#define MAXNAME 200      /* the longest test name kept */
#define GRACE_MIN 1.0    /* a child past its limit gets the limit again, */
#define GRACE_MAX 5.0    /* within these, to stop by itself */
#define SIGINT_WAIT 1.0  /* after Ctrl-C, then SIGINT is passed on ... */
#define SIGINT_KILL 3.0  /* ... and then the child is killed */

/* the generator's seed at start-up, given back to every suite */
static uint64_t start_seed;

/* Ctrl-C reached the runner while it watched a child */
static volatile sig_atomic_t runner_sigint;

/* one child being watched; its frames land on the runner's stack */
typedef struct {
  lua_State *L;
  const char *path;
  pid_t pid;
  int fd;
  double timeout;
  double deadline;     /* when the child is killed for time; 0: never */
  double sigint_at;    /* when Ctrl-C was seen; 0: not */
  int forwarded;       /* SIGINT was passed on */
  int tests, ntests;   /* stack index of the list of ended tests, its length */
  int results;         /* stack index of the results (nil until they come) */
  int ended;           /* the results came */
  int killed;          /* killed for time */
  int exited, wstatus; /* reaped, and how it ended */
  char test[MAXNAME];  /* the test running, "" outside tests */
  tw_buf in;           /* bytes read, not yet a whole frame */
} watch;

static double now (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* how long a child past its limit has to stop by itself */
static double grace (double timeout) {
  return timeout < GRACE_MIN ? GRACE_MIN : timeout > GRACE_MAX ? GRACE_MAX : timeout;
}

/* each frame starts the clock of a new stretch again */
static void restart_clock (watch *w) {
  w->deadline = w->timeout > 0 ? now() + w->timeout + grace(w->timeout) : 0;
}

static void onframe (watch *w, int kind, const char *p, size_t n) {
  lua_State *L = w->L;
  switch (kind) {
    case FRAME_STARTED:
      snprintf(w->test, sizeof w->test, "%.*s", (int)(n < MAXNAME ? n : MAXNAME), p);
      break;
    case FRAME_ENDED:
      w->test[0] = '\0';
      if (tw_decode(L, p, n)) lua_rawseti(L, w->tests, ++w->ntests);
      break;
    case FRAME_RESULTS:
      if (tw_decode(L, p, n)) {
        lua_replace(L, w->results);
        w->ended = 1;
      }
      break;
    default: break;
  }
  restart_clock(w);
}

/* the whole frames read so far, handled and dropped */
static void parseframes (watch *w) {
  size_t off = 0;
  while (w->in.n - off >= FRAME_HEADER) {
    uint32_t len;
    memcpy(&len, w->in.p + off + 1, sizeof len);
    if (w->in.n - off - FRAME_HEADER < len) break;
    onframe(w, w->in.p[off], w->in.p + off + FRAME_HEADER, len);
    off += FRAME_HEADER + (size_t)len;
  }
  if (off > 0) memmove(w->in.p, w->in.p + off, w->in.n - off);
  w->in.n -= off;
}

/* reads what the pipe holds; returns 0 at its end (or on an error) */
static int readsome (watch *w) {
  char buf[16384];
  ssize_t n = read(w->fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR;
  if (n == 0) return 0;
  tw_put(&w->in, buf, (size_t)n);
  parseframes(w);
  return 1;
}

/* whether the child was reaped (waiting for it unless WNOHANG) */
static int reap (watch *w, int flags) {
  while (!w->exited) {
    pid_t r = waitpid(w->pid, &w->wstatus, flags);
    if (r == w->pid) w->exited = 1;
    else if (r < 0 && errno == EINTR) continue;
    else return 0;
  }
  return 1;
}

static void on_runner_sigint (int sig) {
  runner_sigint = 1;
  cli_setsignal(sig, SIG_DFL);   /* a second Ctrl-C kills, as elsewhere */
}

/*
** Ctrl-C at the terminal reaches the child too, which stops its test and
** sends its results; if it does not (the signal was the runner's alone, or
** the child is stuck) it gets SIGINT, then SIGKILL.  Returns when to look
** again.
*/
static double pass_sigint (watch *w, double t) {
  if (w->sigint_at == 0) w->sigint_at = t;
  if (!w->forwarded && t >= w->sigint_at + SIGINT_WAIT) {
    kill(w->pid, SIGINT);
    w->forwarded = 1;
  }
  if (t >= w->sigint_at + SIGINT_KILL) {
    kill(w->pid, SIGKILL);
    return t + 1;
  }
  return w->sigint_at + (w->forwarded ? SIGINT_KILL : SIGINT_WAIT);
}

/* what to do now, before waiting again; returns when to look again */
static double checktime (watch *w) {
  double t = now(), wake = t + 1;   /* once a second: has it exited? */
  if (w->deadline > 0 && t >= w->deadline) {
    kill(w->pid, SIGKILL);
    w->killed = 1;
    w->deadline = 0;
  }
  if (w->deadline > 0 && w->deadline < wake) wake = w->deadline;
  if (runner_sigint) {
    double at = pass_sigint(w, t);
    if (at < wake) wake = at;
  }
  return wake - t;
}

/* reads the child's frames until its pipe closes or it is gone */
static void watchchild (watch *w) {
  struct pollfd pfd = {w->fd, POLLIN, 0};
  restart_clock(w);
  for (;;) {
    int ms = (int)(checktime(w) * 1000) + 1;
    int r = poll(&pfd, 1, ms);
    if (r > 0) {
      if (!readsome(w)) break;
    } else if (r == 0 || errno == EINTR) {
      /* a process the suite started may hold the pipe open */
      if (reap(w, WNOHANG)) {
        fcntl(w->fd, F_SETFL, O_NONBLOCK);
        while (readsome(w)) {}
        break;
      }
    } else break;
  }
  if (!w->exited) reap(w, 0);
}
/* how the child died, or NULL when it exited cleanly after its results */
static const char *death (watch *w, char *buf, size_t size) {
  int st = w->wstatus;
  if (w->killed)
    snprintf(buf, size, "timed out after %g s, and was killed %g s later",
             w->timeout, grace(w->timeout));
  else if (WIFSIGNALED(st))
    snprintf(buf, size, "the process crashed (signal %d, %s)", WTERMSIG(st),
             strsignal(WTERMSIG(st)));
  else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !w->ended)
    snprintf(buf, size, "the process exited with status %d %s",
             WIFEXITED(st) ? WEXITSTATUS(st) : -1,
             w->ended ? "after the suite ended" : "before the suite ended");
  else return NULL;
  return buf;
}

/*
** Pushes the suite's results: those the child sent, or else {partial =
** true, tests = the tests that ended}; with crash = what happened and
** crashtest = the test it happened in, when the child did not end well.
*/
static void pushresults (watch *w) {
  lua_State *L = w->L;
  char buf[200];
  int sigint = runner_sigint || (WIFSIGNALED(w->wstatus) && WTERMSIG(w->wstatus) == SIGINT);
  if (w->ended) lua_pushvalue(L, w->results);
  else {
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, w->tests);
    lua_setfield(L, -2, "tests");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "partial");
  }
  const char *what = sigint ? NULL : death(w, buf, sizeof buf);
  if (what != NULL) {
    const char *where = w->test[0] ? w->test
                      : w->ended ? "(after the suite)" : "(outside any test)";
    lua_pushfstring(L, "%s: %s: %s", w->path, where, what);
    lua_setfield(L, -2, "crash");
    lua_pushstring(L, where);
    lua_setfield(L, -2, "crashtest");
  }
  if (sigint) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "interrupted");
  }
}

static void closeonexec (int fd) {
  fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

/*
** runsuite(path, args, timeout) -> results: the file in a child process,
** in a fresh state with the generator at its start-up seed, so results
** never depend on the order; each test within timeout seconds (0: none).
*/
static int t_runsuite (lua_State *L) {
  luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  double timeout = luaL_optnumber(L, 3, 0);
  lua_settop(L, 2);
  lua_newtable(L);   /* 3: the tests that ended */
  lua_pushnil(L);    /* 4: the results */
  int fds[2];
  if (pipe(fds) != 0) return luaL_error(L, "cannot make a pipe: %s", strerror(errno));
  closeonexec(fds[0]);
  closeonexec(fds[1]);   /* not inherited by what the suite runs */
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    testchild_run(L, fds[1], timeout, start_seed);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return luaL_error(L, "cannot start a process: %s", strerror(errno));
  }
  watch w;
  memset(&w, 0, sizeof w);
  w.L = L; w.path = lua_tostring(L, 1); w.pid = pid; w.fd = fds[0];
  w.timeout = timeout; w.tests = 3; w.results = 4;
  tw_init(&w.in);
  struct sigaction old;
  sigaction(SIGINT, NULL, &old);
  runner_sigint = 0;
  cli_setsignal(SIGINT, on_runner_sigint);
  watchchild(&w);
  if (!runner_sigint) sigaction(SIGINT, &old, NULL);
  close(fds[0]);
  tw_free(&w.in);
  pushresults(&w);
  return 1;
}

/* kind(path) -> "file" | "directory" | "other", and what the file is
   ("device:inode": one for every path that reaches it, links included),
   or nil, message */
static int t_kind (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) return luaL_fileresult(L, 0, path);
  lua_pushstring(L, S_ISDIR(st.st_mode) ? "directory"
                  : S_ISREG(st.st_mode) ? "file" : "other");
  lua_pushfstring(L, "%I:%I", (lua_Integer)st.st_dev, (lua_Integer)st.st_ino);
  return 2;
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

/*
** cudaprobe() -> true, or false and why not: whether the GPU can be used,
** asked in a child process, since a CUDA context made here would not
** survive the fork of each suite's child.
*/
static int t_cudaprobe (lua_State *L) {
  char why[600] = "the probe's process failed";
  int fds[2], status = 0;
  if (pipe(fds) != 0) return luaL_error(L, "cudaprobe: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int ok = qkv_cuda(why, sizeof why) != NULL;
    if (!ok && write(fds[1], why, strlen(why)) < 0) _exit(2);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  ssize_t n = pid > 0 ? read(fds[0], why, sizeof why - 1) : -1;
  close(fds[0]);
  if (n > 0) why[n] = '\0';
  if (pid > 0) waitpid(pid, &status, 0);
  int ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  lua_pushboolean(L, ok);
  if (ok) return 1;
  lua_pushstring(L, why);
  return 2;
}

/* the runner's main, protected: testrun.main(args, sys) -> exit status */
static int runnermain (lua_State *L) {
  static const luaL_Reg sys[] = {
    {"runsuite", t_runsuite}, {"kind", t_kind}, {"listdir", t_listdir},
    {"cudaprobe", t_cudaprobe}, {NULL, NULL}
  };
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  cli_pushmain(L, "qkv.testrun", argc, argv);
  luaL_newlib(L, sys);
  lua_pushstring(L, cli_progname);
  lua_setfield(L, -2, "progname");
  lua_call(L, 2, 1);
  return 1;
}

int cli_test (int argc, char **argv) {
  start_seed = qkv_initial_seed();
  lua_State *L = cli_newstate(0);
  if (L == NULL) return 2;
  lua_pushcfunction(L, runnermain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = cli_report(L, cli_docall(L, 2, 1));
  int code = status == LUA_OK ? (int)lua_tointeger(L, -1) : 1;
  lua_close(L);
  return code;
}
