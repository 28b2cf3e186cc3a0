/*
** lzip.c -- the module qkv.zip: .npz containers through libzip (being
** written).  Loaded only by qkv.savez / qkv.loadz.
*/
#include <zip.h>

#include <lua.h>
#include <lauxlib.h>

LUALIB_API int luaopen_qkv_zip (lua_State *L);

LUALIB_API int luaopen_qkv_zip (lua_State *L) {
  lua_newtable(L);
  lua_pushstring(L, zip_libzip_version());
  lua_setfield(L, -2, "libzip");
  return 1;
}
