/*
** parallel.c -- the CPU backend's threads (see parallel.h).
**
** One loop runs at a time.  Its state is one 64-bit word, generation (16
** bits) | next chunk (24) | chunks (24): a thread takes a chunk by bumping
** `next` with a compare-and-swap, so a thread holding a stale word (an
** earlier loop's) can never take a chunk of the current one, and the
** caller may only publish the next loop after every taken chunk is done.
*/
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "blas.h"
#include "parallel.h"

#define M24 ((uint64_t)0xffffff)
/* chunks per thread: enough that a slow thread holds up little */
#define CHUNKS_PER_THREAD 4
/* an idle worker spins this long, then yields the CPU this long, then
   sleeps (bench/NOTES.md, "Threads": the numbers that won idle and busy) */
#ifndef SPIN_NS
#define SPIN_NS 4000
#endif
#ifndef YIELD_NS
#define YIELD_NS 200000
#endif
/* a spin that loses its CPU this long has a neighbour (idle, below); a
   busy machine's slices are ms, an idle one's interruptions tens of µs */
#define LOST_NS 500000
#define CONTENDED_NS 50000000

static _Atomic uint64_t word;           /* gen | next | chunks */
static _Atomic uint32_t seq;            /* futex word, bumped per loop */
static _Atomic int sleepers;            /* workers in futex_wait */
static _Atomic int64_t done;            /* chunks finished, this loop */
static _Atomic int failed;              /* the first error, this loop */
static _Atomic int taking;              /* workers that take part */
static _Atomic int64_t contended_until; /* idle workers sleep at once */
static atomic_flag busy = ATOMIC_FLAG_INIT;   /* a loop is running */

/* the loop; written by the caller before it publishes the word */
static qkv_par_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_chunk;
static uint64_t gen;

static int started;                     /* workers created */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Thread_local int in_chunk;

