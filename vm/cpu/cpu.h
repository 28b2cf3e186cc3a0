/*
** cpu.h -- the CPU backend's entry points (see backend.h for contracts).
*/
#ifndef QKV_CPU_H
#define QKV_CPU_H

#include "../core/backend.h"
#include "iter.h"

/* the table (backend.c), which registers itself for QKV_CPU */
extern const qkv_backend qkv_cpu_backend;

/* the widest instruction set the kernels may use here (isa.c); AMX means
   AVX-512 with BF16 and the tile unit's bfloat16 products as well */
enum { QKV_ISA_BASE, QKV_ISA_AVX2, QKV_ISA_AVX512, QKV_ISA_AMX };
int qkv_cpu_isa(void);
/* whether AMX may run here: the CPU has it, QKV_CPU allows it, and Linux
   gave this process the tile state (asked on the first call) */
int qkv_cpu_has_amx(void);
/* whether AVX-512's bfloat16 dot products may run here (QKV_CPU allowing
   AVX-512) */
int qkv_cpu_has_bf16(void);

/* below this many elements a loop runs on one thread */
#define QKV_CPU_PAR_MIN 32768

/* 64-byte-aligned host blocks, cached (alloc.c) */
void *qkv_cpu_alloc(size_t nbytes, int zero);
void qkv_cpu_free(void *p);
int qkv_cpu_copy(qkv_tensor *dst, const qkv_tensor *src);
/* n float32 rounded to bfloat16 as half.h's qkv_f2bf, 16 or 8 at a time
   where the CPU has AVX-512 or AVX2 (copy.c) */
void qkv_cpu_to_bf16(int64_t n, uint16_t *o, const float *a);
/* the copy's row from dtype `from` into `to` (copy.c), for kernels that
   convert runs of their own */
qkv_iter_fn qkv_cpu_copy_row(qkv_dtype to, qkv_dtype from);
/* rows x width elements of dtype `from` at src (rows rs, columns cs
   elements apart) into the dense rows x width matrix of `to` at dst, by
   those rows (copy.c): a kernel's tile in its compute dtype */
void qkv_cpu_copy_tile(qkv_dtype to, void *dst, qkv_dtype from, const void *src, int64_t rows,
                       int64_t width, int64_t rs, int64_t cs);
int qkv_cpu_fill(qkv_tensor *dst, double v);
/* op: a qkv_binop, qkv_unop (vm/common/ops.h) */
int qkv_cpu_binary(int op, qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b);
int qkv_cpu_unary(int op, qkv_tensor *out, const qkv_tensor *a);
int qkv_cpu_masked_fill(qkv_tensor *out, const qkv_tensor *mask, double v);
int qkv_cpu_reduce(qkv_redop op, qkv_tensor *out, qkv_tensor *idx, const qkv_tensor *a, int dim,
                   double correction);
int qkv_cpu_matmul(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                   double alpha);
int qkv_cpu_split_products(int parts, double work);
int qkv_cpu_random(qkv_tensor *out, qkv_dist dist, const uint32_t key[2], uint64_t offset);
int qkv_cpu_softmax(qkv_tensor *out, const qkv_tensor *x, int dim);
int qkv_cpu_attention(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                      const qkv_tensor *v, const qkv_tensor *mask, int causal,
                      double scale, qkv_tensor *lse);
int qkv_cpu_where(qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
                  const qkv_tensor *b);
int qkv_cpu_gather(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim);
int qkv_cpu_sort(qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int desc);
int qkv_cpu_attention_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                               const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                               const qkv_tensor *o, const qkv_tensor *go,
                               const qkv_tensor *mask, int causal, double scale,
                               const qkv_tensor *lse);
struct qkv_attn_mods;
int qkv_cpu_attention_mods(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                           const qkv_tensor *v, const qkv_tensor *mask, int causal,
                           double scale, qkv_tensor *lse, struct qkv_attn_mods *M);
int qkv_cpu_attention_mods_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                    const qkv_tensor *q, const qkv_tensor *k,
                                    const qkv_tensor *v, const qkv_tensor *o,
                                    const qkv_tensor *go, const qkv_tensor *mask, int causal,
                                    double scale, const qkv_tensor *lse,
                                    struct qkv_attn_mods *M);
int qkv_cpu_attention_blocks(struct qkv_attn_mods *M, qkv_tensor *kinds, qkv_tensor *spans,
                             int64_t nq, int64_t nk, int64_t bq, int64_t bk, int *runs);
int qkv_cpu_scatter_add(qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim);
int qkv_cpu_softmax_backward(qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g);
int qkv_cpu_log_softmax(qkv_tensor *out, const qkv_tensor *x);
int qkv_cpu_cumsum(qkv_tensor *out, const qkv_tensor *x, int dim);
int qkv_cpu_tri(qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper);
int qkv_cpu_adam(qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v,
                 qkv_tensor *vmax, const qkv_adam_step *h);
int qkv_cpu_layer_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                       const qkv_tensor *b, int64_t n, double eps);
int qkv_cpu_layer_norm_backward(qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                                const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                                int64_t n, double eps);
int qkv_cpu_rms_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                     double eps);
int qkv_cpu_rms_norm_backward(qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                              const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps);

#endif
