/*
** copy.c -- CPU copy with dtype conversion, and fill.
**
** Conversions: to bool is x != 0 (NaN is true); float to int64 or int32
** truncates toward zero, and a NaN, an infinity or a value whose truncation
** the int cannot hold makes the copy return QKV_ERANGE (every element is
** still written, 0 in place of the bad ones, so that no conversion is
** undefined); int64 to int32 wraps (C's cast); to float16 and bfloat16
** through float32, rounding to nearest even (half.h), but a half into its
** own dtype, its bits; everything else is C's conversion.
*/
#include <string.h>
#include "cpu.h"
#include "iter.h"
#include "parallel.h"
#include "vexp.h"
#include "../common/scalar.h"
#include "../core/half.h"

/*
** A float into an int: v (the element's value as a T, a float for the
** halves) is converted when LOX < v < HIX, the bounds exclusive and exact
** in T (so that NaN fails both), else 0 is stored and the row tells, once.
** The check rides in the conversion's loop, so the copy stays one pass.
** BLEND selects without a branch, vectorised with an or-reduction: float32
** into int32, which SSE2 converts four at a time.  Elsewhere there is no
** packed conversion (int64 needs AVX-512) and BRANCH's branch, always taken
** the same way, is the faster (16M float64 into int64: 73 ms, blended 110).
*/
#ifdef QKV_OMP_SIMD
#define SIMD_OR _Pragma("omp simd reduction(|:bad)")
#else
#define SIMD_OR
#endif

#define CHECKED(dst, v, TO, T, LOX, HIX) \
  if (v > (T)(LOX) && v < (T)(HIX)) dst = (TO)v; \
  else dst = 0, bad = 1;

#define BRANCH(o, a, n, TO, T, V, LOX, HIX) \
  for (int64_t i = 0; i < n; i++) { \
    T v = V(a[i]); \
    CHECKED(o[i], v, TO, T, LOX, HIX) \
  }
#define BLEND(o, a, n, TO, T, V, LOX, HIX) \
  SIMD_OR for (int64_t i = 0; i < n; i++) { \
    T v = V(a[i]); \
    int ok = v > (T)(LOX) && v < (T)(HIX); \
    bad |= !ok; \
    o[i] = (TO)(ok ? v : 0); \
  }

/* rows run concurrently: each tells of a bad value with one atomic store */
static void tell_range (void *ctx) {
  __atomic_store_n((int *)ctx, 1, __ATOMIC_RELAXED);
}

/* LOOP (BRANCH or BLEND) runs the contiguous case */
#define TO_INT_ROW(name, TO, TI, T, V, LOX, HIX, LOOP) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    TO *o = (TO *)p[0]; \
    const TI *a = (const TI *)p[1]; \
    int bad = 0; \
    if (s[0] == QKV_CPU_SZ(TO) && s[1] == QKV_CPU_SZ(TI)) { \
      LOOP(o, a, n, TO, T, V, LOX, HIX) \
    } else { \
      const int64_t so = s[0], sa = s[1]; \
      char *po = p[0], *pa = p[1]; \
      for (int64_t i = 0; i < n; i++, po += so, pa += sa) { \
        T v = V(*(const TI *)pa); \
        CHECKED(*(TO *)po, v, TO, T, LOX, HIX) \
      } \
    } \
    if (bad) tell_range(ctx); \
  }

