/*
** cuda.cuh -- what the CUDA backend's kernels share: its entry points (the
** contracts are backend.h's, the same as vm/cpu/cpu.h's), the checked-call
** macros, the caching allocator, and a strided iterator for elementwise
** kernels.  Each vm/cuda/X.cu mirrors vm/cpu/X.c and gives the same
** numbers (float32 to rounding; TF32 is off unless a script allows it).
**
** Everything runs on the legacy default stream, so kernels are ordered
** with each other and with the blocking copies to the host: a result the
** host reads is complete.
*/
#ifndef QKV_CUDA_CUH
#define QKV_CUDA_CUH

#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

extern "C" {
#include "../core/qkv.h"
#include "../core/backend.h"
#include "../core/half.h"
}
#include "../common/common.h"

/*
** Every CUDA and cuBLAS call and every launch is checked; a failure
** records "call at file:line: reason" (qkv_cu_error) and returns
** QKV_ECUDA from the enclosing function, which the bindings raise as a
** Lua error.  Kernel launches are followed by launchCheck(name).
*/
int qkv_cu_fail(const char *call, const char *file, int line, const char *why);
int qkv_cu_fail_cuda(const char *call, const char *file, int line, cudaError_t e);
const char *qkv_cu_error(void);

#define cudaCheck(call) do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return qkv_cu_fail_cuda(#call, __FILE__, __LINE__, e_); \
  } while (0)

#define launchCheck(name) do { \
    cudaError_t e_ = cudaGetLastError(); \
    if (e_ != cudaSuccess) return qkv_cu_fail_cuda("launch of " name, __FILE__, __LINE__, e_); \
  } while (0)

const char *qkv_cublas_status(cublasStatus_t s);
int qkv_cu_fail_blas(const char *call, const char *file, int line, cublasStatus_t s);
#define cublasCheck(call) do { \
    cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) return qkv_cu_fail_blas(#call, __FILE__, __LINE__, s_); \
  } while (0)

/* the cuBLAS handle (made on first use, TF32 as qkv.cuda.allow_tf32 says);
   NULL after recording why */
cublasHandle_t qkv_cu_blas(void);

/* cuBLAS's strided batched product in float32 or float64, by overload */
static inline cublasStatus_t qkv_cu_gemm_batched (
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *a, int lda, long long sa, const float *b, int ldb,
    long long sb, const float *beta, float *c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                   beta, c, ldc, sc, count);
}

static inline cublasStatus_t qkv_cu_gemm_batched (
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const double *alpha, const double *a, int lda, long long sa, const double *b, int ldb,
    long long sb, const double *beta, double *c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                   beta, c, ldc, sc, count);
}

/* the fused attention's paths: the last one taken (qkv.cuda.attention_backend),
   and the one forced, "cudnn", "wgmma", "mma" or "fp32" (NULL: each call takes the
   first that runs it; QKV_CUDA_ATTENTION, then qkv.cuda.attention_backend(path)) */
extern const char *qkv_cu_attention_path;
extern const char *qkv_cu_attention_force;

/* whether path is the forced one; whether another is */
static inline int qkv_cu_forced (const char *path) {
  return qkv_cu_attention_force && !strcmp(qkv_cu_attention_force, path);
}
/* the wgmma forward's backward and variants are mma's: forcing "wgmma"
   forces "mma" there */
static inline int qkv_cu_forced_other (const char *path) {
  const char *f = qkv_cu_attention_force;
  if (f && !strcmp(path, "mma") && !strcmp(f, "wgmma")) return 0;
  return f && strcmp(f, path) != 0;
}

/* what a path answers for a call it does not take: QKV_EDTYPE, so that
   the next path runs it, or where it is the forced path the error saying
   why (path a string literal) */
#define qkv_cu_decline(path, why) \
  (qkv_cu_forced(path) ? qkv_cu_fail("the forced path " path, __FILE__, __LINE__, why) \
                       : QKV_EDTYPE)

/* scratch device memory from the caching allocator (NULL when out of
   memory, with the error recorded); free it before returning */
void *qkv_cu_alloc(size_t nbytes);
void qkv_cu_free(void *p);

__host__ static inline int64_t qkv_cu_numel (const qkv_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->size[i];
  return n;
}

