/*
** testchild.h -- the child process of `qkv test` (testchild.c), which the
** runner (testrun.c) forks for each suite.  Not part of the module qkv.so.
*/
#ifndef QKV_TESTCHILD_H
#define QKV_TESTCHILD_H

#include <stdint.h>

#include <lua.h>

/*
** The child: runs the suite named at index 1 of the runner's state L, with
** the LuaUnit options at index 2, in a new state; writes its frames to fd
** and exits.  timeout is the per-test limit in seconds (0: none).
*/
_Noreturn void testchild_run (lua_State *L, int fd, double timeout, uint64_t seed);

#endif
