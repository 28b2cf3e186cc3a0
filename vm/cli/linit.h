/*
** linit.h -- the opener (linit.c): the one file of the executable that
** names what it opens from bindings/.
*/
#ifndef QKV_LINIT_H
#define QKV_LINIT_H

#include <lua.h>

/* the standard libraries and qkv's own, the global `qkv` among them */
void cli_openlibs (lua_State *L);

#endif
