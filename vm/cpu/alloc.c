/*
** alloc.c -- the CPU backend's allocator: host storages over 2 KiB (the
** core pools the smaller ones, core/storage.c), cached as the GPU's are
** (vm/cuda/backend.cu).  glibc hands a freed block of more than 128 KiB
** back to the kernel and maps the next one afresh, a page fault per 4 KiB
** touched: 17% of a small transformer's training step went to the kernel
** that way (bench/NOTES.md, "Threads and memory").  Here a freed block goes
** on a free list for its size class, 8 classes per power of two, and the
** next request of that class takes it.  At most CACHE_MAX bytes wait there;
** a failed allocation gives them all back and tries again.  Storages are
** made and released only by the thread that runs Lua.  Under
** AddressSanitizer nothing is cached, so that a use after free is seen.
*/
#define _DEFAULT_SOURCE 1          /* madvise's MADV_HUGEPAGE */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu.h"

#if defined(__SANITIZE_ADDRESS__)
#define NO_CACHE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_CACHE 1
#endif
#endif
#ifndef NO_CACHE
#define NO_CACHE 0
#endif

#define ALIGN 64
#define NCLASS (8 * 64)
#define CACHE_MAX ((size_t)512 << 20)
/* blocks from this size ask for huge pages (where the kernel gives them on
   request: transparent_hugepage "madvise"): a stream over a big tensor
   then misses the TLB once per 2 MiB, not per 4 KiB; a plain read of a
   decode step's KV cache took 14 ms instead of 17.5 (bench/NOTES.md) */
#define HUGE_MIN ((size_t)4 << 20)

/* a block: raw (what malloc gave) .. the header .. data, 64-byte aligned */
typedef struct block { void *raw; struct block *next; size_t size; int cls; } block;
#define HEAD(data) ((block *)(data) - 1)

static block *free_list[NCLASS];
static size_t cached;

/* the class of n bytes and its size, 8 classes per power of two */
static int size_class (size_t n, size_t *rounded) {
  if (n < 16) n = 16;
  int e = 63 - __builtin_clzll((unsigned long long)n);        /* 2^e <= n */
  size_t step = (size_t)1 << (e - 3), k = (n + step - 1) / step;  /* 8..16 */
  *rounded = k * step;
  return e * 8 + (int)(k - 8);
}

static void release_cache (void) {
  for (int c = 0; c < NCLASS; c++)
    while (free_list[c]) {
      block *b = free_list[c];
      free_list[c] = b->next;
      free(b->raw);
    }
  cached = 0;
}

/* a fresh block of `size` data bytes (zeroed by calloc when asked: big
   fresh pages are zero without being touched) */
static void *fresh (size_t size, int zero) {
  size_t total = size + sizeof(block) + ALIGN;
  if (total < size) return NULL;
  char *raw = zero ? calloc(1, total) : malloc(total);
  if (raw == NULL) return NULL;
#ifdef MADV_HUGEPAGE
  if (total >= HUGE_MIN) {          /* whole pages of it; a refusal changes nothing */
    uintptr_t p0 = ((uintptr_t)raw + 4095) & ~(uintptr_t)4095;
    (void)madvise((void *)p0, ((uintptr_t)raw + total - p0) & ~(uintptr_t)4095, MADV_HUGEPAGE);
  }
#endif
  uintptr_t at = ((uintptr_t)raw + sizeof(block) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
  block *b = HEAD((void *)at);
  b->raw = raw;
  b->size = size;
  return (void *)at;
}

void *qkv_cpu_alloc (size_t nbytes, int zero) {
  size_t size;
  if (nbytes > ((size_t)1 << 62)) return NULL;
  int c = size_class(nbytes, &size);
  block *b = free_list[c];
  if (b) {
    free_list[c] = b->next;
    cached -= b->size;
    if (zero) memset(b + 1, 0, nbytes);
    return b + 1;
  }
  void *p = fresh(size, zero);
  if (p == NULL && cached > 0) {
    release_cache();
    p = fresh(size, zero);
  }
  if (p) HEAD(p)->cls = c;
  return p;
}

void qkv_cpu_free (void *p) {
  if (p == NULL) return;
  block *b = HEAD(p);
  if (NO_CACHE || b->size > CACHE_MAX - cached) { free(b->raw); return; }
  b->next = free_list[b->cls];
  free_list[b->cls] = b;
  cached += b->size;
}
