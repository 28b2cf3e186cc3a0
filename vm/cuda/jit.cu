/*
** jit.cu -- kernels compiled at run time (jit.cuh says what and why).
**
** The compiled texts are kept for the process in a map from the text to
** its module (a few programs a script, each compiled once; FlexAttention
** compiles its kernels for seconds, NVRTC these in a fraction of one).
** On a GPU, NVRTC's functions are found with dlopen/dlsym in libnvrtc
** (the toolkit's or the nvidia-cuda-nvrtc wheel's, on the library path)
** and the text gets small forms of the few C headers the shared headers
** include (NVRTC has no C library): fixed-width integers, NAN and
** INFINITY, and sig_atomic_t; -default-device makes the shared headers'
** unmarked functions device functions.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <unordered_map>

#include "jit.cuh"

#ifndef QKV_CUDASIM
#include <nvrtc.h>
#endif

struct qkv_cu_jit {
#ifdef QKV_CUDASIM
  void *so;                         /* the compiled shared object */
#else
  cudaLibrary_t lib;
#endif
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static std::unordered_map<std::string, qkv_cu_jit *> *compiled;

static int off (void) {
  const char *e = getenv("QKV_CUDA_JIT");
  return e && !strcmp(e, "0");
}

#ifndef QKV_CUDASIM

/* ---- NVRTC ---- */

static struct {
  int tried;
  const char *why;
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                        const char *const *);
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*logsize)(nvrtcProgram, size_t *);
  nvrtcResult (*log)(nvrtcProgram, char *);
  nvrtcResult (*cubinsize)(nvrtcProgram, size_t *);
  nvrtcResult (*cubin)(nvrtcProgram, char *);
  nvrtcResult (*destroy)(nvrtcProgram *);
} rtc;

/* libnvrtc's functions, looked up once (under lock) */
static void find_nvrtc (void) {
  if (rtc.tried) return;
  rtc.tried = 1;
  static const char *names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  void *h = NULL;
  for (const char *n : names)
    if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) != NULL) break;
  if (h == NULL) {
    rtc.why = "libnvrtc is not on the library path";
    return;
  }
  *(void **)&rtc.create = dlsym(h, "nvrtcCreateProgram");
  *(void **)&rtc.compile = dlsym(h, "nvrtcCompileProgram");
  *(void **)&rtc.logsize = dlsym(h, "nvrtcGetProgramLogSize");
  *(void **)&rtc.log = dlsym(h, "nvrtcGetProgramLog");
  *(void **)&rtc.cubinsize = dlsym(h, "nvrtcGetCUBINSize");
  *(void **)&rtc.cubin = dlsym(h, "nvrtcGetCUBIN");
  *(void **)&rtc.destroy = dlsym(h, "nvrtcDestroyProgram");
  if (!rtc.create || !rtc.compile || !rtc.logsize || !rtc.log || !rtc.cubinsize || !rtc.cubin ||
      !rtc.destroy) {
    rtc.why = "libnvrtc lacks a function the plugin uses";
    rtc.create = NULL;
  }
}

/* the C headers the shared headers include, as NVRTC gets them */
static const char *const std_names[] = {"stdint.h", "stddef.h", "math.h", "string.h",
                                        "limits.h", "signal.h"};
static const char *const std_texts[] = {
  "#pragma once\n"
  "typedef signed char int8_t; typedef unsigned char uint8_t;\n"
  "typedef short int16_t; typedef unsigned short uint16_t;\n"
  "typedef int int32_t; typedef unsigned int uint32_t;\n"
  "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
  "typedef long long intptr_t; typedef unsigned long long uintptr_t;\n"
  "#define INT32_MAX 2147483647\n#define INT64_MAX 9223372036854775807LL\n",
  "#pragma once\n#define NULL 0\n#define offsetof(t, m) __builtin_offsetof(t, m)\n",
  "#pragma once\n#define INFINITY __int_as_float(0x7f800000)\n"
  "#define NAN __int_as_float(0x7fc00000)\n",
  "#pragma once\n",
  "#pragma once\n#define INT_MAX 2147483647\n#define INT_MIN (-INT_MAX - 1)\n",
  "#pragma once\ntypedef int sig_atomic_t;\n",
};

int qkv_cu_jit_on (const char **why) {
  if (off()) {
    *why = "QKV_CUDA_JIT=0";
    return 0;
  }
  pthread_mutex_lock(&lock);
  find_nvrtc();
  pthread_mutex_unlock(&lock);
  *why = rtc.why;
  return rtc.create != NULL;
}

/* src compiled by NVRTC for sm_<sm> into *bin, else NVRTC's log in *log */
static int compile (const char *src, int sm, std::string *bin, std::string *log) {
  char arch[40];
  snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", sm);
  const char *opts[] = {arch, "-std=c++17", "-default-device", "-diag-suppress=20044",
                        "-DQKV_JIT=1"};
  nvrtcProgram p;
  if (rtc.create(&p, src, "qkv_jit.cu", 6, std_texts, std_names) != NVRTC_SUCCESS) {
    *log = "nvrtcCreateProgram: out of memory";
    return QKV_ENOMEM;
  }
  size_t n = 0;
  int ok = rtc.compile(p, 5, opts) == NVRTC_SUCCESS;
  if (ok) {
    ok = rtc.cubinsize(p, &n) == NVRTC_SUCCESS;
    bin->assign(n, '\0');
    ok = ok && rtc.cubin(p, &(*bin)[0]) == NVRTC_SUCCESS;
  } else if (rtc.logsize(p, &n) == NVRTC_SUCCESS && n > 1) {
    log->assign(n, '\0');
    rtc.log(p, &(*log)[0]);
  }
  rtc.destroy(&p);
  return ok ? QKV_OK : QKV_ECUDA;
}

