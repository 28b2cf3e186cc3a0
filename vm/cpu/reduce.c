/*
** reduce.c -- reductions along one dim on the CPU: sum, mean, max, min,
** var, std, argmax and argmin of a strided tensor.
**
** Each output element reduces one line of a.  Threads share the outputs
** out in runs; when the reduced dim is strided but neighbouring lines lie
** side by side (a column sum), float sums and moments walk a tile of lines
** together.  A few long lines (a full reduction arrives as a 1-D view) are
** cut into fixed pieces whose partial results are combined in order, so
** the answer never depends on the number of threads.
**
** Every thread looks at qkv_interrupted between chunks of CHUNK elements:
** between short lines, and inside a long line or tile, whose accumulators
** carry from chunk to chunk, so that the sums are those of one pass.  It
** stops there, and the reduction returns QKV_EINTR when work was left.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "parallel.h"
#include "vexp.h"
#include "../common/reduce_plan.h"

#define PIECE 32768           /* smallest piece of a split line */
#define MAXPIECES 256         /* most pieces one line is cut into */
#define FEW_OUTPUTS 64        /* split lines only below this many outputs */
/* elements between looks at the interrupt flag: 10-100 µs of work; a
   multiple of 4, so that a chunk leaves sum_f32's four sums in step */
#define CHUNK 65536

typedef qkv_redplan plan;     /* ../common/reduce_plan.h */

/* What a line, or a piece of one, reduces to. */
typedef struct {
  double d;                   /* float sum, or sum of squared deviations */
  double c;                   /* sum of deviations: the two-pass correction */
  uint64_t u;                 /* int64 and bool sums, wrapping */
  int64_t pos;                /* extremum position */
} acc;


/* line kernels: p is the line's first element, s its stride */

/*
** Four partial sums break the dependency chain on the contiguous path.
** They carry over in t from one call to the next: a line summed in chunks
** of a multiple of 4 elements adds in the order of one call over it all.
*/
#define DEF_FSUM(name, T) \
static void name (const void *v, int64_t n, int64_t s, double *t) { \
  const T *p = (const T *)v; \
  double t0 = t[0], t1 = t[1], t2 = t[2], t3 = t[3]; \
  int64_t i = 0; \
  if (s == 1) { \
    for (; i + 4 <= n; i += 4) { \
      t0 += p[i]; t1 += p[i + 1]; t2 += p[i + 2]; t3 += p[i + 3]; \
    } \
    for (; i < n; i++) t0 += p[i]; \
  } else { \
    for (; i < n; i++) t0 += p[i * s]; \
  } \
  t[0] = t0; t[1] = t1; t[2] = t2; t[3] = t3; \
}
DEF_FSUM(sum_f32, float)
DEF_FSUM(sum_f64, double)

/* Integer sums wrap as two's complement does, without signed overflow. */
static uint64_t sum_int (qkv_dtype dt, const void *v, int64_t n, int64_t s) {
  uint64_t t = 0;
  if (dt == QKV_I64) {
    const int64_t *p = (const int64_t *)v;
    if (s == 1) for (int64_t i = 0; i < n; i++) t += (uint64_t)p[i];
    else for (int64_t i = 0; i < n; i++) t += (uint64_t)p[i * s];
  } else {
    const uint8_t *p = (const uint8_t *)v;
    if (s == 1) for (int64_t i = 0; i < n; i++) t += p[i] != 0;
    else for (int64_t i = 0; i < n; i++) t += p[i * s] != 0;
  }
  return t;
}

/* adds to r->c and r->d as one running sum each, chunk after chunk */
#define DEF_SQDEV(name, T) \
static void name (const void *v, int64_t n, int64_t s, double mean, acc *r) { \
  const T *p = (const T *)v; \
  double d1 = r->c, d2 = r->d; \
  for (int64_t i = 0; i < n; i++) { \
    double d = (double)p[i * s] - mean; \
    d1 += d; \
    d2 += d * d; \
  } \
  r->c = d1; \
  r->d = d2; \
}
DEF_SQDEV(sqdev_f32, float)
DEF_SQDEV(sqdev_f64, double)

