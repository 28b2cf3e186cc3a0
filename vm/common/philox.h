/*
** philox.h -- the Philox 4x32-10 generator and the uniform and normal
** elements made from its blocks, the same code in vm/cpu/random.c and in
** vm/cuda/random.cu's kernel, so that a seed gives the same numbers on
** either device.  vm/cpu/random.c documents the stream: which block and
** which lanes each element takes.
*/
#ifndef QKV_COMMON_PHILOX_H
#define QKV_COMMON_PHILOX_H

#include "common.h"

#define QKV_PHILOX_M0 0xD2511F53u
#define QKV_PHILOX_M1 0xCD9E8D57u
#define QKV_PHILOX_W0 0x9E3779B9u     /* Weyl increments of the key */
#define QKV_PHILOX_W1 0xBB67AE85u

#define QKV_TWO_PI 6.283185307179586476925286766559
#define QKV_TWO_M24 (1.0 / 16777216.0)
#define QKV_TWO_M53 (1.0 / 9007199254740992.0)

/*
** One round on the counter (x0, x1, x2, x3), in place, with the round's
** key (k0, k1).  All four are read before any is written, so the CPU may
** pass lanes of arrays and still have the loop over them vectorised.
*/
static inline QKV_HD void qkv_philox_round (uint32_t *x0, uint32_t *x1, uint32_t *x2,
                                            uint32_t *x3, uint32_t k0, uint32_t k1) {
  uint64_t p0 = (uint64_t)QKV_PHILOX_M0 * *x0;
  uint64_t p1 = (uint64_t)QKV_PHILOX_M1 * *x2;
  uint32_t y1 = *x1, y3 = *x3;
  *x0 = (uint32_t)(p1 >> 32) ^ y1 ^ k0;
  *x1 = (uint32_t)p1;
  *x2 = (uint32_t)(p0 >> 32) ^ y3 ^ k1;
  *x3 = (uint32_t)p0;
}

/* the key of the round after the one keyed (k0, k1) */
static inline QKV_HD void qkv_philox_bump (uint32_t *k0, uint32_t *k1) {
  *k0 += QKV_PHILOX_W0;
  *k1 += QKV_PHILOX_W1;
}

/* the ten rounds on the counter in x, in place: one block of the stream */
static inline QKV_HD void qkv_philox4x32_10 (uint32_t x[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    qkv_philox_round(&x[0], &x[1], &x[2], &x[3], k0, k1);
    qkv_philox_bump(&k0, &k1);
  }
}

static inline QKV_HD double qkv_u24 (uint32_t x) {
  return (double)(x >> 8) * QKV_TWO_M24;
}

static inline QKV_HD double qkv_u53 (uint32_t a, uint32_t b) {
  return (double)((((uint64_t)a << 32) | b) >> 11) * QKV_TWO_M53;
}

/* Both halves always, so the compiler can fuse cos and sin into sincos. */
static inline QKV_HD void qkv_box_muller (double u1, double u2, double *c, double *s) {
  double r = sqrt(-2.0 * log(u1)), th = QKV_TWO_PI * u2;
  *c = r * cos(th);
  *s = r * sin(th);
}

/* Elements [4b, 4b + cnt) of a float32 fill, from the lanes x of block
   offset + b; normal or uniform */
static inline QKV_HD void qkv_random_f32 (float *o, int normal, const uint32_t x[4],
                                          int cnt) {
  if (!normal) {
    for (int l = 0; l < cnt; l++) o[l] = (float)qkv_u24(x[l]);
    return;
  }
  for (int h = 0; 2 * h < cnt; h++) {
    double c, s;
    double u1 = qkv_u24(x[2 * h]) + QKV_TWO_M24;   /* ((x >> 8) + 1) * 2^-24, exact */
    qkv_box_muller(u1, qkv_u24(x[2 * h + 1]), &c, &s);
    o[2 * h] = (float)c;
    if (2 * h + 1 < cnt) o[2 * h + 1] = (float)s;
  }
}

/* Elements [2b, 2b + cnt) of a float64 fill, from block offset + b. */
static inline QKV_HD void qkv_random_f64 (double *o, int normal, const uint32_t x[4],
                                          int cnt) {
  if (!normal) {
    for (int l = 0; l < cnt; l++) o[l] = qkv_u53(x[2 * l], x[2 * l + 1]);
    return;
  }
  double c, s;
  qkv_box_muller(qkv_u53(x[0], x[1]) + QKV_TWO_M53, qkv_u53(x[2], x[3]), &c, &s);
  o[0] = c;
  if (cnt > 1) o[1] = s;
}

#endif
