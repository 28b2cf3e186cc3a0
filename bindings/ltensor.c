/*
** ltensor.c -- the qkv.Tensor userdata's properties, indexing and element
** access (lauxtensor.c makes and frees the userdata).
*/
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lauxqkv.h"

/*
** qkv.Size's metamethods.  A shape has at most 8 sizes; any table can be
** given this metatable, so the walks stop there whatever its length says.
*/
static int size_tostring (lua_State *L) {
  luaL_Buffer b;
  lua_Integer n = luaL_len(L, 1), shown = n > QKV_MAXDIM ? QKV_MAXDIM : n;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '(');
  for (lua_Integer i = 1; i <= shown; i++) {
    lua_geti(L, 1, i);
    luaL_tolstring(L, -1, NULL);          /* whatever was put there */
    lua_remove(L, -2);
    luaL_addvalue(&b);
    if (i < n) luaL_addstring(&b, ", ");
  }
  luaL_addstring(&b, n > shown ? "...)" : n == 1 ? ",)" : ")");
  luaL_pushresult(&b);
  return 1;
}

/* equal when both hold the same n sizes and nothing else (a table with
   other keys is not a shape) */
static int size_eq (lua_State *L) {
  lua_Integer n = luaL_len(L, 1);
  if (n > QKV_MAXDIM || !lua_istable(L, 2) || luaL_len(L, 2) != n ||
      qkvL_testlist(L, 1, "", "", n, NULL) || qkvL_testlist(L, 2, "", "", n, NULL))
    return lua_pushboolean(L, 0), 1;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    lua_geti(L, 2, i);
    if (!lua_rawequal(L, -1, -2)) return lua_pushboolean(L, 0), 1;
    lua_pop(L, 2);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int size_concat (lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  luaL_tolstring(L, 2, NULL);
  lua_concat(L, 2);
  return 1;
}

static void pushshape (lua_State *L, int ndim, const int64_t *size) {
  lua_createtable(L, ndim, 0);
  for (int i = 0; i < ndim; i++) {
    lua_pushinteger(L, (lua_Integer)size[i]);
    lua_rawseti(L, -2, i + 1);
  }
  luaL_setmetatable(L, QKV_SIZE);
}


/* element access */

static int pushvalue (lua_State *L, const qkv_tensor *t, const void *p) {
  if (t->dtype == QKV_BOOL) lua_pushboolean(L, *(const unsigned char *)p);
  else if (qkv_is_float(t->dtype)) lua_pushnumber(L, qkv_elem_get(t->dtype, p));
  else lua_pushinteger(L, qkv_elem_geti(t->dtype, p));
  return 1;
}

/* the element that the 0-d view v names, pushed (copied from the GPU) */
static int pushelem (lua_State *L, const qkv_tensor *v, const char *name) {
  const qkv_tensor *h = qkvL_host(L, v, name);
  return pushvalue(L, h, qkv_data(h));
}

static void pushlist (lua_State *L, const qkv_tensor *t, int d, const char *p) {
  if (d == t->ndim) { pushvalue(L, t, p); return; }
  luaL_checkstack(L, 4, "tolist");
  lua_createtable(L, (int)t->size[d], 0);
  int64_t step = t->stride[d] * (int64_t)qkv_elsize(t->dtype);
  for (int64_t i = 0; i < t->size[d]; i++) {
    if ((i & 0xfff) == 0 && qkv_interrupted) qkvL_check(L, "tolist", QKV_EINTR);
    pushlist(L, t, d + 1, p + i * step);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/*
** Lua tables take about 16 bytes a value and 80 a table (its header and
** its slot in the parent), which for a big tensor (an expanded one costs
** nothing itself) is more than the machine has: tolist refuses what would
** take more than half the memory limit (the RAM, qkv._memory_limit), a
** clear error before any work rather than the OOM killer.
*/
static void check_listable (lua_State *L, const qkv_tensor *t) {
  double tables = 0, rows = 1, values = (double)qkv_numel(t);
  for (int d = 0; d < t->ndim; d++) {
    tables += rows;                  /* the lists of dim d */
    rows *= (double)t->size[d];
  }
  double bytes = 16 * values + 80 * tables, limit = (double)qkv_memory_limit() / 2;
  if (bytes > limit) {
    char why[120];
    const char *s = qkvL_shape(L, t);
    snprintf(why, sizeof why, "about %.0f bytes, more than half the memory limit (%.0f "
             "bytes)", bytes, limit);
    luaL_error(L, "tolist: a tensor of shape %s (%I elements) is too large to make Lua "
               "tables: %s", s, (lua_Integer)qkv_numel(t), why);
  }
  for (int d = 0; d < t->ndim; d++)   /* lua_createtable's count is an int */
    if (t->size[d] > INT_MAX)
      luaL_error(L, "tolist: dim %d has %I items, more than a Lua table holds", d + 1,
                 (lua_Integer)t->size[d]);
}

static int t_tolist (lua_State *L) {
  qkvL_args(L, "tolist", qkvL_KW_NONE);
  qkv_tensor *x = qkvL_checktensor(L, 1);
  check_listable(L, x);
  const qkv_tensor *t = qkvL_host(L, x, "tolist");
  pushlist(L, t, 0, (const char *)qkv_data(t));
  return 1;
}

static int t_item (lua_State *L) {
  qkvL_args(L, "item", qkvL_KW_NONE);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (qkv_numel(t) != 1) {
    qkvL_shape(L, t);
    return luaL_error(L, "item: tensor of shape %s has %I elements, not 1",
                      lua_tostring(L, -1), (lua_Integer)qkv_numel(t));
  }
  const qkv_tensor *h = qkvL_host(L, t, "item");
  return pushvalue(L, h, qkv_data(h));
}


/* properties and indexing */

static const char *const FIELDS[] = {"shape", "dtype", "device", "ndim", "T", "mT",
                                     "requires_grad", "is_leaf", "grad", "grad_fn", NULL};

/* a misspelt field is an error naming the closest method or field, as a
   PyTorch user gets an AttributeError rather than nil; PyTorch's dtype
   shorthands for dtypes qkv lacks say what to use */
static int no_field (lua_State *L, const char *k) {
  static const char *const SHORT[][2] = {
    {"short", "qkv has no int16: x:int() converts to int32"},
    {"byte", "qkv has no uint8: x:int() converts to int32, x:bool() to bool"},
    {"char", "qkv has no int8: x:int() converts to int32"},
  };
  for (size_t i = 0; i < sizeof SHORT / sizeof SHORT[0]; i++)
    if (strcmp(k, SHORT[i][0]) == 0)
      return luaL_error(L, "index: a tensor has no field '%s' (%s)", k, SHORT[i][1]);
  return qkvL_noname(L, "index: a tensor", "field", k, lua_upvalueindex(1), FIELDS, NULL);
}

/* x.T (a matrix's transpose; a 0-d or 1-D tensor itself) and x.mT (the
   transpose of the last two dims), views as PyTorch's */
static int transposed (lua_State *L, const qkv_tensor *t, int matrices) {
  qkv_tensor v = *t;
  if (matrices ? t->ndim < 2 : t->ndim > 2) {
    const char *s = qkvL_shape(L, t);
    return luaL_error(L, matrices ? "index: x.mT needs at least 2 dims, got %s"
                                  : "index: x.T needs at most 2 dims, got %s; use x.mT "
                                    "or x:permute(...)", s);
  }
  if (t->ndim < 2) {                      /* x itself, as PyTorch's x.T of a vector */
    lua_pushvalue(L, 1);
    return 1;
  }
  if (qkvL_grad_loaded()) {                /* x:transpose(-2, -1): autograd records it */
    lua_pushliteral(L, "transpose");
    lua_rawget(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushinteger(L, t->ndim - 1);
    lua_pushinteger(L, t->ndim);
    lua_call(L, 3, 1);
    return 1;
  }
  qkv_view_transpose(&v, t, t->ndim - 2, t->ndim - 1);
  qkvL_pushview(L, &v, 1);
  return 1;
}

/* a 1-based position at the top of the stack for a dim of `size` */
static int64_t position (lua_State *L, lua_Integer item, int dim, int64_t size, int end) {
  int ok;
  lua_Integer i = lua_tointegerx(L, -1, &ok);
  if (!ok)
    luaL_error(L, "index: item %I of the index table must hold integers, got %s", item,
               luaL_typename(L, -1));
  lua_Integer j = i < 0 ? i + size + 1 : i;
  if (j < 1 - end || j > size)
    luaL_error(L, "index: %I is out of range for dim %d of size %I%s", i, dim,
               (lua_Integer)size, qkvL_from1(i, QKVL_INDEX));
  return j - 1;
}

/*
** x[{a, {b, c}, {}, ...}], Torch7's indexing, as a view of t: a number
** selects (its dim goes), {} keeps a dim whole, {i} narrows it to item i,
** {i, j} to items i..j (negative counts from the end).  The table is read
** raw, so no metamethod runs while t is held.
*/
static void table_view (lua_State *L, const qkv_tensor *t, int key, qkv_tensor *v) {
  lua_Integer n = (lua_Integer)lua_rawlen(L, key);
  if (qkvL_testlist(L, key, "index", "the index table", n, NULL))
    luaL_error(L, "%s", lua_tostring(L, -1));
  if (n > t->ndim)
    luaL_error(L, "index: %I indices for a tensor of %d dims", n, t->ndim);
  qkv_tensor cur = *t;
  int d = 0;
  for (lua_Integer k = 1; k <= n; k++, lua_pop(L, 1)) {
    int ty = lua_rawgeti(L, key, k), dim = (int)k;
    if (ty == LUA_TNUMBER) {
      qkv_view_select(v, &cur, d, position(L, k, dim, cur.size[d], 0));
      cur = *v;
      continue;
    }
    if (ty != LUA_TTABLE)
      luaL_error(L, "index: item %I of the index table must be a number or a table, got %s",
                 k, luaL_typename(L, -1));
    lua_Integer m = (lua_Integer)lua_rawlen(L, -1);
    int64_t a = 0, b = cur.size[d] - 1;
    if (m > 2) luaL_error(L, "index: item %I must be {}, {i} or {i, j}", k);
    if (qkvL_testlist(L, -1, "index", "a range {i, j} of the index table", m, NULL))
      luaL_error(L, "%s", lua_tostring(L, -1));
    if (m >= 1) {
      lua_rawgeti(L, -1, 1);
      a = b = position(L, k, dim, cur.size[d], 0);
      lua_pop(L, 1);
    }
    if (m == 2) {
      lua_rawgeti(L, -1, 2);
      b = position(L, k, dim, cur.size[d], 1);
      lua_pop(L, 1);
      if (b < a - 1) luaL_error(L, "index: range %I ends before it starts", k);
    }
    qkv_view_narrow(v, &cur, d++, a, b - a + 1);
    cur = *v;
  }
  *v = cur;
}

static int is_grad_field (const char *k) {
  return strcmp(k, "requires_grad") == 0 || strcmp(k, "is_leaf") == 0 ||
         strcmp(k, "grad") == 0 || strcmp(k, "grad_fn") == 0;
}

/* the methods written in Lua (stdlib/qkv/composite/) come with their
   module, loaded the first time a method the C ones lack is asked for;
   pushes the method named by arg 2, or returns 0 */
static int lua_method (lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  int loaded = lua_getfield(L, -1, "qkv.composite") != LUA_TNIL;
  lua_pop(L, 2);
  if (loaded) return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.composite");
  lua_call(L, 1, 0);
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  return 0;
}

/*
** A key that is a symbolic value of a mod's trace, or a table holding
** one (x[h], x[{h, i - j}] inside a score_mod): its metatable's
** __qkv_index makes the load (stdlib/qkv/variants/trace.lua); pushes it
** and returns 1, else returns 0.
*/
static int symbolic_index (lua_State *L) {
  if (luaL_getmetafield(L, 2, "__qkv_index") == LUA_TNIL) {
    if (lua_type(L, 2) != LUA_TTABLE || lua_getmetatable(L, 2)) return 0;
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    lua_Integer i = 1;
    for (; i <= n; i++) {
      lua_rawgeti(L, 2, i);
      if (luaL_getmetafield(L, -1, "__qkv_index") != LUA_TNIL) {
        lua_remove(L, -2);                      /* the element; its __qkv_index stays */
        break;
      }
      lua_pop(L, 1);
    }
    if (i > n) return 0;
  }
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);
  return 1;
}

static int t_index (lua_State *L) {
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (lua_type(L, 2) == LUA_TTABLE && symbolic_index(L)) return 1;
  if (lua_type(L, 2) != LUA_TSTRING) QKVL_GRAD(L, "index", t_index);
  if (lua_type(L, 2) == LUA_TTABLE) {
    qkv_tensor v;
    table_view(L, t, 2, &v);
    if (v.ndim == 0) return pushelem(L, &v, "index");
    qkvL_pushview(L, &v, 1);
    return 1;
  }
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "shape") == 0) pushshape(L, t->ndim, t->size);
    else if (strcmp(k, "dtype") == 0) lua_pushstring(L, qkv_dtype_name(t->dtype));
    else if (strcmp(k, "device") == 0)
      lua_pushstring(L, qkv_device_name(t->storage->device));
    else if (strcmp(k, "ndim") == 0) lua_pushinteger(L, t->ndim);
    /* autograd's fields: qkv.autograd answers them once loaded; before,
       no tensor requires grad */
    else if (is_grad_field(k) && qkvL_grad_loaded()) qkvL_grad_field(L, 1, k);
    else if (strcmp(k, "requires_grad") == 0) lua_pushboolean(L, 0);
    else if (strcmp(k, "is_leaf") == 0) lua_pushboolean(L, 1);
    else if (strcmp(k, "grad") == 0 || strcmp(k, "grad_fn") == 0) lua_pushnil(L);
    else if (strcmp(k, "T") == 0) return transposed(L, t, 0);
    else if (strcmp(k, "mT") == 0) return transposed(L, t, 1);
    else if (lua_method(L)) return 1;
    else return no_field(L, k);
    return 1;
  }
  if (t->ndim == 0) return luaL_error(L, "index: cannot index a 0-d tensor");
  qkv_tensor v;
  qkv_view_select(&v, t, 0, qkvL_checkindex(L, 2, t->size[0], "index"));
  if (v.ndim == 0) return pushelem(L, &v, "index");
  qkvL_pushview(L, &v, 1);
  return 1;
}

