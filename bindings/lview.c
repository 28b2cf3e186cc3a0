/*
** lview.c -- view methods (they share storage and never copy) and the
** methods that copy: contiguous, clone, to.
*/
#include <string.h>

#include "lauxqkv.h"

static qkv_tensor *pushcopy (lua_State *L, const qkv_tensor *t, qkv_dtype dt,
                             const char *name) {
  qkv_tensor *r = qkvL_newlike(L, t, dt);
  qkvL_check(L, name, qkv_copy(r, t));
  return r;
}

static int v_t (lua_State *L) {
  qkvL_args(L, "t", qkvL_KW_NONE);
  QKVL_GRAD(L, "t", v_t);
  qkv_tensor *t = qkvL_checktensor(L, 1), v = *t;
  if (t->ndim > 2) {
    qkvL_shape(L, t);
    return luaL_error(L, "t: expects a tensor with at most 2 dims, got %s; "
                      "use transpose(d1, d2)", lua_tostring(L, -1));
  }
  if (t->ndim == 2) qkv_view_transpose(&v, t, 0, 1);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_transpose (lua_State *L) {
  static const char *const kw[] = {"dim0", "dim1", NULL};
  qkvL_args(L, "transpose", kw);
  QKVL_GRAD(L, "transpose", v_transpose);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int d1 = qkvL_checkdim0(L, 2, t->ndim), d2 = qkvL_checkdim0(L, 3, t->ndim);
  if (t->ndim == 0) v = *t;               /* a 0-d t's dim with itself */
  else qkv_view_transpose(&v, t, d1, d2);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_permute (lua_State *L) {
  QKVL_GRAD(L, "permute", v_permute);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  static const char *const known[] = {"dims", NULL};
  int perm[QKV_MAXDIM], seen[QKV_MAXDIM] = {0}, n = 0;
  int table = lua_istable(L, 2), top = lua_gettop(L) - 1;
  if (table) {                    /* {2, 1}, or PyTorch's keyword {dims = {2, 1}} */
    qkvL_noextra(L, "permute", 2);
    lua_Integer len = qkvL_checklist(L, 2, "permute", "the dims", known);
    lua_settop(L, 2);
    lua_pushliteral(L, "dims");
    if (lua_rawget(L, 2) != LUA_TNIL) {           /* read raw, as its keys were */
      if (len > 0) return luaL_error(L, "permute: the dims are given twice, as items and "
                                     "as 'dims'");
      if (!lua_istable(L, 3))
        return luaL_error(L, "permute: 'dims' must be a table of dims, got %s",
                          luaL_typename(L, 3));
      lua_replace(L, 2);
      len = qkvL_checklist(L, 2, "permute", "'dims'", NULL);
    } else lua_pop(L, 1);
    top = len > QKV_MAXDIM ? QKV_MAXDIM + 1 : (int)len;
  }
  if (top != t->ndim) {
    qkvL_shape(L, t);
    return luaL_error(L, "permute: %d dims given for a tensor of shape %s",
                      top, lua_tostring(L, -1));
  }
  for (n = 0; n < top; n++) {
    if (table) lua_geti(L, 2, n + 1); else lua_pushvalue(L, n + 2);
    int d = qkvL_checkdim(L, lua_gettop(L), t->ndim, 0);
    if (seen[d]++) return luaL_error(L, "permute: dim %d repeated", d + 1);
    perm[n] = d;
    lua_pop(L, 1);
  }
  qkv_view_permute(&v, t, perm);
  qkvL_pushview(L, &v, 1);
  return 1;
}

/* sizes for view/reshape, with one -1 inferred; checks the count */
static int newshape (lua_State *L, const char *name, const qkv_tensor *t,
                     int64_t *size) {
  int n = qkvL_checksizes(L, 2, size, strcmp(name, "view") == 0 ? "size" : "shape"), infer = -1;
  int64_t known = 1, nonzero = 1, numel = qkv_numel(t);
  for (int i = 0; i < n; i++) {
    if (size[i] > 0 && nonzero > INT64_MAX / size[i]) {
      known = -1;                   /* more elements than int64: never valid */
      break;
    }
    if (size[i] >= 0) {
      known *= size[i];
      if (size[i] > 0) nonzero *= size[i];
      continue;
    }
    if (infer >= 0) return luaL_error(L, "%s: only one size can be -1", name);
    infer = i;
  }
  if (infer >= 0 && known > 0 && numel % known == 0) size[infer] = numel / known;
  else if (infer >= 0) known = -1;       /* cannot be inferred */
  if (known >= 0) qkvL_checkbytes(L, name, n, size, t->dtype);   /* empty, split huge */
  if (infer < 0 ? known != numel : known < 0) {
    char buf[200];
    qkv_shape_str(buf, sizeof buf, n, size);
    const char *old = qkvL_shape(L, t);
    return luaL_error(L, "%s: shape %s is invalid for a tensor of shape %s "
                      "(%I elements)", name, buf, old, (lua_Integer)numel);
  }
  return n;
}

static int v_view (lua_State *L) {
  QKVL_GRAD(L, "view", v_view);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int64_t size[QKV_MAXDIM];
  int n = newshape(L, "view", t, size);
  if (qkv_view_reshape(&v, t, n, size) != 0) {
    char buf[200], st[200];
    qkv_shape_str(buf, sizeof buf, n, size);
    qkv_shape_str(st, sizeof st, t->ndim, t->stride);
    const char *old = qkvL_shape(L, t);
    return luaL_error(L, "view: shape %s is not compatible with the layout of "
                      "the input (shape %s, strides %s); use reshape, which "
                      "copies when it must", buf, old, st);
  }
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_reshape (lua_State *L) {
  QKVL_GRAD(L, "reshape", v_reshape);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int64_t size[QKV_MAXDIM];
  int n = newshape(L, "reshape", t, size);
  if (qkv_view_reshape(&v, t, n, size) != 0) {
    qkv_tensor *c = pushcopy(L, t, t->dtype, "reshape");
    qkv_view_reshape(c, c, n, size);
    return 1;
  }
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_narrow (lua_State *L) {
  static const char *const kw[] = {"dim", "start", "length", NULL};
  qkvL_args(L, "narrow", kw);
  QKVL_GRAD(L, "narrow", v_narrow);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int d = qkvL_checkdim(L, 2, t->ndim, 0);
  lua_Integer start = luaL_checkinteger(L, 3), len = luaL_checkinteger(L, 4);
  lua_Integer size = (lua_Integer)t->size[d];
  if (start < 0) start += size + 1;       /* -1 is the last item */
  if (start < 1 || start > size + 1 || len < 0 || len > size - start + 1)
    return luaL_error(L, "narrow: start %I with length %I is out of range "
                      "for dim %d of size %I%s", luaL_checkinteger(L, 3), len,
                      d + 1, size, qkvL_from1(luaL_checkinteger(L, 3), QKVL_INDEX));
  start--;
  qkv_view_narrow(&v, t, d, start, len);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_select (lua_State *L) {
  static const char *const kw[] = {"dim", "index", NULL};
  qkvL_args(L, "select", kw);
  QKVL_GRAD(L, "select", v_select);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int d = qkvL_checkdim(L, 2, t->ndim, 0);
  qkv_view_select(&v, t, d, qkvL_checkindex(L, 3, t->size[d], "index"));
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_unsqueeze (lua_State *L) {
  qkvL_args(L, "unsqueeze", qkvL_KW_DIM);
  QKVL_GRAD(L, "unsqueeze", v_unsqueeze);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int d = qkvL_checkdim(L, 2, t->ndim, 1);
  if (t->ndim == QKV_MAXDIM) return luaL_error(L, "unsqueeze: more than 8 dims");
  qkv_view_unsqueeze(&v, t, d);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_squeeze (lua_State *L) {
  qkvL_args(L, "squeeze", qkvL_KW_DIM);
  QKVL_GRAD(L, "squeeze", v_squeeze);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int d = qkvL_optdim0(L, 2, t->ndim, -1);
  qkv_view_squeeze(&v, t, t->ndim ? d : -1);
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_expand (lua_State *L) {
  QKVL_GRAD(L, "expand", v_expand);
  qkv_tensor *t = qkvL_checktensor(L, 1), v;
  int64_t size[QKV_MAXDIM];
  int n = qkvL_checksizes(L, 2, size, "size");
  for (int i = 0; i < n; i++) {
    int j = i - (n - t->ndim);
    if (size[i] == -1) size[i] = j >= 0 ? t->size[j] : -1;
  }
  if (n < t->ndim || qkv_expand(&v, t, n, size) != 0) {
    char buf[200];
    qkv_shape_str(buf, sizeof buf, n, size);
    const char *old = qkvL_shape(L, t);
    return luaL_error(L, "expand: a tensor of shape %s cannot expand to %s",
                      old, buf);
  }
  qkvL_pushview(L, &v, 1);
  return 1;
}

static int v_contiguous (lua_State *L) {
  qkvL_args(L, "contiguous", qkvL_KW_NONE);
  QKVL_GRAD(L, "contiguous", v_contiguous);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  if (qkv_is_contiguous(t)) lua_settop(L, 1);
  else pushcopy(L, t, t->dtype, "contiguous");
  return 1;
}

static int v_clone (lua_State *L) {
  qkvL_args(L, "clone", qkvL_KW_NONE);
  QKVL_GRAD(L, "clone", v_clone);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  pushcopy(L, t, t->dtype, "clone");
  return 1;
}

/* a copy on device d (self when already there), as PyTorch's x.to(dev) */
static int todevice (lua_State *L, qkv_tensor *t, qkv_device d, const char *name) {
  if (t->storage->device == d) { lua_settop(L, 1); return 1; }
  qkvL_todevice(L, t, d, name);
  return 1;
}

/* to(dtype), to(device), both (either first), or PyTorch's keywords
   {dtype =, device =}, as a factory's (qkvL_checktail); returns self when
   nothing changes */
static int v_to (lua_State *L) {
  QKVL_GRAD(L, "to", v_to);
  qkv_tensor *t = qkvL_checktensor(L, 1);
  qkv_dtype dt = t->dtype;
  qkv_device dev = t->storage->device;
  if (lua_isnoneornil(L, 2)) qkvL_checkdtype(L, 2);        /* "string expected" */
  qkvL_checktail(L, 2, &dt, &dev, 0);
  int top = lua_gettop(L);
  if (dt != t->dtype) t = pushcopy(L, t, dt, "to");
  if (dev != t->storage->device) qkvL_todevice(L, t, dev, "to");
  if (lua_gettop(L) == top) lua_settop(L, 1);
  return 1;
}

static int v_cpu (lua_State *L) {
  qkvL_args(L, "cpu", qkvL_KW_NONE);
  QKVL_GRAD(L, "cpu", v_cpu);
  return todevice(L, qkvL_checktensor(L, 1), QKV_CPU, "cpu");
}

static int v_cuda (lua_State *L) {
  qkvL_args(L, "cuda", qkvL_KW_NONE);
  QKVL_GRAD(L, "cuda", v_cuda);
  return todevice(L, qkvL_checktensor(L, 1), QKV_CUDA, "cuda");
}

void qkvL_open_view (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg m[] = {
    {"t", v_t}, {"transpose", v_transpose}, {"permute", v_permute},
    {"view", v_view}, {"reshape", v_reshape}, {"narrow", v_narrow},
    {"select", v_select}, {"unsqueeze", v_unsqueeze}, {"squeeze", v_squeeze},
    {"expand", v_expand}, {"contiguous", v_contiguous}, {"clone", v_clone},
    {"to", v_to}, {"cpu", v_cpu}, {"cuda", v_cuda}, {NULL, NULL}
  };
  lua_pushvalue(L, methods);
  luaL_setfuncs(L, m, 0);
  lua_pop(L, 1);
  (void)mt; (void)module;
}
