/*
** lauxtensor.c -- making, checking, viewing, moving and freeing the
** qkv.Tensor userdata, and keeping Lua's collector informed of the memory
** tensors hold.  It registers no Lua function of its own.
*/
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lauxqkv.h"
#include "../vm/core/backend.h"
#include "../vm/dispatch/plugin.h"

/*
** Lua sees only the small header userdata, so we tell its collector about
** the storage bytes: a GC step per 64 KiB allocated paces the incremental
** collector, and a full collection whenever live tensor memory passes
** twice what survived the last one bounds the garbage in any loop.  The
** collector works about as much as it is told was allocated, and a cycle
** walks its whole heap: told the bytes as they are, it ran a cycle per
** heap's worth of tensors (19 a batch of MiniLM, whose vocabulary makes a
** 2.6 MB heap: 6% of its time; the small block's training step took 15%
** longer).  So the bytes are scaled to a cycle per GC_CYCLE_KB of tensors,
** or per heap where the heap is larger: about twice that much garbage may
** wait (a loop of 1 MB temporaries peaks at 14 MB rather than 7; 32 MB
** gave 52 for no more speed; bench/NOTES.md).
*/
#define GC_STEP_BYTES ((size_t)64 << 10)
#define GC_CYCLE_KB ((size_t)8 << 10)
#define GC_MIN_THRESHOLD ((size_t)256 << 20)

static size_t gc_pending;
static size_t gc_threshold = GC_MIN_THRESHOLD;

static void gc_full (lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT);
  size_t live = qkv_memory_live();
  gc_threshold = live > GC_MIN_THRESHOLD / 2 ? 2 * live : GC_MIN_THRESHOLD;
  gc_pending = 0;
}

static void gc_account (lua_State *L, size_t nbytes) {
  gc_pending += nbytes;
  if (qkv_memory_live() > gc_threshold) gc_full(L);
  else if (gc_pending >= GC_STEP_BYTES) {
    /* told as they are, tensor bytes ran a cycle per heap's worth */
    size_t heap = (size_t)lua_gc(L, LUA_GCCOUNT, 0);
    size_t kb = (gc_pending >> 10) * heap / (heap > GC_CYCLE_KB ? heap : GC_CYCLE_KB);
    gc_pending = 0;
    lua_gc(L, LUA_GCSTEP, kb > INT_MAX ? INT_MAX : (int)kb);
  }
}

/*
** The name of the running C function, for messages: what the call site
** calls it, or else its key in the qkv module or the tensor methods (a
** function reached through pcall has no call-site name).
*/
static const char *fname (lua_State *L) {
  static const char *const tables[] = {"qkv", "qkv.Tensor"};
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "nf", &ar)) return "qkv";
  if (ar.name) return ar.name;
  int fn = lua_gettop(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  for (int i = 0; i < 2; i++) {
    if (lua_getfield(L, fn + 1, tables[i]) == LUA_TTABLE) {
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_rawequal(L, -1, fn) && lua_type(L, -2) == LUA_TSTRING)
          return lua_tostring(L, -2);  /* the table keeps the key alive */
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  return "qkv";
}

/*
** Two metatables, the same but for __gc: tensors holding a storage of
** their own need a finalizer; small tensors (INLINE_MAX bytes of data or
** less) carry their storage inside the userdata, and views of those keep
** that owner alive through a user value.  Neither needs a finalizer, which
** costs a small op as much as the rest of its bookkeeping, and Lua's heap
** accounting covers their bytes without our help.  Both metatables are
** kept in the registry under the addresses of the keys below (luaL_checkudata's
** lookup by name interns the name and compares strings on every call), and
** their addresses are cached for the registry last seen.  luaopen_qkv
** resets the cache, so a new state whose registry lands where a closed
** one's was cannot match a stale address.  Like the storage pool, this
** assumes one thread runs qkv at a time.
*/
#define INLINE_MAX 1024

typedef struct { qkv_tensor t; qkv_storage s; } box;   /* then the data */
#define BOX_DATA ((sizeof(box) + 15) & ~(size_t)15)

static const char gckey = 0, plainkey = 0;
static const void *seen_registry, *seen_gc, *seen_plain;

void qkvL_setmetakey (lua_State *L, int mt) {
  lua_pushvalue(L, mt);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &gckey);
  seen_registry = NULL;
}