/* x[i] = number or tensor, x[{...}] = ...: writes into the selected view */
static int t_newindex (lua_State *L) {
  qkv_tensor *t = qkvL_checktensor(L, 1);
  qkv_tensor v, *src;
  qkvL_Scalar sc;
  if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "grad") == 0 &&
      qkvL_grad_loaded()) {
    lua_settop(L, 3);
    qkvL_grad_set(L, 1);                  /* x.grad = g or nil */
    return 0;
  }
  if (lua_type(L, 2) == LUA_TSTRING)
    return luaL_error(L, "index: tensors have no settable fields");
  qkvL_grad_inplace(L, "index");          /* x[i] = v */
  if (lua_type(L, 2) == LUA_TTABLE) table_view(L, t, 2, &v);
  else if (lua_type(L, 2) != LUA_TNUMBER || t->ndim == 0)
    return luaL_error(L, "index: tensors have no settable fields");
  else qkv_view_select(&v, t, 0, qkvL_checkindex(L, 2, t->size[0], "index"));
  if (lua_type(L, 3) == LUA_TNUMBER || lua_isboolean(L, 3))
    qkvL_check(L, "index", qkv_copy(&v, qkvL_checkfill(L, 3, t->dtype, "index", &sc)));
  else if ((src = qkvL_totensor(L, 3)) != NULL) {
    int n;
    int64_t sz[QKV_MAXDIM];
    if (qkv_broadcast_shape(v.ndim, v.size, src->ndim, src->size, &n, sz) != 0
        || n != v.ndim || memcmp(sz, v.size, sizeof(int64_t) * (size_t)n) != 0) {
      const char *a = qkvL_shape(L, src), *b = qkvL_shape(L, &v);
      return luaL_error(L, "index: value of shape %s does not broadcast to %s", a, b);
    }
    qkvL_check(L, "index", qkv_copy_into(&v, src));
  } else
    luaL_typeerror(L, 3, "number or qkv.Tensor");
  t->storage->version++;
  return 0;
}