/*
** A half's line (float16, bfloat16: the sums and moments alone) read as
** float32 STAGE elements at a time (copy.c's rows: exact) into a buffer
** that the float32 kernels take as a contiguous line, so that nothing of
** a's size is copied; STAGE is a multiple of 4, so that sum_f32's four
** sums run as over one line.
*/
#define STAGE 256

static void stage (qkv_dtype dt, float *buf, const void *v, int64_t m, int64_t s) {
  char *q[2] = {(char *)buf, (char *)v};
  int64_t qs[2] = {sizeof(float), s * 2};
  qkv_cpu_copy_row(QKV_F32, dt)(m, q, qs, NULL);
}

static void sum_half (qkv_dtype dt, const void *v, int64_t n, int64_t s, double *t) {
  float buf[STAGE];
  for (int64_t i = 0; i < n; i += STAGE) {
    int64_t m = n - i < STAGE ? n - i : STAGE;
    stage(dt, buf, (const uint16_t *)v + i * s, m, s);
    sum_f32(buf, m, 1, t);
  }
}

static void sqdev_half (qkv_dtype dt, const void *v, int64_t n, int64_t s, double mean,
                        acc *r) {
  float buf[STAGE];
  for (int64_t i = 0; i < n; i += STAGE) {
    int64_t m = n - i < STAGE ? n - i : STAGE;
    stage(dt, buf, (const uint16_t *)v + i * s, m, s);
    sqdev_f32(buf, m, 1, mean, r);
  }
}

/*
** The first extremum wins ties; the first NaN beats everything, so a line
** holding one reports it at once.
*/
#define ISNAN_F(v) ((v) != (v))
#define ISNAN_I(v) 0
#define GT(a, b) ((a) > (b))
#define LT(a, b) ((a) < (b))
#define DEF_EXT(name, T, ISNAN, BETTER) \
static int64_t name (const void *v, int64_t n, int64_t s) { \
  const T *p = (const T *)v; \
  T best = p[0]; \
  int64_t pos = 0; \
  if (ISNAN(best)) return 0; \
  for (int64_t i = 1; i < n; i++) { \
    T x = p[i * s]; \
    if (ISNAN(x)) return i; \
    if (BETTER(x, best)) { best = x; pos = i; } \
  } \
  return pos; \
}
DEF_EXT(max_f32, float, ISNAN_F, GT)
DEF_EXT(min_f32, float, ISNAN_F, LT)
DEF_EXT(max_f64, double, ISNAN_F, GT)
DEF_EXT(min_f64, double, ISNAN_F, LT)
DEF_EXT(max_i64, int64_t, ISNAN_I, GT)
DEF_EXT(min_i64, int64_t, ISNAN_I, LT)
DEF_EXT(max_bool, uint8_t, ISNAN_I, GT)
DEF_EXT(min_bool, uint8_t, ISNAN_I, LT)

typedef int64_t (*ext_fn) (const void *, int64_t, int64_t);
static const ext_fn ext_max[QKV_NDTYPE] = {max_f32, max_f64, max_i64, max_bool};
static const ext_fn ext_min[QKV_NDTYPE] = {min_f32, min_f64, min_i64, min_bool};

/* element i of the line that starts at `line` */
static const char *at (const plan *P, const char *line, int64_t i) {
  return line + i * P->sa * (int64_t)P->ea;
}


