/*
** lqkv.h -- the qkv module, as the executable opens it (vm/main.c); the
** parts of the module and their helpers are declared in lauxqkv.h.
*/
#ifndef LQKV_H
#define LQKV_H

#include "lauxqkv.h"

LUALIB_API int luaopen_qkv (lua_State *L);

#endif
