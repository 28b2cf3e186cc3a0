/*
** random.c -- the Philox 4x32-10 generator and the CPU's uniform and
** normal fills (the rounds and the elements' formulas: vm/common/philox.h,
** which vm/cuda/random.cu's kernel runs too).
**
** The stream is a pure function of (key, offset, element index), so any
** thread count, and vm/cuda/random.cu's kernel, reproduces it bit for bit:
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
#include <string.h>

#include "cpu.h"
#include "parallel.h"
#include "../common/philox.h"

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
    for (int g = 0; g < GROUP; g++)
      qkv_philox_round(&v->x0[g], &v->x1[g], &v->x2[g], &v->x3[g], k0, k1);
    qkv_philox_bump(&k0, &k1);
  }
}

void qkv_philox (const uint32_t ctr[4], const uint32_t key[2],
                 uint32_t out[4]) {
  memcpy(out, ctr, 4 * sizeof *out);
  qkv_philox4x32_10(out, key[0], key[1]);
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

typedef struct {
  const uint32_t *key;
  uint64_t offset;
  int64_t n, nblocks;
  int per, f32, normal;
  char *base;
} job;

/* group q: GROUP Philox blocks' worth of elements */
static void one_group (const job *J, int64_t q) {
  uint32_t x[GROUP][4];
  blocks(J->key, J->offset + (uint64_t)(q * GROUP), x);
  for (int g = 0; g < GROUP && q * GROUP + g < J->nblocks; g++) {
    int64_t first = (q * GROUP + g) * J->per;
    int cnt = J->n - first < J->per ? (int)(J->n - first) : J->per;
    if (J->f32) qkv_random_f32((float *)J->base + first, J->normal, x[g], cnt);
    else qkv_random_f64((double *)J->base + first, J->normal, x[g], cnt);
  }
}

static void group_row (void *J, int64_t q) { one_group(J, q); }

int qkv_cpu_random (qkv_tensor *out, qkv_dist dist, const uint32_t key[2],
                    uint64_t offset) {
  if (out->dtype != QKV_F32 && out->dtype != QKV_F64) return QKV_EDTYPE;
  if (dist != QKV_UNIFORM && dist != QKV_NORMAL) return QKV_EINTERNAL;
  job J = {key, offset, qkv_numel(out), 0, out->dtype == QKV_F32 ? 4 : 2,
           out->dtype == QKV_F32, dist == QKV_NORMAL, NULL};
  if (J.n <= 0) return QKV_OK;
  if (!qkv_is_contiguous(out)) return QKV_EINTERNAL;
  J.nblocks = (J.n + J.per - 1) / J.per;
  J.base = (char *)qkv_data(out);
  int64_t ngroups = (J.nblocks + GROUP - 1) / GROUP;
  if (J.n < QKV_CPU_PAR_MIN) {          /* no threads for a few */
    for (int64_t q = 0; q < ngroups; q++) one_group(&J, q);
    return QKV_OK;
  }
  return qkv_par_rows(ngroups, GROUP * J.per, group_row, &J);
}
