/*
** attention_kernel.cuh -- the fused attention's CUDA-core kernel (float32
** and float64; attention.cu says what it computes and how, and launches
** it), written once for attention.cu, compiled with the plugin, and for
** the attention variants' programs compiled as code at run time
** (mods_gen.cu, jit.cu): the program's evaluator is a template argument,
** so a score_mod or mask_mod runs inside the same tiles, registers and
** online softmax as plain attention.  NVRTC reads this file as text
** (embed.py), so it includes only headers that NVRTC can read.
*/
#ifndef QKV_CUDA_ATTENTION_KERNEL_CUH
#define QKV_CUDA_ATTENTION_KERNEL_CUH

#include "mods_kernels.cuh"

#define QKV_ATTN_NT 256              /* threads a block */

/* the kernel's dynamic shared memory, declared in its __global__ (the
   host simulation gives the running block's) */
#ifdef QKV_CUDASIM
#define QKV_DYNAMIC_SMEM(name) unsigned char *name = (unsigned char *)sim_dynamic_smem()
#else
#define QKV_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* rows [r0, r0 + n) of op (n <= rows, the rest zeros) to a rows x w tile
   at dst, ld apart, by all the block's threads */
template <typename T>
__device__ static void qkv_attn_load_tile (T *dst, int ld, int rows, int w,
                                           const qkv_attn_view &op, int64_t boff, int64_t r0,
                                           int n) {
  const T *src = (const T *)op.base + boff;
  for (int x = threadIdx.x; x < rows * w; x += QKV_ATTN_NT) {
    int i = x / w, j = x % w;
    dst[i * ld + j] = i < n ? src[(r0 + i) * op.rs + j * op.cs] : (T)0;
  }
}

