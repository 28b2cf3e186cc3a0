/*
** safetensors.c -- the safetensors format (see safetensors.h): dtypes, the
** scan of a header's text, the checks of its entries against the data,
** conversion into qkv's dtypes and the header we write.  Nothing here
** trusts the file: every size is checked for overflow before it is
** compared or used.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "fail.h"
#include "../core/utf8.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place: port the conversion first"
#endif

/* ordered by alignment, widest first, as the writer wants them */
static const qkv_st_dtype DTYPES[] = {
  {"F64", 8, 'f', QKV_F64, 1}, {"I64", 8, 'i', QKV_I64, 1}, {"U64", 8, 'u', QKV_I64, 1},
  {"F32", 4, 'f', QKV_F32, 1}, {"I32", 4, 'i', QKV_I32, 1}, {"U32", 4, 'u', QKV_I64, 1},
  {"F16", 2, 'f', QKV_F16, 1}, {"BF16", 2, 'f', QKV_BF16, 1}, {"I16", 2, 'i', QKV_I64, 1},
  {"U16", 2, 'u', QKV_I64, 1}, {"I8", 1, 'i', QKV_I64, 1}, {"U8", 1, 'u', QKV_I64, 1},
  {"BOOL", 1, 'b', QKV_BOOL, 1}, {"F8_E4M3", 1, 'f', QKV_F32, 0},
  {"F8_E5M2", 1, 'f', QKV_F32, 0},
};
#define NDTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

const qkv_st_dtype *qkv_st_dtype_named (const char *name) {
  for (int i = 0; i < NDTYPES; i++)
    if (strcmp(DTYPES[i].name, name) == 0) return &DTYPES[i];
  return NULL;
}

const qkv_st_dtype *qkv_st_dtype_of (qkv_dtype dt) {
  switch (dt) {
    case QKV_F64: return qkv_st_dtype_named("F64");
    case QKV_I64: return qkv_st_dtype_named("I64");
    case QKV_I32: return qkv_st_dtype_named("I32");
    case QKV_F16: return qkv_st_dtype_named("F16");
    case QKV_BF16: return qkv_st_dtype_named("BF16");
    case QKV_BOOL: return qkv_st_dtype_named("BOOL");
    default: return qkv_st_dtype_named("F32");
  }
}


/* checking */

/* the bytes an entry's shape needs, or -1 past 2^63 */
static int64_t shape_bytes (const qkv_st_entry *e) {
  int64_t n = e->dtype->itemsize;
  for (int i = 0; i < e->ndim; i++) {
    if (e->shape[i] < 0) return -1;
    if (e->shape[i] == 0) n = 0;
  }
  for (int i = 0; i < e->ndim && n > 0; i++) {
    if (e->shape[i] > INT64_MAX / n) return -1;
    n *= e->shape[i];
  }
  return n;
}

static void shape_str (char *buf, size_t n, const qkv_st_entry *e) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < e->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)e->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

static int by_begin (const void *a, const void *b) {
  const qkv_st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int check_one (const qkv_st_entry *e, uint64_t data_bytes, char *err, size_t errlen) {
  char sh[160];
  if (e->end < e->begin)
    return qkv_format_fail(err, errlen, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                           e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > data_bytes)
    return qkv_format_fail(err, errlen, "tensor '%s': data_offsets [%llu, %llu] run past the %llu bytes "
                           "of data", e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)data_bytes);
  int64_t need = shape_bytes(e);
  shape_str(sh, sizeof sh, e);
  if (need < 0)
    return qkv_format_fail(err, errlen, "tensor '%s': shape %s is too large", e->name, sh);
  if ((uint64_t)need != e->end - e->begin)
    return qkv_format_fail(err, errlen, "tensor '%s': shape %s of %s is %lld bytes, but its data_offsets "
                           "[%llu, %llu] hold %llu", e->name, sh, e->dtype->name, (long long)need,
                           (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)(e->end - e->begin));
  return 0;
}

