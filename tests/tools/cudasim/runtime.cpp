/*
** runtime.cpp -- the host simulation's runtime API (its interface and
** model are described in cudasim.h): errors, the device's properties,
** streams, events, device memory and kernels' shared-memory attributes.
** The grid runner is scheduler.cpp, the tensor cores and cuBLAS
** products.cpp; what they share with this file is internal.h.
*/
#include "internal.h"

#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <set>
#include <thread>

using namespace cudasim;

/* errors */

std::mutex cudasim::mu;
cudaError_t cudasim::last_error;
cudaError_t cudasim::sticky;

cudaError_t cudasim::fail (cudaError_t e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::lock_guard<std::mutex> g(mu);
  /* out of memory is an answer, as CUDA gives it, silently (the suites ask
     for it on purpose); the rest are bugs and say so, as does everything
     under SIM_VERBOSE */
  if (e != cudaErrorMemoryAllocation || getenv("SIM_VERBOSE")) {
    fprintf(stderr, "cudasim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
  }
  va_end(ap);
  last_error = e;
  return e;
}

const char *cudaGetErrorName (cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaError";
  }
}

const char *cudaGetErrorString (cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cudasim: see stderr)";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "cudasim error";
  }
}

cudaError_t cudaGetLastError (void) {
  std::lock_guard<std::mutex> g(mu);
  cudaError_t e = last_error;
  last_error = sticky;
  return e;
}

cudaError_t cudaPeekAtLastError (void) {
  std::lock_guard<std::mutex> g(mu);
  return last_error;
}


/* the device */

static const size_t OPTIN_SMEM = 232448;          /* an H100's, per block */

static size_t total_memory (void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)16 << 30;
}

unsigned cudasim::workers (void) {
  static unsigned n;
  if (n == 0) {
    const char *e = getenv("SIM_WORKERS");
    unsigned hw = std::thread::hardware_concurrency();
    n = e ? (unsigned)atoi(e) : hw < 1 ? 1 : hw > 4 ? 4 : hw;
    if (n < 1) n = 1;
    if (n > 64) n = 64;
  }
  return n;
}

cudaError_t cudaGetDeviceCount (int *n) {
  const char *e = getenv("SIM_DEVICES");
  *n = e ? atoi(e) : 1;
  return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice (int d) {
  return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "cudaSetDevice(%d)", d);
}

cudaError_t cudaGetDevice (int *d) { *d = 0; return cudaSuccess; }

cudaError_t cudaGetDeviceProperties (cudaDeviceProp *p, int d) {
  if (d != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "cudasim (host simulation)");
  p->totalGlobalMem = total_memory();
  p->sharedMemPerBlock = DEFAULT_SMEM;
  p->sharedMemPerBlockOptin = OPTIN_SMEM;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->multiProcessorCount = (int)workers();
  p->major = 9;
  p->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute (int *v, cudaDeviceAttr a, int d) {
  if (d != 0) return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device %d)", d);
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)DEFAULT_SMEM; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)OPTIN_SMEM; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 233472; break;
    case cudaDevAttrMultiProcessorCount: *v = (int)workers(); break;
    case cudaDevAttrWarpSize: *v = 32; break;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute(%d)", (int)a);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize (void) { return sticky; }
cudaError_t cudaStreamSynchronize (cudaStream_t) { return sticky; }


/* events: the live ones, so that a destroyed or made-up handle fails as
   CUDA's invalid resource handle */

struct sim_event { unsigned flags; bool recorded; double ms; };
static std::set<cudaEvent_t> events;

