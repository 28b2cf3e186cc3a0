/*
** products.cpp -- the host simulation's matrix products: the tensor-core
** instructions of vm/cuda/mma.cuh as warp collectives, and cuBLAS's
** strided batched gemm (its interface is cudasim.h's).
*/
#include "internal.h"
#include "../../../vm/core/half.h"

using namespace cudasim;

/* the tensor-core instructions of vm/cuda/mma.cuh, as warp collectives:
   every lane hands in its registers, and each computes its own outputs
   from the whole warp's, by the fragment layouts mma.cuh describes */

static void warp_all (uint64_t v, uint64_t out[32]) {
  const uint64_t *all = sim_warp_exchange(SIM_SHFL, 0xffffffffu, v);
  memcpy(out, all, 32 * sizeof *out);
}

static float half_at (int fp16, uint32_t reg, int hi) {
  uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xffff);
  return fp16 ? qkv_h2f(h) : qkv_bf2f(h);
}

/* the warp's 16 x 16 A from its lanes' fragments a[4] (a warp collective:
   mma.sync's A, and wgmma's A from registers, a warp's 16 rows of it) */
static void a_fragments (int fp16, const uint32_t a[4], float A[16][16]) {
  uint64_t a01[32], a23[32];
  warp_all((uint64_t)a[0] | (uint64_t)a[1] << 32, a01);
  warp_all((uint64_t)a[2] | (uint64_t)a[3] << 32, a23);
  for (int row = 0; row < 16; row++)
    for (int k = 0; k < 16; k++) {
      int lane = (row % 8) * 4 + (k % 8) / 2, reg = (row >= 8) + 2 * (k >= 8);
      uint64_t w = reg < 2 ? a01[lane] : a23[lane];
      A[row][k] = half_at(fp16, (uint32_t)(w >> (32 * (reg & 1))), k & 1);
    }
}

void sim_mma_m16n8k16 (int fp16, float d[4], const uint32_t a[4], const uint32_t b[2]) {
  uint64_t b01[32];
  float Am[16][16];
  a_fragments(fp16, a, Am);
  warp_all((uint64_t)b[0] | (uint64_t)b[1] << 32, b01);
  auto A = [&](int row, int k) { return Am[row][k]; };
  auto B = [&](int k, int n) {                 /* element (k, n) of the 16 x 8 B */
    uint64_t w = b01[n * 4 + (k % 8) / 2];
    return half_at(fp16, (uint32_t)(w >> (32 * (k >= 8))), k & 1);
  };
  unsigned t = sim_lane();
  int g = (int)t / 4, c = 2 * (int)(t % 4);
  for (int i = 0; i < 4; i++) {
    int row = g + 8 * (i / 2), col = c + i % 2;
    double s = d[i];                            /* products exact, summed wide */
    for (int k = 0; k < 16; k++) s += (double)A(row, k) * (double)B(k, col);
    d[i] = (float)s;
  }
}

void sim_ldmatrix_x4 (int trans, uint32_t r[4], const void *row) {
  uint64_t addr[32];
  sim_check_align(row, 16, "ldmatrix: a row");     /* each row is one 16-byte access */
  warp_all((uint64_t)(uintptr_t)row, addr);
  unsigned t = sim_lane();
  int g = (int)t / 4, c = 2 * (int)(t % 4);
  auto at = [&](int tile, int i, int j) {      /* element j of row i of a tile */
    return ((const uint16_t *)(uintptr_t)addr[8 * tile + i])[j];
  };
  for (int j = 0; j < 4; j++) {
    uint16_t lo = trans ? at(j, c, g) : at(j, g, c);
    uint16_t hi = trans ? at(j, c + 1, g) : at(j, g, c + 1);
    r[j] = (uint32_t)lo | (uint32_t)hi << 16;
  }
}


/* wgmma.mma_async m64nNk16 (vm/cuda/wgmma.cuh), computed when its group
   is waited for (wgmma.wait_group: the latest the GPU may read shared
   memory and write the accumulators, so that a kernel that overwrites an
   operand's tile, or reads the accumulators, before its wait is caught):
   each thread computes its own
   accumulators, warp w % 4 of the warpgroup rows 16 (w % 4) .. + 15, reading
   A (when not in registers) and B from shared memory through their
   descriptors, decoded as the PTX ISA lays out a 128-byte-swizzle operand.
   Faults: another swizzle, a base offset, a start not on a swizzle atom's
   row 0, an element outside the dynamic shared memory, a block whose
   threads are not whole warpgroups */

