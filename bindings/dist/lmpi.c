/*
** lmpi.c -- the module qkv.mpi: what qkv.dist (stdlib/qkv/dist/) needs
** of Open MPI, loaded only by qkv.dist, so that no other script pays for
** MPI.  Tensors here are contiguous and on the CPU (qkv.dist stages any
** other); every operation starts as MPI's nonblocking call and returns a
** request, which qkv.dist waits for at once or hands to the script.
**   mpi.launched() -> whether a launcher (mpirun) started this process
**   mpi.init() -> rank, size          MPI_Init_thread (funneled: only the
**       thread that runs Lua calls MPI); errors come back as Lua errors
**   mpi.barrier(), mpi.allreduce(t, op), mpi.bcast(t, root), mpi.allgather(src, dst),
**   mpi.reduce_scatter(src, dst, op), mpi.alltoall(src, dst),
**   mpi.isend(t, dst, tag), mpi.irecv(t, src, tag) -> a request
**       op: "sum", "max", "min", "land", "lor"; a collective given a last
**       true runs MPI's blocking call instead and returns nothing
**   req:wait() waits (Ctrl-C while waiting ends the whole job: a started
**       collective cannot be taken back); req:test() -> done; for irecv,
**       wait() is the error if the message was not the tensor's size
**   mpi.same(list) -> whether every rank passed these integers (<= 64);
**       when not, also every rank's list
**   mpi.abort(code)   MPI_Abort on the world, after stderr is flushed
** The world ends when the Lua state closes, or at exit(0) (os.exit, whose
** state stays open): the ranks first check that every one has ended (a
** rank still in a collective gets an error naming the one that ended),
** then MPI_Finalize; exit with another status leaves it unfinalized, for
** mpirun to pass on. A script that fails (vm/cli/script.c runs the
** registry's "qkv.fatal") aborts the world instead, so that no rank waits
** forever on one that is gone.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <lua.h>
#include <lauxlib.h>

#include "../../vm/core/qkv.h"
#include "../../vm/core/half.h"
#include "../lauxqkv.h"

LUALIB_API int luaopen_qkv_mpi (lua_State *L);

#define REQ "qkv.mpi.request"
#define WORLD "qkv.mpi.world"

typedef struct Req {
  MPI_Request r;
  int active, p2p;          /* p2p: a send or a receive (may be cancelled) */
  int64_t want;             /* a receive: the elements expected */
  MPI_Datatype type;
} Req;

static int initialized, finalized;

static int mpierror (lua_State *L, const char *what, int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", code);
  return luaL_error(L, "qkv.mpi: %s: %s", what, msg);
}

static void needworld (lua_State *L) {
  if (!initialized || finalized) luaL_error(L, "qkv.mpi: the world is not initialized");
}

/* a contiguous CPU tensor: its data, elements and MPI type */
static void *buffer (lua_State *L, int arg, int64_t *n, MPI_Datatype *type, qkv_dtype *dt) {
  qkv_tensor *t = qkvL_checktensor(L, arg);
  if (t->storage->device != QKV_CPU || !qkv_is_contiguous(t))
    luaL_argerror(L, arg, "qkv.mpi: a contiguous CPU tensor expected");
  *n = qkv_numel(t);
  if (*n > INT32_MAX) luaL_argerror(L, arg, "qkv.mpi: more than 2^31 - 1 elements");
  *dt = t->dtype;
  switch (t->dtype) {
  case QKV_F32: *type = MPI_FLOAT; break;
  case QKV_F64: *type = MPI_DOUBLE; break;
  case QKV_I64: *type = MPI_INT64_T; break;
  case QKV_I32: *type = MPI_INT32_T; break;
  case QKV_BOOL: *type = MPI_C_BOOL; break;
  default: *type = MPI_UINT16_T; break;        /* float16, bfloat16: their own ops */
  }
  return qkv_data(t);
}

/*
** Our own reductions: float16 and bfloat16 (T, each element read into C =
** float and rounded back), and float32 and float64 max and min that keep
** NaN (T = C, no conversion), as qkv.maximum and qkv.minimum (and PyTorch's
** all_reduce) do: MPI's own MPI_MAX and MPI_MIN kept or dropped a NaN by
** which rank held it.
*/
#define RED_OP(name, T, C, load, store, expr)                                 \
  static void name (void *in, void *io, int *len, MPI_Datatype *type) {       \
    (void)type;                                                               \
    const T *a = in;                                                          \
    T *b = io;                                                                \
    for (int i = 0; i < *len; i++) {                                          \
      C x = load(a[i]), y = load(b[i]);                                       \
      b[i] = store(expr);                                                     \
    }                                                                         \
  }