/* whether t's elements lie densely in row-major order (size-1 dims skipped) */
__host__ static inline int qkv_cu_contiguous (const qkv_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->size[i] != 1 && t->stride[i] != s) return 0;
    s *= t->size[i];
  }
  return 1;
}

__host__ static inline char *qkv_cu_data (const qkv_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)qkv_dtype_bytes(t->dtype);
}

/*
** A strided loop over up to QKV_CU_MAXOP operands of one shape, passed to
** kernels by value.  Host side: qkv_cu_iter_init drops size-1 dims and
** merges dims contiguous with each other in every operand.  Device side:
** qkv_cu_iter_at<NOP> gives each operand's element offset (in elements,
** from data[k]) of linear index i (row-major over the shape).
*/
#define QKV_CU_MAXOP 4

struct qkv_cu_iter {
  int nop, ndim;
  int64_t numel;
  int64_t size[QKV_MAXDIM];                    /* outermost first */
  int64_t stride[QKV_CU_MAXOP][QKV_MAXDIM];    /* elements */
  char *data[QKV_CU_MAXOP];                    /* element 0 of each */
};

void qkv_cu_iter_init(qkv_cu_iter *it, int nop, const qkv_tensor *const *t);

template <int NOP>
__device__ static inline void qkv_cu_iter_at (const qkv_cu_iter &it, int64_t i,
                                              int64_t (&off)[NOP]) {
  if (it.ndim == 1) {              /* merged into one dim: no division */
    for (int k = 0; k < NOP; k++) off[k] = i * it.stride[k][0];
    return;
  }
  for (int k = 0; k < NOP; k++) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; d--) {
    int64_t s = it.size[d], c = i % s;
    i /= s;
    for (int k = 0; k < NOP; k++) off[k] += c * it.stride[k][d];
  }
}

/* grid-stride loops: blocks for n elements at `threads` per block */
static inline unsigned qkv_cu_blocks (int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}
#define QKV_CU_LOOP(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

/* the entries (see backend.h for what each takes) */
int qkv_cuda_copy(qkv_tensor *dst, const qkv_tensor *src);
int qkv_cuda_fill(qkv_tensor *dst, double v);
int qkv_cuda_binary(int op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b);
int qkv_cuda_unary(int op, qkv_tensor *out, const qkv_tensor *a);
/* the text of the op list elementwise.cu was built from (QKV_OPS_LIST,
   vm/common/ops.h), which the plugin carries for the loader's check */
extern const char qkv_cu_op_list[];
int qkv_cuda_masked_fill(qkv_tensor *out, const qkv_tensor *mask, double v);
int qkv_cuda_reduce(qkv_redop op, qkv_tensor *out, qkv_tensor *idx, const qkv_tensor *a, int dim,
                    double correction);
int qkv_cuda_matmul(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b, double alpha);
int qkv_cuda_random(qkv_tensor *out, qkv_dist dist, const uint32_t key[2], uint64_t offset);
int qkv_cuda_softmax(qkv_tensor *out, const qkv_tensor *x, int dim);
int qkv_cuda_attention(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                       const qkv_tensor *v, const qkv_tensor *mask, int causal,
                       double scale, qkv_tensor *lse);
int qkv_cuda_where(qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                   const qkv_tensor *b);
int qkv_cuda_gather(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim);
int qkv_cuda_sort(qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc);
int qkv_cuda_attention_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                const qkv_tensor *o, const qkv_tensor *go,
                                const qkv_tensor *mask, int causal, double scale,
                                const qkv_tensor *lse);
int qkv_cuda_scatter_add(qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim);
int qkv_cuda_softmax_backward(qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g);
int qkv_cuda_log_softmax(qkv_tensor *out, const qkv_tensor *x);
int qkv_cuda_cumsum(qkv_tensor *out, const qkv_tensor *x, int dim);
int qkv_cuda_tri(qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper);
int qkv_cuda_adam(qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v,
                  qkv_tensor *vmax, const qkv_adam_step *h);
int qkv_cuda_layer_norm_backward(qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                                 const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                                 int64_t n, double eps);
int qkv_cuda_layer_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                        const qkv_tensor *b, int64_t n, double eps);
int qkv_cuda_rms_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                      double eps);
int qkv_cuda_rms_norm_backward(qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                               const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps);

#endif
