/*
** fuzz_npy.c -- the libFuzzer target for the .npy reader, vm/formats/npy.c alone
** (make fuzz-npy builds it with clang -fsanitize=fuzzer,address,undefined).
** The input is a whole file, given to the parser the two ways qkv reads
** one: as qkv._npy_decode does (all bytes at once) and as qkv.load does
** (the preamble, then the header, then the data).  Nothing may crash or
** touch memory it should not, and a success must be self-consistent: the
** shape accounts for exactly the bytes there are, the tensor's size is
** bounded by the file's, and the header we write for the result parses
** back to the same tensor.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../vm/formats/npy.h"

/* vm/core/backend.c defines it in qkv; npy.c's conversion loop reads it */
volatile sig_atomic_t qkv_interrupted = 0;

#define CHECK(c) do { if (!(c)) { \
    fprintf(stderr, "fuzz_npy: check failed: %s (line %d)\n", #c, __LINE__); \
    abort(); } } while (0)

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void check_header (const qkv_npy_header *h, size_t size) {
  int64_t numel = 1;
  CHECK(h->ndim >= 0 && h->ndim <= QKV_MAXDIM);
  for (int i = 0; i < h->ndim; i++) {
    CHECK(h->shape[i] >= 0);
    numel *= h->shape[i];
  }
  CHECK(numel == h->numel);
  CHECK(h->itemsize == 1 || h->itemsize == 2 || h->itemsize == 4 || h->itemsize == 8);
  CHECK((uint64_t)numel * (uint64_t)h->itemsize == h->data_bytes);
  CHECK(h->data_offset + h->data_bytes == size);
  CHECK((size_t)numel * qkv_npy_elsize(h->dtype) <= 8 * size);
}

/* the header qkv would write for the decoded tensor reads back to it */
static void check_reencode (const qkv_npy_header *h, const unsigned char *t, size_t tn) {
  char head[512], err[QKV_NPY_ERRLEN];
  size_t hn = qkv_npy_encode_header(head, sizeof head, h->dtype, h->ndim, h->shape);
  CHECK(hn > 0 && hn % 64 == 0);
  unsigned char *file = malloc(hn + tn + 1), *back = malloc(tn + 1);
  memcpy(file, head, hn);
  memcpy(file + hn, t, tn);
  qkv_npy_header h2;
  CHECK(qkv_npy_parse(file, hn + tn, hn + tn, &h2, err, sizeof err) == 0);
  CHECK(h2.dtype == h->dtype && h2.ndim == h->ndim && !h2.fortran && !h2.swap);
  CHECK(memcmp(h2.shape, h->shape, sizeof(int64_t) * (size_t)h->ndim) == 0);
  CHECK(qkv_npy_decode(&h2, file + hn, back, err, sizeof err) == 0);
  CHECK(memcmp(back, t, tn) == 0);
  free(file);
  free(back);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  char err[QKV_NPY_ERRLEN];
  qkv_npy_header h, h2;
  size_t total, pre = size < QKV_NPY_PREFIX ? size : QKV_NPY_PREFIX;
  int r = qkv_npy_parse(data, size, size, &h, err, sizeof err);
  if (r != 0) {
    CHECK(err[0] != '\0' && strlen(err) < sizeof err);
    return 0;
  }
  check_header(&h, size);
  /* as qkv.load reads it: the preamble, then exactly the header */
  CHECK(qkv_npy_header_len(data, pre, size, &total, err, sizeof err) == 0);
  CHECK(total == h.data_offset);
  CHECK(qkv_npy_parse(data, total, size, &h2, err, sizeof err) == 0);
  CHECK(memcmp(&h, &h2, sizeof h) == 0);
  size_t tn = (size_t)h.numel * qkv_npy_elsize(h.dtype);
  unsigned char *t = malloc(tn + 1);
  if (qkv_npy_decode(&h, data + h.data_offset, t, err, sizeof err) == 0) {
    if (h.dtype == QKV_BOOL)
      for (size_t i = 0; i < tn; i++) CHECK(t[i] <= 1);
    if (qkv_npy_inplace(&h)) {       /* as qkv.load: converted in place */
      unsigned char *u = malloc(tn + 1);
      memcpy(u, data + h.data_offset, tn);
      CHECK(qkv_npy_decode(&h, u, u, err, sizeof err) == 0);
      CHECK(memcmp(u, t, tn) == 0);
      free(u);
    }
    check_reencode(&h, t, tn);
  } else {
    CHECK(h.kind == 'u' && h.itemsize == 8);
  }
  free(t);
  return 0;
}
