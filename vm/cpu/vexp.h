/*
** vexp.h -- exp for float32 that vectorises: a scalar version any compiler
** can take, and an 8-lane AVX2/FMA one for kernels that check the CPU at run
** time (qkv_cpu_has_avx2) and compile their hot loop with QKV_AVX2.
**
** qkv_vexp16 is the AVX-512 version (QKV_AVX512, qkv_cpu_has_avx512).
**
** libm's expf is a scalar call, and softmax and attention take one exp per
** score.  All three compute 2^n * p(r) with n = round(x / ln 2)
** and |r| <= ln 2 / 2, p a degree-6 fit of e^r (error ~1e-8, well under
** half an ulp), so results are within about one ulp of expf for normal
** results.  x above ~88.72 gives +inf, -inf and x below ~-103.97 give 0,
** results between are graded into subnormals, NaN stays NaN.
**
** qkv_vtanhf and qkv_vlogf are float32 tanh and log in the scalar
** version's style, written for loops that gcc vectorises (elementwise).
*/
#ifndef QKV_CPU_VEXP_H
#define QKV_CPU_VEXP_H

#include <math.h>
#include <stdint.h>

/* the clamp keeps n within [-150, 128]; both ends still round correctly */
#define QKV_VEXP_HI 89.0f
#define QKV_VEXP_LO -104.0f
#define QKV_VEXP_LOG2E 1.44269504088896341f
/* ln 2 split so that n * hi is exact for |n| <= 256 */
#define QKV_VEXP_LN2HI 0.693145751953125f
#define QKV_VEXP_LN2LO 1.428606765330187e-6f
/* adding 1.5 * 2^23 rounds to an integer, left in the low mantissa bits */
#define QKV_VEXP_SHIFTER 12582912.0f
/* p(r) = 1 + r + r^2 (C2 + C3 r + ... + C6 r^4), Chebyshev fit on |r| <= ln2/2 */
#define QKV_VEXP_C6 0.00139261761199f
#define QKV_VEXP_C5 0.00836317307451f
#define QKV_VEXP_C4 0.0416665546621f
#define QKV_VEXP_C3 0.166665770256f
#define QKV_VEXP_C2 0.5f

/* through a union (defined in C11) rather than memcpy, which stops gcc
   from vectorising a loop that calls qkv_vexpf */
typedef union { float f; uint32_t u; } qkv_vexp_pun;

static inline float qkv_vexp_bits2f (uint32_t u) {
  qkv_vexp_pun p;
  p.u = u;
  return p.f;
}

static inline uint32_t qkv_vexp_f2bits (float f) {
  qkv_vexp_pun p;
  p.f = f;
  return p.u;
}

/*
** The scalar version, the same steps as the vector one.  2^n is applied as
** two factors 2^(n/2) 2^(n - n/2) so that each stays a normal float while the
** product may still round into a subnormal or overflow to inf.
*/
static inline float qkv_vexpf (float x) {
  /* at or below LO the result is 0, worked from x = 0: in a vectorised loop
     a lane whose product underflows costs a microcode assist (~150 cycles),
     and masked scores (-inf) are whole rows of such lanes */
  int keep = !(x <= QKV_VEXP_LO);            /* NaN: kept */
  x = keep ? x : 0.0f;
  x = x < QKV_VEXP_LO ? QKV_VEXP_LO : x;     /* NaN fails both tests */
  x = x > QKV_VEXP_HI ? QKV_VEXP_HI : x;
  float t = x * QKV_VEXP_LOG2E + QKV_VEXP_SHIFTER;
  int32_t n = (int32_t)(qkv_vexp_f2bits(t) - qkv_vexp_f2bits(QKV_VEXP_SHIFTER));
  float kf = t - QKV_VEXP_SHIFTER;
  float r = (x - kf * QKV_VEXP_LN2HI) - kf * QKV_VEXP_LN2LO;
  float p = QKV_VEXP_C6;
  p = p * r + QKV_VEXP_C5;
  p = p * r + QKV_VEXP_C4;
  p = p * r + QKV_VEXP_C3;
  p = p * r + QKV_VEXP_C2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t n1 = n / 2, n2 = n - n1;
  /* unsigned so that the garbage n of a NaN cannot overflow a shift */
  float s1 = qkv_vexp_bits2f(((uint32_t)n1 + 127u) << 23);
  float s2 = qkv_vexp_bits2f(((uint32_t)n2 + 127u) << 23);
  return keep ? p * s1 * s2 : 0.0f;
}

