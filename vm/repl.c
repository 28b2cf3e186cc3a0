/*
** repl.c -- the REPL (stub, being written).
*/
#include <stdio.h>

#include "cli.h"

void cli_repl (lua_State *L) {
  (void)L;
  fprintf(stderr, "%s: REPL not written yet\n", cli_progname);
}
