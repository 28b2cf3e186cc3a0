/*
** cudnn.cpp -- float16 and bfloat16 attention, forward and backward,
** through cuDNN's fused scaled dot-product attention (the "SDPA" nodes of
** its graph API, built with NVIDIA's header-only cudnn-frontend): on an
** H100 its Hopper kernels (wgmma, TMA) are what PyTorch's SDPA runs too.
**
** libcudnn is never linked: the frontend calls it through dlsym on the
** handle opened here (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), found at the
** first half-precision attention in, first to last:
**   $QKV_CUDNN          a folder holding libcudnn_graph.so.9 ("0": never)
**   the plugin's folder  (a bundle that carries cuDNN)
**   the loader's path   (LD_LIBRARY_PATH, ldconfig)
**   python3's nvidia.cudnn package (PyTorch's wheels bring it)
** cuDNN opens its engine libraries by name: they are opened here first, by
** path, so that those names find them wherever the folder is.
**
** What it takes, read from the plan (common/attention_plan.h) that the
** other kernels read, its operands' layouts from their tensors: no mask
** (causal or not, aligned to the last key as the other kernels, but not
** a causal nq > nk, whose first rows have no key),
** dk == dv a multiple of 8 up to 128, each operand's batch dims folding
** into cuDNN's (b, h) with rows and 2-byte elements 16-byte aligned.  A
** graph is built once per shape, strides, scale and flags (a few ms) and
** kept (CACHE of them, the oldest dropped).  lse is cuDNN's "Stats": each
** query's natural-log log-sum-exp of its scaled scores, float32 (b, h, nq).
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn.h"
#include "cuda.cuh"

#ifdef QKV_CUDNN
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <memory>
#include <string>
#include <vector>

namespace fe = cudnn_frontend;
namespace cudnn_frontend { void *cudnn_dlhandle = nullptr; }

/* ---- finding and opening the library ---- */

static const char *const ENGINES[] = {
  "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
  "libcudnn_heuristic.so.9", "libcudnn_ops.so.9", "libcudnn_adv.so.9", "libcudnn.so.9",
};

/* libcudnn_graph.so.9 in dir (NULL: by the loader's search), then the
   engines beside it; the graph library's handle, or NULL */
static void *open_in (const char *dir) {
  std::string base = dir ? std::string(dir) + "/" : std::string();
  void *h = dlopen((base + "libcudnn_graph.so.9").c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) return NULL;
  for (const char *e : ENGINES) dlopen((base + e).c_str(), RTLD_NOW | RTLD_GLOBAL);
  return h;
}

static std::string &why_not = *new std::string("not looked for yet");
static cudnnHandle_t handle;

/* whether cuDNN is open, looking for it the first time */
static bool loaded (void) {
  static int state = -1;
  if (state >= 0) return state;
  state = 0;
  const char *env = getenv("QKV_CUDNN");
  void *h = NULL;
  if (env && (!strcmp(env, "0") || !*env)) {
    why_not = "QKV_CUDNN=0";
    return false;
  }
  if (env) h = open_in(env);
  Dl_info self;
  if (h == NULL && !env && dladdr((void *)&open_in, &self) && self.dli_fname) {
    std::string d = self.dli_fname;
    d = d.find('/') == std::string::npos ? "." : d.substr(0, d.rfind('/'));
    h = open_in(d.c_str());
  }
  if (h == NULL && !env) h = open_in(NULL);
  if (h == NULL && !env) {
    FILE *p = popen("python3 -c 'import nvidia.cudnn as c, os; "
                    "print(os.path.join(list(c.__path__)[0], \"lib\"))' 2>/dev/null", "r");
    char dir[4096] = "";
    if (p) {
      if (fgets(dir, sizeof dir, p) == NULL) dir[0] = 0;
      pclose(p);
    }
    dir[strcspn(dir, "\n")] = 0;
    if (dir[0]) h = open_in(dir);
  }
  if (h == NULL) {
    why_not = env ? std::string("no libcudnn_graph.so.9 in QKV_CUDNN=") + env
                  : "no libcudnn_graph.so.9 beside the plugin, on the loader's path or in "
                    "python3's nvidia.cudnn";
    return false;
  }
  fe::cudnn_dlhandle = h;
  try {
    if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
      why_not = "cudnnCreate failed";
      return false;
    }
  } catch (const std::exception &e) {
    why_not = std::string("cudnnCreate: ") + e.what();
    return false;
  }
  state = 1;
  return true;
}