#define NANMAX (x > y || x != x) ? x : y
#define NANMIN (x < y || x != x) ? x : y
RED_OP(h_sum, uint16_t, float, qkv_h2f, qkv_f2h, x + y)
RED_OP(h_max, uint16_t, float, qkv_h2f, qkv_f2h, NANMAX)
RED_OP(h_min, uint16_t, float, qkv_h2f, qkv_f2h, NANMIN)
RED_OP(bf_sum, uint16_t, float, qkv_bf2f, qkv_f2bf, x + y)
RED_OP(bf_max, uint16_t, float, qkv_bf2f, qkv_f2bf, NANMAX)
RED_OP(bf_min, uint16_t, float, qkv_bf2f, qkv_f2bf, NANMIN)
RED_OP(f_max, float, float, , , NANMAX)
RED_OP(f_min, float, float, , , NANMIN)
RED_OP(d_max, double, double, , , NANMAX)
RED_OP(d_min, double, double, , , NANMIN)

static MPI_Op half_ops[2][3];   /* [float16, bfloat16][sum, max, min] */
static MPI_Op float_ops[2][2];  /* [float32, float64][max, min] */

static MPI_Op checkop (lua_State *L, int arg, qkv_dtype dt) {
  static const char *const names[] = {"sum", "max", "min", "land", "lor", NULL};
  int k = luaL_checkoption(L, arg, NULL, names);
  if (qkv_is_half(dt)) {
    if (k > 2) luaL_argerror(L, arg, "qkv.mpi: land and lor are for bool tensors");
    return half_ops[dt == QKV_BF16][k];
  }
  if ((dt == QKV_F32 || dt == QKV_F64) && (k == 1 || k == 2))
    return float_ops[dt == QKV_F64][k - 1];
  switch (k) {
  case 0: return MPI_SUM;
  case 1: return MPI_MAX;
  case 2: return MPI_MIN;
  case 3: return MPI_LAND;
  default: return MPI_LOR;
  }
}

/* a new request, which keeps the tensors at args alive while it runs */
static Req *newreq (lua_State *L, int a1, int a2) {
  Req *q = lua_newuserdatauv(L, sizeof *q, 2);
  memset(q, 0, sizeof *q);
  q->r = MPI_REQUEST_NULL;
  luaL_setmetatable(L, REQ);
  if (a1) { lua_pushvalue(L, a1); lua_setiuservalue(L, -2, 1); }
  if (a2) { lua_pushvalue(L, a2); lua_setiuservalue(L, -2, 2); }
  return q;
}

static int started (lua_State *L, Req *q, const char *what, int code) {
  if (code != MPI_SUCCESS) return mpierror(L, what, code);
  q->active = 1;
  return 1;
}

/* a collective's blocking form: MPI's own algorithms for it (the
   nonblocking forms go through Open MPI's libnbc, 2-3x slower on big
   messages here: bench/dist.lua); Ctrl-C reaches it through mpirun */
static int blocking (lua_State *L, int arg) { return lua_toboolean(L, arg); }

static int done (lua_State *L, const char *what, int code) {
  if (code != MPI_SUCCESS) return mpierror(L, what, code);
  return 0;
}

static int m_allreduce (lua_State *L) {
  needworld(L);
  int64_t n; MPI_Datatype ty; qkv_dtype dt;
  void *p = buffer(L, 1, &n, &ty, &dt);
  MPI_Op op = checkop(L, 2, dt);
  if (blocking(L, 3))
    return done(L, "allreduce", MPI_Allreduce(MPI_IN_PLACE, p, (int)n, ty, op, MPI_COMM_WORLD));
  Req *q = newreq(L, 1, 0);
  return started(L, q, "allreduce",
                 MPI_Iallreduce(MPI_IN_PLACE, p, (int)n, ty, op, MPI_COMM_WORLD, &q->r));
}

static int m_barrier (lua_State *L) {
  needworld(L);
  if (blocking(L, 1)) return done(L, "barrier", MPI_Barrier(MPI_COMM_WORLD));
  Req *q = newreq(L, 0, 0);
  return started(L, q, "barrier", MPI_Ibarrier(MPI_COMM_WORLD, &q->r));
}

