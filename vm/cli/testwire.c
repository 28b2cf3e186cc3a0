/*
** testwire.c -- the bytes between a suite's child process and the runner:
** plain Lua values (nil, booleans, numbers, strings, tables of those)
** encoded into a buffer, decoded onto a stack, and framed on a pipe.
** Lengths and numbers are in native order: both ends are one executable.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "testwire.h"

#define MAXDEPTH 8   /* deepest table encoded; deeper ones arrive as nil */

/* the tags of encoded values */
enum { T_NIL = 'z', T_FALSE = 'f', T_TRUE = 't', T_INT = 'i', T_FLOAT = 'd',
       T_STRING = 's', T_TABLE = '{', T_END = '}' };

void tw_init (tw_buf *b) {
  b->p = NULL;
  b->n = b->cap = 0;
  b->failed = 0;
}

void tw_free (tw_buf *b) {
  free(b->p);
  tw_init(b);
}

void tw_put (tw_buf *b, const void *data, size_t n) {
  if (b->failed || n == 0) return;
  if (b->cap - b->n < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) { b->failed = 1; return; }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

static void put_tag (tw_buf *b, char tag) { tw_put(b, &tag, 1); }

static void put_string (tw_buf *b, const char *s, size_t n) {
  uint32_t len = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  put_tag(b, T_STRING);
  tw_put(b, &len, sizeof len);
  tw_put(b, s, len);
}

static void encode (tw_buf *b, lua_State *L, int idx, int depth) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: put_tag(b, lua_toboolean(L, idx) ? T_TRUE : T_FALSE); return;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        put_tag(b, T_INT);
        tw_put(b, &i, sizeof i);
      } else {
        lua_Number x = lua_tonumber(L, idx);
        put_tag(b, T_FLOAT);
        tw_put(b, &x, sizeof x);
      }
      return;
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      put_string(b, s, n);
      return;
    }
    case LUA_TTABLE:
      if (depth < MAXDEPTH && lua_checkstack(L, 3)) {
        put_tag(b, T_TABLE);
        lua_pushnil(L);
        while (lua_next(L, idx)) {
          int kt = lua_type(L, -2);
          if (kt == LUA_TSTRING || kt == LUA_TNUMBER) {
            encode(b, L, -2, depth + 1);
            encode(b, L, -1, depth + 1);
          }
          lua_pop(L, 1);
        }
        put_tag(b, T_END);
        return;
      }
      break;
    default: break;
  }
  put_tag(b, T_NIL);
}

void tw_encode (tw_buf *b, lua_State *L, int idx) { encode(b, L, idx, 0); }

/* a cursor over encoded bytes */
typedef struct {
  const char *p, *end;
} reader;

static int get (reader *r, void *out, size_t n) {
  if ((size_t)(r->end - r->p) < n) return 0;
  memcpy(out, r->p, n);
  r->p += n;
  return 1;
}

static int decode (lua_State *L, reader *r, int depth);

/* the pairs of a table up to its end tag, into the table on top */
static int decode_pairs (lua_State *L, reader *r, int depth) {
  for (;;) {
    if (r->p >= r->end) return 0;
    if (*r->p == T_END) { r->p++; return 1; }
    if (!decode(L, r, depth + 1)) return 0;
    int bad = !lua_isstring(L, -1)                  /* keys: strings, numbers */
              || lua_tonumber(L, -1) != lua_tonumber(L, -1);   /* not NaN */
    if (bad) { lua_pop(L, 1); return 0; }
    if (!decode(L, r, depth + 1)) { lua_pop(L, 1); return 0; }
    lua_rawset(L, -3);
  }
}

static int decode (lua_State *L, reader *r, int depth) {
  char tag;
  if (depth > MAXDEPTH || !lua_checkstack(L, 3) || !get(r, &tag, 1)) return 0;
  switch (tag) {
    case T_NIL: lua_pushnil(L); return 1;
    case T_FALSE: case T_TRUE: lua_pushboolean(L, tag == T_TRUE); return 1;
    case T_INT: {
      lua_Integer i;
      if (!get(r, &i, sizeof i)) return 0;
      lua_pushinteger(L, i);
      return 1;
    }
    case T_FLOAT: {
      lua_Number x;
      if (!get(r, &x, sizeof x)) return 0;
      lua_pushnumber(L, x);
      return 1;
    }
    case T_STRING: {
      uint32_t n;
      if (!get(r, &n, sizeof n) || (size_t)(r->end - r->p) < n) return 0;
      lua_pushlstring(L, r->p, n);
      r->p += n;
      return 1;
    }
    case T_TABLE:
      lua_newtable(L);
      if (decode_pairs(L, r, depth)) return 1;
      lua_pop(L, 1);
      return 0;
    default: return 0;
  }
}

int tw_decode (lua_State *L, const char *p, size_t n) {
  reader r = {p, p + n};
  int top = lua_gettop(L);
  if (decode(L, &r, 0) && r.p == r.end) return 1;
  lua_settop(L, top);
  return 0;
}

static int write_all (int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

int tw_send (int fd, int kind, const char *payload, size_t n) {
  char head[FRAME_HEADER];
  uint32_t len = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  head[0] = (char)kind;
  memcpy(head + 1, &len, sizeof len);
  return write_all(fd, head, sizeof head) && write_all(fd, payload, len);
}
