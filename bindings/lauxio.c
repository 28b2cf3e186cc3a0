/*
** lauxio.c -- files for the parts of the bindings that read and write
** them (.npy, .npz, safetensors): paths, the atomic writer, readers that
** own their open file and buffers, and a tensor's data as a file wants
** it.  It registers no Lua function of its own.
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

#define READER "qkv.npyreader"


/* writing */

/* errors of our own beside errno values: the flag stopped it, or the
   target is a file qkv does not write */
#define E_INTR (-2)
#define E_KIND (-3)

static int write_all (int fd, const char *p, size_t n) {
  while (n > 0) {
    if (qkv_interrupted) return E_INTR;
    ssize_t w = write(fd, p, n < QKVL_IO_CHUNK ? n : QKVL_IO_CHUNK);
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
  size_t keep = len - pre;                    /* the name, cut where a name */
  if (keep > NAME_MAX - 8) keep = NAME_MAX - 8;   /* of NAME_MAX would not fit */
  if (pre + keep + 9 > PATH_MAX) return ENAMETOOLONG;
  memcpy(tmp, target, pre);                   /* <folder>/.<name>.XXXXXX */
  tmp[pre] = '.';
  memcpy(tmp + pre + 1, base, keep);
  memcpy(tmp + pre + 1 + keep, ".XXXXXX", 8);
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
** Where a write to path lands, into out (PATH_MAX bytes): path with its
** symbolic links followed, or, for a link to a file that does not exist
** yet, that file (found link by link, as open(O_CREAT) finds it), so that
** the link stays and names the new file.  0 or an errno value.
*/
static int resolve (const char *path, char *out) {
  if (realpath(path, out)) return 0;
  if (strlen(path) >= PATH_MAX) return ENAMETOOLONG;
  strcpy(out, path);
  for (int hops = 0; hops < 40; hops++) {       /* the kernel's own limit */
    struct stat st;
    char link[PATH_MAX];
    if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode)) return 0;
    ssize_t k = readlink(out, link, sizeof link - 1);
    if (k < 0) return errno;
    link[k] = '\0';
    const char *slash = strrchr(out, '/');
    size_t pre = link[0] == '/' || !slash ? 0 : (size_t)(slash - out) + 1;
    if (pre + (size_t)k >= PATH_MAX) return ENAMETOOLONG;
    memcpy(out + pre, link, (size_t)k + 1);   /* relative to the link's folder */
  }
  return ELOOP;
}

/*
** Writes the parts to path: a regular file (or a new one) atomically, a
** character device or a FIFO in place; a folder, a block device or a
** socket is refused.  A symbolic link is followed, so the file it names
** is written and the link stays.  0, an errno value, E_INTR or E_KIND.
*/
int qkvL_write_file (const char *path, const qkvL_Part *parts, int nparts) {
  char target[PATH_MAX];
  int e = resolve(path, target);
  if (e) return e;
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
    ssize_t k = pread(fd, c, n < QKVL_IO_CHUNK ? n : QKVL_IO_CHUNK, (off_t)off);
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

void qkvL_close_reader (lua_State *L, int idx) {
  lua_pushcfunction(L, reader_close);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
}
