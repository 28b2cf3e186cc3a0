/*
** lauxqkv.h -- the auxiliary library of the Lua bindings, as lauxlib.h is
** to Lua's own libraries: the tensor userdata, its checkers and the
** helpers that every part of the module uses (the laux*.c files, which
** register no Lua function and call no part), and the openers of the
** parts (the other l*.c files, which lqkv.c calls).
*/
#ifndef LAUXQKV_H
#define LAUXQKV_H

#include <lua.h>
#include <lauxlib.h>

#include "../vm/core/qkv.h"

#define QKV_TENSOR "qkv.Tensor"
#define QKV_SIZE "qkv.Size"


/*
** {======================================================
** laux.c: arguments, the error of a status, registration
** =======================================================
*/

/* "fname: <the status's message>" unless err is QKV_OK */
void qkvL_check (lua_State *L, const char *fname, int err);
/* registers `both` as methods and as functions of the module, `meth` as
   methods only and `mod` as functions only (each may be NULL) */
void qkvL_register (lua_State *L, int methods, int module, const luaL_Reg *both,
                    const luaL_Reg *meth, const luaL_Reg *mod);

/* checkers: raise a Lua error naming the argument */
int qkvL_checkdim (lua_State *L, int arg, int ndim, int extra);
int qkvL_optdim (lua_State *L, int arg, int ndim, int def);
/* a dim of a tensor that may be 0-d, which takes 1 and -1 (giving 0) as
   PyTorch wraps a scalar's dim: for the ops that take it (reductions,
   softmax, sort, ...), not for those that refuse it (size, select, ...) */
int qkvL_checkdim0 (lua_State *L, int arg, int ndim);
int qkvL_optdim0 (lua_State *L, int arg, int ndim, int def);     /* def where none is given */
int64_t qkvL_checkindex (lua_State *L, int arg, int64_t size, const char *what);
/* the words an out-of-range 0 adds to its message (qkv counts from 1;
   PyTorch's 0 is 1 here), "" for any other i: for a dim, an index, or a
   tensor of indices */
enum { QKVL_DIM, QKVL_INDEX, QKVL_IDS };
const char *qkvL_from1 (lua_Integer i, int kind);
qkv_dtype qkvL_checkdtype (lua_State *L, int arg);
/* why a matmul of dtypes a and b cannot run (how to convert), pushed, or
   NULL when it can */
const char *qkvL_matmul_dtypes (lua_State *L, qkv_dtype a, qkv_dtype b);
/* (lauxshape.c) a shape as numbers from `arg` on, or one table at `arg`:
   its items, or (key not NULL) the list under its key, as PyTorch's
   size=, and its keys dtype and device where dt and dev are given; returns
   ndim.  After the sizes come a dtype (stored in *dt when dt is given),
   a device ("cpu", "cuda"; stored in *dev, the default device when none is
   given, when dev is given) and an options table {dtype =, device =}.  Any
   other key or argument is an error. */
int qkvL_checkshape (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                     qkv_device *dev, const char *key);
/* -1 allowed; no dtype or device */
int qkvL_checksizes (lua_State *L, int arg, int64_t *size, const char *key);
/* the shape at arg alone (a size, or a table whose key is size), then
   `skip` arguments the caller reads, then the dtype and device */
int qkvL_checkshapearg (lua_State *L, int arg, int64_t *size, qkv_dtype *dt,
                        qkv_device *dev, int skip);
/* the dtype and device after a function's other arguments, from arg on, as
   a shape's: [dtype] [device] (either first) [{dtype =, device =}]; got says
   which were given already (another is an error); returns it with those
   given here */
enum { QKVL_GOT_DTYPE = 1, QKVL_GOT_DEVICE = 2 };
int qkvL_checktail (lua_State *L, int arg, qkv_dtype *dt, qkv_device *dev, int got);
/* the keys dtype and device of the table at idx, read raw (its other keys checked
   by the caller), for argument arg: returns got and those it held */
int qkvL_tableopts (lua_State *L, int idx, int arg, qkv_dtype *dt, qkv_device *dev,
                    int got);
const char *qkvL_shape (lua_State *L, const qkv_tensor *t);   /* pushed */