static int m_bcast (lua_State *L) {
  needworld(L);
  int64_t n; MPI_Datatype ty; qkv_dtype dt;
  void *p = buffer(L, 1, &n, &ty, &dt);
  int root = (int)luaL_checkinteger(L, 2);
  if (blocking(L, 3)) return done(L, "bcast", MPI_Bcast(p, (int)n, ty, root, MPI_COMM_WORLD));
  Req *q = newreq(L, 1, 0);
  return started(L, q, "bcast", MPI_Ibcast(p, (int)n, ty, root, MPI_COMM_WORLD, &q->r));
}

/* src and dst for the collectives that spread or gather blocks: dst has
   `ratio` times src's elements (a negative ratio: src has -ratio times) */
static void pair (lua_State *L, void **s, void **d, int64_t *ns, MPI_Datatype *ty,
                  qkv_dtype *dt, int64_t ratio) {
  int64_t nd; MPI_Datatype t2; qkv_dtype d2;
  *s = buffer(L, 1, ns, ty, dt);
  *d = buffer(L, 2, &nd, &t2, &d2);
  int ok = *dt == d2 && (ratio > 0 ? nd == *ns * ratio : *ns == nd * -ratio);
  if (!ok) luaL_error(L, "qkv.mpi: source and destination do not fit");
}

static int worldsize (void) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

static int m_allgather (lua_State *L) {
  needworld(L);
  void *s, *d; int64_t n; MPI_Datatype ty; qkv_dtype dt;
  pair(L, &s, &d, &n, &ty, &dt, worldsize());
  if (blocking(L, 3))
    return done(L, "allgather", MPI_Allgather(s, (int)n, ty, d, (int)n, ty, MPI_COMM_WORLD));
  Req *q = newreq(L, 1, 2);
  return started(L, q, "allgather",
                 MPI_Iallgather(s, (int)n, ty, d, (int)n, ty, MPI_COMM_WORLD, &q->r));
}

static int m_reduce_scatter (lua_State *L) {
  needworld(L);
  void *s, *d; int64_t n; MPI_Datatype ty; qkv_dtype dt;
  int w = worldsize();
  pair(L, &s, &d, &n, &ty, &dt, -w);
  MPI_Op op = checkop(L, 3, dt);
  if (blocking(L, 4))
    return done(L, "reduce_scatter",
                MPI_Reduce_scatter_block(s, d, (int)(n / w), ty, op, MPI_COMM_WORLD));
  Req *q = newreq(L, 1, 2);
  return started(L, q, "reduce_scatter",
                 MPI_Ireduce_scatter_block(s, d, (int)(n / w), ty, op, MPI_COMM_WORLD, &q->r));
}

static int m_alltoall (lua_State *L) {
  needworld(L);
  void *s, *d; int64_t n; MPI_Datatype ty; qkv_dtype dt;
  int w = worldsize();
  pair(L, &s, &d, &n, &ty, &dt, 1);
  if (n % w != 0) luaL_error(L, "qkv.mpi: alltoall: %d elements in %d blocks", (int)n, w);
  if (blocking(L, 3))
    return done(L, "alltoall",
                MPI_Alltoall(s, (int)(n / w), ty, d, (int)(n / w), ty, MPI_COMM_WORLD));
  Req *q = newreq(L, 1, 2);
  return started(L, q, "alltoall",
                 MPI_Ialltoall(s, (int)(n / w), ty, d, (int)(n / w), ty, MPI_COMM_WORLD, &q->r));
}

static int checkpeer (lua_State *L, int arg) {
  lua_Integer r = luaL_checkinteger(L, arg);
  if (r < 0 || r >= worldsize()) luaL_argerror(L, arg, "qkv.mpi: no such rank");
  return (int)r;
}

static int checktag (lua_State *L, int arg) {
  lua_Integer t = luaL_checkinteger(L, arg);
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (t < 0 || (flag && t > *ub)) luaL_argerror(L, arg, "qkv.mpi: tag out of range");
  return (int)t;
}

static int m_isend (lua_State *L) {
  needworld(L);
  int64_t n; MPI_Datatype ty; qkv_dtype dt;
  void *p = buffer(L, 1, &n, &ty, &dt);
  int dst = checkpeer(L, 2), tag = checktag(L, 3);
  Req *q = newreq(L, 1, 0);
  q->p2p = 1;
  return started(L, q, "isend", MPI_Isend(p, (int)n, ty, dst, tag, MPI_COMM_WORLD, &q->r));
}

static int m_irecv (lua_State *L) {
  needworld(L);
  int64_t n; MPI_Datatype ty; qkv_dtype dt;
  void *p = buffer(L, 1, &n, &ty, &dt);
  int src = checkpeer(L, 2), tag = checktag(L, 3);
  Req *q = newreq(L, 1, 0);
  q->p2p = 1, q->want = n, q->type = ty;
  return started(L, q, "irecv", MPI_Irecv(p, (int)n, ty, src, tag, MPI_COMM_WORLD, &q->r));
}

