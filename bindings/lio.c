/*
** lio.c -- qkv.save and qkv.load: tensors in NumPy's .npy files (the
** format is vm/npy.c's), and the atomic writer they share with qkv.savez
** (stdlib/qkv/npz.lua).  Internal, for qkv.npz: qkv._npy_encode(x),
** qkv._npy_decode(bytes, what), qkv._write_atomic(path, bytes, who) and
** qkv._read_file(path, who).
*/
#define _XOPEN_SOURCE 700       /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lqkv.h"
#include "../vm/npy.h"

#define READER "qkv.npyreader"
#define HEADER_CAP 512          /* our headers: at most ~330 bytes for 8 dims */


/* atomic writes */

typedef struct Part { const void *p; size_t n; } Part;

static int write_all (int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n < ((size_t)1 << 30) ? n : (size_t)1 << 30);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* the rename is durable only once the folder's entry is; a file system
   that cannot sync folders still has the complete file in place */
static void sync_dir (const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/*
** Writes the parts to a temp file in the target's folder, syncs it and
** renames it over the target, so that a reader (or a crash) sees the old
** file or the new one, never a part.  A symbolic link is followed, so the
** file it names is replaced and the link stays.  The target keeps its
** mode (and owner, where we may); a new one gets 0666 minus the umask, as
** fopen gives.  Returns 0 or an errno value; no temp file outlives a
** failure.
*/
static int write_atomic (const char *path, const Part *parts, int nparts) {
  char real[PATH_MAX], tmp[PATH_MAX + 16], dir[PATH_MAX];
  const char *target = realpath(path, real) ? real : path;
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  size_t len = strlen(target), pre = (size_t)(base - target);  /* folder and '/' */
  if (len + 9 > PATH_MAX) return ENAMETOOLONG;
  memcpy(tmp, target, pre);                   /* <folder>/.<name>.XXXXXX */
  tmp[pre] = '.';
  memcpy(tmp + pre + 1, base, len - pre);
  memcpy(tmp + len + 1, ".XXXXXX", 8);
  if (!slash) strcpy(dir, ".");
  else {
    size_t n = pre > 1 ? pre - 1 : 1;         /* "/" for a file in the root */
    memcpy(dir, target, n);
    dir[n] = '\0';
  }
  struct stat st;
  int exists = stat(target, &st) == 0, err = 0;
  if (exists && S_ISDIR(st.st_mode)) return EISDIR;
  mode_t um = umask(0);
  umask(um);
  int fd = mkstemp(tmp);                 /* mode 0600, which fchmod fixes */
  if (fd < 0) return errno;
  if (exists && fchown(fd, st.st_uid, st.st_gid) != 0) { /* not ours to give */ }
  if (fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~um) != 0) err = errno;
  for (int i = 0; i < nparts && !err; i++)
    if (write_all(fd, parts[i].p, parts[i].n) != 0) err = errno;
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, target) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return err;
  }
  sync_dir(dir);
  return 0;
}


/* a tensor as the .npy data wants it: contiguous on the CPU */

static const qkv_tensor *cdata (lua_State *L, int arg, const char *fn) {
  qkv_tensor *t = qkvL_checktensor(L, arg);
  if (t->storage->device != QKV_CPU)
    luaL_error(L, "%s: the tensor is on %s; call x:cpu() first", fn,
               qkv_device_name(t->storage->device));
  if (qkv_is_contiguous(t)) return t;
  qkv_tensor *c = qkvL_new(L, t->dtype, QKV_CPU, t->ndim, t->size, 0);
  qkvL_check(L, fn, qkv_copy(c, t));
  return c;
}

static size_t nbytes_of (const qkv_tensor *t) {
  return (size_t)qkv_numel(t) * qkv_elsize(t->dtype);
}

/* qkv.save(path, x) */
static int io_save (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const qkv_tensor *t = cdata(L, 2, "save");
  char head[HEADER_CAP];
  size_t hn = qkv_npy_encode_header(head, sizeof head, t->dtype, t->ndim, t->size);
  Part parts[2] = {{head, hn}, {qkv_data(t), nbytes_of(t)}};
  int err = write_atomic(path, parts, 2);
  if (err) return luaL_error(L, "save: %s: %s", path, strerror(err));
  return 0;
}

/* qkv._write_atomic(path, bytes [, who]): for qkv.savez */
static int io_write_atomic (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  Part part;
  part.p = luaL_checklstring(L, 2, &part.n);
  const char *who = luaL_optstring(L, 3, "_write_atomic");
  int err = write_atomic(path, &part, 1);
  if (err) return luaL_error(L, "%s: %s: %s", who, path, strerror(err));
  return 0;
}

/* qkv._npy_encode(x) -> the bytes of x's .npy file */
static int io_npy_encode (lua_State *L) {
  const qkv_tensor *t = cdata(L, 1, "_npy_encode");
  char head[HEADER_CAP];
  size_t hn = qkv_npy_encode_header(head, sizeof head, t->dtype, t->ndim, t->size);
  size_t n = nbytes_of(t);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, hn + n);
  memcpy(p, head, hn);
  if (n > 0) memcpy(p + hn, qkv_data(t), n);
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
  if (qkv_npy_decode(&h, s + h.data_offset, qkv_data(t), err, sizeof err) != 0)
    return luaL_error(L, "%s: %s", what, err);
  return 1;
}