/* Whether element j of the line beats element i < j, by the rules above. */
static int beats (const plan *P, const char *line, int64_t j, int64_t i) {
  const char *pj = at(P, line, j), *pi = at(P, line, i);
  int mx = qkv_red_is_max(P->op);
  switch (P->dt) {
    case QKV_F32: case QKV_F64: {
      double vj = P->dt == QKV_F32 ? *(const float *)pj : *(const double *)pj;
      double vi = P->dt == QKV_F32 ? *(const float *)pi : *(const double *)pi;
      if (isnan(vi)) return 0;
      if (isnan(vj)) return 1;
      return mx ? vj > vi : vj < vi;
    }
    case QKV_I64: {
      int64_t vj = *(const int64_t *)pj, vi = *(const int64_t *)pi;
      return mx ? vj > vi : vj < vi;
    }
    default: {
      uint8_t vj = *(const uint8_t *)pj, vi = *(const uint8_t *)pi;
      return mx ? vj > vi : vj < vi;
    }
  }
}


/*
** pieces: `start`/`len` select part of the line beginning at `line`, done
** CHUNK elements at a time with a look at the flag between chunks; each
** returns QKV_EINTR when it stopped early, leaving r partial.
*/

static int piece_sum (const plan *P, const char *line, int64_t start,
                      int64_t len, acc *r) {
  double t[4] = {0, 0, 0, 0};
  r->u = 0;
  for (int64_t i = 0; i < len; i += CHUNK) {
    const char *p = at(P, line, start + i);
    int64_t n = len - i < CHUNK ? len - i : CHUNK;
    if (i > 0 && qkv_interrupted) return QKV_EINTR;
    if (P->dt == QKV_F32) sum_f32(p, n, P->sa, t);
    else if (P->dt == QKV_F64) sum_f64(p, n, P->sa, t);
    else if (qkv_is_half(P->dt)) sum_half(P->dt, p, n, P->sa, t);
    else r->u += sum_int(P->dt, p, n, P->sa);
  }
  r->d = (t[0] + t[1]) + (t[2] + t[3]);
  return QKV_OK;
}

static int piece_sqdev (const plan *P, const char *line, int64_t start,
                        int64_t len, double mean, acc *r) {
  r->d = r->c = 0;
  for (int64_t i = 0; i < len; i += CHUNK) {
    const char *p = at(P, line, start + i);
    int64_t n = len - i < CHUNK ? len - i : CHUNK;
    if (i > 0 && qkv_interrupted) return QKV_EINTR;
    if (P->dt == QKV_F32) sqdev_f32(p, n, P->sa, mean, r);
    else if (P->dt == QKV_F64) sqdev_f64(p, n, P->sa, mean, r);
    else sqdev_half(P->dt, p, n, P->sa, mean, r);
  }
  return QKV_OK;
}

/* the chunks' extrema combined by beats(): the same first extremum (or
   first NaN) as one scan */
static int piece_ext (const plan *P, const char *line, int64_t start,
                      int64_t len, acc *r) {
  ext_fn f = (qkv_red_is_max(P->op) ? ext_max : ext_min)[P->dt];
  for (int64_t i = 0; i < len; i += CHUNK) {
    int64_t n = len - i < CHUNK ? len - i : CHUNK;
    if (i > 0 && qkv_interrupted) return QKV_EINTR;
    int64_t pos = start + i + f(at(P, line, start + i), n, P->sa);
    if (i == 0 || beats(P, line, pos, r->pos)) r->pos = pos;
  }
  return QKV_OK;
}

static void put_float (qkv_dtype dt, char *o, double v) {
  if (dt == QKV_F32) *(float *)o = (float)v;
  else *(double *)o = v;
}

/*
** Over max(0, n - corr), PyTorch's correction (1: unbiased), in double, so
** that out is rounded once; the correction term soaks up the rounding in
** the mean.  A line of one element has had no second pass (r->d is the
** element): its deviation is x - x, 0, or NaN for inf and NaN, as
** PyTorch's; over 0 that gives NaN, and more than 0 over 0 inf.
*/
static double variance (const acc *r, int64_t n, double corr) {
  double div = (double)n - corr > 0 ? (double)n - corr : 0;
  if (n == 0) return NAN;
  double s = n == 1 ? (r->d - r->d) * (r->d - r->d) : r->d - r->c * r->c / (double)n;
  return (s < 0 ? 0 : s) / div;
}