static int t_len (lua_State *L) {
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (t->ndim == 0) return luaL_error(L, "len: a 0-d tensor has no length");
  lua_pushinteger(L, t->size[0]);
  return 1;
}

static int t_tostring (lua_State *L) {
  qkv_tensor *t = qkvL_istensor(L, 1);
  if (t == NULL) luaL_typeerror(L, 1, QKV_TENSOR);
  if (qkv_is_closed(t)) return lua_pushliteral(L, "tensor(<closed>)"), 1;
  qkvL_pushtensorstring(L, t);
  if (!qkvL_grad_loaded()) return 1;
  /* PyTorch's suffixes: grad_fn=<...> on a result, requires_grad=True on a
     leaf that requires grad */
  size_t n;
  const char *s = lua_tolstring(L, -1, &n);
  qkvL_grad_field(L, 1, "grad_fn");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    qkvL_grad_field(L, 1, "requires_grad");
    if (!lua_toboolean(L, -1)) { lua_pop(L, 1); return 1; }
    lua_pop(L, 1);
    lua_pushliteral(L, "requires_grad=True");
  } else {
    const char *fn = luaL_tolstring(L, -1, NULL);
    lua_pushfstring(L, "grad_fn=%s", fn);
  }
  const char *suffix = lua_tostring(L, -1);
  const char *prefix = lua_pushlstring(L, s, n - 1);       /* without its ")" */
  lua_pushfstring(L, "%s, %s)", prefix, suffix);
  return 1;
}

