/*
** lselect.c -- selection and indexing (where, tril, triu, any, all, the
** logical ops, index_select, gather, embedding, sort, topk), clamp, mm and
** bmm, the dtype shorthands (float, double, long, bool) and the in-place
** ops (add_, sub_, mul_, div_, fill_, copy_, zero_, clamp_, masked_fill_),
** which return the tensor they wrote.  Positions are 1-based, as every
** index in qkv.
*/
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/ops.h"

static qkv_tensor *opttensor (lua_State *L, int arg) {
  return qkvL_istensor(L, arg) ? qkvL_checktensor(L, arg) : NULL;
}

static int is_number (lua_State *L, int arg) {
  return lua_type(L, arg) == LUA_TNUMBER || lua_type(L, arg) == LUA_TBOOLEAN;
}

/* the dtype a number at arg gives with a tensor of dtype dt (PyTorch's
   weak scalars: a float number lifts an integral tensor to float32) */
static qkv_dtype with_number (lua_State *L, qkv_dtype dt, int arg) {
  if (qkv_is_float(dt) || lua_type(L, arg) == LUA_TBOOLEAN) return dt;
  return lua_isinteger(L, arg) ? (dt == QKV_BOOL ? QKV_I64 : dt) : QKV_F32;
}

/* the tensor at arg, or the number there as a 0-d tensor of dtype dt */
static const qkv_tensor *operand (lua_State *L, int arg, const char *name,
                                  qkv_dtype dt, qkvL_Scalar *sc) {
  qkv_tensor *t = opttensor(L, arg);
  if (t) return t;
  if (!is_number(L, arg))
    luaL_error(L, "%s: bad argument #%d (tensor or number expected, got %s)", name, arg,
               luaL_typename(L, arg));
  return qkvL_checkfill(L, arg, dt, name, sc);
}

static void broadcast3 (lua_State *L, const char *name, const qkv_tensor *a,
                        const qkv_tensor *b, const qkv_tensor *c, int *n, int64_t *size) {
  if (qkv_broadcast_shape(a->ndim, a->size, b->ndim, b->size, n, size) == 0 &&
      (!c || qkv_broadcast_shape(*n, size, c->ndim, c->size, n, size) == 0))
    return;
  const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
  const char *scs = c ? qkvL_shape(L, c) : NULL;
  if (c) luaL_error(L, "%s: shapes %s, %s and %s do not broadcast", name, sa, sb, scs);
  luaL_error(L, "%s: shapes %s and %s do not broadcast", name, sa, sb);
}

/*
** A position tensor made 0-based (a copy, int64), checked against n.  The
** 1-based positions are checked before 1 is taken off, so that no value
** (math.mininteger) overflows on the way.
*/
static qkv_tensor *positions (lua_State *L, const char *name, const qkv_tensor *idx,
                              int64_t n, int dim) {
  if (idx->dtype != QKV_I64)
    luaL_error(L, "%s: index must be an int64 tensor, got %s", name,
               qkv_dtype_name(idx->dtype));
  int64_t mm[2], one_size = 1;
  for (int op = 0; op < 2 && qkv_numel(idx) > 0; op++) {  /* the least and the largest */
    qkv_tensor *r = qkvL_new(L, QKV_I64, idx->storage->device, 0, &one_size, 0);
    qkvL_check(L, name, qkv_reduce(op ? QKV_MAX : QKV_MIN, r, NULL, idx, -1));
    const qkv_tensor *h = qkvL_host(L, r, name);
    mm[op] = *(int64_t *)qkv_data(h);
    lua_pop(L, h == r ? 1 : 2);
    if (mm[op] < 1 || mm[op] > n)
      luaL_error(L, "%s: index %I is out of range for dim %d of size %I%s", name,
                 (lua_Integer)mm[op], dim + 1, (lua_Integer)n, qkvL_from1(mm[op], QKVL_IDS));
  }
  qkv_tensor *z = qkvL_newlike(L, idx, QKV_I64);
  qkvL_Scalar one;
  one.v.i = 1;
  qkvL_check(L, name, qkv_binary(QKV_SUB, z, idx, qkvL_scalar(&one, QKV_I64)));
  return z;
}


