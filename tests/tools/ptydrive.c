/*
** ptydrive.c -- runs a command on a new pseudo-terminal and drives it
** from a script read on standard input, for the REPL's tests.
**   ptydrive [-t timeout_ms] [-c cols] [-r rows] -- cmd [args...]
** Script commands, one a line ('#' lines and blank lines are skipped):
**   send TEXT     write TEXT to the terminal
**   expect TEXT   wait until TEXT appears after the previous match
**   sleep MS      keep reading for MS milliseconds
**   wait          wait for the command to exit and record its status
** TEXT takes the escapes \n \r \t \e \\ \xHH.  Everything the command
** writes goes verbatim to stdout, closed by one line
** "[ptydrive: ok, exit N]" or "[ptydrive: FAIL: ...]".
** Exit status: 0 ok, 1 failure, 2 bad usage.
*/
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static int master = -1;
static pid_t child = -1;
static int status = -1;         /* the child's exit status once waited for */
static int eof = 0;             /* the terminal's other side is closed */
static char last = '\n';        /* the last character echoed to stdout */
static long timeout_ms = 5000;

/* everything read and not yet consumed by a match */
static char *buf = NULL;
static size_t len = 0, cap = 0;

static long now_ms (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void append (const char *s, size_t n) {
  if (len + n > cap) {
    cap = (len + n) * 2 + 4096;
    buf = realloc(buf, cap);
    if (buf == NULL) { perror("ptydrive"); exit(2); }
  }
  memcpy(buf + len, s, n);
  len += n;
}

/* one poll of the master for up to ms: output is echoed and kept; a
   pending write (*out, *n) goes out when the terminal takes it */
static void pump (long ms, const char **out, size_t *n) {
  if (eof) {  /* nothing more to read: just let the time pass */
    struct timespec ts = {0, (ms > 10 ? 10 : ms) * 1000000L};
    nanosleep(&ts, NULL);
    return;
  }
  struct pollfd p = {master, POLLIN | (out && *n ? POLLOUT : 0), 0};
  if (poll(&p, 1, (int)ms) <= 0) return;
  if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
    char tmp[4096];
    ssize_t r = read(master, tmp, sizeof tmp);
    if (r > 0) {
      fwrite(tmp, 1, (size_t)r, stdout);
      last = tmp[r - 1];
      append(tmp, (size_t)r);
    } else if (r == 0 || errno != EINTR) eof = 1;  /* EIO: child closed it */
  }
  if (out && *n && (p.revents & POLLOUT)) {
    ssize_t w = write(master, *out, *n);
    if (w > 0) { *out += w; *n -= (size_t)w; }
    else if (w < 0 && errno != EINTR && errno != EAGAIN) *n = 0;
  }
}

/* decodes the escapes of `s` in place; returns the length or -1 */
static long unescape (char *s) {
  char *o = s;
  for (const char *i = s; *i; i++) {
    if (*i != '\\') { *o++ = *i; continue; }
    switch (*++i) {
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'e': *o++ = 27; break;
      case '\\': *o++ = '\\'; break;
      case 'x': {
        unsigned v;
        if (!isxdigit((unsigned char)i[1]) || !isxdigit((unsigned char)i[2])
            || sscanf(i + 1, "%2x", &v) != 1) return -1;
        *o++ = (char)v;
        i += 2;
        break;
      }
      default: return -1;
    }
  }
  return o - s;
}

static int do_send (const char *s, size_t n) {
  long end = now_ms() + timeout_ms;
  while (n > 0 && !eof && now_ms() < end) pump(end - now_ms(), &s, &n);
  return n == 0;
}

/* the match may straddle reads, so search all that is kept */
static int do_expect (const char *s, size_t n) {
  long end = now_ms() + timeout_ms;
  for (;;) {
    for (size_t i = 0; i + n <= len; i++) {
      if (memcmp(buf + i, s, n) == 0) {  /* consume up to the match's end */
        memmove(buf, buf + i + n, len - i - n);
        len -= i + n;
        return 1;
      }
    }
    long left = end - now_ms();
    if (left <= 0 || eof) return 0;
    pump(left, NULL, NULL);
  }
}

static void do_sleep (long ms) {
  long end = now_ms() + ms;
  for (long left = ms; left > 0; left = end - now_ms()) pump(left, NULL, NULL);
}

/* *st: the exit status, or 128 + the signal that killed it */
static int reap (int options, int *st) {
  int w;
  if (waitpid(child, &w, options) != child) return 0;
  *st = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
  child = -1;
  return 1;
}

