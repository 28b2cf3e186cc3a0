/*
** repl.c -- the REPL, modelled on lua.c's: a line is tried as `return
** <line>` first, an incomplete chunk (a syntax error at <eof>) continues on
** a second prompt, and each command runs under the traceback handler and
** the SIGINT hook (cli_docall).  GNU readline edits lines and keeps the
** history when stdin is a terminal, through its callback interface so that
** Ctrl-C at the prompt can clear the line.  How results print and what Tab
** completes are decided in Lua (stdlib/qkv/repl.lua).
*/
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <readline/readline.h>
#include <readline/history.h>

#include <lua.h>
#include <lauxlib.h>

#include "../core/qkv.h"
#include "cli.h"

#define PROMPT "> "
#define PROMPT2 ">> "
#define EOFMARK "<eof>"
#define HISTSIZE 1000
#define MAXFRAMES 8

enum { GOT_LINE, GOT_EOF, GOT_INTR };

static lua_State *replL;               /* for the completion callback */
static int use_readline;
static char histfile[PATH_MAX];
static volatile sig_atomic_t got_sigint;

static void on_sigint (int sig) {
  (void)sig;
  got_sigint = 1;
}

/* while reading, Ctrl-C only sets a flag */
static void catch_sigint (void) {
  got_sigint = 0;
  cli_setsignal(SIGINT, on_sigint);
}


/* calling into qkv.repl ------------------------------------------------ */

/* pushes qkv.repl[name] (the module is loaded by cli_repl) */
static void pushreplfn (lua_State *L, const char *name) {
  lua_getfield(L, LUA_REGISTRYINDEX, "qkv.repl");
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}


/* reading lines -------------------------------------------------------- */

static char *line_read;
static int line_done;

/* removing the handler here keeps readline from drawing the next prompt */
static void on_line (char *line) {
  line_read = line;                    /* NULL at end of file */
  line_done = 1;
  rl_callback_handler_remove();
}

static int read_rl (const char *prompt, char **line) {
  line_done = 0;
  line_read = NULL;
  rl_callback_handler_install(prompt, on_line);
  /* SIGINT is blocked but while pselect waits: one that comes between the
     flag's test and the wait would otherwise leave it waiting for a key */
  sigset_t intr, old;
  sigemptyset(&intr);
  sigaddset(&intr, SIGINT);
  while (!line_done) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fileno(rl_instream), &fds);
    sigprocmask(SIG_BLOCK, &intr, &old);
    int r = got_sigint ? 0
          : pselect(fileno(rl_instream) + 1, &fds, NULL, NULL, NULL, &old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (got_sigint) {                  /* drop what was typed */
      rl_free_line_state();
      rl_callback_sigcleanup();
      rl_replace_line("", 0);
      rl_callback_handler_remove();
      fputs("\n", rl_outstream);
      return GOT_INTR;
    }
    if (r < 0 && errno != EINTR) break;
    if (r > 0) rl_callback_read_char();
  }
  if (!line_done) rl_callback_handler_remove();
  *line = line_read;
  return line_read ? GOT_LINE : GOT_EOF;
}

/* without a terminal: plain stdin; the prompt and the line read are
   printed, as readline (and so Debian's lua5.4) prints them */
static int read_plain (const char *prompt, char **line) {
  size_t n = 0, cap = 256;
  char *buf = malloc(cap);
  fputs(prompt, stdout);
  fflush(stdout);
  while (buf != NULL) {
    if (fgets(buf + n, (int)(cap - n), stdin) == NULL) {
      clearerr(stdin);
      if (got_sigint || n == 0) {
        free(buf);
        if (got_sigint) fputs("\n", stdout);
        return got_sigint ? GOT_INTR : GOT_EOF;
      }
      break;                           /* a last line without newline */
    }
    n += strlen(buf + n);
    if (n > 0 && buf[n - 1] == '\n') { buf[--n] = '\0'; break; }
    char *more = n + 1 < cap ? buf : realloc(buf, cap *= 2);
    if (more == NULL) free(buf);
    buf = more;
  }
  if (buf) printf("%s\n", buf);
  *line = buf;
  return buf ? GOT_LINE : GOT_EOF;
}

/* the prompt: tostring(_PROMPT) (_PROMPT2 on a continuation line) when
   set, as lua's REPL has it */
static int getprompt (lua_State *L) {
  int first = lua_toboolean(L, 1);
  if (lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2") == LUA_TNIL)
    lua_pushstring(L, first ? PROMPT : PROMPT2);
  else luaL_tolstring(L, -1, NULL);
  return 1;
}

/* pushes the prompt, the default one when tostring raised an error */
static const char *pushprompt (lua_State *L, int first) {
  lua_pushcfunction(L, getprompt);
  lua_pushboolean(L, first);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    fprintf(stderr, "%s: %s\n", first ? "_PROMPT" : "_PROMPT2", cli_errortext(L, -1));
    lua_pop(L, 2);
    lua_pushstring(L, first ? PROMPT : PROMPT2);
  }
  return lua_tostring(L, -1);
}

