/*
** lzip.c -- the module qkv.zip: zip archives in memory through libzip, as
** the containers of .npz files.  Loaded only by qkv.savez / qkv.loadz
** (stdlib/qkv/npz.lua), which turn the entries into tensors.
**   zip.encode({name = bytes, ...}) -> the archive's bytes (entries stored,
**                                      as np.savez writes them)
**   zip.decode(bytes [, what]) -> {name = bytes, ...} (stored or deflated
**                                      entries, as np.savez_compressed)
** decode checks every entry's CRC-32 and size and refuses names with a NUL
** byte, all before it returns anything.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zip.h>

#include <lua.h>
#include <lauxlib.h>

#include "../../vm/core/qkv.h"

#define ARCHIVE "qkv.ziparchive"

/*
** Deflate expands at most 1032 to 1, so a deflated entry that claims more
** is lying; with the total capped by the machine's memory, a zip bomb is an
** error before anything is inflated.
*/
#define MAX_RATIO 1032

/* bytes inflated or copied between looks at the interrupt flag */
#define CHUNK ((zip_uint64_t)1 << 24)

LUALIB_API int luaopen_qkv_zip (lua_State *L);

/* libzip's objects live in a userdata, so that a Lua error (a memory
   error, a bad entry) cannot leak them */
typedef struct Archive {
  zip_source_t *src;           /* the buffer the archive lives in */
  zip_t *za;
  zip_file_t *zf;              /* the entry being read */
} Archive;

static int archive_gc (lua_State *L) {
  Archive *a = (Archive *)luaL_checkudata(L, 1, ARCHIVE);
  if (a->zf) zip_fclose(a->zf);
  if (a->za) zip_discard(a->za);
  if (a->src) zip_source_free(a->src);    /* we keep a reference of our own */
  a->zf = NULL, a->za = NULL, a->src = NULL;
  return 0;
}

static Archive *newarchive (lua_State *L) {
  Archive *a = (Archive *)lua_newuserdatauv(L, sizeof *a, 0);
  memset(a, 0, sizeof *a);
  if (luaL_newmetatable(L, ARCHIVE)) {
    lua_pushcfunction(L, archive_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return a;
}

static int ziperr (lua_State *L, const char *what, zip_error_t *e) {
  lua_pushfstring(L, "%s: %s", what, zip_error_strerror(e));
  zip_error_fini(e);
  return lua_error(L);
}


/* encode */

typedef struct Entry { const char *name, *data; size_t n; } Entry;

static int byname (const void *a, const void *b) {
  return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

/* the table's entries, checked and sorted (the archive does not depend
   on the table's order); the strings stay alive in the table */
static Entry *entries (lua_State *L, int *count) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, 1)) { n++; lua_pop(L, 1); }
  Entry *e = (Entry *)lua_newuserdatauv(L, sizeof(Entry) * (size_t)(n ? n : 1), 0);
  n = 0;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "encode: entry names must be strings, got %s", luaL_typename(L, -2));
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "encode: entry '%s' must be a string, got %s", lua_tostring(L, -2),
                 luaL_typename(L, -1));
    e[n].name = lua_tostring(L, -2);
    e[n].data = lua_tolstring(L, -1, &e[n].n);
    n++;
    lua_pop(L, 1);
  }
  qsort(e, (size_t)n, sizeof *e, byname);
  *count = n;
  return e;
}