struct wg_desc { uint32_t start, lbo, sbo; };

static bool wg_decode (uint64_t d, wg_desc *o, bool kmajor, const char *which) {
  char why[160];
  o->start = (uint32_t)(d & 0x3fff) << 4;
  o->lbo = (uint32_t)(d >> 16 & 0x3fff) << 4;
  o->sbo = (uint32_t)(d >> 32 & 0x3fff) << 4;
  const char *bad = (d >> 62) != 1 ? "a swizzle other than 128 bytes (not simulated)"
                    : (d >> 49 & 7) ? "a base offset (not simulated)"
                    : (o->start >> 7 & 7) ? "a start that is not on a swizzle atom's row 0"
                    : kmajor && (o->start & 0x7f) + 32 > 128 ? "a k16 step past a 128-byte row"
                    : !kmajor && (o->start & 0x7f) ? "an MN-major start inside a row"
                    : NULL;
  if (!bad) return true;
  snprintf(why, sizeof why, "wgmma: descriptor of %s: %s (start 0x%x)", which, bad, o->start);
  sim_fault(why);
  return false;
}

/* element at byte offset `logical` of a swizzled operand: the 16-byte
   chunk's bits 4-6 XORed with the row's bits 7-9 */
static bool wg_at (int fp16, uint32_t logical, float *v) {
  uint32_t a = logical ^ ((logical >> 7 & 7) << 4);
  const unsigned char *p = sim_smem_at(a, 2, "wgmma operand");
  if (p == NULL) return false;
  uint16_t h;
  memcpy(&h, p, 2);
  *v = fp16 ? qkv_h2f(h) : qkv_bf2f(h);
  return true;
}

void sim_wgmma (int fp16, int n, float *d, const uint32_t *a, uint64_t da, uint64_t db, int tb) {
  if (blockDim.x % 128 != 0 || blockDim.y != 1 || blockDim.z != 1) {
    sim_fault("wgmma: the block's threads are not whole warpgroups (blockDim.x % 128)");
    return;
  }
  /* at issue: A's fragments from the warp's lanes (a warp collective), the
     descriptors checked; the rest when the group is waited for */
  struct A16 { float v[16][16]; };
  auto av = std::make_shared<A16>();
  uint32_t a_at_issue[4] = {0, 0, 0, 0};
  if (a) {
    a_fragments(fp16, a, av->v);
    memcpy(a_at_issue, a, sizeof a_at_issue);
  }
  wg_desc A = {0, 0, 0}, B;
  if ((!a && !wg_decode(da, &A, true, "A")) || !wg_decode(db, &B, !tb, "B")) return;
  const int w = (int)(threadIdx.x / 32 % 4);
  const unsigned t = sim_lane();
  sim_wg_issue([=]() {
    /* A's registers must hold until the wait (the GPU reads them late) */
    if (a && memcmp(a, a_at_issue, sizeof a_at_issue) != 0) {
      sim_fault("wgmma: A's registers changed before the wait for their wgmma");
      return;
    }
    float bv[16][128];
    if (!a)
      for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
          int row = 16 * w + r;
          if (!wg_at(fp16, A.start + row / 8 * A.sbo + row % 8 * 128 + 2 * k, &av->v[r][k])) return;
        }
    for (int k = 0; k < 16; k++)
      for (int col = 0; col < n; col++) {
        uint32_t off = tb ? B.start + col / 64 * B.lbo + col % 64 * 2 + k / 8 * B.sbo + k % 8 * 128
                          : B.start + col / 8 * B.sbo + col % 8 * 128 + 2 * k;
        if (!wg_at(fp16, off, &bv[k][col])) return;
      }
    int g = (int)t / 4, c = 2 * (int)(t % 4);
    for (int j = 0; j < n / 8; j++)
      for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e / 2), col = 8 * j + c + e % 2;
        double sum = d[4 * j + e];             /* products exact, summed wide */
        for (int k = 0; k < 16; k++) sum += (double)av->v[row][k] * (double)bv[k][col];
        d[4 * j + e] = (float)sum;
      }
  });
}


