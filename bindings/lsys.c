/*
** lsys.c -- what the Lua-side library needs from the system and Lua cannot
** ask: whether a stream is a terminal and how wide it is (for the terminal
** heatmaps of qkv.plot and the REPL; internal, the names start with '_'),
** and whether a GPU can be used; qkv.cuda's functions, and its events
** (qkv.cuda.Event, as torch.cuda.Event).
*/
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lauxqkv.h"
#include "../vm/core/backend.h"
#include "../vm/dispatch/plugin.h"

/* qkv._isatty([fd = 1]) -> boolean */
static int s_isatty (lua_State *L) {
  int fd = (int)luaL_optinteger(L, 1, 1);
  lua_pushboolean(L, fd >= 0 && isatty(fd));
  return 1;
}

/* qkv._termsize([fd = 1]) -> columns, rows; or nothing when not a terminal */
static int s_termsize (lua_State *L) {
  int fd = (int)luaL_optinteger(L, 1, 1);
  struct winsize ws;
  if (fd < 0 || ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 0;
  lua_pushinteger(L, ws.ws_col);
  lua_pushinteger(L, ws.ws_row);
  return 2;
}

/* qkv.cuda_available() -> boolean [, why not]: loads the CUDA plugin the
   first time and says whether it found a GPU */
static int s_cuda_available (lua_State *L) {
  char why[600];
  int ok = qkv_cuda(why, sizeof why) != NULL;
  lua_pushboolean(L, ok);
  if (ok) return 1;
  lua_pushstring(L, why);
  return 2;
}

/* qkv._backend_entries() -> {{name =, cpu =, cuda =}, ...}: the dispatch
   table's entries and which backends fill them (cuda false when the GPU
   backend is not loaded); for tests/backends/cuda/ */
static int s_backend_entries (lua_State *L) {
  const qkv_backend *cpu = qkv_backend_of(QKV_CPU), *gpu = qkv_backend_of(QKV_CUDA);
  const char *name;
  int filled;
  lua_newtable(L);
  for (int i = 0; (name = qkv_backend_entry(cpu, i, &filled)) != NULL; i++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushboolean(L, filled);
    lua_setfield(L, -2, "cpu");
    qkv_backend_entry(gpu, i, &filled);
    lua_pushboolean(L, gpu != NULL && filled);
    lua_setfield(L, -2, "cuda");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static const qkv_cuda_api *cuda (lua_State *L, const char *name) {
  qkvL_checkcuda(L, name);
  return qkv_cuda_loaded();
}

/* qkv.cuda.memory() -> {allocated, cached, peak, free, total} in bytes */
static int c_memory (lua_State *L) {
  qkv_cuda_memory m;
  cuda(L, "memory")->memory(&m);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)m.allocated); lua_setfield(L, -2, "allocated");
  lua_pushinteger(L, (lua_Integer)m.cached); lua_setfield(L, -2, "cached");
  lua_pushinteger(L, (lua_Integer)m.peak); lua_setfield(L, -2, "peak");
  lua_pushinteger(L, (lua_Integer)m.free); lua_setfield(L, -2, "free");
  lua_pushinteger(L, (lua_Integer)m.total); lua_setfield(L, -2, "total");
  return 1;
}

static int c_synchronize (lua_State *L) {
  qkvL_check(L, "synchronize", cuda(L, "synchronize")->synchronize());
  return 0;
}

static int c_empty_cache (lua_State *L) {
  cuda(L, "empty_cache")->empty_cache();
  return 0;
}

static int c_device_name (lua_State *L) {
  lua_pushstring(L, cuda(L, "device_name")->device_name());
  return 1;
}

/* qkv.cuda.attention_backend([path]) -> the path the last fused attention
   took; path ("auto", "cudnn", "wgmma", "mma" or "fp32") forces the next ones' */
static int c_attention_backend (lua_State *L) {
  static const char *const paths[] = {"auto", "cudnn", "wgmma", "mma", "fp32", NULL};
  const qkv_cuda_api *a = cuda(L, "attention_backend");
  const char *last = a->attention_backend();
  if (!lua_isnoneornil(L, 1)) {
    const char *p = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : "";
    int i = 0;
    while (paths[i] && strcmp(paths[i], p)) i++;
    if (paths[i] == NULL)
      return luaL_error(L, "qkv.cuda.attention_backend: path %s is none of \"auto\", \"cudnn\", "
                        "\"wgmma\", \"mma\", \"fp32\"", luaL_tolstring(L, 1, NULL));
    a->force_attention(i == 0 ? NULL : paths[i]);
  }
  lua_pushstring(L, last);
  return 1;
}

/* the float32 matmul precision, and the GPU's TF32 with it */
static void set_precision (qkv_precision p) {
  qkv_set_matmul_precision(p);
  qkv_cuda_follow_precision();
}

/* qkv.cuda.allow_tf32([on]) -> whether it was on; on sets it: PyTorch's
   torch.backends.cuda.matmul.allow_tf32, the float32 matmul precision
   "high" (true) or "highest" (false) */
static int c_allow_tf32 (lua_State *L) {
  cuda(L, "allow_tf32");
  lua_pushboolean(L, qkv_matmul_precision() != QKV_PREC_HIGHEST);
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    set_precision(lua_toboolean(L, 1) ? QKV_PREC_HIGH : QKV_PREC_HIGHEST);
  }
  return 1;
}

