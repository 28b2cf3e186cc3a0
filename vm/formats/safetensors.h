/*
** safetensors.h -- the safetensors format: its dtypes, the scan that
** bounds a header's JSON before it is parsed, the checks a header's
** entries must pass against the data they describe, the conversion of
** that data into qkv's dtypes, and the header qkv writes.  Pure C with no
** Lua, no JSON parser and no I/O: bindings/lsafetensors.c reads the files
** and has the header parsed by libcjson (qkv.json).
**
** A file is an unsigned 64-bit little-endian header length N, N bytes of
** JSON, then the data.  The JSON object maps each tensor's name to
**   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
** (offsets in bytes from the start of the data, end exclusive) and may
** hold "__metadata__", an object of strings.  The tensors' byte ranges
** tile the data exactly: no overlap, no gap, nothing after the last.
*/
#ifndef QKV_SAFETENSORS_H
#define QKV_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/qkv.h"

/* the reference implementation refuses longer headers */
#define QKV_ST_MAXHEADER ((uint64_t)100000000)
#define QKV_ST_ERRLEN 256

/* a dtype of the format: its name, bytes per element, its kind ('f'
   float, 'i' signed, 'u' unsigned, 'b' bool), what qkv loads it as, and 0
   when qkv cannot read it at all (the 8-bit floats) */
typedef struct qkv_st_dtype {
  const char *name;
  int itemsize;
  char kind;
  qkv_dtype loads_as;
  int supported;
} qkv_st_dtype;

/* the format's dtype called name, or NULL when there is none */
const qkv_st_dtype *qkv_st_dtype_named (const char *name);
/* the format's dtype qkv writes dt as (every qkv dtype has one) */
const qkv_st_dtype *qkv_st_dtype_of (qkv_dtype dt);

typedef struct qkv_st_entry {
  const char *name;
  const qkv_st_dtype *dtype;
  int ndim;
  int64_t shape[QKV_MAXDIM];
  uint64_t begin, end;         /* the byte range in the data */
} qkv_st_entry;

/*
** Checks n entries against data_bytes bytes of data: each shape's bytes
** are its range's, and the ranges tile the data.  Sorts e by begin.  0 on
** success; -1 with a message in err naming the tensor.
*/
int qkv_st_check (qkv_st_entry *e, int n, uint64_t data_bytes, char *err, size_t errlen);

/* the most keys a tensor's object may hold: dtype, shape, data_offsets
   and a few that readers ignore */
#define QKV_ST_MAXKEYS 8

/*
** Checks the header's JSON text (n bytes) in one pass, allocating nothing,
** for what no safetensors header holds and would cost a parser memory:
** values nested below a tensor's lists, lists of more than QKV_MAXDIM
** values, tensors of more than QKV_ST_MAXKEYS keys, metadata values that
** are not strings, and strings with a NUL byte.  0 when it finds none (the
** text may still be bad JSON: that is the parser's to say); -1 with a
** message in err naming the tensor.
*/
int qkv_st_scan_header (const char *s, size_t n, char *err, size_t errlen);

/*
** Converts an entry's data at src (little-endian, as the file holds it)
** into its elements as qkv_dtype loads_as at dst.  0 on success; -1 with
** a message when a value does not fit (a U64 past 2^63 - 1, a BOOL byte
** other than 0 or 1); QKV_ST_EINTR when qkv_interrupted stopped it.
*/
#define QKV_ST_EINTR (-2)
int qkv_st_convert (const qkv_st_entry *e, const void *src, void *dst,
                    char *err, size_t errlen);

/*
** Writes the header for n entries (their ranges already set) and nmeta
** metadata pairs (meta[2i] the key, meta[2i+1] the value) into buf (cap
** bytes): the JSON text padded with spaces to a multiple of 8 bytes, so
** that the data starts aligned.  Returns its length; when that is more
** than cap nothing useful is in buf, and a second call with a buffer that
** large writes it.  Names and strings must be valid UTF-8.
*/
size_t qkv_st_encode_header (char *buf, size_t cap, const qkv_st_entry *e, int n,
                             const char *const *meta, int nmeta);

/* the first invalid byte of s[0..n) as UTF-8, or -1 when it is valid */
int64_t qkv_st_utf8_error (const char *s, size_t n);

#endif
