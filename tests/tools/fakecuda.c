/*
** fakecuda.c -- a stand-in for build/qkv_cuda.so on machines without a GPU:
** the CPU's kernels behind the plugin's interface, its "device memory" a
** separate heap.  Loaded with QKV_CUDA_PLUGIN=build/fakecuda.so, it lets
** `qkv test --device cuda tests/` exercise everything between the scripts
** and the backend table (moves, the default device, numbers lifted to the
** device, host copies for printing, mixed-device errors) where CI runs.
** It proves nothing about the CUDA kernels themselves: tests/backends/cuda/
** skips its comparisons when it sees this device's name.
*/
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../vm/core/backend.h"
#include "../../vm/common/ops.h"
#include "../../vm/dispatch/plugin.h"

#define TOTAL ((size_t)1 << 34)     /* a 16 GiB card */

static size_t held;
static char err[128] = "fakecuda: no error";

static void *fake_alloc (size_t nbytes, int zero) {
  size_t *p = nbytes <= TOTAL - held ? malloc(nbytes + 16) : NULL;
  if (p == NULL) {
    snprintf(err, sizeof err, "cuda: out of memory: tried to allocate %zu bytes (%zu free)",
             nbytes, TOTAL - held);
    return NULL;
  }
  p[0] = nbytes;
  held += nbytes;
  if (zero) memset(p + 2, 0, nbytes);
  return p + 2;
}

static void fake_free (void *q) {
  size_t *p = (size_t *)q - 2;
  held -= p[0];
  free(p);
}

static qkv_backend table;

static int fake_init (char *why, size_t n) { (void)why; (void)n; return QKV_OK; }
static const char *fake_error (void) { return err; }
static int fake_move (void *dst, const void *src, size_t n) {
  if (n) memcpy(dst, src, n);
  return QKV_OK;
}
static int fake_sync (void) { return QKV_OK; }
static void fake_empty (void) {}
static void fake_memory (qkv_cuda_memory *m) {
  m->allocated = m->peak = held;
  m->cached = 0;
  m->free = TOTAL - held;
  m->total = TOTAL;
}
static const char *fake_name (void) { return "fakecuda (the CPU's kernels)"; }
static void fake_allow (int on) { (void)on; }
static void fake_force (const char *path) { (void)path; }   /* the CPU's one path */
static const char *fake_attention (void) { return "cpu"; }     /* the CPU's kernel */

/* events on the host's clock: the CPU's kernels are done when they return */
typedef struct { int timing, recorded; double ms; } fake_event;
static void *fake_event_new (int timing) {
  fake_event *e = calloc(1, sizeof *e);
  if (e) e->timing = timing;
  else snprintf(err, sizeof err, "fakecuda: out of memory for an event");
  return e;
}
static void fake_event_free (void *e) { free(e); }
static int fake_event_record (void *p) {
  fake_event *e = p;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  e->recorded = 1;
  e->ms = (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
  return QKV_OK;
}
static int fake_event_wait (void *e) { (void)e; return QKV_OK; }
static int fake_event_done (void *e, int *done) { (void)e; *done = 1; return QKV_OK; }
static int fake_event_elapsed (void *a, void *b, float *ms) {
  *ms = (float)(((fake_event *)b)->ms - ((fake_event *)a)->ms);
  return QKV_OK;
}

static const qkv_cuda_api api = {
  .abi = QKV_CUDA_ABI,
  .ops = QKV_OPS_LIST,
  .backend = &table,
  .init = fake_init,
  .error = fake_error,
  .to_device = fake_move,
  .to_host = fake_move,
  .synchronize = fake_sync,
  .empty_cache = fake_empty,
  .memory = fake_memory,
  .device_name = fake_name,
  .allow_tf32 = fake_allow,
  .attention_backend = fake_attention,
  .force_attention = fake_force,
  .event_new = fake_event_new,
  .event_free = fake_event_free,
  .event_record = fake_event_record,
  .event_wait = fake_event_wait,
  .event_done = fake_event_done,
  .event_elapsed = fake_event_elapsed,
};

__attribute__((visibility("default"))) const qkv_cuda_api *qkv_cuda_plugin (void) {
  table = *qkv_backend_of(QKV_CPU);  /* the executable's registry (-Wl,-E) */
  table.name = "cuda";
  table.alloc = fake_alloc;
  table.free = fake_free;
  return &api;
}
