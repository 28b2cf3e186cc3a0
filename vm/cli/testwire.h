/*
** testwire.h -- the frames that go on a pipe between the two parts of
** `qkv test`, the suite in its forked child (testchild.c) and the runner in
** the parent process (testrun.c), and the encoding of the Lua values they
** carry (testwire.c).  Not part of the module qkv.so.
*/
#ifndef QKV_TESTWIRE_H
#define QKV_TESTWIRE_H

#include <stddef.h>

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

#endif
