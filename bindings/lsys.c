/*
** lsys.c -- what the Lua-side library needs from the system and Lua cannot
** ask: whether a stream is a terminal and how wide it is (for the terminal
** heatmaps of qkv.plot and the REPL; internal, the names start with '_'),
** and whether a GPU can be used.
*/
#include <sys/ioctl.h>
#include <unistd.h>

#include "lqkv.h"
#include "../vm/backend.h"

/* qkv._isatty([fd = 1]) -> boolean */
static int s_isatty (lua_State *L) {
  int fd = (int)luaL_optinteger(L, 1, 1);
  lua_pushboolean(L, fd >= 0 && isatty(fd));
  return 1;
}

/* qkv._termsize([fd = 1]) -> columns, rows; or nothing when not a terminal */
static int s_termsize (lua_State *L) {
  int fd = (int)luaL_optinteger(L, 1, 1);
  struct winsize ws;
  if (fd < 0 || ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 0;
  lua_pushinteger(L, ws.ws_col);
  lua_pushinteger(L, ws.ws_row);
  return 2;
}

/* qkv.cuda_available() -> boolean: a CUDA backend is loaded and has a GPU */
static int s_cuda_available (lua_State *L) {
  lua_pushboolean(L, qkv_backend_of(QKV_CUDA) != NULL);
  return 1;
}

void qkvL_open_sys (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg f[] = {
    {"_isatty", s_isatty}, {"_termsize", s_termsize},
    {"cuda_available", s_cuda_available}, {NULL, NULL}
  };
  lua_pushvalue(L, module);
  luaL_setfuncs(L, f, 0);
  lua_pop(L, 1);
  (void)mt; (void)methods;
}
