/*
** lio.c -- qkv.save and qkv.load: tensors in NumPy's .npy files (the
** format is vm/formats/npy.c's), written by lauxio.c's atomic writer, which they
** share with qkv.savez (stdlib/qkv/npz.lua).  Internal, for qkv.npz:
** qkv._npy_encode(x), qkv._npy_decode(bytes, what), qkv._write_file(path,
** bytes, who) and qkv._read_file(path, who).
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/formats/npy.h"

#define HEADER_CAP 512          /* our headers: at most ~330 bytes for 8 dims */


static size_t nbytes_of (const qkv_tensor *t) {
  return (size_t)qkv_numel(t) * qkv_elsize(t->dtype);
}

/* stdlib/qkv/checkpoint.lua's f on this call's first n arguments: a
   table saved as a checkpoint, or a checkpoint loaded */
static int checkpoint (lua_State *L, const char *f, int n) {
  lua_settop(L, n);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.checkpoint");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, f);
  for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L) - n - 1;
}

/* qkv.save(path, x): a tensor as .npy, a table as a checkpoint */
static int io_save (lua_State *L) {
  qkvL_noextra(L, "save", 2);
  if (lua_type(L, 2) == LUA_TTABLE) {
    qkvL_checkpath(L, 1, "save");
    return checkpoint(L, "save", 2);
  }
  const char *path = qkvL_checkpath(L, 1, "save");
  const qkv_tensor *t = qkvL_cpudata(L, 2, "save");
  char head[HEADER_CAP];
  size_t hn = qkv_npy_encode_header(head, sizeof head, t->dtype, t->ndim, t->size);
  qkvL_Part parts[2] = {{head, hn}, {qkv_data(t), nbytes_of(t)}};
  int err = qkvL_write_file(path, parts, 2);
  if (err) qkvL_writeerr(L, "save", path, err);
  return 0;
}

/* qkv._write_file(path, bytes [, who]): for qkv.savez */
static int io_write_file (lua_State *L) {
  const char *who = luaL_optstring(L, 3, "_write_file");
  const char *path = qkvL_checkpath(L, 1, who);
  qkvL_Part part;
  part.p = luaL_checklstring(L, 2, &part.n);
  int err = qkvL_write_file(path, &part, 1);
  if (err) qkvL_writeerr(L, who, path, err);
  return 0;
}

/* qkv._npy_encode(x) -> the bytes of x's .npy file */
static int io_npy_encode (lua_State *L) {
  const qkv_tensor *t = qkvL_cpudata(L, 1, "_npy_encode");
  char head[HEADER_CAP];
  size_t hn = qkv_npy_encode_header(head, sizeof head, t->dtype, t->ndim, t->size);
  size_t n = nbytes_of(t);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, hn + n);
  memcpy(p, head, hn);
  for (size_t off = 0; off < n; off += QKVL_IO_CHUNK) {
    if (qkv_interrupted) qkvL_check(L, "savez", QKV_EINTR);
    memcpy(p + hn + off, (const char *)qkv_data(t) + off,
           n - off < QKVL_IO_CHUNK ? n - off : QKVL_IO_CHUNK);
  }
  luaL_pushresultsize(&b, hn + n);
  return 1;
}

/* qkv._npy_decode(bytes [, what]) -> tensor; errors start with what */
static int io_npy_decode (lua_State *L) {
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  const char *what = luaL_optstring(L, 2, "_npy_decode");
  char err[QKV_NPY_ERRLEN];
  qkv_npy_header h;
  if (qkv_npy_parse(s, n, n, &h, err, sizeof err) != 0)
    return luaL_error(L, "%s: %s", what, err);
  qkv_tensor *t = qkvL_new(L, h.dtype, QKV_CPU, h.ndim, h.shape, 0);
  int e = qkv_npy_decode(&h, s + h.data_offset, qkv_data(t), err, sizeof err);
  if (e == QKV_NPY_EINTR) qkvL_check(L, what, QKV_EINTR);
  if (e != 0) return luaL_error(L, "%s: %s", what, err);
  qkvL_todefault(L, what);
  return 1;
}

/* loading: the reader (lauxio.c) owns the open file and any buffer */

typedef qkvL_Reader Reader;

