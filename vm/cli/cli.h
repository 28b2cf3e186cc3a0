/*
** cli.h -- what the parts of the qkv executable share (cli.c): a ready Lua
** state, calls under the traceback handler and the SIGINT hook, and error
** reports; then the commands that main.c picks among.  Not part of the
** module qkv.so.
*/
#ifndef QKV_CLI_H
#define QKV_CLI_H

#include <stddef.h>

#include <lua.h>

extern const char *cli_progname;

/* the executable's full path into exe (size bytes) from /proc/self/exe;
   0 when it cannot be read */
int cli_exepath (char *exe, size_t size);

/* a new state with the standard libraries, the global `qkv` and the
   searcher for qkv's own modules; noenv: lua's -E (LUA_PATH and LUA_CPATH
   ignored); NULL (after a message) on failure */
lua_State *cli_newstate (int noenv);

/* calls the function below `nargs` arguments with a traceback handler;
   Ctrl-C while it runs raises "interrupted!" (a second one kills) */
int cli_docall (lua_State *L, int nargs, int nres);

/* from a signal handler: raises the flag kernels look at and hooks L so
   that its next Lua instruction raises "interrupted!" */
void cli_interrupt (lua_State *L);

/* pushes require(module).main and the table {argv[1], ..., argv[argc-1]} */
void cli_pushmain (lua_State *L, const char *module, int argc, char **argv);

/* cli_docall without the SIGINT hook */
int cli_pcall (lua_State *L, int nargs, int nres);

/* installs handler for sig with no SA_RESTART, so blocking reads return */
void cli_setsignal (int sig, void (*handler)(int));

/* pushes and returns the text Lua's REPL shows for the error object at
   idx: a string or number, else what __tostring gives, else "(error
   object is a nil value)" and the like (lua.c's msghandler) */
const char *cli_errortext (lua_State *L, int idx);

/* prints the error on top of the stack (if status is not LUA_OK) */
int cli_report (lua_State *L, int status);

/* pushes the one result of require("qkv.testrun")[fn]() */
void cli_testrun (lua_State *L, const char *fn);

/*
** The commands, each in its own file: main() hands argv to the first
** three, and a script's run ends in the REPL with -i or on a terminal.
*/

/* `qkv test [args]` (testrun.c): argv[0] is "test"; the exit status */
int cli_test (int argc, char **argv);

/* `qkv kernel [args]` (kernel.c): argv[0] is "kernel"; the exit status */
int cli_kernel (int argc, char **argv);

/* `qkv [options] [script [args]]` (script.c); the exit status */
int cli_script (int argc, char **argv);

/* the REPL on standard input (repl.c); returns when it reads end of file */
void cli_repl (lua_State *L);

#endif
