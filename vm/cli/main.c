/*
** main.c -- the qkv executable: picks the command and hands it the
** arguments.  `qkv test` is the test runner (testrun.c), `qkv kernel` the
** Jupyter kernel (kernel.c), anything else runs scripts as lua.c does
** (script.c), which may end in the REPL (repl.c).
*/
#include <string.h>

#include "cli.h"

int main (int argc, char **argv) {
  if (argv[0] && argv[0][0]) cli_progname = argv[0];
  if (argc > 1 && strcmp(argv[1], "test") == 0) return cli_test(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "kernel") == 0) return cli_kernel(argc - 1, argv + 1);
  return cli_script(argc, argv);
}