/* reads and parses the header, checked against the file's size */
static void read_header (lua_State *L, Reader *r, const char *path, uint64_t size,
                         qkv_npy_header *h) {
  char err[QKV_NPY_ERRLEN];
  unsigned char pre[QKV_NPY_PREFIX];
  size_t total, n = size < sizeof pre ? (size_t)size : sizeof pre;
  int e = qkvL_read_at(r->fd, pre, n, 0);
  if (e) qkvL_ioerr(L, "load", path, e);
  if (qkv_npy_header_len(pre, n, size, &total, err, sizeof err) != 0)
    luaL_error(L, "load: %s: %s", path, err);
  if ((r->buf = malloc(total)) == NULL) qkvL_ioerr(L, "load", path, ENOMEM);
  if ((e = qkvL_read_at(r->fd, r->buf, total, 0)) != 0) qkvL_ioerr(L, "load", path, e);
  if (qkv_npy_parse(r->buf, total, size, h, err, sizeof err) != 0)
    luaL_error(L, "load: %s: %s", path, err);
  free(r->buf);
  r->buf = NULL;
}

/* qkv.load(path) -> tensor; a file that starts as a safetensors file
   does (8 bytes of length, then the JSON header's '{') is read as a
   checkpoint (a table) */
static int io_load (lua_State *L) {
  qkvL_noextra(L, "load", 1);
  const char *path = qkvL_checkpath(L, 1, "load");
  Reader *r = qkvL_newreader(L);
  int ri = lua_gettop(L);                /* after any extra arguments */
  qkv_npy_header h;
  char err[QKV_NPY_ERRLEN];
  uint64_t size = qkvL_open_regular(L, r, "load", path);
  unsigned char pre[9];
  if (size >= sizeof pre && qkvL_read_at(r->fd, pre, sizeof pre, 0) == 0 && pre[8] == '{' &&
      memcmp(pre, "\x93NUMPY", 6) != 0) {
    qkvL_close_reader(L, ri);
    return checkpoint(L, "load", 1);
  }
  read_header(L, r, path, size, &h);
  /* the shape has been checked against the file: this allocation is as
     large as the data there is (8 times for int8 read as int64) */
  qkv_tensor *t = qkvL_new(L, h.dtype, QKV_CPU, h.ndim, h.shape, 0);
  void *src = qkv_data(t);
  if (!qkv_npy_inplace(&h) && (src = r->buf = malloc(h.data_bytes + 1)) == NULL)
    qkvL_ioerr(L, "load", path, ENOMEM);
  int e = qkvL_read_at(r->fd, src, h.data_bytes, h.data_offset);
  if (e) qkvL_ioerr(L, "load", path, e);
  if ((e = qkv_npy_decode(&h, src, qkv_data(t), err, sizeof err)) == QKV_NPY_EINTR)
    qkvL_check(L, "load", QKV_EINTR);
  if (e != 0) luaL_error(L, "load: %s: %s", path, err);
  qkvL_close_reader(L, ri);
  qkvL_todefault(L, "load");
  return 1;
}

/* qkv._read_file(path [, who]) -> the bytes of a regular file: for loadz */
static int io_read_file (lua_State *L) {
  const char *who = luaL_optstring(L, 2, "_read_file");
  const char *path = qkvL_checkpath(L, 1, who);
  Reader *r = qkvL_newreader(L);
  int ri = lua_gettop(L);
  uint64_t size = qkvL_open_regular(L, r, who, path);
  if (size > qkv_memory_limit()) qkvL_ioerr(L, who, path, ENOMEM);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, (size_t)size);
  int e = qkvL_read_at(r->fd, p, (size_t)size, 0);
  if (e) qkvL_ioerr(L, who, path, e);
  luaL_pushresultsize(&b, (size_t)size);
  qkvL_close_reader(L, ri);
  return 1;
}

void qkvL_open_io (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {"save", io_save}, {"load", io_load}, {"_npy_encode", io_npy_encode},
    {"_npy_decode", io_npy_decode}, {"_write_file", io_write_file},
    {"_read_file", io_read_file},
    {NULL, NULL}
  };
  lua_pushvalue(L, module);
  luaL_setfuncs(L, f, 0);
  lua_pop(L, 1);
  (void)mt; (void)methods;
}
