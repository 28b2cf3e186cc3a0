/*
** testrun.c -- `qkv test`: runs LuaUnit suites (stub, being written).
*/
#include <stdio.h>

#include "cli.h"

int cli_test (int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "%s test: not written yet\n", cli_progname);
  return 2;
}