int qkv_st_check (qkv_st_entry *e, int n, uint64_t data_bytes, char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    if (check_one(&e[i], data_bytes, err, errlen) != 0) return -1;
  if (n > 1) qsort(e, (size_t)n, sizeof *e, by_begin);
  uint64_t at = 0;
  const char *prev = NULL;
  for (int i = 0; i < n; i++) {
    if (e[i].begin < at)
      return qkv_format_fail(err, errlen, "tensors '%s' and '%s' overlap: [%llu, ...) starts before "
                             "byte %llu, where '%s' ends", prev, e[i].name,
                             (unsigned long long)e[i].begin, (unsigned long long)at, prev);
    if (e[i].begin > at)
      return qkv_format_fail(err, errlen, "bytes %llu to %llu of the data belong to no tensor (before "
                             "'%s')", (unsigned long long)at, (unsigned long long)e[i].begin, e[i].name);
    at = e[i].end;
    prev = e[i].name;
  }
  if (at != data_bytes)
    return qkv_format_fail(err, errlen, "bytes %llu to %llu of the data belong to no tensor (at the end)",
                           (unsigned long long)at, (unsigned long long)data_bytes);
  return 0;
}


/* the header's shape, before any parser sees it */

/*
** A JSON parser builds a tree of the whole text at about a hundred bytes a
** value: a 100 MB header holding one flat list of numbers took 4.8 GB and
** 10 s to be refused.  This pass reads the text once, allocates nothing,
** and stops at the first byte of what no safetensors header holds (see
** qkv_st_scan_header).  What it cannot read as JSON it leaves to the
** parser, which refuses it there or before: the parser never reads past
** where the scan stopped.
*/

enum { OK = 0, LEAVE = 1, FAIL = -1 };

typedef struct Scan {
  const char *p, *end;
  char *err;
  size_t errlen;
} Scan;

static void ws (Scan *sc) {            /* as libcjson: every byte up to 32 */
  while (sc->p < sc->end && (unsigned char)*sc->p <= 32) sc->p++;
}

static int at (Scan *sc, char c) {
  ws(sc);
  if (sc->p < sc->end && *sc->p == c) { sc->p++; return 1; }
  return 0;
}

static int next_is (Scan *sc, const char *chars) {
  ws(sc);
  return sc->p < sc->end && *sc->p != '\0' && strchr(chars, *sc->p) != NULL;
}

/* a string's text as the header writes it, for a message: control bytes
   as \u00XX, cut with "..." past cap */
static void quote (char *out, size_t cap, const char *b, const char *e) {
  size_t k = 0;
  for (; b < e && k + 11 <= cap; b++) {
    unsigned char c = (unsigned char)*b;
    if (c < 32) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
    else out[k++] = (char)c;
  }
  if (b < e) memcpy(out + k, "...", 3), k += 3;
  out[k] = '\0';
}

/* the string at p, its text between *b and *e; *nul when it holds a NUL
   byte, raw or written \u0000 (a C string would end there) */
static int string (Scan *sc, const char **b, const char **e, int *nul) {
  ws(sc);
  if (sc->p >= sc->end || *sc->p != '"') return LEAVE;
  *b = ++sc->p;
  sc->p = qkv_json_string_end(sc->p, sc->end, nul);
  if (sc->p >= sc->end) return LEAVE;
  *e = sc->p++;
  return OK;
}

static int nul_in (Scan *sc, const char *where, const char *b, const char *e) {
  char q[80];
  quote(q, sizeof q, b, e);
  return qkv_format_fail(sc->err, sc->errlen, "%s: the string \"%s\" holds a NUL byte", where, q);
}

/* a string, a number, true, false or null */
static int scalar (Scan *sc, const char *where) {
  const char *b, *e, *start;
  int nul;
  if (next_is(sc, "\"")) {
    if (string(sc, &b, &e, &nul) != OK) return LEAVE;
    return nul ? nul_in(sc, where, b, e) : OK;
  }
  for (start = sc->p; sc->p < sc->end && (unsigned char)*sc->p > 32; sc->p++)
    if (strchr(",:[]{}\"", *sc->p)) break;
  return sc->p > start ? OK : LEAVE;
}

/* a tensor's list: at most QKV_MAXDIM numbers */
static int list (Scan *sc, const char *where, const char *key) {
  sc->p++;
  if (at(sc, ']')) return OK;
  for (size_t n = 1;; n++) {
    int r;
    if (next_is(sc, "[{"))
      return qkv_format_fail(sc->err, sc->errlen, "%s: '%s' holds a %s; a shape is a list of numbers",
                             where, key, *sc->p == '[' ? "list" : "JSON object");
    if ((r = scalar(sc, where)) != OK) return r;
    if (at(sc, ']')) return OK;
    if (!at(sc, ',')) return LEAVE;
    if (n == QKV_MAXDIM)
      return qkv_format_fail(sc->err, sc->errlen, "%s: '%s' holds more than %d values (a shape holds at "
                             "most %d, data_offsets 2)", where, key, QKV_MAXDIM, QKV_MAXDIM);
  }
}