/* cuBLAS */

struct sim_blas { cublasMath_t mode; };

cublasStatus_t cublasCreate (cublasHandle_t *h) {
  *h = new sim_blas{CUBLAS_DEFAULT_MATH};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace (cublasHandle_t h, void *ws, size_t bytes) {
  if (h == NULL) return CUBLAS_STATUS_NOT_INITIALIZED;
  return sim_check_range(ws, bytes, "cublasSetWorkspace") ? CUBLAS_STATUS_INVALID_VALUE
                                                           : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy (cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasSetMathMode (cublasHandle_t h, cublasMath_t m) {
  if (h == NULL) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->mode = m;
  return CUBLAS_STATUS_SUCCESS;
}

/* float32 rounded to TF32 (10 mantissa bits, to nearest) */
static float tf32 (float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
  memcpy(&v, &u, 4);
  return v;
}

static bool blas_range (const void *p, long long rows, long long cols, long long ld,
                        long long stride, int count, size_t elsize, const char *what) {
  if (rows == 0 || cols == 0 || count == 0) return true;
  long long last = (cols - 1) * ld + rows - 1 + (long long)(count - 1) * stride;
  if (stride < 0) {
    fail(cudaErrorInvalidValue, "cuBLAS: %s: negative batch stride %lld", what, stride);
    return false;
  }
  return sim_check_range(p, (size_t)(last + 1) * elsize, what) == cudaSuccess;
}

/* C = alpha op(A) op(B) + beta C for each of count batches, column-major:
   element (i, j) of a matrix with leading dimension ld is at i + j * ld */
template <typename T>
static cublasStatus_t gemm (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const T *alpha, const T *A, int lda, long long sa,
                            const T *B, int ldb, long long sb, const T *beta, T *C, int ldc,
                            long long sc, int count) {
  if (h == NULL) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (sticky) return CUBLAS_STATUS_EXECUTION_FAILED;
  auto atleast1 = [](int x) { return x > 1 ? x : 1; };
  bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || count < 0 || lda < atleast1(an ? m : k) ||
      ldb < atleast1(bn ? k : n) || ldc < atleast1(m) || ta > CUBLAS_OP_C || tb > CUBLAS_OP_C) {
    fail(cudaErrorInvalidValue,
         "cuBLAS gemm: invalid value: op %d %d, m %d n %d k %d, lda %d ldb %d ldc %d, count %d",
         ta, tb, m, n, k, lda, ldb, ldc, count);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0 || count == 0) return CUBLAS_STATUS_SUCCESS;
  T al = *alpha, be = *beta;
  bool reads_ab = k > 0 && al != 0;
  if ((reads_ab && (!blas_range(A, an ? m : k, an ? k : m, lda, sa, count, sizeof(T), "gemm's A") ||
                    !blas_range(B, bn ? k : n, bn ? n : k, ldb, sb, count, sizeof(T), "gemm's B"))) ||
      !blas_range(C, m, n, ldc, sc, count, sizeof(T), "gemm's C"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  bool round = sizeof(T) == 4 && h->mode == CUBLAS_TF32_TENSOR_OP_MATH;
  auto in = [round](T v) { return round ? (T)tf32((float)v) : v; };
  for (int b = 0; b < count; b++) {
    const T *a = A + b * sa, *bb = B + b * sb;
    T *c = C + b * sc;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double s = 0;
        if (reads_ab)
          for (int l = 0; l < k; l++)
            s += (double)in(an ? a[i + (long long)l * lda] : a[l + (long long)i * lda]) *
                 (double)in(bn ? bb[l + (long long)j * ldb] : bb[j + (long long)l * ldb]);
        T &out = c[i + (long long)j * ldc];
        out = be == 0 ? (T)((double)al * s) : (T)((double)al * s + (double)be * out);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched (
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *a, int lda, long long sa, const float *b, int ldb,
    long long sb, const float *beta, float *c, int ldc, long long sc, int count) {
  return gemm(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}

cublasStatus_t cublasDgemmStridedBatched (
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const double *alpha, const double *a, int lda, long long sa, const double *b, int ldb,
    long long sb, const double *beta, double *c, int ldc, long long sc, int count) {
  return gemm(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
