/*
** blas.c -- finds the products with dlopen the first time one is needed
** (see blas.h): cblas_sgemm and cblas_dgemm (and their gemv) from
** OpenBLAS, and float32's
** from oneDNN (dnnl_sgemm) where libdnnl is installed, which was 5-40%
** faster on a core of this machine for the shapes of a transformer's
** products (bench/NOTES.md, "Which sgemm").  $QKV_BLAS=openblas keeps
** OpenBLAS's for float32 too (the suites compare the two).
*/
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "blas.h"

__typeof__(cblas_sgemm) *qkv_sgemm;
__typeof__(cblas_dgemm) *qkv_dgemm;
__typeof__(cblas_sgemv) *qkv_sgemv;
__typeof__(cblas_dgemv) *qkv_dgemv;
/* OpenMP's "one thread from this thread on" (omp_set_num_threads: a
   setting of the calling thread), as each library links it */
static void (*blas_omp_threads)(int), (*dnnl_omp_threads)(int);
static _Thread_local int serial_here;

/* oneDNN's sgemm is row-major, as every call here is */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *,
                             int64_t, const float *, int64_t, float, float *, int64_t);
static dnnl_sgemm_fn dnnl_sgemm;
#define DNNL_MIN ((double)(1 << 15))
qkv_bf16gemm_fn qkv_bf16gemm;
static __typeof__(cblas_sgemm) *openblas_sgemm;

/*
** oneDNN's products run with every signal blocked on the calling thread
** (qkv's workers block them for good).  A SIGINT handled in the middle of
** dnnl_sgemm corrupted the heap, seen as glibc's "corrupted size vs.
** prev_size" inside oneDNN's next free (about 1 in 10 Ctrl-Cs of a loop of
** products; never with OpenBLAS): the signal waits until the call is done,
** 10 µs to milliseconds, and the kernels' interrupt checks see it after.
*/
static void quiet (sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, old);
}

static void loud (const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

static qkv_bf16gemm_fn dnnl_bf16gemm;

/*
** alpha = 0 as reference BLAS has it: C = beta C, A and B not read, and C
** not read either when beta is 0.  oneDNN's sgemm with alpha = beta = 0
** on one thread computed 0 * C instead, so NaN or inf left in a freshly
** allocated C came back (the attention backward's score tile, scale 0:
** NaN in dV).  Returns 0 when alpha is not 0 (the product is to run).
*/
static int alpha_zero (int64_t m, int64_t n, float alpha, float beta, float *c, int64_t ldc) {
  if (alpha != 0) return 0;
  for (int64_t i = 0; i < m; i++) {
    float *ci = c + i * ldc;
    if (beta == 0) memset(ci, 0, (size_t)n * sizeof *ci);
    else if (beta != 1) for (int64_t j = 0; j < n; j++) ci[j] *= beta;
  }
  return 1;
}

static int bf16gemm_quiet (char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                           float beta, float *c, int64_t ldc) {
  if (alpha_zero(m, n, alpha, beta, c, ldc)) return 0;
  sigset_t old;
  quiet(&old);
  int r = dnnl_bf16gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  loud(&old);
  return r;
}

static void sgemm_dnnl (const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                        const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n,
                        const blasint k, const float alpha, const float *a, const blasint lda,
                        const float *b, const blasint ldb, const float beta, float *c,
                        const blasint ldc) {
  /* CblasRowMajor is the only order used; what oneDNN refuses (leading
     dimensions it finds too small, say) OpenBLAS computes, and the small
     products, where oneDNN's call costs more than OpenBLAS's small-matrix
     kernels (the seed-sized attention step: 0.93 -> 1.28 µs through it) */
  if (order == CblasRowMajor && alpha_zero(m, n, alpha, beta, c, ldc)) return;
  if (order == CblasRowMajor && (double)m * n * k >= DNNL_MIN) {
    sigset_t old;
    quiet(&old);
    int r = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k,
                       alpha, a, lda, b, ldb, beta, c, ldc);
    loud(&old);
    if (r == 0) return;
  }
  openblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void qkv_gemm_scaled (int f64, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                      int k, double scale, const void *a, int lda, const void *b, int ldb,
                      void *c, int ldc) {
  int after = k == 0 || scale == 0 || !isfinite(scale);
  double alpha = after ? 1.0 : scale;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  if (k == 0)
    for (int i = 0; i < m; i++) memset((char *)c + (size_t)i * (size_t)ldc * es, 0, (size_t)n * es);
  else if (f64)
    qkv_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0, c, ldc);
  else
    qkv_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, 0.0f, c, ldc);
  for (int i = 0; after && i < m; i++)
    for (int j = 0; j < n; j++)
      if (f64) ((double *)c)[(int64_t)i * ldc + j] *= scale;
      else ((float *)c)[(int64_t)i * ldc + j] *= (float)scale;
}

