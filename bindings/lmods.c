/*
** lmods.c -- attention's variants: the programs the tracer made of a
** score_mod and a mask_mod (stdlib/qkv/variants/trace.lua) handed to the
** dispatch.  qkv.attention's options score_mod, mask_mod and block_mask
** are read by stdlib/qkv/variants/init.lua, which calls these:
**   qkv._mod_ops()                      -> {name = code} (vm/common/mods.h)
**   qkv._block_kinds(spec, kb, kh, nq, nk, bq, bk) -> int32 (kb, kh, nqb, nkb),
**       and int32 (kb, kh, nq, 2) each query's run of kept keys when every
**       query's kept keys are one run, else nil (common/mods.h's spans)
** and attention's own qkv._attention_lse and qkv._attention_backward
** (lattn.c) with a spec as their last argument, read by qkvL_mods_read.
** spec is a table: prog (the instructions, packed), args (LOAD's indices,
** packed), out and by (QKV_MOD_NOUT integers each), caps (the captured
** tensors), capmod (the mod that captured each, for messages), fname
** (the public function), and optionally kinds (a block mask's int32
** tensor) with bq and bk, spans beside kinds, and grads (per captured tensor a float64 tensor
** to add its gradient into, or false).  Everything in it is checked: a
** script can call these with anything.
*/
#include <string.h>

#include "lauxqkv.h"
#include "../vm/common/mods.h"

/* spec's field key, raw (no metamethods run while tensors are held) */
static int field (lua_State *L, int spec, const char *key) {
  lua_pushstring(L, key);
  return lua_rawget(L, spec);
}

static const char *fname_of (lua_State *L, int spec) {
  const char *f = field(L, spec, "fname") == LUA_TSTRING ? lua_tostring(L, -1) : "attention";
  lua_pop(L, 1);
  return f;
}

