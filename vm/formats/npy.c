/*
** npy.c -- NumPy's .npy format (see npy.h): a strict parser for the
** header, the check of its shape against the bytes there are, the
** conversion of the data into qkv's dtypes, and the header we write.
** Nothing here trusts the file: every length is checked before it is
** used, and no size from the header is allocated here at all.
*/
#include <stdio.h>
#include <string.h>

#include "npy.h"
#include "fail.h"

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static int little_endian (void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

size_t qkv_npy_elsize (qkv_dtype dt) {
  switch (dt) {                 /* qkv_elsize's, without dtype.c */
    case QKV_BOOL: return 1;
    case QKV_F16: case QKV_BF16: return 2;
    case QKV_F32: case QKV_I32: return 4;
    default: return 8;
  }
}

/* "(2, 3)" as Python writes a tuple */
static void shape_str (char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, ndim == 1 ? ",)" : ")");
}


/* the preamble: magic, version, header length */

int qkv_npy_header_len (const unsigned char *buf, size_t n, uint64_t filesize,
                        size_t *total, char *err, size_t errlen) {
  size_t m = n < sizeof MAGIC ? n : sizeof MAGIC;
  if (memcmp(buf, MAGIC, m) != 0)
    return qkv_format_fail(err, errlen, n >= 4 && memcmp(buf, "PK\3\4", 4) == 0
                           ? "bad magic: a zip archive, not a .npy file (an .npz? qkv.loadz reads those)"
                           : "bad magic (not a .npy file)");
  if (n < 10)
    return qkv_format_fail(err, errlen, "truncated: the file has %zu bytes, too few for a .npy header", n);
  int major = buf[6], minor = buf[7];
  if ((major < 1 || major > 3) || minor != 0)
    return qkv_format_fail(err, errlen, "unsupported .npy version %d.%d", major, minor);
  size_t prefix = major == 1 ? 10 : 12, hlen;
  if (n < prefix)
    return qkv_format_fail(err, errlen, "truncated: the file has %zu bytes, too few for a .npy header", n);
  if (major == 1) hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
  else hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
              (size_t)buf[11] << 24;
  if (hlen > QKV_NPY_MAXHEADER)
    return qkv_format_fail(err, errlen, "header length %zu is too long (at most %zu)", hlen,
                           QKV_NPY_MAXHEADER);
  if (prefix + hlen > filesize)
    return qkv_format_fail(err, errlen, "header length %zu but the file has %llu bytes", hlen,
                           (unsigned long long)filesize);
  *total = prefix + hlen;
  return 0;
}


/* the dict: a small lexer over the Python literal NumPy writes */

typedef struct Lex {
  const char *p, *end;
  char *err;
  size_t errlen;
} Lex;

static void skipws (Lex *lx) {
  while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' ||
                             *lx->p == '\r'))
    lx->p++;
}

/* an error that quotes the text where parsing stopped */
static int bad (Lex *lx, const char *what) {
  char near[24];
  size_t k = 0;
  for (const char *q = lx->p; q < lx->end && k < 20; q++)
    near[k++] = (*q >= 32 && *q < 127) ? *q : '?';
  near[k] = '\0';
  if (lx->p >= lx->end) return qkv_format_fail(lx->err, lx->errlen, "unparsable header: %s at its end", what);
  return qkv_format_fail(lx->err, lx->errlen, "unparsable header: %s at \"%s\"", what, near);
}

static int accept (Lex *lx, char c) {
  skipws(lx);
  if (lx->p < lx->end && *lx->p == c) { lx->p++; return 1; }
  return 0;
}

/* a quoted string without escapes into out (cap bytes); -2 when too long,
   -3 when it holds a NUL (C would read it shorter than it is) */
static int string (Lex *lx, char *out, size_t cap) {
  skipws(lx);
  if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"')) return -1;
  char q = *lx->p++;
  size_t k = 0;
  while (lx->p < lx->end && *lx->p != q) {
    if (*lx->p == '\\' || *lx->p == '\n') return -1;
    if (*lx->p == '\0') return -3;
    if (k + 1 < cap) out[k] = *lx->p;
    k++, lx->p++;
  }
  if (lx->p >= lx->end) return -1;
  lx->p++;
  out[k < cap ? k : cap - 1] = '\0';
  return k < cap ? 0 : -2;
}

