/*
** lauxgrad.c -- autograd's hook in the bindings (stdlib/qkv/autograd.lua).
** Until that module is loaded nothing here runs but one flag test.  Once
** loaded, a differentiable binding first asks qkvL_grad whether grad mode
** is on and one of its arguments takes part in a graph (a weak-keyed table
** of autograd's says); if so the op runs as its Lua rule, which calls the
** binding back with grad mode off and records the node.  The bindings stay
** the functions of the module and the methods, so their argument errors
** name them as before.  lgrad.c registers the functions through which
** qkv.autograd installs itself and sets grad mode; the state they set is
** kept here.
*/
#include "lauxqkv.h"

int qkvL_grad_on = 0;            /* qkv.autograd is loaded (QKVL_GRAD reads it) */
static int grad_enabled = 1;     /* the main thread's grad mode (no_grad turns it off) */
static char metakey, ruleskey, fieldkey, setkey, modeskey, castkey;

/*
** Autocast (stdlib/qkv/amp/autocast.lua, which loads qkv.autograd first):
** while an autocast region is open in any coroutine (cast_open counts
** them), a hooked binding first hands its name, itself and its arguments
** to autocast's function, which says whether the op runs cast (and then
** runs it through qkvL_cast_call, its results returned here) or as it is.
** The cast call's own entry into the hook (cast_self) goes straight on
** to autograd's part, which records the op on the cast inputs.
*/
static int cast_open = 0, cast_self = 0;

static int autocast (lua_State *L, const char *name, lua_CFunction self, int top) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &castkey);
  lua_pushstring(L, name);
  lua_pushcfunction(L, self);
  for (int i = 1; i <= top; i++) lua_pushvalue(L, i);
  lua_call(L, top + 2, LUA_MULTRET);       /* args, ran?, results... */
  if (!lua_toboolean(L, top + 1)) { lua_settop(L, top); return -1; }
  int n = lua_gettop(L) - top - 1;
  lua_rotate(L, 1, -(top + 1));            /* results, args, ran? */
  lua_settop(L, n);
  return n;
}

/* qkv._autocast(f): autocast's function, kept; qkv._autocast(n) adds n
   to the open regions (n = 1 at a region's start, -1 at its end) */
void qkvL_cast_set (lua_State *L) {
  if (lua_type(L, 1) == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &castkey);
    return;
  }
  cast_open += (int)luaL_checkinteger(L, 1);
  if (cast_open < 0) cast_open = 0;
}

/* qkv._autocast_call(op, ...): op (a hooked binding) on the cast
   arguments, past autocast's part of the hook; its results */
int qkvL_cast_call (lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  cast_self = 1;
  int ok = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  cast_self = 0;                           /* also when op raised before its hook */
  if (ok != LUA_OK) return lua_error(L);
  return lua_gettop(L);
}

/*
** Grad mode belongs to a coroutine, as PyTorch's to a thread: no_grad(f)
** sets it for the coroutine running f, so that one which yields inside f
** and is never resumed takes nothing with it.  The main thread's is
** grad_enabled; another's is in a weak-keyed table (modeskey), present
** while a no_grad or enable_grad of its own runs, and else the main
** thread's.
*/
int qkvL_grad_mode (lua_State *L) {
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

void qkvL_grad_inplace (lua_State *L, const char *name) {
  if (!qkvL_grad_on || !qkvL_grad_mode(L)) return;
  int top = lua_gettop(L);
  if (tracked(L, 1))
    luaL_error(L, "%s: x requires grad (a leaf that requires it, or the output of an op "
               "autograd recorded), and autograd records no in-place op, so its gradient "
               "would be wrong; use the op's out-of-place form, or run it under qkv.no_grad",
               name);
  if (top > 1 && any_tracked(L, top))
    luaL_error(L, "%s: an operand requires grad, and autograd records no in-place op, so no "
               "gradient would reach it; use the op's out-of-place form, or run it under "
               "qkv.no_grad", name);
}

int qkvL_grad (lua_State *L, const char *name, lua_CFunction self) {
  int top = lua_gettop(L);
  if (cast_self) cast_self = 0;
  else if (cast_open > 0) {
    int n = autocast(L, name, self, top);
    if (n >= 0) return n;
  }
  if (!qkvL_grad_on || !qkvL_grad_mode(L)) return -1;
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

/* the hooks at 1 to 4 (meta, rules, field, set_grad: qkv._autograd's
   arguments, checked there) are kept; from now on QKVL_GRAD asks them */
void qkvL_grad_install (lua_State *L) {
  void *keys[4] = {&metakey, &ruleskey, &fieldkey, &setkey};
  for (int i = 0; i < 4; i++) {
    lua_pushvalue(L, i + 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, keys[i]);
  }
  qkvL_grad_on = 1;
}

/* the running coroutine's own grad mode becomes v (a boolean, or -1: the
   main thread's again); the own mode before (nil for none) is pushed */
void qkvL_grad_setmode (lua_State *L, int v) {
  if (lua_pushthread(L)) {                 /* the main thread: never nil */
    lua_pushboolean(L, grad_enabled);
    if (v >= 0) grad_enabled = v;
    return;
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &modeskey);
  lua_pushvalue(L, -2);
  lua_rawget(L, -2);                       /* thread, modes, before */
  lua_pushvalue(L, -3);
  if (v >= 0) lua_pushboolean(L, v);
  else lua_pushnil(L);
  lua_rawset(L, -4);
}

/* at the module's opening: the coroutines' own grad modes, a table with
   weak keys in the registry */
void qkvL_grad_init (lua_State *L) {
  lua_newtable(L);                         /* thread -> its own grad mode */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &modeskey);
}
