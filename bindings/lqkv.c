/*
** lqkv.c -- luaopen_qkv: builds the qkv module and the tensor metatable.
*/
#include "lqkv.h"

LUALIB_API int luaopen_qkv (lua_State *L) {
  static const char *const dtypes[] = {"float32", "float64", "int64", "bool"};
  int mt = lua_gettop(L) + 1, methods = mt + 1, module = mt + 2;
  luaL_newmetatable(L, QKV_TENSOR);
  lua_newtable(L);
  lua_newtable(L);
  qkvL_open_tensor(L, mt, methods, module);
  qkvL_open_view(L, mt, methods, module);
  qkvL_open_math(L, mt, methods, module);
  qkvL_open_build(L, mt, methods, module);
  qkvL_open_attention(L, mt, methods, module);
  for (int i = 0; i < 4; i++) {
    lua_pushstring(L, dtypes[i]);
    lua_setfield(L, module, dtypes[i]);
  }
  lua_pushliteral(L, "qkv " QKV_VERSION);
  lua_setfield(L, module, "_VERSION");
  lua_pushvalue(L, mt);
  lua_setfield(L, module, "Tensor");      /* the metatable, for extensions */
  /* so that argument errors of methods called as functions name them */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, methods);
  lua_setfield(L, -2, "qkv.Tensor");
  lua_pop(L, 1);
  return 1;
}