/* PyTorch's names of the methods' arguments from #2 on (qkvL_args) */
static const char *const KW_WHERE[] = {"condition", "other", NULL},
  *const KW_DIAGONAL[] = {"diagonal", NULL}, *const KW_DIM_INDEX[] = {"dim", "index", NULL},
  *const KW_SCATTER[] = {"dim", "index", "src", NULL},
  *const KW_INDEX_ADD[] = {"dim", "index", "source", NULL},
  *const KW_WEIGHT[] = {"weight", NULL}, *const KW_SORT[] = {"dim", "descending", NULL},
  *const KW_TOPK[] = {"k", "dim", "largest", NULL}, *const KW_CLAMP[] = {"min", "max", NULL},
  *const KW_MAT2[] = {"mat2", NULL}, *const KW_VALUE[] = {"value", NULL},
  *const KW_SRC[] = {"src", NULL}, *const KW_MASK_VALUE[] = {"mask", "value", NULL};


/* where, tril, triu */

/* qkv.where(cond, a, b): a where cond is true, else b */
static int s_where3 (lua_State *L, int c, int ia, int ib) {
  qkv_tensor *cond = qkvL_checktensor(L, c);
  if (cond->dtype != QKV_BOOL)
    return luaL_error(L, "where: condition must be a bool tensor, got %s",
                      qkv_dtype_name(cond->dtype));
  qkv_tensor *ta = opttensor(L, ia), *tb = opttensor(L, ib);
  if (!ta && !tb && (!is_number(L, ia) || !is_number(L, ib)))
    return luaL_error(L, "where: expected tensors or numbers for a and b");
  qkv_dtype dt = ta && tb ? qkv_promote_dims(ta->dtype, ta->ndim == 0, tb->dtype, tb->ndim == 0)
               : ta ? with_number(L, ta->dtype, ib) : tb ? with_number(L, tb->dtype, ia)
               : (lua_isinteger(L, ia) && lua_isinteger(L, ib) ? QKV_I64 : QKV_F32);
  qkvL_Scalar sa, sb;
  const qkv_tensor *a = operand(L, ia, "where", dt, &sa), *b = operand(L, ib, "where", dt, &sb);
  int n;
  int64_t size[QKV_MAXDIM];
  broadcast3(L, "where", cond, a, b, &n, size);
  qkv_tensor *out = qkvL_new(L, dt, cond->storage->device, n, size, 0);
  qkvL_check(L, "where", qkv_where(out, cond, a, b));
  return 1;
}

static int s_where (lua_State *L) {
  QKVL_GRAD(L, "where", s_where);
  return s_where3(L, 1, 2, 3);
}
/* x:where(cond, y): x where cond, else y, as torch.Tensor.where */
static int s_where_method (lua_State *L) {
  qkvL_args(L, "where", KW_WHERE);
  qkvL_checktensor(L, 1);
  return s_where3(L, 2, 1, 3);
}

/* x:tril([k]), x:triu([k]): a copy of x, zeros outside the band of its
   last two dims (j - i <= k for tril, j - i >= k for triu), made by the
   backend on x's device */
static int triangle (lua_State *L, const char *name, int upper) {
  qkv_tensor *x = qkvL_checktensor(L, 1);
  lua_Integer k = luaL_optinteger(L, 2, 0);
  if (x->ndim < 2) {
    const char *s = qkvL_shape(L, x);
    return luaL_error(L, "%s: x must have at least 2 dims (..., n, m), got %s", name, s);
  }
  qkv_tensor *out = qkvL_newlike(L, x, x->dtype);
  qkvL_check(L, name, qkv_tri(out, x, (int64_t)k, upper));
  return 1;
}

static int s_tril (lua_State *L) {
  qkvL_args(L, "tril", KW_DIAGONAL);
  QKVL_GRAD(L, "tril", s_tril);
  return triangle(L, "tril", 0);
}
static int s_triu (lua_State *L) {
  qkvL_args(L, "triu", KW_DIAGONAL);
  QKVL_GRAD(L, "triu", s_triu);
  return triangle(L, "triu", 1);
}


/* any, all and the logical ops, on "nonzero is true" */

