/*
** script.c -- `qkv [options] [script [args]]`: lua5.4's command line, as
** Lua 5.4.4's lua.c has it (its options, LUA_INIT and the paths from the
** environment, the `arg` table, messages and exit statuses), with the
** module as the global `qkv` and qkv's own options beside lua's:
** --device, --help, --version.  A script that is a suite ends as `qkv
** test` would end it; the REPL is repl.c's.  Where qkv differs from lua
** on purpose, docs/repl-and-jupyter.md says so.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "../dispatch/plugin.h"
#include "../common/nearest.h"
#include "cli.h"

#define INIT_VAR "LUA_INIT"
#define INIT_VARVERSION INIT_VAR "_" LUA_VERSION_MAJOR "_" LUA_VERSION_MINOR

static void usage (FILE *f) {
  fprintf(f,
    "usage: %s [options] [script [args]]\n"
    "       %s test [paths] [-p pat] [-x pat] [-o text|tap|junit] [-n file.xml] [-v]\n"
    "                [--timeout s] [--device cpu|cuda] [-h]\n"
    "       %s kernel -f connection_file | kernel install [--user | --prefix dir]\n"
    "Available options are (lua's, then qkv's):\n"
    "  -e code       execute the string 'code' (may repeat)\n"
    "  -i            enter the REPL after executing 'script' (or -e)\n"
    "  -l mod        require library 'mod' into global 'mod'\n"
    "  -l g=mod      require library 'mod' into global 'g'\n"
    "  -v            show version information (qkv's, then Lua's)\n"
    "  -E            ignore environment variables\n"
    "  -W            turn warnings on\n"
    "  --            stop handling options\n"
    "  -             stop handling options and execute stdin\n"
    "  --device dev  cpu (the default) or cuda\n"
    "  --version     print qkv's version\n"
    "  --help        print this help\n"
    "With no script: the REPL when standard input is a terminal, else\n"
    "standard input runs as a script.  The module is the global `qkv`.\n",
    cli_progname, cli_progname, cli_progname);
}

/* qkv's long options, for the nearest one to a misspelt option */
static const char *const LONGOPTS[] = {"--device", "--help", "--version", NULL};

/*
** what lua's print_usage prints for a bad option, then the usage; an
** unknown option near one of qkv's long ones (--devic, -device,
** --device=cuda) names it, as a misspelt key of an options table does
*/
static void badoption (const char *opt) {
  fprintf(stderr, "%s: ", cli_progname);
  if (strcmp(opt, "-e") == 0 || strcmp(opt, "-l") == 0 || strcmp(opt, "--device") == 0) {
    fprintf(stderr, "'%s' needs argument\n", opt);
    usage(stderr);
    return;
  }
  char name[40] = "--";
  const char *bare = opt + strspn(opt, "-"), *near = NULL;
  size_t n = strcspn(bare, "=");
  if (bare[0] != '\0' && bare[1] != '\0' && n < sizeof name - 3) {
    memcpy(name + 2, bare, n);
    name[n + 2] = '\0';
    near = qkv_nearest(name, LONGOPTS);
  }
  if (near) fprintf(stderr, "unrecognized option '%s' (did you mean '%s'?)\n", opt, near);
  else fprintf(stderr, "unrecognized option '%s'\n", opt);
  usage(stderr);
}

/* Lua's own: "Lua 5.4.4  Copyright (C) 1994-2022 Lua.org, PUC-Rio" */
static void version (int lua) {
  printf("qkv %s (%s)\n", QKV_VERSION, LUA_RELEASE);
  if (lua) printf("%s\n", LUA_COPYRIGHT);
  fflush(stdout);
}

static int dochunk (lua_State *L, int status) {
  if (status == LUA_OK) status = cli_docall(L, 0, 0);
  return cli_report(L, status);
}