static int t_dim (lua_State *L) {
  qkvL_args(L, "dim", qkvL_KW_NONE);
  lua_pushinteger(L, qkvL_checktensor(L, 1)->ndim);
  return 1;
}

static int t_numel (lua_State *L) {
  qkvL_args(L, "numel", qkvL_KW_NONE);
  lua_pushinteger(L, qkv_numel(qkvL_checktensor(L, 1)));
  return 1;
}

static int t_size (lua_State *L) {
  qkvL_args(L, "size", qkvL_KW_DIM);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (lua_isnoneornil(L, 2)) pushshape(L, t->ndim, t->size);
  else lua_pushinteger(L, t->size[qkvL_checkdim(L, 2, t->ndim, 0)]);
  return 1;
}

static int t_stride (lua_State *L) {
  qkvL_args(L, "stride", qkvL_KW_DIM);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (lua_isnoneornil(L, 2)) pushshape(L, t->ndim, t->stride);
  else lua_pushinteger(L, t->stride[qkvL_checkdim(L, 2, t->ndim, 0)]);
  return 1;
}

/* the in-place writes to x's storage so far (autograd's version check) */
static int t_version (lua_State *L) {
  lua_pushinteger(L, (lua_Integer)qkvL_checktensor(L, 1)->storage->version);
  return 1;
}

