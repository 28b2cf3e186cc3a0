/*
** optim.c -- the optimizers' fused steps on the CPU: Adam (and AdamW) in one
** pass over a parameter, where qkv.optim's composed step took thirteen
** passes and as many temporaries (qkv_adam, core/qkv.h, says the formula;
** vm/cuda/optim.cu is the same on the GPU).
*/
#include <math.h>

#include "cpu.h"
#include "iter.h"
#include "parallel.h"

typedef struct {
  char *p, *m, *v, *vmax;
  const char *g;
  const qkv_adam_step *h;
  int f64;
} adam_job;

/* in T, in torch's order (lerp, mul and addcmul, sqrt / sqrt(bc2) + eps,
   addcdiv), vectorised: the amsgrad variant is a loop of its own */
#define ADAM_RANGE(name, T) \
static void name (const adam_job *J, int64_t lo, int64_t hi) { \
  T *p = (T *)J->p, *m = (T *)J->m, *v = (T *)J->v, *vx = (T *)J->vmax; \
  const T *g = (const T *)J->g; \
  const qkv_adam_step *h = J->h; \
  const T keep = (T)(1 - h->decay), w1 = (T)(1 - h->b1), b2 = (T)h->b2, w2 = (T)(1 - h->b2); \
  const T step = (T)(h->lr / h->bc1), root = (T)sqrt(h->bc2), eps = (T)h->eps; \
  if (vx) { \
    for (int64_t i = lo; i < hi; i++) { \
      T mi = m[i] + w1 * (g[i] - m[i]), vi = v[i] * b2 + w2 * g[i] * g[i]; \
      T vm = vx[i] > vi ? vx[i] : vi; \
      m[i] = mi, v[i] = vi, vx[i] = vm; \
      p[i] = p[i] * keep - step * (mi / (sqrt##T(vm) / root + eps)); \
    } \
    return; \
  } \
  QKV_SIMD for (int64_t i = lo; i < hi; i++) { \
    T mi = m[i] + w1 * (g[i] - m[i]), vi = v[i] * b2 + w2 * g[i] * g[i]; \
    m[i] = mi, v[i] = vi; \
    p[i] = p[i] * keep - step * (mi / (sqrt##T(vi) / root + eps)); \
  } \
}

#define sqrtfloat sqrtf
#define sqrtdouble sqrt
ADAM_RANGE(adam_f32, float)
ADAM_RANGE(adam_f64, double)

static int adam_chunk (void *ctx, int64_t lo, int64_t hi, int tid) {
  const adam_job *J = ctx;
  (void)tid;
  if (J->f64) adam_f64(J, lo, hi); else adam_f32(J, lo, hi);
  return qkv_interrupted ? QKV_EINTR : QKV_OK;
}

int qkv_cpu_adam (qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v,
                  qkv_tensor *vmax, const qkv_adam_step *h) {
  if (p->dtype != QKV_F32 && p->dtype != QKV_F64) return QKV_EDTYPE;
  adam_job J = {qkv_data(p), qkv_data(m), qkv_data(v), vmax ? qkv_data(vmax) : NULL,
                qkv_data(g), h, p->dtype == QKV_F64};
  int64_t n = qkv_numel(p);
  if (n < QKV_CPU_PAR_MIN) return adam_chunk(&J, 0, n, 0);
  return qkv_par_for(n, QKV_CPU_PAR_MIN / 2, adam_chunk, &J);
}
