/*
** lbuild.c -- constructors (tensor, zeros, ones, full, eye, arange, rand,
** randn), the generator's seed, and the clock.
*/
#include <math.h>
#include <string.h>
#include <time.h>

#include "lauxqkv.h"

/*
** The shape of a nested table, read down its first items, and the dtype
** its first leaf suggests (bool for a boolean, else float32; fill makes a
** bool one float32 when a number follows).  The walk is
** bounded: a table met twice on the way down (t[1] = t) or a ninth level
** is an error.
*/
static int table_shape (lua_State *L, int idx, int64_t *size, qkv_dtype *dt) {
  int n = 0, top = lua_gettop(L);
  luaL_checkstack(L, QKV_MAXDIM + 2, "tensor");
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    for (int k = top + 1; k < lua_gettop(L); k++)
      if (lua_rawequal(L, k, -1)) luaL_error(L, "tensor: the nested table contains itself");
    if (n == QKV_MAXDIM) luaL_error(L, "tensor: nested deeper than 8 levels");
    lua_Integer len = luaL_len(L, -1);
    if (len < 0) luaL_error(L, "tensor: a list at depth %d has a negative length", n + 1);
    size[n++] = (int64_t)len;
    lua_geti(L, -1, 1);
  }
  *dt = lua_type(L, -1) == LUA_TBOOLEAN ? QKV_BOOL : QKV_F32;
  lua_settop(L, top);
  return n;
}

static void store (lua_State *L, qkv_dtype dt, char *p, int idx) {
  int t = lua_type(L, idx);
  if (t != LUA_TNUMBER && t != LUA_TBOOLEAN)
    luaL_error(L, "tensor: expected numbers or booleans, got a %s",
               luaL_typename(L, idx));
  lua_Number x = t == LUA_TBOOLEAN ? lua_toboolean(L, idx) : lua_tonumber(L, idx);
  if (dt != QKV_I64 && dt != QKV_I32) { qkv_elem_set(dt, p, x); return; }
  lua_Integer i = lua_tointeger(L, idx);
  int whole = lua_isinteger(L, idx) || qkv_fits(QKV_I64, x);
  if (!lua_isinteger(L, idx) && whole) i = (lua_Integer)x;
  if (!whole || (dt == QKV_I32 && (i < INT32_MIN || i > INT32_MAX)))
    luaL_error(L, "tensor: %s does not fit in %s", x != x ? "nan" : lua_tostring(L, idx),
               qkv_dtype_name(dt));
  qkv_elem_seti(dt, p, (int64_t)i);
}

/* writes the items of the table at the top, checking it is not ragged
   and holds nothing but its items (the top one's keys are checked before).
   With *mixed (a bool dtype the first leaf suggested), a number met sets
   it and returns NULL, leaving the stack to the caller: numbers and
   booleans together make float32, whichever comes first, as PyTorch
   promotes them (qkv.tensor{true, 2.5} is [1, 2.5], not [true, true]) */
static char *fill (lua_State *L, const qkv_tensor *t, int d, char *p, int *mixed) {
  static const char *const depth[QKV_MAXDIM] = {
    "the table", "a list at depth 2", "a list at depth 3", "a list at depth 4",
    "a list at depth 5", "a list at depth 6", "a list at depth 7", "a list at depth 8"};
  lua_Integer n = luaL_len(L, -1);
  if (n != t->size[d])
    luaL_error(L, "tensor: ragged nested table: a list at depth %d has %I "
               "items, expected %I", d + 1, n, (lua_Integer)t->size[d]);
  if (d > 0 && qkvL_testlist(L, -1, "tensor", depth[d], n, NULL))
    luaL_error(L, "%s", lua_tostring(L, -1));
  luaL_checkstack(L, 2, "tensor");
  for (lua_Integer i = 1; i <= n; i++) {
    if ((i & 0xfff) == 0 && qkv_interrupted) qkvL_check(L, "tensor", QKV_EINTR);
    lua_geti(L, -1, i);
    int istable = lua_type(L, -1) == LUA_TTABLE;
    if (d + 1 < t->ndim) {
      if (!istable)
        luaL_error(L, "tensor: ragged nested table: a %s where a list of %I "
                   "was expected at depth %d", luaL_typename(L, -1),
                   (lua_Integer)t->size[d + 1], d + 2);
      if ((p = fill(L, t, d + 1, p, mixed)) == NULL) return NULL;
    } else {
      if (istable)
        luaL_error(L, "tensor: ragged nested table: a list where a value was "
                   "expected at depth %d", d + 1);
      if (mixed && lua_type(L, -1) == LUA_TNUMBER) {
        *mixed = 1;
        return NULL;
      }
      store(L, t->dtype, p, -1);
      p += qkv_elsize(t->dtype);
    }
    lua_pop(L, 1);
  }
  return p;
}

