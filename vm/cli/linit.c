/*
** linit.c -- the opener: the libraries every qkv state starts with, as
** Lua's linit.c lists what lua.c opens.  The executable is the top floor
** of the house: it stands above bindings/ (which stand above the rest of
** vm/), and it reaches them here alone, through the module's one entry
** point, luaopen_qkv (bindings/lqkv.c).  The other files of vm/cli/ see
** only the state this opens; a new library is a row below.
*/
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "linit.h"

/* declared here as lualib.h declares luaopen_base, rather than by
   including a header of bindings/ */
LUALIB_API int luaopen_qkv (lua_State *L);

/* each required as package.loaded[name] and set as the global name */
static const luaL_Reg loadedlibs[] = {
  {"qkv", luaopen_qkv},
  {NULL, NULL}
};

void cli_openlibs (lua_State *L) {
  luaL_openlibs(L);
  for (const luaL_Reg *lib = loadedlibs; lib->func != NULL; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
}