/* devices: where new tensors go; a GPU that cannot be used is an error
   naming why (qkvL_checkcuda) */
qkv_device qkvL_default_device (void);
void qkvL_set_default_device (qkv_device d);
/* "cpu" or "cuda" at arg: 1 and *dev set, else 0 (qkvL_isdevice); or an
   error naming the argument unless it is one (qkvL_checkdevice) */
int qkvL_isdevice (lua_State *L, int arg, qkv_device *dev);
qkv_device qkvL_checkdevice (lua_State *L, int arg);
void qkvL_checkcuda (lua_State *L, const char *name);

/*
** options tables: qkvL_checkopts raises "fname: unknown option 'casual'
** (did you mean 'causal'?)" for a key of the table at arg that is not in
** known (NULL-terminated); nil or none passes.  qkvL_testopts: that
** message, pushed, for the table at arg, or NULL.  qkvL_closest gives the
** name of names near k (within two edits, one per four letters of k), or
** NULL; qkvL_nearer(k, name, &best) whether name is near k and nearer
** than best edits (and updates best); qkvL_suggest the nearest of the
** string keys of the table at idx ('_' ones only for a k that starts
** with '_') and of extra (may be NULL).
** qkvL_noname raises "who has no what 'k' (did you mean '...'?)", or
** "(none)" when no name is near.
*/
void qkvL_checkopts (lua_State *L, int arg, const char *fname, const char *const *known);
void qkvL_noextra (lua_State *L, const char *fname, int n);   /* more than n: an error */
/* the same for the arguments from index first on: the message pushed and
   returned, or NULL (trailing nils do not count) */
const char *qkvL_testextra (lua_State *L, const char *fname, int first, int n);
const char *qkvL_testopts (lua_State *L, int arg, const char *fname,
                           const char *const *known);
/*
** lists: qkvL_testlist gives the message, pushed, for a key of the table
** at arg that is neither an integer 1..n nor a name of known (NULL-ended,
** may be NULL), or NULL: "fname: unknown key 'dtyp' in <what> (did you
** mean 'dtype'?)", "fname: <what> has key 3 past its 2 items".
** qkvL_checklist raises it, for n the table's length, which it returns.
*/
const char *qkvL_testlist (lua_State *L, int arg, const char *fname, const char *what,
                           lua_Integer n, const char *const *known);
lua_Integer qkvL_checklist (lua_State *L, int arg, const char *fname, const char *what,
                            const char *const *known);
/*
** PyTorch's keywords: when the last argument from `first` on is a table,
** its keys named in names (the positions from first on) become those
** positions (x:sum{dim = 1, keepdim = true} is x:sum(1, true)); with
** dtype, its key dtype converts argument 1 first (dtype 2: only a float
** dtype may be given, else an error).  Unknown keys and a
** position given twice are errors naming fname.  Call it first thing.
** Returns the dtype given (a qkv_dtype), or -1 when none was.
*/
int qkvL_keywords (lua_State *L, const char *fname, int first, const char *const *names,
                    int dtype);
extern const char *const qkvL_KW_DIM[];       /* {"dim"} */
extern const char *const qkvL_KW_REDUCE[];    /* {"dim", "keepdim"} */
extern const char *const qkvL_KW_OTHER[];     /* {"other"} */
extern const char *const qkvL_KW_NONE[];      /* {} */
/* the whole argument list of a method x:f(...) that takes the arguments
   names (from #2 on, PyTorch's names) and nothing else: qkvL_keywords,
   then any argument past them is an error (an options table with a key
   it does not take, x:add(y, {alpha = 2}), included), never ignored */
void qkvL_args (lua_State *L, const char *fname, const char *const *names);
const char *qkvL_closest (const char *k, const char *const *names);
int qkvL_nearer (const char *k, const char *name, int *best);
const char *qkvL_suggest (lua_State *L, const char *k, int idx, const char *const *extra);
int qkvL_noname (lua_State *L, const char *who, const char *what, const char *k,
                 int idx, const char *const *extra, const char *none);

/* }====================================================== */


/*
** {======================================================
** lauxtensor.c: the tensor userdata
** =======================================================
*/

