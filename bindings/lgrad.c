/*
** lgrad.c -- the functions through which qkv.autograd
** (stdlib/qkv/autograd.lua) installs itself and sets grad mode; the hook
** that every differentiable binding runs first (QKVL_GRAD) and the state
** these set are lauxgrad.c's.
*/
#include "lauxqkv.h"

/* qkv._autograd(meta, rules, field, set_grad): qkv.autograd, at its load */
static int g_install (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  luaL_checktype(L, 4, LUA_TFUNCTION);
  qkvL_grad_install(L);
  return 0;
}

/*
** qkv._grad_mode() -> the running coroutine's grad mode; qkv._grad_mode(v)
** sets its own (a boolean, or nil: the main thread's again) and returns
** the own mode before (nil for none), for autograd's no_grad to restore
*/
static int g_mode (lua_State *L) {
  if (lua_gettop(L) == 0) {
    lua_pushboolean(L, qkvL_grad_mode(L));
    return 1;
  }
  qkvL_grad_setmode(L, lua_isnil(L, 1) ? -1 : lua_toboolean(L, 1));
  return 1;
}

/* qkv.is_grad_enabled() -> whether ops record for backward here */
static int g_enabled (lua_State *L) {
  lua_pushboolean(L, qkvL_grad_mode(L));
  return 1;
}

/* qkv._grad_inplace(name, x, ...): the in-place ops' check
   (qkvL_grad_inplace) for a composite one that writes x (x:scatter_), its
   errors naming name */
static int g_inplace (lua_State *L) {
  luaL_checkstring(L, 1);
  lua_rotate(L, 1, -1);                   /* x, operands..., name: name stays held */
  qkvL_grad_inplace(L, lua_tostring(L, -1));
  return 0;
}

/* qkv._autocast(f | n): stdlib/qkv/amp/autocast.lua's hook (lauxgrad.c) */
static int g_autocast (lua_State *L) {
  if (!qkvL_grad_loaded()) return luaL_error(L, "_autocast: qkv.autograd must be loaded first");
  qkvL_cast_set(L);
  return 0;
}

void qkvL_open_grad (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {{"_autograd", g_install}, {"_grad_mode", g_mode},
                                 {"is_grad_enabled", g_enabled}, {"_autocast", g_autocast},
                                 {"_autocast_call", qkvL_cast_call},
                                 {"_grad_inplace", g_inplace}, {NULL, NULL}};
  qkvL_register(L, methods, module, NULL, NULL, mod);
  qkvL_grad_init(L);
  (void)mt;
}
