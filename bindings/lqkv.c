/*
** lqkv.c -- luaopen_qkv: builds the qkv module and the tensor metatable.
*/
#include <string.h>

#include "lqkv.h"

/*
** The Lua-side library loads on first use, so that `qkv.nn` works without
** a require and a script that never plots never pays for it.
*/
static const char *const lazy[][3] = {
  {"nn", "qkv.nn", NULL}, {"plot", "qkv.plot", NULL},
  {"test", "qkv.test", NULL}, {"repl", "qkv.repl", NULL},
  {"cosine_similarity", "qkv.nn", "cosine_similarity"},
  {"help", "qkv.doc", "help"},
  {"savez", "qkv.npz", "savez"}, {"loadz", "qkv.npz", "loadz"},
  {"einsum", "qkv.einsum", "einsum"}, {"bert", "qkv.bert", NULL}, {"dist", "qkv.dist", NULL},
  {"wordpiece", "qkv.wordpiece", NULL}, {"display", "qkv.repl", "_display_values"},
  {"clear_output", "qkv.repl", "_clear_output"},
  {"optim", "qkv.optim", NULL}, {"data", "qkv.data", NULL}, {"amp", "qkv.amp", NULL},
  /* mixed precision (stdlib/qkv/amp/) */
  {"autocast", "qkv.amp.autocast", "autocast"},
  {"is_autocast_enabled", "qkv.amp.autocast", "is_autocast_enabled"},
  {"get_autocast_dtype", "qkv.amp.autocast", "get_autocast_dtype"},
  {"no_grad", "qkv.autograd", "no_grad"},
  {"enable_grad", "qkv.autograd", "enable_grad"}, {"grad", "qkv.autograd", "grad"},
  /* attention's variants (stdlib/qkv/variants/) */
  {"variants", "qkv.variants", NULL}, {"block_mask", "qkv.variants", "block_mask"},
  {"and_masks", "qkv.variants", "and_masks"}, {"or_masks", "qkv.variants", "or_masks"},
  {"alibi_slopes", "qkv.variants", "alibi_slopes"},
  /* rotary position embeddings (stdlib/qkv/rope.lua), drawing tokens
     (stdlib/qkv/sampling.lua) */
  {"rope", "qkv.rope", "rope"}, {"multinomial", "qkv.sampling", "multinomial"},
  {"sample", "qkv.sampling", "sample"},
  /* the composite functions in Lua (stdlib/qkv/composite/), which also adds methods */
  {"flatten", "qkv.composite", "flatten"}, {"unflatten", "qkv.composite", "unflatten"},
  {"chunk", "qkv.composite", "chunk"}, {"split", "qkv.composite", "split"},
  {"norm", "qkv.composite", "norm"}, {"scatter", "qkv.composite", "scatter"},
  {"argsort", "qkv.composite", "argsort"}, {"flip", "qkv.composite", "flip"},
  {"roll", "qkv.composite", "roll"}, {"outer", "qkv.composite", "outer"},
  {"repeat_interleave", "qkv.composite", "repeat_interleave"},
  {"allclose", "qkv.composite", "allclose"}, {"zeros_like", "qkv.composite", "zeros_like"},
  {"ones_like", "qkv.composite", "ones_like"}, {"full_like", "qkv.composite", "full_like"},
  {"empty_like", "qkv.composite", "empty_like"}, {"rand_like", "qkv.composite", "rand_like"},
  {"randn_like", "qkv.composite", "randn_like"}, {"randint", "qkv.composite", "randint"},
  {"randperm", "qkv.composite", "randperm"},
  {"linspace", "qkv.composite", "linspace"}, {"logspace", "qkv.composite", "logspace"},
  {"manual_seed", "qkv.composite", "manual_seed"},
};