void qkv_blas_serial (void) {
  if (serial_here || qkv_sgemm == NULL) return;
  serial_here = 1;
  if (blas_omp_threads) blas_omp_threads(1);
  if (dnnl_omp_threads) dnnl_omp_threads(1);
}

static void load_dnnl (void) {
  const char *want = getenv("QKV_BLAS");
  if (want != NULL && strcmp(want, "openblas") == 0) return;
  if (want != NULL && *want != '\0' && strcmp(want, "dnnl") != 0)
    fprintf(stderr, "qkv: QKV_BLAS=%s is not openblas or dnnl; ignored\n", want);
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return;
  void *s = dlsym(h, "dnnl_sgemm"), *t = dlsym(h, "omp_set_num_threads");
  if (s == NULL) { dlclose(h); return; }
  *(void **)&dnnl_sgemm = s;
  *(void **)&dnnl_omp_threads = t;
  *(void **)&dnnl_bf16gemm = dlsym(h, "dnnl_gemm_bf16bf16f32");
  /* every oneDNN has the function, but runs it only where the CPU has
     AVX-512 (it returns dnnl_unimplemented on an AVX2-only EPYC, where
     every bfloat16 product then failed): one 1x1x1 product tells, and
     elsewhere the dispatch computes bfloat16 products in float32 */
  uint16_t one = 0x3f80;                          /* 1.0 in bfloat16 */
  float c = 0;
  if (dnnl_bf16gemm && dnnl_bf16gemm('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == 0
      && c == 1.0f)
    qkv_bf16gemm = bf16gemm_quiet;
  openblas_sgemm = qkv_sgemm;
  qkv_sgemm = sgemm_dnnl;
}

int qkv_blas_load (void) {
  /* OpenBLAS first (Debian's alternatives point libblas.so.3 at it too) */
  static const char *const names[] = {"libopenblas.so.0", "libopenblas.so",
                                      "libblas.so.3", "libcblas.so.3"};
  static int tried;
  if (qkv_sgemm != NULL) { qkv_blas_serial(); return QKV_OK; }
  if (tried) return QKV_ENOBLAS;
  tried = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) continue;
    void *s = dlsym(h, "cblas_sgemm"), *d = dlsym(h, "cblas_dgemm");
    if (s != NULL && d != NULL) {
      /* (an object pointer to a function pointer, as POSIX allows) */
      *(void **)&qkv_sgemm = s;
      *(void **)&qkv_dgemm = d;
      *(void **)&qkv_sgemv = dlsym(h, "cblas_sgemv");
      *(void **)&qkv_dgemv = dlsym(h, "cblas_dgemv");
      /* OpenBLAS's own setting once, here, before any thread uses it:
         openblas_set_num_threads also resizes global buffers, unlocked,
         and called by a worker while another thread was in a product it
         corrupted the heap; each thread then sets only OpenMP's (what the
         OpenMP build reads per call; the pthreads build reads the global) */
      void (*set)(int);
      *(void **)&set = dlsym(h, "openblas_set_num_threads");
      if (set) set(1);
      *(void **)&blas_omp_threads = dlsym(h, "omp_set_num_threads");
      load_dnnl();
      qkv_blas_serial();
      return QKV_OK;
    }
    dlclose(h);
  }
  return QKV_ENOBLAS;
}
