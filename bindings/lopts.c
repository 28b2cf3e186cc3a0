/*
** lopts.c -- options tables: every key is one the function knows, or an
** error naming it and the closest known key, as matplotlib and PyTorch
** refuse an unknown keyword.  One checker for the C bindings
** (qkvL_checkopts) and, through qkv._checkopts, for the Lua library, so
** that a misspelt key reads the same everywhere:
**   attention: unknown option 'casual' (did you mean 'causal'?)
** PyTorch's names for options qkv spells otherwise get a word on the
** difference, where it matters (a mask's polarity).
*/
#include <string.h>

#include "lauxqkv.h"

/* the edit distance between a and b (Levenshtein), for names under 32 */
static int distance (const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  int row[33];
  if (na > 32 || nb > 32) return 99;
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[nb];
}

int qkvL_nearer (const char *k, const char *name, int *best) {
  int d = distance(k, name);
  if (d >= *best || d >= (int)strlen(k)) return 0;
  *best = d;
  return 1;
}

const char *qkvL_closest (const char *k, const char *const *names) {
  const char *found = NULL;
  int best = 3;                          /* within 2 edits */
  for (int i = 0; names[i]; i++)
    if (qkvL_nearer(k, names[i], &best)) found = names[i];
  return found;
}

/* PyTorch's (and Hugging Face's) names for what qkv spells otherwise */
static const char *const ALIASES[][3] = {
  {"attn_mask", "mask", "true = may attend, as the boolean attn_mask of "
   "F.scaled_dot_product_attention; nn.MultiheadAttention's attn_mask is the "
   "opposite (true = masked): pass mask = attn_mask:logical_not()"},
  {"need_weights", "weights", "false runs the fused kernel and returns out alone"},
  {"output_attentions", "attentions", NULL},
  {"dropout_p", NULL, "qkv.attention has no dropout: apply qkv.dropout to the weights"},
  {"dropout", NULL, "qkv.attention has no dropout: apply qkv.dropout to the weights"},
};

static int known_key (const char *k, const char *const *known) {
  for (int i = 0; known[i]; i++)
    if (strcmp(k, known[i]) == 0) return 1;
  return 0;
}

/* the message for the unknown key k, pushed */
static const char *unknown (lua_State *L, const char *fname, const char *k,
                            const char *const *known) {
  for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++) {
    const char *const *a = ALIASES[i];
    if (strcmp(k, a[0]) != 0 || (a[1] && !known_key(a[1], known))) continue;
    if (a[1] == NULL) return lua_pushfstring(L, "%s: unknown option '%s' (%s)", fname, k, a[2]);
    if (a[2] == NULL)
      return lua_pushfstring(L, "%s: unknown option '%s' (qkv's is '%s')", fname, k, a[1]);
    return lua_pushfstring(L, "%s: unknown option '%s' (qkv's is '%s': %s)", fname, k,
                           a[1], a[2]);
  }
  const char *near = qkvL_closest(k, known);
  if (near) return lua_pushfstring(L, "%s: unknown option '%s' (did you mean '%s'?)",
                                   fname, k, near);
  return lua_pushfstring(L, "%s: unknown option '%s'", fname, k);
}

/*
** The message for the first unknown key of the table at arg (in byte
** order, so that it does not depend on the table's layout), pushed, or
** NULL.  The keys are read raw and never converted in place (lua_next
** needs them as they are); a key that is not a string is described by
** its type, with no metamethod run.
*/
static const char *find_unknown (lua_State *L, int arg, const char *fname,
                                 const char *const *known) {
  int base = lua_gettop(L), bad = 0;
  arg = lua_absindex(L, arg);
  lua_pushnil(L);                        /* base + 1: the first bad key */
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    lua_pop(L, 1);
    int isstr = lua_type(L, -1) == LUA_TSTRING;
    if (isstr && known_key(lua_tostring(L, -1), known)) continue;
    /* strings before other keys, then the least in byte order */
    if (!bad || (isstr && (lua_type(L, base + 1) != LUA_TSTRING ||
                           strcmp(lua_tostring(L, -1), lua_tostring(L, base + 1)) < 0))) {
      lua_pushvalue(L, -1);
      lua_replace(L, base + 1);
      bad = 1;
    }
  }
  if (!bad) { lua_settop(L, base); return NULL; }
  const char *msg;
  if (lua_type(L, base + 1) == LUA_TSTRING)
    msg = unknown(L, fname, lua_tostring(L, base + 1), known);
  else if (lua_type(L, base + 1) == LUA_TNUMBER) {
    lua_pushvalue(L, base + 1);
    msg = lua_pushfstring(L, "%s: unknown option %s (options are named: {key = value})",
                          fname, lua_tostring(L, -1));
  } else
    msg = lua_pushfstring(L, "%s: unknown option (a %s key; options are named: "
                          "{key = value})", fname, luaL_typename(L, base + 1));
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return msg;
}

void qkvL_checkopts (lua_State *L, int arg, const char *fname, const char *const *known) {
  if (lua_isnoneornil(L, arg)) return;
  if (lua_type(L, arg) != LUA_TTABLE)
    luaL_error(L, "%s: options must be a table, got %s", fname, luaL_typename(L, arg));
  if (find_unknown(L, arg, fname, known)) lua_error(L);
}

/* the strings of the list at arg (at most 64) into names, NULL-ended */
static void names_of (lua_State *L, int arg, const char **names) {
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  luaL_argcheck(L, n <= 64, arg, "at most 64 keys");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, arg, i);
    luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, arg, "a list of strings expected");
    names[i - 1] = lua_tostring(L, -1);   /* the list keeps the string */
    lua_pop(L, 1);
  }
  names[n] = NULL;
}

/*
** qkv._checkopts(fname, opts, known [, flags]) -> the message for opts'
** first unknown key, or for a key of flags whose value is neither nil nor
** a boolean (the Lua library raises it at its caller's line); or nil and
** a plain table of the known keys, each read from opts once (its
** metamethods run here), so that what is checked is what is used.
*/
static int o_checkopts (lua_State *L) {
  const char *fname = luaL_checkstring(L, 1);
  const char *known[65], *flags[65] = {NULL};
  names_of(L, 3, known);
  if (!lua_isnoneornil(L, 4)) names_of(L, 4, flags);
  if (!lua_isnil(L, 2) && lua_type(L, 2) != LUA_TTABLE) {
    lua_pushfstring(L, "%s: options must be a table, got %s", fname, luaL_typename(L, 2));
    return 1;
  }
  if (!lua_isnil(L, 2) && find_unknown(L, 2, fname, known) != NULL) return 1;
  int snap = lua_gettop(L) + 2;
  lua_pushnil(L);
  lua_createtable(L, 0, 8);
  for (int i = 0; known[i] && !lua_isnil(L, 2); i++) {
    lua_getfield(L, 2, known[i]);
    lua_setfield(L, snap, known[i]);
  }
  for (int i = 0; flags[i]; i++) {
    int t = lua_getfield(L, snap, flags[i]);
    if (t != LUA_TNIL && t != LUA_TBOOLEAN) {
      lua_pushfstring(L, "%s: option '%s' must be a boolean, got %s", fname, flags[i],
                      lua_typename(L, t));
      return 1;
    }
    lua_pop(L, 1);
  }
  return 2;
}

void qkvL_open_opts (lua_State *L, int mt, int methods, int module) {
  static const luaL_Reg mod[] = {{"_checkopts", o_checkopts}, {NULL, NULL}};
  qkvL_register(L, methods, module, NULL, NULL, mod);
  (void)mt;
}
