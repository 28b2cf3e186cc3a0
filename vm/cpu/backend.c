/*
** backend.c -- the CPU backend's dispatch table and its allocator.
*/
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/*
** 64-byte alignment so vector loads never straddle a cache line; large
** zeroed blocks come from calloc, whose fresh pages are zero without
** being touched (mmap gives them 16-byte alignment, enough for AVX loads).
*/
static void *cpu_alloc (size_t nbytes, int zero) {
  if (zero && nbytes >= ((size_t)1 << 20)) return calloc(1, nbytes);
  size_t n = (nbytes + 63) & ~(size_t)63;
  if (n < nbytes) return NULL;
  void *p = aligned_alloc(64, n);
  if (p != NULL && zero) memset(p, 0, nbytes);
  return p;
}

static void cpu_free (void *p) { free(p); }

const qkv_backend qkv_cpu_backend = {
  "cpu", cpu_alloc, cpu_free,
  qkv_cpu_copy, qkv_cpu_fill, qkv_cpu_binary, qkv_cpu_unary,
  qkv_cpu_reduce, qkv_cpu_matmul, qkv_cpu_masked_fill, qkv_cpu_random,
  qkv_cpu_softmax, qkv_cpu_attention, qkv_cpu_where, qkv_cpu_gather, qkv_cpu_sort,
  qkv_cpu_attention_backward, qkv_cpu_scatter_add, qkv_cpu_softmax_backward,
  qkv_cpu_log_softmax,
  qkv_cpu_layer_norm
};