/*
** One row function per (dst, src) pair; V(x) is the source element's value
** (a float for the halves).  ROW is MAP (vectorised) for the plain types,
** CALL where a conversion function is called.
*/
#define COPY_WIDE(src, TI, V, ROW) \
  ROW(copy_f32_##src, float, TI, (float)V(x)) \
  ROW(copy_f64_##src, double, TI, (double)V(x)) \
  ROW(copy_bool_##src, uint8_t, TI, (uint8_t)(V(x) != 0))
#define COPY_FROM(src, TI, V, ROW) \
  COPY_WIDE(src, TI, V, ROW) \
  QKV_ROW_CALL1(copy_f16_##src, uint16_t, TI, qkv_f2h((float)V(x))) \
  QKV_ROW_CALL1(copy_bf16_##src, uint16_t, TI, qkv_f2bf((float)V(x)))

/* an int or bool source into the ints: C's casts */
#define INT_TO_INT(src, TI) \
  QKV_ROW_MAP1(copy_i64_##src, int64_t, TI, (int64_t)x) \
  QKV_ROW_MAP1(copy_i32_##src, int32_t, TI, (int32_t)x)

/* a float source into the ints, checked; the bounds are the values of T
   just outside each int's range of truncations (2^31 and 2^63 are exact;
   a double holds -2^31 - 1, a float's and a double's neighbours of -2^63
   and a float's of -2^31 are the next values below).  LOOP32 runs into
   int32 (BLEND for float32) */
#define FLOAT_TO_INT(src, TI, T, V, LOOP32, LO64, LO32) \
  TO_INT_ROW(copy_i64_##src, int64_t, TI, T, V, LO64, 0x1p63, BRANCH) \
  TO_INT_ROW(copy_i32_##src, int32_t, TI, T, V, LO32, 0x1p31, LOOP32)

#define SAME(x) (x)
#define LO64_F (-0x1.000002p63f)
#define LO32_F (-0x1.000002p31f)
COPY_FROM(f32, float, SAME, QKV_ROW_MAP1)
COPY_FROM(f64, double, SAME, QKV_ROW_MAP1)
COPY_FROM(i64, int64_t, SAME, QKV_ROW_MAP1)
COPY_FROM(bool, uint8_t, SAME, QKV_ROW_MAP1)
COPY_FROM(i32, int32_t, SAME, QKV_ROW_MAP1)
COPY_WIDE(f16, uint16_t, qkv_h2f, QKV_ROW_CALL1)
COPY_WIDE(bf16, uint16_t, qkv_bf2f, QKV_ROW_CALL1)
QKV_ROW_CALL1(copy_bf16_f16, uint16_t, uint16_t, qkv_f2bf(qkv_h2f(x)))
QKV_ROW_CALL1(copy_f16_bf16, uint16_t, uint16_t, qkv_f2h(qkv_bf2f(x)))
/* a half into its own dtype: the bits, a NaN's payload and quiet bit
   included (a copy is no arithmetic: docs/formats.md promises bit-exact
   round trips, and :contiguous() or a save of a transposed view quieted a
   signalling NaN when this went as through float32 and back); one integer
   loop (two conversion calls an element were 3% of a bfloat16 autocast
   training step: a reshape's or a transposed view's copy) */
QKV_ROW_MAP1(copy_bf16_bf16, uint16_t, uint16_t, x)
QKV_ROW_MAP1(copy_f16_f16, uint16_t, uint16_t, x)
INT_TO_INT(i64, int64_t)
INT_TO_INT(bool, uint8_t)
INT_TO_INT(i32, int32_t)
FLOAT_TO_INT(f32, float, float, SAME, BLEND, LO64_F, LO32_F)
FLOAT_TO_INT(f64, double, double, SAME, BRANCH, -0x1.0000000000001p63, -2147483649.0)
FLOAT_TO_INT(f16, uint16_t, float, qkv_h2f, BRANCH, LO64_F, LO32_F)
FLOAT_TO_INT(bf16, uint16_t, float, qkv_bf2f, BRANCH, LO64_F, LO32_F)

#define COPY_ROWS(dst) \
  { copy_##dst##_f32, copy_##dst##_f64, copy_##dst##_i64, copy_##dst##_bool, \
    copy_##dst##_i32, copy_##dst##_f16, copy_##dst##_bf16 }

/* indexed [dst dtype][src dtype] */
static const qkv_iter_fn copy_rows[QKV_NDTYPE][QKV_NDTYPE] = {
  COPY_ROWS(f32), COPY_ROWS(f64), COPY_ROWS(i64), COPY_ROWS(bool), COPY_ROWS(i32),
  COPY_ROWS(f16), COPY_ROWS(bf16)
};

/*
** float32 to and from bfloat16 over contiguous runs, 16 (AVX-512) or 8
** (AVX2) at a time with integer ops, the same bits as half.h's qkv_f2bf
** (round to nearest even on the bits, subnormals kept, a NaN quieted) and
** qkv_bf2f: the rows above call a function per element, 4-9x slower
** (384 x 1536: 174 -> 33 us and 79 -> 17 us), which bfloat16 autocast's
** casts made a third of MiniLM's time (bench/NOTES.md).
*/
#ifdef QKV_VEXP_X86
static QKV_AVX512 void to_bf16_512 (int64_t n, uint16_t *o, const float *a) {
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i x = _mm512_loadu_si512(a + i), hi = _mm512_srli_epi32(x, 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs), inf);
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(half, _mm512_and_si512(hi, one)));
    r = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; i++) o[i] = qkv_f2bf(a[i]);
}

/* rows of n bfloat16 (rs elements apart) into the dense float32 rows at
   o: a tile of a head's short rows, with no call a row and each row's
   tail one masked vector */
static QKV_AVX512 void from_bf16_tile512 (int64_t rows, int64_t n, float *o, const uint16_t *a,
                                          int64_t rs) {
  __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
  for (int64_t r = 0; r < rows; r++, o += n, a += rs) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(a + i)));
      _mm512_storeu_si512(o + i, _mm512_slli_epi32(h, 16));
    }
    if (tail) {
      __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, a + i));
      _mm512_mask_storeu_epi32(o + i, tail, _mm512_slli_epi32(h, 16));
    }
  }
}

/*
** float32 to and from float16 over contiguous runs, 16 at a time on
** AVX-512 (vcvtps2ph, vcvtph2ps): the bits of half.h's qkv_f2h and
** qkv_h2f, compared over every float32 and every half with MXCSR's FTZ and
** DAZ off and on, but for a signalling NaN, which vcvtph2ps makes quiet
** and qkv_h2f keeps: those lanes are put back from the bits.  The scalar
** calls took 6x bfloat16's time (GELU on float16: 680 against 104 us).
*/
static QKV_AVX512 void to_f16_512 (int64_t n, uint16_t *o, const float *a) {
  const int r = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtps_ph(_mm512_loadu_ps(a + i), r));
  if (i < n) {
    __mmask16 k = qkv_lanes16(n - i);
    _mm256_mask_storeu_epi16(o + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, a + i), r));
  }
}