/* ---- operands as cuDNN's (b, h, rows, cols) ---- */

struct dims4 { int64_t d[4], s[4]; };

/* t (B..., rows, cols) with its batch dims folded into (b, h): h the last,
   b the others where their strides fold; false where they do not, where a
   dim of more than one element has stride 0 (a broadcast), or where rows
   or the start are not 16 bytes apart */
static bool as4 (const qkv_tensor *t, dims4 *o) {
  int n = t->ndim, nb = n - 2;
  if (n < 2 || t->stride[n - 1] != 1) return false;
  o->d[3] = t->size[n - 1]; o->s[3] = 1;
  o->d[2] = t->size[n - 2]; o->s[2] = t->stride[n - 2];
  o->d[1] = nb >= 1 ? t->size[nb - 1] : 1;
  o->s[1] = nb >= 1 ? t->stride[nb - 1] : 0;
  o->d[0] = 1; o->s[0] = 0;
  for (int i = nb - 2; i >= 0; i--) {
    if (t->size[i] == 1) continue;
    if (o->d[0] == 1) { o->d[0] = t->size[i]; o->s[0] = t->stride[i]; }
    else if (t->stride[i] == o->s[0] * o->d[0]) o->d[0] *= t->size[i];
    else if (o->s[0] == t->stride[i] * t->size[i]) { o->d[0] *= t->size[i]; o->s[0] = t->stride[i]; }
    else return false;
  }
  /* a dim of one element gets the stride that dense order would give */
  if (o->d[2] == 1) o->s[2] = o->d[3];
  if (o->d[1] == 1) o->s[1] = o->d[2] * o->s[2];
  if (o->d[0] == 1) o->s[0] = o->d[1] * o->s[1];
  for (int i = 0; i < 3; i++)
    if (o->s[i] == 0 || o->s[i] % 8 != 0) return false;
  return (uintptr_t)qkv_cu_data(t) % 16 == 0;
}

static std::vector<int64_t> dv (const int64_t *x) { return std::vector<int64_t>(x, x + 4); }

/* ---- graphs, built once per key ---- */

enum { UQ = 1, UK, UV, UO, USTATS, UDO, UDQ, UDK, UDV };

struct key {                    /* compared bytewise: no padding inside */
  int bwd, bf16, causal, stats;
  double scale;
  dims4 q, k, v, o;
  bool operator== (const key &x) const { return memcmp(this, &x, sizeof x) == 0; }
};

struct entry {
  key k;
  std::shared_ptr<fe::graph::Graph> g;         /* NULL: cuDNN does not run it, */
  std::string why;                             /* and what it said */
  int64_t workspace;
};

/* never destroyed: at exit cuDNN and the CUDA context may be gone before
   static destructors would run the graphs' */
#define CACHE 32
static std::vector<entry> &cache = *new std::vector<entry>;

static std::shared_ptr<fe::graph::Tensor_attributes> input (fe::graph::Graph &g, int uid,
                                                            const char *name, const dims4 &d) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                    .set_dim(dv(d.d)).set_stride(dv(d.s)));
}

static void output (const std::shared_ptr<fe::graph::Tensor_attributes> &t, int uid,
                    const dims4 &d) {
  t->set_output(true).set_uid(uid).set_dim(dv(d.d)).set_stride(dv(d.s));
}

/* lse's (b, h, nq, 1), float32, dense */
static void stats_output (const std::shared_ptr<fe::graph::Tensor_attributes> &t, const key &k) {
  const int64_t *d = k.o.d;
  t->set_output(true).set_uid(USTATS).set_data_type(fe::DataType_t::FLOAT)
    .set_dim({d[0], d[1], d[2], 1}).set_stride({d[1] * d[2], d[2], 1, 1});
}