/*
** qkv.name that qkv does not have is an error naming the nearest name
** ("qkv has no function 'softmaxx' (did you mean 'softmax'?)"), not nil;
** a name that starts with '_' is internal and stays nil (a library probes
** such hooks: qkv._display), as does a key that is not a string.
*/
static int lazy_index (lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0;   /* qkv[1] stays nil */
  const char *key = lua_tostring(L, 2);
  if (key[0] == '_') return 0;
  for (size_t i = 0; i < sizeof lazy / sizeof lazy[0]; i++) {
    if (strcmp(key, lazy[i][0]) != 0) continue;
    lua_getglobal(L, "require");
    lua_pushstring(L, lazy[i][1]);
    lua_call(L, 1, 1);
    if (lazy[i][2] != NULL) lua_getfield(L, -1, lazy[i][2]);
    lua_pushvalue(L, -1);
    lua_setfield(L, 1, key);              /* cache it in the module */
    return 1;
  }
  const char *names[sizeof lazy / sizeof lazy[0] + 1];
  for (size_t i = 0; i < sizeof lazy / sizeof lazy[0]; i++) names[i] = lazy[i][0];
  names[sizeof lazy / sizeof lazy[0]] = NULL;
  return qkvL_noname(L, "qkv", "function", key, 1, names, "help(qkv) lists what it has");
}

LUALIB_API int luaopen_qkv (lua_State *L) {
  int mt = lua_gettop(L) + 1, methods = mt + 1, module = mt + 2;
  luaL_newmetatable(L, QKV_TENSOR);
  qkvL_setmetakey(L, mt);
  lua_newtable(L);
  lua_newtable(L);
  qkvL_open_tensor(L, mt, methods, module);
  qkvL_open_view(L, mt, methods, module);
  qkvL_open_math(L, mt, methods, module);
  qkvL_open_build(L, mt, methods, module);
  qkvL_open_attention(L, mt, methods, module);
  qkvL_open_mask(L, mt, methods, module);
  qkvL_open_sys(L, mt, methods, module);
  qkvL_open_io(L, mt, methods, module);
  qkvL_open_select(L, mt, methods, module);
  qkvL_open_norm(L, mt, methods, module);
  qkvL_open_safetensors(L, mt, methods, module);
  qkvL_open_grad(L, mt, methods, module);
  qkvL_open_opts(L, mt, methods, module);
  qkvL_open_mods(L, mt, methods, module);
  for (int i = 0; i < QKV_NDTYPE; i++) {     /* qkv.float16 == "float16" */
    lua_pushstring(L, qkv_dtype_name((qkv_dtype)i));
    lua_setfield(L, module, qkv_dtype_name((qkv_dtype)i));
  }
  lua_pushliteral(L, "qkv " QKV_VERSION);
  lua_setfield(L, module, "_VERSION");
  lua_pushvalue(L, mt);
  lua_setfield(L, module, "Tensor");
  /* the names that load on first use, for the REPL's completion */
  lua_createtable(L, sizeof lazy / sizeof lazy[0], 0);
  for (size_t i = 0; i < sizeof lazy / sizeof lazy[0]; i++) {
    lua_pushstring(L, lazy[i][0]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, module, "_lazy");      /* the metatable, for extensions */
  lua_getfield(L, module, "_strict");    /* qkv.cuda.synchronise is an error, as qkv's names */
  lua_getfield(L, module, "cuda");
  lua_pushliteral(L, "qkv.cuda");
  lua_call(L, 2, 0);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, lazy_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, module);
  /* so that argument errors of methods called as functions name them:
     the methods the module lacks, so that a function in both has one name,
     "qkv.sum" (Lua's argument errors find a name by walking
     package.loaded, in an order that changes from run to run) */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, methods)) {
    lua_pushvalue(L, -2);
    if (lua_rawget(L, module) == LUA_TNIL || !lua_rawequal(L, -1, -2)) {
      lua_pop(L, 1);
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);                   /* names[k] = v */
    }
    else lua_pop(L, 2);
  }
  lua_setfield(L, -2, "qkv.Tensor");
  lua_pop(L, 1);
  lua_pushvalue(L, methods);             /* all of them, for the stdlib */
  lua_setfield(L, module, "_methods");
  int tables[] = {mt, methods, module};
  qkvL_markbindings(L, tables, 3);
  qkvL_deferred_atclose(L);
  qkvL_plainmeta(L, mt);
  qkvL_pushplainmeta(L);             /* for qkv.autograd, which wraps both */
  lua_setfield(L, module, "_plain_meta");
  return 1;
}