static qkv_tensor *truth (lua_State *L, const char *name, const qkv_tensor *x, int want) {
  qkv_tensor *b = qkvL_newlike(L, x, QKV_BOOL);
  qkvL_Scalar zero;
  zero.v.b = 0;
  qkvL_check(L, name, qkv_binary(want ? QKV_NE : QKV_EQ, b, x, qkvL_scalar(&zero, QKV_BOOL)));
  return b;
}

/* any: some element nonzero (a count of them > 0); all: none zero */
static int anyall (lua_State *L, const char *name, int any) {
  qkvL_keywords(L, name, 2, qkvL_KW_REDUCE, 0);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  int all_dims = lua_isnoneornil(L, 2), dim = all_dims ? -1 : qkvL_checkdim0(L, 2, x->ndim);
  int keep = lua_toboolean(L, 3);
  if (x->ndim == 0) all_dims = 1, dim = -1;      /* a 0-d x along its dim: all of it */
  qkv_tensor *b = truth(L, name, x, any);
  int64_t size[QKV_MAXDIM];
  int n = 0;
  for (int i = 0; !all_dims && i < x->ndim; i++)
    if (i != dim) size[n++] = x->size[i];
    else if (keep) size[n++] = 1;
  qkv_tensor *count = qkvL_new(L, QKV_I64, x->storage->device, n, size, 0);
  qkvL_check(L, name, qkv_reduce(QKV_SUM, count, NULL, b, dim));
  qkv_tensor *out = qkvL_new(L, QKV_BOOL, x->storage->device, n, size, 0);
  qkvL_Scalar zero;
  zero.v.i = 0;
  qkvL_check(L, name, qkv_binary(any ? QKV_GT : QKV_EQ, out, count,
                                 qkvL_scalar(&zero, QKV_I64)));
  return 1;
}

static int s_any (lua_State *L) { return anyall(L, "any", 1); }
static int s_all (lua_State *L) { return anyall(L, "all", 0); }

/*
** On bools, and(x, y) is x > not y and or(x, y) is x >= not y (1 > 0 only
** when x and y; 0 >= 1 fails only when neither), xor is x ~= y: each one
** comparison after the operands are made bool.
*/
static int logical (lua_State *L, const char *name, qkv_binop op) {
  qkvL_args(L, name, qkvL_KW_OTHER);
  qkv_tensor *x = qkvL_checktensor(L, 1), *y = qkvL_checktensor(L, 2);
  int n;
  int64_t size[QKV_MAXDIM];
  broadcast3(L, name, x, y, NULL, &n, size);
  qkv_tensor *bx = truth(L, name, x, 1), *by = truth(L, name, y, op == QKV_NE);
  qkv_tensor *out = qkvL_new(L, QKV_BOOL, x->storage->device, n, size, 0);
  qkvL_check(L, name, qkv_binary(op, out, bx, by));
  return 1;
}

static int s_and (lua_State *L) { return logical(L, "logical_and", QKV_GT); }
static int s_or (lua_State *L) { return logical(L, "logical_or", QKV_GE); }
static int s_xor (lua_State *L) { return logical(L, "logical_xor", QKV_NE); }
static int s_not (lua_State *L) {
  qkvL_args(L, "logical_not", qkvL_KW_NONE);
  truth(L, "logical_not", qkvL_checktensor(L, 1), 0);
  return 1;
}

/* ~x: logical_not of a bool tensor, the bitwise not (-1 - x) of an
   integer one, as PyTorch's ~; a float tensor has none */
static int s_bnot (lua_State *L) {
  qkv_tensor *x = qkvL_checktensor(L, 1);
  if (x->dtype == QKV_BOOL) { lua_settop(L, 1); return s_not(L); }  /* ~x passes x twice */
  if (qkv_is_float(x->dtype))
    return luaL_error(L, "bnot: ~x needs a bool or integer tensor, got %s",
                      qkv_dtype_name(x->dtype));
  qkv_tensor *out = qkvL_newlike(L, x, x->dtype);
  qkvL_Scalar m1;
  m1.v.i = -1;
  qkvL_check(L, "bnot", qkv_binary(QKV_SUB, out, qkvL_scalar(&m1, QKV_I64), x));
  return 1;
}


/* index_select, gather, embedding */

