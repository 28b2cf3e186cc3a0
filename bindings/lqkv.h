/*
** lqkv.h -- the qkv module's opener, luaopen_qkv (vm/cli/cli.h declares
** it again for the executable, as lualib.h declares Lua's openers, so that
** nothing under vm/ includes bindings/); the parts of the module and their
** helpers are declared in lauxqkv.h.
*/
#ifndef LQKV_H
#define LQKV_H

#include "lauxqkv.h"

LUALIB_API int luaopen_qkv (lua_State *L);

#endif
