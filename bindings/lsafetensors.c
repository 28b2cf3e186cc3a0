/*
** lsafetensors.c -- qkv.load_safetensors and qkv.save_safetensors: named
** tensors in Hugging Face's safetensors files (the format is
** vm/formats/safetensors.c's).  The JSON header is parsed by libcjson through
** qkv.json, loaded on the first call, so that no other script pays for
** it; the data is mapped with mmap and copied once into the tensors.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lauxqkv.h"
#include "../vm/formats/safetensors.h"

#define LOAD "load_safetensors"
#define SAVE "save_safetensors"


/* loading */

/* the header's bytes as a Lua string, pushed, once they have passed the
   scan that bounds what the parser will build; *hlen is their count */
static void read_header (lua_State *L, qkvL_Reader *r, const char *path, uint64_t size,
                         uint64_t *hlen) {
  unsigned char pre[8];
  if (size < 8)
    luaL_error(L, LOAD ": %s: the file is %I bytes, shorter than the 8 that give the header's "
               "length", path, (lua_Integer)size);
  int e = qkvL_read_at(r->fd, pre, 8, 0);
  if (e) qkvL_ioerr(L, LOAD, path, e);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | pre[i];
  if (n > size - 8)
    luaL_error(L, LOAD ": %s: the header's length %I runs past the end of the file (%I bytes)",
               path, (lua_Integer)(n > INT64_MAX ? INT64_MAX : n), (lua_Integer)size);
  if (n > QKV_ST_MAXHEADER)
    luaL_error(L, LOAD ": %s: the header's length %I is over the format's limit of %I bytes",
               path, (lua_Integer)n, (lua_Integer)QKV_ST_MAXHEADER);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, (size_t)n);
  if ((e = qkvL_read_at(r->fd, p, (size_t)n, 8)) != 0) qkvL_ioerr(L, LOAD, path, e);
  if (n == 0 || p[0] != '{')
    luaL_error(L, LOAD ": %s: the header is not a JSON object (it must start with '{')", path);
  char err[QKV_ST_ERRLEN];
  if (qkv_st_scan_header(p, (size_t)n, err, sizeof err) != 0)
    luaL_error(L, LOAD ": %s: %s", path, err);
  luaL_pushresultsize(&b, (size_t)n);
  *hlen = n;
}

/* the header at index h decoded by qkv.json (names unique), pushed */
static void decode (lua_State *L, int h, const char *path) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.json");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "decode");
  lua_pushvalue(L, h);
  lua_pushfstring(L, "%s: the header", path);
  lua_pushboolean(L, 1);
  if (lua_pcall(L, 3, 1, 0) != LUA_OK) {
    const char *msg = luaL_tolstring(L, -1, NULL);
    if (strncmp(msg, "json.decode: ", 13) == 0) msg += 13;
    luaL_error(L, LOAD ": %s", msg);
  }
  if (lua_type(L, -1) != LUA_TTABLE)
    luaL_error(L, LOAD ": %s: the header is not a JSON object", path);
  lua_remove(L, -2);
}

/* a JSON array of integers >= 0 at the top: its length, the values in v */
static int intlist (lua_State *L, int64_t *v, int max) {
  if (lua_type(L, -1) != LUA_TTABLE) return -1;
  lua_Integer len = (lua_Integer)lua_rawlen(L, -1), keys = 0;
  lua_pushnil(L);
  while (lua_next(L, -2)) { keys++; lua_pop(L, 1); }
  if (keys != len || len > max) return -1;
  for (lua_Integer i = 1; i <= len; i++) {
    /* a JSON integer (json.c: whole and below 2^53), not a string that
       converts ("0x2") nor a float from 2^53 on, which may have been
       another number in the text */
    lua_rawgeti(L, -1, i);
    int isint = lua_isinteger(L, -1);
    lua_Integer x = isint ? lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    if (!isint || x < 0) return -1;
    v[i - 1] = x;
  }
  return (int)len;
}

/* entry e from the value at the top, the tensor called name */
static void entry (lua_State *L, qkv_st_entry *e, const char *name, const char *path) {
  if (lua_type(L, -1) != LUA_TTABLE)
    luaL_error(L, LOAD ": %s: tensor '%s' is not a JSON object", path, name);
  e->name = name;
  lua_pushliteral(L, "dtype");
  if (lua_rawget(L, -2) != LUA_TSTRING)
    luaL_error(L, LOAD ": %s: tensor '%s' has no dtype string", path, name);
  const char *dt = lua_tostring(L, -1);
  if ((e->dtype = qkv_st_dtype_named(dt)) == NULL)
    luaL_error(L, LOAD ": %s: tensor '%s' has the unknown dtype '%s'", path, name, dt);
  if (!e->dtype->supported)
    luaL_error(L, LOAD ": %s: tensor '%s' is %s, which qkv cannot read", path, name, dt);
  lua_pop(L, 1);
  lua_pushliteral(L, "shape");
  lua_rawget(L, -2);
  if ((e->ndim = intlist(L, e->shape, QKV_MAXDIM)) < 0)
    luaL_error(L, LOAD ": %s: tensor '%s': shape must be a list of at most %d integers >= 0",
               path, name, QKV_MAXDIM);
  lua_pop(L, 1);
  int64_t off[2];
  lua_pushliteral(L, "data_offsets");
  lua_rawget(L, -2);
  if (intlist(L, off, 2) != 2)
    luaL_error(L, LOAD ": %s: tensor '%s': data_offsets must be two integers >= 0", path, name);
  lua_pop(L, 1);
  e->begin = (uint64_t)off[0];
  e->end = (uint64_t)off[1];
}

