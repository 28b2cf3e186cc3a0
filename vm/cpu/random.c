/*
** random.c -- the Philox 4x32-10 generator and the CPU's uniform and
** normal fills.
**
** The stream is a pure function of (key, offset, element index), so any
** thread count, and later a CUDA kernel, reproduces it bit for bit:
**
**   block j (a 64-bit counter) is philox4x32_10(ctr = {lo32(j), hi32(j),
**   0, 0}, key = {key[0], key[1]}), giving lanes x0..x3.  A call with
**   `offset` uses blocks offset, offset + 1, ...; a float32 call of n
**   elements consumes ceil(n/4) blocks, a float64 call ceil(n/2), for
**   both distributions (the caller advances its offset by that much).
**
**   float32 uniform: element i = lane i%4 of block offset + i/4, as
**     (x >> 8) * 2^-24, in [0, 1).
**   float64 uniform: element i takes lanes (a, b) = (2*(i%2), 2*(i%2)+1)
**     of block offset + i/2: ((a << 32 | b) >> 11) * 2^-53, in [0, 1).
**   normal (Box-Muller, computed in double): elements 2k and 2k+1 come
**     from one pair (u1, u2), u1 in (0, 1] and u2 in [0, 1):
**       r = sqrt(-2 ln u1), th = 2 pi u2,
**       element 2k = r cos th, element 2k+1 = r sin th
**     (rounded to float for float32); an odd last element drops the sin.
**     float32: pair k takes lanes (x, y) = (2*(k%2), 2*(k%2)+1) of block
**       offset + k/2, u1 = ((x >> 8) + 1) * 2^-24, u2 = (y >> 8) * 2^-24.
**     float64: pair k takes block offset + k; v1 = (x0 << 32 | x1) >> 11,
**       v2 = (x2 << 32 | x3) >> 11, u1 = (v1 + 1) * 2^-53, u2 = v2 * 2^-53.
*/
#include <math.h>
#include <string.h>

#include "cpu.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u     /* Weyl increments of the key */
#define PHILOX_W1 0xBB67AE85u

#define TWO_PI 6.283185307179586476925286766559
#define TWO_M24 (1.0 / 16777216.0)
#define TWO_M53 (1.0 / 9007199254740992.0)

/*
** GROUP blocks at once, one per lane of the arrays, updated in place.  The
** lanes are independent, so the compiler vectorises the multiplies; one
** block alone is a chain of dependent ones.
*/
#define GROUP 16

typedef struct { uint32_t x0[GROUP], x1[GROUP], x2[GROUP], x3[GROUP]; } lanes;