/* a list of QKV_MOD_NOUT integers at spec[key] into v */
static void ints (lua_State *L, int spec, const char *key, int *v) {
  if (field(L, spec, key) != LUA_TTABLE) luaL_error(L, "_mods: spec.%s must be a table", key);
  for (int i = 0; i < QKV_MOD_NOUT; i++) {
    int isnum;
    lua_rawgeti(L, -1, i + 1);
    lua_Integer x = lua_tointegerx(L, -1, &isnum);
    if (!isnum || x < -1 || x >= QKV_MOD_MAXINS) luaL_error(L, "_mods: spec.%s[%d] is bad", key, i + 1);
    v[i] = (int)x;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/*
** M and its program from the spec at index spec; the captured tensors,
** the gradient sums and the kinds stay referenced by the spec, which the
** caller keeps on its stack.
*/
void qkvL_mods_read (lua_State *L, int spec, qkv_attn_mods *M, qkv_mod_prog *P) {
  size_t n, na;
  luaL_checktype(L, spec, LUA_TTABLE);
  memset(M, 0, sizeof *M);
  memset(P, 0, sizeof *P);
  M->prog = P;
  if (field(L, spec, "prog") != LUA_TSTRING || field(L, spec, "args") != LUA_TSTRING)
    luaL_error(L, "_mods: spec.prog and spec.args must be strings");
  const char *prog = lua_tolstring(L, -2, &n), *args = lua_tolstring(L, -1, &na);
  if (n % 24 != 0 || n / 24 > QKV_MOD_MAXINS || na % 4 != 0 || na / 4 > QKV_MOD_MAXARGS)
    luaL_error(L, "_mods: spec.prog or spec.args has a bad length");
  P->n = (int)(n / 24);
  P->nargs = (int)(na / 4);
  for (int i = 0; i < P->n; i++) {
    const char *p = prog + 24 * i;
    memcpy(&P->ins[i].op, p, 4);
    memcpy(&P->ins[i].a, p + 4, 4);
    memcpy(&P->ins[i].b, p + 8, 4);
    memcpy(&P->ins[i].c, p + 12, 4);
    memcpy(&P->ins[i].k, p + 16, 8);
  }
  memcpy(P->args, args, na);
  lua_pop(L, 2);
  ints(L, spec, "out", P->out);
  ints(L, spec, "by", P->dload);
  int rank[QKV_MOD_MAXCAP];
  if (field(L, spec, "caps") != LUA_TTABLE) luaL_error(L, "_mods: spec.caps must be a table");
  M->ncap = (int)lua_rawlen(L, -1);
  if (M->ncap > QKV_MOD_MAXCAP) luaL_error(L, "_mods: more than %d captured tensors", QKV_MOD_MAXCAP);
  int grads = field(L, spec, "grads") == LUA_TTABLE;
  for (int c = 0; c < M->ncap; c++) {
    lua_rawgeti(L, -2, c + 1);
    M->capt[c] = qkvL_totensor(L, -1);
    if (M->capt[c] == NULL) luaL_error(L, "_mods: captured tensor %d is not a tensor", c + 1);
    rank[c] = M->capt[c]->ndim;
    lua_pop(L, 1);
    if (!grads || lua_rawgeti(L, -1, c + 1) == LUA_TBOOLEAN || lua_isnil(L, -1)) {
      if (grads) lua_pop(L, 1);
      continue;
    }
    qkv_tensor *g = qkvL_totensor(L, -1);
    if (g == NULL || g->dtype != QKV_F64 || !qkv_is_contiguous(g) || g->ndim != rank[c] ||
        memcmp(g->size, M->capt[c]->size, sizeof(int64_t) * (size_t)rank[c]) != 0)
      luaL_error(L, "_mods: grads[%d] must be a contiguous float64 tensor of the captured "
                 "tensor's shape", c + 1);
    M->gradt[c] = g;
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  if (qkv_mod_check(P, M->ncap, rank) != 0) luaL_error(L, "_mods: spec.prog is not a program");
  if (field(L, spec, "kinds") != LUA_TNIL) {
    qkv_tensor *k = qkvL_totensor(L, -1);
    lua_Integer bq = field(L, spec, "bq") == LUA_TNUMBER ? lua_tointeger(L, -1) : 0;
    lua_Integer bk = field(L, spec, "bk") == LUA_TNUMBER ? lua_tointeger(L, -1) : 0;
    lua_pop(L, 2);
    if (k == NULL || k->dtype != QKV_I32 || k->ndim != 4 || !qkv_is_contiguous(k) || bq < 1 ||
        bk < 1)
      luaL_error(L, "_mods: spec.kinds must be a contiguous int32 tensor (kb, kh, nqb, nkb) "
                 "with spec.bq and spec.bk");
    M->kindt = k;
    M->kb = k->size[0];
    M->kh = k->size[1];
    M->nqb = k->size[2];
    M->nkb = k->size[3];
    M->bq = bq;
    M->bk = bk;
  }
  lua_pop(L, 1);
  if (field(L, spec, "spans") != LUA_TNIL) {
    qkv_tensor *s = qkvL_totensor(L, -1);
    if (s == NULL || M->kindt == NULL || s->dtype != QKV_I32 || s->ndim != 4 ||
        !qkv_is_contiguous(s) || s->size[0] != M->kb || s->size[1] != M->kh || s->size[3] != 2)
      luaL_error(L, "_mods: spec.spans must be a contiguous int32 tensor (kb, kh, n_q, 2) "
                 "beside spec.kinds");
    M->spant = s;
  }
  lua_pop(L, 1);
}

/* err as a Lua error of the public function; an index out of range names
   the mod, the captured tensor, the index and its value */
void qkvL_mods_check (lua_State *L, int spec, const qkv_attn_mods *M, int err) {
  if (err == QKV_OK) return;
  const char *fname = fname_of(L, spec);
  if (err == QKV_EINDEX && M->fail_ins >= 0) {
    const qkv_mod_ins *x = &M->prog->ins[M->fail_ins];
    const qkv_tensor *t = M->capt[x->a];
    const char *mod = "a mod";
    if (field(L, spec, "capmod") == LUA_TTABLE && lua_rawgeti(L, -1, x->a + 1) == LUA_TSTRING)
      mod = lua_tostring(L, -1);
    const char *s = qkvL_shape(L, t);
    luaL_error(L, "%s: %s: index %d of the captured tensor %s is %f, not an integer in 1..%I",
               fname, mod, M->fail_arg + 1, s, M->fail_val, (lua_Integer)t->size[M->fail_arg]);
  }
  if (err == QKV_ENODEV)
    luaL_error(L, "%s: score_mod and mask_mod do not run fused on this device", fname);
  qkvL_check(L, fname, err);
}

static int m_ops (lua_State *L) {
  static const char *const names[] = {
#define QKV_MOD_NAME(N, n, a) #n,
    QKV_MOD_OPS(QKV_MOD_NAME)
#undef QKV_MOD_NAME
  };
  lua_createtable(L, 0, QKV_MOD_NOPS);
  for (int i = 0; i < QKV_MOD_NOPS; i++) {
    lua_pushinteger(L, i);
    lua_setfield(L, -2, names[i]);
  }
  return 1;
}

static int m_block_kinds (lua_State *L) {
  qkv_attn_mods M;
  qkv_mod_prog P;
  qkvL_mods_read(L, 1, &M, &P);
  int64_t v[6];
  for (int i = 0; i < 6; i++) v[i] = luaL_checkinteger(L, i + 2);
  if (v[0] < 1 || v[1] < 1 || v[2] < 0 || v[3] < 0 || v[4] < 1 || v[5] < 1 || v[4] > 4096 ||
      v[5] > 4096 || P.out[QKV_MOD_OUT_MASK] < 0)
    return luaL_error(L, "_block_kinds: bad sizes or no mask");
  int64_t size[4] = {v[0], v[1], (v[2] + v[4] - 1) / v[4], (v[3] + v[5] - 1) / v[5]};
  qkvL_checkbytes(L, "block_mask", 4, size, QKV_I32);
  qkv_device dev = M.ncap > 0 ? M.capt[0]->storage->device : QKV_CPU;
  qkv_tensor *kinds = qkvL_new(L, QKV_I32, dev, 4, size, 0);
  int64_t ssize[4] = {v[0], v[1], v[2], 2};
  qkvL_checkbytes(L, "block_mask", 4, ssize, QKV_I32);
  qkv_tensor *spans = qkvL_new(L, QKV_I32, dev, 4, ssize, 0);
  int runs = 0;
  qkvL_mods_check(L, 1, &M, qkv_attention_blocks(&M, kinds, spans, v[2], v[3], v[4], v[5],
                                                 &runs));
  if (!runs) {                      /* not every query's keys are one run */
    lua_pop(L, 1);
    lua_pushnil(L);
  }
  return 2;
}

void qkvL_open_mods (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {
    {"_mod_ops", m_ops}, {"_block_kinds", m_block_kinds},
    {NULL, NULL}
  };
  qkvL_register(L, methods, module, NULL, NULL, mod);
  (void)mt;
}
