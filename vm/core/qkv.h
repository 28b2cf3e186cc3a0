/*
** qkv.h -- the tensor core: dtypes, storages, tensor views and the ops the
** bindings call.  Kernels never see a Lua state; every function here reports
** failure through its return value (QKV_OK or a QKV_E* code).
*/
#ifndef QKV_H
#define QKV_H

#include <stddef.h>
#include <stdint.h>

#define QKV_VERSION "0.1.0"
#define QKV_MAXDIM 8

/* float16 and bfloat16 are stored (2 bytes) and computed in float32, int32
   stored and computed in int64 (vm/dispatch/ops.c), converted back on the way out */
typedef enum { QKV_F32, QKV_F64, QKV_I64, QKV_BOOL, QKV_I32, QKV_F16, QKV_BF16,
               QKV_NDTYPE } qkv_dtype;
typedef enum { QKV_CPU, QKV_CUDA, QKV_NDEV } qkv_device;

/* QKV_ERANGE: a float that an integer dtype cannot hold (NaN, an infinity,
   a value out of its range) met a conversion; qkv_strerror then names the
   first such element, as the op that found it described it */
enum { QKV_OK = 0, QKV_ENOMEM, QKV_EDTYPE, QKV_ENODEV, QKV_EDEVICE, QKV_EINTR,
       QKV_ENOBLAS, QKV_ECLOSED, QKV_EOVERLAP, QKV_EINTERNAL, QKV_ECUDA, QKV_ERANGE,
       QKV_EINDEX };
const char *qkv_strerror(int code);

/*
** Set by a SIGINT handler (the executable's), cleared before each command.
** Ops check it before they start and long kernels between blocks of work;
** either way they return QKV_EINTR and the binding raises "interrupted".
*/
#include <signal.h>
extern volatile sig_atomic_t qkv_interrupted;

/*
** The host threads the CPU kernels may use: QKV_NUM_THREADS, else
** OMP_NUM_THREADS, else the CPUs this process may run on (at most
** QKV_MAX_THREADS); qkv_set_num_threads(n) sets it from now on.
*/
#define QKV_MAX_THREADS 256
int qkv_num_threads(void);
void qkv_set_num_threads(int n);

/* A reference-counted block of memory on one device. */
typedef struct qkv_storage {
  void *data;
  size_t nbytes;
  int refcount;
  qkv_device device;
  int pool;              /* 1 + the size class of a pooled block; 0: its own
                            allocation; < 0: lives in its owner's memory
                            (a Lua userdata), which release never frees */
  int64_t version;       /* in-place writes so far, for autograd's check
                            that what backward saved is unchanged */
} qkv_storage;

/*
** A tensor is a view onto a storage: element (i_0, ..., i_{n-1}) (0-based)
** lives at data + (offset + sum_k i_k * stride[k]) * elsize.  Sizes and
** strides count elements, not bytes; a stride may be 0 (an expanded dim).
** ndim == 0 is a scalar with one element.
*/
typedef struct qkv_tensor {
  int ndim;
  qkv_dtype dtype;
  int64_t size[QKV_MAXDIM];
  int64_t stride[QKV_MAXDIM];
  int64_t offset;
  qkv_storage *storage;
} qkv_tensor;

/* dtypes */
size_t qkv_elsize(qkv_dtype t);
const char *qkv_dtype_name(qkv_dtype t);
int qkv_dtype_from_name(const char *name, qkv_dtype *t);   /* 1 if known */
int qkv_is_float(qkv_dtype t);
/* float16 or bfloat16; inline, so that the CUDA plugin, which links no
   qkv code, asks it too */
static inline int qkv_is_half (qkv_dtype t) { return t == QKV_F16 || t == QKV_BF16; }
/* bool < int32 < int64 < float16, bfloat16 < float32 < float64; float16
   with bfloat16 gives float32, as in PyTorch */
qkv_dtype qkv_promote(qkv_dtype a, qkv_dtype b);
/* PyTorch's result_type of two tensors, a0 and b0 saying which is 0-d: a
   0-d tensor beside one with dims takes part as a number does, lifting the
   category (bool < integer < float: an int64 tensor with a 0-d float64 is
   float64) but not the size within one (bfloat16 with a 0-d float32 stays
   bfloat16, int32 with a 0-d int64 int32); two alike promote as above */