/* the metatable without __gc: a copy, made once mt is complete */
void qkvL_plainmeta (lua_State *L, int mt) {
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, mt)) {
    if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "__gc") == 0) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &plainkey);
  seen_registry = NULL;
}

void qkvL_pushplainmeta (lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &plainkey);
}

static void see (lua_State *L) {
  const void *reg = lua_topointer(L, LUA_REGISTRYINDEX);
  if (reg == seen_registry) return;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &gckey);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &plainkey);
  seen_gc = lua_topointer(L, -2);
  seen_plain = lua_topointer(L, -1);
  seen_registry = reg;
  lua_pop(L, 2);
}

qkv_tensor *qkvL_istensor (lua_State *L, int arg) {
  void *p = lua_touserdata(L, arg);
  if (p == NULL || !lua_getmetatable(L, arg)) return NULL;
  const void *mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  see(L);
  return mt != NULL && (mt == seen_gc || mt == seen_plain) ? (qkv_tensor *)p : NULL;
}

qkv_tensor *qkvL_totensor (lua_State *L, int arg) {
  qkv_tensor *t = qkvL_istensor(L, arg);
  return (t && !qkv_is_closed(t)) ? t : NULL;
}

qkv_tensor *qkvL_checktensor (lua_State *L, int arg) {
  qkv_tensor *t = qkvL_istensor(L, arg);
  if (t == NULL) luaL_typeerror(L, arg, QKV_TENSOR);
  if (qkv_is_closed(t)) luaL_argerror(L, arg, "tensor was closed");
  return t;
}

/* a userdata of `size` bytes, its header zeroed and closed until a
   storage is set, `gc`: with a finalizer */
static qkv_tensor *newud (lua_State *L, size_t size, int nuv, int gc) {
  qkv_tensor *t = (qkv_tensor *)lua_newuserdatauv(L, size, nuv);
  memset(t, 0, sizeof *t);
  t->storage = &qkv_closed_storage;
  lua_rawgetp(L, LUA_REGISTRYINDEX, gc ? &gckey : &plainkey);
  lua_setmetatable(L, -2);
  return t;
}

static int is_inline (const qkv_storage *s) { return s->pool < 0; }

/* t, or a 0-d t seen as (1,) in *v */
qkv_tensor *qkvL_one_dim (qkv_tensor *v, const qkv_tensor *t) {
  *v = *t;
  if (t->ndim == 0) qkv_view_unsqueeze(v, t, 0);
  return v;
}

/*
** A view of the tensor at `src` (sharing its storage).  A view of a small
** tensor references the userdata that holds the storage: src itself, or
** the owner src references.  The view was computed from src's header, so
** a src closed since (by a metamethod the binding ran) is refused here.
*/
qkv_tensor *qkvL_pushview (lua_State *L, const qkv_tensor *view, int src) {
  const qkv_tensor *s = qkvL_istensor(L, src);
  if (s == NULL || qkv_is_closed(s) || s->storage != view->storage)
    luaL_error(L, "%s: tensor was closed", fname(L));
  /* every tensor has a shape that qkvL_new would make, empty ones too: a
     view that would not (an empty tensor split into huge sizes) is an
     error here, whichever binding made it */
  qkvL_checkbytes(L, NULL, view->ndim, view->size, view->dtype);
  int inl = is_inline(view->storage);
  src = lua_absindex(L, src);
  qkv_tensor *t = newud(L, sizeof *t, inl, !inl);
  *t = *view;
  if (!inl) {
    qkv_storage_retain(t->storage);
    return t;
  }
  const box *b = lua_touserdata(L, src);
  if (b != NULL && &b->s == view->storage) lua_pushvalue(L, src);
  else if (lua_getiuservalue(L, src, 1) != LUA_TUSERDATA)
    luaL_error(L, "%s: internal error: a view without its owner", fname(L));
  lua_setiuservalue(L, -2, 1);
  return t;
}

