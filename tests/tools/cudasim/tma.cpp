/*
** tma.cpp -- the host simulation of Hopper's mbarriers and TMA copies
** (vm/cuda/tma.cuh), and of the driver call that encodes a tensor map
** (cuTensorMapEncodeTiled, reached through cudaGetDriverEntryPointByVersion).
**
** A block's mbarriers live here, keyed by their shared address: an
** expected count of arrivals, the arrivals still due, the bytes still
** expected (expect_tx adds, a landed copy takes off), and the phases
** completed.  A phase completes when the arrivals are in and the bytes
** expected are 0.  A wait for parity p returns once the count of phases
** completed has the other parity (the PTX ISA's test), and spins
** (scheduler.cpp) until then, so that a wait nothing will complete is a
** deadlock.  A plain arrival (a release, no bytes expected) steps aside
** for the other threads, so that what it lets go (a producer refilling a
** stage) can run before the arriving thread's next step.
**
** A TMA copy lands (its box written into shared memory, its bytes taken
** off its barrier) when issued with SIM_TMA=early, and with SIM_TMA=late
** (the default) only when a thread waits on its barrier: the latest the
** GPU may land it.  Early catches a stage overwritten while its readers
** still use it; late a stage read before its copy was waited for.
**
** Faults: a wait, arrival or copy on an address where no barrier was
** initialised, more arrivals in a phase than its count, a copy's
** destination not 128-byte aligned or outside the dynamic shared memory,
** its source (where inside the tensor) outside a device allocation, a
** map not encoded here, a copy of another rank than the map's; at the
** block's end, copies whose barrier was never waited for.  The encoding
** checks the documented limits and takes the forms the kernels use: no
** interleave, element strides 1, no swizzle or the 128-byte swizzle of
** 128-byte box rows (the bytes' 16-byte chunk XORed with address bits
** 7-9, as wgmma reads them, products.cpp), zeros outside the tensor.
*/
#include "internal.h"

#include <map>

namespace {

/* what a CUtensorMap's 128 bytes hold here */
struct tmap {
  uint32_t magic, esize, rank, swizzle;
  const unsigned char *base;
  uint64_t dim[5], stride[5];           /* stride[0] = esize, all in bytes */
  uint32_t box[5];
};
static_assert(sizeof(tmap) <= sizeof(CUtensorMap), "a tensor map's 128 bytes");
const uint32_t MAGIC = 0x544d4150;

struct copy { uint32_t dst; tmap m; int c[5]; };
struct mbar {
  unsigned count, due, phase;
  int64_t tx;
  std::vector<copy> queued;             /* SIM_TMA=late: not landed yet */
};

thread_local std::map<uint32_t, mbar> bars;

bool early (void) {
  static int e = -1;
  if (e < 0) {
    const char *v = getenv("SIM_TMA");
    e = v && !strcmp(v, "early");
  }
  return e;
}

mbar *find (uint32_t bar, const char *what) {
  auto it = bars.find(bar);
  if (it != bars.end()) return &it->second;
  char why[160];
  snprintf(why, sizeof why, "%s: no mbarrier initialised at shared address 0x%x", what, bar);
  sim_fault(why);
  return NULL;
}

void complete (mbar *b) {
  if (b->due == 0 && b->tx == 0) {
    b->phase++;
    b->due = b->count;
  }
}

/* the box into shared memory, zeros outside the tensor; its bytes off b */
bool land (const copy &cp, mbar *b) {
  const tmap &m = cp.m;
  uint64_t rows = 1;
  for (uint32_t k = 1; k < m.rank; k++) rows *= m.box[k];
  const uint32_t rowbytes = m.box[0] * m.esize;
  for (uint64_t r = 0; r < rows; r++) {
    bool in = true;
    const unsigned char *src = m.base;
    uint64_t rest = r;
    for (uint32_t k = 1; k < m.rank; k++) {
      int64_t x = (int64_t)cp.c[k] + (int64_t)(rest % m.box[k]);
      rest /= m.box[k];
      in = in && x >= 0 && (uint64_t)x < m.dim[k];
      src += x * (int64_t)m.stride[k];
    }
    int64_t x0 = cp.c[0], lo = x0 < 0 ? -x0 : 0;
    int64_t hi = (int64_t)m.dim[0] - x0 < (int64_t)m.box[0] ? (int64_t)m.dim[0] - x0 : m.box[0];
    if (in && hi > lo && sim_check_range(src + (x0 + lo) * m.esize, (hi - lo) * m.esize,
                                          "cp.async.bulk.tensor: source") != cudaSuccess) {
      sim_fault("cp.async.bulk.tensor: a row of the box inside the tensor is outside a "
                "device allocation");
      return false;
    }
    for (uint32_t j = 0; j < m.box[0]; j++) {
      uint32_t a = cp.dst + (uint32_t)r * rowbytes + j * m.esize;
      if (m.swizzle) a ^= (a >> 7 & 7) << 4;
      unsigned char *d = sim_smem_at(a, m.esize, "cp.async.bulk.tensor: destination");
      if (d == NULL) return false;
      if (in && (int64_t)j >= lo && (int64_t)j < hi)
        memcpy(d, src + (x0 + j) * m.esize, m.esize);
      else
        memset(d, 0, m.esize);
    }
  }
  b->tx -= (int64_t)(rows * rowbytes);
  complete(b);
  return true;
}

}

void sim_tma_begin_block (void) { bars.clear(); }

const char *sim_tma_end_block (void) {
  for (auto &kv : bars)
    if (!kv.second.queued.empty())
      return "ended with TMA copies whose mbarrier was never waited for";
  return NULL;
}