static void philox (lanes *v, const uint32_t key[2]) {
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    for (int g = 0; g < GROUP; g++) {
      uint64_t p0 = (uint64_t)PHILOX_M0 * v->x0[g];
      uint64_t p1 = (uint64_t)PHILOX_M1 * v->x2[g];
      uint32_t y1 = v->x1[g], y3 = v->x3[g];
      v->x0[g] = (uint32_t)(p1 >> 32) ^ y1 ^ k0;
      v->x1[g] = (uint32_t)p1;
      v->x2[g] = (uint32_t)(p0 >> 32) ^ y3 ^ k1;
      v->x3[g] = (uint32_t)p0;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
}

void qkv_philox (const uint32_t ctr[4], const uint32_t key[2],
                 uint32_t out[4]) {
  lanes v;
  memset(&v, 0, sizeof v);
  v.x0[0] = ctr[0]; v.x1[0] = ctr[1]; v.x2[0] = ctr[2]; v.x3[0] = ctr[3];
  philox(&v, key);
  out[0] = v.x0[0]; out[1] = v.x1[0]; out[2] = v.x2[0]; out[3] = v.x3[0];
}

/* Blocks j .. j + GROUP - 1 of the stream, block j + g in x[g]. */
static void blocks (const uint32_t key[2], uint64_t j, uint32_t x[GROUP][4]) {
  lanes v;
  for (int g = 0; g < GROUP; g++) {
    uint64_t c = j + (uint64_t)g;
    v.x0[g] = (uint32_t)c;
    v.x1[g] = (uint32_t)(c >> 32);
    v.x2[g] = v.x3[g] = 0;
  }
  philox(&v, key);
  for (int g = 0; g < GROUP; g++) {
    x[g][0] = v.x0[g]; x[g][1] = v.x1[g]; x[g][2] = v.x2[g]; x[g][3] = v.x3[g];
  }
}

static double u24 (uint32_t x) { return (double)(x >> 8) * TWO_M24; }

static double u53 (uint32_t a, uint32_t b) {
  return (double)((((uint64_t)a << 32) | b) >> 11) * TWO_M53;
}

/* Both halves always, so the compiler can fuse cos and sin into sincos. */
static void box_muller (double u1, double u2, double *c, double *s) {
  double r = sqrt(-2.0 * log(u1)), th = TWO_PI * u2;
  *c = r * cos(th);
  *s = r * sin(th);
}

/* Elements [4b, 4b + cnt) of a float32 fill, from block offset + b. */
static void fill_f32 (float *o, qkv_dist dist, const uint32_t x[4], int cnt) {
  if (dist == QKV_UNIFORM) {
    for (int l = 0; l < cnt; l++) o[l] = (float)u24(x[l]);
    return;
  }
  for (int h = 0; 2 * h < cnt; h++) {
    double c, s;
    double u1 = u24(x[2 * h]) + TWO_M24;   /* ((x >> 8) + 1) * 2^-24, exact */
    box_muller(u1, u24(x[2 * h + 1]), &c, &s);
    o[2 * h] = (float)c;
    if (2 * h + 1 < cnt) o[2 * h + 1] = (float)s;
  }
}

/* Elements [2b, 2b + cnt) of a float64 fill, from block offset + b. */
static void fill_f64 (double *o, qkv_dist dist, const uint32_t x[4], int cnt) {
  if (dist == QKV_UNIFORM) {
    for (int l = 0; l < cnt; l++) o[l] = u53(x[2 * l], x[2 * l + 1]);
    return;
  }
  double c, s;
  box_muller(u53(x[0], x[1]) + TWO_M53, u53(x[2], x[3]), &c, &s);
  o[0] = c;
  if (cnt > 1) o[1] = s;
}

typedef struct {
  const uint32_t *key;
  uint64_t offset;
  int64_t n, nblocks;
  int per, f32;
  qkv_dist dist;
  char *base;
} job;

/* group q: GROUP Philox blocks' worth of elements */
static void one_group (const job *J, int64_t q) {
  uint32_t x[GROUP][4];
  blocks(J->key, J->offset + (uint64_t)(q * GROUP), x);
  for (int g = 0; g < GROUP && q * GROUP + g < J->nblocks; g++) {
    int64_t first = (q * GROUP + g) * J->per;
    int cnt = J->n - first < J->per ? (int)(J->n - first) : J->per;
    if (J->f32) fill_f32((float *)J->base + first, J->dist, x[g], cnt);
    else fill_f64((double *)J->base + first, J->dist, x[g], cnt);
  }
}

int qkv_cpu_random (qkv_tensor *out, qkv_dist dist, const uint32_t key[2],
                    uint64_t offset) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (dist != QKV_UNIFORM && dist != QKV_NORMAL) return QKV_EINTERNAL;
  job J = {key, offset, qkv_numel(out), 0, out->dtype == QKV_F32 ? 4 : 2,
           out->dtype == QKV_F32, dist, NULL};
  if (J.n <= 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  J.nblocks = (J.n + J.per - 1) / J.per;
  J.base = (char *)qkv_data(out);
  int64_t ngroups = (J.nblocks + GROUP - 1) / GROUP;
  if (J.n < QKV_CPU_PAR_MIN) {          /* no parallel region for a few */
    for (int64_t q = 0; q < ngroups; q++) one_group(&J, q);
    return QKV_OK;
  }
  #pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < ngroups; q++)
    if (!qkv_interrupted) one_group(&J, q);
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}