static qkv_tensor *new_inline (lua_State *L, size_t nbytes, int zero) {
  box *b = (box *)newud(L, BOX_DATA + (nbytes ? nbytes : 1), 0, 0);
  b->s.data = (char *)b + BOX_DATA;
  b->s.nbytes = nbytes;
  b->s.refcount = 1;
  b->s.device = QKV_CPU;
  b->s.pool = -1;
  b->s.version = 0;
  if (zero) memset(b->s.data, 0, nbytes);
  b->t.storage = &b->s;
  return &b->t;
}

/*
** A new contiguous tensor.  The userdata exists before the storage, so a
** memory error while making it cannot leak the storage; a failed
** allocation is retried once after a full collection.
*/
int64_t qkvL_checkbytes (lua_State *L, const char *name, int ndim, const int64_t *size,
                         qkv_dtype dt) {
  int64_t n;
  if (qkv_numel_of(ndim, size, qkv_elsize(dt), &n) != 0) {
    char buf[200];
    qkv_shape_str(buf, sizeof buf, ndim, size);
    luaL_error(L, "%s: shape %s is too large", name ? name : fname(L), buf);
  }
  return n;
}

qkv_tensor *qkvL_new (lua_State *L, qkv_dtype dt, qkv_device dev, int ndim,
                      const int64_t *size, int zero) {
  int64_t n = qkvL_checkbytes(L, NULL, ndim, size, dt);
  size_t nbytes = (size_t)n * qkv_elsize(dt);
  qkv_tensor *t;
  if (dev == QKV_CUDA && qkv_cuda_loaded() == NULL) qkvL_checkcuda(L, fname(L));
  if (dev == QKV_CPU && nbytes <= INLINE_MAX)
    t = new_inline(L, nbytes, zero);
  else {
    t = newud(L, sizeof *t, 0, 1);
    qkv_storage *s = qkv_storage_new(dev, nbytes, zero);
    if (s == NULL) {
      gc_full(L);
      s = qkv_storage_new(dev, nbytes, zero);
      if (s == NULL && dev == QKV_CUDA && qkv_cuda_loaded())
        luaL_error(L, "%s: %s", fname(L), qkv_cuda_loaded()->error());
      if (s == NULL)
        luaL_error(L, "%s: out of memory: tried to allocate %I bytes", fname(L),
                   (lua_Integer)nbytes);
    }
    t->storage = s;
    gc_account(L, nbytes);
  }
  t->dtype = dt;
  qkv_set_contiguous(t, ndim, size);
  return t;
}

qkv_tensor *qkvL_newlike (lua_State *L, const qkv_tensor *t, qkv_dtype dt) {
  return qkvL_new(L, dt, t->storage->device, t->ndim, t->size, 0);
}

/*
** Closing and freeing.  A collected tensor is unreachable, so no running
** call can hold it: __gc releases its storage at once.  __close is called
** by scripts, also from a metamethod or a finalizer that a qkv function
** runs while it holds the tensor's data (an options table's __index, a
** collection during an allocation).  Such a close marks the tensor closed
** (every op and view refuses it from then on) but keeps the storage in a
** deferred list, released by the next free made outside any qkv call.
** Outside the main thread a call may be running in the coroutine that
** resumed this one, which no stack walk sees: closes there always defer.
*/
static const char bindkey = 0;     /* registry: the set of qkv's C functions */
static qkv_storage **deferred;
static size_t ndeferred, maxdeferred;

/* the C functions registered in these tables, as the set of bindings */
void qkvL_markbindings (lua_State *L, const int *tables, int n) {
  lua_newtable(L);
  for (int i = 0; i < n; i++) {
    lua_pushnil(L);
    while (lua_next(L, tables[i])) {
      if (lua_iscfunction(L, -1)) {
        lua_pushboolean(L, 1);
        lua_rawset(L, -4);
      } else lua_pop(L, 1);
    }
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &bindkey);
}

