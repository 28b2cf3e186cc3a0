/*
** lzmq.c -- the module qkv.zmq: what the Jupyter kernel (stdlib/qkv/
** kernel.lua) needs of Debian's libzmq and OpenSSL's libcrypto, loaded
** only by `qkv kernel`, so that no script pays for either.
**   zmq.context() -> ctx;  ctx:socket(type) -> s  ("ROUTER", "DEALER",
**       "PUB", "SUB", "REP", "REQ");  ctx:term()
**   s:bind(addr), s:connect(addr), s:subscribe(prefix), s:close()
**   s:send(frames)   a list of strings, sent as one multipart message
**   s:recv([timeout_ms]) -> the frames, or nil after the timeout
**   zmq.poll(sockets, timeout_ms) -> the list of the indices that can be
**       read (empty after the timeout; a signal ends the wait early)
**   zmq.heartbeat(ctx, addr)   a thread that echoes on a ROUTER at addr
**   zmq.hmac_sha256(key, parts) -> the hex HMAC of the concatenated parts
**   zmq.equal(a, b)  constant-time comparison of two strings
**   zmq.base64(s)
** Sockets never linger: closing one drops what it has not sent.
*/
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <zmq.h>

#include <lua.h>
#include <lauxlib.h>

LUALIB_API int luaopen_qkv_zmq (lua_State *L);

#define CTX "qkv.zmq.ctx"
#define SOCK "qkv.zmq.socket"

typedef struct Ctx { void *c; } Ctx;
typedef struct Sock { void *s; } Sock;

static int zerror (lua_State *L, const char *what) {
  return luaL_error(L, "zmq: %s: %s", what, zmq_strerror(zmq_errno()));
}

static Ctx *checkctx (lua_State *L, int i) {
  Ctx *c = luaL_checkudata(L, i, CTX);
  if (c->c == NULL) luaL_argerror(L, i, "context was terminated");
  return c;
}

static Sock *checksock (lua_State *L, int i) {
  Sock *s = luaL_checkudata(L, i, SOCK);
  if (s->s == NULL) luaL_argerror(L, i, "socket was closed");
  return s;
}

static int ctx_new (lua_State *L) {
  Ctx *c = lua_newuserdatauv(L, sizeof *c, 1);
  c->c = NULL;
  luaL_setmetatable(L, CTX);
  if ((c->c = zmq_ctx_new()) == NULL) return zerror(L, "context");
  return 1;
}

/* closes every socket first (they sit in the context's user value), so
   that zmq_ctx_term cannot wait on one */
static int ctx_term (lua_State *L) {
  Ctx *c = luaL_checkudata(L, 1, CTX);
  if (c->c == NULL) return 0;
  if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      Sock *s = luaL_testudata(L, -2, SOCK);
      if (s && s->s) { zmq_close(s->s); s->s = NULL; }
      lua_pop(L, 1);
    }
  }
  zmq_ctx_term(c->c);
  c->c = NULL;
  return 0;
}

static const char *const TYPES[] = {"ROUTER", "DEALER", "PUB", "SUB", "REP", "REQ", NULL};
static const int ZTYPES[] = {ZMQ_ROUTER, ZMQ_DEALER, ZMQ_PUB, ZMQ_SUB, ZMQ_REP, ZMQ_REQ};

static int ctx_socket (lua_State *L) {
  Ctx *c = checkctx(L, 1);
  int t = ZTYPES[luaL_checkoption(L, 2, NULL, TYPES)];
  Sock *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->s = NULL;
  luaL_setmetatable(L, SOCK);
  if ((s->s = zmq_socket(c->c, t)) == NULL) return zerror(L, "socket");
  int zero = 0;
  zmq_setsockopt(s->s, ZMQ_LINGER, &zero, sizeof zero);
  /* remember it weakly, for ctx:term */
  if (lua_getiuservalue(L, 1, 1) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, 1);
  }
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  return 1;
}

static int sock_close (lua_State *L) {
  Sock *s = luaL_checkudata(L, 1, SOCK);
  if (s->s) zmq_close(s->s);
  s->s = NULL;
  return 0;
}

static int sock_bind (lua_State *L) {
  if (zmq_bind(checksock(L, 1)->s, luaL_checkstring(L, 2)) != 0)
    return zerror(L, lua_pushfstring(L, "bind %s", lua_tostring(L, 2)));
  return 0;
}

static int sock_connect (lua_State *L) {
  if (zmq_connect(checksock(L, 1)->s, luaL_checkstring(L, 2)) != 0)
    return zerror(L, lua_pushfstring(L, "connect %s", lua_tostring(L, 2)));
  return 0;
}

static int sock_subscribe (lua_State *L) {
  size_t n;
  const char *p = luaL_optlstring(L, 2, "", &n);
  if (zmq_setsockopt(checksock(L, 1)->s, ZMQ_SUBSCRIBE, p, n) != 0)
    return zerror(L, "subscribe");
  return 0;
}

static int sock_send (lua_State *L) {
  void *s = checksock(L, 1)->s;
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_geti(L, 2, i);
    const char *p = luaL_checklstring(L, -1, &len);
    int rc;
    while ((rc = zmq_send(s, p, len, i < n ? ZMQ_SNDMORE : 0)) < 0 && zmq_errno() == EINTR) {}
    if (rc < 0) return zerror(L, "send");
    lua_pop(L, 1);
  }
  return 0;
}