/* checkers: raise a Lua error naming the argument */
qkv_tensor *qkvL_checktensor (lua_State *L, int arg);
qkv_tensor *qkvL_totensor (lua_State *L, int arg);       /* NULL if not one */
qkv_tensor *qkvL_istensor (lua_State *L, int arg);  /* NULL if not one; may be closed */
/* luaopen_qkv: registers the metatable at mt, and once it is complete,
   its copy without __gc for the tensors that need no finalizer */
void qkvL_setmetakey (lua_State *L, int mt);
void qkvL_plainmeta (lua_State *L, int mt);
void qkvL_pushplainmeta (lua_State *L);        /* that copy, pushed */
int qkvL_free (lua_State *L);                  /* __gc */
int qkvL_close (lua_State *L);                 /* __close */
/* luaopen_qkv: the C functions of these tables are qkv's bindings (a
   __close under one of them defers the release), and the state's close
   releases what was deferred */
void qkvL_markbindings (lua_State *L, const int *tables, int n);
void qkvL_deferred_atclose (lua_State *L);

/* results */
/* a view sharing the storage of the tensor at index src */
qkv_tensor *qkvL_pushview (lua_State *L, const qkv_tensor *view, int src);
/* t, or a 0-d t seen as (1,) in *v: the dim 1 (and -1) that PyTorch lets a
   scalar have, for the kernels that want dim < ndim */
qkv_tensor *qkvL_one_dim (qkv_tensor *v, const qkv_tensor *t);
qkv_tensor *qkvL_new (lua_State *L, qkv_dtype dt, qkv_device dev, int ndim,
                      const int64_t *size, int zero);
/* the element count of a shape a tensor of dtype dt may have (its nonzero
   sizes multiply within int64 bytes), else "name: shape (...) is too
   large" (name NULL: the running function's) */
int64_t qkvL_checkbytes (lua_State *L, const char *name, int ndim, const int64_t *size,
                         qkv_dtype dt);
qkv_tensor *qkvL_newlike (lua_State *L, const qkv_tensor *t, qkv_dtype dt);

/* moving tensors between the host and the GPU */
/* a copy of t on device d, pushed */
qkv_tensor *qkvL_todevice (lua_State *L, const qkv_tensor *t, qkv_device d,
                           const char *name);
/* the tensor at the top (made on the host) replaced by its copy on the
   default device, when that is not the CPU */
void qkvL_todefault (lua_State *L, const char *name);
/* t when on the host, else its host copy, pushed: for reading elements
   (an expanded dim is copied once and expanded again on the host) */
const qkv_tensor *qkvL_host (lua_State *L, const qkv_tensor *t, const char *name);

/* }====================================================== */


/*
** {======================================================
** lauxops.c: scalars, fills, matmul and masks
** =======================================================
*/

/* A number seen as a 0-d tensor that lives on the C stack: fill v, then
   pass qkvL_scalar(&sc, dtype) to any vm op as an operand. */
typedef struct qkvL_Scalar {
  qkv_tensor t;
  qkv_storage s;
  union { float f; double d; int64_t i; int32_t i32; uint16_t h; unsigned char b; } v;
} qkvL_Scalar;

const qkv_tensor *qkvL_scalar (qkvL_Scalar *sc, qkv_dtype dt);
/* the number or boolean at arg, for a write into a tensor of dtype dt, as
   such a scalar: exact for Lua integers in int64, and an error naming the
   function for a value int64 cannot hold (NaN, inf, beyond 2^63) */
const qkv_tensor *qkvL_checkfill (lua_State *L, int arg, qkv_dtype dt,
                                  const char *name, qkvL_Scalar *sc);
/* out gets the scalar val (of out's dtype) where mask is true */
void qkvL_masked_fill (lua_State *L, const char *name, qkv_tensor *out,
                       const qkv_tensor *mask, const qkv_tensor *val);
/* alpha * a @ b (+ bias, NULL or broadcasting over the rows: qkv_matmul_bias),
   with matmul's shape rules and errors; a failure of the kernel itself
   (Ctrl-C) is reported as `name`'s, the op the user called */
qkv_tensor *qkvL_matmul_bias (lua_State *L, const char *name, const qkv_tensor *a,
                              const qkv_tensor *b, const qkv_tensor *bias, double alpha);