/* whether a qkv function may be running below this one */
static int in_call (lua_State *L) {
  lua_Debug ar;
  int busy = 0;
  if (!lua_pushthread(L)) busy = 1;
  lua_pop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &bindkey);
  for (int level = 1; !busy && lua_getstack(L, level, &ar); level++) {
    lua_getinfo(L, "f", &ar);
    if (lua_iscfunction(L, -1)) busy = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return busy;
}

static void release_deferred (void) {
  while (ndeferred > 0) qkv_storage_release(deferred[--ndeferred]);
}

static void defer (lua_State *L, qkv_storage *s) {
  if (ndeferred == maxdeferred) {
    size_t n = maxdeferred ? 2 * maxdeferred : 16;
    qkv_storage **p = realloc(deferred, n * sizeof *p);
    if (p == NULL) luaL_error(L, "close: out of memory");
    deferred = p;
    maxdeferred = n;
  }
  deferred[ndeferred++] = s;
}

/* __gc: safe to call twice, and on a half-made tensor */
int qkvL_free (lua_State *L) {
  qkv_tensor *t = qkvL_istensor(L, 1);
  if (t == NULL) luaL_typeerror(L, 1, QKV_TENSOR);
  qkv_storage_release(t->storage);
  t->storage = &qkv_closed_storage;
  if (ndeferred > 0 && !in_call(L)) release_deferred();
  return 0;
}

/* __close: as __gc, or deferred while a qkv function may hold the data */
int qkvL_close (lua_State *L) {
  qkv_tensor *t = qkvL_istensor(L, 1);
  if (t == NULL) luaL_typeerror(L, 1, QKV_TENSOR);
  if (qkv_is_closed(t) || is_inline(t->storage) || !in_call(L)) return qkvL_free(L);
  defer(L, t->storage);
  t->storage = &qkv_closed_storage;
  return 0;
}

/* the state's end: nothing runs any more */
static int release_all (lua_State *L) {
  (void)L;
  release_deferred();
  return 0;
}

void qkvL_deferred_atclose (lua_State *L) {
  lua_newuserdatauv(L, 1, 0);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, release_all);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  luaL_ref(L, LUA_REGISTRYINDEX);
}


/* devices: a tensor moves with x:cuda(), x:cpu(), x:to(dev), and new ones
   made on the host go to the default device (laux.c keeps it) */

qkv_tensor *qkvL_todevice (lua_State *L, const qkv_tensor *t, qkv_device d,
                           const char *name) {
  if (d == QKV_CUDA) qkvL_checkcuda(L, name);
  qkv_tensor *r = qkvL_new(L, t->dtype, d, t->ndim, t->size, 0);
  qkvL_check(L, name, qkv_transfer(r, t));
  return r;
}

/* the tensor at the top, made on the host, moved to the default device */
void qkvL_todefault (lua_State *L, const char *name) {
  qkv_device d = qkvL_default_device();
  if (d == QKV_CPU) return;
  qkvL_todevice(L, qkvL_checktensor(L, -1), d, name);
  lua_replace(L, -2);
}

/* an expanded dim (stride 0) crosses once and is expanded again on the
   host, so that printing qkv.ones(1, "cuda"):expand(2^40) copies one
   element, not 2^40 */
const qkv_tensor *qkvL_host (lua_State *L, const qkv_tensor *t, const char *name) {
  qkv_tensor once = *t, e;
  int expanded = 0;
  if (t->storage->device == QKV_CPU) return t;
  for (int d = 0; d < t->ndim; d++)
    if (t->stride[d] == 0 && t->size[d] > 1) once.size[d] = 1, expanded = 1;
  if (!expanded) return qkvL_todevice(L, t, QKV_CPU, name);
  qkv_tensor *h = qkvL_todevice(L, &once, QKV_CPU, name);
  if (qkv_expand(&e, h, t->ndim, t->size) != 0) luaL_error(L, "%s: internal error", name);
  qkv_tensor *r = qkvL_pushview(L, &e, -1);
  lua_remove(L, -2);
  return r;
}


