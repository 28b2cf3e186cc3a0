/*
** parallel.h -- the CPU backend's threads: a loop split into chunks that
** the calling thread and a small pool of workers claim one at a time.
**
** Why not OpenMP: an OpenMP region ends at a barrier that every thread of
** the team must reach, and libgomp's waiting threads spin.  With one other
** busy process on a 2-core machine a spinning or descheduled team member
** made qkv 4-20x slower than idle (bench/NOTES.md, "Threads").  Here a
** chunk is taken only by a thread that is running: one that wakes late
** finds the loop done and goes back to sleep, and the caller waits only for
** the chunks that were taken.  Idle workers spin for a few microseconds
** (the next region of a training step is usually that close), then yield
** for a while, then sleep on a futex.
**
** BLAS runs single-threaded on every thread (blas.c): a big product is cut
** into panels here instead (matmul.c), so that one pool serves everything.
*/
#ifndef QKV_CPU_PARALLEL_H
#define QKV_CPU_PARALLEL_H

#include <stdint.h>

/* runs items [lo, hi) on thread tid (0 is the caller, < qkv_par_threads());
   returns QKV_OK or an error, which stops the chunks not yet started */
typedef int (*qkv_par_fn)(void *ctx, int64_t lo, int64_t hi, int tid);

/*
** Runs fn over [0, n) in chunks of at least `grain` items on up to
** qkv_par_threads() threads; one chunk (or a call from inside a chunk) runs
** on the caller alone.  Returns the first error a chunk returned.
*/
int qkv_par_for(int64_t n, int64_t grain, qkv_par_fn fn, void *ctx);

/*
** Rows [0, rows) of row_len elements each, fn(ctx, r) for each: on this
** thread alone below QKV_CPU_PAR_MIN elements in all, else in chunks of
** at least half that; QKV_EINTR once the interrupt flag is seen.
*/
typedef void (*qkv_row_fn)(void *ctx, int64_t r);
int qkv_par_rows(int64_t rows, int64_t row_len, qkv_row_fn fn, void *ctx);

/* the threads a loop may use: qkv_num_threads() (core/qkv.h), 1 inside a
   chunk */
int qkv_par_threads(void);

#endif