static int word (Lex *lx, const char *w) {
  size_t n = strlen(w);
  skipws(lx);
  if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n) != 0) return 0;
  const char *after = lx->p + n;
  if (after < lx->end && (*after == '_' || (*after >= 'a' && *after <= 'z') ||
                          (*after >= 'A' && *after <= 'Z') || (*after >= '0' && *after <= '9')))
    return 0;
  lx->p = after;
  return 1;
}

/* a non-negative integer, as Python 2 wrote it too (3L) */
static int integer (Lex *lx, int64_t *v) {
  skipws(lx);
  if (lx->p < lx->end && *lx->p == '-') {
    const char *q = lx->p + 1;
    while (q < lx->end && *q >= '0' && *q <= '9') q++;
    if (q > lx->p + 1)
      return qkv_format_fail(lx->err, lx->errlen, "shape has a negative size %.*s",
                             (int)(q - lx->p), lx->p);
  }
  if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9')
    return bad(lx, "expected an integer size in 'shape'");
  int64_t x = 0;
  while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
    int d = *lx->p++ - '0';
    if (x > (INT64_MAX - d) / 10)
      return qkv_format_fail(lx->err, lx->errlen, "shape has a size too large for 64 bits");
    x = x * 10 + d;
  }
  if (lx->p < lx->end && *lx->p == 'L') lx->p++;
  if (lx->p < lx->end && (*lx->p == '.' || *lx->p == 'e' || *lx->p == 'E' ||
                          *lx->p == 'j' || *lx->p == '_'))
    return bad(lx, "shape must hold integers");
  *v = x;
  return 0;
}

/* (), (n,), (a, b), (a, b,) */
static int shape (Lex *lx, qkv_npy_header *h) {
  if (!accept(lx, '(')) return bad(lx, "expected a tuple for 'shape'");
  h->ndim = 0;
  if (accept(lx, ')')) return 0;
  for (;;) {
    if (h->ndim == QKV_MAXDIM)
      return qkv_format_fail(lx->err, lx->errlen, "shape has more than %d dims", QKV_MAXDIM);
    if (integer(lx, &h->shape[h->ndim]) != 0) return -1;
    h->ndim++;
    if (accept(lx, ')')) {
      if (h->ndim == 1) return bad(lx, "shape (n) is not a tuple; expected (n,)");
      return 0;
    }
    if (!accept(lx, ',')) return bad(lx, "expected ',' or ')' in 'shape'");
    if (accept(lx, ')')) return 0;
  }
}