/* Stores the finished result of the line at `line` into o and x. */
static void emit (const plan *P, const char *line, char *o, char *x,
                  const acc *r) {
  switch (P->op) {
    case QKV_SUM:
      if (P->odt == QKV_I64) *(int64_t *)o = (int64_t)r->u;
      else put_float(P->odt, o, r->d);
      break;
    case QKV_MEAN: put_float(P->odt, o, r->d / (double)P->n); break;
    case QKV_VAR: put_float(P->odt, o, variance(r, P->n, P->corr)); break;
    case QKV_STD: put_float(P->odt, o, sqrt(variance(r, P->n, P->corr))); break;
    default:
      if (o != NULL) memcpy(o, at(P, line, r->pos), P->ea);
      break;
  }
  if (x != NULL) *(int64_t *)x = r->pos;
}

/* The whole line for one output; QKV_EINTR when it stopped early. */
static int reduce_line (const plan *P, const char *line, char *o, char *x) {
  acc r = {0, 0, 0, 0};
  int err;
  if (P->fam == QKV_RED_EXTREMA) {
    err = piece_ext(P, line, 0, P->n, &r);
  } else {
    err = piece_sum(P, line, 0, P->n, &r);
    if (err == QKV_OK && P->fam == QKV_RED_MOMENTS && P->n > 1)
      err = piece_sqdev(P, line, 0, P->n, r.d / (double)P->n, &r);
  }
  if (err == QKV_OK) emit(P, line, o, x, &r);
  return err;
}


/* walking the kept dims; offsets count elements */

typedef struct { int64_t i[QKV_MAXDIM], a, o, x; } cursor;

static void seek (const plan *P, cursor *c, int64_t lin) {
  c->a = c->o = c->x = 0;
  for (int k = P->nd - 1; k >= 0; k--) {
    c->i[k] = lin % P->size[k];
    lin /= P->size[k];
    c->a += c->i[k] * P->as[k];
    c->o += c->i[k] * P->os[k];
    c->x += c->i[k] * P->xs[k];
  }
}

static void advance (const plan *P, cursor *c) {
  for (int k = P->nd - 1; k >= 0; k--) {
    c->a += P->as[k]; c->o += P->os[k]; c->x += P->xs[k];
    if (++c->i[k] < P->size[k]) return;
    c->a -= P->as[k] * P->size[k];
    c->o -= P->os[k] * P->size[k];
    c->x -= P->xs[k] * P->size[k];
    c->i[k] = 0;
  }
}

static char *out_ptr (char *base, qkv_dtype dt, int64_t off) {
  return base == NULL ? NULL : base + off * (int64_t)qkv_elsize(dt);
}

static int do_line (const plan *P, const cursor *c) {
  return reduce_line(P, P->a + c->a * (int64_t)P->ea,
                     out_ptr(P->o, P->odt, c->o), out_ptr(P->x, QKV_I64, c->x));
}

/*
** Up to TILE neighbouring lines at once, for float sums and moments when
** the reduced dim is strided but the lines lie side by side (a column
** sum): walking them together reads each cache line once, not once per
** line.  Each lane adds in the order reduce_line's strided loops do, from
** the value in r on, so that a tile can be walked in chunks of rows.
*/
#define TILE 64               /* lanes; measured best of 16..1024 */

/* A constant width lets the compiler vectorise across the lanes. */
#define TILE_SUMS(W) \
  for (int64_t i = 0; i < n; i++) \
    for (int k = 0; k < (W); k++) t[k] += p[i * s + k];
#define TILE_DEVS(W) \
  for (int64_t i = 0; i < n; i++) \
    for (int k = 0; k < (W); k++) { \
      double d = (double)p[i * s + k] - mean[k]; \
      c[k] += d; \
      t[k] += d * d; \
    }
