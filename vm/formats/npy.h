/*
** npy.h -- NumPy's .npy format: reading and writing the header, and
** converting the data that follows it into qkv's dtypes.  Pure C with no
** Lua and no I/O, so that the libFuzzer target (tests/fuzz/fuzz_npy.c)
** links this file alone; bindings/lio.c does the files.
**
** A .npy file is the magic "\x93NUMPY", a version (1.0: 2-byte header
** length; 2.0 and 3.0: 4-byte), the header length (little-endian), then a
** Python dict literal such as
**   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
** padded with spaces and a '\n' so that the data starts at a multiple of
** 64, then the elements.
*/
#ifndef QKV_NPY_H
#define QKV_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "../core/qkv.h"

/* the bytes that say how long the header is: magic, version, length */
#define QKV_NPY_PREFIX 12
/* longer headers are refused: ours hold at most 8 dims */
#define QKV_NPY_MAXHEADER ((size_t)1 << 20)
/* room for an error message */
#define QKV_NPY_ERRLEN 256

typedef struct qkv_npy_header {
  int major, minor;            /* the format's version */
  char descr[16];              /* the dtype as written, such as "<f4" */
  char kind;                   /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'V' bfloat16 */
  int itemsize;                /* bytes per element in the file */
  int swap;                    /* the file's byte order is not this machine's */
  int fortran;                 /* elements in Fortran (column-major) order */
  int ndim;
  int64_t shape[QKV_MAXDIM];
  int64_t numel;
  size_t data_offset;          /* where the data starts: the header's length */
  size_t data_bytes;           /* numel * itemsize */
  qkv_dtype dtype;             /* what it loads as in qkv */
} qkv_npy_header;

/*
** From the first n bytes of a file (n >= QKV_NPY_PREFIX, or the whole file
** when it is shorter): the total length of the header (*total), checked
** against filesize.  0 on success; -1 with a message in err.
*/
int qkv_npy_header_len (const unsigned char *buf, size_t n, uint64_t filesize,
                        size_t *total, char *err, size_t errlen);

/*
** Parses the header held in buf[0..n) (n >= its total length) of a file of
** filesize bytes, and checks that exactly data_bytes of data follow it.
** 0 on success; -1 with a message in err.
*/
int qkv_npy_parse (const unsigned char *buf, size_t n, uint64_t filesize,
                   qkv_npy_header *h, char *err, size_t errlen);

/* the bytes that loading puts in the tensor: numel * this */
size_t qkv_npy_elsize (qkv_dtype dt);

/*
** Whether the file's data can be read straight into the tensor and
** converted there: C order, and the file's itemsize is qkv's.
*/
int qkv_npy_inplace (const qkv_npy_header *h);

/*
** Converts h->data_bytes bytes of file data at src into numel elements of
** h->dtype in C order at dst (swapping bytes, widening, transposing).
** src may equal dst when qkv_npy_inplace(h).  0 on success; -1 with a
** message when a value does not fit (a uint64 above 2^63 - 1);
** QKV_NPY_EINTR when qkv_interrupted stopped it (checked every 64K
** elements).
*/
#define QKV_NPY_EINTR (-2)
int qkv_npy_decode (const qkv_npy_header *h, const void *src, void *dst,
                    char *err, size_t errlen);

/*
** Writes the header for a C-order array of dtype dt and the given shape
** into buf (cap bytes): version 1.0, or 2.0 when it would be longer than
** 65535, padded so that the data starts at a multiple of 64.  Returns its
** length, or 0 when cap is too small (QKV_NPY_MAXHEADER always suffices
** for 8 dims; 256 bytes do too).
*/
size_t qkv_npy_encode_header (char *buf, size_t cap, qkv_dtype dt, int ndim,
                              const int64_t *shape);

#endif