static int tensor_value (Scan *sc, const char *where, const char *key) {
  if (next_is(sc, "{"))
    return qkv_format_fail(sc->err, sc->errlen, "%s: '%s' is a JSON object; a tensor holds strings and "
                           "lists of numbers", where, key);
  return next_is(sc, "[") ? list(sc, where, key) : scalar(sc, where);
}

static int meta_value (Scan *sc, const char *where, const char *key) {
  if (next_is(sc, "[{"))
    return qkv_format_fail(sc->err, sc->errlen, "%s maps names to strings, but '%s' is a %s", where, key,
                           *sc->p == '[' ? "list" : "JSON object");
  return scalar(sc, where);
}

/* an object's members, at most max of them, each value read by value() */
static int members (Scan *sc, const char *where, size_t max,
                    int (*value) (Scan *, const char *, const char *)) {
  sc->p++;
  if (at(sc, '}')) return OK;
  for (size_t n = 1;; n++) {
    const char *b, *e;
    char key[80];
    int nul, r;
    if (n > max)
      return qkv_format_fail(sc->err, sc->errlen, "%s: more than %d keys (a tensor has dtype, shape and "
                             "data_offsets)", where, QKV_ST_MAXKEYS);
    if (string(sc, &b, &e, &nul) != OK || !at(sc, ':')) return LEAVE;
    if (nul) return nul_in(sc, where, b, e);
    quote(key, sizeof key, b, e);
    if ((r = value(sc, where, key)) != OK) return r;
    if (at(sc, '}')) return OK;
    if (!at(sc, ',')) return LEAVE;
  }
}

/* the character that JSON's escape \c stands for (\u aside) */
static int unescape (int c) {
  switch (c) {
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return c;
  }
}

/* whether the name between b and e is "__metadata__", its escapes read */
static int is_metadata (const char *b, const char *e) {
  const char *want = "__metadata__";
  while (b < e) {
    int c = (unsigned char)*b++;
    if (c == '\\' && b < e && (c = unescape((unsigned char)*b++)) == 'u') {
      char hex[5] = {0};
      if (e - b < 4) return 0;
      memcpy(hex, b, 4);
      b += 4;
      c = (int)strtol(hex, NULL, 16);
    }
    if (*want == '\0' || c != *want++) return 0;
  }
  return *want == '\0';
}

/* the value of the member of the header named between b and e */
static int top_value (Scan *sc, const char *b, const char *e) {
  char where[100], q[80];
  int meta = is_metadata(b, e);
  quote(q, sizeof q, b, e);
  if (meta) snprintf(where, sizeof where, "__metadata__");
  else snprintf(where, sizeof where, "tensor '%s'", q);
  if (next_is(sc, "["))
    return qkv_format_fail(sc->err, sc->errlen, "%s is a list, not a JSON object", where);
  if (!next_is(sc, "{")) return scalar(sc, where);
  return meta ? members(sc, where, SIZE_MAX, meta_value)
              : members(sc, where, QKV_ST_MAXKEYS, tensor_value);
}

int qkv_st_scan_header (const char *s, size_t n, char *err, size_t errlen) {
  Scan sc = {s, s + n, err, errlen};
  if (!at(&sc, '{') || at(&sc, '}')) return 0;
  for (;;) {
    const char *b, *e;
    int nul, r;
    if (string(&sc, &b, &e, &nul) != OK || !at(&sc, ':')) return 0;
    if (nul) {
      char q[80];
      quote(q, sizeof q, b, e);
      return qkv_format_fail(err, errlen, "tensor '%s': its name holds a NUL byte", q);
    }
    if ((r = top_value(&sc, b, e)) != OK) return r == FAIL ? -1 : 0;
    if (!at(&sc, ',')) return 0;
  }
}


/* converting */

/* bytes of one element of dt in a tensor (dtype.c's qkv_elsize, which
   the fuzz target does not link) */
static size_t elsize (qkv_dtype dt) {
  switch (dt) {
    case QKV_BOOL: return 1;
    case QKV_F16: case QKV_BF16: return 2;
    case QKV_F32: case QKV_I32: return 4;
    default: return 8;
  }
}

#define EVERY_64K(i) (((i) & 0xffff) == 0xffff && qkv_interrupted)

