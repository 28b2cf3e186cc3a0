/*
** iter.h -- the strided iterator shared by CPU kernels.
**
** A kernel describes up to QKV_ITER_MAXOP operands that all have the same
** shape (operand 0 is the one written), and the iterator calls a row
** function over the innermost dim for every outer index.  Dims are kept in
** the given order; size-1 dims are dropped and neighbours that are
** contiguous with each other in every operand are merged, so a contiguous
** tensor becomes one long row.  Big loops are split over OpenMP threads.
**
**   qkv_iter it;
**   const qkv_tensor *t[3] = { out, a, b };
**   qkv_iter_tensors(&it, 3, t);
**   qkv_iter_run(&it, row_fn, ctx);
*/
#ifndef QKV_CPU_ITER_H
#define QKV_CPU_ITER_H

#include <stdint.h>
#include "../core/qkv.h"
#include "../core/half.h"

#define QKV_ITER_MAXOP 4

/* ask the compiler to vectorise the next loop (QKV_OMP_SIMD: the Makefile builds with
   -fopenmp-simd; gcc -O2 alone will not vectorise an unknown trip count) */
#ifdef QKV_OMP_SIMD
#define QKV_SIMD _Pragma("omp simd")
#else
#define QKV_SIMD
#endif

/*
** A row: n elements; ptr[k] points at operand k's first element and
** bytestride[k] is the distance between its elements (0 when broadcast).
** ptr is a private copy, so the function may advance it.  Rows may be run
** concurrently, on disjoint parts of the output.
*/
typedef void (*qkv_iter_fn)(int64_t n, char **ptr, const int64_t *bytestride,
                            void *ctx);

/* flags, set in it->flags between init and run */
#define QKV_ITER_SERIAL 1      /* never use threads */
#define QKV_ITER_WHOLE_ROWS 2  /* never split one row between threads */

typedef struct qkv_iter {
  int nop;
  int ndim;                     /* >= 1 after init; dim 0 is the innermost */
  int flags;
  int64_t numel;                /* 0: run does nothing */
  int64_t size[QKV_MAXDIM];
  int64_t stride[QKV_MAXDIM][QKV_ITER_MAXOP];   /* bytes; [0] is the row's */
  char *data[QKV_ITER_MAXOP];
} qkv_iter;

/*
** Describe the loop: shape ndim/size (outermost first, as in qkv_tensor),
** operand k starting at data[k] with element strides stride[k][0..ndim-1]
** (may be NULL when ndim == 0) and elements of elsize[k] bytes.
** Returns 0, or -1 when nop or ndim is out of range.
*/
int qkv_iter_init(qkv_iter *it, int ndim, const int64_t *size, int nop,
                  char *const *data, const int64_t *const *stride,
                  const size_t *elsize);
/* the same from tensors: t[0]'s shape; every t[k] must have it */
int qkv_iter_tensors(qkv_iter *it, int nop, const qkv_tensor *const *t);

/*
** Run fn over every element.  Threads are used when numel >= QKV_CPU_PAR_MIN,
** unless QKV_ITER_SERIAL is set or the run is already inside a parallel
** region.  A row is split between threads only if operand 0 moves along it
** and QKV_ITER_WHOLE_ROWS is clear; the run is serial when operand 0 has a
** 0 stride on an outer dim (it would be written by two threads).  Each
** thread looks at qkv_interrupted every 64K elements (a longer row reaches
** fn in pieces) and stops there: QKV_EINTR when some element was left
** undone, else QKV_OK.
*/
int qkv_iter_run(const qkv_iter *it, qkv_iter_fn fn, void *ctx);
/* elements [lo, hi) in row-major order of the coalesced shape, this
   thread; QKV_EINTR when it stopped early, as qkv_iter_run */
int qkv_iter_range(const qkv_iter *it, int64_t lo, int64_t hi,
                   qkv_iter_fn fn, void *ctx);