#define DEF_TILE(name, T, ATTR) \
static ATTR void name (const void *v, int64_t n, int64_t s, int w, \
                  const double *mean, acc *r) { \
  const T *p = (const T *)v; \
  double t[TILE] = {0}, c[TILE] = {0}; \
  for (int k = 0; k < w; k++) { t[k] = r[k].d; c[k] = r[k].c; } \
  if (mean == NULL) { \
    if (w == TILE) { TILE_SUMS(TILE) } else { TILE_SUMS(w) } \
  } else { \
    if (w == TILE) { TILE_DEVS(TILE) } else { TILE_DEVS(w) } \
  } \
  for (int k = 0; k < w; k++) { r[k].d = t[k]; r[k].c = c[k]; } \
}
DEF_TILE(tile_f32_base, float, )
DEF_TILE(tile_f64_base, double, )
#ifdef QKV_VEXP_X86
/* the same lanes, each adding in the same order (no FMA: -std=c11 does not
   contract), 8 doubles a vector rather than SSE2's 2: the same bits */
DEF_TILE(tile_f32_avx512, float, QKV_AVX512)
DEF_TILE(tile_f64_avx512, double, QKV_AVX512)
#endif

static void tile_f32 (const void *v, int64_t n, int64_t s, int w, const double *mean, acc *r) {
#ifdef QKV_VEXP_X86
  if (qkv_cpu_has_avx512()) { tile_f32_avx512(v, n, s, w, mean, r); return; }
#endif
  tile_f32_base(v, n, s, w, mean, r);
}

static void tile_f64 (const void *v, int64_t n, int64_t s, int w, const double *mean, acc *r) {
#ifdef QKV_VEXP_X86
  if (qkv_cpu_has_avx512()) { tile_f64_avx512(v, n, s, w, mean, r); return; }
#endif
  tile_f64_base(v, n, s, w, mean, r);
}

static int tiles (const plan *P) {
  return P->fam != QKV_RED_EXTREMA && qkv_is_float(P->dt) && P->n > 0 &&
         P->nd > 0 && P->as[P->nd - 1] == 1 && P->sa != 1;
}

/* a half's tile, TILE rows at a time read as float32 (each row's w lanes
   side by side: copy.c's tile rows, no call a row) into a dense block the
   float32 tile takes */
static void tile_half (const plan *P, const char *line, int64_t n, int w, const double *mean,
                       acc *r) {
  float buf[TILE * TILE];
  for (int64_t i = 0; i < n; i += TILE) {
    int64_t m = n - i < TILE ? n - i : TILE;
    qkv_cpu_copy_tile(QKV_F32, buf, P->dt, at(P, line, i), m, w, P->sa, 1);
    tile_f32(buf, m, w, w, mean, r);
  }
}

/* one pass down a tile, CHUNK elements of rows at a time */
static int tile_pass (const plan *P, const char *line, int w,
                      const double *mean, acc *r) {
  const int64_t rows = CHUNK / TILE;
  for (int64_t i = 0; i < P->n; i += rows) {
    int64_t n = P->n - i < rows ? P->n - i : rows;
    if (i > 0 && qkv_interrupted) return QKV_EINTR;
    if (P->dt == QKV_F32) tile_f32(at(P, line, i), n, P->sa, w, mean, r);
    else if (P->dt == QKV_F64) tile_f64(at(P, line, i), n, P->sa, w, mean, r);
    else tile_half(P, at(P, line, i), n, w, mean, r);
  }
  return QKV_OK;
}

