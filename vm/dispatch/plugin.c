/*
** plugin.c -- finds and loads the CUDA backend (build/qkv_cuda.so) the
** first time a script asks for the GPU, and moves tensors between host and
** device memory.  Linking cudart and cuBLAS into the executable would cost
** every start ~70 ms; a dlopen on first use costs only the scripts that use
** the GPU.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/qkv.h"
#include "../core/backend.h"
#include "../common/ops.h"
#include "plugin.h"

static const qkv_cuda_api *api;
static int tried;
static char why_not[512];

/* where the plugin may be: $QKV_CUDA_PLUGIN, else beside the object that
   holds this code (build/qkv or build/qkv.so), else in the qkv/ folder
   beside it or in an install's lib/lua/5.4/qkv/ */
static void *open_plugin (void) {
  static const char *const rel[] = {"qkv_cuda.so", "qkv/qkv_cuda.so",
                                    "../lib/lua/5.4/qkv/qkv_cuda.so"};
  const char *env = getenv("QKV_CUDA_PLUGIN");
  char dir[PATH_MAX], path[PATH_MAX + 64];
  Dl_info info;
  if (env && *env) {
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) snprintf(why_not, sizeof why_not, "%s", dlerror());
    return h;
  }
  if (!dladdr((void *)open_plugin, &info) || info.dli_fname == NULL) {
    snprintf(why_not, sizeof why_not, "cannot tell where qkv is installed");
    return NULL;
  }
  snprintf(dir, sizeof dir, "%s", info.dli_fname);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  snprintf(why_not, sizeof why_not,
           "this build has no CUDA backend (no %.300s/qkv_cuda.so: make found no nvcc, "
           "or CUDA=0)", dir);
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, rel[i]);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    /* a plugin that exists but will not load says why (no libcudart...) */
    if (i == 0 && access(path, F_OK) == 0) {
      snprintf(why_not, sizeof why_not, "%s", dlerror());
      return NULL;
    }
  }
  return NULL;
}

const qkv_cuda_api *qkv_cuda (char *why, size_t n) {
  if (!tried) {
    tried = 1;
    void *h = open_plugin();
    qkv_cuda_plugin_fn get = NULL;
    if (h) *(void **)&get = dlsym(h, "qkv_cuda_plugin");
    const qkv_cuda_api *a = get ? get() : NULL;
    if (h && a == NULL)
      snprintf(why_not, sizeof why_not, "the CUDA plugin has no qkv_cuda_plugin");
    else if (a && a->abi != QKV_CUDA_ABI)
      snprintf(why_not, sizeof why_not, "the CUDA plugin was built from other headers "
               "(rebuild it: make)");
    /* a plugin built before a row was added, removed or moved would run
       another op than the one asked for (a comparison for another) */
    else if (a && (a->ops == NULL || strcmp(a->ops, QKV_OPS_LIST) != 0))
      snprintf(why_not, sizeof why_not, "the CUDA plugin was built from another list of "
               "ops (vm/common/ops.h changed since; rebuild it: make)");
    else if (a && a->init(why_not, sizeof why_not) == QKV_OK) {
      api = a;
      qkv_backend_register(QKV_CUDA, a->backend);
      qkv_cuda_follow_precision();
    }
  }
  if (api == NULL && why) snprintf(why, n, "%s", why_not);
  return api;
}

const qkv_cuda_api *qkv_cuda_loaded (void) { return api; }

void qkv_cuda_follow_precision (void) {
  if (api) api->allow_tf32(qkv_matmul_precision() != QKV_PREC_HIGHEST);
}

int qkv_transfer (qkv_tensor *dst, const qkv_tensor *src) {
  qkv_tensor c = *src;
  qkv_device from = src->storage->device;
  int err = QKV_OK;
  if (api == NULL) return QKV_ENODEV;
  if (qkv_is_closed(dst) || qkv_is_closed(src)) return QKV_ECLOSED;
  if (qkv_interrupted) return QKV_EINTR;
  size_t n = (size_t)qkv_numel(src) * qkv_elsize(src->dtype);
  /* a strided src crosses as a contiguous copy that its own backend makes
     (in its own dtype, so no value can fail to fit) */
  if (!qkv_is_contiguous(src)) {
    c.offset = 0;
    qkv_set_contiguous(&c, src->ndim, src->size);
    if ((c.storage = qkv_storage_new(from, n, 0)) == NULL) return QKV_ENOMEM;
    err = qkv_backend_of(from)->copy(&c, src);
  }
  if (err == QKV_OK)
    err = dst->storage->device == QKV_CUDA ? api->to_device(qkv_data(dst), qkv_data(&c), n)
                                           : api->to_host(qkv_data(dst), qkv_data(&c), n);
  if (c.storage != src->storage) qkv_storage_release(c.storage);
  return err;
}