/* src compiled for this device and loaded into *j */
static int build (const char *src, qkv_cu_jit **j) {
  int dev = 0, major = 0, minor = 0;
  cudaCheck(cudaGetDevice(&dev));
  cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  std::string bin, log;
  if (compile(src, major * 10 + minor, &bin, &log) != QKV_OK)
    return qkv_cu_fail("nvrtcCompileProgram", __FILE__, __LINE__, log.c_str());
  cudaLibrary_t lib;
  cudaCheck(cudaLibraryLoadData(&lib, bin.data(), NULL, NULL, 0, NULL, NULL, 0));
  *j = new qkv_cu_jit{lib};
  return QKV_OK;
}

/*
** For tests/tools/jit_check.c, where no GPU is: src compiled by NVRTC
** for sm_<sm>, 0 when it compiles, else 1 with NVRTC's log in log[n]
** (2: no NVRTC, said there).
*/
extern "C" __attribute__((visibility("default")))
int qkv_cu_jit_check (const char *src, int sm, char *log, size_t n) {
  const char *why;
  if (!qkv_cu_jit_on(&why)) {
    snprintf(log, n, "%s", why);
    return 2;
  }
  std::string bin, text;
  if (compile(src, sm, &bin, &text) == QKV_OK) return 0;
  snprintf(log, n, "%s", text.c_str());
  return 1;
}

const void *qkv_cu_jit_kernel (qkv_cu_jit *j, const char *name) {
  cudaKernel_t k;
  return cudaLibraryGetKernel(&k, j->lib, name) == cudaSuccess ? (const void *)k : NULL;
}

#else

/* ---- the host simulation: the host's compiler ---- */

/* build.sh gives these: cudasim's folder, and the folder of the cache */
#ifndef QKV_SIM_DIR
#error "tests/tools/cudasim/build.sh defines QKV_SIM_DIR and QKV_SIM_JIT"
#endif

int qkv_cu_jit_on (const char **why) {
  *why = off() ? "QKV_CUDA_JIT=0" : NULL;
  return *why == NULL;
}

/* a 64-bit FNV-1a of s: the cached object's name */
static unsigned long long fnv (const char *s) {
  unsigned long long h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* src compiled by the host's compiler into QKV_SIM_JIT/<hash>.so (kept
   there for the next process of the same simulation build, and the text
   as <hash>.cu: tests/tools/jit_check.c compiles those with NVRTC),
   against this simulation, and opened into *j */
static int build (const char *src, qkv_cu_jit **j) {
  Dl_info self;
  struct stat st;
  if (!dladdr((void *)qkv_cu_jit_on, &self) || stat(self.dli_fname, &st) != 0)
    return qkv_cu_fail("dladdr", __FILE__, __LINE__, "the simulation's own path");
  const char *cxx = getenv("CXX") ? getenv("CXX") : "g++";
  std::string cmd = std::string(cxx) + " -std=c++20 -O1 -fPIC -shared -ffp-contract=off "
    "-fno-strict-aliasing -pthread -w -include " QKV_SIM_DIR "/cudasim.h -x c++ ";
  char name[64];
  snprintf(name, sizeof name, "%016llx", fnv(src) ^ fnv(cmd.c_str()) ^ fnv(self.dli_fname) ^
           (unsigned long long)st.st_mtime * 1099511628211ull);
  std::string base = std::string(QKV_SIM_JIT) + "/" + name, so = base + ".so";
  void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, ".%d", (int)getpid());
    std::string cpp = base + tmp + ".cpp", out = base + tmp + ".so";
    FILE *f = (system("mkdir -p " QKV_SIM_JIT) == 0) ? fopen(cpp.c_str(), "w") : NULL;
    if (f == NULL || fputs(src, f) < 0 || fclose(f) != 0)
      return qkv_cu_fail("the simulation's compile", __FILE__, __LINE__, "cannot write " QKV_SIM_JIT);
    cmd += cpp + " -x none -o " + out + " " + self.dli_fname;
    if (system(cmd.c_str()) != 0 || rename(out.c_str(), so.c_str()) != 0)
      return qkv_cu_fail("the simulation's compile", __FILE__, __LINE__, cmd.c_str());
    rename(cpp.c_str(), (base + ".cu").c_str());  /* kept: what NVRTC is checked on */
    if ((h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL)) == NULL)
      return qkv_cu_fail("dlopen", __FILE__, __LINE__, dlerror());
  }
  *j = new qkv_cu_jit{h};
  return QKV_OK;
}

const void *qkv_cu_jit_kernel (qkv_cu_jit *j, const char *name) {
  return dlsym(j->so, name);
}

#endif

qkv_cu_jit *qkv_cu_jit_get (const char *src) {
  pthread_mutex_lock(&lock);
  if (compiled == NULL) compiled = new std::unordered_map<std::string, qkv_cu_jit *>;
  auto it = compiled->find(src);
  qkv_cu_jit *j = it != compiled->end() ? it->second : NULL;
  if (j == NULL && build(src, &j) == QKV_OK) (*compiled)[src] = j;
  pthread_mutex_unlock(&lock);
  return j;
}