/* the metadata at the top, checked (strings to strings) and left there */
static void metadata (lua_State *L, const char *path) {
  if (lua_type(L, -1) != LUA_TTABLE)
    luaL_error(L, LOAD ": %s: __metadata__ is not a JSON object", path);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, LOAD ": %s: __metadata__ maps names to strings, but '%s' is a %s", path,
                 lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?",
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
}

/* the entries of the decoded header at index j, in a userdata pushed above
   the metadata (an empty table when there is none); returns their count */
static int entries (lua_State *L, int j, const char *path, qkv_st_entry **out) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, j)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, LOAD ": %s: the header is not a JSON object", path);
    n += strcmp(lua_tostring(L, -2), "__metadata__") != 0;
    lua_pop(L, 1);
  }
  lua_getfield(L, j, "__metadata__");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
  } else metadata(L, path);
  qkv_st_entry *e = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *e, 0);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, j)) {
    const char *name = lua_tostring(L, -2);
    if (strcmp(name, "__metadata__") != 0) entry(L, &e[i++], name, path);
    lua_pop(L, 1);
  }
  *out = e;
  return n;
}

/* the data's bytes, mapped; NULL when there are none */
static const unsigned char *map_data (lua_State *L, qkvL_Reader *r, const char *path,
                                      uint64_t size, uint64_t start) {
  if (size == start) return NULL;
  void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, r->fd, 0);
  if (p == MAP_FAILED) qkvL_ioerr(L, LOAD, path, errno);
  r->map = p;
  r->maplen = (size_t)size;
  (void)posix_madvise(p, (size_t)size, POSIX_MADV_SEQUENTIAL);
  return (const unsigned char *)p + start;
}

/* qkv.load_safetensors(path) -> {name = tensor, ...}, metadata */
static int st_load (lua_State *L) {
  qkvL_noextra(L, LOAD, 1);
  const char *path = qkvL_checkpath(L, 1, LOAD);
  lua_settop(L, 1);
  qkvL_Reader *r = qkvL_newreader(L);                       /* 2 */
  uint64_t size = qkvL_open_regular(L, r, LOAD, path), hlen;
  read_header(L, r, path, size, &hlen);                     /* 3 */
  decode(L, 3, path);                                       /* 4 */
  qkv_st_entry *e;
  int n = entries(L, 4, path, &e);                          /* 5: metadata, 6: entries */
  char err[QKV_ST_ERRLEN];
  uint64_t start = 8 + hlen;
  if (qkv_st_check(e, n, size - start, err, sizeof err) != 0)
    luaL_error(L, LOAD ": %s: %s", path, err);
  const unsigned char *data = map_data(L, r, path, size, start);
  lua_createtable(L, 0, n);                                 /* 7 */
  for (int i = 0; i < n; i++) {
    qkv_tensor *t = qkvL_new(L, e[i].dtype->loads_as, QKV_CPU, e[i].ndim, e[i].shape, 0);
    int rc = qkv_st_convert(&e[i], data ? data + e[i].begin : NULL, qkv_data(t), err,
                            sizeof err);
    if (rc == QKV_ST_EINTR) qkvL_check(L, LOAD, QKV_EINTR);
    if (rc != 0) luaL_error(L, LOAD ": %s: %s", path, err);
    qkvL_todefault(L, LOAD);
    lua_setfield(L, 7, e[i].name);
  }
  qkvL_close_reader(L, 2);
  lua_pushvalue(L, 5);
  return 2;
}


/* saving */

typedef struct Item { qkv_st_entry e; const qkv_tensor *t; } Item;

/* widest elements first, so that every tensor starts aligned; then by name */
static int by_width_name (const void *a, const void *b) {
  const Item *x = a, *y = b;
  if (x->e.dtype->itemsize != y->e.dtype->itemsize)
    return y->e.dtype->itemsize - x->e.dtype->itemsize;
  return strcmp(x->e.name, y->e.name);
}