/*
** PyTorch's keywords as qkv's positions, for the functions that take a
** dim: when the last argument from `first` on (trailing nils aside) is a
** table with no items, x:sum{dim = 1, keepdim = true} reads as x:sum(1, true) and
** x:sum(1, {keepdim = true}) too.  names are the positions' names from
** `first` on (NULL-ended); with `dtype`, a key dtype converts argument 1
** to that dtype first, as PyTorch's dtype= does (with dtype 2, a float
** one only: mean's and softmax's, which PyTorch refuses an integer for).
** A key the function does not take, or a position given both ways, is an
** error naming fname.
** The binding calls it first, so that autograd's rule sees positions.
** (Here, not in laux.c, as it converts a tensor.)
*/
const char *const qkvL_KW_DIM[] = {"dim", NULL};
const char *const qkvL_KW_REDUCE[] = {"dim", "keepdim", NULL};
const char *const qkvL_KW_OTHER[] = {"other", NULL};
const char *const qkvL_KW_NONE[] = {NULL};

int qkvL_keywords (lua_State *L, const char *fname, int first, const char *const *names,
                   int dtype) {
  int opts = lua_gettop(L), n = 0, given = -1;
  while (opts >= first && lua_isnil(L, opts)) opts--;
  /* a table with items is a list (layer_norm's shape), left where it is */
  if (opts < first || lua_type(L, opts) != LUA_TTABLE || lua_rawlen(L, opts) > 0)
    return -1;
  const char *known[10];
  for (; names[n] && n < 8; n++) known[n] = names[n];
  known[n] = dtype ? "dtype" : NULL;
  known[n + 1] = NULL;
  if (qkvL_testopts(L, opts, fname, known)) luaL_error(L, "%s", lua_tostring(L, -1));
  if (opts - first > n)
    luaL_error(L, "%s: %d arguments before the options table, at most %d", fname,
               opts - first, n);
  lua_settop(L, opts);
  luaL_checkstack(L, n + 4, fname);
  for (int i = 0; i < n; i++) {           /* the values, in order, above the table */
    int slot = first + i;
    if (lua_getfield(L, opts, names[i]) == LUA_TNIL) {
      lua_pop(L, 1);
      if (slot < opts) lua_pushvalue(L, slot);
      else lua_pushnil(L);
    } else if (slot < opts && !lua_isnil(L, slot))
      luaL_error(L, "%s: %s is given twice, as an argument and as an option", fname,
                 names[i]);
  }
  if (dtype && lua_getfield(L, opts, "dtype") != LUA_TNIL) {   /* pushed, nil or not */
    qkv_dtype t;
    int isstr = lua_type(L, -1) == LUA_TSTRING;
    if (!isstr || !qkv_dtype_from_name(lua_tostring(L, -1), &t))
      luaL_error(L, "%s: option 'dtype' must be a dtype name (float32, float64, float16, "
                 "bfloat16, int64, int32, bool), got %s", fname,
                 isstr ? lua_tostring(L, -1) : luaL_typename(L, -1));
    if (dtype == 2 && !qkv_is_float(t))   /* mean, softmax: PyTorch refuses one */
      luaL_error(L, "%s: option 'dtype' must be a floating-point dtype (float32, float64, "
                 "float16, bfloat16), got %s", fname, qkv_dtype_name(t));
    given = (int)t;
    if (qkvL_totensor(L, 1)) {            /* else the function's own check says */
      lua_getfield(L, 1, "to");
      lua_pushvalue(L, 1);
      lua_pushvalue(L, -3);
      lua_call(L, 2, 1);
      lua_replace(L, 1);
    }
  }
  if (dtype) lua_pop(L, 1);               /* the dtype, or nil */
  lua_rotate(L, first, -(opts - first + 1));
  lua_pop(L, opts - first + 1);           /* the positions given and the table */
  return given;
}

void qkvL_args (lua_State *L, const char *fname, const char *const *names) {
  int n = 0;
  while (names[n]) n++;
  qkvL_keywords(L, fname, 2, names, 0);   /* {} is no options, x:clone{} x:clone() */
  qkvL_noextra(L, fname, 1 + n);
}