/*
** tanh on qkv_vexpf, branch-free so that it vectorises (libm's tanhf is a
** scalar call, 45x slower than torch's).  For |x| >= 0.625 tanh |x| is
** 1 - q, q = 2 / (e^2|x| + 1), which does not cancel (q <= 0.45), so e's
** error of an ulp or so stays about an ulp; past |x| ~ 9 q is below half
** an ulp of 1 and the result is 1 exactly, and e^2|x| = inf gives 1.
** Below 0.625 that form cancels (tanh 1e-3 would keep 1 - 1e-3 of its
** bits), so there tanh x = x + x z P(z), z = x^2, P a degree-4 minimax fit
** (Remez, weighted for tanh's relative error: 0.07 ulp).  Both are
** computed and one kept; the sign is x's, so -0 gives -0 and NaN stays NaN.
** Within 1.4 ulp of tanh (every 3rd float32 against float64, the worst
** near 0.63 where the forms meet; tests/core/test_math_elementwise.lua
** asserts 2).
*/
#define QKV_VTANH_SMALL 0.625f

static inline float qkv_vtanhf (float x) {
  float a = fabsf(x), z = x * x;
  float p = -5.704986863e-03f;
  p = p * z + 2.063908800e-02f;
  p = p * z - 5.373971537e-02f;
  p = p * z + 1.333144158e-01f;
  p = p * z - 3.333328068e-01f;
  float small = a + a * z * p;
  float big = 1.0f - 2.0f / (qkv_vexpf(2.0f * a) + 1.0f);
  float t = a < QKV_VTANH_SMALL ? small : big;    /* NaN fails: big, NaN */
  return qkv_vexp_bits2f(qkv_vexp_f2bits(t) | (qkv_vexp_f2bits(x) & 0x80000000u));
}

/*
** log, branch-free so that it vectorises (libm's logf is a scalar call):
** x = 2^k m with m in [sqrt(1/2), sqrt(2)) split off by integer arithmetic
** on the bits, log x = k ln 2 + log1p(f), f = m - 1 exact, log1p(f) =
** f - f^2/2 + f^3 P(f) with Cephes' logf polynomial (relative error
** 7.6e-8), and ln 2 split so that k ln2_hi is exact.  Subnormal x is
** scaled by 2^23 first.  log 1 = 0 exactly, log 0 = -inf, log x < 0 and
** log NaN = NaN, log inf = inf, put in by the selects at the end.  Within
** 0.83 ulp of log (every 3rd float32 against float64).
*/
static inline float qkv_vlogf (float x) {
  int sub = x < 0x1p-126f;
  float y = sub ? x * 0x1p23f : x;
  /* adding 1 - sqrt(1/2) to m's bits carries into the exponent at sqrt(2) */
  uint32_t u = qkv_vexp_f2bits(y) + (0x3f800000u - 0x3f3504f3u);
  float k = (float)(int32_t)(u >> 23) - (sub ? 150.0f : 127.0f);
  float f = qkv_vexp_bits2f((u & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
  float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float r = f * z * p + k * -2.12194440e-4f;      /* ln 2 - 0.693359375 */
  r = (f + (r - 0.5f * z)) + k * 0.693359375f;
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  r = x == INFINITY ? x : r;
  return x != x ? x : r;
}

#if defined(__x86_64__) || defined(__i386__)
#define QKV_VEXP_X86 1
#include <immintrin.h>

#define QKV_AVX2 __attribute__((target("avx2,fma")))

/* whether the QKV_AVX2 versions may run here */
static inline int qkv_cpu_has_avx2 (void) { return qkv_cpu_isa() >= QKV_ISA_AVX2; }

static inline QKV_AVX2 __m256 qkv_vexp8 (__m256 x) {
  /* lanes at or below LO give 0, and are worked as x = 0: a product that
     underflows costs a microcode assist of ~150 cycles, and masked scores
     (-inf) are whole lanes of it.  NaN compares unordered: kept. */
  __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(QKV_VEXP_LO), _CMP_NLE_UQ);
  x = _mm256_and_ps(x, keep);
  /* min/max return their second operand when one is NaN: x, so it survives */
  x = _mm256_max_ps(_mm256_set1_ps(QKV_VEXP_LO), x);
  x = _mm256_min_ps(_mm256_set1_ps(QKV_VEXP_HI), x);
  const __m256 shifter = _mm256_set1_ps(QKV_VEXP_SHIFTER);
  __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(QKV_VEXP_LOG2E), shifter);
  __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(shifter));
  __m256 kf = _mm256_sub_ps(t, shifter);
  __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(QKV_VEXP_LN2HI), x);
  r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(QKV_VEXP_LN2LO), r);
  __m256 p = _mm256_set1_ps(QKV_VEXP_C6);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QKV_VEXP_C5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QKV_VEXP_C4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QKV_VEXP_C3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QKV_VEXP_C2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  /* n / 2 rounded toward -inf; either split keeps both factors normal */
  __m256i n1 = _mm256_srai_epi32(n, 1);
  __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), keep);
}

