/*
** lgrad.c -- the bindings' side of qkv.autograd (stdlib/qkv/autograd.lua).
** Until that module is loaded nothing here runs but one flag test.  Once
** loaded, a differentiable binding first asks qkvL_grad whether grad mode
** is on and one of its arguments takes part in a graph (a weak-keyed table
** of autograd's says); if so the op runs as its Lua rule, which calls the
** binding back with grad mode off and records the node.  The bindings stay
** the functions of the module and the methods, so their argument errors
** name them as before.
*/
#include <string.h>

#include "lauxqkv.h"

int qkvL_grad_on = 0;            /* qkv.autograd is loaded (QKVL_GRAD reads it) */
static int grad_enabled = 1;     /* the main thread's grad mode (no_grad turns it off) */
static char metakey, ruleskey, fieldkey, setkey, modeskey;

/*
** Grad mode belongs to a coroutine, as PyTorch's to a thread: no_grad(f)
** sets it for the coroutine running f, so that one which yields inside f
** and is never resumed takes nothing with it.  The main thread's is
** grad_enabled; another's is in a weak-keyed table (modeskey), present
** while a no_grad or enable_grad of its own runs, and else the main
** thread's.
*/
static int mode_of (lua_State *L) {
  if (lua_pushthread(L)) { lua_pop(L, 1); return grad_enabled; }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &modeskey);
  lua_insert(L, -2);
  int on = lua_rawget(L, -2) == LUA_TNIL ? grad_enabled : lua_toboolean(L, -1);
  lua_pop(L, 2);
  return on;
}

/* whether the value at idx (absolute) is a tensor the graph tracks */
static int tracked (lua_State *L, int idx) {
  int base = lua_gettop(L), on = 0;
  if (qkvL_istensor(L, idx) == NULL) return 0;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &metakey);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TTABLE)
    on = lua_getfield(L, base + 2, "leaf") != LUA_TNIL ||
         lua_getfield(L, base + 2, "node") != LUA_TNIL;
  lua_settop(L, base);
  return on;
}

/* a tracked tensor among the args, or among the items of a plain list
   argument (cat's list, align's weights), read raw */
static int any_tracked (lua_State *L, int top) {
  int base = lua_gettop(L);
  for (int i = 1; i <= top; i++) {
    if (tracked(L, i)) return 1;
    if (lua_type(L, i) != LUA_TTABLE || lua_getmetatable(L, i)) {
      lua_settop(L, base);
      continue;
    }
    lua_Integer n = (lua_Integer)lua_rawlen(L, i);
    for (lua_Integer k = 1; k <= n && k <= 1024; k++) {
      lua_rawgeti(L, i, k);
      int on = tracked(L, lua_gettop(L));
      lua_settop(L, base);
      if (on) return 1;
    }
  }
  return 0;
}

int qkvL_grad (lua_State *L, const char *name, lua_CFunction self) {
  if (!qkvL_grad_on || !mode_of(L)) return -1;
  int top = lua_gettop(L);
  if (!any_tracked(L, top)) return -1;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &ruleskey);
  if (lua_getfield(L, -1, name) != LUA_TFUNCTION) { lua_settop(L, top); return -1; }
  lua_remove(L, -2);
  lua_insert(L, 1);                       /* rule, args */
  lua_pushcfunction(L, self);
  lua_insert(L, 2);                       /* rule, orig, args */
  lua_call(L, top + 1, LUA_MULTRET);
  return lua_gettop(L);
}

int qkvL_grad_loaded (void) { return qkvL_grad_on; }

/* autograd's answer for x.requires_grad, x.grad, ... (x at 1), pushed */
void qkvL_grad_field (lua_State *L, int x, const char *k) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &fieldkey);
  lua_pushvalue(L, x);
  lua_pushstring(L, k);
  lua_call(L, 2, 1);
}

/* x.grad = v (v at the top, popped) */
void qkvL_grad_set (lua_State *L, int x) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &setkey);
  lua_pushvalue(L, x);
  lua_pushvalue(L, -3);
  lua_call(L, 2, 0);
  lua_pop(L, 1);
}

/* qkv._autograd(meta, rules, field, set_grad): qkv.autograd, at its load */
static int g_install (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  luaL_checktype(L, 4, LUA_TFUNCTION);
  void *keys[4] = {&metakey, &ruleskey, &fieldkey, &setkey};
  for (int i = 0; i < 4; i++) {
    lua_pushvalue(L, i + 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, keys[i]);
  }
  qkvL_grad_on = 1;
  return 0;
}

/*
** qkv._grad_mode() -> the running coroutine's grad mode; qkv._grad_mode(v)
** sets its own (a boolean, or nil: the main thread's again) and returns
** the own mode before (nil for none), for autograd's no_grad to restore
*/
static int g_mode (lua_State *L) {
  if (lua_gettop(L) == 0) {
    lua_pushboolean(L, mode_of(L));
    return 1;
  }
  int v = lua_isnil(L, 1) ? -1 : lua_toboolean(L, 1);
  if (lua_pushthread(L)) {                 /* the main thread: never nil */
    lua_pushboolean(L, grad_enabled);
    if (v >= 0) grad_enabled = v;
    return 1;
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &modeskey);
  lua_pushvalue(L, -2);
  lua_rawget(L, -2);                       /* thread, modes, before */
  lua_pushvalue(L, -3);
  if (v >= 0) lua_pushboolean(L, v);
  else lua_pushnil(L);
  lua_rawset(L, -4);
  return 1;
}

/* qkv.is_grad_enabled() -> whether ops record for backward here */
static int g_enabled (lua_State *L) {
  lua_pushboolean(L, mode_of(L));
  return 1;
}

void qkvL_open_grad (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {{"_autograd", g_install}, {"_grad_mode", g_mode},
                                 {"is_grad_enabled", g_enabled}, {NULL, NULL}};
  qkvL_register(L, methods, module, NULL, NULL, mod);
  lua_newtable(L);                         /* thread -> its own grad mode */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &modeskey);
  (void)mt;
}