/* the tensor at the top, moved to dev (a GPU that cannot be used is an
   error naming the function) */
static void moveto (lua_State *L, qkv_device dev, const char *name) {
  qkv_tensor *t = qkvL_checktensor(L, -1);
  if (t->storage->device == dev) return;
  qkvL_todevice(L, t, dev, name);
  lua_replace(L, -2);
}

/* tensor(data [, dtype] [, device] [, {dtype =, device =}]); the data's
   outer table may hold the dtype and device too */
static int b_tensor (lua_State *L) {
  static const char *const known[] = {"dtype", "device", NULL};
  int64_t size[QKV_MAXDIM];
  qkv_tensor *src = qkvL_istensor(L, 1) ? qkvL_checktensor(L, 1) : NULL;
  qkv_dtype dt = src ? src->dtype : QKV_F32, leaf;
  qkv_device dev = src ? src->storage->device : qkvL_default_device();
  if (src) {
    qkvL_checktail(L, 2, &dt, &dev, 0);
    qkv_tensor *t = qkvL_newlike(L, src, dt);
    qkvL_check(L, "tensor", qkv_copy(t, src));
    moveto(L, dev, "tensor");
    return 1;
  }
  int type = lua_type(L, 1), got = 0;
  if (type != LUA_TTABLE && type != LUA_TNUMBER && type != LUA_TBOOLEAN)
    luaL_typeerror(L, 1, "table, number or boolean");
  if (type == LUA_TTABLE) {
    if (qkvL_testlist(L, 1, "", "the table", luaL_len(L, 1), known))
      luaL_argerror(L, 1, lua_tostring(L, -1));
    got = qkvL_tableopts(L, 1, 1, &dt, &dev, 0);
  }
  got = qkvL_checktail(L, 2, &dt, &dev, got);
  int n = table_shape(L, 1, size, &leaf), mixed = 0, top = lua_gettop(L);
  int infer = !(got & QKVL_GOT_DTYPE) && leaf == QKV_BOOL && n > 0;
  if (!(got & QKVL_GOT_DTYPE)) dt = leaf;
  qkv_tensor *t = qkvL_new(L, dt, QKV_CPU, n, size, 0);
  lua_pushvalue(L, 1);
  if (n == 0) store(L, dt, (char *)qkv_data(t), -1);
  else if (fill(L, t, 0, (char *)qkv_data(t), infer ? &mixed : NULL) == NULL) {
    lua_settop(L, top);                   /* a number among the booleans */
    t = qkvL_new(L, QKV_F32, QKV_CPU, n, size, 0);
    lua_pushvalue(L, 1);
    fill(L, t, 0, (char *)qkv_data(t), NULL);
  }
  lua_pop(L, 1);
  moveto(L, dev, "tensor");
  return 1;
}

static int filled (lua_State *L, double v, int zero) {
  int64_t size[QKV_MAXDIM];
  qkv_dtype dt = QKV_F32;
  qkv_device dev;
  int n = qkvL_checkshape(L, 1, size, &dt, &dev, "size");
  qkv_tensor *t = qkvL_new(L, dt, dev, n, size, zero);
  if (!zero) qkvL_check(L, "fill", qkv_fill(t, v));
  return 1;
}

static int b_zeros (lua_State *L) { return filled(L, 0, 1); }
static int b_ones (lua_State *L) { return filled(L, 1, 0); }

/* full(shape, value [, dtype] [, device] [, {dtype =, device =}]); shape
   is a table or one size */
static int b_full (lua_State *L) {
  int64_t size[QKV_MAXDIM];
  qkv_dtype dt = QKV_F32;
  qkv_device dev;
  int n = qkvL_checkshapearg(L, 1, size, &dt, &dev, 1);
  luaL_argcheck(L, lua_type(L, 2) == LUA_TNUMBER || lua_isboolean(L, 2), 2,
                "number expected");
  qkvL_Scalar sc;
  const qkv_tensor *v = qkvL_checkfill(L, 2, dt, "full", &sc);
  qkv_tensor *t = qkvL_new(L, dt, dev, n, size, 0);
  qkvL_check(L, "full", qkv_copy(t, v));
  return 1;
}

