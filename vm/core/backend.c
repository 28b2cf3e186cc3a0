/*
** backend.c -- the registry of backends, one table per device (backend.h),
** the names of a table's entries, the Ctrl-C flag that the kernels of
** every backend watch, and how many host threads the CPU's may use.
*/
#define _GNU_SOURCE
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "qkv.h"
#include "backend.h"

volatile sig_atomic_t qkv_interrupted = 0;

/* 0 until first asked: then read from the environment */
static int nthreads;

static int positive_env (const char *name) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') return 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || (*end != '\0' && *end != ',') || v < 1) return 0;
  return v > QKV_MAX_THREADS ? QKV_MAX_THREADS : (int)v;
}

int qkv_num_threads (void) {
  if (nthreads > 0) return nthreads;
  int n = positive_env("QKV_NUM_THREADS");
  const char *q = getenv("QKV_NUM_THREADS");
  if (n == 0 && q != NULL && *q != '\0')
    fprintf(stderr, "qkv: QKV_NUM_THREADS=%s is not a positive integer; ignored\n", q);
  if (n == 0) n = positive_env("OMP_NUM_THREADS");
  if (n == 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  nthreads = n < 1 ? 1 : n > QKV_MAX_THREADS ? QKV_MAX_THREADS : n;
  return nthreads;
}

void qkv_set_num_threads (int n) {
  nthreads = n < 1 ? 1 : n > QKV_MAX_THREADS ? QKV_MAX_THREADS : n;
}

/* the float32 matmul precision (vm/dispatch/matmul.c reads it, and the
   GPU's plugin follows it: TF32 where it is not "highest") */
static qkv_precision precision = QKV_PREC_HIGHEST;

qkv_precision qkv_matmul_precision (void) { return precision; }
void qkv_set_matmul_precision (qkv_precision p) { precision = p; }

/* filled by the backends themselves: the core names none of them */
static const qkv_backend *backends[QKV_NDEV];

const qkv_backend *qkv_backend_of (qkv_device dev) { return backends[dev]; }

void qkv_backend_register (qkv_device dev, const qkv_backend *be) { backends[dev] = be; }

/*
** The backend table's entries by name, so that the cross-backend suite
** (tests/backends/cuda/test_coverage.lua) can ask that each has a test and that the GPU
** fills each: an entry added to backend.h without a line here fails the
** assertion below.
*/
#define ENTRY(f) {#f, offsetof(qkv_backend, f)}
static const struct { const char *name; size_t off; } entries[] = {
  ENTRY(alloc), ENTRY(free), ENTRY(copy), ENTRY(fill), ENTRY(binary), ENTRY(unary),
  ENTRY(reduce), ENTRY(matmul), ENTRY(masked_fill), ENTRY(random), ENTRY(softmax),
  ENTRY(attention), ENTRY(where), ENTRY(gather), ENTRY(sort), ENTRY(attention_backward),
  ENTRY(scatter_add), ENTRY(softmax_backward), ENTRY(log_softmax), ENTRY(layer_norm),
  ENTRY(layer_norm_backward), ENTRY(cumsum), ENTRY(tri), ENTRY(adam),
  ENTRY(rms_norm), ENTRY(rms_norm_backward), ENTRY(attention_mods),
  ENTRY(attention_mods_backward), ENTRY(attention_blocks), ENTRY(split_products)
};
_Static_assert(sizeof entries / sizeof entries[0] ==                /* after name and flags */
               (sizeof(qkv_backend) - offsetof(qkv_backend, alloc)) / sizeof(void (*)(void)),
               "every entry of qkv_backend is listed in core/backend.c's entries");

const char *qkv_backend_entry (const qkv_backend *be, int i, int *filled) {
  if (i < 0 || i >= (int)(sizeof entries / sizeof entries[0])) return NULL;
  void (*const *f)(void) = (void (*const *)(void))((const char *)be + entries[i].off);
  *filled = be != NULL && *f != NULL;
  return entries[i].name;
}