/* pushes the next line (without its newline) */
static int pushline (lua_State *L, int first) {
  char *line = NULL;
  const char *prompt = pushprompt(L, first);
  catch_sigint();
  int r = use_readline ? read_rl(prompt, &line) : read_plain(prompt, &line);
  cli_setsignal(SIGINT, SIG_DFL);
  lua_pop(L, 1);
  if (r != GOT_LINE) return r;
  if (first && line[0] == '=')         /* `=x` is `return x`, as in Lua 5.1 */
    lua_pushfstring(L, "return %s", line + 1);
  else
    lua_pushstring(L, line);
  free(line);
  return GOT_LINE;
}


/* history -------------------------------------------------------------- */

static void history_open (void) {
  const char *f = getenv("QKV_HISTORY"), *home = getenv("HOME");
  if (f && *f) snprintf(histfile, sizeof histfile, "%s", f);
  else if (home && *home) snprintf(histfile, sizeof histfile, "%s/.qkv_history", home);
  else return;
  stifle_history(HISTSIZE);
  if (read_history(histfile) != 0 && write_history(histfile) != 0)
    histfile[0] = '\0';                /* cannot create it: keep none */
}

/* each command goes to the file at once, so a killed session keeps it */
static void history_add (const char *chunk) {
  if (!use_readline || chunk[strspn(chunk, " \t")] == '\0') return;
  add_history(chunk);
  if (histfile[0] && append_history(1, histfile) == 0)
    history_truncate_file(histfile, HISTSIZE);
}


/* completion ----------------------------------------------------------- */

/* the words qkv.repl._complete gives, handed to readline one by one (it
   frees them); the Lua stack is left as it was, mid-chunk or not */
static char *lua_generator (const char *text, int state) {
  static char **words;
  static int i, n;
  lua_State *L = replL;
  if (state == 0) {
    while (i < n) free(words[i++]);
    free(words);
    words = NULL;
    i = n = 0;
    int top = lua_gettop(L);
    pushreplfn(L, "_complete");
    lua_pushstring(L, text);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
      int len = (int)lua_rawlen(L, -1);
      words = calloc((size_t)len + 1, sizeof *words);
      for (int k = 1; words && k <= len; k++) {
        const char *w = (lua_rawgeti(L, -1, k), lua_tostring(L, -1));
        if (w && (words[n] = strdup(w)) != NULL) n++;
        lua_pop(L, 1);
      }
    }
    lua_settop(L, top);
  }
  return i < n ? words[i++] : NULL;
}

/* inside a string: file names; elsewhere: names, fields and methods */
static char **complete (const char *text, int start, int end) {
  (void)start; (void)end;
  rl_attempted_completion_over = 1;
  rl_completion_append_character = '\0';
  if (rl_completion_quote_character != 0) {
    rl_completion_suppress_quote = 1;  /* the user closes the string */
    return rl_completion_matches(text, rl_filename_completion_function);
  }
  return rl_completion_matches(text, lua_generator);
}

/* inside an open string a file name is one word, '/' and '.' included */
static char *word_breaks (void) {
  static char lua_breaks[] = " \t\n\"'`@$><=;|&{}()[],+-*/%^~#";
  static char string_breaks[] = "\"'";
  char q = 0;
  for (int i = 0; i < rl_point; i++) {
    char c = rl_line_buffer[i];
    if (q == 0) { if (c == '"' || c == '\'') q = c; }
    else if (c == '\\') i++;
    else if (c == q) q = 0;
  }
  return q ? string_breaks : lua_breaks;
}

static void readline_open (void) {
  rl_readline_name = "qkv";
  rl_catch_signals = 0;                /* SIGINT is ours */
  rl_attempted_completion_function = complete;
  rl_completer_quote_characters = "\"'";
  rl_completion_word_break_hook = word_breaks;
  history_open();
}


/* running commands ----------------------------------------------------- */

static int incomplete (lua_State *L, int status) {
  if (status != LUA_ERRSYNTAX) return 0;
  size_t n;
  const char *msg = lua_tolstring(L, -1, &n);
  size_t m = sizeof(EOFMARK) - 1;
  return n >= m && strcmp(msg + n - m, EOFMARK) == 0;
}

/* `return <line>`, a trailing ';' dropped (it only asks for quiet) */
static int addreturn (lua_State *L, int *quiet) {
  size_t n;
  const char *line = lua_tolstring(L, 1, &n);
  while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
  *quiet = n > 0 && line[n - 1] == ';';
  if (*quiet) n--;
  lua_pushliteral(L, "return ");
  lua_pushlstring(L, line, n);
  lua_concat(L, 2);
  size_t cn;
  const char *code = lua_tolstring(L, -1, &cn);
  int status = luaL_loadbuffer(L, code, cn, "=stdin");
  lua_remove(L, -2);                   /* the code */
  if (status != LUA_OK) lua_pop(L, 1);
  return status;
}