/* eye(n [, m] [, dtype]) */
static int b_eye (lua_State *L) {
  int64_t size[QKV_MAXDIM];              /* qkvL_checkshape reads up to 8 sizes */
  qkv_dtype dt = QKV_F32;
  qkv_device dev;
  int n = qkvL_checkshape(L, 1, size, &dt, &dev, NULL);
  luaL_argcheck(L, n == 1 || n == 2, 1, "eye takes n or n, m");
  if (n == 1) size[1] = size[0];
  qkv_tensor *t = qkvL_new(L, dt, dev, 2, size, 1), diag = *t;
  diag.ndim = 1;
  diag.size[0] = size[0] < size[1] ? size[0] : size[1];
  diag.stride[0] = t->stride[0] + 1;
  qkvL_check(L, "eye", qkv_fill(&diag, 1));
  return 1;
}

/* the number at arg as an int64, truncated toward 0 as PyTorch's arange
   truncates its bounds for an integer dtype */
static int64_t arange_int (lua_State *L, int arg, const char *what) {
  if (lua_isinteger(L, arg)) return (int64_t)lua_tointeger(L, arg);
  double x = lua_tonumber(L, arg);
  if (!qkv_fits(QKV_I64, x))
    luaL_error(L, "arange: %s %s does not fit in int64", what, lua_tostring(L, arg));
  return (int64_t)x;
}

/* a + i step, which lies between a and b, computed in uint64: i step
   alone may overflow an int64 when a is far on the other side of 0 */
static int64_t at (int64_t a, int64_t step, int64_t i) {
  return (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)step);
}

/*
** arange for int64 and int32, in integers (a float64 loses the values past
** 2^53): a, b and step are truncated toward 0 and the count is PyTorch's,
** ceil((b - a) / step), computed in uint64 so that no difference
** overflows; a value that int32 cannot hold is an error.  Pushes a CPU
** tensor.
*/
static void int_arange (lua_State *L, int nnum, qkv_dtype dt) {
  int64_t a = nnum >= 2 ? arange_int(L, 1, "start") : 0;
  int64_t b = arange_int(L, nnum >= 2 ? 2 : 1, "end");
  int64_t step = nnum == 3 ? arange_int(L, 3, "step") : 1;
  if (step == 0)
    luaL_error(L, "arange: step %s is 0 as an integer (%s)", lua_tostring(L, 3),
               qkv_dtype_name(dt));
  if (step > 0 ? b < a : b > a)
    luaL_error(L, "arange: step %I goes away from the end %I", (lua_Integer)step,
               (lua_Integer)b);
  uint64_t span = step > 0 ? (uint64_t)b - (uint64_t)a : (uint64_t)a - (uint64_t)b;
  uint64_t by = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
  uint64_t count = span / by + (span % by != 0);
  if (count > 9000000000000000u)
    luaL_error(L, "arange: %I items is too many", (lua_Integer)count);
  int64_t n = (int64_t)count, last = n ? at(a, step, n - 1) : a;
  if (dt == QKV_I32 && n > 0 && (a < INT32_MIN || a > INT32_MAX || last < INT32_MIN ||
                                 last > INT32_MAX))
    luaL_error(L, "arange: the values from %I to %I do not all fit in int32 (its range "
               "is [-2147483648, 2147483647])", (lua_Integer)a, (lua_Integer)last);
  qkv_tensor *t = qkvL_new(L, dt, QKV_CPU, 1, &n, 0);
  void *p = qkv_data(t);
  for (int64_t i0 = 0; i0 < n; i0 += 65536) {   /* a look at Ctrl-C per 64K */
    int64_t i1 = n - i0 < 65536 ? n : i0 + 65536;
    if (i0 > 0 && qkv_interrupted) qkvL_check(L, "arange", QKV_EINTR);
    if (dt == QKV_I32)
      for (int64_t i = i0; i < i1; i++) ((int32_t *)p)[i] = (int32_t)at(a, step, i);
    else
      for (int64_t i = i0; i < i1; i++) ((int64_t *)p)[i] = at(a, step, i);
  }
}

/* arange([a,] b [, step] [, dtype] [, device] [, {dtype =, device =}]):
   a, a+step, ... up to but not b */