/* a along dim at the 1-based positions of the 1-D idx */
static qkv_tensor *index_select (lua_State *L, const char *name, const qkv_tensor *a,
                                 int dim, const qkv_tensor *idx) {
  if (idx->ndim != 1) {
    const char *s = qkvL_shape(L, idx);
    luaL_error(L, "%s: index must be 1-D, got %s", name, s);
  }
  qkv_tensor *z = positions(L, name, idx, a->size[dim], dim), e = *z;
  int64_t size[QKV_MAXDIM];
  memcpy(size, a->size, sizeof size);
  size[dim] = idx->size[0];
  for (int d = 0; d < a->ndim; d++) e.stride[d] = d == dim ? z->stride[0] : 0;
  e.ndim = a->ndim;
  memcpy(e.size, size, sizeof size);
  qkv_tensor *out = qkvL_new(L, a->dtype, a->storage->device, a->ndim, size, 0);
  qkvL_check(L, name, qkv_gather(out, a, &e, dim));
  return out;
}

static int s_index_select (lua_State *L) {
  qkvL_args(L, "index_select", KW_DIM_INDEX);
  QKVL_GRAD(L, "index_select", s_index_select);
  qkv_tensor *a = qkvL_checktensor(L, 1);
  int dim = qkvL_checkdim(L, 2, a->ndim, 0);
  index_select(L, "index_select", a, dim, qkvL_checktensor(L, 3));
  return 1;
}

static int s_gather (lua_State *L) {
  qkvL_args(L, "gather", KW_DIM_INDEX);
  QKVL_GRAD(L, "gather", s_gather);
  qkv_tensor *a = qkvL_checktensor(L, 1), a1, z1, o1;
  int dim = qkvL_checkdim0(L, 2, a->ndim);
  qkv_tensor *idx = qkvL_checktensor(L, 3);
  int ok = idx->ndim == a->ndim;
  for (int d = 0; ok && d < a->ndim; d++) ok = d == dim || idx->size[d] <= a->size[d];
  if (!ok) {
    const char *sa = qkvL_shape(L, a), *si = qkvL_shape(L, idx);
    return luaL_error(L, "gather: x is %s but index is %s: index needs x's dims, "
                      "none larger except dim %d", sa, si, dim + 1);
  }
  qkv_tensor *z = positions(L, "gather", idx, a->ndim ? a->size[dim] : 1, dim);
  qkv_tensor *out = qkvL_newlike(L, idx, a->dtype);
  qkvL_check(L, "gather", qkv_gather(qkvL_one_dim(&o1, out), qkvL_one_dim(&a1, a), qkvL_one_dim(&z1, z), dim));
  return 1;
}

/* qkv.embedding(ids, W): the rows of W (V, d) at the int64 ids, (ids..., d) */
/* x:scatter_add_(dim, index, src): x[i with i_dim := index[i]] += src[i],
   gather's inverse, over index's positions: as PyTorch, index may be
   smaller than src in any dim (the rest of src is not read) and than x in
   any dim; larger than x only along dim. x:index_add_(dim, index, src):
   the slices of src added at the 1-D index's positions along dim. *sub is
   src's part that index covers (a view). */
static qkv_tensor *scatter_checked (lua_State *L, const char *name, qkv_tensor *x, int dim,
                                    const qkv_tensor *idx, const qkv_tensor *src,
                                    qkv_tensor *sub) {
  int ok = idx->ndim == x->ndim && src->ndim == x->ndim;
  for (int d = 0; ok && d < x->ndim; d++)
    ok = idx->size[d] <= src->size[d] && (d == dim || idx->size[d] <= x->size[d]);
  if (!ok) {
    const char *sx = qkvL_shape(L, x), *si = qkvL_shape(L, idx), *ss = qkvL_shape(L, src);
    luaL_error(L, "%s: x is %s, index %s and src %s: index needs x's dims, none larger than "
               "src's, nor than x's except dim %d", name, sx, si, ss, dim + 1);
  }
  if (src->dtype != x->dtype)
    luaL_error(L, "%s: src is %s but x is %s", name, qkv_dtype_name(src->dtype),
               qkv_dtype_name(x->dtype));
  *sub = *src;
  memcpy(sub->size, idx->size, sizeof sub->size);
  return positions(L, name, idx, x->ndim ? x->size[dim] : 1, dim);
}

