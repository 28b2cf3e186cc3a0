/*
** searcher.h -- how the executable finds qkv's own modules (searcher.c)
*/
#ifndef QKV_SEARCHER_H
#define QKV_SEARCHER_H

#include <lua.h>

/* puts the searcher for qkv's own modules (searcher.c), which looks
   beside exe (the executable's full path), second in package.searchers */
void cli_searcher (lua_State *L, const char *exe);

#endif