qkv_dtype qkv_promote_dims(qkv_dtype a, int a0, qkv_dtype b, int b0);
/* the dtype the kernels compute dt in: int32 in int64, the halves in
   float32, the rest in themselves */
qkv_dtype qkv_compute_dtype(qkv_dtype dt);
const char *qkv_device_name(qkv_device d);
/* one element of dtype dt at p: read as a double (int64 past 2^53 rounds),
   or as an int64 (floats truncate toward 0, clamped); written from a
   double (floats round, ints truncate and clamp, bool is x != 0) or an
   int64 (exact for the int types) */
double qkv_elem_get(qkv_dtype dt, const void *p);
int64_t qkv_elem_geti(qkv_dtype dt, const void *p);
void qkv_elem_set(qkv_dtype dt, void *p, double x);
void qkv_elem_seti(qkv_dtype dt, void *p, int64_t i);
/* whether the float v goes into dtype dt: always for the floats and bool;
   for int64 and int32 when v is a number whose truncation toward 0 is in
   range (NaN and the infinities never are).  Every conversion of a float
   into an int follows this rule, and one that breaks it is QKV_ERANGE. */
int qkv_fits(qkv_dtype dt, double v);

/*
** The storage of a closed tensor (or of one not yet made): no data, never
** freed.  A closed tensor points here rather than at NULL, so that code
** reading its header stays safe, and every op refuses it (QKV_ECLOSED).
*/
extern qkv_storage qkv_closed_storage;
#define qkv_is_closed(t) ((t)->storage == &qkv_closed_storage)

/* storages and memory accounting */
qkv_storage *qkv_storage_new(qkv_device dev, size_t nbytes, int zero);
void qkv_storage_retain(qkv_storage *s);
void qkv_storage_release(qkv_storage *s);
size_t qkv_memory_live(void);          /* bytes held by live storages */
size_t qkv_memory_limit(void);         /* most bytes live storages may hold */
void qkv_memory_set_limit(size_t nbytes);   /* 0: the machine's RAM */

/* shapes; all return 0 on success, -1 when the shape is impossible */
int64_t qkv_numel(const qkv_tensor *t);
int qkv_numel_of(int ndim, const int64_t *size, size_t elsize, int64_t *numel);
int qkv_is_contiguous(const qkv_tensor *t);
void qkv_set_contiguous(qkv_tensor *t, int ndim, const int64_t *size);
int qkv_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b,
                        int *nout, int64_t *out);
/* view src as `ndim`/`size` with strides 0 on broadcast dims (no copy) */
int qkv_expand(qkv_tensor *dst, const qkv_tensor *src, int ndim, const int64_t *size);
void *qkv_data(const qkv_tensor *t);   /* pointer to element 0 of the view */
/* format "(2, 3)" into buf */
char *qkv_shape_str(char *buf, size_t n, int ndim, const int64_t *size);

/* views: dst is filled in, sharing src's storage (caller retains) */
void qkv_view_transpose(qkv_tensor *dst, const qkv_tensor *src, int d1, int d2);
void qkv_view_permute(qkv_tensor *dst, const qkv_tensor *src, const int *perm);
void qkv_view_narrow(qkv_tensor *dst, const qkv_tensor *src, int d, int64_t start, int64_t len);
void qkv_view_select(qkv_tensor *dst, const qkv_tensor *src, int d, int64_t i);
void qkv_view_unsqueeze(qkv_tensor *dst, const qkv_tensor *src, int d);
void qkv_view_squeeze(qkv_tensor *dst, const qkv_tensor *src, int d);  /* d < 0: all */
/* strides for `src` seen with a new shape of the same numel; -1 when a copy is needed */
int qkv_view_reshape(qkv_tensor *dst, const qkv_tensor *src, int ndim, const int64_t *size);

/* ops: out is allocated by the caller with the result's shape and dtype */
/* the elementwise ops (qkv_binop, qkv_unop) and qkv_binary, qkv_unary
   are declared by their list, vm/common/ops.h, which only the units that
   use it include: a new op rebuilds those alone */
typedef enum {
  QKV_SUM, QKV_MEAN, QKV_MAX, QKV_MIN, QKV_VAR, QKV_STD, QKV_ARGMAX, QKV_ARGMIN,
  QKV_NREDUCE
} qkv_redop;
typedef enum { QKV_UNIFORM, QKV_NORMAL } qkv_dist;

/* dst (contiguous, src's shape and dtype) on another device than src: a
   copy between host and GPU memory (vm/dispatch/plugin.c) */