static int b_arange (lua_State *L) {
  int nnum = 0;
  while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
  luaL_argcheck(L, nnum >= 1, 1, "number expected");
  double a = nnum >= 2 ? lua_tonumber(L, 1) : 0;
  double b = lua_tonumber(L, nnum >= 2 ? 2 : 1);
  double step = nnum == 3 ? lua_tonumber(L, 3) : 1;
  qkv_dtype dt = QKV_F32;
  qkv_device dev = qkvL_default_device();
  qkvL_checktail(L, nnum + 1, &dt, &dev, 0);
  if (!(step != 0) || !isfinite(a) || !isfinite(b) || !isfinite(step))
    return luaL_error(L, "arange: bounds and step must be finite and step non-zero");
  if (dt == QKV_I64 || dt == QKV_I32) {
    int_arange(L, nnum, dt);
    if (dev != QKV_CPU) {
      qkvL_todevice(L, qkvL_checktensor(L, -1), dev, "arange");
      lua_remove(L, -2);
    }
    return 1;
  }
  double count = ceil((b - a) / step);
  if (count < 0)
    return luaL_error(L, "arange: step %f goes away from the end %f", step, b);
  if (count > 9e15) return luaL_error(L, "arange: %f items is too many", count);
  int64_t n = (int64_t)count;
  qkv_tensor *t = qkvL_new(L, QKV_F64, QKV_CPU, 1, &n, 0);
  double *p = (double *)qkv_data(t);
  for (int64_t i0 = 0; i0 < n; i0 += 65536) {   /* a look at Ctrl-C per 64K */
    int64_t i1 = n - i0 < 65536 ? n : i0 + 65536;
    if (i0 > 0 && qkv_interrupted) qkvL_check(L, "arange", QKV_EINTR);
    for (int64_t i = i0; i < i1; i++) p[i] = a + (double)i * step;
  }
  if (dev != QKV_CPU) {
    qkvL_todevice(L, t, dev, "arange");
    lua_remove(L, -2);
  }
  if (dt != QKV_F64) {
    qkv_tensor *r = qkvL_newlike(L, qkvL_checktensor(L, -1), dt);
    qkvL_check(L, "arange", qkv_copy(r, qkvL_checktensor(L, -2)));
  }
  return 1;
}

static int random_tensor (lua_State *L, qkv_dist dist) {
  int64_t size[QKV_MAXDIM];
  qkv_dtype dt = QKV_F32;
  qkv_device dev;
  const char *name = dist == QKV_UNIFORM ? "rand" : "randn";
  int n = qkvL_checkshape(L, 1, size, &dt, &dev, "size");
  if (!qkv_is_float(dt))
    luaL_argerror(L, n + 1, "random tensors are float32 or float64");
  qkv_tensor *t = qkvL_new(L, dt, dev, n, size, 0);
  qkvL_check(L, name, qkv_random(t, dist));
  return 1;
}

static int b_rand (lua_State *L) { return random_tensor(L, QKV_UNIFORM); }
static int b_randn (lua_State *L) { return random_tensor(L, QKV_NORMAL); }

static int b_seed (lua_State *L) {
  qkvL_noextra(L, "seed", 1);
  qkv_seed((uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

static int b_initial_seed (lua_State *L) {
  lua_pushinteger(L, (lua_Integer)qkv_initial_seed());
  return 1;
}

static int b_clock (lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

static int b_memory (lua_State *L) {
  lua_pushinteger(L, (lua_Integer)qkv_memory_live());
  return 1;
}

/* qkv._memory_limit([bytes]) -> the limit before; bytes sets it (0: the
   machine's RAM). Internal, for tests of the collect-and-retry path. */
static int b_memory_limit (lua_State *L) {
  lua_Integer old = (lua_Integer)qkv_memory_limit();
  if (!lua_isnoneornil(L, 1)) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0, 1, "bytes must be >= 0");
    qkv_memory_set_limit((size_t)n);
  }
  lua_pushinteger(L, old);
  return 1;
}

static int b_is_tensor (lua_State *L) {
  lua_pushboolean(L, qkvL_istensor(L, 1) != NULL);
  return 1;
}

void qkvL_open_build (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {"tensor", b_tensor}, {"zeros", b_zeros}, {"ones", b_ones},
    {"full", b_full}, {"eye", b_eye}, {"arange", b_arange},
    {"rand", b_rand}, {"randn", b_randn}, {"seed", b_seed},
    {"initial_seed", b_initial_seed}, {"clock", b_clock},
    {"memory", b_memory}, {"_memory_limit", b_memory_limit},
    {"is_tensor", b_is_tensor}, {NULL, NULL}
  };
  lua_pushvalue(L, module);
  luaL_setfuncs(L, f, 0);
  lua_pop(L, 1);
  (void)mt; (void)methods;
}