/* x:detach(): a view of x's data with no autograd history */
static int t_detach (lua_State *L) {
  qkvL_args(L, "detach", qkvL_KW_NONE);
  qkvL_pushview(L, qkvL_checktensor(L, 1), 1);
  return 1;
}

/* x:requires_grad_([flag]), y:backward([grad]) and
   x:register_post_accumulate_grad_hook(fn): load qkv.autograd,
   whose own methods replace these, and hand it the call */
static int autograd_call (lua_State *L, const char *name) {
  int n = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "qkv.autograd");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, name);
  lua_insert(L, 1);
  lua_pop(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

static int t_requires_grad_ (lua_State *L) { return autograd_call(L, "requires_grad_"); }
static int t_backward (lua_State *L) { return autograd_call(L, "backward"); }
static int t_register_post_accumulate_grad_hook (lua_State *L) {
  return autograd_call(L, "register_post_accumulate_grad_hook");
}

static int t_element_size (lua_State *L) {
  qkvL_args(L, "element_size", qkvL_KW_NONE);
  lua_pushinteger(L, (lua_Integer)qkv_elsize(qkvL_checktensor(L, 1)->dtype));
  return 1;
}

static int t_is_contiguous (lua_State *L) {
  qkvL_args(L, "is_contiguous", qkvL_KW_NONE);
  lua_pushboolean(L, qkv_is_contiguous(qkvL_checktensor(L, 1)));
  return 1;
}

void qkvL_open_tensor (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg meta[] = {
    {"__gc", qkvL_free}, {"__close", qkvL_close}, {"__len", t_len},
    {"__tostring", t_tostring}, {"__newindex", t_newindex}, {NULL, NULL}
  };
  static const luaL_Reg m[] = {
    {"dim", t_dim}, {"numel", t_numel}, {"size", t_size}, {"stride", t_stride},
    {"is_contiguous", t_is_contiguous}, {"tolist", t_tolist}, {"item", t_item},
    {"element_size", t_element_size}, {"_version", t_version}, {"detach", t_detach},
    {"requires_grad_", t_requires_grad_}, {"backward", t_backward},
    {"register_post_accumulate_grad_hook", t_register_post_accumulate_grad_hook},
    {NULL, NULL}
  };
  static const luaL_Reg sizemeta[] = {
    {"__tostring", size_tostring}, {"__eq", size_eq}, {"__concat", size_concat},
    {NULL, NULL}
  };
  lua_pushvalue(L, mt);
  luaL_setfuncs(L, meta, 0);
  lua_pushvalue(L, methods);
  lua_pushcclosure(L, t_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, m, 0);
  lua_pop(L, 1);
  luaL_newmetatable(L, QKV_SIZE);
  luaL_setfuncs(L, sizemeta, 0);
  lua_pop(L, 1);
  (void)module;
}