/* causal aligned to the last key (qkv's, as the other kernels'): the
   bottom-right diagonal; the same as the top-left one where n_q = n_k,
   which is how PyTorch asks for it there (its is_causal), and on the H100
   cuDNN's backward runs the top-left one twice as fast */
static fe::DiagonalAlignment_t align (const key &k) {
  return k.q.d[2] == k.k.d[2] ? fe::DiagonalAlignment_t::TOP_LEFT
                              : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
}

static std::shared_ptr<fe::graph::Graph> build (const key &k, int64_t *workspace,
                                                 std::string *why) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(k.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
    .set_intermediate_data_type(fe::DataType_t::FLOAT)
    .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = input(*g, UQ, "Q", k.q), kk = input(*g, UK, "K", k.k), v = input(*g, UV, "V", k.v);
  if (!k.bwd) {
    auto a = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(k.stats)
               .set_attn_scale((float)k.scale);
    if (k.causal) a.set_diagonal_alignment(align(k)).set_diagonal_band_right_bound(0);
    auto [o, stats] = g->sdpa(q, kk, v, a);
    output(o, UO, k.o);
    if (k.stats) stats_output(stats, k);
  } else {
    auto o = input(*g, UO, "O", k.o), go = input(*g, UDO, "dO", k.o);
    const int64_t *d = k.o.d;
    auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(USTATS)
                             .set_data_type(fe::DataType_t::FLOAT)
                             .set_dim({d[0], d[1], d[2], 1})
                             .set_stride({d[1] * d[2], d[2], 1, 1}));
    auto a = fe::graph::SDPA_backward_attributes().set_name("attention backward")
               .set_attn_scale((float)k.scale);
    if (k.causal) a.set_diagonal_alignment(align(k)).set_diagonal_band_right_bound(0);
    auto [dq, dk, dvv] = g->sdpa_backward(q, kk, v, o, go, stats, a);
    output(dq, UDQ, k.q);
    output(dk, UDK, k.k);
    output(dvv, UDV, k.v);
  }
  auto st = g->build(handle, {fe::HeurMode_t::A});
  if (st.is_good()) st = g->get_workspace_size(*workspace);
  if (st.is_good()) return g;
  *why = "cuDNN: " + st.get_message();
  return nullptr;
}

/* the graph for k (NULL where cuDNN does not run it) and its workspace */
static entry *find (const key &k) {
  for (auto &e : cache)
    if (e.k == k) return &e;
  if (cache.size() >= CACHE) cache.erase(cache.begin());
  entry e;
  e.k = k;
  e.workspace = 0;
  try {
    e.g = build(k, &e.workspace, &e.why);
  } catch (const std::exception &x) {
    e.g = nullptr;
    e.why = std::string("cuDNN: ") + x.what();
  }
  cache.push_back(e);
  return &cache.back();
}

static int run (entry *e, std::unordered_map<int64_t, void *> &ptrs) {
  void *ws = e->workspace > 0 ? qkv_cu_alloc((size_t)e->workspace) : NULL;
  if (e->workspace > 0 && ws == NULL) return QKV_ENOMEM;
  auto st = e->g->execute(handle, ptrs, ws);
  qkv_cu_free(ws);
  if (!st.is_good()) return qkv_cu_fail("cuDNN's attention", __FILE__, __LINE__,
                                        st.get_message().c_str());
  qkv_cu_attention_path = "cudnn";
  return QKV_OK;
}

/* QKV_EDTYPE, or with cudnn forced the error saying why not */
static int decline (const char *why) { return qkv_cu_decline("cudnn", why); }

/* the key for plan P of q, k, v, o, or the reason there is none */
static const char *keyed (key *k, const qkv_attn_plan &P, const qkv_tensor *q,
                          const qkv_tensor *kt, const qkv_tensor *v, const qkv_tensor *o) {
  if (qkv_cu_forced_other("cudnn")) return "another path named";
  if (P.dtype != QKV_F16 && P.dtype != QKV_BF16) return "not a half dtype";
  if (P.has_mask) return "a mask";
  memset(k, 0, sizeof *k);
  if (!as4(q, &k->q) || !as4(kt, &k->k) || !as4(v, &k->v) || !as4(o, &k->o))
    return "strides cuDNN does not take";
  int64_t nq = k->q.d[2], nk = k->k.d[2], d = k->q.d[3];
  if (k->v.d[3] != d || d % 8 != 0 || d > 128 || nq == 0 || nk == 0)
    return "a head size or length cuDNN does not take";
  for (int i = 0; i < 2; i++)
    if (k->k.d[i] != k->q.d[i] || k->v.d[i] != k->q.d[i] || k->o.d[i] != k->q.d[i])
      return "batch dims that do not fold alike";
  if (P.causal && nq > nk) return "causal with more queries than keys";
  k->bf16 = P.dtype == QKV_BF16;
  k->causal = P.causal;
  k->scale = P.scale;
  if (!loaded()) return why_not.c_str();
  return NULL;
}