int qkv_transfer(qkv_tensor *dst, const qkv_tensor *src);

/* converts dtype, src broadcasts; src may overlap dst (copied as through
   a temporary), but dst may not write one element twice (QKV_EOVERLAP: a
   stride-0 dim, as expand makes).  A float src with a value that dst's
   integer dtype cannot hold (qkv_fits) is QKV_ERANGE, dst then written
   with 0 in place of the bad values; fill and masked_fill refuse such a
   value before writing anything */
int qkv_copy(qkv_tensor *dst, const qkv_tensor *src);
/* as qkv_copy, but all or nothing: a float src that dst's integer dtype
   cannot hold (QKV_ERANGE) leaves dst unchanged, since it is converted
   into a temporary first (for writes into a user's tensor: copy_, x[i]) */
int qkv_copy_into(qkv_tensor *dst, const qkv_tensor *src);
int qkv_fill(qkv_tensor *dst, double v);           /* QKV_EOVERLAP as copy */
/* out (and idx, int64, may be NULL) = reduce a along dim; dim < 0 reduces all */
int qkv_reduce(qkv_redop op, qkv_tensor *out, qkv_tensor *idx, const qkv_tensor *a, int dim);
/* the same for VAR or STD over max(0, n - correction), PyTorch's
   correction (qkv_reduce's is 1: unbiased), rounded once into out */
int qkv_reduce_moments(qkv_redop op, qkv_tensor *out, const qkv_tensor *a, int dim,
                       double correction);
/* out (..., m, p) = alpha * a (..., m, n) @ b (..., n, p), batch dims
   broadcast; the same as the product then a multiply by alpha, for any
   alpha (0, inf and NaN included) */
int qkv_matmul(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
               double alpha);
/* the same plus bias (out's dtype and device, broadcasting over out's
   rows), PyTorch's addmm: a float16 or bfloat16 product computed in
   float32 takes the bias before its one rounding */
int qkv_matmul_bias(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *b,
                    const qkv_tensor *bias, double alpha);
/* float32 products' precision, PyTorch's torch.set_float32_matmul_precision,
   kept by the core (backend.c): HIGHEST is float32's own; HIGH and MEDIUM
   run as bfloat16 parts where the backend says that is faster (the CPU's
   bfloat16 units, vm/dispatch/matmul.c), TF32 on the GPU (whose plugin is
   told at load and by the bindings' setter), else as HIGHEST */
typedef enum { QKV_PREC_HIGHEST, QKV_PREC_HIGH, QKV_PREC_MEDIUM } qkv_precision;
void qkv_set_matmul_precision(qkv_precision p);
qkv_precision qkv_matmul_precision(void);
/* the parts on every backend and size, for tests on any machine */
void qkv_force_split_products(int on);
/* out (a copy of x) gets v where mask (bool, broadcasts) is true */
int qkv_masked_fill(qkv_tensor *out, const qkv_tensor *mask, double v);
int qkv_random(qkv_tensor *out, qkv_dist dist);

/*
** In place: out may be one of the inputs (x:add_(y) is qkv_binary(QKV_ADD,
** x, x, y), vm/common/ops.h); an input that overlaps out otherwise is read
** whole first, and an out that would write one element twice (a stride-0
** dim) is QKV_EOVERLAP, for binary, unary and masked_fill as for copy.
*/

/* selection: out = cond ? a : b (cond bool; all broadcast to out, a and b
   converted to out's dtype) */
int qkv_where(qkv_tensor *out, const qkv_tensor *cond, const qkv_tensor *a,
              const qkv_tensor *b);
/* out[i] = a[i with i_dim := idx[i]] (dim 0-based): idx int64 with out's
   shape, its values in [0, a->size[dim]) (the caller checks); a has out's
   rank and dtype, every other dim at least out's */
int qkv_gather(qkv_tensor *out, const qkv_tensor *a, const qkv_tensor *idx, int dim);
/* out[i with i_dim := idx[i]] += src[i] (gather's inverse): idx int64 with
   src's shape, its values in [0, out->size[dim]) (the caller checks); src
   has out's rank and dtype (float32/64, int32/64), every other dim at most
   out's */
int qkv_scatter_add(qkv_tensor *out, const qkv_tensor *idx, const qkv_tensor *src, int dim);
/* values (a's shape and dtype) and indices (int64, 0-based) of a sorted
   along dim, stably; NaN sorts above every number */