/* keeps reading so that the child never blocks on a full terminal */
static int do_wait (void) {
  long end = now_ms() + timeout_ms;
  while (!reap(WNOHANG, &status)) {
    long left = end - now_ms();
    if (left <= 0) return 0;
    pump(left < 20 ? left : 20, NULL, NULL);
  }
  /* what it wrote before exiting (a grandchild may keep it open) */
  while (!eof && now_ms() < end) pump(end - now_ms(), NULL, NULL);
  return 1;
}

/* its status is not reported: the script did not wait for it */
static void finish (void) {
  int st;
  if (child <= 0) return;
  kill(-child, SIGHUP);  /* the whole session: the command's children too */
  kill(child, SIGHUP);
  long end = now_ms() + 200;
  while (!reap(WNOHANG, &st) && now_ms() < end) pump(10, NULL, NULL);
  if (child > 0) {
    kill(-child, SIGKILL);
    kill(child, SIGKILL);
    reap(0, &st);
  }
}

static pid_t start (char **argv, unsigned short cols, unsigned short rows) {
  master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0) return -1;
  /* opened here, so that the master never sees EIO before the child runs */
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  if (slave < 0) return -1;
  struct winsize ws = {rows, cols, 0, 0};
  ioctl(slave, TIOCSWINSZ, &ws);
  pid_t pid = fork();
  if (pid == 0) {  /* a clean signal state, whatever the test runner set */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    close(master);
    setsid();
    if (ioctl(slave, TIOCSCTTY, 0) < 0) _exit(126);
    dup2(slave, 0); dup2(slave, 1); dup2(slave, 2);
    if (slave > 2) close(slave);
    execvp(argv[0], argv);
    fprintf(stderr, "ptydrive: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(slave);
  return pid;
}

static int usage (const char *why) {
  fprintf(stderr, "ptydrive: %s\nusage: ptydrive [-t timeout_ms] [-c cols] "
          "[-r rows] -- cmd [args...] < script\n", why);
  return 2;
}

/* runs one script line; returns 1 to go on, 0 on failure, -1 if bad */
static int command (char *line, char *why, size_t whylen) {
  char *arg = strchr(line, ' ');
  if (arg) *arg++ = '\0';
  else arg = line + strlen(line);
  if (strcmp(line, "wait") == 0) {
    if (do_wait()) return 1;
    snprintf(why, whylen, "wait timed out");
    return 0;
  }
  if (strcmp(line, "sleep") == 0) { do_sleep(atol(arg)); return 1; }
  int expect = strcmp(line, "expect") == 0;
  if (!expect && strcmp(line, "send") != 0) return -1;
  snprintf(why, whylen, "%s \"%s\" ", line, arg);
  long n = unescape(arg);
  if (n < 0) return -1;
  if (expect ? do_expect(arg, (size_t)n) : do_send(arg, (size_t)n)) return 1;
  strncat(why, eof ? "timed out (end of output)" : "timed out",
          whylen - strlen(why) - 1);
  return 0;
}

int main (int argc, char **argv) {
  long cols = 80, rows = 24;
  int i = 1;
  for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
    long v = atol(argv[i + 1]);
    if (v <= 0) return usage("option values must be positive numbers");
    if (strcmp(argv[i], "-t") == 0) timeout_ms = v;
    else if (strcmp(argv[i], "-c") == 0) cols = v;
    else if (strcmp(argv[i], "-r") == 0) rows = v;
    else return usage("unknown option");
  }
  if (i + 1 >= argc || strcmp(argv[i], "--") != 0) return usage("no command");
  child = start(argv + i + 1, (unsigned short)cols, (unsigned short)rows);
  if (child < 0) { perror("ptydrive"); return 2; }
  signal(SIGPIPE, SIG_IGN);  /* a closed stdout must not skip finish() */
  char line[8192], why[8300] = "";
  int ok = 1, lineno = 0;
  while (ok == 1 && fgets(line, sizeof line, stdin)) {
    lineno++;
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '\0' || line[0] == '#') continue;
    ok = command(line, why, sizeof why);
  }
  if (ok < 0) fprintf(stderr, "ptydrive: script line %d: bad command\n", lineno);
  finish();
  if (last != '\n') putchar('\n');
  if (ok == 1 && status < 0) printf("[ptydrive: ok, exit -]\n");
  else if (ok == 1) printf("[ptydrive: ok, exit %d]\n", status);
  else if (ok == 0) printf("[ptydrive: FAIL: %s]\n", why);
  fflush(stdout);
  return ok == 1 ? 0 : ok == 0 ? 1 : 2;
}