int qkv_cu_cudnn_attention (const qkv_attn_plan &P, qkv_tensor *out, const qkv_tensor *q,
                            const qkv_tensor *k, const qkv_tensor *v, qkv_tensor *lse) {
  key K;
  const char *why = keyed(&K, P, q, k, v, out);
  if (why) return decline(why);
  K.stats = lse != NULL;
  entry *e = find(K);
  if (e->g == nullptr) return decline(e->why.c_str());
  std::unordered_map<int64_t, void *> p = {
    {UQ, qkv_cu_data(q)}, {UK, qkv_cu_data(k)}, {UV, qkv_cu_data(v)}, {UO, qkv_cu_data(out)}};
  if (lse) p[USTATS] = qkv_cu_data(lse);
  return run(e, p);
}

int qkv_cu_cudnn_attention_backward (const qkv_attn_plan &P, qkv_tensor *dq, qkv_tensor *dk,
                                     qkv_tensor *dv, const qkv_tensor *q, const qkv_tensor *k,
                                     const qkv_tensor *v, const qkv_tensor *o,
                                     const qkv_tensor *go, const qkv_tensor *lse) {
  key K;
  dims4 a, b, c, g;
  const char *why = keyed(&K, P, q, k, v, o);
  if (why) return decline(why);
  /* the gradients and go dense, as the inputs' */
  if (!as4(dq, &a) || !as4(dk, &b) || !as4(dv, &c) || !as4(go, &g) ||
      memcmp(&a, &K.q, sizeof a) || memcmp(&b, &K.k, sizeof b) || memcmp(&c, &K.v, sizeof c) ||
      memcmp(&g, &K.o, sizeof g))
    return decline("gradients laid out unlike the inputs");
  /* the forward's statistics: given, or made by a forward into scratch */
  void *stats = lse ? qkv_cu_data(lse) : NULL, *scratch = NULL;
  if (stats == NULL) {
    key F = K;
    F.stats = 1;
    entry *f = find(F);
    if (f->g == nullptr) return decline(f->why.c_str());
    size_t n = (size_t)(K.o.d[0] * K.o.d[1] * K.o.d[2] * 4 + 255) / 256 * 256;
    size_t no = (size_t)(qkv_cu_numel(o)) * 2;
    scratch = qkv_cu_alloc(n + no);
    if (scratch == NULL) return QKV_ENOMEM;
    stats = scratch;
    std::unordered_map<int64_t, void *> p = {
      {UQ, qkv_cu_data(q)}, {UK, qkv_cu_data(k)}, {UV, qkv_cu_data(v)},
      {UO, (char *)scratch + n}, {USTATS, stats}};
    int err = run(f, p);
    if (err != QKV_OK) {
      qkv_cu_free(scratch);
      return err;
    }
  }
  K.bwd = 1;
  entry *e = find(K);
  int err;
  if (e->g == nullptr) {
    err = decline(e->why.c_str());
  } else {
    std::unordered_map<int64_t, void *> p = {
      {UQ, qkv_cu_data(q)}, {UK, qkv_cu_data(k)}, {UV, qkv_cu_data(v)},
      {UO, qkv_cu_data(o)}, {UDO, qkv_cu_data(go)}, {USTATS, stats},
      {UDQ, qkv_cu_data(dq)}, {UDK, qkv_cu_data(dk)}, {UDV, qkv_cu_data(dv)}};
    err = run(e, p);
  }
  qkv_cu_free(scratch);
  return err;
}
#endif