static int by_key (const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* a name or a metadata string: UTF-8 without NUL bytes */
static const char *checktext (lua_State *L, int idx, const char *what) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  int64_t bad = qkv_st_utf8_error(s, n);
  if (strlen(s) != n) luaL_error(L, SAVE ": %s holds a NUL byte", what);
  if (bad >= 0) luaL_error(L, SAVE ": %s is not valid UTF-8 (at byte %I)", what,
                           (lua_Integer)bad + 1);
  return s;
}

/* the tensors of the table at 2 as items (a userdata pushed), each kept
   alive by the table at keep; returns their count */
static int items (lua_State *L, int keep, Item **out) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) { n++; lua_pop(L, 1); }
  Item *it = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *it, 0);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 2) && i < n) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      const char *type = luaL_typename(L, -2);
      luaL_error(L, SAVE ": tensor names must be strings, got %s %s", type,
                 luaL_tolstring(L, -2, NULL));
    }
    const char *name = checktext(L, -2, "a tensor name");
    if (strcmp(name, "__metadata__") == 0)
      luaL_error(L, SAVE ": '__metadata__' is the format's own name, not a tensor's");
    if (qkvL_istensor(L, -1) == NULL)
      luaL_error(L, SAVE ": '%s' is a %s, not a tensor", name, luaL_typename(L, -1));
    if (qkvL_totensor(L, -1) == NULL)
      luaL_error(L, SAVE ": '%s' is a closed tensor", name);
    int top = lua_gettop(L);
    const qkv_tensor *t = qkvL_cpudata(L, top, SAVE);
    if (lua_gettop(L) == top) lua_pushvalue(L, top);
    lua_rawseti(L, keep, i + 1);                /* the tensor or its copy */
    lua_settop(L, top - 1);                     /* the name, for lua_next */
    Item *x = &it[i++];
    x->t = t;
    x->e.name = name;
    x->e.dtype = qkv_st_dtype_of(t->dtype);
    x->e.ndim = t->ndim;
    memcpy(x->e.shape, t->size, sizeof x->e.shape);
  }
  qsort(it, (size_t)n, sizeof *it, by_width_name);
  uint64_t at = 0;
  for (i = 0; i < n; i++) {
    it[i].e.begin = at;
    at += (uint64_t)qkv_numel(it[i].t) * qkv_elsize(it[i].t->dtype);
    it[i].e.end = at;
  }
  *out = it;
  return n;
}

/* the metadata at 3 as sorted key, value pairs (a userdata pushed) */
static int meta_pairs (lua_State *L, const char ***out) {
  int n = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 3)) { n++; lua_pop(L, 1); }
  }
  const char **kv = lua_newuserdatauv(L, (size_t)(n ? n : 1) * 2 * sizeof *kv, 0);
  int i = 0;
  if (n > 0) {
    lua_pushnil(L);
    while (lua_next(L, 3) && i < n) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, SAVE ": metadata maps strings to strings, got %s = %s",
                   luaL_typename(L, -2), luaL_typename(L, -1));
      kv[2 * i] = checktext(L, -2, "a metadata name");
      kv[2 * i + 1] = checktext(L, -1, "a metadata value");
      i++;
      lua_pop(L, 1);
    }
  }
  qsort(kv, (size_t)n, 2 * sizeof *kv, by_key);
  *out = kv;
  return n;
}

/* qkv.save_safetensors(path, {name = tensor, ...} [, metadata]) */
static int st_save (lua_State *L) {
  qkvL_noextra(L, SAVE, 3);
  const char *path = qkvL_checkpath(L, 1, SAVE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 3);
  lua_newtable(L);                                   /* 4: the tensors kept */
  Item *it;
  int n = items(L, 4, &it);                          /* 5 */
  const char **kv;
  int nmeta = meta_pairs(L, &kv);                    /* 6 */
  qkv_st_entry *e = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *e, 0);
  for (int i = 0; i < n; i++) e[i] = it[i].e;
  size_t hn = qkv_st_encode_header(NULL, 0, e, n, kv, nmeta);
  char *head = lua_newuserdatauv(L, hn + 8, 0);
  qkv_st_encode_header(head + 8, hn, e, n, kv, nmeta);
  for (int i = 0; i < 8; i++) head[i] = (char)(((uint64_t)hn >> (8 * i)) & 0xff);
  qkvL_Part *parts = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *parts, 0);
  parts[0].p = head;
  parts[0].n = hn + 8;
  for (int i = 0; i < n; i++) {
    parts[i + 1].p = qkv_data(it[i].t);
    parts[i + 1].n = (size_t)(it[i].e.end - it[i].e.begin);
  }
  int err = qkvL_write_file(path, parts, n + 1);
  if (err) qkvL_writeerr(L, SAVE, path, err);
  return 0;
}

void qkvL_open_safetensors (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {LOAD, st_load}, {SAVE, st_save}, {NULL, NULL}
  };
  qkvL_register(L, methods, module, NULL, NULL, f);
  (void)mt;
}