/* loading: the open file and any buffer live in a userdata, so that an
   error anywhere (or a memory error from Lua) cannot leak them */

typedef struct Reader { int fd; void *buf; } Reader;

static int reader_close (lua_State *L) {
  Reader *r = (Reader *)luaL_checkudata(L, 1, READER);
  if (r->fd >= 0) close(r->fd);
  free(r->buf);
  r->fd = -1;
  r->buf = NULL;
  return 0;
}

static Reader *newreader (lua_State *L) {
  Reader *r = (Reader *)lua_newuserdatauv(L, sizeof *r, 0);
  r->fd = -1;
  r->buf = NULL;
  if (luaL_newmetatable(L, READER)) {
    lua_pushcfunction(L, reader_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return r;
}

/* n bytes at off into p; 0, an errno value, or -1 when the file is shorter */
static int read_at (int fd, void *p, size_t n, uint64_t off) {
  char *c = p;
  while (n > 0) {
    ssize_t k = pread(fd, c, n < ((size_t)1 << 30) ? n : (size_t)1 << 30, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return -1;
    c += k;
    off += (uint64_t)k;
    n -= (size_t)k;
  }
  return 0;
}

static void ioerr (lua_State *L, const char *who, const char *path, int err) {
  luaL_error(L, "%s: %s: %s", who, path, err == -1 ? "the file shrank while it was read"
                                                   : strerror(err));
}

/* opens path to read: a regular file only, since a FIFO would block and a
   device may never end; returns its size */
static uint64_t open_regular (lua_State *L, Reader *r, const char *who, const char *path) {
  struct stat st;
  if ((r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) ioerr(L, who, path, errno);
  if (fstat(r->fd, &st) != 0) ioerr(L, who, path, errno);
  if (S_ISDIR(st.st_mode)) ioerr(L, who, path, EISDIR);
  if (!S_ISREG(st.st_mode)) luaL_error(L, "%s: %s: not a regular file", who, path);
  return (uint64_t)st.st_size;
}

/* reads and parses the header, checked against the file's size */
static void read_header (lua_State *L, Reader *r, const char *path, uint64_t size,
                         qkv_npy_header *h) {
  char err[QKV_NPY_ERRLEN];
  unsigned char pre[QKV_NPY_PREFIX];
  size_t total, n = size < sizeof pre ? (size_t)size : sizeof pre;
  int e = read_at(r->fd, pre, n, 0);
  if (e) ioerr(L, "load", path, e);
  if (qkv_npy_header_len(pre, n, size, &total, err, sizeof err) != 0)
    luaL_error(L, "load: %s: %s", path, err);
  if ((r->buf = malloc(total)) == NULL) ioerr(L, "load", path, ENOMEM);
  if ((e = read_at(r->fd, r->buf, total, 0)) != 0) ioerr(L, "load", path, e);
  if (qkv_npy_parse(r->buf, total, size, h, err, sizeof err) != 0)
    luaL_error(L, "load: %s: %s", path, err);
  free(r->buf);
  r->buf = NULL;
}

static void close_reader (lua_State *L, int idx) {
  lua_pushcfunction(L, reader_close);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
}

/* qkv.load(path) -> tensor */
static int io_load (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  Reader *r = newreader(L);
  int ri = lua_gettop(L);                /* after any extra arguments */
  qkv_npy_header h;
  char err[QKV_NPY_ERRLEN];
  read_header(L, r, path, open_regular(L, r, "load", path), &h);
  /* the shape has been checked against the file: this allocation is as
     large as the data there is (8 times for int8 read as int64) */
  qkv_tensor *t = qkvL_new(L, h.dtype, QKV_CPU, h.ndim, h.shape, 0);
  void *src = qkv_data(t);
  if (!qkv_npy_inplace(&h) && (src = r->buf = malloc(h.data_bytes + 1)) == NULL)
    ioerr(L, "load", path, ENOMEM);
  int e = read_at(r->fd, src, h.data_bytes, h.data_offset);
  if (e) ioerr(L, "load", path, e);
  if (qkv_npy_decode(&h, src, qkv_data(t), err, sizeof err) != 0)
    luaL_error(L, "load: %s: %s", path, err);
  close_reader(L, ri);
  return 1;
}

/* qkv._read_file(path [, who]) -> the bytes of a regular file: for loadz */
static int io_read_file (lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *who = luaL_optstring(L, 2, "_read_file");
  Reader *r = newreader(L);
  int ri = lua_gettop(L);
  uint64_t size = open_regular(L, r, who, path);
  if (size > qkv_memory_limit()) ioerr(L, who, path, ENOMEM);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, (size_t)size);
  int e = read_at(r->fd, p, (size_t)size, 0);
  if (e) ioerr(L, who, path, e);
  luaL_pushresultsize(&b, (size_t)size);
  close_reader(L, ri);
  return 1;
}

void qkvL_open_io (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {"save", io_save}, {"load", io_load}, {"_npy_encode", io_npy_encode},
    {"_npy_decode", io_npy_decode}, {"_write_atomic", io_write_atomic},
    {"_read_file", io_read_file},
    {NULL, NULL}
  };
  lua_pushvalue(L, module);
  luaL_setfuncs(L, f, 0);
  lua_pop(L, 1);
  (void)mt; (void)methods;
}