int qkv_sort(qkv_tensor *values, qkv_tensor *indices, const qkv_tensor *a, int dim,
             int descending);

/* attention */
/* out (float, x's shape) = softmax of x along dim (0-based); a row that is
   all -inf gives zeros */
int qkv_softmax(qkv_tensor *out, const qkv_tensor *x, int dim);
/* gx (y's shape and float dtype) = y (g - sum(g y)) along dim: softmax's
   backward, y its output and g the output's gradient */
int qkv_softmax_backward(qkv_tensor *gx, const qkv_tensor *y, const qkv_tensor *g, int dim);
/* out (float, x's shape) = x - logsumexp(x) along dim; a row all -inf
   gives -inf (the log of softmax's zeros) */
int qkv_log_softmax(qkv_tensor *out, const qkv_tensor *x, int dim);
/* out (x's shape, float) = x normalised over its last n elements (the
   normalized shape, flattened): (x - mean) / sqrt(var + eps) * w + b,
   biased variance, in double; w and b (n elements each) may be NULL */
int qkv_layer_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w,
                   const qkv_tensor *b, int64_t n, double eps);
/* its backward, given the output's gradient g (x's shape): gx (x's shape
   and float32/64 dtype), and gw, gb (n elements of that dtype, or NULL when
   not wanted), the sums over rows of g xhat and of g; in double */
int qkv_layer_norm_backward(qkv_tensor *gx, qkv_tensor *gw, qkv_tensor *gb,
                            const qkv_tensor *x, const qkv_tensor *g, const qkv_tensor *w,
                            int64_t n, double eps);
/* out (x's shape, float) = x / sqrt(mean(x^2) + eps) * w over its last n
   elements (torch.nn.functional.rms_norm), in double; w (n elements) may
   be NULL; halves computed in float32 */
int qkv_rms_norm(qkv_tensor *out, const qkv_tensor *x, const qkv_tensor *w, int64_t n,
                 double eps);
/* its backward, given the output's gradient g (x's shape): gx (x's shape
   and float32/64 dtype) and gw (n elements of that dtype, or NULL when not
   wanted), the sum over rows of g x inv; in double */
int qkv_rms_norm_backward(qkv_tensor *gx, qkv_tensor *gw, const qkv_tensor *x,
                          const qkv_tensor *g, const qkv_tensor *w, int64_t n, double eps);
/* out (x's shape) = running sums of x along dim (0-based); out's dtype is
   x's float dtype, or int64 for integer and bool x (as torch.cumsum) */
int qkv_cumsum(qkv_tensor *out, const qkv_tensor *x, int dim);
/* one step of Adam (torch.optim.Adam's single-tensor update), in place,
   element by element in p's dtype, in torch's order: with decay = lr * weight_decay when it is
   decoupled (AdamW) else 0, and bc1, bc2 = 1 - beta^step,
     p = p (1 - decay);  m = m + (1 - b1)(g - m);  v = b2 v + (1 - b2) g^2;
     vmax = max(vmax, v) (amsgrad, used for v below);
     p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
   p, g, m, v and vmax (or NULL) one shape, float dtype and device, p, m, v
   and vmax contiguous; a coupled weight decay or maximize is already in g */
typedef struct { double lr, b1, b2, eps, decay, bc1, bc2; } qkv_adam_step;
int qkv_adam(qkv_tensor *p, const qkv_tensor *g, qkv_tensor *m, qkv_tensor *v, qkv_tensor *vmax,
             const qkv_adam_step *h);
/* out (x's shape and dtype, any dtype, at least 2 dims) = x with zeros
   outside the triangle of each matrix of its last two dims: element
   (..., i, j) kept where j - i <= k (tril; upper: j - i >= k, triu), as
   torch.tril and torch.triu; out may be x itself (in place) */
int qkv_tri(qkv_tensor *out, const qkv_tensor *x, int64_t k, int upper);
/* m (bool, (..., nq, nk)) = the causal mask on m's device: keep where key
   j <= i + offset for query i (0-based), !keep elsewhere */