static inline QKV_AVX512 __m512 h2f_512 (__m256i h) {
  __m512i x = _mm512_cvtepu16_epi32(h);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fff)),
                                          _mm512_set1_epi32(0x7c00));
  __m512i bits = _mm512_or_si512(
      _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x8000)), 16),
      _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                      _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x3ff)), 13)));
  return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_castsi512_ps(bits));
}

/* rows of n float16 (rs elements apart) into dense float32 rows at o, as
   from_bf16_tile512 */
static QKV_AVX512 void from_f16_tile512 (int64_t rows, int64_t n, float *o, const uint16_t *a,
                                         int64_t rs) {
  __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
  for (int64_t r = 0; r < rows; r++, o += n, a += rs) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(o + i, h2f_512(_mm256_loadu_si256((const __m256i *)(a + i))));
    if (tail) _mm512_mask_storeu_ps(o + i, tail, h2f_512(_mm256_maskz_loadu_epi16(tail, a + i)));
  }
}

/* the same 8 at a time with F16C, which every CPU with AVX2 has (isa.c
   asks for it with AVX2) */
#define QKV_F16C __attribute__((target("avx2,fma,f16c")))

static QKV_F16C void to_f16_256 (int64_t n, uint16_t *o, const float *a) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(o + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(a + i),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++) o[i] = qkv_f2h(a[i]);
}

static QKV_F16C void from_f16_256 (int64_t rows, int64_t n, float *o, const uint16_t *a,
                                   int64_t rs) {
  const __m256i abs = _mm256_set1_epi32(0x7fff), inf = _mm256_set1_epi32(0x7c00);
  for (int64_t r = 0; r < rows; r++, o += n, a += rs) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128((const __m128i *)(a + i));
      __m256i x = _mm256_cvtepu16_epi32(h);
      __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
      __m256i bits = _mm256_or_si256(
          _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16),
          _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                          _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3ff)), 13)));
      __m256 f = _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(bits),
                                  _mm256_castsi256_ps(nan));
      _mm256_storeu_ps(o + i, f);
    }
    for (; i < n; i++) o[i] = qkv_h2f(a[i]);
  }
}

static QKV_AVX2 void to_bf16_256 (int64_t n, uint16_t *o, const float *a) {
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(a + i)), hi = _mm256_srli_epi32(x, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
    __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(half, _mm256_and_si256(hi, one)));
    r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_or_si256(hi, quiet), nan);
    /* 16-bit values: packus keeps them; the lanes' halves brought together */
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)(o + i), _mm256_castsi256_si128(r));
  }
  for (; i < n; i++) o[i] = qkv_f2bf(a[i]);
}

static QKV_AVX2 void from_bf16_256 (int64_t n, float *o, const uint16_t *a) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
    _mm256_storeu_si256((__m256i *)(o + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; i++) o[i] = qkv_bf2f(a[i]);
}
#endif

void qkv_cpu_to_bf16 (int64_t n, uint16_t *o, const float *a) {
#ifdef QKV_VEXP_X86
  if (qkv_cpu_has_avx2()) {
    (qkv_cpu_has_avx512() ? to_bf16_512 : to_bf16_256)(n, o, a);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) o[i] = qkv_f2bf(a[i]);
}