/*
** The item loop, run by a block of QKV_ATTN_NT threads with smem its
** dynamic shared memory.  STAGED: q, k, v tiles in shared memory and O
** there too; otherwise q, k, v are read where they lie (rows past the end
** clamped to the last, whose scores are excluded anyway) and O is kept in
** out.  E evaluates M's score_mod/mask_mod program (qkv_mods_none: no
** program, M NULL): a key tile whose blocks are all empty is skipped, and
** each kept score of a tile that is not full goes through the program.
*/
template <typename T, int BQ, int BK, bool STAGED, class E>
__device__ static void qkv_attn_tiled (const qkv_attn_plan &P, qkv_attn_mods *M,
                                       unsigned char *smem) {
  enum { RG = QKV_ATTN_NT / 16, RA = BQ / RG, CB = BK / 16, LDP = BK / 32 * 32 + 16 };
  const unsigned FULL = 0xffffffffu;
  const int t = threadIdx.x, r = t / 16, c = t % 16, dk = P.dk, dv = P.dv;
  const int ldq = dk | 1;
  const T ninf = -(T)INFINITY, scale = (T)P.scale;
  T *Ps = (T *)smem, *Qs = Ps + BQ * LDP, *Ks = Qs + BQ * ldq, *Vs = Ks + BK * ldq;
  T *Os = Vs + BK * dv;
  /* element strides of a feature step in q, k, v as the products read them */
  const int64_t qcs = STAGED ? 1 : P.q.cs, kcs = STAGED ? 1 : P.k.cs;
  const int64_t vrs = STAGED ? dv : P.v.rs, vcs = STAGED ? 1 : P.v.cs;
  double val[E::NV];                           /* the program's values */
  (void)val;
  (void)M;

  for (int64_t item = blockIdx.x; item < P.items; item += gridDim.x) {
    int64_t b, i0, boff[4];
    const int bq = qkv_attn_item(&P, item, &b, &i0);
    const int64_t jend = qkv_attn_key_end(&P, i0, bq);
    qkv_attn_batch_offsets(&P, b, boff);
    T *out = (T *)P.out + (b * P.nq + i0) * dv;
    T *O = STAGED ? Os : out;                  /* rows dv apart either way */
    const unsigned char *mk = P.has_mask ? (const unsigned char *)P.mask.base + boff[3] : NULL;

    __syncthreads();                           /* the last item's reads are done */
    if (STAGED && jend > 0) qkv_attn_load_tile<T>(Qs, ldq, BQ, dk, P.q, boff[0], i0, bq);
    /* the thread's rows of q, as the products read them */
    const T *qrow[RA];
    for (int a = 0; a < RA; a++) {
      int64_t i = i0 + r + RG * a;
      qrow[a] = STAGED ? Qs + (r + RG * a) * ldq
                       : (const T *)P.q.base + boff[0] + (i < P.nq ? i : P.nq - 1) * P.q.rs;
    }
    T m[RA], l[RA], alpha[RA];
    for (int a = 0; a < RA; a++) {
      m[a] = ninf;
      l[a] = 0;
      if (r + RG * a < bq)
        for (int d = c; d < dv; d += 16) O[(r + RG * a) * dv + d] = 0;
    }

    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      int bk = (int)(jend - j0 < BK ? jend - j0 : BK);
      int want = 0;                            /* what the program computes in this tile */
      if constexpr (E::MODS) {
        /* the same in every thread: the skip is the whole block's */
        int kind = qkv_mods_tile_kind<E>(M, b, i0, bq, j0, bk);
        if (kind == QKV_BLOCK_EMPTY) continue;
        want = qkv_mods_want<E>(M, kind);
      }
      __syncthreads();                         /* the last tile's K, V, P reads are done */
      if (STAGED) {
        qkv_attn_load_tile<T>(Ks, ldq, BK, dk, P.k, boff[1], j0, bk);
        qkv_attn_load_tile<T>(Vs, dv, bk, dv, P.v, boff[2], j0, bk);
      }
      __syncthreads();

      /* 2. scores */
      const T *krow[CB];
      for (int bb = 0; bb < CB; bb++) {
        int64_t j = j0 + c + 16 * bb;
        krow[bb] = STAGED ? Ks + (c + 16 * bb) * ldq
                          : (const T *)P.k.base + boff[1] + (j < P.nk ? j : P.nk - 1) * P.k.rs;
      }
      T s[RA][CB];
      for (int a = 0; a < RA; a++)
        for (int bb = 0; bb < CB; bb++) s[a][bb] = 0;
      for (int kk = 0; kk < dk; kk++) {
        T qa[RA], kb[CB];
        for (int a = 0; a < RA; a++) qa[a] = qrow[a][kk * qcs];
        for (int bb = 0; bb < CB; bb++) kb[bb] = krow[bb][kk * kcs];
        for (int a = 0; a < RA; a++)
          for (int bb = 0; bb < CB; bb++) s[a][bb] += qa[a] * kb[bb];
      }
      for (int a = 0; a < RA; a++) {
        int64_t i = i0 + r + RG * a;
        for (int bb = 0; bb < CB; bb++) {
          int64_t j = j0 + c + 16 * bb;
          bool keep = i < P.nq && c + 16 * bb < bk && qkv_attn_keeps(&P, mk, i, j);
          T x = keep ? s[a][bb] * scale : ninf;
          if constexpr (E::MODS)
            if (keep && want) {
              qkv_mod_pair e = {b / M->heads, b % M->heads, i, j, (double)x};
              E::run(M, val, want, false, e);
              E::run(M, val, want, true, e);
              x = qkv_mods_applied<E, T>(M, val, want, x);
            }
          s[a][bb] = x;
        }
      }

      /* 3. the online softmax; -inf - -inf is never taken */
      for (int a = 0; a < RA; a++) {
        T mx = ninf, sum = 0;
        for (int bb = 0; bb < CB; bb++) mx = s[a][bb] > mx ? s[a][bb] : mx;
        for (int o = 8; o > 0; o >>= 1) {    /* the max skips NaN, as the CPU's */
          T y = __shfl_xor_sync(FULL, mx, o);
          mx = y > mx ? y : mx;
        }
        T mnew = mx > m[a] ? mx : m[a];
        alpha[a] = mnew == m[a] ? (T)1 : ex(m[a] - mnew);     /* 0 at first */
        for (int bb = 0; bb < CB; bb++) {
          T p = s[a][bb] == ninf ? (T)0 : ex(s[a][bb] - mnew);  /* NaN stays */
          Ps[(r + RG * a) * LDP + c + 16 * bb] = p;
          sum += p;
        }
        l[a] = l[a] * alpha[a] + sum;
        m[a] = mnew;
      }
      __syncthreads();

      /* 4. O = O alpha + P V, 64 columns a pass */
      for (int d0 = 0; d0 < dv; d0 += 64) {
        T acc[RA][4];
        const T *vcol[4];
        for (int bb = 0; bb < 4; bb++) {
          int d = d0 + c + 16 * bb;
          d = d < dv ? d : dv - 1;               /* read in bounds, stored never */
          vcol[bb] = STAGED ? Vs + d : (const T *)P.v.base + boff[2] + j0 * P.v.rs + d * vcs;
          for (int a = 0; a < RA; a++) acc[a][bb] = 0;
        }
        for (int jj = 0; jj < bk; jj++) {
          T pa[RA], vb[4];
          for (int a = 0; a < RA; a++) pa[a] = Ps[(r + RG * a) * LDP + jj];
          for (int bb = 0; bb < 4; bb++) vb[bb] = vcol[bb][jj * vrs];
          for (int a = 0; a < RA; a++)
            for (int bb = 0; bb < 4; bb++) acc[a][bb] += pa[a] * vb[bb];
        }
        for (int a = 0; a < RA; a++) {
          int row = r + RG * a;
          for (int bb = 0; bb < 4; bb++) {
            int d = d0 + c + 16 * bb;
            if (row < bq && d < dv) O[row * dv + d] = O[row * dv + d] * alpha[a] + acc[a][bb];
          }
        }
      }
    }

    /* out = O / l; a row with no key kept is zeros.  lse = m + log l (m
       is the same in the row's 16 threads), -inf where l == 0 */
    for (int a = 0; a < RA; a++) {
      T sum = l[a];
      for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
      int row = r + RG * a;
      T rinv = sum == 0 ? (T)0 : (T)(1.0 / (double)sum);
      if (row < bq)
        for (int d = c; d < dv; d += 16)
          out[row * dv + d] = sum == 0 ? (T)0 : O[row * dv + d] * rinv;
      if (P.lse && row < bq && c == 0)
        ((T *)P.lse)[b * P.nq + i0 + row] = sum == 0 ? ninf : m[a] + lg(sum);
    }
  }
}

#endif