static int do_tile (const plan *P, const cursor *c, int w) {
  acc r[TILE];
  double mean[TILE];
  const char *line = P->a + c->a * (int64_t)P->ea;
  int64_t os = P->os[P->nd - 1];
  memset(r, 0, sizeof r);
  if (tile_pass(P, line, w, NULL, r) != QKV_OK) return QKV_EINTR;
  if (P->fam == QKV_RED_MOMENTS && P->n > 1) {
    /* every lane, not only w: gcc then sees all of mean set */
    for (int k = 0; k < TILE; k++) {
      mean[k] = r[k].d / (double)P->n;
      r[k].d = r[k].c = 0;
    }
    if (tile_pass(P, line, w, mean, r) != QKV_OK) return QKV_EINTR;
  }
  for (int k = 0; k < w; k++)
    emit(P, line + k * (int64_t)P->ea, out_ptr(P->o, P->odt, c->o + k * os),
         NULL, &r[k]);
  return QKV_OK;
}

/*
** Outputs lo .. hi - 1, in order; QKV_EINTR when it stopped early.  Short
** lines are counted (an output as one more element) up to CHUNK elements
** between looks at the flag.
*/
static int outputs_range (const plan *P, int tiled, int64_t lo, int64_t hi) {
  cursor c;
  int64_t left = CHUNK;
  if (lo < hi) seek(P, &c, lo);
  for (int64_t i = lo; i < hi;) {
    int64_t w = 1;
    int err;
    if (tiled) {
      w = P->size[P->nd - 1] - c.i[P->nd - 1];
      if (w > hi - i) w = hi - i;
      if (w > TILE) w = TILE;
      err = do_tile(P, &c, (int)w);
    } else {
      err = do_line(P, &c);
    }
    if (err != QKV_OK) return err;
    i += w;
    if ((left -= w * (P->n + 1)) <= 0) {
      if (i < hi && qkv_interrupted) return QKV_EINTR;
      left = CHUNK;
    }
    for (int64_t k = 0; k < w && i < hi; k++) advance(P, &c);
  }
  return QKV_OK;
}

/* Threads take runs of outputs.  A small reduction never starts threads
   (they would cost more than they save). */
/* Tiled, a thread takes whole tiles (unit = TILE outputs): a run of 16
   outputs made each thread walk every row for a quarter of a tile's lanes,
   and two threads took twice one's time (1024 x 256 summed over rows). */
typedef struct { const plan *P; int tiled; int64_t unit; } outputs_job;

static int outputs_chunk (void *p, int64_t lo, int64_t hi, int tid) {
  const outputs_job *O = p;
  int64_t end = hi * O->unit < O->P->nout ? hi * O->unit : O->P->nout;
  (void)tid;
  return outputs_range(O->P, O->tiled, lo * O->unit, end);
}

static int reduce_outputs (const plan *P) {
  outputs_job O = {P, tiles(P), 1};
  if (P->nout <= 1 || P->nout * P->n < QKV_CPU_PAR_MIN)
    return outputs_range(P, O.tiled, 0, P->nout);
  if (O.tiled) O.unit = TILE;
  int64_t grain = QKV_CPU_PAR_MIN / 2 / (P->n > 0 ? P->n : 1) / O.unit;
  return qkv_par_for((P->nout + O.unit - 1) / O.unit, grain < 1 ? 1 : grain, outputs_chunk,
                     &O) != QKV_OK ? QKV_EINTR : QKV_OK;
}


/* split lines: piece k of output j is part[j * np + k] */

typedef struct {
  const plan *P;
  int64_t np, len;            /* pieces per line, elements per piece */
  const char *line[FEW_OUTPUTS];
  acc *part;
  double mean[FEW_OUTPUTS];
} split;

typedef struct { split *S; int second; } pieces_job;