static int s_scatter_add_ (lua_State *L) {
  qkvL_args(L, "scatter_add_", KW_SCATTER);
  qkvL_grad_inplace(L, "scatter_add_");
  qkv_tensor *x = qkvL_checktensor(L, 1), sub, x1, z1, s1;
  int dim = qkvL_checkdim0(L, 2, x->ndim);
  qkv_tensor *idx = qkvL_checktensor(L, 3), *src = qkvL_checktensor(L, 4);
  qkv_tensor *z = scatter_checked(L, "scatter_add_", x, dim, idx, src, &sub);
  qkvL_check(L, "scatter_add_", qkv_scatter_add(qkvL_one_dim(&x1, x), qkvL_one_dim(&z1, z),
                                                qkvL_one_dim(&s1, &sub), dim));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_index_add_ (lua_State *L) {
  qkvL_args(L, "index_add_", KW_INDEX_ADD);
  qkvL_grad_inplace(L, "index_add_");
  qkv_tensor *x = qkvL_checktensor(L, 1);
  int dim = qkvL_checkdim(L, 2, x->ndim, 0);
  qkv_tensor *idx = qkvL_checktensor(L, 3), *src = qkvL_checktensor(L, 4), e;
  int fits = idx->ndim == 1 && src->ndim == x->ndim && src->size[dim] == idx->size[0];
  for (int d = 0; fits && d < x->ndim; d++)   /* (PyTorch's: a smaller src was added into a corner) */
    fits = d == dim || src->size[d] == x->size[d];
  if (!fits) {
    const char *sx = qkvL_shape(L, x), *si = qkvL_shape(L, idx), *ss = qkvL_shape(L, src);
    return luaL_error(L, "index_add_: x is %s, index %s and src %s: index must be 1-D with "
                      "src's size at dim %d, and src x's size at every other dim", sx, si, ss,
                      dim + 1);
  }
  e = *idx;                      /* index seen with src's shape */
  for (int d = 0; d < src->ndim; d++) {
    e.size[d] = src->size[d];
    e.stride[d] = d == dim ? idx->stride[0] : 0;
  }
  e.ndim = src->ndim;
  qkv_tensor sub, *z = scatter_checked(L, "index_add_", x, dim, &e, src, &sub);
  qkvL_check(L, "index_add_", qkv_scatter_add(x, z, &sub, dim));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_embedding (lua_State *L) {
  qkvL_args(L, "embedding", KW_WEIGHT);          /* padding_idx, max_norm: errors */
  QKVL_GRAD(L, "embedding", s_embedding);
  qkv_tensor *ids = qkvL_checktensor(L, 1), *W = qkvL_checktensor(L, 2), flat;
  if (W->ndim != 2) {
    const char *s = qkvL_shape(L, W);
    return luaL_error(L, "embedding: W must be (num_embeddings, dim), got %s", s);
  }
  if (ids->ndim >= QKV_MAXDIM) return luaL_error(L, "embedding: ids has too many dims");
  int64_t n = qkv_numel(ids), size[QKV_MAXDIM];
  if (qkv_view_reshape(&flat, ids, 1, &n) != 0) {
    qkv_tensor *c = qkvL_newlike(L, ids, ids->dtype);
    qkvL_check(L, "embedding", qkv_copy(c, ids));
    qkv_view_reshape(&flat, c, 1, &n);
  }
  qkv_tensor *rows = index_select(L, "embedding", W, 0, &flat);
  memcpy(size, ids->size, sizeof(int64_t) * (size_t)ids->ndim);
  size[ids->ndim] = W->size[1];
  qkv_tensor v;
  qkv_view_reshape(&v, rows, ids->ndim + 1, size);
  qkvL_pushview(L, &v, lua_gettop(L));
  return 1;
}


/* sort, topk */

/* pushes values and indices (1-based) of x sorted along dim */
static void sorted (lua_State *L, const char *name, const qkv_tensor *x, int dim, int desc) {
  qkv_tensor *v = qkvL_newlike(L, x, x->dtype), *ix = qkvL_newlike(L, x, QKV_I64);
  qkvL_check(L, name, qkv_sort(v, ix, x, dim, desc));
  qkvL_Scalar one;
  one.v.i = 1;
  qkvL_check(L, name, qkv_binary(QKV_ADD, ix, ix, qkvL_scalar(&one, QKV_I64)));
}

static int s_sort (lua_State *L) {
  qkvL_args(L, "sort", KW_SORT);
  QKVL_GRAD(L, "sort", s_sort);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  int dim = qkvL_optdim0(L, 2, x->ndim, x->ndim ? x->ndim - 1 : 0);
  sorted(L, "sort", x, dim, lua_toboolean(L, 3));
  return 2;
}

/* x:topk(k [, dim [, largest]]): the k largest (or smallest), sorted */
static int s_topk (lua_State *L) {
  qkvL_args(L, "topk", KW_TOPK);
  QKVL_GRAD(L, "topk", s_topk);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  lua_Integer k = luaL_checkinteger(L, 2);
  int dim = qkvL_optdim0(L, 3, x->ndim, x->ndim ? x->ndim - 1 : 0);
  int largest = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
  int64_t n = x->ndim ? x->size[dim] : 1;
  if (k < 0 || k > n)
    return luaL_error(L, "topk: k = %I is out of range for dim %d of size %I", k,
                      dim + 1, (lua_Integer)n);
  sorted(L, "topk", x, dim, largest);
  int top = lua_gettop(L);
  for (int j = 0; j < 2; j++) {          /* the first k of each, copied */
    qkv_tensor v = *qkvL_checktensor(L, top - 1 + j);
    if (x->ndim) qkv_view_narrow(&v, &v, dim, 0, k);
    qkv_tensor *c = qkvL_newlike(L, &v, v.dtype);
    qkvL_check(L, "topk", qkv_copy(c, &v));
  }
  return 2;
}


/* clamp, mm, bmm */

/* out = min(max(x, lo), hi), either bound nil, a number or a tensor */
static void clamp_into (lua_State *L, const char *name, qkv_tensor *out,
                        const qkv_tensor *x, int lo, int hi) {
  qkvL_Scalar sl, sh;
  if (lua_isnoneornil(L, lo) && lua_isnoneornil(L, hi))
    luaL_error(L, "%s: at least one of min and max must be given", name);
  const qkv_tensor *cur = x;
  if (!lua_isnoneornil(L, lo)) {
    qkvL_check(L, name, qkv_binary(QKV_MAXIMUM, out, cur, operand(L, lo, name, out->dtype, &sl)));
    cur = out;
  }
  if (!lua_isnoneornil(L, hi))
    qkvL_check(L, name, qkv_binary(QKV_MINIMUM, out, cur, operand(L, hi, name, out->dtype, &sh)));
}

static qkv_dtype clamp_dtype (lua_State *L, const char *name, const qkv_tensor *x) {
  if (x->dtype == QKV_BOOL) luaL_error(L, "%s: not defined for bool tensors", name);
  qkv_dtype dt = x->dtype;
  for (int arg = 2; arg <= 3; arg++) {
    qkv_tensor *t = opttensor(L, arg);
    if (t) dt = qkv_promote_dims(dt, 0, t->dtype, t->ndim == 0 && x->ndim > 0);
    else if (is_number(L, arg)) dt = with_number(L, dt, arg);
  }
  return dt;
}

static int s_clamp (lua_State *L) {
  qkvL_args(L, "clamp", KW_CLAMP);
  QKVL_GRAD(L, "clamp", s_clamp);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  lua_settop(L, 3);                      /* the bounds stay at 2 and 3 */
  qkv_tensor *out = qkvL_newlike(L, x, clamp_dtype(L, "clamp", x));
  clamp_into(L, "clamp", out, x, 2, 3);
  return 1;
}

static int strict_matmul (lua_State *L, const char *name, int nd) {
  qkv_tensor *a = qkvL_checktensor(L, 1), *b = qkvL_checktensor(L, 2);
  int ok = a->ndim == nd && b->ndim == nd;
  if (ok && nd == 3) ok = a->size[0] == b->size[0];
  if (!ok) {
    const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
    return luaL_error(L, "%s: expects %s, got %s and %s", name,
                      nd == 2 ? "two 2-D tensors" : "two 3-D tensors with the same batch",
                      sa, sb);
  }
  const char *why = qkvL_matmul_dtypes(L, a->dtype, b->dtype);
  if (why == NULL) why = a->size[nd - 1] != b->size[nd - 2]
      ? lua_pushfstring(L, "inner dims %I and %I differ", (lua_Integer)a->size[nd - 1],
                        (lua_Integer)b->size[nd - 2])
      : NULL;
  if (why) {
    const char *sa = qkvL_shape(L, a), *sb = qkvL_shape(L, b);
    return luaL_error(L, "%s: %s @ %s: %s", name, sa, sb, why);
  }
  qkvL_matmul(L, name, a, b, 1);
  return 1;
}

static int s_mm (lua_State *L) {
  qkvL_args(L, "mm", KW_MAT2);
  QKVL_GRAD(L, "mm", s_mm);
  return strict_matmul(L, "mm", 2);
}
static int s_bmm (lua_State *L) {
  qkvL_args(L, "bmm", KW_MAT2);
  QKVL_GRAD(L, "bmm", s_bmm);
  return strict_matmul(L, "bmm", 3);
}


/* dtype shorthands */

static int convert (lua_State *L, qkv_dtype dt, const char *name) {
  qkvL_args(L, name, qkvL_KW_NONE);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  if (x->dtype == dt) { lua_settop(L, 1); return 1; }
  qkv_tensor *out = qkvL_newlike(L, x, dt);
  qkvL_check(L, name, qkv_copy(out, x));
  return 1;
}

static int s_float (lua_State *L) {
  QKVL_GRAD(L, "float", s_float);
  return convert(L, QKV_F32, "float");
}
static int s_double (lua_State *L) {
  QKVL_GRAD(L, "double", s_double);
  return convert(L, QKV_F64, "double");
}
static int s_long (lua_State *L) { return convert(L, QKV_I64, "long"); }
static int s_int (lua_State *L) { return convert(L, QKV_I32, "int"); }
static int s_bool (lua_State *L) { return convert(L, QKV_BOOL, "bool"); }


/* in place: the result keeps x's dtype, x's shape, and is x */

/* PyTorch's can_cast: a float result cannot go into an integral tensor,
   nor a number into a bool one */
static void check_cast (lua_State *L, const char *name, qkv_dtype result, qkv_dtype into) {
  int bad = (qkv_is_float(result) && !qkv_is_float(into)) ||
            (result != QKV_BOOL && into == QKV_BOOL);
  if (bad)
    luaL_error(L, "%s: the result is %s, which x (%s) cannot hold; in-place ops keep "
               "x's dtype (use the op without _ for a new tensor)", name,
               qkv_dtype_name(result), qkv_dtype_name(into));
}

/* that src broadcasts to x's shape without widening it */
static void check_into (lua_State *L, const char *name, const qkv_tensor *x,
                        const qkv_tensor *src, const char *what) {
  qkv_tensor e;
  if (qkv_expand(&e, src, x->ndim, x->size) == 0) return;
  const char *ss = qkvL_shape(L, src), *sx = qkvL_shape(L, x);
  luaL_error(L, "%s: %s of shape %s does not broadcast to x's shape %s", name, what, ss, sx);
}

static int inplace (lua_State *L, qkv_binop op, const char *name) {
  qkvL_args(L, name, qkvL_KW_OTHER);
  qkvL_grad_inplace(L, name);
  qkv_tensor *x = qkvL_checktensor(L, 1), *y = opttensor(L, 2);
  qkvL_Scalar sc;
  qkv_dtype dt = y ? qkv_promote_dims(x->dtype, x->ndim == 0, y->dtype, y->ndim == 0)
               : is_number(L, 2)
               ? with_number(L, x->dtype, 2) : x->dtype;
  if (dt == QKV_BOOL) dt = QKV_I64;
  if (op == QKV_DIV && !qkv_is_float(dt)) dt = QKV_F32;
  check_cast(L, name, dt, x->dtype);
  const qkv_tensor *b = operand(L, 2, name, y ? y->dtype : qkv_binop_number_dtype(op, dt), &sc);
  check_into(L, name, x, b, "y");
  qkvL_check(L, name, qkv_binary(op, x, x, b));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_add_ (lua_State *L) { return inplace(L, QKV_ADD, "add_"); }
static int s_sub_ (lua_State *L) { return inplace(L, QKV_SUB, "sub_"); }
static int s_mul_ (lua_State *L) { return inplace(L, QKV_MUL, "mul_"); }
static int s_div_ (lua_State *L) { return inplace(L, QKV_DIV, "div_"); }

static int s_fill_ (lua_State *L) {
  qkvL_args(L, "fill_", KW_VALUE);
  qkvL_grad_inplace(L, "fill_");
  qkv_tensor *x = qkvL_checktensor(L, 1);
  qkvL_Scalar sc;
  qkvL_check(L, "fill_", qkv_copy(x, qkvL_checkfill(L, 2, x->dtype, "fill_", &sc)));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_zero_ (lua_State *L) {
  qkvL_args(L, "zero_", qkvL_KW_NONE);
  qkvL_grad_inplace(L, "zero_");
  qkv_tensor *x = qkvL_checktensor(L, 1);
  qkvL_check(L, "zero_", qkv_fill(x, 0));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_copy_ (lua_State *L) {
  qkvL_args(L, "copy_", KW_SRC);
  qkvL_grad_inplace(L, "copy_");
  qkv_tensor *x = qkvL_checktensor(L, 1), *src = qkvL_checktensor(L, 2);
  check_into(L, "copy_", x, src, "src");
  qkvL_check(L, "copy_", qkv_copy_into(x, src));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_clamp_ (lua_State *L) {
  qkvL_args(L, "clamp_", KW_CLAMP);
  qkvL_grad_inplace(L, "clamp_");
  qkv_tensor *x = qkvL_checktensor(L, 1);
  lua_settop(L, 3);
  check_cast(L, "clamp_", clamp_dtype(L, "clamp_", x), x->dtype);
  for (int arg = 2; arg <= 3; arg++) {
    qkv_tensor *t = opttensor(L, arg);
    if (t) check_into(L, "clamp_", x, t, arg == 2 ? "min" : "max");
  }
  clamp_into(L, "clamp_", x, x, 2, 3);
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

static int s_masked_fill_ (lua_State *L) {
  qkvL_args(L, "masked_fill_", KW_MASK_VALUE);
  qkvL_grad_inplace(L, "masked_fill_");
  qkv_tensor *x = qkvL_checktensor(L, 1), *m = qkvL_checktensor(L, 2);
  if (!is_number(L, 3)) luaL_typeerror(L, 3, "number");
  check_into(L, "masked_fill_", x, m, "mask");
  qkvL_Scalar sc;
  qkvL_masked_fill(L, "masked_fill_", x, m, qkvL_checkfill(L, 3, x->dtype, "masked_fill_", &sc));
  x->storage->version++;
  lua_settop(L, 1);
  return 1;
}

void qkvL_open_select (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg both[] = {
    {"tril", s_tril}, {"triu", s_triu}, {"any", s_any}, {"all", s_all},
    {"logical_and", s_and}, {"logical_or", s_or}, {"logical_xor", s_xor},
    {"logical_not", s_not}, {"index_select", s_index_select}, {"gather", s_gather},
    {"sort", s_sort}, {"topk", s_topk}, {"clamp", s_clamp}, {"mm", s_mm},
    {"bmm", s_bmm}, {NULL, NULL}
  };
  static const luaL_Reg meth[] = {
    {"where", s_where_method}, {"float", s_float}, {"double", s_double},
    {"long", s_long}, {"int", s_int}, {"bool", s_bool}, {"add_", s_add_}, {"sub_", s_sub_},
    {"mul_", s_mul_}, {"div_", s_div_}, {"fill_", s_fill_}, {"zero_", s_zero_},
    {"copy_", s_copy_}, {"clamp_", s_clamp_}, {"masked_fill_", s_masked_fill_},
    {"scatter_add_", s_scatter_add_}, {"index_add_", s_index_add_},
    {NULL, NULL}
  };
  static const luaL_Reg mod[] = {{"where", s_where}, {"embedding", s_embedding}, {NULL, NULL}};
  qkvL_register(L, methods, module, both, meth, mod);
  lua_pushcfunction(L, s_bnot);
  lua_setfield(L, mt, "__bnot");
}