#define qkvL_matmul(L, name, a, b, alpha) qkvL_matmul_bias(L, name, a, b, NULL, alpha)

/*
** masks, true where a query may attend.  qkvL_mask_shape: the scores'
** shape (*n, size) as m broadcasts it, or an error naming name;
** qkvL_fill_where_not: S gets fill (a scalar of S's dtype) where m is
** false; qkvL_neg_inf: -inf as such a scalar; qkvL_causal: bool (nq, nk)
** made on dev, pushed, `keep` where key j <= i + offset for query i
** (offset nk - nq: aligned to the end, as qkv.causal; 0: to the start, as
** PyTorch's is_causal), !keep elsewhere.
*/
void qkvL_mask_shape (lua_State *L, const char *name, const qkv_tensor *m,
                      int *n, int64_t *size);
void qkvL_fill_where_not (lua_State *L, const char *name, qkv_tensor *S,
                          const qkv_tensor *m, const qkv_tensor *fill);
const qkv_tensor *qkvL_neg_inf (qkvL_Scalar *sc, qkv_dtype dt);
/* a float m must hold only 0 and 1, and some 1 (else it may be PyTorch's
   additive mask): qkvL_mask_problem pushes the message that says so (naming
   name, and `instead`: what to pass for an additive mask) and returns 1,
   else returns 0; qkvL_check_mask raises it */
int qkvL_mask_problem (lua_State *L, const char *name, const qkv_tensor *m,
                       const char *instead);
void qkvL_check_mask (lua_State *L, const char *name, const qkv_tensor *m,
                      const char *instead);
qkv_tensor *qkvL_causal (lua_State *L, const char *name, int64_t nq, int64_t nk,
                         int64_t offset, int keep, qkv_device dev);

/* }====================================================== */


/*
** {======================================================
** lauxio.c: files
** =======================================================
*/

/* how much one read or write moves between looks at the interrupt flag:
   tens of milliseconds, even from the page cache */
#define QKVL_IO_CHUNK ((size_t)1 << 24)

/*
** writing: qkvL_write_file writes the parts to path, a regular file
** atomically (a temp file renamed over it), a character device or a FIFO
** in place; it returns 0 or an error that qkvL_writeerr raises.
*/
typedef struct qkvL_Part { const void *p; size_t n; } qkvL_Part;
int qkvL_write_file (const char *path, const qkvL_Part *parts, int nparts);
void qkvL_writeerr (lua_State *L, const char *who, const char *path, int err);
/* a path: a string without NUL bytes */
const char *qkvL_checkpath (lua_State *L, int arg, const char *who);
/* the tensor at arg as a file wants its data: on the CPU and contiguous
   (a contiguous copy is pushed when it is not) */
const qkv_tensor *qkvL_cpudata (lua_State *L, int arg, const char *fn);
/*
** reading: a reader is a userdata (pushed by qkvL_newreader) that owns an
** open file, a buffer and a mapping, so that no error can leak them;
** qkvL_close_reader(L, idx) releases them at once.  qkvL_open_regular
** opens a regular file (anything else is an error) and returns its size;
** qkvL_read_at returns 0, an errno value, -1 when the file is shorter, or
** an interrupt, each of which qkvL_ioerr raises.
*/
typedef struct qkvL_Reader { int fd; void *buf; void *map; size_t maplen; } qkvL_Reader;
qkvL_Reader *qkvL_newreader (lua_State *L);
uint64_t qkvL_open_regular (lua_State *L, qkvL_Reader *r, const char *who, const char *path);
int qkvL_read_at (int fd, void *p, size_t n, uint64_t off);
void qkvL_ioerr (lua_State *L, const char *who, const char *path, int err);
void qkvL_close_reader (lua_State *L, int idx);

/* }====================================================== */


/*
** {======================================================
** lauxgrad.c: autograd's hook
** =======================================================
*/

/*
** A differentiable binding starts with QKVL_GRAD: when qkv.autograd is
** loaded, grad mode is on and an argument takes part in a graph, the op
** runs as its rule instead (which records the node).
*/
extern int qkvL_grad_on;
#define QKVL_GRAD(L, name, self) \
  do { if (qkvL_grad_on) { int n_ = qkvL_grad(L, name, self); if (n_ >= 0) return n_; } } \
  while (0)