static int dostring (lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l g=mod or -l mod: g = require(mod) */
static int dolibrary (lua_State *L, const char *spec) {
  const char *eq = strchr(spec, '=');
  const char *mod = eq ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  int status = cli_docall(L, 1, 1);
  if (status == LUA_OK) {
    lua_pushlstring(L, spec, eq ? (size_t)(eq - spec) : strlen(spec));
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return cli_report(L, status);
}

/* arg[0] is the script (the executable when there is none), arg[-k]
   what came before it, arg[1..] its arguments */
static void createargtable (lua_State *L, char **argv, int argc, int script) {
  if (script == argc) script = 0;
  lua_createtable(L, argc - script - 1, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* the script's arguments are arg[1..#arg], as the script may have left them */
static int pushargs (lua_State *L) {
  if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
  int n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
  lua_remove(L, -n - 1);
  return n;
}

/* argv[0] is the script; "-" is standard input, unless after "--" */
static int handle_script (lua_State *L, char **argv) {
  const char *fname = argv[0];
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL;
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    int n = pushargs(L);
    status = cli_docall(L, n, LUA_MULTRET);
  }
  return cli_report(L, status);
}

/* LUA_INIT_5_4, else LUA_INIT: code, or @file */
static int handle_luainit (lua_State *L) {
  const char *name = "=" INIT_VARVERSION;
  const char *init = getenv(name + 1);
  if (init == NULL) {
    name = "=" INIT_VAR;
    init = getenv(name + 1);
  }
  if (init == NULL) return LUA_OK;
  if (init[0] == '@') return dochunk(L, luaL_loadfile(L, init + 1));
  return dostring(L, init, name);
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
** needs nothing of the bindings' C side but the opener (linit.c).
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

/* what the options ask for before any Lua code runs */
enum { HAS_ERROR = 1, HAS_I = 2, HAS_V = 4, HAS_E = 8, HAS_NOENV = 16,
       HAS_HELP = 32, HAS_VERSION = 64 };

struct opts {
  int flags;
  int script;           /* argv index of the script, argc for none, or of the bad option */
  const char *device;   /* --device's, or NULL */
};

/* an option that takes a value, attached (-estat) or as the next word */
static int takesvalue (char **argv, int *i, int attached) {
  if (attached && argv[*i][2] != '\0') return 1;
  return argv[*i + 1] != NULL && argv[*i + 1][0] != '-' && ++*i;
}

/* lua.c's collectargs, with qkv's long options; nothing runs yet */
static void collectargs (char **argv, struct opts *o) {
  int i;
  for (i = 1; argv[i] != NULL; i++) {
    const char *a = argv[i];
    o->script = i;
    if (a[0] != '-') return;                       /* the script */
    if (strcmp(a, "--device") == 0) {
      if (!takesvalue(argv, &i, 0)) { o->flags = HAS_ERROR; return; }
      o->device = argv[i];
      continue;
    }
    if (strcmp(a, "--help") == 0) { o->flags |= HAS_HELP; continue; }
    if (strcmp(a, "--version") == 0) { o->flags |= HAS_VERSION; continue; }
    int bare = a[1] != '\0' && a[2] == '\0';       /* -X and nothing after */
    switch (a[1]) {
      case '-':                                    /* -- */
        if (!bare) { o->flags = HAS_ERROR; return; }
        o->script = i + 1;
        return;
      case '\0': return;                           /* - : standard input */
      case 'E': o->flags |= HAS_NOENV; break;
      case 'W': break;
      case 'i': o->flags |= HAS_I; break;          /* the REPL's banner is -v's */
      case 'v': o->flags |= HAS_V; break;
      case 'e': o->flags |= HAS_E; /* FALLTHROUGH */
      case 'l':
        if (!takesvalue(argv, &i, 1)) { o->flags = HAS_ERROR; return; }
        bare = 1;
        break;
      default: bare = 0;
    }
    if (!bare) { o->flags = HAS_ERROR; return; }
  }
  o->script = i;
}

/* -e, -l and -W, in order; 0 when some code raised an error */
static int runargs (lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    int opt = argv[i][1];
    if (opt == 'W') lua_warning(L, "@on", 0);
    else if (opt == 'e' || opt == 'l') {
      const char *extra = argv[i][2] ? argv[i] + 2 : argv[++i];
      int status = opt == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
      if (status != LUA_OK) return 0;
    } else if (strcmp(argv[i], "--device") == 0) i++;
  }
  return 1;
}

/* after the options: the script, then the REPL or standard input */
static int runmain (lua_State *L, int argc, char **argv, const struct opts *o) {
  int script = o->script, ok = 1;
  if (script < argc) {
    ok = handle_script(L, argv + script) == LUA_OK && suite_end(L, argv[script]);
    if (!ok && !(o->flags & HAS_I)) return 0;
    /* like python -i: the session starts even after an error */
  }
  if (o->flags & HAS_I) {
    cli_repl(L);
    return 1;
  }
  if (script == argc && !(o->flags & (HAS_E | HAS_V | HAS_HELP | HAS_VERSION))) {
    if (isatty(STDIN_FILENO)) cli_repl(L);
    else ok = dochunk(L, luaL_loadfile(L, NULL)) == LUA_OK;   /* lua5.4: 0 whatever */
  }
  return ok;
}

static int pmain (lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  const struct opts *o = (const struct opts *)lua_touserdata(L, 3);
  createargtable(L, argv, argc, o->script);
  if (o->device && !rundevice(L, o->device)) return 0;
  if (!(o->flags & HAS_NOENV) && handle_luainit(L) != LUA_OK) return 0;
  if (!runargs(L, argv, o->script)) return 0;
  lua_pushboolean(L, runmain(L, argc, argv, o));
  return 1;
}

int cli_script (int argc, char **argv) {
  static char *noargs[] = {"qkv", NULL};
  if (argc < 1 || argv[0] == NULL) {   /* started with no argv at all */
    argc = 1;
    argv = noargs;
  }
  struct opts o = {0, argc, NULL};
  collectargs(argv, &o);
  if (o.flags == HAS_ERROR) {
    badoption(argv[o.script]);
    return EXIT_FAILURE;
  }
  if (o.flags & HAS_HELP) usage(stdout);
  if (o.flags & HAS_VERSION) version(0);
  if (o.flags & HAS_V) version(1);
  lua_State *L = cli_newstate(o.flags & HAS_NOENV);
  if (L == NULL) return EXIT_FAILURE;
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  lua_pushlightuserdata(L, &o);
  int status = lua_pcall(L, 3, 1, 0);
  int ok = lua_toboolean(L, -1);
  cli_report(L, status);
  /* a script that failed ends what must not outlive it the hard way: a
     library that joined others (qkv.dist's MPI world) left "qkv.fatal" */
  if (!(ok && status == LUA_OK) &&
      lua_getfield(L, LUA_REGISTRYINDEX, "qkv.fatal") == LUA_TFUNCTION)
    lua_pcall(L, 0, 0, 0);
  lua_close(L);
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