void sim_mbar_init (uint32_t bar, unsigned count) {
  if (bar % 8 != 0) {
    sim_fault("mbarrier.init: an address not 8-byte aligned");
    return;
  }
  if (!sim_smem_at(bar, 8, "mbarrier.init")) return;
  if (count == 0 || count >= 1u << 20) {
    sim_fault("mbarrier.init: a count of 0 or over 2^20 - 1");
    return;
  }
  auto it = bars.find(bar);
  if (it != bars.end() && !it->second.queued.empty()) {
    sim_fault("mbarrier.init: a barrier with TMA copies in flight");
    return;
  }
  bars[bar] = mbar{count, count, 0, 0, {}};
}

void sim_mbar_arrive (uint32_t bar, uint32_t tx) {
  mbar *b = find(bar, "mbarrier.arrive");
  if (b == NULL) return;
  if (b->due == 0) {
    sim_fault("mbarrier.arrive: more arrivals in a phase than the barrier's count");
    return;
  }
  b->tx += tx;
  b->due--;
  complete(b);
  if (tx == 0) sim_reschedule();    /* what a release lets go may run before the next step */
}

void sim_mbar_wait (uint32_t bar, unsigned parity) {
  if (parity > 1) {
    sim_fault("mbarrier.try_wait.parity: a parity other than 0 or 1");
    return;
  }
  sim_wait_until([&]() {
    mbar *b = find(bar, "mbarrier.try_wait.parity");
    if (b == NULL) return true;
    std::vector<copy> q = std::move(b->queued);
    b->queued.clear();
    for (const copy &cp : q)
      if (!land(cp, b)) return true;
    return (b->phase & 1) != parity;
  });
}

void sim_tma_load (uint32_t dst, const void *map, const int *c, int n, uint32_t bar) {
  const tmap *m = (const tmap *)map;
  if (m->magic != MAGIC) {
    sim_fault("cp.async.bulk.tensor: not a tensor map from cuTensorMapEncodeTiled");
    return;
  }
  if ((int)m->rank != n) {
    sim_fault("cp.async.bulk.tensor: coordinates of another rank than the map's");
    return;
  }
  if (dst % 128 != 0) {
    sim_fault("cp.async.bulk.tensor: a destination not 128-byte aligned");
    return;
  }
  mbar *b = find(bar, "cp.async.bulk.tensor");
  if (b == NULL) return;
  copy cp{dst, *m, {0, 0, 0, 0, 0}};
  for (int k = 0; k < n; k++) cp.c[k] = c[k];
  if (early()) land(cp, b);
  else b->queued.push_back(cp);
}


/* the driver's encoding, as cuda.h documents its limits */

static CUresult refuse (const char *why) {
  fprintf(stderr, "cudasim: cuTensorMapEncodeTiled: %s\n", why);
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult encode_tiled (CUtensorMap *t, CUtensorMapDataType dt, cuuint32_t rank,
                              void *addr, const cuuint64_t *dim, const cuuint64_t *strides,
                              const cuuint32_t *box, const cuuint32_t *estr,
                              CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                              CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)l2;
  static const uint32_t sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if ((uintptr_t)t % 64) return refuse("a map not 64-byte aligned");
  if ((unsigned)dt >= sizeof sizes / sizeof *sizes) return refuse("a data type not simulated");
  if (rank < 1 || rank > 5) return refuse("a rank outside 1 .. 5");
  if ((uintptr_t)addr % 16) return refuse("a global address not 16-byte aligned");
  if (il != CU_TENSOR_MAP_INTERLEAVE_NONE) return refuse("an interleave (not simulated)");
  if (oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) return refuse("a NaN fill (not simulated)");
  tmap m;
  memset(&m, 0, sizeof m);
  m.magic = MAGIC;
  m.esize = sizes[dt];
  m.rank = rank;
  m.base = (const unsigned char *)addr;
  m.stride[0] = m.esize;
  for (uint32_t k = 0; k < rank; k++) {
    if (dim[k] == 0 || dim[k] > (1ull << 32)) return refuse("a dimension of 0 or over 2^32");
    if (k > 0 && (strides[k - 1] % 16 || strides[k - 1] >= 1ull << 40))
      return refuse("a stride not a multiple of 16 bytes, or of 2^40 or more");
    if (box[k] == 0 || box[k] > 256) return refuse("a box dimension of 0 or over 256");
    if (estr[k] != 1) return refuse("an element stride other than 1 (not simulated)");
    m.dim[k] = dim[k];
    if (k > 0) m.stride[k] = strides[k - 1];
    m.box[k] = box[k];
  }
  if (box[0] * m.esize % 16) return refuse("a box's inner bytes not a multiple of 16");
  if (sw == CU_TENSOR_MAP_SWIZZLE_128B) {
    if (box[0] * m.esize != 128)
      return refuse("the 128-byte swizzle of inner box rows other than 128 bytes (not simulated)");
    m.swizzle = 1;
  } else if (sw != CU_TENSOR_MAP_SWIZZLE_NONE)
    return refuse("a 32- or 64-byte swizzle (not simulated)");
  memset(t, 0, sizeof *t);
  memcpy(t, &m, sizeof m);
  return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion (const char *symbol, void **fn, unsigned version,
                                              unsigned long long flags,
                                              cudaDriverEntryPointQueryResult *status) {
  (void)version, (void)flags;
  bool found = !strcmp(symbol, "cuTensorMapEncodeTiled");
  *fn = found ? (void *)encode_tiled : NULL;
  if (status) *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return found ? cudaSuccess : cudaErrorInvalidValue;
}