/*
** Stamp out a row function `static void name(n, ptr, bytestride, ctx)`
** computing out = EXPR elementwise, EXPR reading the input(s) as x (and y),
** TO the output's C type and TI the inputs'.  The contiguous cases, and one
** input broadcast (stride 0) against a contiguous one, are plain indexed
** loops so they vectorise; anything else walks the byte strides.
** QKV_ROW_CALL1/2 are the same without the simd pragma, for an EXPR that
** calls a function with no vector version (powf, expf, ...): clang warns
** when a simd loop stays scalar.
*/
#define QKV_CPU_SZ(T) ((int64_t)sizeof(T))
#define QKV_LOOP_SIMD QKV_SIMD
#define QKV_LOOP_PLAIN

#define QKV_ROW_MAP1(name, TO, TI, EXPR) QKV_ROW1_(name, TO, TI, EXPR, SIMD)
#define QKV_ROW_CALL1(name, TO, TI, EXPR) QKV_ROW1_(name, TO, TI, EXPR, PLAIN)
#define QKV_ROW_MAP2(name, TO, TI, EXPR) QKV_ROW2_(name, TO, TI, EXPR, SIMD)
#define QKV_ROW_CALL2(name, TO, TI, EXPR) QKV_ROW2_(name, TO, TI, EXPR, PLAIN)

#define QKV_ROW1_(name, TO, TI, EXPR, V) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    TO *o = (TO *)p[0]; \
    const TI *a = (const TI *)p[1]; \
    (void)ctx; \
    if (s[0] == QKV_CPU_SZ(TO) && s[1] == QKV_CPU_SZ(TI)) { \
      QKV_LOOP_##V for (int64_t i = 0; i < n; i++) { TI x = a[i]; o[i] = (EXPR); } \
    } else if (s[0] == QKV_CPU_SZ(TO) && s[1] == 0) { \
      const TI x = a[0]; \
      const TO v = (EXPR); \
      QKV_SIMD for (int64_t i = 0; i < n; i++) o[i] = v; \
    } else { \
      /* strides in locals: a store through o may alias s as far as C knows */ \
      const int64_t so = s[0], sa = s[1]; \
      char *po = p[0], *pa = p[1]; \
      for (int64_t i = 0; i < n; i++, po += so, pa += sa) { \
        TI x = *(const TI *)pa; \
        *(TO *)po = (EXPR); \
      } \
    } \
  }

#define QKV_ROW2_(name, TO, TI, EXPR, V) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    TO *o = (TO *)p[0]; \
    const TI *a = (const TI *)p[1], *b = (const TI *)p[2]; \
    (void)ctx; \
    if (s[0] == QKV_CPU_SZ(TO) && s[1] == QKV_CPU_SZ(TI) && s[2] == QKV_CPU_SZ(TI)) { \
      QKV_LOOP_##V for (int64_t i = 0; i < n; i++) { TI x = a[i], y = b[i]; o[i] = (EXPR); } \
    } else if (s[0] == QKV_CPU_SZ(TO) && s[1] == QKV_CPU_SZ(TI) && s[2] == 0) { \
      const TI y = b[0]; \
      QKV_LOOP_##V for (int64_t i = 0; i < n; i++) { TI x = a[i]; o[i] = (EXPR); } \
    } else if (s[0] == QKV_CPU_SZ(TO) && s[1] == 0 && s[2] == QKV_CPU_SZ(TI)) { \
      const TI x = a[0]; \
      QKV_LOOP_##V for (int64_t i = 0; i < n; i++) { TI y = b[i]; o[i] = (EXPR); } \
    } else { \
      const int64_t so = s[0], sa = s[1], sb = s[2]; \
      char *po = p[0], *pa = p[1], *pb = p[2]; \
      for (int64_t i = 0; i < n; i++, po += so, pa += sa, pb += sb) { \
        TI x = *(const TI *)pa, y = *(const TI *)pb; \
        *(TO *)po = (EXPR); \
      } \
    } \
  }

#endif