/* MPI_Test until done: yields the CPU now and then (ranks may outnumber
   the cores); Ctrl-C aborts the world */
static int finish (lua_State *L, Req *q) {
  MPI_Status st;
  int flag = 0;
  for (long i = 0; q->active; i++) {
    int e = MPI_Test(&q->r, &flag, &st);
    if (e != MPI_SUCCESS) { q->active = 0; return mpierror(L, "wait", e); }
    if (flag) break;
    if (qkv_interrupted) {
      fputs("qkv: interrupted while waiting for the other ranks\n", stderr);
      fflush(stderr);
      finalized = 1;
      MPI_Abort(MPI_COMM_WORLD, 130);
    }
    if (i > 2000) sched_yield();
  }
  if (!q->active) return 0;
  q->active = 0;
  if (q->want > 0) {
    int got = 0;
    MPI_Get_count(&st, q->type, &got);
    if (got != q->want)
      return luaL_error(L, "qkv.mpi: received %d elements, expected %d", got, (int)q->want);
  }
  return 0;
}

static int r_wait (lua_State *L) {
  finish(L, luaL_checkudata(L, 1, REQ));
  return 0;
}

static int r_test (lua_State *L) {
  Req *q = luaL_checkudata(L, 1, REQ);
  int flag = 1;
  if (q->active) {
    int e = MPI_Test(&q->r, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) { q->active = 0; return mpierror(L, "test", e); }
    if (flag) q->active = 0;
  }
  lua_pushboolean(L, flag);
  return 1;
}

/* a request dropped while running: a send or receive is cancelled, a
   collective (which every rank started) waited for */
static int r_gc (lua_State *L) {
  Req *q = luaL_checkudata(L, 1, REQ);
  if (q->active && initialized && !finalized) {
    if (q->p2p) MPI_Cancel(&q->r);
    MPI_Wait(&q->r, MPI_STATUS_IGNORE);
  }
  q->active = 0;
  return 0;
}

/* the check behind mpi.same: this rank's n numbers (n <= SAME) against
   every other's. Each rank sends its count and its numbers padded to
   SAME, so that lists of different lengths compare (as different) rather
   than overrun MPI's buffers: one allreduce of (x, -x) with MPI_MIN, and
   only when they differ an allgather into all (size x (SAME + 1): each
   rank's count, then its numbers). 1: the same; 0: not; else MPI's error
   code, negated */
#define SAME 64
#define ENDED 4          /* the numbers of a rank whose script has ended:
                            qkv.dist's KIND.ended, alone */
