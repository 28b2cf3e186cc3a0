/*
** elementwise_rows.h -- the row functions of the binary and unary ops and
** their tables, compiled once per instruction set: elementwise.c (the
** baseline, SSE2 on x86-64), elementwise_avx2.c and elementwise_avx512.c,
** each defining QKV_ROWS(name) as name's table for its set, and
** elementwise.c picking one at run time (qkv_cpu_isa, cpu.h).  The sets
** compute the same IEEE operations in the same order, so the ops of one
** operation (add, mul, the comparisons, ...) give the same bits; the AVX2
** and AVX-512 builds fuse a * b + c into FMAs (GELU's polynomials: 40%
** faster), which differ from the baseline within float32's rounding
** (tests/backends/test_isa.lua checks both).
**
** Each op x dtype is a row function stamped out by QKV_ROW_MAP1/2 (iter.h)
** and found through a table; a NULL entry is a dtype the op does not take.
** int64 arithmetic wraps (it is done in uint64_t, where overflow is
** defined); maximum/minimum propagate NaN as PyTorch does.
*/
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "iter.h"
#include "vexp.h"
#include "../common/scalar.h"

#ifdef __clang__
/* sqrt sets errno unless -fno-math-errno, so its simd loop may stay scalar,
   which clang reports */
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/*
** The exact GELU, x * Phi(x), as nn.GELU() by default; Phi as erfc(-x/sqrt 2)/2
** rather than (1 + erf(x/sqrt 2))/2, which cancels to nothing for x below -3.
** float32's erfc is one that vectorises (libm's erfcf is a scalar call, and
** was a third of a BERT layer's time): erfc(a) = t exp(-a^2 + P(t)) for
** a >= 0, t = 1 / (1 + a/2), P the Chebyshev fit of Numerical Recipes'
** erfcc (relative error below 1.2e-7 for every a), erfc(-a) = 2 - erfc(a).
** a^2 is split as ah^2 + al (a + ah) with ah a's top 12 bits, so that ah^2
** is exact and the large part of the exponent is not rounded to float32's
** 1e-6 (relative) of 81 at a = 9; past a = 10 erfc is 0 in float32.
*/
static inline __attribute__((always_inline)) float erfc_f32 (float z) {
  float a = fabsf(z), t = 1.0f / (1.0f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  float ah = qkv_vexp_bits2f(qkv_vexp_f2bits(a) & 0xfffff000u), al = a - ah;
  float e = t * qkv_vexpf(-ah * ah) * qkv_vexpf(p - al * (a + ah));
  e = a < 10.0f ? e : 0.0f;                  /* NaN fails: 0, then 2 - 0... */
  e = a != a ? a : e;                        /* ...so NaN is put back */
  return z >= 0.0f ? e : 2.0f - e;
}

/* ---- binary ---- */

/* the x != x tests fold away for int64; written with | so the select has
   no branch and vectorises */
#define MAXOF(x, y) ((((x) > (y)) | ((x) != (x))) ? (x) : (y))
#define MINOF(x, y) ((((x) < (y)) | ((x) != (x))) ? (x) : (y))

#define FLOATS(name, EXPR) \
  QKV_ROW_MAP2(name##_f32, float, float, EXPR) \
  QKV_ROW_MAP2(name##_f64, double, double, EXPR)

FLOATS(add, x + y)
FLOATS(sub, x - y)
FLOATS(mul, x * y)
FLOATS(div, x / y)
FLOATS(max, MAXOF(x, y))
FLOATS(min, MINOF(x, y))
/*
** GELU's backward, y * (Phi(x) + x phi(x)) with phi(x) = e^(-x^2/2)/sqrt(2 pi),
** in one pass (the composed rule took ten).  x phi(x) is 0 once e^(-x^2/2)
** is (|x| > 14), which also keeps x = +-inf from giving inf * 0.
*/
static inline __attribute__((always_inline)) float dgelu_f32 (float x, float y) {
  float e = qkv_vexpf(x * x * -0.5f);
  float t = e == 0.0f ? 0.0f : x * e * 0.39894228f;
  return y * (0.5f * erfc_f32(x * -0.70710678f) + t);
}

static inline double dgelu_f64 (double x, double y) {
  double e = exp(x * x * -0.5);
  double t = e == 0.0 ? 0.0 : x * e * 0.39894228040143267794;
  return y * (0.5 * erfc(x * -0.70710678118654752440) + t);
}

QKV_ROW_MAP2(gelu_grad_f32, float, float, dgelu_f32(x, y))
QKV_ROW_CALL2(gelu_grad_f64, double, double, dgelu_f64(x, y))
QKV_ROW_CALL2(pow_f32, float, float, powf(x, y))
QKV_ROW_CALL2(pow_f64, double, double, pow(x, y))
QKV_ROW_MAP2(add_i64, int64_t, int64_t, QKV_WRAP(+, x, y))
QKV_ROW_MAP2(sub_i64, int64_t, int64_t, QKV_WRAP(-, x, y))
QKV_ROW_MAP2(mul_i64, int64_t, int64_t, QKV_WRAP(*, x, y))
QKV_ROW_CALL2(pow_i64, int64_t, int64_t, qkv_ipow(x, y))
QKV_ROW_MAP2(max_i64, int64_t, int64_t, MAXOF(x, y))
QKV_ROW_MAP2(min_i64, int64_t, int64_t, MINOF(x, y))

/* comparisons write bool (uint8_t 0/1) whatever the inputs are */
#define COMPARE(name, EXPR) \
  QKV_ROW_MAP2(name##_f32, uint8_t, float, (uint8_t)(EXPR)) \
  QKV_ROW_MAP2(name##_f64, uint8_t, double, (uint8_t)(EXPR)) \
  QKV_ROW_MAP2(name##_i64, uint8_t, int64_t, (uint8_t)(EXPR)) \
  QKV_ROW_MAP2(name##_bool, uint8_t, uint8_t, (uint8_t)(EXPR))

COMPARE(eq, x == y)
COMPARE(ne, x != y)
COMPARE(lt, x < y)
COMPARE(le, x <= y)
COMPARE(gt, x > y)
COMPARE(ge, x >= y)

#define ARITH(name) { name##_f32, name##_f64, name##_i64, NULL }
#define CMP(name) { name##_f32, name##_f64, name##_i64, name##_bool }

/* indexed [op][dtype of the inputs] */
const qkv_iter_fn QKV_ROWS(binary)[QKV_NBINARY][QKV_NDTYPE] = {
  [QKV_ADD] = ARITH(add), [QKV_SUB] = ARITH(sub), [QKV_MUL] = ARITH(mul),
  [QKV_DIV] = { div_f32, div_f64, NULL, NULL },  /* ops.c makes int / float */
  [QKV_POW] = ARITH(pow), [QKV_MAXIMUM] = ARITH(max), [QKV_MINIMUM] = ARITH(min),
  [QKV_GELU_GRAD] = { gelu_grad_f32, gelu_grad_f64, NULL, NULL },
  [QKV_EQ] = CMP(eq), [QKV_NE] = CMP(ne), [QKV_LT] = CMP(lt),
  [QKV_LE] = CMP(le), [QKV_GT] = CMP(gt), [QKV_GE] = CMP(ge),
};

/* ---- unary ---- */

/* MAP vectorises, CALL is for libm functions with no vector version */
#define UNARY(name, ROW, F32, F64) \
  ROW(name##_f32, float, float, F32) \
  ROW(name##_f64, double, double, F64)

UNARY(neg, QKV_ROW_MAP1, -x, -x)
/* float32's exp, sigmoid, silu, log and tanh on vexp.h's, which vectorise
   (within an ulp or so, as libm's expf, logf and tanhf, scalar calls: on
   1024 x 256 exp took 247 µs against torch's 23, tanh 4046 against 90);
   float64's on libm */
QKV_ROW_MAP1(exp_f32, float, float, qkv_vexpf(x))
QKV_ROW_CALL1(exp_f64, double, double, exp(x))
QKV_ROW_MAP1(log_f32, float, float, qkv_vlogf(x))
QKV_ROW_CALL1(log_f64, double, double, log(x))
UNARY(sqrt, QKV_ROW_MAP1, sqrtf(x), sqrt(x))   /* with -fno-math-errno */
UNARY(abs, QKV_ROW_MAP1, fabsf(x), fabs(x))
QKV_ROW_MAP1(tanh_f32, float, float, qkv_vtanhf(x))
QKV_ROW_CALL1(tanh_f64, double, double, tanh(x))
UNARY(gelu, QKV_ROW_MAP1, 0.5f * x * erfc_f32(x * -0.70710678f),
      0.5 * x * erfc(x * -0.70710678118654752440))
/* sigmoid and silu as 1 / (1 + e^-x): no overflow to NaN at either end */
QKV_ROW_MAP1(sigmoid_f32, float, float, 1.0f / (1.0f + qkv_vexpf(-x)))
QKV_ROW_CALL1(sigmoid_f64, double, double, 1.0 / (1.0 + exp(-x)))
QKV_ROW_MAP1(silu_f32, float, float, x / (1.0f + qkv_vexpf(-x)))
QKV_ROW_CALL1(silu_f64, double, double, x / (1.0 + exp(-x)))
/* NaN stays NaN, as PyTorch's relu */
UNARY(relu, QKV_ROW_MAP1, ((x > 0) | (x != x)) ? x : 0.0f, ((x > 0) | (x != x)) ? x : 0.0)
UNARY(sin, QKV_ROW_CALL1, sinf(x), sin(x))
UNARY(cos, QKV_ROW_CALL1, cosf(x), cos(x))
QKV_ROW_MAP1(relu_i64, int64_t, int64_t, x > 0 ? x : 0)
/* INT64_MIN negates to itself, as in two's complement */
QKV_ROW_MAP1(neg_i64, int64_t, int64_t, QKV_WRAP(-, 0, x))
QKV_ROW_MAP1(abs_i64, int64_t, int64_t, x < 0 ? QKV_WRAP(-, 0, x) : x)

#define FLOAT_ONLY(name) { name##_f32, name##_f64, NULL, NULL }

const qkv_iter_fn QKV_ROWS(unary)[QKV_NUNARY][QKV_NDTYPE] = {
  [QKV_NEG] = { neg_f32, neg_f64, neg_i64, NULL },
  [QKV_EXP] = FLOAT_ONLY(exp), [QKV_LOG] = FLOAT_ONLY(log),
  [QKV_SQRT] = FLOAT_ONLY(sqrt),
  [QKV_ABS] = { abs_f32, abs_f64, abs_i64, NULL },
  [QKV_TANH] = FLOAT_ONLY(tanh), [QKV_GELU] = FLOAT_ONLY(gelu),
  [QKV_SIGMOID] = FLOAT_ONLY(sigmoid), [QKV_SILU] = FLOAT_ONLY(silu),
  [QKV_RELU] = { relu_f32, relu_f64, relu_i64, NULL },
  [QKV_SIN] = FLOAT_ONLY(sin), [QKV_COS] = FLOAT_ONLY(cos),
};

