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
** The rows and tables come from the list (vm/common/ops.h): each op x
** dtype its row takes is a row function stamped out by QKV_ROW_MAP1/2
** (iter.h) around its formula (vm/common/elementwise.h), and found
** through a table; a NULL entry is a dtype the op does not take.  Here are
** only the float32 primitives the CPU has of its own: vexp.h's exp, log
** and tanh, and the GELU below, which vectorise (libm's are scalar calls).
*/
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "iter.h"
#include "vexp.h"

#ifdef __clang__
/* a simd loop around a libm call (sin, pow, float64's exp) stays scalar,
   and so may sqrt's without -fno-math-errno, which clang reports */
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

/* the formulas' float32 primitives (vm/common/elementwise.h's hooks):
   float32's exp, sigmoid, silu, log and tanh on vexp.h's, which vectorise
   (within an ulp or so, as libm's expf, logf and tanhf, scalar calls: on
   1024 x 256 exp took 247 µs against torch's 23, tanh 4046 against 90),
   and GELU and its backward above; float64's on libm */
#define QKV_EXPF qkv_vexpf
#define QKV_LOGF qkv_vlogf
#define QKV_TANHF qkv_vtanhf
#define QKV_GELUF gelu1_f32
#define QKV_GELU_GRADF dgelu_f32
#include "../common/elementwise.h"
#include "../common/ops.h"

/* a row per dtype the op takes; the simd pragma is harmless around a
   formula that calls libm (the loop stays scalar, the same operations) */
#define OUT_SAME(T) T
#define OUT_BOOL(T) uint8_t
#define ROWS_FLOAT(N, name, R) \
  QKV_ROW_MAP##N(name##_f32, OUT_##R(float), float, QKV_EL##N(name, f32)) \
  QKV_ROW_MAP##N(name##_f64, OUT_##R(double), double, QKV_EL##N(name, f64))
#define ROWS_NUMBER(N, name, R) ROWS_FLOAT(N, name, R) \
  QKV_ROW_MAP##N(name##_i64, OUT_##R(int64_t), int64_t, QKV_EL##N(name, i64))
#define ROWS_ANY(N, name, R) ROWS_NUMBER(N, name, R) \
  QKV_ROW_MAP##N(name##_bool, OUT_##R(uint8_t), uint8_t, QKV_EL##N(name, bool))
#define QKV_EL1(name, T) qkv_el_##name##_##T(x)
#define QKV_EL2(name, T) qkv_el_##name##_##T(x, y)

#define ROWS1(NAME, name, takes, result, ...) ROWS_##takes(1, name, result)
#define ROWS2(NAME, name, takes, result, ...) ROWS_##takes(2, name, result)
QKV_BINARY_OPS(ROWS2)
QKV_UNARY_OPS(ROWS1)

/* indexed [op][dtype of the inputs] */
#define TABLE_FLOAT(name) { name##_f32, name##_f64, NULL, NULL }
#define TABLE_NUMBER(name) { name##_f32, name##_f64, name##_i64, NULL }
#define TABLE_ANY(name) { name##_f32, name##_f64, name##_i64, name##_bool }
#define ENTRY(NAME, name, takes, ...) [QKV_##NAME] = TABLE_##takes(name),

const qkv_iter_fn QKV_ROWS(binary)[QKV_NBINARY][QKV_NDTYPE] = { QKV_BINARY_OPS(ENTRY) };
const qkv_iter_fn QKV_ROWS(unary)[QKV_NUNARY][QKV_NDTYPE] = { QKV_UNARY_OPS(ENTRY) };