int qkv_causal(qkv_tensor *m, int64_t offset, int keep);
/*
** out (B..., nq, dv) = softmax(q k^T * scale + mask) v without holding the
** nq x nk matrix.  q (B..., nq, dk), k (B..., nk, dk), v (B..., nk, dv) with
** batch dims that broadcast to out's; mask (bool, NULL for none) broadcasts
** to (B..., nq, nk) and keeps the keys where it is true; causal keeps key j
** for query i when j <= i + nk - nq (aligned to the end, as when decoding
** with a cache).  A query with no key left gives zeros.
*/
int qkv_attention(qkv_tensor *out, const qkv_tensor *q, const qkv_tensor *k,
                  const qkv_tensor *v, const qkv_tensor *mask, int causal,
                  double scale);
/* the same for a float32 or float64 out, and lse ((B..., nq), contiguous,
   out's dtype): state for qkv_attention_backward on the same device, which
   the backend may leave unwritten if its backward does not read it (the
   CPU's writes each query's log-sum-exp there) */
int qkv_attention_lse(qkv_tensor *out, qkv_tensor *lse, const qkv_tensor *q,
                      const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                      int causal, double scale);

/*
** attention's composed path, which keeps the weights: w (B..., nq, nk) =
** softmax(q k^T * scale) with -inf where mask (any dtype, false or 0 =
** masked; NULL for none) is, and where causal masks (as qkv_attention's),
** then out (B..., nq, dv) = w v.  q, k, v and mask broadcast to w's batch
** dims; out and w, contiguous, of q's float dtype (k's and v's).  A
** query with no key left gets zero weights.  Each step is an op of the
** dispatch (a product, masked fills, softmax, a product).
*/
int qkv_attention_weights(qkv_tensor *out, qkv_tensor *w, const qkv_tensor *q,
                          const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                          int causal, double scale);

/*
** The gradients of out = attention(q, k, v, mask, causal, scale) given
** go = dL/dout, recomputing the scores tile by tile (no n_q x n_k block is
** kept): dq (B..., nq, dk), dk (B..., nk, dk), dv (B..., nk, dv), contiguous,
** of out's float dtype and batch dims (B...: q, k, v, o, go broadcast to
** them; the caller sums each back to its input's shape).  dk and dv may
** instead have qkv_attention_kv_grad_batch's batch dims: 1 over the
** trailing dims where k and v broadcast, as grouped-query heads' do, each
** group's keys summed there without a whole one held where the backend
** can.  lse: NULL, or what qkv_attention_lse gave with o, which saves a
** pass over the scores.
*/
void qkv_attention_kv_grad_batch(int64_t *size, const qkv_tensor *o, const qkv_tensor *k,
                                 const qkv_tensor *v);
int qkv_attention_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                           const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                           const qkv_tensor *o, const qkv_tensor *go,
                           const qkv_tensor *mask, int causal, double scale,
                           const qkv_tensor *lse);

/*
** Attention variants (issue 48): qkv_attention_lse and _backward with a
** score_mod/mask_mod program, its captured tensors and a block mask's
** kinds (vm/common/mods.h), on a backend that has them (the CPU's;
** QKV_ENODEV elsewhere).  QKV_EINDEX: a captured tensor's index out of
** range, M's fail_* say which.  The backward also adds each captured
** tensor's gradient into M's float64 sums where M asks for them.
*/
struct qkv_attn_mods;
int qkv_attention_mods(qkv_tensor *out, qkv_tensor *lse, const qkv_tensor *q,
                       const qkv_tensor *k, const qkv_tensor *v, const qkv_tensor *mask,
                       int causal, double scale, struct qkv_attn_mods *M);
int qkv_attention_mods_backward(qkv_tensor *dq, qkv_tensor *dk, qkv_tensor *dv,
                                const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                                const qkv_tensor *o, const qkv_tensor *go,
                                const qkv_tensor *mask, int causal, double scale,
                                const qkv_tensor *lse, struct qkv_attn_mods *M);
/* a mask program's block kinds into kinds, int32 (kb, kh, nqb, nkb)
   contiguous, blocks of bq queries and bk keys of nq x nk; and, spans
   not NULL (int32 (kb, kh, nq, 2) contiguous), each query's run of kept
   keys, *runs 1 when every query's kept keys are one run (mods.h) */
int qkv_attention_blocks(struct qkv_attn_mods *M, qkv_tensor *kinds, qkv_tensor *spans,
                         int64_t nq, int64_t nk, int64_t bq, int64_t bk, int *runs);

/* the generator: Philox 4x32-10 keyed by the seed, counter advanced per call */
void qkv_seed(uint64_t seed);
uint64_t qkv_initial_seed(void);
void qkv_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