static void futex_wait (_Atomic uint32_t *p, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)p, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake (_Atomic uint32_t *p) {
  syscall(SYS_futex, (uint32_t *)p, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void relax (void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t now_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int qkv_par_threads (void) { return in_chunk ? 1 : qkv_num_threads(); }

/* takes one chunk of the current loop and runs it; 0 when none is left */
static int take (int tid) {
  uint64_t w = atomic_load_explicit(&word, memory_order_acquire);
  for (;;) {
    uint64_t next = (w >> 24) & M24, nch = w & M24;
    if (next >= nch) return 0;
    if (atomic_compare_exchange_weak_explicit(&word, &w, w + ((uint64_t)1 << 24),
                                              memory_order_acq_rel, memory_order_acquire))
      break;
  }
  int64_t lo = (int64_t)((w >> 24) & M24) * job_chunk;
  int64_t hi = job_n - lo < job_chunk ? job_n : lo + job_chunk;
  if (atomic_load_explicit(&failed, memory_order_relaxed) == QKV_OK) {
    if (tid > 0) qkv_blas_serial();
    in_chunk = 1;
    int e = job_fn(job_ctx, lo, hi, tid);
    in_chunk = 0;
    int ok = QKV_OK;
    if (e != QKV_OK) atomic_compare_exchange_strong(&failed, &ok, e);
  }
  atomic_fetch_add_explicit(&done, 1, memory_order_release);
  return 1;
}

static int has_work (int tid) {
  if (tid > atomic_load(&taking)) return 0;
  uint64_t w = atomic_load(&word);
  return ((w >> 24) & M24) < (w & M24);
}

/*
** An idle worker spins, then yields, then sleeps until the next loop --
** unless the CPU is contended.  A spin that loses its CPU for more than
** LOST_NS (preempted, or a yield that another process took) means some
** other process wants this core; then for CONTENDED_NS every idle worker
** sleeps at once.  A sleeper that is woken runs ahead of the neighbour
** (the scheduler owes it the time it slept), where a spinner or yielder
** has spent its share and waits out the neighbour's slice, missing the
** loops it was meant to help with (bench/NOTES.md, "Threads").
*/
static void idle (int tid) {
  uint32_t s = atomic_load(&seq);
  int64_t t0 = now_ns(), last = t0, t;
  if (t0 >= atomic_load_explicit(&contended_until, memory_order_relaxed)) {
    for (int i = 0;; i++) {
      if (has_work(tid)) return;
      if ((i & 63) != 63) { relax(); continue; }
      t = now_ns();
      if (t - last > LOST_NS) {
        atomic_store_explicit(&contended_until, t + CONTENDED_NS, memory_order_relaxed);
        break;
      }
      last = t;
      if (t - t0 > SPIN_NS + YIELD_NS) break;
      if (t - t0 > SPIN_NS) sched_yield();
    }
  }
  atomic_fetch_add(&sleepers, 1);
  if (!has_work(tid)) futex_wait(&seq, s);
  atomic_fetch_sub(&sleepers, 1);
}

static void *worker (void *arg) {
  int tid = (int)(intptr_t)arg;
  for (;;) {
    if (has_work(tid) && take(tid)) continue;
    idle(tid);
  }
  return NULL;
}

/* a forked child has none of the parent's workers */
static void after_fork (void) {
  started = 0;
  atomic_store(&taking, 0);
  atomic_store(&sleepers, 0);
  atomic_store(&word, 0);
  atomic_flag_clear(&busy);
}

static void register_fork (void) { pthread_atfork(NULL, NULL, after_fork); }

/* workers 1 .. nt-1 (fewer if the system refuses threads); signals go to
   the thread that runs Lua, never to a worker */
static int workers (int nt) {
  pthread_once(&once, register_fork);
  if (started < nt - 1) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, (size_t)1 << 20);
    while (started < nt - 1) {
      pthread_t th;
      if (pthread_create(&th, &a, worker, (void *)(intptr_t)(started + 1)) != 0) break;
      started++;
    }
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  int n = started < nt - 1 ? started : nt - 1;
  atomic_store(&taking, n);
  return n;
}

static int serial (int64_t n, qkv_par_fn fn, void *ctx) {
  int was = in_chunk;
  in_chunk = 1;
  int e = fn(ctx, 0, n, 0);
  in_chunk = was;
  return e;
}

int qkv_par_for (int64_t n, int64_t grain, qkv_par_fn fn, void *ctx) {
  if (n <= 0) return QKV_OK;
  if (grain < 1) grain = 1;
  int nt = qkv_par_threads();
  int64_t want = (int64_t)nt * CHUNKS_PER_THREAD, chunk = grain;
  if ((n + want - 1) / want > chunk) chunk = (n + want - 1) / want;
  if ((n + chunk - 1) / chunk > (int64_t)M24) chunk = (n + (int64_t)M24 - 1) / (int64_t)M24;
  int64_t nch = (n + chunk - 1) / chunk;
  /* one chunk, or another thread's loop running: this thread alone */
  if (nt <= 1 || nch <= 1) return serial(n, fn, ctx);
  if (atomic_flag_test_and_set(&busy)) return serial(n, fn, ctx);
  if (workers(nt) < 1) { atomic_flag_clear(&busy); return serial(n, fn, ctx); }
  job_fn = fn, job_ctx = ctx, job_n = n, job_chunk = chunk;
  atomic_store(&done, 0);
  atomic_store(&failed, QKV_OK);
  gen = (gen + 1) & 0xffff;
  atomic_store(&word, gen << 48 | (uint64_t)nch);
  atomic_fetch_add(&seq, 1);
  if (atomic_load(&sleepers) > 0) futex_wake(&seq);
  while (take(0)) {}
  /* the chunks others took: spin a little, then let them have the CPU */
  int64_t t0 = 0;
  for (int i = 0; atomic_load_explicit(&done, memory_order_acquire) < nch; i++) {
    if ((i & 63) != 63) { relax(); continue; }
    if (t0 == 0) t0 = now_ns();
    else if (now_ns() - t0 > SPIN_NS) sched_yield();
  }
  int e = atomic_load(&failed);
  atomic_flag_clear(&busy);
  return e;
}

typedef struct { qkv_row_fn fn; void *ctx; } rows_job;

static int rows_chunk (void *p, int64_t lo, int64_t hi, int tid) {
  const rows_job *R = p;
  (void)tid;
  for (int64_t r = lo; r < hi; r++) {
    if (qkv_interrupted) return QKV_EINTR;
    R->fn(R->ctx, r);
  }
  return QKV_OK;
}

int qkv_par_rows (int64_t rows, int64_t row_len, qkv_row_fn fn, void *ctx) {
  rows_job R = {fn, ctx};
  if (row_len < 1) row_len = 1;
  if (rows * row_len < QKV_CPU_PAR_MIN) return rows_chunk(&R, 0, rows, 0);
  int64_t grain = QKV_CPU_PAR_MIN / 2 / row_len;
  return qkv_par_for(rows, grain < 1 ? 1 : grain, rows_chunk, &R);
}