#define QKV_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))

/* whether the QKV_AVX512 versions may run here */
static inline int qkv_cpu_has_avx512 (void) { return qkv_cpu_isa() >= QKV_ISA_AVX512; }

/* the first n of 16 lanes (none for n <= 0, all for n >= 16): a row's tail */
static inline __mmask16 qkv_lanes16 (int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
}

/*
** qkv_vexp8's steps on 16 lanes, but 2^n applied by vscalefps, which
** rounds p 2^n once: the same bits wherever the result is normal, and
** subnormals rounded once rather than twice.
*/
static inline QKV_AVX512 __m512 qkv_vexp16 (__m512 x) {
  /* as qkv_vexp8: lanes at or below LO are worked as 0 and give 0 */
  __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QKV_VEXP_LO), _CMP_NLE_UQ);
  x = _mm512_maskz_mov_ps(keep, x);
  x = _mm512_max_ps(_mm512_set1_ps(QKV_VEXP_LO), x);   /* NaN survives */
  x = _mm512_min_ps(_mm512_set1_ps(QKV_VEXP_HI), x);
  const __m512 shifter = _mm512_set1_ps(QKV_VEXP_SHIFTER);
  __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(QKV_VEXP_LOG2E), shifter);
  __m512 kf = _mm512_sub_ps(t, shifter);
  __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(QKV_VEXP_LN2HI), x);
  r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(QKV_VEXP_LN2LO), r);
  __m512 p = _mm512_set1_ps(QKV_VEXP_C6);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QKV_VEXP_C5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QKV_VEXP_C4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QKV_VEXP_C3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QKV_VEXP_C2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, kf);
}

/* a row's sum in double, 8 float lanes at a time: acc holds two vectors
   of 4 doubles (float lanes would lose ~1e-5 over a row of 70000, seen
   against the GPU's double sums); qkv_hsum8d gives their total */
static inline QKV_AVX2 void qkv_acc8d (__m256d acc[2], __m256 e) {
  acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

static inline QKV_AVX2 double qkv_hsum8d (const __m256d acc[2]) {
  __m256d v = _mm256_add_pd(acc[0], acc[1]);
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(s) + _mm_cvtsd_f64(_mm_unpackhi_pd(s, s));
}

/* the largest of the 8 lanes */
static inline QKV_AVX2 float qkv_hmax8 (__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* the largest of x[0..n), and in *nan whether any is NaN: the first pass
   of softmax and log_softmax over a float32 row */
static inline QKV_AVX2 float qkv_rowmax8 (const float *x, int64_t n, int *nan) {
  __m256 vmax = _mm256_set1_ps(-INFINITY), vnan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, v);
  }
  float max = qkv_hmax8(vmax);
  int isnan = _mm256_movemask_ps(vnan) != 0;
  for (; j < n; j++) {
    isnan |= x[j] != x[j];
    max = x[j] > max ? x[j] : max;
  }
  *nan = isnan;
  return max;
}

/*
** Subnormal floats flushed to zero (MXCSR's FTZ and DAZ) on this thread
** while a float32 attention kernel (or the bfloat16 tile kernel, whose
** masked probabilities underflow) runs: qkv_ftz_on(1) returns the state
** to hand qkv_ftz_off.  Softmax weights below 2^-126 (a score ~87 under
** its row's max) and the gradients they make are subnormal, and every
** instruction that reads or makes one took a microcode assist here: a
** 2-layer model's training step went from 52 to 120 ms once its attention
** had sharpened (bench/NOTES.md).  What changes is below 1.2e-38 only.
*/
static inline unsigned qkv_ftz_on (int on) {
  unsigned csr = _mm_getcsr();
  if (on) _mm_setcsr(csr | 0x8040u);
  return csr;
}
static inline void qkv_ftz_off (unsigned csr) { _mm_setcsr(csr); }
#else
static inline unsigned qkv_ftz_on (int on) { (void)on; return 0; }
static inline void qkv_ftz_off (unsigned csr) { (void)csr; }
#endif

#endif
