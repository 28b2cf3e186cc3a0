/*
** elementwise.h -- the element formulas of the ops of ops.h, once for both
** backends: qkv_el_<name>_<type>(x [, y]) for each dtype the op's row
** takes (f32, f64, i64, bool), which the CPU's rows (vm/cpu/
** elementwise_rows.h, built once per instruction set) and the CUDA
** functors (vm/cuda/elementwise.cu) call.  A comparison returns uint8_t
** (a bool element) whatever it compares.
**
** int64 arithmetic wraps (QKV_WRAP, scalar.h); maximum and minimum pick x
** where x > y or x is NaN, so that NaN propagates as in PyTorch; relu keeps
** NaN and gives +0 for -0; sigmoid and silu are 1 / (1 + e^-x), which
** overflows to no NaN at either end.
**
** A float32 formula built on one of these primitives takes it from a hook
** that a backend may define, before it includes this header, as its own
** function of the same value:
**   QKV_EXPF, QKV_LOGF, QKV_TANHF   the CPU's qkv_vexpf, qkv_vlogf,
**                                   qkv_vtanhf (vm/cpu/vexp.h), which
**                                   vectorise where libm's are scalar calls
**   QKV_GELUF, QKV_GELU_GRADF       the CPU's GELU and its backward on one
**                                   exp and a polynomial (elementwise_rows.h)
**   QKV_POWF                        CUDA's pow in double rounded once: its
**                                   powf is a few ulps off glibc's
** and the C library's (and the erfc forms below) otherwise.  Both
** backends' float64 formulas are the same code.
*/
#ifndef QKV_COMMON_ELEMENTWISE_H
#define QKV_COMMON_ELEMENTWISE_H

#include "common.h"
#include "scalar.h"

#ifndef QKV_EXPF
#define QKV_EXPF expf
#endif
#ifndef QKV_LOGF
#define QKV_LOGF logf
#endif
#ifndef QKV_TANHF
#define QKV_TANHF tanhf
#endif
#ifndef QKV_POWF
#define QKV_POWF powf
#endif
#ifndef QKV_GELUF
#define QKV_GELUF qkv_el_gelu_erfc_f32
#endif
#ifndef QKV_GELU_GRADF
#define QKV_GELU_GRADF qkv_el_gelu_grad_erfc_f32
#endif

#define QKV_EL1_(name, sfx, T, EXPR) \
  static inline QKV_HD T qkv_el_##name##_##sfx (T x) { return EXPR; }
#define QKV_EL2_(name, sfx, T, R, EXPR) \
  static inline QKV_HD R qkv_el_##name##_##sfx (T x, T y) { return EXPR; }
/* one expression for float32 and float64 */
#define QKV_EL_FLOATS1_(name, EXPR) \
  QKV_EL1_(name, f32, float, EXPR) QKV_EL1_(name, f64, double, EXPR)
#define QKV_EL_FLOATS2_(name, EXPR) \
  QKV_EL2_(name, f32, float, float, EXPR) QKV_EL2_(name, f64, double, double, EXPR)
/* x OP y as a bool element, in every dtype a comparison takes */
#define QKV_EL_COMPARE_(name, OP) \
  QKV_EL2_(name, f32, float, uint8_t, (uint8_t)(x OP y)) \
  QKV_EL2_(name, f64, double, uint8_t, (uint8_t)(x OP y)) \
  QKV_EL2_(name, i64, int64_t, uint8_t, (uint8_t)(x OP y)) \
  QKV_EL2_(name, bool, uint8_t, uint8_t, (uint8_t)(x OP y))

/* ---- GELU, the exact one: x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 ---- */

/* erfc in double, rounded once (CUDA's erfcf may be 4 ulps off); erfc
   has no cancellation below x = -3, where 1 + erf(x / sqrt 2) has */
static inline QKV_HD float qkv_el_gelu_erfc_f32 (float x) {
  return 0.5f * x * (float)erfc((double)(x * -0.70710678f));
}
static inline QKV_HD double qkv_el_gelu_f64 (double x) {
  return 0.5 * x * erfc(x * -0.70710678118654752440);
}
static inline QKV_HD float qkv_el_gelu_f32 (float x) { return QKV_GELUF(x); }

/* GELU's backward: y (Phi(x) + x phi(x)), phi(x) = e^(-x^2/2) / sqrt(2 pi);
   x phi(x) is 0 once e^(-x^2/2) is, which keeps +-inf from giving inf * 0 */
