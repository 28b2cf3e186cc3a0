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
** The exact GELU, x Phi(x), as nn.GELU() by default, in float32 on one
** exponential: with u = |x|, phi(x) = e^(-x^2/2) / sqrt(2 pi) and
** Phi(-u) = phi(u) m(u), m the Mills ratio, Phi(x) = 1 - Phi(-x) for x > 0.
** (PyTorch's (1 + erf(x/sqrt 2))/2 cancels to nothing below x = -3, and
** libm's erfcf is a scalar call, once a third of a BERT layer's time.)
**
** e^(-x^2/2) takes qkv_vexpf's steps, but the reduced argument
** r = -x^2/2 - n ln 2 is formed from x itself: x^2/2 reaches 106, and
** rounded to float32 it would be off by up to 4e-6, and e^ with it (the
** form before this one rounded x/sqrt 2 to float32 and was off by 1.2e-5 at
** x = -13).  With an FMA, fmaf gives -x^2/2 - n ln2_hi rounded once;
** without (the baseline build) x is split as xh + xl, xh its top 12 bits,
** so that xh^2 is exact.  The polynomial is a degree-6 fit of
** e^r / sqrt(2 pi) on |r| <= ln2/2 (2.8e-8 with its float32 coefficients),
** so that the result is phi(x) itself, and 2^n is applied as 2^(n + 64)
** here and 2^-64 last, so that a result past the normals is rounded once.
**
** m(u) = P(u) / (u P(u) + Q(u)), P of degree 4, Q of degree 3, a minimax
** fit on [0, 13.25] (where Phi(-u) is normal) with float32 coefficients:
** 4.1e-8, and 7.4e-8 on to 14.6.  The form has m's 1/u tail built in, and
** P's rounding, which grows with u, cancels between the two.  One division,
** as the erfc it replaces (t = 1/(1 + a/2)), but one exp rather than two.
**
** At or below GELU_LO both gelu and gelu' round to 0 (they are below half
** the smallest subnormal); from GELU_HI on Phi and gelu' round to 1.  Lanes
** there are worked from x = 0 and masked, so that none of their products
** underflows (a microcode assist, ~150 cycles a lane).  NaN is worked as it
** is and gives NaN.
**
** Against float64 (libm's erfc) on every 7th float32 in [-20, 20], in each
** of the three builds: gelu within 3.4e-7 of its value (4.7 ulp), and
** within 2.7 of the smallest subnormal where the result is one.
*/
#define GELU_LO -14.6f
#define GELU_HI 6.0f

/* m(|x|), and in *phi64 phi(x) 2^64 */
static inline __attribute__((always_inline)) float gelu_mills (float x, float *phi64) {
  float u = fabsf(x);
#ifdef __FMA__
  float mh = -0.5f * x;                      /* exact */
  float t = mh * x * QKV_VEXP_LOG2E + QKV_VEXP_SHIFTER;
  float kf = t - QKV_VEXP_SHIFTER;
  /* kf ln2_hi is exact (|kf| <= 154) */
  float r = fmaf(mh, x, kf * -QKV_VEXP_LN2HI) - kf * QKV_VEXP_LN2LO;
#else
  float xh = qkv_vexp_bits2f(qkv_vexp_f2bits(x) & 0xfffff000u), xl = x - xh;
  float hi = -0.5f * xh * xh, lo = -0.5f * xl * (x + xh);   /* hi exact */
  float t = (hi + lo) * QKV_VEXP_LOG2E + QKV_VEXP_SHIFTER;
  float kf = t - QKV_VEXP_SHIFTER;
  /* hi - kf ln2_hi is exact: below 1 and on a grid of 2^-23 (of 2^-25 for
     |x| < 1, where it is below 0.35), kf ln2_hi on one of 2^-16 */
  float r = (hi - kf * QKV_VEXP_LN2HI) + (lo - kf * QKV_VEXP_LN2LO);
#endif
  float p = 5.520075792e-4f;
  p = p * r + 3.341088304e-3f;
  p = p * r + 1.662320830e-2f;
  p = p * r + 6.648934633e-2f;
  p = p * r + 1.994709820e-1f;
  p = p * r + 3.989422917e-1f;
  p = p * r + 3.989422917e-1f;
  /* t holds n in its low bits: 2^(n + 64), normal for n >= -190 */
  *phi64 = p * qkv_vexp_bits2f((qkv_vexp_f2bits(t) + 191u) << 23);
  float P = 1.136326697e-2f;
  P = P * u + 1.011786163e-1f;
  P = P * u + 4.233830571e-1f;
  P = P * u + 9.494936466e-1f;
  P = P * u + 9.980244637e-1f;
  float Q = 1.135278121e-2f;
  Q = Q * u + 1.015566066e-1f;
  Q = Q * u + 3.949259520e-1f;
  Q = Q * u + 7.963082790e-1f;
  return P / (u * P + Q);
}

/*
** x Phi(-|x|) is the result for x <= 0 and x - x Phi(-x) for x > 0 (-0
** gives -0).  Outside (GELU_LO, GELU_HI) the product is 0: -0 below, x
** above, with x capped so that +inf gives inf - 0 and -inf gives -inf * 0 =
** NaN, as PyTorch's.
*/
static inline __attribute__((always_inline)) float gelu1_f32 (float x) {
  int keep = !(x <= GELU_LO) & !(x >= GELU_HI);       /* NaN: kept */
  float phi, m = gelu_mills(keep ? x : 0.0f, &phi);
  float q = qkv_vexp_bits2f(qkv_vexp_f2bits(m * phi) & (keep ? 0xffffffffu : 0u));
  float xq = (x < GELU_HI ? x : GELU_HI) * q * 0x1p-64f;
  return x <= 0.0f ? xq : x - xq;
}

/*
** GELU's backward, y (Phi(x) + x phi(x)), in one pass (the composed rule
** took ten) on gelu's one exp (the erfc form took three): phi (m + x) for
** x < 0 and 1 + phi (x - m) for x >= 0, 2^-64 applied last (past the
** normals, one rounding).  Outside (GELU_LO, GELU_HI) phi is masked to 0,
** which gives 0 below and 1 above (+-inf included); NaN is worked as it is.
** Measured as gelu: within 3.7e-7 of |Phi(x)| + |x phi(x)|, which is its
** size but near x = -0.75, where the two cancel; within 1.6 of the smallest
** subnormal where the result is one (the erfc form: 4.1e-6 and 34).
*/
static inline __attribute__((always_inline)) float dgelu_f32 (float x, float y) {
  int keep = !(x <= GELU_LO) & !(x >= GELU_HI);       /* NaN: kept */
  float x0 = keep ? x : 0.0f, phi, m = gelu_mills(x0, &phi);
  phi = qkv_vexp_bits2f(qkv_vexp_f2bits(phi) & (keep ? 0xffffffffu : 0u));
  float s = (x0 + (x < 0.0f ? m : -m)) * phi * 0x1p-64f;
  return y * (x < 0.0f ? s : 1.0f + s);
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
/* GELU's backward in float64, on libm (float32's is above, by gelu's): x phi(x)
   is 0 once e^(-x^2/2) is (|x| > 38.6), which keeps +-inf from giving inf * 0 */
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
UNARY(gelu, QKV_ROW_MAP1, gelu1_f32(x), 0.5 * x * erfc(x * -0.70710678118654752440))
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