static void to_bf16_row (int64_t n, char **p, const int64_t *s, void *ctx) {
  if (s[0] == 2 && s[1] == 4) qkv_cpu_to_bf16(n, (uint16_t *)p[0], (const float *)p[1]);
  else copy_bf16_f32(n, p, s, ctx);
}

static void from_bf16_row (int64_t n, char **p, const int64_t *s, void *ctx) {
#ifdef QKV_VEXP_X86
  if (s[0] == 4 && s[1] == 2 && qkv_cpu_has_avx512()) {
    from_bf16_tile512(1, n, (float *)p[0], (const uint16_t *)p[1], n);
    return;
  }
  if (s[0] == 4 && s[1] == 2 && qkv_cpu_has_avx2()) {
    from_bf16_256(n, (float *)p[0], (const uint16_t *)p[1]);
    return;
  }
#endif
  copy_f32_bf16(n, p, s, ctx);
}

static void to_f16_row (int64_t n, char **p, const int64_t *s, void *ctx) {
#ifdef QKV_VEXP_X86
  if (s[0] == 2 && s[1] == 4 && qkv_cpu_has_avx2()) {
    (qkv_cpu_has_avx512() ? to_f16_512 : to_f16_256)(n, (uint16_t *)p[0], (const float *)p[1]);
    return;
  }
#endif
  copy_f16_f32(n, p, s, ctx);
}

static void from_f16_row (int64_t n, char **p, const int64_t *s, void *ctx) {
#ifdef QKV_VEXP_X86
  if (s[0] == 4 && s[1] == 2 && qkv_cpu_has_avx2()) {
    (qkv_cpu_has_avx512() ? from_f16_tile512 : from_f16_256)(1, n, (float *)p[0],
                                                             (const uint16_t *)p[1], n);
    return;
  }
#endif
  copy_f32_f16(n, p, s, ctx);
}

/*
** A copy within one dtype whose rows (after the iterator merged what it
** could) are short runs contiguous on both sides, as a transposed view of
** attention's heads made contiguous (runs of 16 floats): the rows are
** taken as elements of `width` bytes, so that one row of the iterator
** moves many of them and its per-row cost (~7 ns a row of 16) is paid that
** much less often.  Threads take runs of blocks as the iterator would.
*/
#define BLOCK_MAX 256                 /* bytes: longer runs gain nothing */

static void copy_blocks(int64_t n, char **p, const int64_t *s, void *ctx) {
  size_t w = *(const size_t *)ctx;
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], w);
}

typedef struct { const qkv_iter *it; size_t width; } blocks_job;

static int blocks_chunk(void *p, int64_t lo, int64_t hi, int tid) {
  blocks_job *B = p;
  (void)tid;
  return qkv_iter_range(B->it, lo, hi, copy_blocks, &B->width);
}

/* 1: done (or interrupted, in *err); 0: not such a copy */
static int copy_by_blocks(const qkv_iter *it, size_t es, int *err) {
  int64_t size[QKV_MAXDIM], s0[QKV_MAXDIM], s1[QKV_MAXDIM];
  const int64_t *st[2] = {s0, s1};
  const size_t one[2] = {1, 1};
  size_t width = (size_t)it->size[0] * es;
  if (it->numel <= 0 || it->ndim < 2 || width > BLOCK_MAX ||
      it->stride[0][0] != (int64_t)es || it->stride[0][1] != (int64_t)es)
    return 0;
  int nd = it->ndim - 1;
  for (int k = 0; k < nd; k++) {      /* outermost first; strides in bytes */
    size[k] = it->size[nd - k];
    s0[k] = it->stride[nd - k][0];
    s1[k] = it->stride[nd - k][1];
  }
  qkv_iter blk;
  if (qkv_iter_init(&blk, nd, size, 2, it->data, st, one) != 0) return 0;
  blocks_job B = {&blk, width};
  int64_t grain = QKV_CPU_PAR_MIN / 2 / it->size[0];
  *err = it->numel >= QKV_CPU_PAR_MIN
           ? qkv_par_for(blk.numel, grain < 1 ? 1 : grain, blocks_chunk, &B)
           : qkv_iter_range(&blk, 0, blk.numel, copy_blocks, &B.width);
  return 1;
}

qkv_iter_fn qkv_cpu_copy_row(qkv_dtype to, qkv_dtype from) {
  if (to == QKV_BF16 && from == QKV_F32) return to_bf16_row;
  if (to == QKV_F32 && from == QKV_BF16) return from_bf16_row;
  if (to == QKV_F16 && from == QKV_F32) return to_f16_row;
  if (to == QKV_F32 && from == QKV_F16) return from_f16_row;
  return copy_rows[to][from];
}