static int compare (const int64_t *list, int n, int64_t *all) {
  enum { W = SAME + 1 };
  int64_t v[2 * W] = {0};
  v[0] = n;
  memcpy(v + 1, list, sizeof *list * (size_t)n);
  for (int i = 0; i < W; i++) v[W + i] = -v[i];
  int e = MPI_Allreduce(MPI_IN_PLACE, v, 2 * W, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  if (e != MPI_SUCCESS) return -e;
  int same = 1;
  for (int i = 0; i < W; i++) same = same && v[i] == -v[W + i];
  if (same) return 1;
  int64_t mine[W] = {0};
  mine[0] = n;
  memcpy(mine + 1, list, sizeof *list * (size_t)n);
  e = MPI_Allgather(mine, W, MPI_INT64_T, all, W, MPI_INT64_T, MPI_COMM_WORLD);
  return e != MPI_SUCCESS ? -e : 0;
}

/* mpi.same(list) -> true when every rank passed the same list of at most
   SAME integers, else false and every rank's list ({{...}, ...}, rank r's
   at r + 1): qkv.dist's check that the ranks agree, before each
   collective, made cheap */
static int m_same (lua_State *L) {
  needworld(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  int64_t list[SAME];
  int n = (int)luaL_len(L, 1);
  luaL_argcheck(L, n <= SAME, 1, "at most 64 numbers");
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    list[i] = (int64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
  }
  int size = worldsize();
  int64_t *all = lua_newuserdatauv(L, sizeof(int64_t) * (SAME + 1) * (size_t)size, 0);
  int same = compare(list, n, all);
  if (same < 0) return mpierror(L, "same", -same);
  lua_pushboolean(L, same);
  if (same) return 1;
  lua_createtable(L, size, 0);
  for (int r = 0; r < size; r++) {
    const int64_t *row = all + (size_t)r * (SAME + 1);
    int k = row[0] >= 0 && row[0] <= SAME ? (int)row[0] : 0;
    lua_createtable(L, k, 0);
    for (int i = 0; i < k; i++) {
      lua_pushinteger(L, (lua_Integer)row[i + 1]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_rawseti(L, -2, r + 1);
  }
  return 2;
}

static int m_launched (lua_State *L) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                     "PMI_SIZE", NULL};
  int yes = 0;
  for (int i = 0; vars[i] && !yes; i++) yes = getenv(vars[i]) != NULL;
  lua_pushboolean(L, yes);
  return 1;
}

static int abort_world (lua_State *L) {
  int code = (int)luaL_optinteger(L, 1, 1);
  fflush(stdout);
  fflush(stderr);
  if (initialized && !finalized) {
    finalized = 1;
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  exit(code);
}

/* the end of this rank's script: first a check like a collective's, with
   the numbers {ENDED}, repeated until every rank has ended; a rank still
   in a collective's check then gets an error naming this one ("rank 0
   ended its script") instead of waiting forever for it. Then MPI's
   finalisation, which waits for every rank */
static void end_world (void) {
  if (!initialized || finalized) return;
  finalized = 1;
  const int64_t ended = ENDED;
  int64_t *all = malloc(sizeof(int64_t) * (SAME + 1) * (size_t)worldsize());
  if (all)
    while (compare(&ended, 1, all) == 0) continue;
  free(all);
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 3; k++) MPI_Op_free(&half_ops[i][k]);
    for (int k = 0; k < 2; k++) MPI_Op_free(&float_ops[i][k]);
  }
  MPI_Finalize();
}

/* the world ends with the Lua state (collected last of what init made)... */
static int world_gc (lua_State *L) {
  (void)L;
  end_world();
  return 0;
}

/* ...or with the process, when the script calls os.exit (whose state stays
   open unless it asks): exit(0) ends the world as above, for mpirun takes
   an MPI process that exits without MPI_Finalize for a failure; any other
   status leaves it, and mpirun passes that status on and stops the other
   ranks */
static void exit_hook (int status, void *arg) {
  (void)arg;
  if (status == 0) end_world();
  else finalized = 1;
}

/* the hook lives in this module, which lua_close would unload: it stays
   loaded (RTLD_NODELETE; the Makefile links it -z nodelete too) once the
   hook is set, or the hook is not set */
static void hook_exit (void) {
  Dl_info info;
  if (dladdr((void *)exit_hook, &info) && info.dli_fname &&
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
    on_exit(exit_hook, NULL);
}

static int m_init (lua_State *L) {
  if (!initialized) {
    int provided = 0, e = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (e != MPI_SUCCESS) return mpierror(L, "init", e);
    initialized = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_User_function *f[2][3] = {{h_sum, h_max, h_min}, {bf_sum, bf_max, bf_min}};
    MPI_User_function *g[2][2] = {{f_max, f_min}, {d_max, d_min}};
    for (int i = 0; i < 2; i++) {
      for (int k = 0; k < 3; k++) MPI_Op_create(f[i][k], 1, &half_ops[i][k]);
      for (int k = 0; k < 2; k++) MPI_Op_create(g[i][k], 1, &float_ops[i][k]);
    }
    lua_newuserdatauv(L, 1, 0);               /* the sentinel */
    luaL_newmetatable(L, WORLD);
    lua_pushcfunction(L, world_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, WORLD);
    lua_pushcfunction(L, abort_world);
    lua_setfield(L, LUA_REGISTRYINDEX, "qkv.fatal");
    hook_exit();
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  lua_pushinteger(L, r);
  lua_pushinteger(L, worldsize());
  return 2;
}

LUALIB_API int luaopen_qkv_mpi (lua_State *L) {
  static const luaL_Reg req[] = {{"wait", r_wait}, {"test", r_test}, {"__gc", r_gc},
                                 {NULL, NULL}};
  static const luaL_Reg fns[] = {
    {"launched", m_launched}, {"same", m_same}, {"init", m_init}, {"abort", abort_world},
    {"barrier", m_barrier}, {"allreduce", m_allreduce}, {"bcast", m_bcast}, {"allgather", m_allgather},
    {"reduce_scatter", m_reduce_scatter}, {"alltoall", m_alltoall},
    {"isend", m_isend}, {"irecv", m_irecv}, {NULL, NULL}};
  luaL_newmetatable(L, REQ);
  luaL_setfuncs(L, req, 0);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newlib(L, fns);
  return 1;
}