/* '<f4' and its kin; anything else is a dtype we cannot load */
static int descr (Lex *lx, qkv_npy_header *h) {
  skipws(lx);
  if (lx->p < lx->end && (*lx->p == '[' || *lx->p == '('))
    return qkv_format_fail(lx->err, lx->errlen, "unsupported dtype: a structured dtype (fields)");
  int r = string(lx, h->descr, sizeof h->descr);
  if (r == -1) return bad(lx, "expected a string for 'descr'");
  if (r == -3) return qkv_format_fail(lx->err, lx->errlen, "the 'descr' string holds a NUL byte");
  const char *d = h->descr;
  char order = d[0], kind = d[1];
  int size = (d[2] >= '1' && d[2] <= '8' && d[3] == '\0') ? d[2] - '0' : 0;
  /* V2: a 2-byte void, as NumPy writes ml_dtypes' bfloat16 (read as one) */
  int ok = r == 0 && order && strchr("<>|=", order) &&
      ((kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
       ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
       (kind == 'b' && size == 1) || (kind == 'V' && size == 2)) &&
      (order != '|' || size == 1 || kind == 'V') &&
      (kind != 'V' || order != '>');   /* a void has no byte order to swap: ">V2" is no bfloat16 */
  if (!ok) return qkv_format_fail(lx->err, lx->errlen, "unsupported dtype '%s'%s", h->descr,
                                  r == -2 ? "..." : "");
  h->kind = kind;
  h->itemsize = size;
  h->swap = size > 1 && kind != 'V' && ((order == '<' && !little_endian()) ||
                                         (order == '>' && little_endian()));
  h->dtype = kind == 'b' ? QKV_BOOL : kind == 'V' ? QKV_BF16
           : kind == 'f' ? (size == 8 ? QKV_F64 : size == 4 ? QKV_F32 : QKV_F16)
           : kind == 'i' && size == 4 ? QKV_I32 : QKV_I64;
  return 0;
}

static int value (Lex *lx, const char *key, qkv_npy_header *h) {
  if (strcmp(key, "descr") == 0) return descr(lx, h);
  if (strcmp(key, "shape") == 0) return shape(lx, h);
  if (word(lx, "True")) h->fortran = 1;
  else if (word(lx, "False")) h->fortran = 0;
  else return bad(lx, "expected True or False for 'fortran_order'");
  return 0;
}

static int dict (Lex *lx, qkv_npy_header *h) {
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  int seen[3] = {0, 0, 0};
  if (!accept(lx, '{')) return bad(lx, "expected '{'");
  while (!accept(lx, '}')) {
    char key[32];
    int k = 0;
    int r = string(lx, key, sizeof key);
    if (r == -3) return qkv_format_fail(lx->err, lx->errlen, "a key of the header holds a NUL byte");
    if (r != 0) return bad(lx, "expected a quoted key");
    while (k < 3 && strcmp(key, keys[k]) != 0) k++;
    if (k == 3) return qkv_format_fail(lx->err, lx->errlen, "unexpected key '%s' in the header", key);
    if (seen[k]++) return qkv_format_fail(lx->err, lx->errlen, "key '%s' appears twice", key);
    if (!accept(lx, ':')) return bad(lx, "expected ':'");
    if (value(lx, key, h) != 0) return -1;
    if (!accept(lx, ',')) {
      if (accept(lx, '}')) break;
      return bad(lx, "expected ',' or '}'");
    }
  }
  skipws(lx);
  if (lx->p != lx->end) return bad(lx, "unexpected text after the dict");
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return qkv_format_fail(lx->err, lx->errlen, "the header has no '%s'", keys[k]);
  return 0;
}

/* numel, overflow-checked so that qkv's bytes (8 per element at most)
   fit in 63 bits, and the data's size against the bytes there are */
static int check_size (qkv_npy_header *h, uint64_t avail, char *err, size_t errlen) {
  char s[QKV_MAXDIM * 24];
  int64_t n = 1, nonzero = 1;
  shape_str(s, sizeof s, h->ndim, h->shape);
  for (int i = 0; i < h->ndim; i++) {
    int64_t d = h->shape[i];
    if (d > 0 && nonzero > INT64_MAX / 8 / d)
      return qkv_format_fail(err, errlen, "shape %s is too large", s);
    if (d > 0) nonzero *= d;
    n *= d;
  }
  h->numel = n;
  uint64_t need = (uint64_t)n * (uint64_t)h->itemsize;
  if (need != avail)
    return qkv_format_fail(err, errlen, "shape %s needs %llu bytes of data but the file has %llu",
                           s, (unsigned long long)need, (unsigned long long)avail);
  h->data_bytes = (size_t)need;
  return 0;
}

int qkv_npy_parse (const unsigned char *buf, size_t n, uint64_t filesize,
                   qkv_npy_header *h, char *err, size_t errlen) {
  size_t total;
  memset(h, 0, sizeof *h);
  if (qkv_npy_header_len(buf, n, filesize, &total, err, errlen) != 0) return -1;
  if (n < total) return qkv_format_fail(err, errlen, "internal: header not read");
  h->major = buf[6];
  h->minor = buf[7];
  h->data_offset = total;
  size_t prefix = h->major == 1 ? 10 : 12;
  Lex lx = {(const char *)buf + prefix, (const char *)buf + total, err, errlen};
  if (dict(&lx, h) != 0) return -1;
  return check_size(h, filesize - total, err, errlen);
}


/* the data */

int qkv_npy_inplace (const qkv_npy_header *h) {
  return !h->fortran && (size_t)h->itemsize == qkv_npy_elsize(h->dtype);
}

/* the element at p, in our byte order, as raw bits */
static uint64_t raw (const unsigned char *p, int size, int swap) {
  unsigned char b[8] = {0};
  for (int i = 0; i < size; i++) b[i] = swap ? p[size - 1 - i] : p[i];
  switch (size) {
    case 1: return b[0];
    case 2: { uint16_t v; memcpy(&v, b, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, b, 4); return v; }
    default: { uint64_t v; memcpy(&v, b, 8); return v; }
  }
}

/* converts one element into dst (h->dtype); -1 when it does not fit */
static int convert (const qkv_npy_header *h, const unsigned char *p, unsigned char *dst) {
  uint64_t v = raw(p, h->itemsize, h->swap);
  int64_t i;
  if (h->kind == 'b') { *dst = v != 0; return 0; }
  if (h->kind == 'f' || h->kind == 'V') {  /* the bits, in our byte order */
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    memcpy(dst, h->itemsize == 8 ? (void *)&v : h->itemsize == 4 ? (void *)&u32 : (void *)&u16,
           (size_t)h->itemsize);
    return 0;
  }
  if (h->kind == 'u') {
    if (v > (uint64_t)INT64_MAX) return -1;
    i = (int64_t)v;
  } else switch (h->itemsize) {       /* sign-extend */
    case 1: i = (int8_t)(uint8_t)v; break;
    case 2: i = (int16_t)(uint16_t)v; break;
    case 4: i = (int32_t)(uint32_t)v; break;
    default: memcpy(&i, &v, 8); break;
  }
  if (h->dtype == QKV_I32) {
    int32_t i32 = (int32_t)i;
    memcpy(dst, &i32, 4);
  } else memcpy(dst, &i, 8);
  return 0;
}

int qkv_npy_decode (const qkv_npy_header *h, const void *src, void *dst,
                    char *err, size_t errlen) {
  const unsigned char *s = src;
  unsigned char *d = dst;
  size_t out = qkv_npy_elsize(h->dtype);
  int64_t idx[QKV_MAXDIM] = {0}, cstride[QKV_MAXDIM], pos = 0, st = 1;
  /* already qkv's layout: f4, f8, i8 in our byte order and C order */
  if (qkv_npy_inplace(h) && !h->swap && (h->kind == 'f' || h->kind == 'i' || h->kind == 'V')) {
    if (src != dst && h->data_bytes > 0) memmove(dst, src, h->data_bytes);
    return 0;
  }
  /* Fortran order: the file's element i has the first index fastest; we
     walk it with a counter and put it at its C-order position */
  for (int k = h->ndim - 1; k >= 0; k--) {
    cstride[k] = st;
    st *= h->shape[k] > 0 ? h->shape[k] : 1;
  }
  for (int64_t i = 0; i < h->numel; i++) {
    int64_t at = h->fortran ? pos : i;
    if ((i & 0xffff) == 0xffff && qkv_interrupted) return QKV_NPY_EINTR;
    if (convert(h, s + i * h->itemsize, d + at * (int64_t)out) != 0)
      return qkv_format_fail(err, errlen, "uint64 value %llu at element %lld does not fit int64",
                             (unsigned long long)raw(s + i * h->itemsize, 8, h->swap),
                             (long long)i + 1);
    for (int k = 0; h->fortran && k < h->ndim; k++) {
      pos += cstride[k];
      if (++idx[k] < h->shape[k]) break;
      pos -= cstride[k] * idx[k];
      idx[k] = 0;
    }
  }
  return 0;
}


/* the header we write: as NumPy 1.24 writes it, byte for byte */

size_t qkv_npy_encode_header (char *buf, size_t cap, qkv_dtype dt, int ndim,
                              const int64_t *shape) {
  static const char *const kinds[QKV_NDTYPE] = {"f4", "f8", "i8", "b1", "i4", "f2", "V2"};
  char d[QKV_MAXDIM * 24 + 128], s[QKV_MAXDIM * 24];
  char order = dt == QKV_BOOL || dt == QKV_BF16 ? '|' : little_endian() ? '<' : '>';
  shape_str(s, sizeof s, ndim, shape);
  int k = snprintf(d, sizeof d, "{'descr': '%c%s', 'fortran_order': False, 'shape': %s, }",
                   order, kinds[dt], s);
  /* NumPy 1.24 adds room for the first size to grow to 21 digits; with at
     most 8 dims of at most 2^63 bytes in all, that room always falls inside
     the padding to 64, so leaving it out gives the same bytes */
  size_t hlen = (size_t)k + 1, prefix = 10, pad = 64 - (prefix + hlen) % 64;
  if (hlen + pad > 65535) {            /* too long for version 1.0's length */
    prefix = 12;
    pad = 64 - (prefix + hlen) % 64;
  }
  size_t total = prefix + hlen + pad;
  if (total > cap) return 0;
  memcpy(buf, MAGIC, sizeof MAGIC);
  buf[6] = prefix == 10 ? 1 : 2;
  buf[7] = 0;
  size_t len = total - prefix;
  for (size_t i = 0; i < prefix - 8; i++) buf[8 + i] = (char)(len >> (8 * i) & 0xff);
  memcpy(buf + prefix, d, (size_t)k);
  memset(buf + prefix + k, ' ', pad);
  buf[total - 1] = '\n';
  return total;
}
