/*
** lio.c -- qkv.save and qkv.load: tensors in NumPy's .npy files (the
** format is vm/npy.c's), and the atomic writer they share with qkv.savez
** (stdlib/qkv/npz.lua).  Internal, for qkv.npz: qkv._npy_encode(x),
** qkv._npy_decode(bytes, what), qkv._write_file(path, bytes, who) and
** qkv._read_file(path, who).
*/
#define _XOPEN_SOURCE 700       /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lauxqkv.h"
#include "../vm/npy.h"

#define READER "qkv.npyreader"
#define HEADER_CAP 512          /* our headers: at most ~330 bytes for 8 dims */


/* writing */

/* how much one read or write moves between looks at the interrupt flag:
   tens of milliseconds, even from the page cache */
#define IO_CHUNK ((size_t)1 << 24)

/* errors of our own beside errno values: the flag stopped it, or the
   target is a file qkv does not write */
#define E_INTR (-2)
#define E_KIND (-3)

static int write_all (int fd, const char *p, size_t n) {
  while (n > 0) {
    if (qkv_interrupted) return E_INTR;
    ssize_t w = write(fd, p, n < IO_CHUNK ? n : IO_CHUNK);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int write_parts (int fd, const qkvL_Part *parts, int nparts) {
  int err = 0;
  for (int i = 0; i < nparts && !err; i++) err = write_all(fd, parts[i].p, parts[i].n);
  return err;
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
** file or the new one, never a part.  target has no symbolic link left in
** it; st is its stat when exists.  The target keeps its mode (and owner,
** where we may); a new one gets 0666 minus the umask, as fopen gives.  No
** temp file outlives a failure.
*/
static int write_atomic (const char *target, int exists, const struct stat *st,
                         const qkvL_Part *parts, int nparts) {
  char tmp[PATH_MAX + 16], dir[PATH_MAX];
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
  mode_t um = umask(0);
  umask(um);
  int fd = mkstemp(tmp);                 /* mode 0600, which fchmod fixes */
  if (fd < 0) return errno;
  int err = 0;
  if (exists && fchown(fd, st->st_uid, st->st_gid) != 0) { /* not ours to give */ }
  if (fchmod(fd, exists ? st->st_mode & 07777 : 0666 & ~um) != 0) err = errno;
  if (!err) err = write_parts(fd, parts, nparts);
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && qkv_interrupted) err = E_INTR;  /* Ctrl-C in fsync: the old file stays */
  if (!err && rename(tmp, target) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return err;
  }
  sync_dir(dir);
  return 0;
}

/*
** A character device or a FIFO is written in place, as any Unix tool
** writes one: replacing it with a regular file would take it from every
** other user of that name (/dev/null, a pipe a reader waits on).  Opening
** a FIFO waits for its reader; Ctrl-C stops the wait.
*/
static int write_inplace (const char *target, const qkvL_Part *parts, int nparts) {
  int fd;
  while ((fd = open(target, O_WRONLY | O_CLOEXEC | O_NOCTTY)) < 0 && errno == EINTR)
    if (qkv_interrupted) return E_INTR;
  if (fd < 0) return errno;
  struct stat st;
  int err = fstat(fd, &st) != 0 ? errno
          : !S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode) ? E_KIND  /* swapped meanwhile */
          : write_parts(fd, parts, nparts);
  if (close(fd) != 0 && !err && errno != EINTR) err = errno;
  return err;
}

/*
** Writes the parts to path: a regular file (or a new one) atomically, a
** character device or a FIFO in place; a folder, a block device or a
** socket is refused.  A symbolic link is followed, so the file it names
** is written and the link stays.  0, an errno value, E_INTR or E_KIND.
*/
int qkvL_write_file (const char *path, const qkvL_Part *parts, int nparts) {
  char real[PATH_MAX];
  const char *target = realpath(path, real) ? real : path;
  struct stat st;
  int exists = stat(target, &st) == 0;
  if (!exists || S_ISREG(st.st_mode)) return write_atomic(target, exists, &st, parts, nparts);
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return write_inplace(target, parts, nparts);
  return E_KIND;
}

/* a path argument: a string without NUL bytes, which the system would
   read as the end of a shorter name */
const char *qkvL_checkpath (lua_State *L, int arg, const char *who) {
  size_t n;
  const char *path = luaL_checklstring(L, arg, &n);
  if (strlen(path) != n)
    luaL_error(L, "%s: bad argument #%d (the path holds a NUL byte)", who, arg);
  return path;
}

void qkvL_writeerr (lua_State *L, const char *who, const char *path, int err) {
  if (err == E_INTR) qkvL_check(L, who, QKV_EINTR);
  if (err == E_KIND)
    luaL_error(L, "%s: %s: not a regular file, a character device or a FIFO", who, path);
  luaL_error(L, "%s: %s: %s", who, path, strerror(err));
}


/* a tensor as the .npy data wants it: contiguous on the CPU */

const qkv_tensor *qkvL_cpudata (lua_State *L, int arg, const char *fn) {
  qkv_tensor *t = qkvL_checktensor(L, arg);
  if (t->storage->device != QKV_CPU) return qkvL_todevice(L, t, QKV_CPU, fn);
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
  for (size_t off = 0; off < n; off += IO_CHUNK) {
    if (qkv_interrupted) qkvL_check(L, "savez", QKV_EINTR);
    memcpy(p + hn + off, (const char *)qkv_data(t) + off, n - off < IO_CHUNK ? n - off : IO_CHUNK);
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


/* loading: the open file and any buffer live in a userdata, so that an
   error anywhere (or a memory error from Lua) cannot leak them */

typedef qkvL_Reader Reader;

static int reader_close (lua_State *L) {
  Reader *r = (Reader *)luaL_checkudata(L, 1, READER);
  if (r->fd >= 0) close(r->fd);
  free(r->buf);
  if (r->map) munmap(r->map, r->maplen);
  r->fd = -1;
  r->buf = NULL;
  r->map = NULL;
  return 0;
}

Reader *qkvL_newreader (lua_State *L) {
  Reader *r = (Reader *)lua_newuserdatauv(L, sizeof *r, 0);
  r->fd = -1;
  r->buf = NULL;
  r->map = NULL;
  r->maplen = 0;
  if (luaL_newmetatable(L, READER)) {
    lua_pushcfunction(L, reader_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return r;
}

/* n bytes at off into p; 0, an errno value, -1 when the file is shorter,
   or E_INTR */
int qkvL_read_at (int fd, void *p, size_t n, uint64_t off) {
  char *c = p;
  while (n > 0) {
    if (qkv_interrupted) return E_INTR;
    ssize_t k = pread(fd, c, n < IO_CHUNK ? n : IO_CHUNK, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return -1;
    c += k;
    off += (uint64_t)k;
    n -= (size_t)k;
  }
  return 0;
}

void qkvL_ioerr (lua_State *L, const char *who, const char *path, int err) {
  if (err == E_INTR) qkvL_check(L, who, QKV_EINTR);
  luaL_error(L, "%s: %s: %s", who, path, err == -1 ? "the file shrank while it was read"
                                                   : strerror(err));
}

/* opens path to read: a regular file only, since a FIFO would block and a
   device may never end; returns its size */
uint64_t qkvL_open_regular (lua_State *L, Reader *r, const char *who, const char *path) {
  struct stat st;
  if ((r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) qkvL_ioerr(L, who, path, errno);
  if (fstat(r->fd, &st) != 0) qkvL_ioerr(L, who, path, errno);
  if (S_ISDIR(st.st_mode)) qkvL_ioerr(L, who, path, EISDIR);
  if (!S_ISREG(st.st_mode)) luaL_error(L, "%s: %s: not a regular file", who, path);
  return (uint64_t)st.st_size;
}

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

void qkvL_close_reader (lua_State *L, int idx) {
  lua_pushcfunction(L, reader_close);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
}

/* qkv.load(path) -> tensor */
static int io_load (lua_State *L) {
  const char *path = qkvL_checkpath(L, 1, "load");
  Reader *r = qkvL_newreader(L);
  int ri = lua_gettop(L);                /* after any extra arguments */
  qkv_npy_header h;
  char err[QKV_NPY_ERRLEN];
  read_header(L, r, path, qkvL_open_regular(L, r, "load", path), &h);
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
