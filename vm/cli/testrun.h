/*
** testrun.h -- what the parts of `qkv test` share: the runner in the
** parent process (testrun.c), the suite in its forked child
** (testchild.c), and the frames that go between them on a pipe
** (testwire.c).  Not part of the module qkv.so.
*/
#ifndef QKV_TESTRUN_H
#define QKV_TESTRUN_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/*
** The frames a child writes: one kind byte, a 4-byte length (native
** order: both ends are one executable on one machine), the payload.
*/
#define FRAME_STARTED  'S'   /* a test started; payload its name */
#define FRAME_ENDED    'E'   /* a test ended; payload its node (a table) */
#define FRAME_RESULTS  'R'   /* the suite's results (a table) */
#define FRAME_HEADER   5

/* a growable byte buffer; `failed` once memory ran out */
typedef struct {
  char *p;
  size_t n, cap;
  int failed;
} tw_buf;

void tw_init (tw_buf *b);
void tw_free (tw_buf *b);
void tw_put (tw_buf *b, const void *data, size_t n);

/* appends the value at idx of L: nil, booleans, numbers, strings and tables
   of those (keys strings or numbers); other values, and tables nested
   deeper than the limit, as nil */
void tw_encode (tw_buf *b, lua_State *L, int idx);

/* pushes the value encoded in p[0..n), or returns 0 (pushing nothing) when
   it is not one whole well-formed value */
int tw_decode (lua_State *L, const char *p, size_t n);

/* writes one frame to fd; returns 0 once the reader is gone */
int tw_send (int fd, int kind, const char *payload, size_t n);

/*
** The child: runs the suite named at index 1 of the runner's state L, with
** the LuaUnit options at index 2, in a new state; writes its frames to fd
** and exits.  timeout is the per-test limit in seconds (0: none).
*/
_Noreturn void testchild_run (lua_State *L, int fd, double timeout, uint64_t seed);

#endif