/* I8, I16 (sign-extended), U8, U16, U32 and U64 (below 2^63) into int64 */
static int widen (const qkv_st_entry *e, const unsigned char *s, int64_t *d, int64_t n,
                  char *err, size_t errlen) {
  const int size = e->dtype->itemsize, shift = 64 - 8 * size;
  const int is_signed = e->dtype->kind == 'i';
  for (int64_t i = 0; i < n; i++) {
    if (EVERY_64K(i)) return QKV_ST_EINTR;
    uint64_t u = 0;
    memcpy(&u, s + i * size, (size_t)size);       /* little-endian: the low bytes */
    if (is_signed) d[i] = (int64_t)(u << shift) >> shift;
    else if (u > (uint64_t)INT64_MAX)
      return qkv_format_fail(err, errlen, "tensor '%s': element %lld is %llu, past int64's range",
                             e->name, (long long)i, (unsigned long long)u);
    else d[i] = (int64_t)u;
  }
  return 0;
}

int qkv_st_convert (const qkv_st_entry *e, const void *src, void *dst,
                    char *err, size_t errlen) {
  int64_t bytes = shape_bytes(e), n = bytes / e->dtype->itemsize;
  const unsigned char *s = src;
  char kind = e->dtype->kind;
  if (e->dtype->itemsize == (int)elsize(e->dtype->loads_as) && kind != 'u' && kind != 'b') {
    for (int64_t off = 0; off < bytes; off += (int64_t)1 << 24) {
      if (qkv_interrupted) return QKV_ST_EINTR;
      int64_t k = bytes - off < ((int64_t)1 << 24) ? bytes - off : (int64_t)1 << 24;
      memcpy((char *)dst + off, s + off, (size_t)k);
    }
    return 0;
  }
  if (kind == 'b') {
    for (int64_t i = 0; i < n; i++) {
      if (EVERY_64K(i)) return QKV_ST_EINTR;
      if (s[i] > 1)
        return qkv_format_fail(err, errlen, "tensor '%s': element %lld is the byte %d, not a BOOL (0 or 1)",
                               e->name, (long long)i, s[i]);
      ((unsigned char *)dst)[i] = s[i];
    }
    return 0;
  }
  return widen(e, s, dst, n, err, errlen);
}


/* writing the header */

typedef struct Out { char *p; size_t cap, n; } Out;

static void put (Out *o, const char *s, size_t k) {
  if (o->n < o->cap) memcpy(o->p + o->n, s, o->n + k <= o->cap ? k : o->cap - o->n);
  o->n += k;
}

static void puts_ (Out *o, const char *s) { put(o, s, strlen(s)); }

/* a JSON string: quotes, backslashes and control bytes escaped, the rest
   (UTF-8) as it is */
static void putstr (Out *o, const char *s) {
  char u[8];
  put(o, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { put(o, "\\", 1); put(o, s, 1); }
    else if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); put(o, u, 6); }
    else put(o, s, 1);
  }
  put(o, "\"", 1);
}

static void putentry (Out *o, const qkv_st_entry *e) {
  char num[48];
  putstr(o, e->name);
  puts_(o, ":{\"dtype\":");
  putstr(o, e->dtype->name);
  puts_(o, ",\"shape\":[");
  for (int i = 0; i < e->ndim; i++) {
    snprintf(num, sizeof num, i ? ",%lld" : "%lld", (long long)e->shape[i]);
    puts_(o, num);
  }
  snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e->begin,
           (unsigned long long)e->end);
  puts_(o, num);
}

size_t qkv_st_encode_header (char *buf, size_t cap, const qkv_st_entry *e, int n,
                             const char *const *meta, int nmeta) {
  Out o = {buf, cap, 0};
  put(&o, "{", 1);
  if (nmeta > 0) {
    puts_(&o, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) put(&o, ",", 1);
      putstr(&o, meta[2 * i]);
      put(&o, ":", 1);
      putstr(&o, meta[2 * i + 1]);
    }
    put(&o, "}", 1);
  }
  for (int i = 0; i < n; i++) {
    if (i || nmeta > 0) put(&o, ",", 1);
    putentry(&o, &e[i]);
  }
  put(&o, "}", 1);
  while (o.n % 8 != 0) put(&o, " ", 1);
  return o.n;
}

int64_t qkv_st_utf8_error (const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0, k; i < n; i += k)
    if ((k = qkv_utf8_seq(u + i, n - i)) == 0) return (int64_t)i;
  return -1;
}