int qkvL_grad (lua_State *L, const char *name, lua_CFunction self);
/*
** An in-place binding (x:add_(y), x[i] = v, ...) starts with
** qkvL_grad_inplace once its arguments are in place: while grad mode is on,
** x or an operand that takes part in a graph is an error naming the op,
** since autograd records no in-place op (the gradient would be wrong:
** PyTorch refuses a leaf that requires grad, and records the rest).
*/
void qkvL_grad_inplace (lua_State *L, const char *name);
int qkvL_grad_loaded (void);
void qkvL_grad_field (lua_State *L, int x, const char *k);
void qkvL_grad_set (lua_State *L, int x);
/* for lgrad.c: the running coroutine's grad mode; qkv._autograd's hooks
   (at 1 to 4) installed; the coroutine's own mode set to v (-1: none),
   the one before pushed; the table of the coroutines' modes made */
int qkvL_grad_mode (lua_State *L);
void qkvL_grad_install (lua_State *L);
/* for lgrad.c: qkv._autocast's and qkv._autocast_call's work */
void qkvL_cast_set (lua_State *L);
int qkvL_cast_call (lua_State *L);
void qkvL_grad_setmode (lua_State *L, int v);
void qkvL_grad_init (lua_State *L);

/* }====================================================== */


/* lauxprint.c: the text of a tensor, as PyTorch prints it, pushed */
int qkvL_pushtensorstring (lua_State *L, const qkv_tensor *t);


/*
** The parts of the module (the other l*.c files), which lqkv.c opens:
** each registers its functions into the metatable, the methods table and
** the module table at those indices.
*/
void qkvL_open_tensor (lua_State *L, int mt, int methods, int module);
void qkvL_open_view (lua_State *L, int mt, int methods, int module);
void qkvL_open_math (lua_State *L, int mt, int methods, int module);
void qkvL_open_build (lua_State *L, int mt, int methods, int module);
void qkvL_open_attention (lua_State *L, int mt, int methods, int module);
void qkvL_open_mask (lua_State *L, int mt, int methods, int module);
void qkvL_open_sys (lua_State *L, int mt, int methods, int module);
void qkvL_open_io (lua_State *L, int mt, int methods, int module);
void qkvL_open_select (lua_State *L, int mt, int methods, int module);
void qkvL_open_norm (lua_State *L, int mt, int methods, int module);
void qkvL_open_safetensors (lua_State *L, int mt, int methods, int module);
void qkvL_open_grad (lua_State *L, int mt, int methods, int module);
void qkvL_open_opts (lua_State *L, int mt, int methods, int module);
void qkvL_open_mods (lua_State *L, int mt, int methods, int module);
/* attention's variants (lmods.c): M and its program P from the spec table
   at index spec (every field checked; the spec keeps the tensors alive),
   and err of a call with M as a Lua error naming the public function (an
   index out of range: the mod, the captured tensor, the index) */
struct qkv_attn_mods;
struct qkv_mod_prog;
void qkvL_mods_read (lua_State *L, int spec, struct qkv_attn_mods *M, struct qkv_mod_prog *P);
void qkvL_mods_check (lua_State *L, int spec, const struct qkv_attn_mods *M, int err);
/* attention's output shape into size (its rank returned): the batch dims
   of Q, K, V and the mask m (or NULL) broadcast, then (n_q, d_v); shape
   errors name attention */
int qkvL_attention_shape (lua_State *L, const qkv_tensor *Q, const qkv_tensor *K,
                          const qkv_tensor *V, const qkv_tensor *m, int64_t *size);
/* the gradients dQ, dK, dV of attention's backward, pushed into g, for ts
   = {Q, K, V, out, grad}: 0 (nothing pushed) unless out is what attention
   (Q, K, V, mask m) gives and grad has its shape, all of one float dtype */
int qkvL_attention_grads (lua_State *L, qkv_tensor *const ts[5], const qkv_tensor *m,
                          qkv_tensor *g[3]);

#endif
