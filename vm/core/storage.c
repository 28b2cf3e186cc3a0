/*
** storage.c -- storages: blocks of memory on one device, reference
** counted, their bytes accounted for, small host blocks pooled.  A
** device's memory comes from its backend in the registry (backend.h).
*/
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qkv.h"
#include "backend.h"

qkv_storage qkv_closed_storage = {NULL, 0, 1, QKV_CPU, -1, 0};

static size_t live_bytes[QKV_NDEV], limit;

/* host and device bytes together: what the bindings pace the collector by */
size_t qkv_memory_live (void) { return live_bytes[QKV_CPU] + live_bytes[QKV_CUDA]; }

/* Tensors holding more than the machine's RAM can only end in the OOM
   killer (Linux overcommits), so an allocation that would take the live
   bytes past it is refused up front (the bindings collect and retry). */
size_t qkv_memory_limit (void) {
  if (limit == 0) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    limit = (pages > 0 && psize > 0) ? (size_t)pages * (size_t)psize
                                     : (size_t)1 << 40;
  }
  return limit;
}

/* for tests of the collect-and-retry path; 0 goes back to the RAM */
void qkv_memory_set_limit (size_t nbytes) { limit = nbytes; }

/*
** Small CPU storages come from a pool: the header and the data share one
** 64-byte-aligned block (data at +64), and a freed block goes on a free
** list for its size class, so a loop of small temporaries reuses blocks
** instead of paying aligned_alloc and free (and glibc's consolidation)
** twice per tensor.  The lists are bounded by POOL_KEEP bytes in all.
** Storages are made and released only by the thread that runs Lua.  Under
** AddressSanitizer nothing is kept, so a use after free is still seen.
*/
#define POOL_UNIT 64
#define POOL_CLASSES 32                      /* data up to 2 KiB */
#define POOL_KEEP ((size_t)1 << 20)

#if defined(__SANITIZE_ADDRESS__)
#define POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_OFF 1
#endif
#endif
#ifndef POOL_OFF
#define POOL_OFF 0
#endif

static qkv_storage *pool_free[POOL_CLASSES];  /* linked through ->data */
static size_t pool_bytes;

static size_t pool_block (int c) { return POOL_UNIT + (size_t)(c + 1) * POOL_UNIT; }

static qkv_storage *pool_get (size_t nbytes, int zero) {
  int c = nbytes ? (int)((nbytes - 1) / POOL_UNIT) : 0;
  qkv_storage *s = pool_free[c];
  if (s != NULL) {
    pool_free[c] = (qkv_storage *)s->data;
    pool_bytes -= pool_block(c);
  } else if ((s = aligned_alloc(POOL_UNIT, pool_block(c))) == NULL)
    return NULL;
  s->data = (char *)s + POOL_UNIT;
  s->pool = c + 1;
  if (zero) memset(s->data, 0, nbytes);
  return s;
}

static void pool_put (qkv_storage *s) {
  int c = s->pool - 1;
  if (POOL_OFF || pool_bytes + pool_block(c) > POOL_KEEP) { free(s); return; }
  s->data = pool_free[c];
  pool_free[c] = s;
  pool_bytes += pool_block(c);
}

qkv_storage *qkv_storage_new (qkv_device dev, size_t nbytes, int zero) {
  const qkv_backend *be = qkv_backend_of(dev);
  /* the RAM bounds host storages; the GPU's allocator says when it is full */
  size_t max = dev == QKV_CPU ? qkv_memory_limit() : SIZE_MAX, live = live_bytes[dev];
  if (be == NULL || live > max || nbytes > max - live) return NULL;
  qkv_storage *s;
  if (dev == QKV_CPU && nbytes <= POOL_CLASSES * POOL_UNIT) {
    if ((s = pool_get(nbytes, zero)) == NULL) return NULL;
  } else {
    if ((s = malloc(sizeof *s)) == NULL) return NULL;
    s->data = be->alloc(nbytes ? nbytes : 1, zero);
    if (s->data == NULL) { free(s); return NULL; }
    s->pool = 0;
  }
  s->nbytes = nbytes;
  s->refcount = 1;
  s->device = dev;
  s->version = 0;
  live_bytes[dev] += nbytes;
  return s;
}

void qkv_storage_retain (qkv_storage *s) { s->refcount++; }

void qkv_storage_release (qkv_storage *s) {
  if (s == NULL || s->pool < 0 || --s->refcount > 0) return;
  live_bytes[s->device] -= s->nbytes;
  if (s->pool) { pool_put(s); return; }
  qkv_backend_of(s->device)->free(s->data);
  free(s);
}