/* the statement form; reads more lines while the chunk is incomplete */
static int multiline (lua_State *L) {
  for (;;) {
    size_t n;
    const char *chunk = lua_tolstring(L, 1, &n);
    int status = luaL_loadbuffer(L, chunk, n, "=stdin");
    if (!incomplete(L, status)) return status;
    lua_pop(L, 1);
    int r = pushline(L, 0);
    if (r != GOT_LINE) return r == GOT_EOF ? -1 : -2;
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/*
** Leaves the line at 1 and its compiled chunk (or an error message) at 2.
** Returns a Lua status, or -1 at end of file, -2 when interrupted, -3 for
** a `?` line (help).
*/
static int loadline (lua_State *L, int *quiet) {
  lua_settop(L, 0);
  int r = pushline(L, 1);
  if (r != GOT_LINE) return r == GOT_EOF ? -1 : -2;
  const char *line = lua_tostring(L, 1);
  if (line[strspn(line, " \t")] == '?') {
    history_add(line);
    return -3;
  }
  int status = addreturn(L, quiet);
  if (status != LUA_OK) {
    *quiet = 0;
    status = multiline(L);
  }
  if (status >= 0) history_add(lua_tostring(L, 1));
  return status;
}

static double now_ms (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the results above `base` print through qkv.repl._show, then the
   global print, as lua's REPL prints them; `_` is the first */
static void printresults (lua_State *L, int base, int quiet) {
  int n = lua_gettop(L) - base;
  if (n == 0) return;
  lua_pushvalue(L, base + 1);
  lua_setglobal(L, "_");
  if (quiet) return;
  pushreplfn(L, "_show");
  lua_insert(L, base + 1);
  if (lua_pcall(L, n, 1, 0) != LUA_OK) {
    fprintf(stderr, "error printing the result: %s\n", cli_errortext(L, -1));
    return;
  }
  lua_getglobal(L, "print");
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK)
    fprintf(stderr, "error calling 'print' (%s)\n", cli_errortext(L, -1));
  fflush(stdout);
  fflush(stderr);
}

/* the message and at most MAXFRAMES lines of its traceback, without the
   REPL's own frame at the bottom */
static void printerror (lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  if (msg == NULL) msg = "(error object is not a string)";
  const char *tb = strstr(msg, "\nstack traceback:");
  if (strstr(msg, "interrupted") && isatty(STDERR_FILENO)) fputs("\n", stderr);
  if (tb == NULL) { fprintf(stderr, "%s\n", msg); return; }
  fprintf(stderr, "%.*s\nstack traceback:", (int)(tb - msg), msg);
  const char *p = tb + sizeof("\nstack traceback:") - 1;
  for (int frames = 0; *p == '\n'; frames++) {
    const char *e = strchr(p + 1, '\n');
    int len = e ? (int)(e - p) : (int)strlen(p);
    if (strncmp(p, "\n\t[C]: in ?", (size_t)len) == 0 && len == 11) break;
    if (frames == MAXFRAMES) { fputs("\n\t...", stderr); break; }
    fprintf(stderr, "%.*s", len, p);
    p += len;
  }
  fputs("\n", stderr);
  fflush(stderr);
}

/* the time right-aligned, dimmed in a colour terminal */
static void printtime (lua_State *L, double ms) {
  if (!isatty(STDOUT_FILENO)) return;
  pushreplfn(L, "_timing");            /* the threshold in ms, or false */
  int on = lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isnumber(L, -1);
  double over = on ? lua_tonumber(L, -1) : 0;
  lua_pop(L, 1);
  if (!on || ms <= over) return;
  char t[32];
  if (ms < 1000) snprintf(t, sizeof t, "%.1f ms", ms);
  else snprintf(t, sizeof t, "%.2f s", ms / 1000);
  struct winsize ws;
  int cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
  int color = getenv("NO_COLOR") == NULL;
  printf("%s%*s%s\n", color ? "\033[90m" : "", cols - 1, t, color ? "\033[0m" : "");
  fflush(stdout);
}

/* `?expr`: help on expr */
static int helpline (lua_State *L) {
  const char *line = lua_tostring(L, 1);
  pushreplfn(L, "_help");
  lua_pushstring(L, strchr(line, '?') + 1);
  return cli_docall(L, 1, 0);
}

/* loads qkv.repl into the registry */
static int openrepl (lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.repl");
  lua_call(L, 1, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "qkv.repl");
  return 0;
}

void cli_repl (lua_State *L) {
  int quiet, status;
  lua_pushcfunction(L, openrepl);
  if (cli_report(L, lua_pcall(L, 0, 0, 0)) != LUA_OK) return;
  replL = L;
  use_readline = isatty(STDIN_FILENO);
  if (use_readline) readline_open();
  printf("qkv %s (%s)  help() for help, Ctrl-D to exit\n", QKV_VERSION, LUA_RELEASE);
  while ((status = loadline(L, &quiet)) != -1) {
    if (status == -2) continue;
    double t0 = now_ms();
    if (status == -3) status = helpline(L);
    else if (status == LUA_OK) {
      status = cli_docall(L, 0, LUA_MULTRET);
      if (status == LUA_OK) printresults(L, 1, quiet);   /* the line is at 1 */
    }
    if (status != LUA_OK) printerror(L);
    printtime(L, now_ms() - t0);
    lua_settop(L, 0);
  }
  lua_settop(L, 0);
  fputs("\n", stdout);
  fflush(stdout);
}