static int pieces_chunk (void *p, int64_t lo, int64_t hi, int tid) {
  const pieces_job *PJ = p;
  split *S = PJ->S;
  const plan *P = S->P;
  (void)tid;
  for (int64_t k = lo; k < hi; k++) {
    int64_t j = k / S->np, start = (k % S->np) * S->len;
    int64_t len = P->n - start < S->len ? P->n - start : S->len;
    acc *r = &S->part[k];
    int e;
    if (qkv_interrupted) return QKV_EINTR;
    if (PJ->second) e = piece_sqdev(P, S->line[j], start, len, S->mean[j], r);
    else if (P->fam == QKV_RED_EXTREMA) e = piece_ext(P, S->line[j], start, len, r);
    else e = piece_sum(P, S->line[j], start, len, r);
    if (e != QKV_OK) return e;
  }
  return QKV_OK;
}

/* the pieces, one at a time to whichever thread is free; a chunk that met
   the flag stops the others */
static int split_pass (split *S, int second) {
  pieces_job PJ = {S, second};
  return qkv_par_for(S->P->nout * S->np, 1, pieces_chunk, &PJ) != QKV_OK ? QKV_EINTR : QKV_OK;
}

/* Folds the pieces of output j in order. */
static acc combine (const split *S, int64_t j, int second) {
  const acc *p = &S->part[j * S->np];
  acc r = p[0];
  for (int64_t k = 1; k < S->np; k++) {
    if (second) { r.d += p[k].d; r.c += p[k].c; }
    else if (S->P->fam == QKV_RED_EXTREMA) {
      if (beats(S->P, S->line[j], p[k].pos, r.pos)) r.pos = p[k].pos;
    } else { r.d += p[k].d; r.u += p[k].u; }
  }
  return r;
}

static int reduce_split (const plan *P) {
  split S;
  cursor c;
  int64_t ooff[FEW_OUTPUTS], xoff[FEW_OUTPUTS];
  S.P = P;
  S.len = (P->n + MAXPIECES - 1) / MAXPIECES;
  if (S.len < PIECE) S.len = PIECE;
  S.np = (P->n + S.len - 1) / S.len;
  S.part = (acc *)calloc((size_t)(P->nout * S.np), sizeof(acc));
  if (S.part == NULL) return QKV_ENOMEM;
  seek(P, &c, 0);
  for (int64_t j = 0; j < P->nout; j++) {
    S.line[j] = P->a + c.a * (int64_t)P->ea;
    ooff[j] = c.o;
    xoff[j] = c.x;
    if (j + 1 < P->nout) advance(P, &c);
  }
  acc res[FEW_OUTPUTS];
  int err = split_pass(&S, 0);
  for (int64_t j = 0; err == QKV_OK && j < P->nout; j++) {
    res[j] = combine(&S, j, 0);
    S.mean[j] = res[j].d / (double)P->n;
  }
  if (err == QKV_OK && P->fam == QKV_RED_MOMENTS) {
    err = split_pass(&S, 1);
    for (int64_t j = 0; err == QKV_OK && j < P->nout; j++) res[j] = combine(&S, j, 1);
  }
  for (int64_t j = 0; err == QKV_OK && j < P->nout; j++)
    emit(P, S.line[j], out_ptr(P->o, P->odt, ooff[j]),
         out_ptr(P->x, QKV_I64, xoff[j]), &res[j]);
  free(S.part);
  return err;
}


/* the entry: the plan as ../common/reduce_plan.h makes it */

int qkv_cpu_reduce (qkv_redop op, qkv_tensor *out, qkv_tensor *idx,
                    const qkv_tensor *a, int dim, double correction) {
  plan P;
  int err = qkv_redplan_init(&P, op, out, idx, a, dim, 1, correction);
  if (err != QKV_OK || P.nout == 0) return err;
  static const double none = 0;        /* an empty a may have no storage */
  qkv_redplan_data(&P, P.n > 0 ? (const char *)qkv_data(a) : (const char *)&none,
                   (char *)qkv_data(out), idx ? (char *)qkv_data(idx) : NULL);
  P.ea = qkv_elsize(a->dtype);
  if (P.nout < FEW_OUTPUTS && P.n >= 2 * PIECE)
    return reduce_split(&P);
  return reduce_outputs(&P);
}