static inline QKV_HD float qkv_el_gelu_grad_erfc_f32 (float x, float y) {
  float e = expf(x * x * -0.5f);
  float t = e == 0.0f ? 0.0f : x * e * 0.39894228f;
  return y * (0.5f * erfcf(x * -0.70710678f) + t);
}
static inline QKV_HD double qkv_el_gelu_grad_f64 (double x, double y) {
  double e = exp(x * x * -0.5);
  double t = e == 0.0 ? 0.0 : x * e * 0.39894228040143267794;
  return y * (0.5 * erfc(x * -0.70710678118654752440) + t);
}
static inline QKV_HD float qkv_el_gelu_grad_f32 (float x, float y) {
  return QKV_GELU_GRADF(x, y);
}

/* ---- binary ---- */

QKV_EL_FLOATS2_(add, x + y)
QKV_EL2_(add, i64, int64_t, int64_t, QKV_WRAP(+, x, y))
QKV_EL_FLOATS2_(sub, x - y)
QKV_EL2_(sub, i64, int64_t, int64_t, QKV_WRAP(-, x, y))
QKV_EL_FLOATS2_(mul, x * y)
QKV_EL2_(mul, i64, int64_t, int64_t, QKV_WRAP(*, x, y))
QKV_EL_FLOATS2_(div, x / y)
QKV_EL2_(pow, f32, float, float, QKV_POWF(x, y))
QKV_EL2_(pow, f64, double, double, pow(x, y))
QKV_EL2_(pow, i64, int64_t, int64_t, qkv_ipow(x, y))
/* written with | so that the select has no branch and vectorises */
QKV_EL_FLOATS2_(maximum, ((x > y) | (x != x)) ? x : y)
QKV_EL2_(maximum, i64, int64_t, int64_t, x > y ? x : y)
QKV_EL_FLOATS2_(minimum, ((x < y) | (x != x)) ? x : y)
QKV_EL2_(minimum, i64, int64_t, int64_t, x < y ? x : y)

/* log(e^x + e^y) as max + log1p(e^-|x - y|), which neither overflows nor
   loses the smaller term; x == y (two infinities of one sign too, whose
   difference is NaN) is max + log 2; NaN gives NaN.  libm's functions in
   float32 as well: the same bits under every instruction set */
static inline QKV_HD float qkv_el_logaddexp_f32 (float x, float y) {
  float m = x > y ? x : y, d = x == y ? 0.0f : -fabsf(x - y);
  return m + log1pf(expf(d));
}
static inline QKV_HD double qkv_el_logaddexp_f64 (double x, double y) {
  double m = x > y ? x : y, d = x == y ? 0.0 : -fabs(x - y);
  return m + log1p(exp(d));
}

QKV_EL_COMPARE_(eq, ==)
QKV_EL_COMPARE_(ne, !=)
QKV_EL_COMPARE_(lt, <)
QKV_EL_COMPARE_(le, <=)
QKV_EL_COMPARE_(gt, >)
QKV_EL_COMPARE_(ge, >=)

/* ---- unary ---- */

QKV_EL_FLOATS1_(neg, -x)
/* INT64_MIN negates to itself, as in two's complement */
QKV_EL1_(neg, i64, int64_t, QKV_WRAP(-, 0, x))
QKV_EL1_(exp, f32, float, QKV_EXPF(x))
QKV_EL1_(exp, f64, double, exp(x))
QKV_EL1_(log, f32, float, QKV_LOGF(x))
QKV_EL1_(log, f64, double, log(x))
QKV_EL1_(sqrt, f32, float, sqrtf(x))
QKV_EL1_(sqrt, f64, double, sqrt(x))
QKV_EL1_(abs, f32, float, fabsf(x))
QKV_EL1_(abs, f64, double, fabs(x))
QKV_EL1_(abs, i64, int64_t, x < 0 ? QKV_WRAP(-, 0, x) : x)
QKV_EL1_(tanh, f32, float, QKV_TANHF(x))
QKV_EL1_(tanh, f64, double, tanh(x))
QKV_EL1_(sigmoid, f32, float, 1.0f / (1.0f + QKV_EXPF(-x)))
QKV_EL1_(sigmoid, f64, double, 1.0 / (1.0 + exp(-x)))
QKV_EL1_(relu, f32, float, ((x > 0) | (x != x)) ? x : 0.0f)
QKV_EL1_(relu, f64, double, ((x > 0) | (x != x)) ? x : 0.0)
QKV_EL1_(relu, i64, int64_t, x > 0 ? x : 0)
QKV_EL1_(silu, f32, float, x / (1.0f + QKV_EXPF(-x)))
QKV_EL1_(silu, f64, double, x / (1.0 + exp(-x)))
QKV_EL1_(sin, f32, float, sinf(x))
QKV_EL1_(sin, f64, double, sin(x))
QKV_EL1_(cos, f32, float, cosf(x))
QKV_EL1_(cos, f64, double, cos(x))

#endif