static cudaError_t event_ok (cudaEvent_t e, const char *call) {
  if (sticky) return sticky;
  if (!events.count(e)) return fail(cudaErrorInvalidResourceHandle, "%s: no such event", call);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags (cudaEvent_t *e, unsigned flags) {
  if (sticky) return sticky;
  *e = new sim_event{flags, false, 0};
  events.insert(*e);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy (cudaEvent_t e) {
  if (cudaError_t r = event_ok(e, "cudaEventDestroy")) return r;
  events.erase(e);
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord (cudaEvent_t e, cudaStream_t) {
  if (cudaError_t r = event_ok(e, "cudaEventRecord")) return r;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  e->recorded = true;
  e->ms = (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize (cudaEvent_t e) { return event_ok(e, "cudaEventSynchronize"); }
cudaError_t cudaEventQuery (cudaEvent_t e) { return event_ok(e, "cudaEventQuery"); }

/* CUDA's rule: both recorded, neither made with cudaEventDisableTiming */
cudaError_t cudaEventElapsedTime (float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (cudaError_t r = event_ok(a, "cudaEventElapsedTime")) return r;
  if (cudaError_t r = event_ok(b, "cudaEventElapsedTime")) return r;
  if (!a->recorded || !b->recorded || (a->flags | b->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: an event not recorded or made without timing");
  *ms = (float)(b->ms - a->ms);
  return cudaSuccess;
}


/* device memory: host memory, each allocation registered so that copies,
   cuBLAS and CUB can check their ranges */

static std::map<uintptr_t, size_t> allocs;         /* start -> bytes */
static size_t allocated;

cudaError_t cudaMalloc (void **p, size_t n) {
  *p = NULL;
  if (sticky) return sticky;
  size_t rounded = (n + 255) / 256 * 256;
  if (n == 0) return cudaSuccess;
  if (n > total_memory() - allocated || (*p = aligned_alloc(256, rounded)) == NULL)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): out of memory", n);
  memset(*p, 0xff, n);          /* garbage (NaN, -1) that kernels must overwrite */
  std::lock_guard<std::mutex> g(mu);
  allocs[(uintptr_t)*p] = n;
  allocated += n;
  return cudaSuccess;
}

cudaError_t cudaFree (void *p) {
  if (p == NULL) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = allocs.find((uintptr_t)p);
    if (it != allocs.end()) {
      allocated -= it->second;
      allocs.erase(it);
      free(p);
      return cudaSuccess;
    }
  }
  return fail(cudaErrorInvalidValue, "cudaFree(%p): not an allocation", p);
}

cudaError_t cudaMemGetInfo (size_t *fr, size_t *total) {
  std::lock_guard<std::mutex> g(mu);
  *total = total_memory();
  *fr = *total - allocated;
  return cudaSuccess;
}

cudaError_t sim_check_range (const void *p, size_t n, const char *what) {
  if (n == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it != allocs.begin()) {
      --it;
      if ((uintptr_t)p + n <= it->first + it->second) return cudaSuccess;
    }
  }
  return fail(cudaErrorInvalidValue, "%s: [%p, +%zu) is not inside one device allocation",
              what, p, n);
}

cudaError_t cudaMemcpy (void *dst, const void *src, size_t n, cudaMemcpyKind k) {
  if (sticky) return sticky;
  if (n == 0) return cudaSuccess;
  bool dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  bool sd = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  if (dd) if (cudaError_t e = sim_check_range(dst, n, "cudaMemcpy's destination")) return e;
  if (sd) if (cudaError_t e = sim_check_range(src, n, "cudaMemcpy's source")) return e;
  if (dst == NULL || src == NULL) return fail(cudaErrorInvalidValue, "cudaMemcpy: NULL");
  memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync (void *dst, const void *src, size_t n, cudaMemcpyKind k,
                             cudaStream_t) {
  return cudaMemcpy(dst, src, n, k);
}

cudaError_t cudaMemset (void *p, int v, size_t n) {
  if (sticky) return sticky;
  if (cudaError_t e = sim_check_range(p, n, "cudaMemset")) return e;
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync (void *p, int v, size_t n, cudaStream_t) {
  return cudaMemset(p, v, n);
}

static std::map<const void *, int> func_smem;     /* kernel -> its dynamic-smem limit */

cudaError_t sim_set_func_attr (const void *f, cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (v < 0 || (size_t)v > OPTIN_SMEM)
    return fail(cudaErrorInvalidValue,
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): over %zu", v, OPTIN_SMEM);
  std::lock_guard<std::mutex> g(mu);
  func_smem[f] = v;
  return cudaSuccess;
}

size_t cudasim::smem_limit (const void *f) {
  std::lock_guard<std::mutex> g(mu);
  auto it = func_smem.find(f);
  return it == func_smem.end() ? DEFAULT_SMEM : (size_t)it->second;
}