static int sock_recv (lua_State *L) {
  void *s = checksock(L, 1)->s;
  int timeout = (int)luaL_optinteger(L, 2, -1);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  lua_newtable(L);
  for (lua_Integer i = 1;; i++) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    int rc;
    while ((rc = zmq_msg_recv(&m, s, 0)) < 0 && zmq_errno() == EINTR && i > 1) {}
    if (rc < 0) {
      int e = zmq_errno();
      zmq_msg_close(&m);
      if (e == EAGAIN || e == EINTR) return lua_pushnil(L), 1;
      return zerror(L, "recv");
    }
    lua_pushlstring(L, zmq_msg_data(&m), zmq_msg_size(&m));
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    lua_rawseti(L, -2, i);
    if (!more) return 1;
  }
}

static int z_poll (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  long timeout = (long)luaL_optinteger(L, 2, -1);
  zmq_pollitem_t items[16];
  int n = (int)luaL_len(L, 1);
  luaL_argcheck(L, n <= 16, 1, "at most 16 sockets");
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    items[i].socket = checksock(L, -1)->s;
    items[i].fd = 0;
    items[i].events = ZMQ_POLLIN;
    items[i].revents = 0;
    lua_pop(L, 1);
  }
  int rc = zmq_poll(items, n, timeout);
  if (rc < 0 && zmq_errno() != EINTR) return zerror(L, "poll");
  lua_newtable(L);
  for (int i = 0, k = 0; rc > 0 && i < n; i++)
    if (items[i].revents & ZMQ_POLLIN) {
      lua_pushinteger(L, i + 1);
      lua_rawseti(L, -2, ++k);
    }
  return 1;
}

/* the heartbeat: a ROUTER that sends back whatever it gets, on a thread
   of its own so that a long cell never looks like a dead kernel; it ends
   when the context is terminated */
static void *heartbeat (void *sock) {
  zmq_proxy(sock, sock, NULL);
  zmq_close(sock);
  return NULL;
}

static int z_heartbeat (lua_State *L) {
  Ctx *c = checkctx(L, 1);
  const char *addr = luaL_checkstring(L, 2);
  void *s = zmq_socket(c->c, ZMQ_ROUTER);
  if (s == NULL) return zerror(L, "socket");
  int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(s, addr) != 0) {
    int e = zmq_errno();
    zmq_close(s);
    return luaL_error(L, "zmq: bind %s: %s", addr, zmq_strerror(e));
  }
  pthread_t t;
  if (pthread_create(&t, NULL, heartbeat, s) != 0) {
    zmq_close(s);
    return luaL_error(L, "zmq: heartbeat: cannot start a thread");
  }
  pthread_detach(t);
  return 0;
}

/* parts are read raw, so nothing can raise an error while the MAC's
   context is held */
static int z_hmac (lua_State *L) {
  size_t klen;
  const char *key = luaL_checklstring(L, 1, &klen);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  for (lua_Integer i = 1; i <= n; i++)
    if (lua_rawgeti(L, 2, i) != LUA_TSTRING) luaL_error(L, "hmac_sha256: part %d is not a string",
                                                       (int)i);
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t mdlen = 0;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *h = mac ? EVP_MAC_CTX_new(mac) : NULL;
  int ok = h && EVP_MAC_init(h, (const unsigned char *)key, klen, params);
  for (lua_Integer i = 1; ok && i <= n; i++) {
    size_t len;
    const char *p = lua_tolstring(L, -(int)n + (int)i - 1, &len);
    ok = EVP_MAC_update(h, (const unsigned char *)p, len);
  }
  ok = ok && EVP_MAC_final(h, md, &mdlen, sizeof md);
  EVP_MAC_CTX_free(h);
  EVP_MAC_free(mac);
  if (!ok) return luaL_error(L, "hmac_sha256: OpenSSL failed");
  char hex[2 * EVP_MAX_MD_SIZE + 1];
  for (size_t i = 0; i < mdlen; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  lua_pushlstring(L, hex, 2 * mdlen);
  return 1;
}

static int z_equal (lua_State *L) {
  size_t na, nb;
  const char *a = luaL_checklstring(L, 1, &na), *b = luaL_checklstring(L, 2, &nb);
  lua_pushboolean(L, na == nb && CRYPTO_memcmp(a, b, na) == 0);
  return 1;
}

static int z_base64 (lua_State *L) {
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n < ((size_t)1 << 30), 1, "too long");
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, 4 * ((n + 2) / 3) + 1);
  int k = EVP_EncodeBlock((unsigned char *)p, s, (int)n);
  luaL_pushresultsize(&b, (size_t)k);
  return 1;
}

/* a userdata's metatable: methods as __index, and the finalizer */
static void newclass (lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
}

LUALIB_API int luaopen_qkv_zmq (lua_State *L) {
  static const luaL_Reg ctxm[] = {{"socket", ctx_socket}, {"term", ctx_term}, {NULL, NULL}};
  static const luaL_Reg sockm[] = {
    {"bind", sock_bind}, {"connect", sock_connect}, {"subscribe", sock_subscribe},
    {"send", sock_send}, {"recv", sock_recv}, {"close", sock_close}, {NULL, NULL}
  };
  static const luaL_Reg f[] = {
    {"context", ctx_new}, {"poll", z_poll}, {"heartbeat", z_heartbeat},
    {"hmac_sha256", z_hmac}, {"equal", z_equal}, {"base64", z_base64}, {NULL, NULL}
  };
  newclass(L, CTX, ctxm, ctx_term);
  newclass(L, SOCK, sockm, sock_close);
  luaL_newlib(L, f);
  return 1;
}