/* ---- events: marks in the GPU's stream, timed on its clock ---- */

#define EVENT "qkv.cuda.Event"

typedef struct { void *h; int timing, recorded; } Event;

static Event *checkevent (lua_State *L, int arg, const char *fname) {
  Event *e = (Event *)luaL_testudata(L, arg, EVENT);
  if (e == NULL && arg == 1 && lua_isnoneornil(L, 1))   /* e.record(), as the Lua objects say */
    luaL_error(L, "%s: called with '.', use event:%s()", fname, strchr(fname, ':') + 1);
  if (e == NULL)
    luaL_error(L, "%s: %s must be a qkv.cuda.Event, got %s", fname, arg == 1 ? "self" : "stop",
               luaL_typename(L, arg));
  return e;
}

/* qkv.cuda.Event([{enable_timing = true}]) -> a new event, not recorded */
static int c_event (lua_State *L) {
  static const char *const known[] = {"enable_timing", NULL};
  const char *fname = "qkv.cuda.Event";
  qkvL_noextra(L, fname, 1);
  int timing = 1;
  if (!lua_isnoneornil(L, 1)) {
    if (!lua_istable(L, 1))
      return luaL_error(L, "%s: opts must be a table, got %s", fname, luaL_typename(L, 1));
    qkvL_checkopts(L, 1, fname, known);
    int t = lua_getfield(L, 1, "enable_timing");
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
      return luaL_error(L, "%s: enable_timing must be a boolean, got %s", fname,
                        luaL_typename(L, -1));
    if (t == LUA_TBOOLEAN) timing = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  const qkv_cuda_api *a = cuda(L, fname);
  Event *e = (Event *)lua_newuserdatauv(L, sizeof *e, 0);
  e->h = NULL;
  e->timing = timing;
  e->recorded = 0;
  luaL_setmetatable(L, EVENT);
  if ((e->h = a->event_new(timing)) == NULL) return luaL_error(L, "%s: %s", fname, a->error());
  return 1;
}

static int ev_gc (lua_State *L) {
  Event *e = (Event *)luaL_checkudata(L, 1, EVENT);
  const qkv_cuda_api *a = qkv_cuda_loaded();
  if (e->h && a) a->event_free(e->h);
  e->h = NULL;
  return 0;
}

/* e:record() -> e: the mark after every kernel launched so far */
static int ev_record (lua_State *L) {
  Event *e = checkevent(L, 1, "Event:record");
  qkvL_noextra(L, "Event:record", 1);
  qkvL_check(L, "Event:record", qkv_cuda_loaded()->event_record(e->h));
  e->recorded = 1;
  lua_settop(L, 1);
  return 1;
}

/* e:synchronize(): waits until the GPU has passed the mark */
static int ev_synchronize (lua_State *L) {
  Event *e = checkevent(L, 1, "Event:synchronize");
  qkvL_noextra(L, "Event:synchronize", 1);
  qkvL_check(L, "Event:synchronize", qkv_cuda_loaded()->event_wait(e->h));
  return 0;
}

/* e:query() -> whether the GPU has passed the mark (true if never recorded) */
static int ev_query (lua_State *L) {
  Event *e = checkevent(L, 1, "Event:query");
  qkvL_noextra(L, "Event:query", 1);
  int done = 0;
  qkvL_check(L, "Event:query", qkv_cuda_loaded()->event_done(e->h, &done));
  lua_pushboolean(L, done);
  return 1;
}

/* e:elapsed_time(stop) -> ms from e's mark to stop's, waiting for stop */
static int ev_elapsed_time (lua_State *L) {
  const char *fname = "Event:elapsed_time";
  Event *a = checkevent(L, 1, fname), *b = checkevent(L, 2, fname);
  qkvL_noextra(L, fname, 2);
  for (int i = 0; i < 2; i++) {
    Event *e = i ? b : a;
    const char *which = i ? "stop" : "self";
    if (!e->timing)
      return luaL_error(L, "%s: %s was made with enable_timing = false", fname, which);
    if (!e->recorded) return luaL_error(L, "%s: %s was never recorded", fname, which);
  }
  float ms = 0;
  qkvL_check(L, fname, qkv_cuda_loaded()->event_elapsed(a->h, b->h, &ms));
  lua_pushnumber(L, ms);
  return 1;
}

static int ev_tostring (lua_State *L) {
  Event *e = (Event *)luaL_checkudata(L, 1, EVENT);
  lua_pushfstring(L, "qkv.cuda.Event(%s%s)", e->recorded ? "recorded" : "not recorded",
                  e->timing ? "" : ", enable_timing = false");
  return 1;
}

/* the metatable, and its methods as qkv.cuda._Event (for qkv.doc) into the
   table on top */
static void open_event (lua_State *L) {
  static const luaL_Reg meta[] = {{"__gc", ev_gc}, {"__tostring", ev_tostring}, {NULL, NULL}};
  static const luaL_Reg methods[] = {
    {"record", ev_record}, {"synchronize", ev_synchronize}, {"query", ev_query},
    {"elapsed_time", ev_elapsed_time}, {NULL, NULL}};
  luaL_newmetatable(L, EVENT);
  luaL_setfuncs(L, meta, 0);
  luaL_newlib(L, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_setfield(L, -3, "_Event");
  lua_pop(L, 1);
}

/* qkv.set_default_device(dev): where new tensors go ("cpu" or "cuda") */
static int s_set_default_device (lua_State *L) {
  qkvL_set_default_device(qkvL_checkdevice(L, 1));
  return 0;
}

static int s_default_device (lua_State *L) {
  lua_pushstring(L, qkv_device_name(qkvL_default_device()));
  return 1;
}

/* qkv.set_num_threads(n): the host threads the CPU kernels use from now
   on, as torch.set_num_threads */
static int s_set_num_threads (lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  qkvL_noextra(L, "set_num_threads", 1);
  if (n < 1 || n > QKV_MAX_THREADS)
    return luaL_error(L, "set_num_threads: n must be in [1, %d], got %I", QKV_MAX_THREADS, n);
  qkv_set_num_threads((int)n);
  return 0;
}

static const char *const precisions[] = {"highest", "high", "medium", NULL};

/* qkv.set_float32_matmul_precision(precision), as PyTorch's */
static int s_set_precision (lua_State *L) {
  const char *name = "qkv.set_float32_matmul_precision";
  qkvL_noextra(L, "set_float32_matmul_precision", 1);
  const char *p = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : "";
  int i = 0;
  while (precisions[i] && strcmp(precisions[i], p) != 0) i++;
  if (precisions[i] == NULL)
    return luaL_error(L, "%s: precision must be \"highest\", \"high\" or \"medium\", got %s",
                      name, luaL_tolstring(L, 1, NULL));
  set_precision((qkv_precision)i);
  return 0;
}

/* qkv.get_float32_matmul_precision() -> "highest", "high" or "medium" */
static int s_get_precision (lua_State *L) {
  qkvL_noextra(L, "get_float32_matmul_precision", 0);
  lua_pushstring(L, precisions[qkv_matmul_precision()]);
  return 1;
}

/* qkv._split_products(on): the precision's bfloat16 parts on any machine
   and size (internal, for tests where the CPU has no bfloat16 unit) */
static int s_split_products (lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  qkv_force_split_products(lua_toboolean(L, 1));
  return 0;
}

/* qkv.get_num_threads() -> n */
static int s_get_num_threads (lua_State *L) {
  qkvL_noextra(L, "get_num_threads", 0);
  lua_pushinteger(L, qkv_num_threads());
  return 1;
}

void qkvL_open_sys (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {"_isatty", s_isatty}, {"_termsize", s_termsize},
    {"cuda_available", s_cuda_available}, {"set_default_device", s_set_default_device},
    {"default_device", s_default_device}, {"_backend_entries", s_backend_entries},
    {"set_num_threads", s_set_num_threads}, {"get_num_threads", s_get_num_threads},
    {"set_float32_matmul_precision", s_set_precision},
    {"get_float32_matmul_precision", s_get_precision}, {"_split_products", s_split_products},
    {NULL, NULL}
  };
  static const luaL_Reg c[] = {
    {"memory", c_memory}, {"synchronize", c_synchronize}, {"empty_cache", c_empty_cache},
    {"device_name", c_device_name}, {"allow_tf32", c_allow_tf32},
    {"attention_backend", c_attention_backend}, {"Event", c_event}, {NULL, NULL}
  };
  lua_pushvalue(L, module);
  luaL_setfuncs(L, f, 0);
  luaL_newlib(L, c);
  lua_pushcfunction(L, s_cuda_available);
  lua_setfield(L, -2, "is_available");
  open_event(L);
  lua_setfield(L, -2, "cuda");
  lua_pop(L, 1);
  (void)mt; (void)methods;
}