/* the source's bytes as a Lua string */
static void pushsource (lua_State *L, zip_source_t *src) {
  zip_stat_t st;
  luaL_Buffer b;
  if (zip_source_open(src) != 0) ziperr(L, "encode", zip_source_error(src));
  if (zip_source_stat(src, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    zip_source_close(src);
    ziperr(L, "encode", zip_source_error(src));
  }
  char *p = luaL_buffinitsize(L, &b, (size_t)st.size);
  zip_int64_t k = zip_source_read(src, p, st.size);
  zip_source_close(src);
  if (k < 0 || (zip_uint64_t)k != st.size) ziperr(L, "encode", zip_source_error(src));
  luaL_pushresultsize(&b, (size_t)k);
}

/* the end-of-central-directory record alone: libzip writes nothing for an
   archive with no entries, where np.savez writes this */
static const char EMPTY[22] = "PK\5\6";

static int z_encode (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int n;
  Entry *e = entries(L, &n);
  if (n == 0) return lua_pushlstring(L, EMPTY, sizeof EMPTY), 1;
  Archive *a = newarchive(L);
  zip_error_t err;
  zip_error_init(&err);
  if ((a->src = zip_source_buffer_create(NULL, 0, 0, &err)) == NULL) ziperr(L, "encode", &err);
  if ((a->za = zip_open_from_source(a->src, ZIP_TRUNCATE, &err)) == NULL) ziperr(L, "encode", &err);
  zip_source_keep(a->src);           /* the bytes outlive the archive */
  for (int i = 0; i < n; i++) {
    zip_source_t *s = zip_source_buffer(a->za, e[i].data, e[i].n, 0);
    zip_int64_t idx = s ? zip_file_add(a->za, e[i].name, s, ZIP_FL_ENC_UTF_8) : -1;
    if (idx < 0) {
      if (s) zip_source_free(s);
      ziperr(L, "encode", zip_get_error(a->za));
    }
    if (zip_set_file_compression(a->za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0)
      ziperr(L, "encode", zip_get_error(a->za));
  }
  if (zip_close(a->za) != 0) ziperr(L, "encode", zip_get_error(a->za));
  a->za = NULL;
  pushsource(L, a->src);
  return 1;
}


/* decode */

/* every entry's sizes, before anything is inflated */
static void check_sizes (lua_State *L, zip_t *za, zip_int64_t n, const char *what) {
  uint64_t total = 0, limit = qkv_memory_limit();
  for (zip_int64_t i = 0; i < n; i++) {
    zip_stat_t st;
    if (zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0)
      ziperr(L, what, zip_get_error(za));
    const char *name = (st.valid & ZIP_STAT_NAME) ? st.name : "?";
    if (!(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_SIZE))
      luaL_error(L, "%s: entry '%s' has no size", what, name);
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      luaL_error(L, "%s: entry '%s' is encrypted", what, name);
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
      luaL_error(L, "%s: entry '%s' uses compression method %d; only stored and "
                 "deflated entries are read", what, name, (int)st.comp_method);
    if (st.comp_method == ZIP_CM_STORE ? st.size != st.comp_size
                                       : st.size / MAX_RATIO > st.comp_size)
      luaL_error(L, "%s: entry '%s' claims %I bytes from %I compressed", what, name,
                 (lua_Integer)st.size, (lua_Integer)st.comp_size);
    total += st.size;
    if (st.size > limit || total > limit)
      luaL_error(L, "%s: the entries hold %I bytes, more than this machine's memory",
                 what, (lua_Integer)(total < st.size ? st.size : total));
  }
}

/* name (n bytes) with NUL and other control bytes written out, pushed */
static const char *pushescaped (lua_State *L, const unsigned char *name, size_t n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < n; i++) {
    if (name[i] == 0) luaL_addstring(&b, "\\0");
    else if (name[i] < 0x20 || name[i] == 0x7f) {
      char x[8];
      snprintf(x, sizeof x, "\\x%02X", name[i]);
      luaL_addstring(&b, x);
    } else luaL_addchar(&b, (char)name[i]);
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static uint64_t le (const unsigned char *p, int n) {
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | p[n];
  return v;
}

/* the Info-ZIP Unicode path (extra field 0x7075) among x's n bytes, which
   libzip takes as the name in place of the record's: its name, or NULL */
static const unsigned char *unicode_path (const unsigned char *x, size_t n, size_t *len) {
  for (size_t at = 0; at + 4 <= n;) {
    size_t id = (size_t)le(x + at, 2), k = (size_t)le(x + at + 2, 2);
    if (at + 4 + k > n) break;
    if (id == 0x7075 && k >= 5) {
      *len = k - 5;
      return x + at + 9;
    }
    at += 4 + k;
  }
  return NULL;
}

/* the central directory's offset and entry count, from the end record at
   e (and its zip64 record when a locator precedes it, as libzip reads
   it); 0 when they do not fit in the archive */
static int directory (const unsigned char *b, size_t len, size_t e, uint64_t *at,
                      uint64_t *count) {
  *count = le(b + e + 10, 2);
  *at = le(b + e + 16, 4);
  if (e >= 20 && memcmp(b + e - 20, "PK\6\7", 4) == 0) {
    uint64_t z = le(b + e - 12, 8);
    if (z > len || len - z < 56 || memcmp(b + z, "PK\6\6", 4) != 0) return 0;
    *count = le(b + z + 32, 8);
    *at = le(b + z + 48, 8);
  }
  return *at <= len;
}

static int unlike_libzip (lua_State *L, const char *what) {
  return luaL_error(L, "%s: the central directory is not as libzip read it", what);
}

static int same (const char *s, const unsigned char *p, size_t n) {
  return p && strlen(s) == n && memcmp(s, p, n) == 0;
}

/*
** libzip hands names out as C strings: a name with a NUL byte ends there,
** or has a space in its place when libzip takes the name for CP437
** ("x.npy\0y.npy" loaded as "x.npy y"); the central directory's records
** give each name's true bytes.  Found as libzip finds it (the end record
** whose comment ends the archive, ZIP_CHECKCONS), it must list libzip's
** entries under libzip's names; anything else is an error too.
*/
static void check_names (lua_State *L, zip_t *za, const unsigned char *b, size_t len,
                         zip_int64_t n, const char *what) {
  size_t e = len - 22, stop = len > 22 + 65535 ? len - 22 - 65535 : 0;
  while (!(memcmp(b + e, "PK\5\6", 4) == 0 && e + 22 + le(b + e + 20, 2) == len)) {
    if (e == stop) unlike_libzip(L, what);
    e--;
  }
  uint64_t at, count;
  if (!directory(b, len, e, &at, &count) || count != (uint64_t)n) unlike_libzip(L, what);
  for (zip_int64_t i = 0; i < n; i++) {
    if (len - at < 46 || memcmp(b + at, "PK\1\2", 4) != 0) unlike_libzip(L, what);
    size_t k = (size_t)le(b + at + 28, 2), xn = (size_t)le(b + at + 30, 2), un = 0;
    size_t skip = 46 + k + xn + (size_t)le(b + at + 32, 2);
    if (len - at < skip) unlike_libzip(L, what);
    const unsigned char *name = b + at + 46, *u = unicode_path(name + k, xn, &un);
    if (memchr(name, 0, k))
      luaL_error(L, "%s: entry '%s' has a NUL byte in its name", what, pushescaped(L, name, k));
    if (u && memchr(u, 0, un))
      luaL_error(L, "%s: entry '%s' has a NUL byte in its name", what, pushescaped(L, u, un));
    const char *got = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (!got || !(same(got, name, k) || same(got, u, un))) unlike_libzip(L, what);
    at += skip;
  }
}

/* the error of the entry being read: a CRC mismatch said as one */
static int entryerr (lua_State *L, Archive *a, const char *name, const char *what) {
  if (zip_error_code_zip(zip_file_get_error(a->zf)) == ZIP_ER_CRC)
    return luaL_error(L, "%s: entry '%s' is corrupt (CRC-32 mismatch)", what, name);
  return luaL_error(L, "%s: entry '%s': %s", what, name, zip_file_strerror(a->zf));
}

/* entry i's bytes as a Lua string */
static void pushentry (lua_State *L, Archive *a, zip_uint64_t i, const char *name,
                       const char *what) {
  zip_stat_t st;
  luaL_Buffer b;
  if (zip_stat_index(a->za, i, 0, &st) != 0) ziperr(L, what, zip_get_error(a->za));
  /* libzip reads an entry of no bytes without its CRC layer: the CRC-32
     of nothing is 0 */
  if (st.comp_size == 0 && (st.valid & ZIP_STAT_CRC) && st.crc != 0)
    luaL_error(L, "%s: entry '%s' is corrupt (CRC-32 mismatch)", what, name);
  char *p = luaL_buffinitsize(L, &b, (size_t)st.size);
  if ((a->zf = zip_fopen_index(a->za, i, 0)) == NULL) ziperr(L, what, zip_get_error(a->za));
  zip_uint64_t got = 0;
  while (got < st.size) {
    if (qkv_interrupted) {         /* as qkvL_check: the hook has done its part */
      lua_sethook(L, NULL, 0, 0);
      luaL_error(L, "%s: interrupted", what);
    }
    zip_uint64_t want = st.size - got < CHUNK ? st.size - got : CHUNK;
    zip_int64_t k = zip_fread(a->zf, p + got, want);
    if (k < 0) entryerr(L, a, name, what);
    if (k == 0) luaL_error(L, "%s: entry '%s' is shorter than it claims", what, name);
    got += (zip_uint64_t)k;
  }
  /* libzip checks the CRC-32 only when a read meets the end of the data:
     one more read must find that end */
  char more;
  zip_int64_t k = zip_fread(a->zf, &more, 1);
  if (k < 0) entryerr(L, a, name, what);
  if (k > 0) luaL_error(L, "%s: entry '%s' is longer than it claims", what, name);
  zip_fclose(a->zf);
  a->zf = NULL;
  luaL_pushresultsize(&b, (size_t)got);
}

static int z_decode (lua_State *L) {
  size_t len;
  const char *bytes = luaL_checklstring(L, 1, &len);
  const char *what = luaL_optstring(L, 2, "decode");
  /* libzip opens an empty source as an empty archive; 22 bytes is the
     shortest zip there is (the end record alone) */
  if (len < sizeof EMPTY)
    return luaL_error(L, "%s: Not a zip archive (%d bytes)", what, (int)len);
  Archive *a = newarchive(L);
  zip_error_t err;
  zip_error_init(&err);
  if ((a->src = zip_source_buffer_create(bytes, len, 0, &err)) == NULL) ziperr(L, what, &err);
  if ((a->za = zip_open_from_source(a->src, ZIP_RDONLY | ZIP_CHECKCONS, &err)) == NULL)
    ziperr(L, what, &err);
  zip_source_keep(a->src);
  zip_int64_t n = zip_get_num_entries(a->za, 0);
  check_names(L, a->za, (const unsigned char *)bytes, len, n, what);
  check_sizes(L, a->za, n, what);
  lua_createtable(L, 0, (int)(n < 1000 ? n : 1000));
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name(a->za, (zip_uint64_t)i, ZIP_FL_ENC_GUESS);
    if (name == NULL) ziperr(L, what, zip_get_error(a->za));
    lua_pushstring(L, name);
    if (lua_rawget(L, -2) != LUA_TNIL)
      luaL_error(L, "%s: entry '%s' appears twice", what, name);
    lua_pop(L, 1);
    lua_pushstring(L, name);
    pushentry(L, a, (zip_uint64_t)i, lua_tostring(L, -1), what);
    lua_rawset(L, -3);
  }
  return 1;
}

LUALIB_API int luaopen_qkv_zip (lua_State *L) {
  static const luaL_Reg f[] = {{"encode", z_encode}, {"decode", z_decode}, {NULL, NULL}};
  luaL_newlib(L, f);
  lua_pushstring(L, zip_libzip_version());
  lua_setfield(L, -2, "libzip");
  return 1;
}
