/*
** mods_eval.h -- what the two files of the CPU's mod evaluator share:
** mods.c (a whole tile's values, the block kinds' and the backward's
** way) and mods_rows.c (the forward's, row by row): a tile's axes, a
** value's rows, and the loops of one op over a row and of a LOAD.
*/
#ifndef QKV_CPU_MODS_EVAL_H
#define QKV_CPU_MODS_EVAL_H

#include "mods.h"
#include "vexp.h"

/* the tile's inner (contiguous) and outer axes: key-major tiles run over
   queries inside, query-major over keys */
typedef struct {
  int nx, ny, dx, dy;               /* sizes; the DEP_ bits of x and y */
} axes;

static inline axes axes_of (const qkv_mod_tile *T) {
  axes a;
  a.nx = T->key_major ? T->ni : T->nj;
  a.ny = T->key_major ? T->nj : T->ni;
  a.dx = T->key_major ? QKV_MOD_DEP_I : QKV_MOD_DEP_J;
  a.dy = QKV_MOD_DEP_I + QKV_MOD_DEP_J - a.dx;
  return a;
}

/* row y of a value of dependence d at p: its start, and whether it runs
   along x (else one element serves the row) */
static inline const double *row (const axes *A, const double *p, int d, int y, int *alongx) {
  *alongx = (d & A->dx) != 0;
  return p + (d & A->dy ? (size_t)y * (*alongx ? (size_t)A->nx : 1) : 0);
}

/* o never overlaps a, b, c where they run along x: the loops vectorise
   without the compiler's alias checks */
#ifdef QKV_OMP_SIMD
#define SIMD _Pragma("omp simd")
#else
#define SIMD
#endif
/* compiled three times, for AVX-512 (x86-64-v4: 8 doubles, 16 floats a
   vector), AVX2 and the baseline; the loader picks one by the CPU (an
   ifunc), as the kernels' own checks do */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CLONES
#endif

/* the float32 formulas (vexp.h's) of the ops a float32 tile's score path
   takes in float32: exp, tanh, sigmoid; inlined with a constant op, each
   loop of them one op's formula */
static inline __attribute__((always_inline)) float qkv_mod_apply_f (int op, float a) {
  switch (op) {
    case QKV_MOD_EXP: return qkv_vexpf(a);
    case QKV_MOD_TANH: return qkv_vtanhf(a);
    default: return 1.0f / (1.0f + qkv_vexpf(-a));          /* SIGMOID */
  }
}

/* o[0..n) = op(a, b, c), each operand along x (its s* set) or one
   element */
void qkv_mod_run (int op, double *o, int n, const double *a, int sa, const double *b, int sb,
                  const double *c, int sc);

/* row y of T's scores: the new scores rs (along x when xs, else one for
   the row) where rs is not NULL, then -inf where rm (likewise xm) is 0 */
void qkv_mod_put_row (const qkv_mod_tile *T, const axes *A, int y, const double *rs, int xs,
                      const double *rm, int xm);

/* a LOAD on row y: each element's indices checked, then read */
int qkv_mod_load (qkv_attn_mods *M, const axes *A, double *const *val, int v, int y, double *o,
                  int n);

#endif