void qkv_cpu_copy_tile (qkv_dtype to, void *dst, qkv_dtype from, const void *src, int64_t rows,
                        int64_t width, int64_t rs, int64_t cs) {
  qkv_iter_fn fn = qkv_cpu_copy_row(to, from);
  int64_t et = (int64_t)qkv_elsize(to), ef = (int64_t)qkv_elsize(from);
  int64_t s[2] = {et, cs * ef};
  int bad = 0;
  if ((cs == 1 || width == 1) && (rs == width || rows == 1)) {   /* one run */
    width *= rows;
    rows = 1;
    s[1] = ef;
  }
#ifdef QKV_VEXP_X86
  /* bfloat16 and float32 by the vector loops themselves: a tile's rows are
     short (a head's 32 or 64 features), and the row function's checks
     cost as much as its work (a third of MiniLM's attention) */
  if ((cs == 1 || width == 1) && qkv_cpu_has_avx2()) {
    int wide = qkv_cpu_has_avx512();
    if (to == QKV_F32 && from == QKV_BF16 && wide) {
      from_bf16_tile512(rows, width, dst, src, rs);
      return;
    }
    if (to == QKV_F32 && from == QKV_F16) {
      (wide ? from_f16_tile512 : from_f16_256)(rows, width, dst, src, rs);
      return;
    }
    if (to == QKV_F32 && from == QKV_BF16) {
      for (int64_t i = 0; i < rows; i++)
        from_bf16_256(width, (float *)dst + i * width, (const uint16_t *)src + i * rs);
      return;
    }
    if (to == QKV_BF16 && from == QKV_F32) {
      void (*f)(int64_t, uint16_t *, const float *) = wide ? to_bf16_512 : to_bf16_256;
      for (int64_t i = 0; i < rows; i++)
        f(width, (uint16_t *)dst + i * width, (const float *)src + i * rs);
      return;
    }
  }
#endif
  for (int64_t i = 0; i < rows; i++) {
    char *p[2] = {(char *)dst + i * width * et, (char *)src + i * rs * ef};
    fn(width, p, s, &bad);
  }
}

int qkv_cpu_copy(qkv_tensor *dst, const qkv_tensor *src) {
  const qkv_tensor *t[2];
  qkv_iter it;
  int bad = 0, err;
  if ((unsigned)dst->dtype >= QKV_NDTYPE || (unsigned)src->dtype >= QKV_NDTYPE)
    return QKV_EDTYPE;
  t[0] = dst;
  t[1] = src;
  if (qkv_iter_tensors(&it, 2, t) != 0) return QKV_EINTERNAL;
  /* not bool (a copy makes any nonzero byte 1) */
  if (dst->dtype == src->dtype && dst->dtype != QKV_BOOL &&
      copy_by_blocks(&it, qkv_elsize(dst->dtype), &err))
    return err;
  err = qkv_iter_run(&it, qkv_cpu_copy_row(dst->dtype, src->dtype), &bad);
  return err == QKV_OK && bad ? QKV_ERANGE : err;
}

/* fill works on the bits: the value is converted once, then stored by width */
#define FILL_ROW(name, T) \
  static void name(int64_t n, char **p, const int64_t *s, void *ctx) { \
    T v, *o = (T *)p[0]; \
    memcpy(&v, ctx, sizeof v); \
    if (s[0] == QKV_CPU_SZ(T)) { \
      QKV_SIMD for (int64_t i = 0; i < n; i++) o[i] = v; \
    } else { \
      const int64_t so = s[0]; \
      char *po = p[0]; \
      for (int64_t i = 0; i < n; i++, po += so) *(T *)po = v; \
    } \
  }

FILL_ROW(fill_1, uint8_t)
FILL_ROW(fill_2, uint16_t)
FILL_ROW(fill_4, uint32_t)
FILL_ROW(fill_8, uint64_t)

int qkv_cpu_fill(qkv_tensor *dst, double v) {
  const qkv_tensor *t[1];
  qkv_scalar s;
  qkv_iter it;
  qkv_iter_fn fn;
  if ((unsigned)dst->dtype >= QKV_NDTYPE) return QKV_EDTYPE;
  s = qkv_scalar_of(dst->dtype, v);
  switch (qkv_elsize(dst->dtype)) {
    case 1: fn = fill_1; break;
    case 2: fn = fill_2; break;
    case 4: fn = fill_4; break;
    case 8: fn = fill_8; break;
    default: return QKV_EINTERNAL;
  }
  t[0] = dst;
  if (qkv_iter_tensors(&it, 1, t) != 0) return QKV_EINTERNAL;
  return qkv_iter_run(&it, fn, &s);
}
